// Decode attention over a float32 paged KV cache on the CPU, read in place through the block tables (no gathered
// copy of the context), and the store of new tokens' keys and values: the CPU kernels of `attention/cpu_paged.py`.
//   write_slots_(key_cache, value_cache, key [T, Hkv, D], value, slot_mapping [T] int64): row t at flat slot
//   slot_mapping[t] of both caches (every slot checked first).
//   query [T, H, D] (rows `token_rows` are decode queries), key_cache / value_cache [num_blocks, block_size, Hkv, D],
//   block_tables [B, max_blocks] int32, seq_lens [B] int32, sequences [N] int64 (the decode sequences),
//   token_rows [N] int64 (each one's query row) -> out [N, H, D]
// For query head h (KV head h / (H / Hkv)): softmax(scale q k^T) v over the sequence's seq_len keys, in float32:
// the scores of a KV head's query heads are kept, then the values are read once for all of them. (sequence, KV
// head) pairs are split over torch's threads. Block ids and lengths are checked before anything is read. With AVX2 +
// FMA (chosen at run time) a q.k dot is 8 lanes of FMA summed at the end and a value row is added by FMA; the plain
// loops sum in order.

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

// dim a multiple of 8.
__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t dim) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t d = 0; d < dim; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
}

// out += weight * v
void add_scaled_plain(float weight, const float* v, int64_t dim, float* out) {
  for (int64_t d = 0; d < dim; ++d) out[d] += weight * v[d];
}

// dim a multiple of 8.
__attribute__((target("avx2,fma"))) void add_scaled_avx2(float weight, const float* v, int64_t dim, float* out) {
  const __m256 w = _mm256_set1_ps(weight);
  for (int64_t d = 0; d < dim; d += 8) {
    _mm256_storeu_ps(out + d, _mm256_fmadd_ps(w, _mm256_loadu_ps(v + d), _mm256_loadu_ps(out + d)));
  }
}

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
  float (*const dot)(const float*, const float*, int64_t) = vectorised ? dot_avx2 : dot_plain;
  void (*const add_scaled)(float, const float*, int64_t, float*) = vectorised ? add_scaled_avx2 : add_scaled_plain;
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
  at::parallel_for(0, count * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / kv_heads, kv_head = item % kv_heads;
      const int64_t sequence = sequence_ids[i], length = lens[sequence];
      const int32_t* table = tables + sequence * max_blocks;
      scores.resize(static_cast<size_t>(group * length));
      for (int64_t g = 0; g < group; ++g) {
        const int64_t head = kv_head * group + g;
        const float* q = q_data + rows[i] * query.stride(0) + head * query.stride(1);
        float* head_scores = scores.data() + g * length;
        float maximum = -std::numeric_limits<float>::infinity();
        for (int64_t t = 0; t < length; ++t) {
          const float* k = k_data + table[t / block_size] * block_stride + (t % block_size) * token_stride +
                           kv_head * dim;
          head_scores[t] = dot(q, k, dim) * softmax_scale;
          maximum = std::max(maximum, head_scores[t]);
        }
        float total = 0.f;
        for (int64_t t = 0; t < length; ++t) {
          head_scores[t] = std::exp(head_scores[t] - maximum);
          total += head_scores[t];
        }
        const float inverse = 1.f / total;
        for (int64_t t = 0; t < length; ++t) head_scores[t] *= inverse;
      }
      for (int64_t t = 0; t < length; ++t) {
        const float* v = v_data + table[t / block_size] * block_stride + (t % block_size) * token_stride +
                         kv_head * dim;
        for (int64_t g = 0; g < group; ++g) {
          add_scaled(scores[g * length + t], v, dim, out_data + (i * heads + kv_head * group + g) * dim);
        }
      }
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
