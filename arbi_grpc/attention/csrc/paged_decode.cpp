// Decode attention over a float32 paged KV cache on the CPU, read in place through the block tables (no gathered
// copy of the context), and the store of new tokens' keys and values: the CPU kernels of `attention/cpu_paged.py`.
//   write_slots_(key_cache, value_cache, key [T, Hkv, D], value, slot_mapping [T] int64): row t at flat slot
//   slot_mapping[t] of both caches (every slot checked first).
//   query [T, H, D] (rows `token_rows` are decode queries), key_cache / value_cache [num_blocks, block_size, Hkv, D],
//   block_tables [B, max_blocks] int32, seq_lens [B] int32, sequences [N] int64 (the decode sequences),
//   token_rows [N] int64 (each one's query row) -> out [N, H, D]
// For query head h (KV head h / (H / Hkv)): softmax(scale q k^T) v over the sequence's seq_len keys, in float32.
// (sequence, query head) pairs are split over torch's threads, each thread listing the context's row offsets once
// per (sequence, KV head) it meets. Block ids and lengths are checked before anything is read. With AVX2 + FMA
// (chosen at run time) a q.k dot is 8 lanes of FMA summed at the end (4 keys at a time), the softmax takes a
// vectorised exp (within 2 ulp of expf), and the output is summed in registers, 64 dimensions at a time, by FMA in
// key order; the plain loops sum in order.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

bool has_avx2() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}

float dot_plain(const float* a, const float* b, int64_t dim) {
  float total = 0.f;
  for (int64_t d = 0; d < dim; ++d) total += a[d] * b[d];
  return total;
}

__attribute__((target("avx2,fma"))) inline float horizontal_sum(__m256 v) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
}

// dim a multiple of 8.
__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t dim) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t d = 0; d < dim; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
  return horizontal_sum(acc);
}

// out += weight * v
void add_scaled_plain(float weight, const float* v, int64_t dim, float* out) {
  for (int64_t d = 0; d < dim; ++d) out[d] += weight * v[d];
}

// e^x for 8 lanes: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by its Taylor polynomial of degree 6 (relative error
// under 2e-7 there), times 2^n built in the exponent bits; x is clamped to [-87, 88] (results stay normal floats).
__attribute__((target("avx2,fma"))) inline __m256 exp_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.f)), _mm256_set1_ps(88.f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln 2 in two parts: the first exact in float
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 poly = _mm256_set1_ps(1.f / 720);
  for (const float c : {1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f}) {
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(c));
  }
  const __m256i two_to_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(poly, _mm256_castsi256_ps(two_to_n));
}

// scores[t] = scale q.k_t for the keys at `offsets` (into `keys`), 4 keys at a time, each dot as `dot_avx2` sums it;
// returns their maximum. dim a multiple of 8.
__attribute__((target("avx2,fma"))) float scores_avx2(const float* q, const float* keys, const int64_t* offsets,
                                                      int64_t length, int64_t dim, float scale, float* scores) {
  float maximum = -std::numeric_limits<float>::infinity();
  int64_t t = 0;
  for (; t + 4 <= length; t += 4) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t d = 0; d < dim; d += 8) {
      const __m256 query = _mm256_loadu_ps(q + d);
      for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(query, _mm256_loadu_ps(keys + offsets[t + j] + d), acc[j]);
    }
    for (int j = 0; j < 4; ++j) {
      scores[t + j] = horizontal_sum(acc[j]) * scale;
      maximum = std::max(maximum, scores[t + j]);
    }
  }
  for (; t < length; ++t) {
    scores[t] = dot_avx2(q, keys + offsets[t], dim) * scale;
    maximum = std::max(maximum, scores[t]);
  }
  return maximum;
}

// scores[t] = e^(scores[t] - maximum) / their sum.
__attribute__((target("avx2,fma"))) void softmax_avx2(float* scores, int64_t length, float maximum) {
  const __m256 shift = _mm256_set1_ps(maximum);
  __m256 sums = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 <= length; t += 8) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + t), shift));
    _mm256_storeu_ps(scores + t, e);
    sums = _mm256_add_ps(sums, e);
  }
  float total = horizontal_sum(sums);
  for (; t < length; ++t) {
    scores[t] = _mm256_cvtss_f32(exp_avx2(_mm256_set1_ps(scores[t] - maximum)));
    total += scores[t];
  }
  const float inverse = 1.f / total;
  t = 0;
  for (; t + 8 <= length; t += 8) {
    _mm256_storeu_ps(scores + t, _mm256_mul_ps(_mm256_loadu_ps(scores + t), _mm256_set1_ps(inverse)));
  }
  for (; t < length; ++t) scores[t] *= inverse;
}

