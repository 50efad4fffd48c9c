// y = x @ w.T for a weight held in GGUF's block quantization (block_linear.cpp's forms: Q4_1 codes uint8 [N, K / 2],
// element 2i in the low nibble and 2i + 1 in the high one, scale and min float16 [N, K / 32]; Q8_0 codes int8 [N, K],
// scale float16 [N, K / 32]) with x [T, K] float32 quantized to int8 per 32-column block and each block multiplied in
// integers: the kernel of `models/block_linear_int8_dot.py` (which states what it computes and its error).
//
// Activations, per row t and block g (32 columns j):
//   d = max_j |x_j| / 127, q_j = round-half-even(x_j * (1 / d)) (0 when d is 0; |q_j| <= 127), s = d * sum_j q_j,
// each a float32 operation. For Q4_1 the block's codes are held even columns first, then the odd ones (the order of
// the weight's low nibbles, then its high ones), for Q8_0 in column order.
// Outputs: per output and block in order, with the block's integer dot p = sum_j q_w,j q_x,j exact (int32):
//   acc = fma(d_w * d_x, p, acc), then for Q4_1 acc = fma(m_w, s_x, acc);   y = acc.
// The AVX2 path and the plain C++ one compute exactly that, and every output is computed alike whatever the batch.
// The AVX2 path holds 8 weight rows' values in the 8 lanes of a vector (maddubs/madd: Q4_1 nibbles are the unsigned
// operand; Q8_0 takes |q_w| against q_x with q_w's sign; no 16-bit sum can overflow): one row of x reduces each of 8
// rows' block products across lanes; more rows unpack the 8 rows once per call into a per-thread buffer with each
// 4 columns' codes of the 8 rows side by side, then multiply it by up to 4 rows of x at a time, each 4 activation
// codes broadcast to the 8 lanes. Blocks of 8 weight rows are split over torch's intra-op threads.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

namespace {

constexpr int64_t kGroup = 32;
constexpr int kRows = 8;        // weight rows per vector, one a lane
constexpr int kTokenBlock = 4;  // rows of x per register block of the batched product

// x [T, K] quantized: codes int8 [T, K] (per block in the weight's order), scale and sum float32 [T, K / 32].
struct Activations {
  const int8_t* codes;
  const float* scale;
  const float* sum;
  int64_t groups;
};

template <bool Q4>
constexpr int64_t group_bytes() {
  return Q4 ? kGroup / 2 : kGroup;
}

// Where column j of a block goes: for Q4_1 the even columns first, then the odd ones.
inline int block_position(int j, bool q4_order) { return q4_order ? (j % 2) * 16 + j / 2 : j; }

void quantize_block_generic(const float* x, bool q4_order, int8_t* q, float* scale, float* sum) {
  float amax = 0.f;
  for (int j = 0; j < kGroup; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.f;
  const float inverse = d != 0.f ? 1.f / d : 0.f;
  int total = 0;
  for (int j = 0; j < kGroup; ++j) {
    const int value = static_cast<int>(std::nearbyint(x[j] * inverse));  // the default rounding: half to even
    total += value;
    q[block_position(j, q4_order)] = static_cast<int8_t>(value);
  }
  *scale = d;
  *sum = d * static_cast<float>(total);
}

__attribute__((target("avx2,fma,f16c"))) void quantize_block_avx2(const float* x, bool q4_order, int8_t* q,
                                                                   float* scale, float* sum) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 v[4];
  __m256 amax8 = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, v[k]));
  }
  __m128 amax4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
  amax4 = _mm_max_ps(amax4, _mm_movehl_ps(amax4, amax4));
  amax4 = _mm_max_ss(amax4, _mm_movehdup_ps(amax4));
  const float d = _mm_cvtss_f32(amax4) / 127.f;
  const __m256 inverse = _mm256_set1_ps(d != 0.f ? 1.f / d : 0.f);
  __m256i values[4];
  for (int k = 0; k < 4; ++k) {
    values[k] = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v[k], inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  const __m256i total8 =
      _mm256_add_epi32(_mm256_add_epi32(values[0], values[1]), _mm256_add_epi32(values[2], values[3]));
  __m128i total4 = _mm_add_epi32(_mm256_castsi256_si128(total8), _mm256_extracti128_si256(total8, 1));
  total4 = _mm_add_epi32(total4, _mm_shuffle_epi32(total4, 0x4E));
  total4 = _mm_add_epi32(total4, _mm_shuffle_epi32(total4, 0xB1));
  // packs work within 128-bit halves: the 4-byte groups come out as columns 0, 8, 16, 24, 4, 12, 20, 28 (+0..3)
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(values[0], values[1]),
                                            _mm256_packs_epi32(values[2], values[3]));
  __m256i ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  if (q4_order) {
    // each 16-byte half to its even bytes then its odd ones, then the halves' even parts before their odd parts
    const __m256i evens_first = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                                 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    ordered = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(ordered, evens_first), _MM_SHUFFLE(3, 1, 2, 0));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
  *scale = d;
  *sum = d * static_cast<float>(_mm_cvtsi128_si32(total4));
}

