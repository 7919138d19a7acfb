// gguf.cpp: the GGUF reader. The file is mapped read-only and walked with a bounds-checked cursor;
// every count and length is compared with the bytes left before anything is allocated.
#include "gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "error.h"

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kMinVersion = 2;  // version 1 used 32-bit counts; llama.cpp dropped it too
constexpr uint32_t kMaxVersion = 3;  // version 3 only added big-endian files, which we refuse
constexpr size_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS
const char* const kAlignmentKey = "general.alignment";

// The smallest encodings, used to bound counts by the bytes left in the file.
constexpr uint64_t kStringLengthBytes = 8;
constexpr uint64_t kMinKVBytes = kStringLengthBytes + 4 + 1;                  // key, type, u8 value
constexpr uint64_t kMinTensorInfoBytes = kStringLengthBytes + 4 + 8 + 4 + 8;  // name..offset, 1-D

// Bytes one element of a fixed-size metadata type takes; 0 for STRING and ARRAY.
uint64_t fixed_size(GGUFType type) {
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
    case GGUFType::STRING:
    case GGUFType::ARRAY:
      return 0;
  }
  return 0;
}

bool is_known(GGUFType type) {
  return static_cast<uint32_t>(type) <= 12;
}

bool is_integer(GGUFType type) {
  switch (type) {
    case GGUFType::UINT8:
    case GGUFType::INT8:
    case GGUFType::UINT16:
    case GGUFType::INT16:
    case GGUFType::UINT32:
    case GGUFType::INT32:
    case GGUFType::UINT64:
    case GGUFType::INT64:
      return true;
    default:
      return false;
  }
}

bool is_float(GGUFType type) {
  return type == GGUFType::FLOAT32 || type == GGUFType::FLOAT64;
}

const char* gguf_type_name(GGUFType type) {
  static constexpr const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  return is_known(type) ? kNames[static_cast<uint32_t>(type)] : "unknown";
}

std::string describe(const GGUFValue& value) {
  if (value.type != GGUFType::ARRAY) return gguf_type_name(value.type);
  return std::string("array of ") + gguf_type_name(value.array_type);
}

bool is_power_of_two(uint64_t x) {
  return x != 0 && (x & (x - 1)) == 0;
}