// out[0, 8V) = sum_t weights[t] v_t[0, 8V) for the value rows at `offsets` (into `values`), in registers, by FMA in
// key order from 0.
template <int V>
__attribute__((target("avx2,fma"))) void weighted_values_avx2(const float* weights, const float* values,
                                                              const int64_t* offsets, int64_t length, float* out) {
  __m256 acc[V];
  for (int j = 0; j < V; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t t = 0; t < length; ++t) {
    const __m256 weight = _mm256_broadcast_ss(weights + t);
    const float* v = values + offsets[t];
    for (int j = 0; j < V; ++j) acc[j] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(v + 8 * j), acc[j]);
  }
  for (int j = 0; j < V; ++j) _mm256_storeu_ps(out + 8 * j, acc[j]);
}

using WeightedValues = void (*)(const float*, const float*, const int64_t*, int64_t, float*);
constexpr WeightedValues kWeightedValues[8] = {
    weighted_values_avx2<1>, weighted_values_avx2<2>, weighted_values_avx2<3>, weighted_values_avx2<4>,
    weighted_values_avx2<5>, weighted_values_avx2<6>, weighted_values_avx2<7>, weighted_values_avx2<8>,
};

at::Tensor paged_decode(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                        const at::Tensor& block_tables, const at::Tensor& seq_lens, const at::Tensor& sequences,
                        const at::Tensor& token_rows, double scale) {
  TORCH_CHECK(query.dim() == 3 && query.scalar_type() == at::kFloat && query.stride(2) == 1,
              "paged_decode: query must be float32 [T, H, D] with unit last stride");
  TORCH_CHECK(key_cache.dim() == 4 && key_cache.scalar_type() == at::kFloat && key_cache.is_contiguous() &&
                  value_cache.sizes() == key_cache.sizes() && value_cache.scalar_type() == at::kFloat &&
                  value_cache.is_contiguous(),
              "paged_decode: key and value caches must be contiguous float32 [num_blocks, block_size, Hkv, D]");
  TORCH_CHECK(block_tables.dim() == 2 && block_tables.scalar_type() == at::kInt && block_tables.is_contiguous() &&
                  seq_lens.scalar_type() == at::kInt && seq_lens.is_contiguous(),
              "paged_decode: int32 block_tables [B, max_blocks] and seq_lens [B] expected");
  TORCH_CHECK(sequences.scalar_type() == at::kLong && token_rows.scalar_type() == at::kLong &&
                  sequences.is_contiguous() && token_rows.is_contiguous() && sequences.numel() == token_rows.numel(),
              "paged_decode: int64 sequences and token_rows of one length expected");
  const int64_t heads = query.size(1), dim = query.size(2);
  const int64_t num_blocks = key_cache.size(0), block_size = key_cache.size(1), kv_heads = key_cache.size(2);
  TORCH_CHECK(key_cache.size(3) == dim && heads % kv_heads == 0, "paged_decode: head shapes disagree");
  const int64_t group = heads / kv_heads, count = sequences.numel(), max_blocks = block_tables.size(1);
  at::Tensor out = at::zeros({count, heads, dim}, query.options());
  const float* q_data = query.data_ptr<float>();
  const float* k_data = key_cache.data_ptr<float>();
  const float* v_data = value_cache.data_ptr<float>();
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int64_t* sequence_ids = sequences.data_ptr<int64_t>();
  const int64_t* rows = token_rows.data_ptr<int64_t>();
  float* out_data = out.data_ptr<float>();
  const float softmax_scale = static_cast<float>(scale);
  const int64_t token_stride = kv_heads * dim, block_stride = block_size * token_stride;
  const bool vectorised = dim % 8 == 0 && has_avx2();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t sequence = sequence_ids[i];
    TORCH_CHECK(0 <= sequence && sequence < seq_lens.numel(), "paged_decode: sequence index out of range");
    const int64_t length = lens[sequence];
    TORCH_CHECK(0 < length && length <= max_blocks * block_size, "paged_decode: seq_len beyond its block table");
    for (int64_t b = 0; b < (length + block_size - 1) / block_size; ++b) {
      const int32_t block = tables[sequence * max_blocks + b];
      TORCH_CHECK(0 <= block && block < num_blocks, "paged_decode: block id out of range");
    }
  }
  at::parallel_for(0, count * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    std::vector<int64_t> offsets;  // the context's row offsets for (listed_sequence, listed_kv_head)
    int64_t listed_sequence = -1, listed_kv_head = -1;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / heads, head = item % heads, kv_head = head / group;
      const int64_t sequence = sequence_ids[i], length = lens[sequence];
      const int32_t* table = tables + sequence * max_blocks;
      if (sequence != listed_sequence || kv_head != listed_kv_head) {
        offsets.resize(static_cast<size_t>(length));
        for (int64_t t = 0; t < length; ++t) {
          offsets[t] = table[t / block_size] * block_stride + (t % block_size) * token_stride + kv_head * dim;
        }
        listed_sequence = sequence, listed_kv_head = kv_head;
      }
      scores.resize(static_cast<size_t>(length));
      const float* q = q_data + rows[i] * query.stride(0) + head * query.stride(1);
      float* head_out = out_data + (i * heads + head) * dim;
      if (vectorised) {
        softmax_avx2(scores.data(), length,
                     scores_avx2(q, k_data, offsets.data(), length, dim, softmax_scale, scores.data()));
        for (int64_t d = 0; d < dim; d += 64) {
          const int vectors = static_cast<int>(std::min<int64_t>(64, dim - d) / 8);
          kWeightedValues[vectors - 1](scores.data(), v_data + d, offsets.data(), length, head_out + d);
        }
        continue;
      }
      float maximum = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < length; ++t) {
        scores[t] = dot_plain(q, k_data + offsets[t], dim) * softmax_scale;
        maximum = std::max(maximum, scores[t]);
      }
      float total = 0.f;
      for (int64_t t = 0; t < length; ++t) {
        scores[t] = std::exp(scores[t] - maximum);
        total += scores[t];
      }
      const float inverse = 1.f / total;
      for (int64_t t = 0; t < length; ++t) add_scaled_plain(scores[t] * inverse, v_data + offsets[t], dim, head_out);
    }
  });
  return out;
}