bool has_avx2() {
  static const bool supported =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return supported;
}

// One weight row against `tokens` rows of x, plain C++.
template <bool Q4>
void row_generic(const uint8_t* codes, const at::Half* scale, const at::Half* minimum, const Activations& x,
                 int64_t tokens, float* out, int64_t out_stride) {
  const int64_t groups = x.groups;
  for (int64_t t = 0; t < tokens; ++t) {
    float acc = 0.f;
    for (int64_t g = 0; g < groups; ++g) {
      const int8_t* q = x.codes + (t * groups + g) * kGroup;
      const uint8_t* c = codes + g * group_bytes<Q4>();
      int32_t dot = 0;
      for (int i = 0; i < kGroup; ++i) {
        const int w = Q4 ? (i < 16 ? c[i] & 0x0F : c[i - 16] >> 4) : static_cast<int8_t>(c[i]);
        dot += w * q[i];
      }
      acc = std::fma(static_cast<float>(scale[g]) * x.scale[t * groups + g], static_cast<float>(dot), acc);
      if (Q4) acc = std::fma(static_cast<float>(minimum[g]), x.sum[t * groups + g], acc);
    }
    out[t * out_stride] = acc;
  }
}

// A Q4_1 group's 16 bytes as 32 unsigned codes: the low nibbles, then the high ones.
__attribute__((target("avx2,fma,f16c"))) inline __m256i nibbles(const uint8_t* codes) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(bytes), _mm_srli_epi16(bytes, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// A weight block (its codes at c) times activation codes q: 8 int32 lanes, lane l the products of codes 4l..4l+3.
template <bool Q4>
__attribute__((target("avx2,fma,f16c"))) inline __m256i block_lanes(const uint8_t* c, __m256i q) {
  const __m256i ones = _mm256_set1_epi16(1);
  if (Q4) return _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles(c), q), ones);
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w)), ones);
}

// Lane r: the sum of v[r]'s 8 lanes.
__attribute__((target("avx2,fma,f16c"))) inline __m256i lane_totals(const __m256i* v) {
  const __m256i low = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i high = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(low, high, 0x20), _mm256_permute2x128_si256(low, high, 0x31));
}

__attribute__((target("avx2,fma,f16c"))) inline void store_rows(__m256 values, int rows, float* out) {
  if (rows == kRows) {
    _mm256_storeu_ps(out, values);
    return;
  }
  float lanes[kRows];
  _mm256_storeu_ps(lanes, values);
  std::copy(lanes, lanes + rows, out);
}

// 8 weight rows (row_codes; the same row again past `rows`) against one row of x; ws, wm: their scales and
// minimums [groups, 8].
template <bool Q4>
__attribute__((target("avx2,fma,f16c"))) void rows_vector(const uint8_t* const* row_codes, int64_t ahead, int rows,
                                                          const float* ws, const float* wm, const Activations& x,
                                                          float* out) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t g = 0; g < x.groups; ++g) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.codes + g * kGroup));
    __m256i lanes[kRows];
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* c = row_codes[r] + g * group_bytes<Q4>();
      _mm_prefetch(reinterpret_cast<const char*>(c + ahead), _MM_HINT_T0);
      lanes[r] = block_lanes<Q4>(c, q);
    }
    const __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(ws + g * kRows), _mm256_set1_ps(x.scale[g]));
    acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(lane_totals(lanes)), acc);
    if (Q4) acc = _mm256_fmadd_ps(_mm256_loadu_ps(wm + g * kRows), _mm256_set1_ps(x.sum[g]), acc);
  }
  store_rows(acc, rows, out);
}