// A cursor over the mapped bytes; every read checks that the bytes are there.
class Reader {
 public:
  Reader(const std::string& path, const uint8_t* data, size_t size)
      : path_(path), data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  const uint8_t* take(uint64_t n, const std::string& what) {
    check(n <= left(), path_, ": truncated while reading ", what, " at byte ", pos_, " (need ", n,
          " bytes, ", left(), " left)");
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  template <class T>
  T read(const std::string& what) {
    T value;
    std::memcpy(&value, take(sizeof(T), what), sizeof(T));  // little-endian host assumed
    return value;
  }

  std::string read_string(const std::string& what) {
    const uint64_t n = read<uint64_t>(what + " length");
    check(n <= left(), path_, ": ", what, " length ", n, " exceeds the ", left(),
          " bytes left in the file");
    const uint8_t* p = take(n, what);
    return std::string(reinterpret_cast<const char*>(p), n);
  }

  // Reads a count of items of at least min_bytes each, refusing one that cannot fit.
  uint64_t read_count(const std::string& what, uint64_t min_bytes) {
    const uint64_t n = read<uint64_t>(what);
    check(n <= left() / min_bytes, path_, ": ", what, " ", n, " cannot fit in the ", left(),
          " bytes left in the file");
    return n;
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Reads one integer of the given type, widened to int64 (UINT64 above INT64_MAX is kept in u).
void read_integer(Reader& r, GGUFType type, const std::string& what, int64_t* i, uint64_t* u) {
  switch (type) {
    case GGUFType::UINT8:
      *i = r.read<uint8_t>(what);
      break;
    case GGUFType::INT8:
      *i = r.read<int8_t>(what);
      break;
    case GGUFType::UINT16:
      *i = r.read<uint16_t>(what);
      break;
    case GGUFType::INT16:
      *i = r.read<int16_t>(what);
      break;
    case GGUFType::UINT32:
      *i = r.read<uint32_t>(what);
      break;
    case GGUFType::INT32:
      *i = r.read<int32_t>(what);
      break;
    case GGUFType::INT64:
      *i = r.read<int64_t>(what);
      break;
    case GGUFType::UINT64:
      *u = r.read<uint64_t>(what);
      *i = static_cast<int64_t>(*u);
      return;
    default:
      fail("internal: read_integer on a non-integer type");
  }
  *u = static_cast<uint64_t>(*i);
}

double read_float(Reader& r, GGUFType type, const std::string& what) {
  if (type == GGUFType::FLOAT32) return r.read<float>(what);
  return r.read<double>(what);
}

bool read_bool(Reader& r, const std::string& path, const std::string& what) {
  const uint8_t b = r.read<uint8_t>(what);
  check(b <= 1, path, ": ", what, " is a bool with byte value ", int(b), " (expected 0 or 1)");
  return b == 1;
}

GGUFType read_type(Reader& r, const std::string& path, const std::string& what) {
  const uint32_t t = r.read<uint32_t>(what + " type");
  check(is_known(static_cast<GGUFType>(t)), path, ": ", what, " has unknown value type ", t);
  return static_cast<GGUFType>(t);
}

void read_array(Reader& r, const std::string& path, const std::string& what, GGUFValue& v) {
  v.array_type = read_type(r, path, what + " element");
  check(v.array_type != GGUFType::ARRAY, path, ": ", what,
        " is an array of arrays, which is not supported");
  const uint64_t fixed = fixed_size(v.array_type);
  const uint64_t n = r.read_count(what + " array length", fixed ? fixed : kStringLengthBytes);
  if (v.array_type == GGUFType::STRING) {
    v.strings.reserve(n);
    for (uint64_t k = 0; k < n; ++k) v.strings.push_back(r.read_string(what + " element"));
  } else if (is_float(v.array_type)) {
    v.floats.reserve(n);
    for (uint64_t k = 0; k < n; ++k) v.floats.push_back(read_float(r, v.array_type, what));
  } else if (v.array_type == GGUFType::BOOL) {
    v.ints.reserve(n);
    for (uint64_t k = 0; k < n; ++k) v.ints.push_back(read_bool(r, path, what + " element"));
  } else {
    v.ints.reserve(n);
    for (uint64_t k = 0; k < n; ++k) {
      int64_t i = 0;
      uint64_t u = 0;
      read_integer(r, v.array_type, what, &i, &u);
      check(v.array_type != GGUFType::UINT64 || u <= uint64_t(std::numeric_limits<int64_t>::max()),
            path, ": ", what, " element ", k, " (", u, ") does not fit in int64");
      v.ints.push_back(i);
    }
  }
}

GGUFValue read_value(Reader& r, const std::string& path, const std::string& key) {
  const std::string what = "key '" + key + "'";
  GGUFValue v;
  v.type = read_type(r, path, what);
  if (v.type == GGUFType::STRING) {
    v.s = r.read_string(what + " value");
  } else if (v.type == GGUFType::ARRAY) {
    read_array(r, path, what, v);
  } else if (is_float(v.type)) {
    v.f = read_float(r, v.type, what + " value");
  } else if (v.type == GGUFType::BOOL) {
    v.i = read_bool(r, path, what + " value");
    v.u = static_cast<uint64_t>(v.i);
  } else {
    read_integer(r, v.type, what + " value", &v.i, &v.u);
  }
  return v;
}

// Multiplies two non-negative numbers, refusing an overflow of int64.
int64_t checked_mul(int64_t a, int64_t b, const std::string& path, const std::string& what) {
  check(b == 0 || a <= std::numeric_limits<int64_t>::max() / b, path, ": ", what,
        " overflows 64 bits");
  return a * b;
}

TensorInfo read_tensor_info(Reader& r, const std::string& path) {
  TensorInfo t;
  t.name = r.read_string("tensor name");
  const std::string what = "tensor '" + t.name + "'";
  const uint32_t n_dims = r.read<uint32_t>(what + " n_dims");
  check(n_dims >= 1 && n_dims <= kMaxDims, path, ": ", what, " has ", n_dims,
        " dimensions (expected 1 to ", kMaxDims, ")");
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const int64_t ne = r.read<int64_t>(what + " shape");
    check(ne > 0, path, ": ", what, " has ne[", d, "] = ", ne, " (must be positive)");
    n_elements = checked_mul(n_elements, ne, path, what + " element count");
    t.ne.push_back(ne);
  }
  const uint32_t type = r.read<uint32_t>(what + " type");
  t.type = static_cast<GGMLType>(type);
  const GGMLTypeLayout* layout = ggml_type_layout(t.type);
  check(layout != nullptr, path, ": ", what, " has unknown ggml type ", type);
  check(t.ne[0] % layout->block_size == 0, path, ": ", what, " has ne[0] = ", t.ne[0],
        ", not a multiple of the ", ggml_type_name(t.type), " block size ", layout->block_size);
  const int64_t rows = n_elements / t.ne[0];
  const int64_t row_bytes = checked_mul(t.ne[0] / layout->block_size, int64_t(layout->block_bytes),
                                        path, what + " byte size");
  t.nbytes = static_cast<size_t>(checked_mul(row_bytes, rows, path, what + " byte size"));
  t.offset = r.read<uint64_t>(what + " offset");
  return t;
}

}  // namespace

const GGMLTypeLayout* ggml_type_layout(GGMLType type) {
  // ggml's block sizes and bytes per block (ggml.c type_traits).
  static constexpr GGMLTypeLayout kF32{1, 4}, kF16{1, 2}, kQ4_0{32, 18}, kQ4_1{32, 20},
      kQ5_0{32, 22}, kQ5_1{32, 24}, kQ8_0{32, 34}, kQ8_1{32, 36}, kQ2_K{256, 84}, kQ3_K{256, 110},
      kQ4_K{256, 144}, kQ5_K{256, 176}, kQ6_K{256, 210}, kQ8_K{256, 292};
  switch (type) {
    case GGMLType::F32:
      return &kF32;
    case GGMLType::F16:
      return &kF16;
    case GGMLType::BF16:
      return &kF16;  // same size as F16
    case GGMLType::Q4_0:
      return &kQ4_0;
    case GGMLType::Q4_1:
      return &kQ4_1;
    case GGMLType::Q5_0:
      return &kQ5_0;
    case GGMLType::Q5_1:
      return &kQ5_1;
    case GGMLType::Q8_0:
      return &kQ8_0;
    case GGMLType::Q8_1:
      return &kQ8_1;
    case GGMLType::Q2_K:
      return &kQ2_K;
    case GGMLType::Q3_K:
      return &kQ3_K;
    case GGMLType::Q4_K:
      return &kQ4_K;
    case GGMLType::Q5_K:
      return &kQ5_K;
    case GGMLType::Q6_K:
      return &kQ6_K;
    case GGMLType::Q8_K:
      return &kQ8_K;
  }
  return nullptr;
}

std::string ggml_type_name(GGMLType type) {
  switch (type) {
    case GGMLType::F32:
      return "f32";
    case GGMLType::F16:
      return "f16";
    case GGMLType::BF16:
      return "bf16";
    case GGMLType::Q4_0:
      return "q4_0";
    case GGMLType::Q4_1:
      return "q4_1";
    case GGMLType::Q5_0:
      return "q5_0";
    case GGMLType::Q5_1:
      return "q5_1";
    case GGMLType::Q8_0:
      return "q8_0";
    case GGMLType::Q8_1:
      return "q8_1";
    case GGMLType::Q2_K:
      return "q2_K";
    case GGMLType::Q3_K:
      return "q3_K";
    case GGMLType::Q4_K:
      return "q4_K";
    case GGMLType::Q5_K:
      return "q5_K";
    case GGMLType::Q6_K:
      return "q6_K";
    case GGMLType::Q8_K:
      return "q8_K";
  }
  return "type" + std::to_string(static_cast<uint32_t>(type));
}

uint64_t GGUFValue::array_size() const {
  if (type != GGUFType::ARRAY) return 0;
  if (array_type == GGUFType::STRING) return strings.size();
  if (is_float(array_type)) return floats.size();
  return ints.size();
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // checked against overflow when the file was read
  return n;
}

// ---- opening and parsing ----

namespace {

// Maps path read-only; returns the mapping and its size. Refuses non-files and empty files.
void* map_file(const std::string& path, size_t* size) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    fail(path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    fail(path, ": not a regular file");
  }
  if (st.st_size == 0) {
    close(fd);
    fail(path, ": file is empty");
  }
  *size = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, *size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  close(fd);  // the mapping stays valid after the descriptor is closed
  check(map != MAP_FAILED, path, ": cannot mmap: ", std::strerror(err));
  return map;
}

}  // namespace

