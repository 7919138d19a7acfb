// test_gguf.cpp: the GGUF reader on files built byte by byte, valid and malformed.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>

#include "error.h"
#include "gguf.h"
#include "support/gguf_builder.h"
#include "support/paths.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// A small valid file: a few keys and two tensors.
GGUFBuilder small_file() {
  GGUFBuilder b;
  b.add_string("general.architecture", "llama");
  b.add_u32("llama.block_count", 2);
  b.add_string_array("tokenizer.ggml.tokens", {"<s>", "a", "b"});
  b.add_tensor("a.weight", GGMLType::F32, {4, 2}, GGUFBuilder::f32_bytes({0, 1, 2, 3, 4, 5, 6, 7}));
  // 16 halves fill a 32-byte slot, so every strict prefix of the file lacks tensor data.
  std::vector<uint16_t> halves(16, 0x3c00);
  halves[2] = 0xc000;
  b.add_tensor("b.weight", GGMLType::F16, {16}, GGUFBuilder::u16_bytes(halves));
  return b;
}

// Expects GGUFFile(path) to throw an Error starting with the path and containing needle.
void require_error(const std::string& path, const std::string& needle) {
  try {
    GGUFFile f(path);
    FAIL("no error for " << path << " (expected '" << needle << "')");
  } catch (const Error& e) {
    REQUIRE_THAT(e.what(), StartsWith(path + ": "));
    REQUIRE_THAT(e.what(), Contains(needle));
  }
}

void require_error(const GGUFBuilder& b, const std::string& name, const std::string& needle) {
  require_error(b.write_temp(name), needle);
}

}  // namespace

TEST_CASE("gguf: every metadata type round-trips", "[gguf]") {
  GGUFBuilder b;
  b.add_u8("u8", 200);
  b.add_i8("i8", -100);
  b.add_u16("u16", 60000);
  b.add_i16("i16", -30000);
  b.add_u32("u32", 4000000000u);
  b.add_i32("i32", -2000000000);
  b.add_u64("u64", 1ull << 40);
  b.add_i64("i64", -(1ll << 40));
  b.add_f32("f32", 1.5f);
  b.add_f64("f64", -2.25);
  b.add_bool("yes", true);
  b.add_bool("no", false);
  b.add_string("str", "hello");
  b.add_string("empty", "");
  b.add_string_array("strs", {"x", "", "zz"});
  b.add_f32_array("floats", {0.5f, -1});
  b.add_i32_array("ints", {1, -2, 3});
  std::string u8s;
  for (uint8_t x : {1, 2, 255}) GGUFBuilder::put(u8s, x);
  b.add_raw_array("u8s", GGUFType::UINT8, 3, u8s);
  std::string bools;
  for (uint8_t x : {1, 0}) GGUFBuilder::put(bools, x);
  b.add_raw_array("bools", GGUFType::BOOL, 2, bools);
  b.add_string_array("no_strings", {});
  GGUFFile f(b.write_temp("types.gguf"));

  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.tensors().empty());
  CHECK(f.metadata().size() == 20);
  CHECK(f.get_int("u8") == 200);
  CHECK(f.get_int("i8") == -100);
  CHECK(f.get_int("u16") == 60000);
  CHECK(f.get_int("i16") == -30000);
  CHECK(f.get_int("u32") == 4000000000ll);
  CHECK(f.get_int("i32") == -2000000000);
  CHECK(f.get_int("u64") == (1ll << 40));
  CHECK(f.find("u64")->u == (1ull << 40));
  CHECK(f.get_int("i64") == -(1ll << 40));
  CHECK(f.get_float("f32") == 1.5);
  CHECK(f.get_float("f64") == -2.25);
  CHECK(f.get_float("u8") == 200.0);  // integers are accepted as floats
  CHECK(f.get_bool("yes"));
  CHECK_FALSE(f.get_bool("no"));
  CHECK(f.get_string("str") == "hello");
  CHECK(f.get_string("empty").empty());
  CHECK(f.get_string_array("strs") == std::vector<std::string>{"x", "", "zz"});
  CHECK(f.get_float_array("floats") == std::vector<double>{0.5, -1});
  CHECK(f.get_int_array("ints") == std::vector<int64_t>{1, -2, 3});
  CHECK(f.get_float_array("ints") == std::vector<double>{1, -2, 3});
  CHECK(f.get_int_array("u8s") == std::vector<int64_t>{1, 2, 255});
  CHECK(f.find("bools")->ints == std::vector<int64_t>{1, 0});
  CHECK(f.find("strs")->array_size() == 3);
  CHECK(f.find("str")->array_size() == 0);
  CHECK(f.get_string_array("no_strings").empty());

  CHECK(f.get_int_or("absent", 7) == 7);
  CHECK(f.get_float_or("absent", 0.25) == 0.25);
  CHECK(f.get_string_or("absent", "d") == "d");
  CHECK(f.get_bool_or("absent", true));
  CHECK(f.get_int_or("u8", 7) == 200);
  CHECK(f.find("absent") == nullptr);
  CHECK_FALSE(f.has("absent"));
}