// Block g of 8 weight rows as the batched product reads it: 8 vectors, vector c holding codes 4c..4c+3 (in the
// block's order; Q4_1 unpacked) of row r at lane r.
template <bool Q4>
__attribute__((target("avx2,fma,f16c"))) void pack_block(const uint8_t* const* row_codes, int64_t ahead, int64_t g,
                                                         uint8_t* packed) {
  __m256i v[kRows];
  for (int r = 0; r < kRows; ++r) {
    const uint8_t* c = row_codes[r] + g * group_bytes<Q4>();
    _mm_prefetch(reinterpret_cast<const char*>(c + ahead), _MM_HINT_T0);
    v[r] = Q4 ? nibbles(c) : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
  }
  // an 8 x 8 transpose of 32-bit lanes: pairs of rows, then quadruples (within 128-bit halves), then the halves
  __m256i pairs[kRows], quads[kRows];
  for (int r = 0; r < kRows; r += 2) {
    pairs[r] = _mm256_unpacklo_epi32(v[r], v[r + 1]);
    pairs[r + 1] = _mm256_unpackhi_epi32(v[r], v[r + 1]);
  }
  for (int r = 0; r < kRows; r += 4) {
    quads[r] = _mm256_unpacklo_epi64(pairs[r], pairs[r + 2]);      // lanes 0 | 4
    quads[r + 1] = _mm256_unpackhi_epi64(pairs[r], pairs[r + 2]);  // lanes 1 | 5
    quads[r + 2] = _mm256_unpacklo_epi64(pairs[r + 1], pairs[r + 3]);  // lanes 2 | 6
    quads[r + 3] = _mm256_unpackhi_epi64(pairs[r + 1], pairs[r + 3]);  // lanes 3 | 7
  }
  __m256i* vectors = reinterpret_cast<__m256i*>(packed);
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_si256(vectors + c, _mm256_permute2x128_si256(quads[c], quads[4 + c], 0x20));
    _mm256_storeu_si256(vectors + 4 + c, _mm256_permute2x128_si256(quads[c], quads[4 + c], 0x31));
  }
}

// The packed 8 weight rows [groups, 8 vectors] against TB rows of x, each 4 activation codes broadcast to the lanes.
// Q4_1 sums a block's 8 maddubs in 16 bits (at most 16 x 15 x 127 per lane), Q8_0 in 32.
template <bool Q4, int TB>
__attribute__((target("avx2,fma,f16c"))) void block_product(const uint8_t* packed, const float* ws, const float* wm,
                                                            const Activations& x, int rows, float* out,
                                                            int64_t out_stride) {
  const int64_t groups = x.groups;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i dots[TB];
    for (int t = 0; t < TB; ++t) dots[t] = _mm256_setzero_si256();
    for (int c = 0; c < kRows; ++c) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + (g * kRows + c) * 32));
      const __m256i u = Q4 ? w : _mm256_sign_epi8(w, w);
      for (int t = 0; t < TB; ++t) {
        int32_t four;
        std::memcpy(&four, x.codes + (t * groups + g) * kGroup + 4 * c, sizeof four);
        const __m256i q = _mm256_set1_epi32(four);
        if (Q4) {
          dots[t] = _mm256_add_epi16(dots[t], _mm256_maddubs_epi16(u, q));
        } else {
          dots[t] = _mm256_add_epi32(dots[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(q, w)), ones));
        }
      }
    }
    const __m256 scale = _mm256_loadu_ps(ws + g * kRows);
    for (int t = 0; t < TB; ++t) {
      const __m256i total = Q4 ? _mm256_madd_epi16(dots[t], ones) : dots[t];
      const __m256 product_scale = _mm256_mul_ps(scale, _mm256_set1_ps(x.scale[t * groups + g]));
      acc[t] = _mm256_fmadd_ps(product_scale, _mm256_cvtepi32_ps(total), acc[t]);
      if (Q4) acc[t] = _mm256_fmadd_ps(_mm256_loadu_ps(wm + g * kRows), _mm256_set1_ps(x.sum[t * groups + g]), acc[t]);
    }
  }
  for (int t = 0; t < TB; ++t) store_rows(acc[t], rows, out + t * out_stride);
}

using BlockProduct = void (*)(const uint8_t*, const float*, const float*, const Activations&, int, float*, int64_t);
template <bool Q4>
constexpr BlockProduct kBlockProducts[kTokenBlock] = {block_product<Q4, 1>, block_product<Q4, 2>,
                                                      block_product<Q4, 3>, block_product<Q4, 4>};

