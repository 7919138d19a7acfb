// gguf.h: a validating, mmap-based reader for GGUF files (versions 2 and 3).
//
// Layout of a GGUF file (all little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x (string key, u32 value_type, value)
//   n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset)
//   padding to general.alignment (default 32) | tensor data (each offset relative to here)
// Strings are u64 length + bytes (no terminator). Arrays are u32 element type + u64 count +
// elements. Everything is checked against the file size before use; a bad file throws Error naming
// the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

/// ggml tensor types, with ggml's numbering (the values stored in the file).
enum class GGMLType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

/// GGUF metadata value types, with the file's numbering.
enum class GGUFType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

/// One metadata value. Scalars live in the matching field; arrays in the vector of their kind
/// (integers and bools widen to int64, floats to double, strings stay strings).
struct GGUFValue {
  GGUFType type = GGUFType::UINT8;
  GGUFType array_type = GGUFType::UINT8;  ///< element type when type == ARRAY
  int64_t i = 0;                          ///< any integer or bool scalar
  uint64_t u = 0;                         ///< the same integer, unsigned view (for UINT64)
  double f = 0;                           ///< FLOAT32 / FLOAT64 scalar
  std::string s;                          ///< STRING scalar
  std::vector<int64_t> ints;              ///< integer/bool arrays
  std::vector<double> floats;             ///< float arrays
  std::vector<std::string> strings;       ///< string arrays
  uint64_t array_size() const;
};

/// One tensor: its shape in ggml order (ne[0] is the contiguous, innermost dimension).
struct TensorInfo {
  std::string name;
  GGMLType type = GGMLType::F32;
  std::vector<int64_t> ne;  ///< 1 to 4 dimensions, ne[0] innermost
  uint64_t offset = 0;      ///< from the start of the data section
  const void* data = nullptr;
  size_t nbytes = 0;
  int64_t n_elements() const;
};

/// A GGUF file, memory-mapped read-only. Tensor data points into the mapping.
class GGUFFile {
 public:
  /// Opens and validates path; throws Error("<path>: ...") on any problem.
  explicit GGUFFile(const std::string& path);
  ~GGUFFile();
  GGUFFile(const GGUFFile&) = delete;
  GGUFFile& operator=(const GGUFFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }

  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  const GGUFValue* find(const std::string& key) const;
  const std::map<std::string, GGUFValue>& metadata() const { return metadata_; }

  // Typed getters: throw Error naming the file and key when missing or of the wrong kind.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;   ///< any integer type
  double get_float(const std::string& key) const;  ///< float types (integers accepted too)
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;

  // Same, with a default when the key is absent (still an Error when present with the wrong kind).
  std::string get_string_or(const std::string& key, const std::string& fallback) const;
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float_or(const std::string& key, double fallback) const;
  bool get_bool_or(const std::string& key, bool fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;  ///< nullptr when absent
  const TensorInfo& tensor(const std::string& name) const;       ///< throws when absent

  /// Drops the whole pages of [data, data + bytes) from this process's memory: for bytes that a
  /// stage has copied (packed) and will not read again. The mapping stays valid; a later read
  /// maps the pages again from the file. Throws unless the range lies in this file's mapping.
  void release(const void* data, size_t bytes) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t size_ = 0;
  void* map_ = nullptr;
  std::map<std::string, GGUFValue> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

/// The name ggml uses for a type ("q4_0", "f32", ...), or "type<N>" when unknown.
std::string ggml_type_name(GGMLType type);

/// ggml's storage layout of a type: block_size weights take block_bytes bytes.
struct GGMLTypeLayout {
  int block_size = 1;
  size_t block_bytes = 0;
};
/// The layout of any type in GGMLType (computable or not), or nullptr for an unknown number.
const GGMLTypeLayout* ggml_type_layout(GGMLType type);