void write_slots_(at::Tensor key_cache, at::Tensor value_cache, const at::Tensor& key, const at::Tensor& value,
                  const at::Tensor& slot_mapping) {
  TORCH_CHECK(key_cache.dim() == 4 && key_cache.scalar_type() == at::kFloat && key_cache.is_contiguous() &&
                  value_cache.sizes() == key_cache.sizes() && value_cache.scalar_type() == at::kFloat &&
                  value_cache.is_contiguous(),
              "write_slots_: key and value caches must be contiguous float32 [num_blocks, block_size, Hkv, D]");
  const int64_t slots = key_cache.size(0) * key_cache.size(1), width = key_cache.size(2) * key_cache.size(3);
  // A token's heads must be one run of memory; tokens may be strided (slices of a fused q|k|v projection).
  const auto token_rows = [](const at::Tensor& x) {
    return x.dim() == 3 && x.stride(2) == 1 && x.stride(1) == x.size(2);
  };
  TORCH_CHECK(key.scalar_type() == at::kFloat && value.scalar_type() == at::kFloat && token_rows(key) &&
                  token_rows(value) && key.sizes() == value.sizes() && key.size(1) * key.size(2) == width,
              "write_slots_: float32 key and value [T, Hkv, D] of the cache's heads, each token's heads contiguous, "
              "expected");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong && slot_mapping.is_contiguous() &&
                  slot_mapping.numel() == key.size(0),
              "write_slots_: int64 slot_mapping [T] expected");
  const int64_t tokens = key.size(0);
  const int64_t* slot = slot_mapping.data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(0 <= slot[t] && slot[t] < slots, "write_slots_: slot ", slot[t], " outside the cache's ", slots);
  }
  float* keys = key_cache.data_ptr<float>();
  float* values = value_cache.data_ptr<float>();
  const float* new_keys = key.data_ptr<float>();
  const float* new_values = value.data_ptr<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(new_keys + t * key.stride(0), width, keys + slot[t] * width);
    std::copy_n(new_values + t * value.stride(0), width, values + slot[t] * width);
  }
}

}  // namespace

TORCH_LIBRARY(arbi_paged_decode, m) {
  m.def("paged_decode(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, Tensor seq_lens, "
        "Tensor sequences, Tensor token_rows, float scale) -> Tensor",
        &paged_decode);
  m.def("write_slots_(Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor key, Tensor value, "
        "Tensor slot_mapping) -> ()",
        &write_slots_);
}