// values[g * 8 + r] = rows[r][g] as float32, g < groups: 8 x 8 transposes of F16C conversions.
__attribute__((target("avx2,fma,f16c"))) void transpose_halves(const at::Half* const* rows, int64_t groups,
                                                               float* values) {
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    __m256 v[kRows], pairs[kRows], quads[kRows];
    for (int r = 0; r < kRows; ++r) {
      v[r] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + g)));
    }
    for (int r = 0; r < kRows; r += 2) {
      pairs[r] = _mm256_unpacklo_ps(v[r], v[r + 1]);
      pairs[r + 1] = _mm256_unpackhi_ps(v[r], v[r + 1]);
    }
    for (int r = 0; r < kRows; r += 4) {
      quads[r] = _mm256_shuffle_ps(pairs[r], pairs[r + 2], _MM_SHUFFLE(1, 0, 1, 0));
      quads[r + 1] = _mm256_shuffle_ps(pairs[r], pairs[r + 2], _MM_SHUFFLE(3, 2, 3, 2));
      quads[r + 2] = _mm256_shuffle_ps(pairs[r + 1], pairs[r + 3], _MM_SHUFFLE(1, 0, 1, 0));
      quads[r + 3] = _mm256_shuffle_ps(pairs[r + 1], pairs[r + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; ++c) {
      _mm256_storeu_ps(values + (g + c) * kRows, _mm256_permute2f128_ps(quads[c], quads[4 + c], 0x20));
      _mm256_storeu_ps(values + (g + 4 + c) * kRows, _mm256_permute2f128_ps(quads[c], quads[4 + c], 0x31));
    }
  }
  for (; g < groups; ++g) {
    for (int r = 0; r < kRows; ++r) values[g * kRows + r] = _cvtsh_ss(rows[r][g].x);
  }
}

// Weight rows [0, rows) against `tokens` rows of x (out [tokens, out_stride] from its column 0), 8 at a time.
template <bool Q4>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2(int64_t rows, int64_t tokens, const uint8_t* codes,
                                                        int64_t row_bytes, const at::Half* scale,
                                                        const at::Half* minimum, const Activations& x, float* out,
                                                        int64_t out_stride) {
  const int64_t groups = x.groups, columns = groups * kGroup;
  const int64_t ahead = kRows * row_bytes;  // prefetched: the same codes of the next 8 rows
  std::vector<float> ws(kRows * groups), wm(Q4 ? kRows * groups : 0);
  std::vector<uint8_t> packed(tokens > 1 ? groups * kRows * 32 : 0);
  for (int64_t n = 0; n < rows; n += kRows) {
    const int block_rows = static_cast<int>(std::min<int64_t>(kRows, rows - n));
    const uint8_t* row_codes[kRows];
    const at::Half* row_scales[kRows];
    const at::Half* row_minimums[kRows];
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = n + std::min(r, block_rows - 1);
      row_codes[r] = codes + row * row_bytes;
      row_scales[r] = scale + row * groups;
      row_minimums[r] = Q4 ? minimum + row * groups : nullptr;
    }
    transpose_halves(row_scales, groups, ws.data());
    if (Q4) transpose_halves(row_minimums, groups, wm.data());
    if (tokens == 1) {
      rows_vector<Q4>(row_codes, ahead, block_rows, ws.data(), wm.data(), x, out + n);
      continue;
    }
    for (int64_t g = 0; g < groups; ++g) pack_block<Q4>(row_codes, ahead, g, packed.data() + g * kRows * 32);
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokenBlock) {
      const int64_t token_block = std::min<int64_t>(kTokenBlock, tokens - t0);
      const Activations block_x{x.codes + t0 * columns, x.scale + t0 * groups, x.sum + t0 * groups, groups};
      kBlockProducts<Q4>[token_block - 1](packed.data(), ws.data(), wm.data(), block_x, block_rows,
                                          out + t0 * out_stride + n, out_stride);
    }
  }
}

// (codes int8 [T, K], scale float32 [T, K / 32], sum float32 [T, K / 32]) of x [T, K] float32.
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_activations(const at::Tensor& x, bool q4_order,
                                                                    bool vectorised) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.device().is_cpu(),
              "quantize_activations: x must be a contiguous float32 CPU matrix");
  const int64_t tokens = x.size(0), columns = x.size(1), groups = columns / kGroup;
  TORCH_CHECK(columns % kGroup == 0, "quantize_activations: ", columns, " columns, not a multiple of ", kGroup);
  at::Tensor codes = at::empty({tokens, columns}, x.options().dtype(at::kChar));
  at::Tensor scale = at::empty({tokens, groups}, x.options());
  at::Tensor sum = at::empty({tokens, groups}, x.options());
  const float* inputs = x.data_ptr<float>();
  int8_t* code_data = codes.data_ptr<int8_t>();
  float* scale_data = scale.data_ptr<float>();
  float* sum_data = sum.data_ptr<float>();
  const bool use_avx2 = vectorised && has_avx2();
  at::parallel_for(0, tokens * groups, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (use_avx2) {
        quantize_block_avx2(inputs + i * kGroup, q4_order, code_data + i * kGroup, scale_data + i, sum_data + i);
      } else {
        quantize_block_generic(inputs + i * kGroup, q4_order, code_data + i * kGroup, scale_data + i, sum_data + i);
      }
    }
  });
  return {codes, scale, sum};
}

