// y = x @ w.T for a weight held in GGUF's block quantization (groups of 32 inputs), float32 activations and
// outputs, float32 arithmetic: the CPU kernel of `models/block_linear.py` (which documents the forms).
//   q4: codes uint8 [N, K / 2] (element 2i low nibble, 2i + 1 high), scale, min float16 [N, K / 32]:
//       w_ngj = s_ng q_ngj + m_ng
//   q8: codes int8 [N, K], scale float16 [N, K / 32]: w_ngj = s_ng q_ngj
// (float16 is GGUF's own precision for s and m; each is widened to float32 exactly.) Every weight is decoded to
// the float32 value `QuantizedWeight.dequantize` gives (the product rounded, then the sum: built without
// floating-point contraction), then y_tn = sum_k w_nk x_tk.
// Vectorised (AVX2 + FMA + F16C when the CPU has them, else plain C++), each output is 8 lanes of FMA over the
// columns in order, summed at the end: one row of x decodes the weight in registers, more rows decode each
// 3 weight rows once into a per-thread float32 buffer and multiply it by blocks of up to 4 rows of x. Both
// compute every output the same way, so a row's output does not depend on its batch. Weight rows are split over
// torch's intra-op threads.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kGroup = 32;
constexpr int kTokenBlock = 4;   // rows of x per register block of the batched product
constexpr int kWeightBlock = 3;  // weight rows per register block (3 x 4 accumulators, 3 weights, 1 input)
constexpr int kVectorRows = 4;   // weight rows decoded together for a single row of x
// How far ahead of its reads a row's codes are prefetched: the hardware prefetcher alone left the matrix-vector
// kernel waiting on memory (the Q8_0 logits table took 2x as long without; 1 to 4 KiB measured alike).
constexpr int64_t kPrefetchBytes = 2048;

// One weight row n against `tokens` rows of x, plain C++.
template <bool Q4>
void row_generic(const uint8_t* codes, const at::Half* scale, const at::Half* minimum, const float* inputs,
                 int64_t groups, int64_t tokens, float* out, int64_t out_stride) {
  const int64_t columns = groups * kGroup;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = inputs + t * columns;
    float total = 0.f;
    for (int64_t g = 0; g < groups; ++g) {
      const float s = static_cast<float>(scale[g]);
      for (int64_t j = 0; j < kGroup; ++j) {
        float w;
        if (Q4) {
          const uint8_t byte = codes[g * 16 + j / 2];
          w = static_cast<float>(j % 2 == 0 ? (byte & 0x0F) : (byte >> 4)) * s + static_cast<float>(minimum[g]);
        } else {
          w = static_cast<float>(static_cast<int8_t>(codes[g * kGroup + j])) * s;
        }
        total += w * x[g * kGroup + j];
      }
    }
    out[t * out_stride] = total;
  }
}

__attribute__((target("avx2,fma,f16c"))) inline float horizontal_sum(__m256 v) {
  __m128 low = _mm256_castps256_ps128(v), high = _mm256_extractf128_ps(v, 1);
  __m128 sum = _mm_add_ps(low, high);
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}

template <bool Q4>
constexpr int64_t group_bytes() {
  return Q4 ? kGroup / 2 : kGroup;
}

// Elements [8k, 8k + 8) of the group whose codes start at `codes`, as float32: q s (+ m), each rounded.
template <bool Q4>
__attribute__((target("avx2,fma,f16c"))) inline __m256 decode8(const uint8_t* codes, int k, __m256 s, __m256 m) {
  if (Q4) {
    // A 32-bit word of codes holds 8 consecutive elements' nibbles (element 2i low, 2i + 1 high): broadcast it
    // to every lane and shift each lane to its own nibble.
    uint32_t word;
    std::memcpy(&word, codes + 4 * k, sizeof word);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i nibbles = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts),
                                             _mm256_set1_epi32(0x0F));
    return _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(nibbles), s), m);
  }
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * k));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), s);
}

// One group's 32 weights into w (float32), the same values as the plain loop's.
template <bool Q4>
__attribute__((target("avx2,fma,f16c"))) void dequantize_group_avx2(const uint8_t* codes, float s, float m, float* w) {
  const __m256 scale = _mm256_set1_ps(s), minimum = _mm256_set1_ps(m);
  for (int k = 0; k < 4; ++k) _mm256_storeu_ps(w + 8 * k, decode8<Q4>(codes, k, scale, minimum));
}

