// gguf_builder.h: builds GGUF files byte by byte for tests (header-only, little-endian host).
//
//   GGUFBuilder b;
//   b.add_string("general.architecture", "llama");
//   b.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
//   b.add_tensor("x.weight", GGMLType::F32, {4, 2}, GGUFBuilder::f32_bytes({...8 floats...}));
//   std::string path = b.write_temp("tiny.gguf");  // then GGUFFile f(path);
//
// Tensor data is padded to the alignment (32, or set_alignment()). The set_* overrides (magic,
// version, counts, offsets) exist to write deliberately malformed files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf.h"

class GGUFBuilder {
 public:
  // ---- metadata ----
  void add_u8(const std::string& key, uint8_t v) { scalar(key, GGUFType::UINT8, v); }
  void add_i8(const std::string& key, int8_t v) { scalar(key, GGUFType::INT8, v); }
  void add_u16(const std::string& key, uint16_t v) { scalar(key, GGUFType::UINT16, v); }
  void add_i16(const std::string& key, int16_t v) { scalar(key, GGUFType::INT16, v); }
  void add_u32(const std::string& key, uint32_t v) { scalar(key, GGUFType::UINT32, v); }
  void add_i32(const std::string& key, int32_t v) { scalar(key, GGUFType::INT32, v); }
  void add_u64(const std::string& key, uint64_t v) { scalar(key, GGUFType::UINT64, v); }
  void add_i64(const std::string& key, int64_t v) { scalar(key, GGUFType::INT64, v); }
  void add_f32(const std::string& key, float v) { scalar(key, GGUFType::FLOAT32, v); }
  void add_f64(const std::string& key, double v) { scalar(key, GGUFType::FLOAT64, v); }
  void add_bool(const std::string& key, bool v) { scalar(key, GGUFType::BOOL, uint8_t(v)); }
  void add_string(const std::string& key, const std::string& v) {
    begin_kv(key, GGUFType::STRING);
    put_string(kv_, v);
    ++n_kv_;
  }

  void add_string_array(const std::string& key, const std::vector<std::string>& v) {
    begin_array(key, GGUFType::STRING, v.size());
    for (const std::string& s : v) put_string(kv_, s);
  }
  void add_f32_array(const std::string& key, const std::vector<float>& v) {
    begin_array(key, GGUFType::FLOAT32, v.size());
    for (float x : v) put(kv_, x);
  }
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
    begin_array(key, GGUFType::INT32, v.size());
    for (int32_t x : v) put(kv_, x);
  }
  /// Any array: elements already encoded (for other element types and malformed arrays).
  void add_raw_array(const std::string& key, GGUFType element, uint64_t count,
                     const std::string& encoded) {
    begin_array(key, element, count);
    kv_ += encoded;
  }
  /// A key with an arbitrary type number and raw value bytes.
  void add_raw_kv(const std::string& key, uint32_t type, const std::string& value_bytes) {
    put_string(kv_, key);
    put(kv_, type);
    kv_ += value_bytes;
    ++n_kv_;
  }

  /// Writes general.alignment and pads tensor data to it.
  void set_alignment(uint32_t alignment) {
    add_u32("general.alignment", alignment);
    alignment_ = alignment;
  }

  // ---- tensors ----
  /// Adds a tensor (ne in ggml order, ne[0] innermost); returns its index. raw is not checked.
  size_t add_tensor(const std::string& name, GGMLType type, const std::vector<int64_t>& ne,
                    const std::string& raw) {
    tensors_.push_back({name, static_cast<uint32_t>(type), ne, raw, std::nullopt});
    return tensors_.size() - 1;
  }
  void set_tensor_offset(size_t index, uint64_t offset) { tensors_.at(index).offset = offset; }
  void set_tensor_type(size_t index, uint32_t type) { tensors_.at(index).type = type; }

  // ---- malformed-file overrides ----
  void set_magic(const std::string& magic) { magic_ = magic; }
  void set_version(uint32_t version) { version_ = version; }
  void set_n_tensors(uint64_t n) { n_tensors_override_ = n; }
  void set_n_kv(uint64_t n) { n_kv_override_ = n; }

  // ---- output ----
  std::string bytes() const {
    std::string out = magic_;
    put(out, version_);
    put(out, n_tensors_override_.value_or(tensors_.size()));
    put(out, n_kv_override_.value_or(n_kv_));
    out += kv_;
    std::vector<uint64_t> offsets;
    uint64_t data_size = 0;
    for (const Tensor& t : tensors_) {
      offsets.push_back(t.offset.value_or(data_size));
      data_size = padded(data_size + t.raw.size());
    }
    for (size_t k = 0; k < tensors_.size(); ++k) {
      const Tensor& t = tensors_[k];
      put_string(out, t.name);
      put(out, static_cast<uint32_t>(t.ne.size()));
      for (int64_t d : t.ne) put(out, d);
      put(out, t.type);
      put(out, offsets[k]);
    }
    if (tensors_.empty()) return out;
    out.resize(padded(out.size()), '\0');
    for (const Tensor& t : tensors_) {
      out += t.raw;
      out.resize(out.size() + (padded(t.raw.size()) - t.raw.size()), '\0');
    }
    return out;
  }

  /// Writes bytes() to a per-process file in the temp directory and returns its path.
  std::string write_temp(const std::string& name) const { return write_bytes(bytes(), name); }

  static std::string write_bytes(const std::string& data, const std::string& name) {
    const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                       ("gguf_test_" + std::to_string(getpid()) + "_" + name);
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!file) throw std::runtime_error("cannot write " + path.string());
    return path.string();
  }

  // ---- encoding helpers ----
  template <class T>
  static void put(std::string& out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  static void put_string(std::string& out, const std::string& s) {
    put(out, static_cast<uint64_t>(s.size()));
    out += s;
  }
  static std::string f32_bytes(const std::vector<float>& v) {
    std::string out;
    for (float x : v) put(out, x);
    return out;
  }
  static std::string u16_bytes(const std::vector<uint16_t>& v) {
    std::string out;
    for (uint16_t x : v) put(out, x);
    return out;
  }

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::string raw;
    std::optional<uint64_t> offset;
  };

  template <class T>
  void scalar(const std::string& key, GGUFType type, T v) {
    begin_kv(key, type);
    put(kv_, v);
    ++n_kv_;
  }
  void begin_kv(const std::string& key, GGUFType type) {
    put_string(kv_, key);
    put(kv_, static_cast<uint32_t>(type));
  }
  void begin_array(const std::string& key, GGUFType element, uint64_t count) {
    begin_kv(key, GGUFType::ARRAY);
    put(kv_, static_cast<uint32_t>(element));
    put(kv_, count);
    ++n_kv_;
  }
  uint64_t padded(uint64_t n) const { return (n + alignment_ - 1) / alignment_ * alignment_; }

  std::string magic_ = "GGUF";
  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  std::string kv_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
  std::optional<uint64_t> n_tensors_override_, n_kv_override_;
};
