// gguf_writer.h: writes a GGUF v3 file (the layout in gguf.h), tensor by tensor.
//
// The header holds every tensor's type, shape and offset, so all tensors are declared first;
// then write_header() writes it, and each tensor's bytes follow in declaration order through
// write_tensor(), padded to the alignment. A whole model never has to be in memory at once.
//
//   GGUFWriter w("out.gguf", 32);
//   for (auto& [key, value] : in.metadata()) w.add_metadata(key, value);
//   w.add_tensor("x.weight", GGMLType::Q4_K, {4096, 4096});
//   w.write_header();
//   w.write_tensor("x.weight", bytes, n_bytes);
//   w.finish();
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gguf.h"

class GGUFWriter {
 public:
  /// Opens path for writing (an Error names it when it cannot be created).
  GGUFWriter(const std::string& path, size_t alignment);
  ~GGUFWriter();
  GGUFWriter(const GGUFWriter&) = delete;
  GGUFWriter& operator=(const GGUFWriter&) = delete;

  /// Adds or replaces a key (written in key order).
  void add_metadata(const std::string& key, const GGUFValue& value);
  void set_u32(const std::string& key, uint32_t value);
  /// Declares a tensor; its size follows from type and shape (whole blocks along ne[0]).
  void add_tensor(const std::string& name, GGMLType type, const std::vector<int64_t>& ne);
  void write_header();
  /// The next declared tensor's bytes; name and size must match the declaration.
  void write_tensor(const std::string& name, const void* data, size_t n_bytes);
  /// Checks every tensor was written and closes the file.
  void finish();

 private:
  struct Declared {
    std::string name;
    GGMLType type;
    std::vector<int64_t> ne;
    uint64_t offset;
    size_t n_bytes;
  };
  void write(const void* data, size_t n);
  void pad();

  std::string path_;
  size_t alignment_;
  std::FILE* file_ = nullptr;
  uint64_t position_ = 0;
  std::map<std::string, GGUFValue> metadata_;
  std::vector<Declared> tensors_;
  uint64_t data_bytes_ = 0;
  size_t next_ = 0;  ///< index of the next tensor to write
  bool header_written_ = false;
};