// R consecutive weight rows against one row x, the codes decoded in registers.
template <bool Q4, int R>
__attribute__((target("avx2,fma,f16c"))) void rows_vector(const uint8_t* codes, int64_t row_bytes,
                                                          const at::Half* scale, const at::Half* minimum,
                                                          const float* x, int64_t groups, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const float* group_x = x + g * kGroup;
    for (int r = 0; r < R; ++r) {
      const uint8_t* group_codes = codes + r * row_bytes + g * group_bytes<Q4>();
      _mm_prefetch(reinterpret_cast<const char*>(group_codes + kPrefetchBytes), _MM_HINT_T0);
      const __m256 s = _mm256_set1_ps(_cvtsh_ss(scale[r * groups + g].x));
      const __m256 m = Q4 ? _mm256_set1_ps(_cvtsh_ss(minimum[r * groups + g].x)) : _mm256_setzero_ps();
      for (int k = 0; k < 4; ++k) {
        acc[r] = _mm256_fmadd_ps(decode8<Q4>(group_codes, k, s, m), _mm256_loadu_ps(group_x + 8 * k), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = horizontal_sum(acc[r]);
}

// R decoded weight rows w [R, columns] against TB rows of x: R x TB accumulators, the same FMA sequence per
// output as `rows_vector`'s.
template <int R, int TB>
__attribute__((target("avx2,fma,f16c"))) void block_product(const float* w, const float* x, int64_t columns,
                                                            float* out, int64_t out_stride) {
  __m256 acc[R][TB];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < TB; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t c = 0; c < columns; c += 8) {
    __m256 weights[R];
    for (int r = 0; r < R; ++r) weights[r] = _mm256_loadu_ps(w + r * columns + c);
    for (int t = 0; t < TB; ++t) {
      const __m256 input = _mm256_loadu_ps(x + t * columns + c);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(weights[r], input, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < TB; ++t) out[t * out_stride + r] = horizontal_sum(acc[r][t]);
  }
}

using BlockProduct = void (*)(const float*, const float*, int64_t, float*, int64_t);
constexpr BlockProduct kBlockProducts[kWeightBlock][kTokenBlock] = {
    {block_product<1, 1>, block_product<1, 2>, block_product<1, 3>, block_product<1, 4>},
    {block_product<2, 1>, block_product<2, 2>, block_product<2, 3>, block_product<2, 4>},
    {block_product<3, 1>, block_product<3, 2>, block_product<3, 3>, block_product<3, 4>},
};

// Weight rows [0, rows) against `tokens` rows of x (out [tokens, out_stride] from its column 0): one row of x
// through `rows_vector`, more through the decoded buffer and `block_product`.
template <bool Q4>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2(int64_t rows, int64_t tokens, const uint8_t* codes,
                                                        int64_t row_bytes, const at::Half* scale,
                                                        const at::Half* minimum, const float* inputs,
                                                        int64_t groups, float* out, int64_t out_stride) {
  if (tokens == 1) {
    for (int64_t n = 0; n < rows; n += kVectorRows) {
      const uint8_t* c = codes + n * row_bytes;
      const at::Half* s = scale + n * groups;
      const at::Half* m = Q4 ? minimum + n * groups : nullptr;
      switch (std::min<int64_t>(kVectorRows, rows - n)) {
        case 1: rows_vector<Q4, 1>(c, row_bytes, s, m, inputs, groups, out + n); break;
        case 2: rows_vector<Q4, 2>(c, row_bytes, s, m, inputs, groups, out + n); break;
        case 3: rows_vector<Q4, 3>(c, row_bytes, s, m, inputs, groups, out + n); break;
        default: rows_vector<Q4, 4>(c, row_bytes, s, m, inputs, groups, out + n); break;
      }
    }
    return;
  }
  const int64_t columns = groups * kGroup;
  std::vector<float> decoded(kWeightBlock * columns);
  for (int64_t n = 0; n < rows; n += kWeightBlock) {
    const int block = static_cast<int>(std::min<int64_t>(kWeightBlock, rows - n));
    for (int r = 0; r < block; ++r) {
      const uint8_t* row_codes = codes + (n + r) * row_bytes;
      for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* group_codes = row_codes + g * group_bytes<Q4>();
        _mm_prefetch(reinterpret_cast<const char*>(group_codes + kPrefetchBytes), _MM_HINT_T0);
        const int64_t i = (n + r) * groups + g;
        dequantize_group_avx2<Q4>(group_codes, _cvtsh_ss(scale[i].x), Q4 ? _cvtsh_ss(minimum[i].x) : 0.f,
                                  decoded.data() + r * columns + g * kGroup);
      }
    }
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokenBlock) {
      const int64_t token_block = std::min<int64_t>(kTokenBlock, tokens - t0);
      kBlockProducts[block - 1][token_block - 1](decoded.data(), inputs + t0 * columns, columns,
                                                 out + t0 * out_stride + n, out_stride);
    }
  }
}

bool has_avx2() {
  static const bool supported =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return supported;
}

template <bool Q4>
at::Tensor block_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale,
                        const at::Tensor& minimum, bool vectorised) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.device().is_cpu(),
              "block_linear: x must be a contiguous float32 CPU matrix");
  const int64_t tokens = x.size(0), columns = x.size(1), rows = scale.size(0), groups = scale.size(1);
  TORCH_CHECK(columns == groups * kGroup, "block_linear: x has ", columns, " columns, the weight ", groups * kGroup);
  TORCH_CHECK(scale.scalar_type() == at::kHalf && scale.is_contiguous(), "block_linear: scale must be float16");
  TORCH_CHECK(codes.is_contiguous() && codes.size(0) == rows && codes.size(1) == (Q4 ? columns / 2 : columns),
              "block_linear: codes of the wrong shape");
  TORCH_CHECK(codes.scalar_type() == (Q4 ? at::kByte : at::kChar), "block_linear: codes of the wrong dtype");
  if (Q4) {
    TORCH_CHECK(minimum.scalar_type() == at::kHalf && minimum.is_contiguous() && minimum.sizes() == scale.sizes(),
                "block_linear: min must be float16 like scale");
  }
  at::Tensor out = at::empty({tokens, rows}, x.options());
  if (tokens == 0 || rows == 0) return out;
  const uint8_t* code_data = static_cast<const uint8_t*>(codes.data_ptr());
  const at::Half* scale_data = scale.data_ptr<at::Half>();
  const at::Half* min_data = Q4 ? minimum.data_ptr<at::Half>() : nullptr;
  const float* inputs = x.data_ptr<float>();
  float* out_data = out.data_ptr<float>();
  const int64_t row_bytes = Q4 ? columns / 2 : columns;
  const bool use_avx2 = vectorised && has_avx2();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    if (use_avx2) {
      rows_avx2<Q4>(end - begin, tokens, code_data + begin * row_bytes, row_bytes, scale_data + begin * groups,
                    Q4 ? min_data + begin * groups : nullptr, inputs, groups, out_data + begin, rows);
      return;
    }
    for (int64_t n = begin; n < end; ++n) {
      row_generic<Q4>(code_data + n * row_bytes, scale_data + n * groups, Q4 ? min_data + n * groups : nullptr,
                      inputs, groups, tokens, out_data + n, rows);
    }
  });
  return out;
}