GGUFFile::GGUFFile(const std::string& path) : path_(path) {
  map_ = map_file(path_, &size_);
  try {
    Reader r(path_, static_cast<const uint8_t*>(map_), size_);
    check(size_ >= sizeof(kMagic), path_, ": too small to be a GGUF file (", size_, " bytes)");
    check(std::memcmp(r.take(sizeof(kMagic), "magic"), kMagic, sizeof(kMagic)) == 0, path_,
          ": not a GGUF file (bad magic)");
    version_ = r.read<uint32_t>("version");
    // A big-endian file stores the version bytes reversed: 2 reads as 0x02000000 here.
    const uint32_t swapped = __builtin_bswap32(version_);
    check(!(swapped >= kMinVersion && swapped <= kMaxVersion), path_,
          ": big-endian GGUF is not supported");
    check(version_ >= kMinVersion && version_ <= kMaxVersion, path_, ": GGUF version ", version_,
          " is not supported (supported: ", kMinVersion, " to ", kMaxVersion, ")");
    const uint64_t n_tensors = r.read<uint64_t>("tensor count");
    const uint64_t n_kv = r.read_count("metadata count", kMinKVBytes);
    check(n_tensors <= r.left() / kMinTensorInfoBytes, path_, ": tensor count ", n_tensors,
          " cannot fit in the ", r.left(), " bytes left in the file");

    for (uint64_t k = 0; k < n_kv; ++k) {
      std::string key = r.read_string("metadata key");
      check(metadata_.count(key) == 0, path_, ": duplicate metadata key '", key, "'");
      GGUFValue value = read_value(r, path_, key);
      metadata_.emplace(std::move(key), std::move(value));
    }

    if (const GGUFValue* a = find(kAlignmentKey)) {
      check(is_integer(a->type) && a->i > 0 && is_power_of_two(a->u), path_, ": ", kAlignmentKey,
            " must be a positive power of two (got ", describe(*a), " ", a->i, ")");
      alignment_ = static_cast<size_t>(a->u);
    } else {
      alignment_ = kDefaultAlignment;
    }

    tensors_.reserve(n_tensors);
    for (uint64_t k = 0; k < n_tensors; ++k) {
      TensorInfo t = read_tensor_info(r, path_);
      check(tensor_index_.count(t.name) == 0, path_, ": duplicate tensor name '", t.name, "'");
      check(t.offset % alignment_ == 0, path_, ": tensor '", t.name, "' offset ", t.offset,
            " is not a multiple of the alignment ", alignment_);
      tensor_index_.emplace(t.name, tensors_.size());
      tensors_.push_back(std::move(t));
    }

    if (tensors_.empty()) return;  // vocab-only files may end without a data section
    // The data section starts at the next multiple of the alignment.
    const uint64_t pad = (alignment_ - r.pos() % alignment_) % alignment_;
    check(pad <= r.left(), path_, ": file ends before the tensor data section");
    const uint64_t data_start = r.pos() + pad;
    const uint64_t data_size = size_ - data_start;
    for (TensorInfo& t : tensors_) {
      check(t.offset <= data_size && t.nbytes <= data_size - t.offset, path_, ": tensor '", t.name,
            "' data (offset ", t.offset, ", ", t.nbytes, " bytes) runs past the end of the file (",
            data_size, " data bytes)");
      t.data = static_cast<const uint8_t*>(map_) + data_start + t.offset;
    }
  } catch (...) {
    munmap(map_, size_);
    throw;
  }
}

