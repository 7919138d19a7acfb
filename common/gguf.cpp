// gguf.cpp: the GGUF reader. The file is mapped read-only and walked with a bounds-checked cursor;
// every count and length is compared with the bytes left before anything is allocated.
#include "gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <iterator>
#include <limits>

#include "error.h"

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kMinVersion = 2;  // version 1 used 32-bit counts; llama.cpp dropped it too
constexpr uint32_t kMaxVersion = 3;  // version 3 only added big-endian files, which we refuse
constexpr size_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS
const char* const kAlignmentKey = "general.alignment";
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// The smallest encodings, used to bound counts by the bytes left in the file.
constexpr uint64_t kStringLengthBytes = 8;
constexpr uint64_t kMinKVBytes = kStringLengthBytes + 4 + 1;                  // key, type, u8 value
constexpr uint64_t kMinTensorInfoBytes = kStringLengthBytes + 4 + 8 + 4 + 8;  // name..offset, 1-D

// ---- metadata value types, indexed by GGUFType ----

// What a type holds, as bits so that one check can accept several kinds.
enum Kind { kUnsigned = 1, kSigned = 2, kFloat = 4, kBool = 8, kString = 16, kArray = 32 };
constexpr unsigned kInteger = kUnsigned | kSigned;
constexpr unsigned kNumber = kInteger | kFloat;

struct ValueType {
  const char* name;
  uint64_t bytes;  // of one value; 0 for the variable-size STRING and ARRAY
  Kind kind;
};
constexpr ValueType kValueTypes[] = {
    {"u8", 1, kUnsigned},   {"i8", 1, kSigned},   {"u16", 2, kUnsigned}, {"i16", 2, kSigned},
    {"u32", 4, kUnsigned},  {"i32", 4, kSigned},  {"f32", 4, kFloat},    {"bool", 1, kBool},
    {"string", 0, kString}, {"array", 0, kArray}, {"u64", 8, kUnsigned}, {"i64", 8, kSigned},
    {"f64", 8, kFloat},
};

const ValueType& info(GGUFType type) {
  return kValueTypes[static_cast<uint32_t>(type)];
}
// True when type (a known one) holds one of kinds.
bool is(GGUFType type, unsigned kinds) {
  return (info(type).kind & kinds) != 0;
}

std::string describe(const GGUFValue& value) {
  if (value.type != GGUFType::ARRAY) return info(value.type).name;
  return std::string("array of ") + info(value.array_type).name;
}

// ---- ggml tensor types: ggml's names, block sizes and bytes per block (ggml.c type_traits) ----

struct TensorType {
  GGMLType type;
  const char* name;
  GGMLTypeLayout layout;
};
constexpr TensorType kTensorTypes[] = {
    {GGMLType::F32, "f32", {1, 4}},       {GGMLType::F16, "f16", {1, 2}},
    {GGMLType::BF16, "bf16", {1, 2}},     {GGMLType::Q4_0, "q4_0", {32, 18}},
    {GGMLType::Q4_1, "q4_1", {32, 20}},   {GGMLType::Q5_0, "q5_0", {32, 22}},
    {GGMLType::Q5_1, "q5_1", {32, 24}},   {GGMLType::Q8_0, "q8_0", {32, 34}},
    {GGMLType::Q8_1, "q8_1", {32, 36}},   {GGMLType::Q2_K, "q2_K", {256, 84}},
    {GGMLType::Q3_K, "q3_K", {256, 110}}, {GGMLType::Q4_K, "q4_K", {256, 144}},
    {GGMLType::Q5_K, "q5_K", {256, 176}}, {GGMLType::Q6_K, "q6_K", {256, 210}},
    {GGMLType::Q8_K, "q8_K", {256, 292}},
};