// w [N, K] float32, as `QuantizedWeight.dequantize` computes it (the product rounded, then the sum: built
// without floating-point contraction).
at::Tensor dequantize(const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& minimum, bool q4,
                      bool vectorised) {
  const int64_t rows = scale.size(0), groups = scale.size(1), columns = groups * kGroup;
  TORCH_CHECK(codes.is_contiguous() && scale.is_contiguous() && scale.scalar_type() == at::kHalf,
              "dequantize: contiguous codes and float16 scale expected");
  TORCH_CHECK(!q4 || (minimum.is_contiguous() && minimum.scalar_type() == at::kHalf), "dequantize: float16 min expected");
  at::Tensor out = at::empty({rows, columns}, scale.options().dtype(at::kFloat));
  const uint8_t* code_data = static_cast<const uint8_t*>(codes.data_ptr());
  const at::Half* scale_data = scale.data_ptr<at::Half>();
  const at::Half* min_data = q4 ? minimum.data_ptr<at::Half>() : nullptr;
  float* out_data = out.data_ptr<float>();
  const bool use_avx2 = vectorised && has_avx2();
  at::parallel_for(0, rows * groups, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float s = static_cast<float>(scale_data[i]);
      float* w = out_data + i * kGroup;
      if (use_avx2) {
        if (q4) {
          dequantize_group_avx2<true>(code_data + i * 16, s, static_cast<float>(min_data[i]), w);
        } else {
          dequantize_group_avx2<false>(code_data + i * kGroup, s, 0.f, w);
        }
      } else if (q4) {
        const uint8_t* bytes = code_data + i * 16;
        const float m = static_cast<float>(min_data[i]);
        for (int64_t j = 0; j < 16; ++j) {
          w[2 * j] = static_cast<float>(bytes[j] & 0x0F) * s + m;
          w[2 * j + 1] = static_cast<float>(bytes[j] >> 4) * s + m;
        }
      } else {
        const int8_t* values = reinterpret_cast<const int8_t*>(code_data) + i * kGroup;
        for (int64_t j = 0; j < kGroup; ++j) w[j] = static_cast<float>(values[j]) * s;
      }
    }
  });
  return out;
}

at::Tensor q4_dequantize(const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& minimum,
                         bool vectorised) {
  return dequantize(codes, scale, minimum, true, vectorised);
}

at::Tensor q8_dequantize(const at::Tensor& codes, const at::Tensor& scale, bool vectorised) {
  return dequantize(codes, scale, at::Tensor(), false, vectorised);
}

at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale,
                     const at::Tensor& minimum, bool vectorised) {
  return block_linear<true>(x, codes, scale, minimum, vectorised);
}

at::Tensor q8_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale, bool vectorised) {
  return block_linear<false>(x, codes, scale, at::Tensor(), vectorised);
}

}  // namespace

TORCH_LIBRARY(arbi_block_linear, m) {
  m.def("q4_linear(Tensor x, Tensor codes, Tensor scale, Tensor minimum, bool vectorised) -> Tensor", &q4_linear);
  m.def("q8_linear(Tensor x, Tensor codes, Tensor scale, bool vectorised) -> Tensor", &q8_linear);
  m.def("q4_dequantize(Tensor codes, Tensor scale, Tensor minimum, bool vectorised) -> Tensor", &q4_dequantize);
  m.def("q8_dequantize(Tensor codes, Tensor scale, bool vectorised) -> Tensor", &q8_dequantize);
}
