// gguf_writer.cpp: the GGUF writer (see gguf_writer.h), the reader's layout written back.
#include "gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "error.h"

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kVersion = 3;

/// Bytes of one scalar of a fixed-size metadata type (0 for STRING and ARRAY).
size_t scalar_bytes(GGUFType type) {
  switch (type) {
    case GGUFType::UINT8:
    case GGUFType::INT8:
    case GGUFType::BOOL:
      return 1;
    case GGUFType::UINT16:
    case GGUFType::INT16:
      return 2;
    case GGUFType::UINT32:
    case GGUFType::INT32:
    case GGUFType::FLOAT32:
      return 4;
    case GGUFType::UINT64:
    case GGUFType::INT64:
    case GGUFType::FLOAT64:
      return 8;
    default:
      return 0;
  }
}

/// Appends the little-endian bytes of one scalar: integers (and bools) from i, floats from f.
void append_scalar(std::string& out, GGUFType type, int64_t i, double f) {
  unsigned char bytes[8];
  const size_t n = scalar_bytes(type);
  if (type == GGUFType::FLOAT32) {
    const float v = static_cast<float>(f);  // it was read from a float: exact
    std::memcpy(bytes, &v, sizeof v);
  } else if (type == GGUFType::FLOAT64) {
    std::memcpy(bytes, &f, sizeof f);
  } else {
    const uint64_t v = static_cast<uint64_t>(i);
    for (size_t b = 0; b < n; ++b) bytes[b] = static_cast<unsigned char>(v >> (8 * b));
  }
  out.append(reinterpret_cast<const char*>(bytes), n);
}

void append_u32(std::string& out, uint32_t v) {
  append_scalar(out, GGUFType::UINT32, v, 0);
}
void append_u64(std::string& out, uint64_t v) {
  append_scalar(out, GGUFType::UINT64, static_cast<int64_t>(v), 0);
}
void append_string(std::string& out, const std::string& s) {
  append_u64(out, s.size());
  out += s;
}

void append_value(std::string& out, const std::string& key, const GGUFValue& v) {
  if (v.type == GGUFType::STRING) return append_string(out, v.s);
  if (v.type != GGUFType::ARRAY) {
    check(scalar_bytes(v.type) > 0, "GGUF writer: key '", key, "' has an unknown type");
    return append_scalar(out, v.type, v.type == GGUFType::UINT64 ? int64_t(v.u) : v.i, v.f);
  }
  append_u32(out, static_cast<uint32_t>(v.array_type));
  append_u64(out, v.array_size());
  if (v.array_type == GGUFType::STRING) {
    for (const std::string& s : v.strings) append_string(out, s);
  } else if (v.array_type == GGUFType::FLOAT32 || v.array_type == GGUFType::FLOAT64) {
    for (double f : v.floats) append_scalar(out, v.array_type, 0, f);
  } else {
    check(scalar_bytes(v.array_type) > 0, "GGUF writer: array '", key, "' has an unknown type");
    for (int64_t i : v.ints) append_scalar(out, v.array_type, i, 0);
  }
}

}  // namespace

GGUFWriter::GGUFWriter(const std::string& path, size_t alignment)
    : path_(path), alignment_(alignment) {
  check(alignment > 0 && (alignment & (alignment - 1)) == 0, path, ": alignment ", alignment,
        " is not a power of two");
  file_ = std::fopen(path.c_str(), "wb");
  check(file_ != nullptr, "cannot create '", path, "': ", std::strerror(errno));
}

GGUFWriter::~GGUFWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void GGUFWriter::add_metadata(const std::string& key, const GGUFValue& value) {
  check(!header_written_, path_, ": metadata added after the header");
  metadata_[key] = value;
}

void GGUFWriter::set_u32(const std::string& key, uint32_t value) {
  GGUFValue v;
  v.type = GGUFType::UINT32;
  v.i = value;
  v.u = value;
  add_metadata(key, v);
}

void GGUFWriter::add_tensor(const std::string& name, GGMLType type,
                            const std::vector<int64_t>& ne) {
  check(!header_written_, path_, ": tensor '", name, "' declared after the header");
  const GGMLTypeLayout* layout = ggml_type_layout(type);
  check(layout != nullptr, path_, ": tensor '", name, "' has unknown type ", ggml_type_name(type));
  check(!ne.empty() && ne[0] % layout->block_size == 0, path_, ": tensor '", name,
        "': a row is not a whole number of ", ggml_type_name(type), " blocks");
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  const size_t n_bytes = static_cast<size_t>(n / layout->block_size) * layout->block_bytes;
  tensors_.push_back({name, type, ne, data_bytes_, n_bytes});
  data_bytes_ += (n_bytes + alignment_ - 1) / alignment_ * alignment_;
}

void GGUFWriter::write_header() {
  std::string h(kMagic, sizeof kMagic);
  append_u32(h, kVersion);
  append_u64(h, tensors_.size());
  append_u64(h, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    append_string(h, key);
    append_u32(h, static_cast<uint32_t>(value.type));
    append_value(h, key, value);
  }
  for (const Declared& t : tensors_) {
    append_string(h, t.name);
    append_u32(h, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) append_u64(h, static_cast<uint64_t>(d));
    append_u32(h, static_cast<uint32_t>(t.type));
    append_u64(h, t.offset);
  }
  write(h.data(), h.size());
  pad();
  header_written_ = true;
}

void GGUFWriter::write_tensor(const std::string& name, const void* data, size_t n_bytes) {
  check(header_written_ && next_ < tensors_.size() && tensors_[next_].name == name, path_,
        ": tensor '", name, "' written out of order");
  check(n_bytes == tensors_[next_].n_bytes, path_, ": tensor '", name, "' has ", n_bytes,
        " bytes, declared ", tensors_[next_].n_bytes);
  write(data, n_bytes);
  pad();
  ++next_;
}

void GGUFWriter::finish() {
  check(next_ == tensors_.size(), path_, ": ", tensors_.size() - next_, " tensors not written");
  const int closed = std::fclose(file_);
  file_ = nullptr;
  check(closed == 0, "cannot write '", path_, "': ", std::strerror(errno));
}

void GGUFWriter::write(const void* data, size_t n) {
  check(std::fwrite(data, 1, n, file_) == n, "cannot write '", path_, "': ", std::strerror(errno));
  position_ += n;
}

void GGUFWriter::pad() {
  static constexpr char kZeros[64] = {};
  while (position_ % alignment_ != 0) {
    write(kZeros, std::min<uint64_t>(sizeof kZeros, alignment_ - position_ % alignment_));
  }
}
