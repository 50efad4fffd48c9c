// y = x @ w.T for a weight held in GGUF's block quantization (groups of 32 inputs), float32 activations and
// outputs, float32 arithmetic: the CPU kernel of `models/block_linear.py` (which documents the forms).
//   q4: codes uint8 [N, K / 2] (element 2i low nibble, 2i + 1 high), scale, min float16 [N, K / 32]:
//       w_ngj = s_ng q_ngj + m_ng
//   q8: codes int8 [N, K], scale float16 [N, K / 32]: w_ngj = s_ng q_ngj
// (float16 is GGUF's own precision for s and m; each is widened to float32 exactly.) Every weight is decoded to
// the float32 value `QuantizedWeight.dequantize` gives (the product rounded, then the sum; the product of a
// float16 scale and a code is exact in float32, so one FMA rounds the same), then y_tn = sum_k w_nk x_tk.
// Vectorised (AVX2 + FMA + F16C when the CPU has them, else plain C++), each output is 8 lanes of FMA over the
// columns in the kernel's column order, summed at the end: one row of x decodes the weight in registers, more rows
// decode each 3 weight rows once into a per-thread float32 buffer and multiply it by blocks of up to 4 rows of x.
// Both compute every output the same way, so a row's output does not depend on its batch. The column order is the
// natural one for q8; for q4 it is the paired order, which takes each 8 code bytes (16 columns) as their 8 low
// nibbles (the even columns) and then their 8 high nibbles (the odd ones), so that one widening load and a mask or
// a shift decode 8 weights: x is copied into that order once per call. Weight rows are split over torch's
// intra-op threads.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kGroup = 32;
constexpr int kTokenBlock = 4;   // rows of x per register block of the batched product
constexpr int kWeightBlock = 3;  // weight rows per register block (3 x 4 accumulators, 3 weights, 1 input)
constexpr int kVectorRows = 4;   // weight rows decoded together for a single row of x
constexpr int kScaleChunk = 16;  // groups whose scales (and minimums) a single row of x widens at once, per row
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

// Elements [8k, 8k + 8) of a q8 group whose codes start at `codes`, as float32: q s, each rounded.
__attribute__((target("avx2,fma,f16c"))) inline __m256 decode8_q8(const uint8_t* codes, int k, __m256 s) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * k));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), s);
}

// The 16 elements of 8 q4 code bytes as float32, q s + m rounded once: `even` holds elements 0, 2, .., 14 (the low
// nibbles), `odd` elements 1, 3, .., 15 (the high ones), the paired order. One FMA gives `dequantize`'s value, the
// product rounded and then the sum, because the product is exact: a float16 scale's 11 significant bits times a
// 4-bit code fit float32's 24.
struct PairedWeights {
  __m256 even, odd;
};

__attribute__((target("avx2,fma,f16c"))) inline PairedWeights decode16_q4(const uint8_t* codes, __m256 s,
                                                                         __m256 m) {
  const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  const __m256 low = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, _mm256_set1_epi32(0x0F)));
  const __m256 high = _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4));
  return {_mm256_fmadd_ps(low, s, m), _mm256_fmadd_ps(high, s, m)};
}

// One group's 32 weights into w (float32) in the kernel's column order (q4: paired), the values `dequantize` gives.
template <bool Q4>
__attribute__((target("avx2,fma,f16c"))) void decode_group_avx2(const uint8_t* codes, float s, float m, float* w) {
  const __m256 scale = _mm256_set1_ps(s), minimum = _mm256_set1_ps(m);
  if (Q4) {
    for (int half = 0; half < 2; ++half) {
      const PairedWeights decoded = decode16_q4(codes + 8 * half, scale, minimum);
      _mm256_storeu_ps(w + 16 * half, decoded.even);
      _mm256_storeu_ps(w + 16 * half + 8, decoded.odd);
    }
    return;
  }
  for (int k = 0; k < 4; ++k) _mm256_storeu_ps(w + 8 * k, decode8_q8(codes, k, scale));
}

// One group's 32 weights into w (float32) in the natural order: the paired halves interleaved back.
template <bool Q4>
__attribute__((target("avx2,fma,f16c"))) void dequantize_group_avx2(const uint8_t* codes, float s, float m, float* w) {
  if (!Q4) return decode_group_avx2<false>(codes, s, m, w);
  const __m256 scale = _mm256_set1_ps(s), minimum = _mm256_set1_ps(m);
  for (int half = 0; half < 2; ++half) {
    const PairedWeights decoded = decode16_q4(codes + 8 * half, scale, minimum);
    const __m256 first = _mm256_unpacklo_ps(decoded.even, decoded.odd);  // elements 0-3 | 8-11
    const __m256 second = _mm256_unpackhi_ps(decoded.even, decoded.odd);  // elements 4-7 | 12-15
    _mm256_storeu_ps(w + 16 * half, _mm256_permute2f128_ps(first, second, 0x20));
    _mm256_storeu_ps(w + 16 * half + 8, _mm256_permute2f128_ps(first, second, 0x31));
  }
}

