// absorb.cpp: wkv_b split per head, its key part transposed (absorb.h).
#include "absorb.h"

#include <vector>

#include "quant.h"

namespace {

/// The transposed key parts' type: F32 for a float wkv_b (the F32 models stay exact fp32), F16
/// for a quantized one, half F32's bytes to read per token (V2-Lite: 2.1 MB a layer, not 4.2).
/// Not Q8_0: a second rounding of the weights, and of the query it multiplies, moved V2-Lite's
/// perplexity by 1.3% away from stage 20's and llama.cpp's (make bench-ctx's prompt, -c 128,
/// 2 chunks: 160,022 against 158,060 and 158,080); F16's gives 158,050.
GGMLType transposed_type(const Weight& wkv_b) {
  const bool is_float =
      wkv_b.type == GGMLType::F32 || wkv_b.type == GGMLType::F16 || wkv_b.type == GGMLType::BF16;
  return is_float ? GGMLType::F32 : GGMLType::F16;
}

}  // namespace

AbsorbedKvB absorb_kv_b(const Model& model, const Weight& wkv_b) {
  const ModelConfig& c = model.config();
  const MlaConfig& m = c.mla;
  const int nope = m.qk_nope, lora = m.kv_lora_rank;
  const int head_rows = m.qk_nope + m.v_head;  // wkv_b rows per head
  const GGMLType type = transposed_type(wkv_b);
  const size_t row_bytes = type_row_bytes(type, nope);
  AbsorbedKvB out;
  out.uk_t_bytes.resize(static_cast<size_t>(c.n_head) * lora * row_bytes);
  std::vector<float> uk(static_cast<size_t>(nope) * lora);  // W_uk_h (nope, lora)
  std::vector<float> column(nope);                          // one row of W_uk_h^T
  for (int h = 0; h < c.n_head; ++h) {
    const int64_t first = int64_t(h) * head_rows;
    for (int i = 0; i < nope; ++i) {
      dequantize_row(wkv_b.type, wkv_b.row(first + i), uk.data() + size_t(i) * lora, lora);
    }
    unsigned char* dst = out.uk_t_bytes.data() + size_t(h) * lora * row_bytes;
    for (int j = 0; j < lora; ++j) {  // row j of W_uk_h^T = column j of W_uk_h
      for (int i = 0; i < nope; ++i) column[i] = uk[size_t(i) * lora + j];
      quantize_row(type, column.data(), dst + size_t(j) * row_bytes, nope);
    }
    model.file().release(wkv_b.row(first), size_t(nope) * wkv_b.row_bytes);
  }
  for (int h = 0; h < c.n_head; ++h) {
    const Weight uk_t{wkv_b.name + " (key part of head " + std::to_string(h) + ", transposed)",
                      type,
                      lora,
                      nope,
                      out.uk_t_bytes.data() + size_t(h) * lora * row_bytes,
                      row_bytes};
    out.uk_t.push_back(pack_weight(uk_t));
    Weight uv = wkv_b;  // rows first + nope .. first + nope + v_head - 1, as the file has them
    uv.rows = m.v_head;
    uv.data = wkv_b.row(int64_t(h) * head_rows + nope);
    out.uv.push_back(pack_weight(uv));
    if (!out.uv.back().data.empty()) model.file().release(uv.data, size_t(uv.rows) * uv.row_bytes);
  }
  return out;
}
