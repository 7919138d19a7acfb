// quantize.cpp: build/quantize IN.gguf OUT.gguf TYPE, as llama-quantize.
//
//   build/quantize data/models/tiny-kjv-f32.gguf /tmp/tiny-kjv-q4_k_m.gguf Q4_K_M
//   build/quantize --pure IN.gguf OUT.gguf Q4_K      (one type for every matrix)
//
// Every metadata key is copied (general.file_type and general.quantization_version set), every
// tensor kept in file order: the matrices in the type quant_mix.h chooses, quantized by common/'s
// reference quantizers (ggml's algorithms), norms and other 1-D tensors as they are. A source
// matrix that is already quantized is refused unless --allow-requantize: its rounding errors would
// add to the new ones.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "error.h"
#include "gguf.h"
#include "gguf_writer.h"
#include "parallel.h"
#include "quant.h"
#include "quant_mix.h"

namespace {

constexpr uint32_t kQuantizationVersion = 2;  // ggml's GGML_QNT_VERSION
constexpr double kMiB = 1024.0 * 1024.0;

struct Args {
  std::string in, out, type;
  bool pure = false;
  bool allow_requantize = false;
};

std::string usage(const char* program) {
  std::string u = std::string("usage: ") + program +
                  " [--pure] [--allow-requantize] IN.gguf OUT.gguf TYPE\n\nTYPE:";
  for (const FileType& t : file_types()) u += std::string(" ") + t.name;
  return u + " (Q3_K, Q4_K, Q5_K: the _M mixes)\n";
}

Args parse_args(int argc, char** argv) {
  Args a;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--pure") {
      a.pure = true;
    } else if (arg == "--allow-requantize") {
      a.allow_requantize = true;
    } else {
      check(arg.empty() || arg[0] != '-', "unknown flag '", arg, "'\n", usage(argv[0]));
      positional.push_back(arg);
    }
  }
  check(positional.size() == 3, "expected IN.gguf OUT.gguf TYPE\n", usage(argv[0]));
  a.in = positional[0];
  a.out = positional[1];
  a.type = positional[2];
  return a;
}

bool is_quantized(GGMLType t) {
  return t != GGMLType::F32 && t != GGMLType::F16 && t != GGMLType::BF16;
}

/// Query heads per KV head, from the architecture's metadata (1 when absent).
int queries_per_kv_head(const GGUFFile& f) {
  const std::string arch = f.get_string_or("general.architecture", "");
  const int64_t heads = f.get_int_or(arch + ".attention.head_count", 1);
  const int64_t kv = f.get_int_or(arch + ".attention.head_count_kv", heads);
  return kv > 0 ? int(heads / kv) : 1;
}

/// rows of t (ne[0] weights each) in its new type: dequantized to fp32, then quantized.
std::vector<unsigned char> convert(const TensorInfo& t, GGMLType to) {
  const int64_t nx = t.ne[0];
  const int64_t rows = t.n_elements() / nx;
  const size_t in_row = type_row_bytes(t.type, nx);
  const size_t out_row = type_row_bytes(to, nx);
  std::vector<unsigned char> out(out_row * size_t(rows));
  const auto* in = static_cast<const unsigned char*>(t.data);
  ParallelError error;  // no exception may leave an OpenMP region (parallel.h)
#pragma omp parallel
  {
    std::vector<float> row(nx);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      error.guard([&] {
        dequantize_row(t.type, in + size_t(r) * in_row, row.data(), nx);
        quantize_row(to, row.data(), out.data() + size_t(r) * out_row, nx);
      });
    }
  }
  error.rethrow();
  return out;
}

void write_file(const Args& a, const GGUFFile& in, const FileType& ftype,
                const std::vector<GGMLType>& types);

void quantize_file(const Args& a) {
  const FileType* ftype = find_file_type(a.type);
  check(ftype != nullptr, "unknown type '", a.type, "'");
  const GGUFFile in(a.in);
  const std::string arch = in.get_string_or("general.architecture", "");
  const int n_layer = int(in.get_int_or(arch + ".block_count", 0));
  QuantMix mix(*ftype, n_layer, queries_per_kv_head(in), in.find_tensor("output.weight") != nullptr,
               a.pure);

  // Every tensor's new type first: the header holds them all.
  std::vector<GGMLType> types;
  for (const TensorInfo& t : in.tensors()) {
    GGMLType to = t.type;
    if (is_quantizable(t.name, int(t.ne.size()))) {
      bool fell_back = false;
      to = mix.choose(t.name, t.ne[0], fell_back);
      if (fell_back) {
        std::fprintf(stderr,
                     "%s: rows of %lld weights are not whole blocks of the mix's type: %s\n",
                     t.name.c_str(), static_cast<long long>(t.ne[0]), ggml_type_name(to).c_str());
      }
      check(to == t.type || !is_quantized(t.type) || a.allow_requantize, a.in, ": tensor '", t.name,
            "' is already ", ggml_type_name(t.type),
            "; requantizing adds its rounding to the new one: give --allow-requantize to do it");
      check(type_supported(t.type), a.in, ": tensor '", t.name, "' has type ",
            ggml_type_name(t.type), ", which this engine cannot dequantize");
    }
    types.push_back(to);
  }

  try {
    write_file(a, in, *ftype, types);
  } catch (...) {
    std::remove(a.out.c_str());  // no half-written model left behind
    throw;
  }
}

void write_file(const Args& a, const GGUFFile& in, const FileType& ftype,
                const std::vector<GGMLType>& types) {
  GGUFWriter out(a.out, in.alignment());
  for (const auto& [key, value] : in.metadata()) out.add_metadata(key, value);
  out.set_u32("general.file_type", ftype.id);
  out.set_u32("general.quantization_version", kQuantizationVersion);
  for (size_t i = 0; i < in.tensors().size(); ++i)
    out.add_tensor(in.tensors()[i].name, types[i], in.tensors()[i].ne);
  out.write_header();

  double bytes_in = 0, bytes_out = 0;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const TensorInfo& t = in.tensors()[i];
    std::vector<unsigned char> data;
    size_t n_bytes = t.nbytes;
    const void* bytes = t.data;
    if (types[i] != t.type) {
      data = convert(t, types[i]);
      bytes = data.data();
      n_bytes = data.size();
    }
    std::printf("[%3zu/%3zu] %-28s %-6s -> %-6s %9.3f MiB -> %9.3f MiB\n", i + 1,
                in.tensors().size(), t.name.c_str(), ggml_type_name(t.type).c_str(),
                ggml_type_name(types[i]).c_str(), t.nbytes / kMiB, n_bytes / kMiB);
    out.write_tensor(t.name, bytes, n_bytes);
    bytes_in += double(t.nbytes);
    bytes_out += double(n_bytes);
  }
  out.finish();
  std::printf("%s: %.2f MiB -> %.2f MiB (%s)\n", a.out.c_str(), bytes_in / kMiB, bytes_out / kMiB,
              ftype.name);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
      std::fputs(usage(argv[0]).c_str(), stdout);
      return 0;
    }
    quantize_file(parse_args(argc, argv));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
