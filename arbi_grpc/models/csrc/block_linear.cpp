// y = x @ w.T for a weight held in GGUF's block quantization (groups of 32 inputs), float32 activations and
// outputs, float32 arithmetic: the CPU kernel of `models/block_linear.py` (which documents the forms).
//   q4: codes uint8 [N, K / 2] (element 2i low nibble, 2i + 1 high), scale, min float16 [N, K / 32]:
//       y_tn = sum_g s_ng (sum_j x_tgj q_ngj) + sum_g m_ng (sum_j x_tgj)
//   q8: codes int8 [N, K], scale float16 [N, K / 32]: y_tn = sum_g s_ng (sum_j x_tgj q_ngj)
// (float16 is GGUF's own precision for s and m; each is widened to float32 exactly.)
// The codes are widened to float32 in registers (AVX2 + FMA + F16C when the CPU has them, else plain C++); every
// token's arithmetic is the same whatever the batch, so a row's output does not depend on its neighbours.
// Rows are split over torch's intra-op threads.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace {

constexpr int64_t kGroup = 32;
constexpr int64_t kTokenBlock = 4;
constexpr int64_t kMaxGroups = 1024;  // K up to 32,768 (the vectorised kernel's per-row scratch)
// How far ahead of its reads a row's codes are prefetched: the hardware prefetcher alone left the matrix-vector
// kernel waiting on memory (the Q8_0 logits table took 2x as long without; 1 to 4 KiB measured alike).
constexpr int64_t kPrefetchBytes = 2048;

// The activations' sums per group [T, G] (q4's min term), once per call.
at::Tensor group_sums(const at::Tensor& x) {
  const int64_t tokens = x.size(0), columns = x.size(1), groups = columns / kGroup;
  at::Tensor sums = at::empty({tokens, groups}, x.options());
  const float* source = x.data_ptr<float>();
  float* sum = sums.data_ptr<float>();
  for (int64_t i = 0; i < tokens * groups; ++i) {
    float total = 0.f;
    for (int64_t j = 0; j < kGroup; ++j) total += source[i * kGroup + j];
    sum[i] = total;
  }
  return sums;
}

// One row n of the weight against tokens [t0, t0 + TB), plain C++.
template <bool Q4>
void row_generic(const uint8_t* codes, const at::Half* scale, const at::Half* minimum, const float* inputs,
                 const float* sums, int64_t groups, int64_t tokens, float* out, int64_t out_stride) {
  const int64_t columns = groups * kGroup;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = inputs + t * columns;
    float total = 0.f;
    for (int64_t g = 0; g < groups; ++g) {
      float dot = 0.f;
      for (int64_t j = 0; j < kGroup; ++j) {
        int code;
        if (Q4) {
          const uint8_t byte = codes[g * 16 + j / 2];
          code = j % 2 == 0 ? (byte & 0x0F) : (byte >> 4);
        } else {
          code = static_cast<int8_t>(codes[g * kGroup + j]);
        }
        dot += x[g * kGroup + j] * static_cast<float>(code);
      }
      total += static_cast<float>(scale[g]) * dot;
      if (Q4) total += static_cast<float>(minimum[g]) * sums[t * groups + g];
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

// float16 -> float32 of n values.
__attribute__((target("avx2,fma,f16c"))) inline void widen(const at::Half* source, float* target, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(target + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(source + i))));
  }
  for (; i < n; ++i) target[i] = _cvtsh_ss(source[i].x);
}

// sum_i a_i b_i over n values (8 lanes, then the rest in order).
__attribute__((target("avx2,fma,f16c"))) inline float dot(const float* a, const float* b, int64_t n) {
  __m256 total = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) total = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), total);
  float sum = horizontal_sum(total);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// R consecutive rows against TB tokens (TB <= kTokenBlock): each group's 32 codes widened once and used by every
// token, each token's inputs loaded once for the R rows. A row's arithmetic is the same for any R and TB.
template <bool Q4, int TB, int R>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2(const uint8_t* codes, int64_t row_bytes, const at::Half* scale,
                                                    const at::Half* minimum, const float* inputs, const float* sums,
                                                    int64_t groups, float* out, int64_t out_stride) {
  const int64_t columns = groups * kGroup;
  // The rows' scales widened to float32 once, and their min terms sum_g m_g (sum_j x_gj) per token.
  float scales[R][kMaxGroups];
  float offset[R][TB];
  for (int r = 0; r < R; ++r) {
    widen(scale + r * groups, scales[r], groups);
    for (int t = 0; t < TB; ++t) offset[r][t] = 0.f;
    if (Q4) {
      float mins[kMaxGroups];
      widen(minimum + r * groups, mins, groups);
      for (int t = 0; t < TB; ++t) offset[r][t] = dot(mins, sums + t * groups, groups);
    }
  }
  __m256 acc[R][TB];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < TB; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  const __m256i nibble = _mm256_set1_epi32(0x0F);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  for (int64_t g = 0; g < groups; ++g) {
    __m256 w[R][4];
    for (int r = 0; r < R; ++r) {
      const uint8_t* row_codes = codes + r * row_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(row_codes + (Q4 ? 16 : kGroup) * g + kPrefetchBytes), _MM_HINT_T0);
      if (Q4) {
        // A 32-bit word of codes holds 8 consecutive elements' nibbles (element 2i low, 2i + 1 high): broadcast
        // it to every lane and shift each lane to its own nibble.
        const __m256i both = _mm256_broadcastsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(row_codes + g * 16)));
        const __m256i words[4] = {_mm256_shuffle_epi32(both, 0x00), _mm256_shuffle_epi32(both, 0x55),
                                  _mm256_shuffle_epi32(both, 0xAA), _mm256_shuffle_epi32(both, 0xFF)};
        for (int k = 0; k < 4; ++k) {
          w[r][k] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(words[k], shifts), nibble));
        }
      } else {
        const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row_codes + g * kGroup));
        const __m128i second = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row_codes + g * kGroup + 16));
        w[r][0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(first));
        w[r][1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(first, 8)));
        w[r][2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(second));
        w[r][3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(second, 8)));
      }
    }
    for (int t = 0; t < TB; ++t) {
      const float* x = inputs + t * columns + g * kGroup;
      const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
      const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
      for (int r = 0; r < R; ++r) {
        const __m256 first = _mm256_fmadd_ps(w[r][1], x1, _mm256_mul_ps(w[r][0], x0));
        const __m256 second = _mm256_fmadd_ps(w[r][3], x3, _mm256_mul_ps(w[r][2], x2));
        acc[r][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(&scales[r][g]), _mm256_add_ps(first, second), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < TB; ++t) out[t * out_stride + r] = horizontal_sum(acc[r][t]) + offset[r][t];
  }
}

