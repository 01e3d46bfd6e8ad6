"""x @ W^T + b as C++ dot products over contiguous rows (load_inline, CPU only). The parameter keeps the
reference's name, so the harness copies the reference's weights in."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_src = r"""
// The headers this needs rather than all of torch/extension.h (no_implicit_headers below): a third of the
// build time. pybind.h converts at::Tensor for the bindings load_inline writes, which call
// torch::wrap_pybind_function (Exceptions.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>

at::Tensor linear_bias(at::Tensor x, at::Tensor w, at::Tensor b) {
    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && b.dim() == 1 && x.size(1) == w.size(1) && w.size(0) == b.size(0),
                "x (n, k), w (m, k), b (m) expected");
    TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat &&
                b.scalar_type() == at::kFloat, "float32 expected");
    x = x.contiguous(); w = w.contiguous(); b = b.contiguous();
    const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
    auto y = at::empty({n, m}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
        const float* xr = xp + i * k;
        for (int64_t j = 0; j < m; ++j) {
            const float* wr = wp + j * k;
            float acc = 0.f;
            for (int64_t t = 0; t < k; ++t) acc += xr[t] * wr[t];
            yp[i * m + j] = acc + bp[j];
        }
    }
    return y;
}
"""
ext = load_inline(name="example_cpu_linear_bias", cpp_sources=_src, functions=["linear_bias"],
                  extra_cflags=["-O3"], no_implicit_headers=True, verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.linear_bias(x, self.linear.weight.detach(), self.linear.bias.detach())