const TensorType* find_tensor_type(GGMLType type) {
  for (const TensorType& t : kTensorTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

// ---- reading ----

// A cursor over the mapped bytes; every read checks that the bytes are there.
class Reader {
 public:
  Reader(const std::string& path, const uint8_t* data, size_t size)
      : path_(path), data_(data), size_(size) {}

  const std::string& path() const { return path_; }
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
    return std::string(reinterpret_cast<const char*>(take(n, what)), n);
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

GGUFType read_type(Reader& r, const std::string& what) {
  const uint32_t t = r.read<uint32_t>(what + " type");
  check(t < std::size(kValueTypes), r.path(), ": ", what, " has unknown value type ", t);
  return static_cast<GGUFType>(t);
}

// Reads one value of a non-array type into v.s, v.f, or v.i and v.u (integers and bools; a
// UINT64 above INT64_MAX shows as negative in v.i).
void read_scalar(Reader& r, GGUFType type, const std::string& what, GGUFValue& v) {
  if (type == GGUFType::STRING) {
    v.s = r.read_string(what);
  } else if (type == GGUFType::FLOAT32) {
    v.f = r.read<float>(what);
  } else if (type == GGUFType::FLOAT64) {
    v.f = r.read<double>(what);
  } else {
    const uint64_t n = info(type).bytes;
    uint64_t u = 0;
    std::memcpy(&u, r.take(n, what), n);  // little-endian host assumed
    // Shifting the value's top bit up to bit 63 and back sign-extends the signed types.
    const int unused_bits = static_cast<int>(sizeof(u) - n) * CHAR_BIT;
    const bool is_signed = is(type, kSigned);
    v.i = is_signed ? static_cast<int64_t>(u << unused_bits) >> unused_bits : int64_t(u);
    v.u = static_cast<uint64_t>(v.i);
    check(type != GGUFType::BOOL || u <= 1, r.path(), ": ", what, " is a bool with byte value ", u,
          " (expected 0 or 1)");
  }
}

void read_array(Reader& r, const std::string& what, GGUFValue& v) {
  v.array_type = read_type(r, what + " element");
  const GGUFType type = v.array_type;
  check(type != GGUFType::ARRAY, r.path(), ": ", what,
        " is an array of arrays, which is not supported");
  const uint64_t bytes = info(type).bytes;
  const uint64_t n = r.read_count(what + " array length", bytes ? bytes : kStringLengthBytes);
  // Integers and bools go to v.ints, floats to v.floats, strings to v.strings.
  if (is(type, kString)) v.strings.reserve(n);
  if (is(type, kFloat)) v.floats.reserve(n);
  if (is(type, kInteger | kBool)) v.ints.reserve(n);
  const std::string element = what + " element";
  GGUFValue e;
  for (uint64_t k = 0; k < n; ++k) {
    read_scalar(r, type, element, e);
    if (is(type, kString)) {
      v.strings.push_back(std::move(e.s));
    } else if (is(type, kFloat)) {
      v.floats.push_back(e.f);
    } else {
      check(type != GGUFType::UINT64 || e.u <= uint64_t(kInt64Max), r.path(), ": ", what,
            " element ", k, " (", e.u, ") does not fit in int64");
      v.ints.push_back(e.i);
    }
  }
}

GGUFValue read_value(Reader& r, const std::string& key) {
  const std::string what = "key '" + key + "'";
  GGUFValue v;
  v.type = read_type(r, what);
  if (v.type == GGUFType::ARRAY) {
    read_array(r, what, v);
  } else {
    read_scalar(r, v.type, what + " value", v);
  }
  return v;
}

// Multiplies two non-negative numbers, refusing an overflow of int64.
int64_t checked_mul(int64_t a, int64_t b, const std::string& path, const std::string& what) {
  check(b == 0 || a <= kInt64Max / b, path, ": ", what, " overflows 64 bits");
  return a * b;
}

TensorInfo read_tensor_info(Reader& r) {
  const std::string& path = r.path();
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

// Closes a file descriptor when it goes out of scope.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) close(fd);
  }
};

// Maps path read-only; returns the mapping and its size. Refuses non-files and empty files.
void* map_file(const std::string& path, size_t* size) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer for ever; it is then refused
  // as not a regular file. (The flag changes nothing for a regular file.)
  const FileDescriptor file{open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  check(file.fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  const bool stat_ok = fstat(file.fd, &st) == 0;  // before errno is read below
  check(stat_ok, path, ": cannot stat: ", std::strerror(errno));
  check(S_ISREG(st.st_mode), path, ": not a regular file");
  check(st.st_size > 0, path, ": file is empty");
  *size = static_cast<size_t>(st.st_size);
  // The mapping stays valid after the descriptor is closed.
  void* map = mmap(nullptr, *size, PROT_READ, MAP_PRIVATE, file.fd, 0);
  check(map != MAP_FAILED, path, ": cannot mmap: ", std::strerror(errno));
  return map;
}

}  // namespace

const GGMLTypeLayout* ggml_type_layout(GGMLType type) {
  const TensorType* t = find_tensor_type(type);
  return t ? &t->layout : nullptr;
}

std::string ggml_type_name(GGMLType type) {
  const TensorType* t = find_tensor_type(type);
  return t ? t->name : "type" + std::to_string(static_cast<uint32_t>(type));
}

uint64_t GGUFValue::array_size() const {
  if (type != GGUFType::ARRAY) return 0;
  if (is(array_type, kString)) return strings.size();
  if (is(array_type, kFloat)) return floats.size();
  return ints.size();
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // checked against overflow when the file was read
  return n;
}

// ---- opening and parsing ----

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
      GGUFValue value = read_value(r, key);
      metadata_.emplace(std::move(key), std::move(value));
    }

    alignment_ = kDefaultAlignment;
    if (const GGUFValue* a = find(kAlignmentKey)) {
      const bool power_of_two = a->u != 0 && (a->u & (a->u - 1)) == 0;
      check(is(a->type, kInteger) && a->i > 0 && power_of_two, path_, ": ", kAlignmentKey,
            " must be a positive power of two (got ", describe(*a), " ", a->i, ")");
      alignment_ = static_cast<size_t>(a->u);
    }

    tensors_.reserve(n_tensors);
    for (uint64_t k = 0; k < n_tensors; ++k) {
      TensorInfo t = read_tensor_info(r);
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

void GGUFFile::release(const void* data, size_t bytes) const {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const auto map_begin = reinterpret_cast<uintptr_t>(map_);
  check(begin >= map_begin && bytes <= size_ && begin - map_begin <= size_ - bytes, path_,
        ": release: ", bytes, " bytes at offset ", begin - map_begin, " are outside the file");
  // Only whole pages can leave: round the start up and the end down to a page boundary.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes) / page * page;
  if (last <= first) return;
  // A private, never-written file mapping: MADV_DONTNEED frees the pages, later reads refill them.
  check(madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0, path_,
        ": madvise: ", std::strerror(errno));
}

// ---- lookups ----

const GGUFValue* GGUFFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

// The value of key, present and of one of kinds (an array also with elements of one of
// element_kinds); otherwise an Error naming the file, the key and the expected kind.
const GGUFValue& require(const GGUFFile& f, const std::string& key, unsigned kinds,
                         const char* expected, unsigned element_kinds = 0) {
  const GGUFValue* v = f.find(key);
  check(v != nullptr, f.path(), ": missing metadata key '", key, "'");
  if (!is(v->type, kinds) || (v->type == GGUFType::ARRAY && !is(v->array_type, element_kinds))) {
    fail(f.path(), ": metadata key '", key, "' is ", describe(*v), ", expected ", expected);
  }
  return *v;
}

}  // namespace

std::string GGUFFile::get_string(const std::string& key) const {
  return require(*this, key, kString, "a string").s;
}

int64_t GGUFFile::get_int(const std::string& key) const {
  const GGUFValue& v = require(*this, key, kInteger, "an integer");
  check(v.type != GGUFType::UINT64 || v.u <= uint64_t(kInt64Max), path_, ": metadata key '", key,
        "' value ", v.u, " does not fit in int64");
  return v.i;
}

double GGUFFile::get_float(const std::string& key) const {
  const GGUFValue& v = require(*this, key, kNumber, "a number");
  return is(v.type, kFloat) ? v.f : static_cast<double>(get_int(key));
}

bool GGUFFile::get_bool(const std::string& key) const {
  return require(*this, key, kBool, "a bool").i != 0;
}

std::vector<std::string> GGUFFile::get_string_array(const std::string& key) const {
  return require(*this, key, kArray, "an array of strings", kString).strings;
}

std::vector<double> GGUFFile::get_float_array(const std::string& key) const {
  const GGUFValue& v = require(*this, key, kArray, "an array of numbers", kNumber);
  if (is(v.array_type, kFloat)) return v.floats;
  return std::vector<double>(v.ints.begin(), v.ints.end());
}

std::vector<int64_t> GGUFFile::get_int_array(const std::string& key) const {
  return require(*this, key, kArray, "an array of integers", kInteger).ints;
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