TEST_CASE("gguf: getters name the file and key on a wrong kind or missing key", "[gguf]") {
  GGUFBuilder b;
  b.add_string("str", "x");
  b.add_f32("f", 1);
  b.add_u64("big", ~0ull);
  const std::string path = b.write_temp("kinds.gguf");
  GGUFFile f(path);
  CHECK_THROWS_WITH(f.get_int("str"), Contains(path) && Contains("'str'") && Contains("string"));
  CHECK_THROWS_WITH(f.get_string("f"), Contains("'f'") && Contains("f32"));
  CHECK_THROWS_WITH(f.get_int("f"), Contains("'f'"));
  CHECK_THROWS_WITH(f.get_bool("str"), Contains("'str'"));
  CHECK_THROWS_WITH(f.get_string_array("str"), Contains("array of strings"));
  CHECK_THROWS_WITH(f.get_int("missing"), StartsWith(path) && Contains("missing metadata key"));
  CHECK_THROWS_WITH(f.get_int_or("str", 1), Contains("'str'"));
  CHECK_THROWS_WITH(f.get_int("big"), Contains("does not fit"));
  CHECK_THROWS_WITH(f.tensor("nope"), Contains("missing tensor 'nope'"));
}

TEST_CASE("gguf: tensors are located and sized", "[gguf]") {
  GGUFBuilder b = small_file();
  const std::string path = b.write_temp("tensors.gguf");
  GGUFFile f(path);
  REQUIRE(f.tensors().size() == 2);
  const TensorInfo& a = f.tensor("a.weight");
  CHECK(a.type == GGMLType::F32);
  CHECK(a.ne == std::vector<int64_t>{4, 2});
  CHECK(a.n_elements() == 8);
  CHECK(a.nbytes == 32);
  CHECK(a.offset == 0);
  const float* af = static_cast<const float*>(a.data);
  CHECK(af[0] == 0);
  CHECK(af[7] == 7);
  const TensorInfo& bt = f.tensor("b.weight");
  CHECK(bt.nbytes == 32);
  CHECK(bt.offset == 32);
  CHECK(static_cast<const uint16_t*>(bt.data)[2] == 0xc000);
  CHECK(f.find_tensor("c.weight") == nullptr);
  CHECK(f.file_size() == std::filesystem::file_size(path));
}

TEST_CASE("gguf: released tensor pages read back the same", "[gguf]") {
  // Several pages of floats: release() drops the whole pages inside them from this process, and a
  // later read maps them again from the file.
  constexpr int kFloats = 5000;
  std::vector<float> values(kFloats);
  for (int i = 0; i < kFloats; ++i) values[i] = static_cast<float>(i) * 0.5f;
  GGUFBuilder b;
  b.add_string("general.architecture", "llama");
  b.add_tensor("big.weight", GGMLType::F32, {kFloats}, GGUFBuilder::f32_bytes(values));
  const std::string path = b.write_temp("release.gguf");
  GGUFFile f(path);
  const TensorInfo& t = f.tensor("big.weight");
  f.release(t.data, t.nbytes);
  const float* data = static_cast<const float*>(t.data);
  for (int i = 0; i < kFloats; ++i) REQUIRE(data[i] == values[i]);
  f.release(t.data, 0);  // nothing to drop
  REQUIRE_THROWS_WITH(f.release(t.data, f.file_size() + 1), StartsWith(path + ": release: "));
  REQUIRE_THROWS_WITH(f.release(values.data(), sizeof(float)), Contains("outside the file"));
}