template <bool Q4>
at::Tensor int8_dot_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale,
                           const at::Tensor& minimum, bool vectorised) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.device().is_cpu(),
              "int8_dot_linear: x must be a contiguous float32 CPU matrix");
  TORCH_CHECK(scale.dim() == 2, "int8_dot_linear: scale must be [N, K / 32]");
  const int64_t tokens = x.size(0), columns = x.size(1), rows = scale.size(0), groups = scale.size(1);
  TORCH_CHECK(columns == groups * kGroup, "int8_dot_linear: x has ", columns, " columns, the weight ", groups * kGroup);
  TORCH_CHECK(scale.scalar_type() == at::kHalf && scale.is_contiguous(), "int8_dot_linear: scale must be float16");
  TORCH_CHECK(codes.is_contiguous() && codes.size(0) == rows && codes.size(1) == (Q4 ? columns / 2 : columns),
              "int8_dot_linear: codes of the wrong shape");
  TORCH_CHECK(codes.scalar_type() == (Q4 ? at::kByte : at::kChar), "int8_dot_linear: codes of the wrong dtype");
  if (Q4) {
    TORCH_CHECK(minimum.scalar_type() == at::kHalf && minimum.is_contiguous() && minimum.sizes() == scale.sizes(),
                "int8_dot_linear: min must be float16 like scale");
  }
  at::Tensor out = at::empty({tokens, rows}, x.options());
  if (tokens == 0 || rows == 0) return out;
  const auto [x_codes, x_scale, x_sum] = quantize_activations(x, Q4, vectorised);
  const Activations activations{x_codes.data_ptr<int8_t>(), x_scale.data_ptr<float>(), x_sum.data_ptr<float>(),
                                groups};
  const uint8_t* code_data = static_cast<const uint8_t*>(codes.data_ptr());
  const at::Half* scale_data = scale.data_ptr<at::Half>();
  const at::Half* min_data = Q4 ? minimum.data_ptr<at::Half>() : nullptr;
  float* out_data = out.data_ptr<float>();
  const int64_t row_bytes = Q4 ? columns / 2 : columns;
  const bool use_avx2 = vectorised && has_avx2();
  at::parallel_for(0, (rows + kRows - 1) / kRows, 2, [&](int64_t first_block, int64_t end_block) {
    const int64_t begin = first_block * kRows, end = std::min(rows, end_block * kRows);
    if (use_avx2) {
      rows_avx2<Q4>(end - begin, tokens, code_data + begin * row_bytes, row_bytes, scale_data + begin * groups,
                    Q4 ? min_data + begin * groups : nullptr, activations, out_data + begin, rows);
      return;
    }
    for (int64_t n = begin; n < end; ++n) {
      row_generic<Q4>(code_data + n * row_bytes, scale_data + n * groups, Q4 ? min_data + n * groups : nullptr,
                      activations, tokens, out_data + n, rows);
    }
  });
  return out;
}

at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale,
                     const at::Tensor& minimum, bool vectorised) {
  return int8_dot_linear<true>(x, codes, scale, minimum, vectorised);
}

at::Tensor q8_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale, bool vectorised) {
  return int8_dot_linear<false>(x, codes, scale, at::Tensor(), vectorised);
}

}  // namespace

TORCH_LIBRARY(arbi_block_linear_int8_dot, m) {
  m.def("quantize_activations(Tensor x, bool q4_order, bool vectorised) -> (Tensor, Tensor, Tensor)",
        &quantize_activations);
  m.def("q4_linear(Tensor x, Tensor codes, Tensor scale, Tensor minimum, bool vectorised) -> Tensor", &q4_linear);
  m.def("q8_linear(Tensor x, Tensor codes, Tensor scale, bool vectorised) -> Tensor", &q8_linear);
}
