"""ReLU and scale in one pass of a C++ loop (load_inline, CPU only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_src = r"""
// The headers this needs rather than all of torch/extension.h (no_implicit_headers below): a third of the
// build time. pybind.h converts at::Tensor for the bindings load_inline writes, which call
// torch::wrap_pybind_function (Exceptions.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>

at::Tensor relu_scale(at::Tensor x, double scale) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == at::kFloat, "contiguous float32 expected");
    auto y = at::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const float s = static_cast<float>(scale);
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] * s : 0.f;
    return y;
}
"""
ext = load_inline(name="example_cpu_relu_scale", cpp_sources=_src, functions=["relu_scale"],
                  extra_cflags=["-O3"], no_implicit_headers=True, verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ext.relu_scale(x.contiguous(), self.scale)