// Rows [0, rows) of a weight block against `tokens` (<= kTokenBlock) tokens: a single token takes rows in pairs.
template <bool Q4>
void block_avx2(int64_t rows, int tokens, const uint8_t* codes, int64_t row_bytes, const at::Half* scale,
                const at::Half* minimum, const float* inputs, const float* sums, int64_t groups, float* out,
                int64_t out_stride) {
  for (int64_t n = 0; n < rows;) {
    const uint8_t* c = codes + n * row_bytes;
    const at::Half* s = scale + n * groups;
    const at::Half* m = Q4 ? minimum + n * groups : nullptr;
    if (tokens == 1 && n + 1 < rows) {
      rows_avx2<Q4, 1, 2>(c, row_bytes, s, m, inputs, sums, groups, out + n, out_stride);
      n += 2;
      continue;
    }
    switch (tokens) {
      case 1: rows_avx2<Q4, 1, 1>(c, row_bytes, s, m, inputs, sums, groups, out + n, out_stride); break;
      case 2: rows_avx2<Q4, 2, 1>(c, row_bytes, s, m, inputs, sums, groups, out + n, out_stride); break;
      case 3: rows_avx2<Q4, 3, 1>(c, row_bytes, s, m, inputs, sums, groups, out + n, out_stride); break;
      default: rows_avx2<Q4, 4, 1>(c, row_bytes, s, m, inputs, sums, groups, out + n, out_stride); break;
    }
    n += 1;
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
  const at::Tensor sum_tensor = Q4 ? group_sums(x) : at::Tensor();
  const uint8_t* code_data = static_cast<const uint8_t*>(codes.data_ptr());
  const at::Half* scale_data = scale.data_ptr<at::Half>();
  const at::Half* min_data = Q4 ? minimum.data_ptr<at::Half>() : nullptr;
  const float* inputs = x.data_ptr<float>();
  const float* sums = Q4 ? sum_tensor.data_ptr<float>() : nullptr;
  float* out_data = out.data_ptr<float>();
  const int64_t row_bytes = Q4 ? columns / 2 : columns;
  const bool use_avx2 = vectorised && has_avx2() && groups <= kMaxGroups;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokenBlock) {
      const int64_t block = std::min(kTokenBlock, tokens - t0);
      const float* block_inputs = inputs + t0 * columns;
      const float* block_sums = Q4 ? sums + t0 * groups : nullptr;
      float* block_out = out_data + t0 * rows;
      if (use_avx2) {
        block_avx2<Q4>(end - begin, static_cast<int>(block), code_data + begin * row_bytes, row_bytes,
                       scale_data + begin * groups, Q4 ? min_data + begin * groups : nullptr, block_inputs,
                       block_sums, groups, block_out + begin, rows);
        continue;
      }
      for (int64_t n = begin; n < end; ++n) {
        row_generic<Q4>(code_data + n * row_bytes, scale_data + n * groups, Q4 ? min_data + n * groups : nullptr,
                        block_inputs, block_sums, groups, block, block_out + n, rows);
      }
    }
  });
  return out;
}

// One group's 32 weights into w (float32), 8 lanes at a time: q4 codes (element 2j the low nibble of byte j,
// 2j + 1 the high) times s, plus m, rounded after each; q8 codes times s. The same values as the plain loop.
template <bool Q4>
__attribute__((target("avx2,fma,f16c"))) void dequantize_group_avx2(const uint8_t* codes, float s, float m, float* w) {
  const __m256 scale = _mm256_set1_ps(s), minimum = _mm256_set1_ps(m);
  __m128i bytes[4];
  if (Q4) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i low = _mm_and_si128(packed, _mm_set1_epi8(0x0F));
    const __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F));
    const __m128i first = _mm_unpacklo_epi8(low, high), second = _mm_unpackhi_epi8(low, high);  // elements 0-15, 16-31
    bytes[0] = first, bytes[1] = _mm_srli_si128(first, 8), bytes[2] = second, bytes[3] = _mm_srli_si128(second, 8);
  } else {
    const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i second = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16));
    bytes[0] = first, bytes[1] = _mm_srli_si128(first, 8), bytes[2] = second, bytes[3] = _mm_srli_si128(second, 8);
  }
  for (int k = 0; k < 4; ++k) {
    const __m256i wide = Q4 ? _mm256_cvtepu8_epi32(bytes[k]) : _mm256_cvtepi8_epi32(bytes[k]);
    __m256 value = _mm256_mul_ps(_mm256_cvtepi32_ps(wide), scale);
    if (Q4) value = _mm256_add_ps(value, minimum);
    _mm256_storeu_ps(w + 8 * k, value);
  }
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