TEST_CASE("gguf: block types are sized by ggml's block layout", "[gguf]") {
  struct Case {
    GGMLType type;
    int block;
    size_t bytes;
  };
  const Case cases[] = {
      {GGMLType::F32, 1, 4},      {GGMLType::F16, 1, 2},      {GGMLType::BF16, 1, 2},
      {GGMLType::Q4_0, 32, 18},   {GGMLType::Q4_1, 32, 20},   {GGMLType::Q5_0, 32, 22},
      {GGMLType::Q5_1, 32, 24},   {GGMLType::Q8_0, 32, 34},   {GGMLType::Q8_1, 32, 36},
      {GGMLType::Q2_K, 256, 84},  {GGMLType::Q3_K, 256, 110}, {GGMLType::Q4_K, 256, 144},
      {GGMLType::Q5_K, 256, 176}, {GGMLType::Q6_K, 256, 210}, {GGMLType::Q8_K, 256, 292}};
  for (const Case& c : cases) {
    INFO(ggml_type_name(c.type));
    const GGMLTypeLayout* layout = ggml_type_layout(c.type);
    REQUIRE(layout != nullptr);
    CHECK(layout->block_size == c.block);
    CHECK(layout->block_bytes == c.bytes);
    // Two rows of two blocks each.
    GGUFBuilder b;
    b.add_tensor("t", c.type, {2 * c.block, 2}, std::string(4 * c.bytes, '\0'));
    GGUFFile f(b.write_temp("blocks.gguf"));
    CHECK(f.tensor("t").nbytes == 4 * c.bytes);
  }
  CHECK(ggml_type_layout(static_cast<GGMLType>(4)) == nullptr);  // Q4_2, long removed
  CHECK(ggml_type_name(GGMLType::Q6_K) == "q6_K");
  CHECK(ggml_type_name(static_cast<GGMLType>(99)) == "type99");
}

TEST_CASE("gguf: version 2 and a custom alignment", "[gguf]") {
  GGUFBuilder b;
  b.set_version(2);
  b.set_alignment(64);
  b.add_tensor("x", GGMLType::F32, {3}, GGUFBuilder::f32_bytes({1, 2, 3}));
  b.add_tensor("y", GGMLType::F32, {1}, GGUFBuilder::f32_bytes({9}));
  GGUFFile f(b.write_temp("v2.gguf"));
  CHECK(f.version() == 2);
  CHECK(f.alignment() == 64);
  CHECK(f.tensor("y").offset == 64);
  CHECK(*static_cast<const float*>(f.tensor("y").data) == 9);
}

TEST_CASE("gguf: missing, non-regular and empty files", "[gguf]") {
  const std::string missing = std::filesystem::temp_directory_path() / "gguf_test_no_such.gguf";
  require_error(missing, "cannot open");
  const std::string dir = std::filesystem::temp_directory_path().string();
  CHECK_THROWS_WITH(GGUFFile(dir), StartsWith(dir + ": ") && Contains("not a regular file"));
  require_error(GGUFBuilder::write_bytes("", "empty.gguf"), "empty");
  require_error(GGUFBuilder::write_bytes("GG", "tiny.gguf"), "too small");
}

TEST_CASE("gguf: bad header is refused", "[gguf]") {
  GGUFBuilder b = small_file();
  b.set_magic("GGML");
  require_error(b, "magic.gguf", "not a GGUF file");

  GGUFBuilder be = small_file();
  be.set_version(0x03000000);
  require_error(be, "be3.gguf", "big-endian GGUF is not supported");
  be.set_version(0x02000000);
  require_error(be, "be2.gguf", "big-endian GGUF is not supported");

  for (uint32_t v : {0u, 1u, 4u, 1000u}) {
    GGUFBuilder bv = small_file();
    bv.set_version(v);
    require_error(bv, "version.gguf", "version " + std::to_string(v) + " is not supported");
  }
}