GGUFFile::~GGUFFile() {
  if (map_ != nullptr) munmap(map_, size_);
}

// ---- lookups ----

const GGUFValue* GGUFFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

const GGUFValue& require(const GGUFFile& f, const std::string& key) {
  const GGUFValue* v = f.find(key);
  check(v != nullptr, f.path(), ": missing metadata key '", key, "'");
  return *v;
}

[[noreturn]] void wrong_kind(const GGUFFile& f, const std::string& key, const GGUFValue& v,
                             const char* expected) {
  fail(f.path(), ": metadata key '", key, "' is ", describe(v), ", expected ", expected);
}

int64_t as_int(const GGUFFile& f, const std::string& key, const GGUFValue& v) {
  if (!is_integer(v.type)) wrong_kind(f, key, v, "an integer");
  check(v.type != GGUFType::UINT64 || v.u <= uint64_t(std::numeric_limits<int64_t>::max()),
        f.path(), ": metadata key '", key, "' value ", v.u, " does not fit in int64");
  return v.i;
}

double as_float(const GGUFFile& f, const std::string& key, const GGUFValue& v) {
  if (is_float(v.type)) return v.f;
  if (is_integer(v.type)) return static_cast<double>(as_int(f, key, v));
  wrong_kind(f, key, v, "a number");
}

}  // namespace