// x [tokens, columns] copied into the paired order of q4 (see the header).
__attribute__((target("avx2,fma,f16c"))) void pair_columns(const float* x, int64_t tokens, int64_t columns,
                                                           float* paired) {
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int64_t i = 0; i < tokens * columns; i += 16) {
    const __m256 first = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + i), even);       // 0 2 4 6 | 1 3 5 7
    const __m256 second = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + i + 8), even);  // 8 .. 14 | 9 .. 15
    _mm256_storeu_ps(paired + i, _mm256_permute2f128_ps(first, second, 0x20));
    _mm256_storeu_ps(paired + i + 8, _mm256_permute2f128_ps(first, second, 0x31));
  }
}

// n float16 values (n <= kScaleChunk) widened to float32 (exactly) into out.
__attribute__((target("avx2,fma,f16c"))) inline void widen_halves(const at::Half* values, int n, float* out) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values + i))));
  }
  for (; i < n; ++i) out[i] = _cvtsh_ss(values[i].x);
}

// R consecutive weight rows against one row x (in the kernel's column order), the codes decoded in registers.
template <bool Q4, int R>
__attribute__((target("avx2,fma,f16c"))) void rows_vector(const uint8_t* codes, int64_t row_bytes,
                                                          const at::Half* scale, const at::Half* minimum,
                                                          const float* x, int64_t groups, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  float scales[R][kScaleChunk], minimums[R][kScaleChunk];
  for (int64_t chunk = 0; chunk < groups; chunk += kScaleChunk) {
    const int chunk_groups = static_cast<int>(std::min<int64_t>(kScaleChunk, groups - chunk));
    for (int r = 0; r < R; ++r) {
      widen_halves(scale + r * groups + chunk, chunk_groups, scales[r]);
      if (Q4) widen_halves(minimum + r * groups + chunk, chunk_groups, minimums[r]);
    }
    for (int i = 0; i < chunk_groups; ++i) {
      const int64_t g = chunk + i;
      const float* group_x = x + g * kGroup;
      for (int r = 0; r < R; ++r) {
        const uint8_t* group_codes = codes + r * row_bytes + g * group_bytes<Q4>();
        _mm_prefetch(reinterpret_cast<const char*>(group_codes + kPrefetchBytes), _MM_HINT_T0);
        const __m256 s = _mm256_broadcast_ss(&scales[r][i]);
        if (Q4) {
          const __m256 m = _mm256_broadcast_ss(&minimums[r][i]);
          for (int half = 0; half < 2; ++half) {
            const PairedWeights decoded = decode16_q4(group_codes + 8 * half, s, m);
            acc[r] = _mm256_fmadd_ps(decoded.even, _mm256_loadu_ps(group_x + 16 * half), acc[r]);
            acc[r] = _mm256_fmadd_ps(decoded.odd, _mm256_loadu_ps(group_x + 16 * half + 8), acc[r]);
          }
        } else {
          for (int k = 0; k < 4; ++k) {
            acc[r] = _mm256_fmadd_ps(decode8_q8(group_codes, k, s), _mm256_loadu_ps(group_x + 8 * k), acc[r]);
          }
        }
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

// Weight rows [0, rows) against `tokens` rows of x in the kernel's column order (out [tokens, out_stride] from its
// column 0): one row of x through `rows_vector`, more through the decoded buffer and `block_product`.
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
        decode_group_avx2<Q4>(group_codes, _cvtsh_ss(scale[i].x), Q4 ? _cvtsh_ss(minimum[i].x) : 0.f,
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
  std::vector<float> paired;
  if (Q4 && use_avx2) {
    paired.resize(tokens * columns);
    pair_columns(inputs, tokens, columns, paired.data());
  }
  const float* kernel_inputs = paired.empty() ? inputs : paired.data();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    if (use_avx2) {
      rows_avx2<Q4>(end - begin, tokens, code_data + begin * row_bytes, row_bytes, scale_data + begin * groups,
                    Q4 ? min_data + begin * groups : nullptr, kernel_inputs, groups, out_data + begin, rows);
      return;
    }
    for (int64_t n = begin; n < end; ++n) {
      row_generic<Q4>(code_data + n * row_bytes, scale_data + n * groups, Q4 ? min_data + n * groups : nullptr,
                      inputs, groups, tokens, out_data + n, rows);
    }
  });
  return out;
}

// w [N, K] float32, as `QuantizedWeight.dequantize` computes it (the product rounded, then the sum).
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
