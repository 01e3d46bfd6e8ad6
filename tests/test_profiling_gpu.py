"""harness.worker.profiling on a real CUDA device (skipped where there is none): the names the profiler gives the
kernels of a candidate's extension are the names read from that extension's symbol tables (issue 48, item 3).
tests/test_profiling.py checks the reading and the matching without a GPU; this checks the one thing only a GPU
shows, that Kineto's names and ours agree, for the kernels whose names the old base-name match got wrong."""
from __future__ import annotations

import pytest

from conftest import cuda_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")]

CUDA_SOURCE = r"""
#include <torch/extension.h>
namespace {
template <typename T> __global__ void anon_scale(T* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }
}
static __global__ void static_add(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1; }
extern "C" __global__ void c_sub(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] -= 1; }
namespace mine { __global__ void vectorized_elementwise_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 3; } }
torch::Tensor run(torch::Tensor x) {
  int n = x.numel(), blocks = (n + 255) / 256;
  anon_scale<float><<<blocks, 256>>>(x.data_ptr<float>(), n);
  static_add<<<blocks, 256>>>(x.data_ptr<float>(), n);
  c_sub<<<blocks, 256>>>(x.data_ptr<float>(), n);
  mine::vectorized_elementwise_kernel<<<blocks, 256>>>(x.data_ptr<float>(), n);
  return x;
}
"""
OWN = {"void (anonymous namespace)::anon_scale<float>(float*, int)", "static_add(float*, int)", "c_sub",
       "mine::vectorized_elementwise_kernel(float*, int)"}


@pytest.fixture(scope="module")
def extension(tmp_path_factory):
    from torch.utils.cpp_extension import load_inline
    folder = tmp_path_factory.mktemp("ext")
    module = load_inline("kb_profiling_gpu", cpp_sources="torch::Tensor run(torch::Tensor x);",
                         cuda_sources=CUDA_SOURCE, functions=["run"], build_directory=str(folder))
    return module, folder


def test_the_candidates_kernels_are_its_own_and_atens_beside_them_are_not(extension, monkeypatch, tmp_path):
    import torch
    from harness.worker.profiling import normalize_kernel_name, profile_call
    module, folder = extension
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(folder))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))

    def call(inputs: list) -> torch.Tensor:
        x = inputs[0] + 1                               # ATen: at::native::vectorized_elementwise_kernel<...>
        return module.run(torch.cat([x, x]))            # ATen's CatArrayBatchedCopy (anonymous namespace), then ours

    profile = profile_call(call, [torch.ones(1 << 16, device="cuda")], "cuda")
    assert {normalize_kernel_name(k) for k in profile.custom_kernels} == {normalize_kernel_name(k) for k in OWN}, (
        profile)
    assert any(k.startswith("void at::native::vectorized_elementwise_kernel") for k in profile.other_kernels)
    assert 0 < profile.custom_share < 1 and profile.kernels == len(OWN) + len(profile.other_kernels)


def test_a_library_only_call_has_no_kernel_of_its_own(extension, monkeypatch, tmp_path):
    import torch
    from harness.worker.profiling import profile_call
    _, folder = extension
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(folder))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    profile = profile_call(lambda inputs: torch.relu(inputs[0] + 1).sum(), [torch.ones(1 << 16, device="cuda")],
                           "cuda")
    assert profile.kernels >= 2 and profile.custom_kernels == [] and profile.custom_share == 0.0