std::string GGUFFile::get_string(const std::string& key) const {
  const GGUFValue& v = require(*this, key);
  if (v.type != GGUFType::STRING) wrong_kind(*this, key, v, "a string");
  return v.s;
}

int64_t GGUFFile::get_int(const std::string& key) const {
  return as_int(*this, key, require(*this, key));
}

double GGUFFile::get_float(const std::string& key) const {
  return as_float(*this, key, require(*this, key));
}

bool GGUFFile::get_bool(const std::string& key) const {
  const GGUFValue& v = require(*this, key);
  if (v.type != GGUFType::BOOL) wrong_kind(*this, key, v, "a bool");
  return v.i != 0;
}

std::vector<std::string> GGUFFile::get_string_array(const std::string& key) const {
  const GGUFValue& v = require(*this, key);
  if (v.type != GGUFType::ARRAY || v.array_type != GGUFType::STRING) {
    wrong_kind(*this, key, v, "an array of strings");
  }
  return v.strings;
}

std::vector<double> GGUFFile::get_float_array(const std::string& key) const {
  const GGUFValue& v = require(*this, key);
  if (v.type == GGUFType::ARRAY && is_float(v.array_type)) return v.floats;
  if (v.type == GGUFType::ARRAY && is_integer(v.array_type)) {
    return std::vector<double>(v.ints.begin(), v.ints.end());
  }
  wrong_kind(*this, key, v, "an array of numbers");
}

std::vector<int64_t> GGUFFile::get_int_array(const std::string& key) const {
  const GGUFValue& v = require(*this, key);
  if (v.type != GGUFType::ARRAY || !is_integer(v.array_type)) {
    wrong_kind(*this, key, v, "an array of integers");
  }
  return v.ints;
}

std::string GGUFFile::get_string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

int64_t GGUFFile::get_int_or(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double GGUFFile::get_float_or(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool GGUFFile::get_bool_or(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}

const TensorInfo* GGUFFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& GGUFFile::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  check(t != nullptr, path_, ": missing tensor '", name, "'");
  return *t;
}