TEST_CASE("gguf: every truncation of a valid file is an error", "[gguf]") {
  const std::string full = small_file().bytes();
  {
    GGUFFile ok(GGUFBuilder::write_bytes(full, "full.gguf"));
    CHECK(ok.tensors().size() == 2);
  }
  for (size_t n = 1; n < full.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    const std::string path = GGUFBuilder::write_bytes(full.substr(0, n), "prefix.gguf");
    CHECK_THROWS_AS(GGUFFile(path), Error);
  }
}

TEST_CASE("gguf: every single-byte corruption of the header is an error or a valid file",
          "[gguf]") {
  // Flipping bytes must never crash or allocate absurdly; most flips give an Error.
  const std::string full = small_file().bytes();
  const size_t header_end = full.size() - 64;  // the data section is two 32-byte slots
  for (size_t k = 0; k < header_end; ++k) {
    std::string bad = full;
    bad[k] = static_cast<char>(bad[k] ^ 0xFF);
    const std::string path = GGUFBuilder::write_bytes(bad, "flip.gguf");
    try {
      GGUFFile f(path);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), StartsWith(path + ": "));
    }
  }
}

TEST_CASE("gguf: huge counts and lengths are refused before allocating", "[gguf]") {
  GGUFBuilder kv = small_file();
  kv.set_n_kv(~0ull / 2);
  require_error(kv, "nkv.gguf", "metadata count");

  GGUFBuilder nt = small_file();
  nt.set_n_tensors(1ull << 60);
  require_error(nt, "nt.gguf", "tensor count");

  GGUFBuilder arr;
  arr.add_raw_array("huge", GGUFType::UINT32, 1ull << 62, "");
  require_error(arr, "arr.gguf", "array length");

  GGUFBuilder str_arr;
  str_arr.add_raw_array("huge", GGUFType::STRING, 1ull << 40, "");
  require_error(str_arr, "strarr.gguf", "array length");

  GGUFBuilder str;
  std::string len;
  GGUFBuilder::put(len, uint64_t(1) << 50);
  str.add_raw_kv("s", static_cast<uint32_t>(GGUFType::STRING), len);
  // A string is measured in bytes, not reported as a count of items.
  require_error(str, "str.gguf", "key 's' value length 1125899906842624 exceeds the 0 bytes left");
}

TEST_CASE("gguf: malformed metadata is refused", "[gguf]") {
  GGUFBuilder dup;
  dup.add_u32("k", 1);
  dup.add_u32("k", 2);
  require_error(dup, "dupkey.gguf", "duplicate metadata key 'k'");

  GGUFBuilder type;
  type.add_raw_kv("weird", 13, "");
  require_error(type, "kvtype.gguf", "unknown value type 13");

  GGUFBuilder nested;
  std::string inner;
  GGUFBuilder::put(inner, static_cast<uint32_t>(GGUFType::UINT8));
  GGUFBuilder::put(inner, uint64_t(0));
  nested.add_raw_array("nested", GGUFType::ARRAY, 1, inner);
  require_error(nested, "nested.gguf", "array of arrays");

  GGUFBuilder boolean;
  boolean.add_raw_kv("flag", static_cast<uint32_t>(GGUFType::BOOL), "\x02");
  require_error(boolean, "bool.gguf", "expected 0 or 1");

  for (uint32_t a : {0u, 3u, 48u}) {
    GGUFBuilder align;
    align.add_u32("general.alignment", a);
    require_error(align, "align.gguf", "power of two");
  }
  GGUFBuilder align_kind;
  align_kind.add_string("general.alignment", "32");
  require_error(align_kind, "alignkind.gguf", "power of two");
}

