// The position-wise ops of a decoder layer on float32 CPU tensors, one call each instead of the 3-8 torch ops
// (and their dispatches) that `TorchDecoderOps` spends on them: the CPU kernels of `models/cpu_decoder_ops.py`.
// Arithmetic in float32 as the torch reference computes it; only the order of the RMS sum differs.
//   rms_norm(x [T, H], w [H], eps)             -> x * rsqrt(mean(x^2) + eps) * w
//   add_rms_norm(x, residual, w, eps)          -> (rms_norm(x + residual), x + residual)
//   silu_and_mul(gate_up [T, 2I])              -> silu(gate) * up [T, I]
//   rotate_(x [T, heads, D], cos, signed_sin [T, D]), in place:
//                                                 x cos + (x2, x1) signed_sin (halves of a head swapped)
// Tokens are split over torch's intra-op threads.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <tuple>

namespace {

void check_rows(const at::Tensor& x, const char* what) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.device().is_cpu(), what,
              ": a contiguous float32 CPU matrix expected");
}

// out_t = x_t * rsqrt(mean(x_t^2) + eps) * w for every row t.
void normalize_rows(const float* x, const float* w, float eps, int64_t tokens, int64_t size, float* out) {
  at::parallel_for(0, tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* row = x + t * size;
      float squares = 0.f;
      for (int64_t i = 0; i < size; ++i) squares += row[i] * row[i];
      const float inverse = 1.f / std::sqrt(squares / static_cast<float>(size) + eps);
      float* target = out + t * size;
      for (int64_t i = 0; i < size; ++i) target[i] = w[i] * (row[i] * inverse);
    }
  });
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rows(x, "rms_norm");
  TORCH_CHECK(weight.is_contiguous() && weight.scalar_type() == at::kFloat && weight.numel() == x.size(1),
              "rms_norm: weight must be float32 of the rows' size");
  at::Tensor out = at::empty_like(x);
  normalize_rows(x.data_ptr<float>(), weight.data_ptr<float>(), static_cast<float>(eps), x.size(0), x.size(1),
                 out.data_ptr<float>());
  return out;
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                const at::Tensor& weight, double eps) {
  check_rows(x, "add_rms_norm");
  check_rows(residual, "add_rms_norm");
  TORCH_CHECK(x.sizes() == residual.sizes(), "add_rms_norm: x and residual differ in shape");
  at::Tensor summed = at::empty_like(x);
  const float* a = x.data_ptr<float>();
  const float* b = residual.data_ptr<float>();
  float* sum = summed.data_ptr<float>();
  const int64_t count = x.numel();
  for (int64_t i = 0; i < count; ++i) sum[i] = a[i] + b[i];
  return {rms_norm(summed, weight, eps), summed};
}

at::Tensor silu_and_mul(const at::Tensor& gate_up) {
  check_rows(gate_up, "silu_and_mul");
  const int64_t tokens = gate_up.size(0), width = gate_up.size(1) / 2;
  TORCH_CHECK(gate_up.size(1) == 2 * width, "silu_and_mul: an even width expected");
  at::Tensor out = at::empty({tokens, width}, gate_up.options());
  const float* source = gate_up.data_ptr<float>();
  float* target = out.data_ptr<float>();
  at::parallel_for(0, tokens, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = source + t * 2 * width;
      const float* up = gate + width;
      for (int64_t i = 0; i < width; ++i) target[t * width + i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
    }
  });
  return out;
}

void rotate_(at::Tensor x, const at::Tensor& cos, const at::Tensor& signed_sin) {
  TORCH_CHECK(x.dim() == 3 && x.scalar_type() == at::kFloat && x.device().is_cpu() && x.stride(2) == 1,
              "rotate_: float32 CPU states [T, heads, D] with unit last stride expected");
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2), half = dim / 2;
  TORCH_CHECK(cos.is_contiguous() && signed_sin.is_contiguous() && cos.scalar_type() == at::kFloat &&
                  signed_sin.scalar_type() == at::kFloat && cos.size(0) == tokens && cos.size(1) == dim &&
                  signed_sin.sizes() == cos.sizes(),
              "rotate_: cos and signed_sin must be float32 [T, D]");
  float* data = x.data_ptr<float>();
  const float* c = cos.data_ptr<float>();
  const float* s = signed_sin.data_ptr<float>();
  const int64_t token_stride = x.stride(0), head_stride = x.stride(1);
  at::parallel_for(0, tokens, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* ct = c + t * dim;
      const float* st = s + t * dim;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = data + t * token_stride + h * head_stride;
        for (int64_t i = 0; i < half; ++i) {
          const float first = v[i], second = v[i + half];
          v[i] = first * ct[i] + second * st[i];
          v[i + half] = second * ct[i + half] + first * st[i + half];
        }
      }
    }
  });
}

}  // namespace

TORCH_LIBRARY(arbi_decoder_ops, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", &rms_norm);
  m.def("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)", &add_rms_norm);
  m.def("silu_and_mul(Tensor gate_up) -> Tensor", &silu_and_mul);
  m.def("rotate_(Tensor(a!) x, Tensor cos, Tensor signed_sin) -> ()", &rotate_);
}