TEST_CASE("gguf: malformed tensor infos are refused, naming the tensor", "[gguf]") {
  const std::string four_floats = GGUFBuilder::f32_bytes({1, 2, 3, 4});
  {
    GGUFBuilder b;
    b.add_tensor("t", GGMLType::F32, {4}, four_floats);
    b.add_tensor("t", GGMLType::F32, {4}, four_floats);
    require_error(b, "duptensor.gguf", "duplicate tensor name 't'");
  }
  {
    GGUFBuilder b;
    b.add_tensor("t", GGMLType::F32, {}, "");
    require_error(b, "dims0.gguf", "'t' has 0 dimensions");
    GGUFBuilder b5;
    b5.add_tensor("t", GGMLType::F32, {1, 1, 1, 1, 1}, four_floats);
    require_error(b5, "dims5.gguf", "'t' has 5 dimensions");
  }
  for (int64_t ne : {int64_t(0), int64_t(-4)}) {
    GGUFBuilder b;
    b.add_tensor("t", GGMLType::F32, {4, ne}, four_floats);
    require_error(b, "ne.gguf", "'t' has ne[1]");
  }
  {
    GGUFBuilder b;
    b.add_tensor("t", GGMLType::F32, {1ll << 32, 1ll << 32}, four_floats);
    require_error(b, "overflow.gguf", "overflows");
    GGUFBuilder b2;
    b2.add_tensor("t", GGMLType::F32, {1ll << 62}, four_floats);
    require_error(b2, "overflow2.gguf", "overflows");
  }
  {
    GGUFBuilder b;
    size_t k = b.add_tensor("t", GGMLType::F32, {4}, four_floats);
    b.set_tensor_type(k, 99);
    require_error(b, "type.gguf", "'t' has unknown ggml type 99");
  }
  {
    GGUFBuilder b;
    b.add_tensor("q", GGMLType::Q4_0, {16}, std::string(18, '\0'));
    require_error(b, "block.gguf", "not a multiple of the q4_0 block size 32");
    // A K-quant row must be whole super-blocks of 256; a file that stops after one of two
    // super-blocks is refused.
    GGUFBuilder k;
    k.add_tensor("blk.0.ffn_down.weight", GGMLType::Q4_K, {128, 2}, std::string(144, '\0'));
    require_error(
        k, "q4k-row.gguf",
        "'blk.0.ffn_down.weight' has ne[0] = 128, not a multiple of the q4_K block size 256");
    GGUFBuilder k2;
    k2.add_tensor("blk.0.ffn_down.weight", GGMLType::Q6_K, {256, 2}, std::string(210, '\0'));
    require_error(k2, "q6k-short.gguf", "runs past the end");
  }
  {
    GGUFBuilder b;
    size_t k = b.add_tensor("t", GGMLType::F32, {4}, four_floats);
    b.set_tensor_offset(k, 4);
    require_error(b, "misaligned.gguf", "'t' offset 4 is not a multiple of the alignment 32");
  }
  {
    GGUFBuilder b;
    size_t k = b.add_tensor("t", GGMLType::F32, {4}, four_floats);
    b.set_tensor_offset(k, 1ull << 40);
    require_error(b, "pastend.gguf", "'t' data");
    GGUFBuilder b2;
    k = b2.add_tensor("t", GGMLType::F32, {4}, four_floats);
    b2.set_tensor_offset(k, ~0ull - 31);  // offset + nbytes would wrap around
    require_error(b2, "wrap.gguf", "'t' data");
    GGUFBuilder b3;
    b3.add_tensor("t", GGMLType::F32, {16}, four_floats);  // 64 bytes declared, 32 stored
    require_error(b3, "short.gguf", "runs past the end");
  }
}

TEST_CASE("gguf: a vocab-only file may end without a data section", "[gguf]") {
  GGUFBuilder b;
  b.add_string("general.architecture", "llama");
  const std::string data = b.bytes();
  REQUIRE(data.size() % 32 != 0);
  GGUFFile f(GGUFBuilder::write_bytes(data, "vocabonly.gguf"));
  CHECK(f.tensors().empty());
}

TEST_CASE("gguf: the real deepseek-llm vocab file", "[gguf]") {
  REQUIRE_SHARED_OR_SKIP(path, "vocab/ggml-vocab-deepseek-llm.gguf");
  GGUFFile f(path);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_string_array("tokenizer.ggml.tokens").size() == 102400);
  CHECK(f.tensors().empty());
}
