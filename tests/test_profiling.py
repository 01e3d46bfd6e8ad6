"""harness.worker.profiling: whose kernels ran. A kernel is the candidate's by its whole signature, read from the
symbol tables of its own libraries, never by a part of its name (issue 48, item 3)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from harness.worker.profiling import (demangle, elf_defined_functions, extension_kernel_names, normalize_kernel_name,
                                      own_kernel_names, own_kernels, triton_kernel_names)

# Names as Kineto gives them (__cxa_demangle of what CUPTI reports), from eager PyTorch on a GPU.
ATEN_FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
             "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
ATEN_ANONYMOUS = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>"
                  "(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 128, 1>,"
                  " at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)")
CANDIDATE_ANONYMOUS = "void (anonymous namespace)::scale_relu<float>(float const*, float*, int)"


def own(*names: str) -> frozenset[str]:
    return frozenset(normalize_kernel_name(name) for name in names)


def test_an_anonymous_namespace_kernel_of_the_candidates_is_its_own():
    # The old base name of this kernel was "void": an honest candidate read no_custom_kernel.
    assert own_kernels([CANDIDATE_ANONYMOUS, ATEN_FILL], own(CANDIDATE_ANONYMOUS)) == {CANDIDATE_ANONYMOUS}


@pytest.mark.parametrize("spelling", [
    "void {anonymous}::scale_relu<float>(float const*, float*, int)",          # GCC's spelling
    "void  (anonymous namespace)::scale_relu<float>(float const *, float *, int)",
])
def test_other_demanglers_spellings_of_the_same_kernel_match(spelling):
    assert own_kernels([spelling], own(CANDIDATE_ANONYMOUS)) == {spelling}


@pytest.mark.parametrize("candidates_names", [
    # Its library defines a function of the same base name, in a namespace of its own.
    ["mine::vectorized_elementwise_kernel(float*, long)", "void mine::vectorized_elementwise_kernel<4>(float*, int)"],
    # What cutting at the first "(" made of ATen's names: "" and "void". A prefix or a base name never matches.
    ["", "void", "at::native::", "vectorized_elementwise_kernel", "CatArrayBatchedCopy",
     "void at::native::vectorized_elementwise_kernel"],
    # The same template with its own functor is its own kernel, and only that one.
    ["void at::native::vectorized_elementwise_kernel<4, mine::Scale, at::detail::Array<char*, 2> >"
     "(int, mine::Scale, at::detail::Array<char*, 2>)"],
])
def test_an_aten_kernel_named_in_the_candidates_library_is_not_its_own(candidates_names):
    assert own_kernels([ATEN_FILL, ATEN_ANONYMOUS], own(*candidates_names)) == set()


def test_a_named_kernel_counts_and_library_calls_alone_do_not():
    named = "void ns::scale_relu<float, 4>(float const*, int)"
    assert own_kernels([named, ATEN_FILL], own(named)) == {named}
    assert own_kernels([named, ATEN_FILL], frozenset()) == set()       # library-only: no_custom_kernel


def test_own_kernels_include_triton_kernels_compiled_by_the_pair(tmp_path):
    entry = tmp_path / "triton" / "3f9a"
    entry.mkdir(parents=True)
    (entry / "fused_add_relu.json").write_text(json.dumps({"name": "fused_add_relu", "num_warps": 4}))
    (entry / "__grp__fused_add_relu.json").write_text(json.dumps({"child_paths": {}}))
    (entry / "broken.json").write_text("{not json")
    assert triton_kernel_names(str(tmp_path / "triton")) == {"fused_add_relu"}
    assert triton_kernel_names("") == set()
    names = own_kernel_names("", str(tmp_path / "triton"))
    assert own_kernels(["fused_add_relu", "fused_add_relu_1", "triton_poi_fused_add_relu_0"], names) == {
        "fused_add_relu"}


def test_a_file_that_is_not_elf64_little_endian_is_not_read():
    assert list(elf_defined_functions(b"MZ\x90\x00" * 32)) == []
    assert list(elf_defined_functions(b"\x7fELF\x02\x02" + bytes(64))) == []     # big-endian


def test_demangle_is_the_itanium_abis():
    anonymous = "void (anonymous namespace)::my_kernel<float>(float*, int)"
    assert demangle("_ZN12_GLOBAL__N_19my_kernelIfEEvPfi") == anonymous
    assert demangle("relu_kernel") == "relu_kernel"                     # extern "C": the name as it is
    assert demangle("_Znot a symbol") == "_Znot a symbol"


@pytest.mark.parametrize("data", [
    b"", b"\x7fELF", b"MZ\x90\x00" * 32,
    b"\x7fELF\x01\x01" + bytes(64),                           # ELF32: not a library this process loads
    b"\x7fELF\x02\x01" + bytes(20),                           # ELF64, cut short
    b"\x7fELF\x02\x01" + bytes(34) + (1 << 40).to_bytes(8, "little") + bytes(16),   # section table far past its end
])
def test_what_is_not_an_elf64_library_defines_nothing(tmp_path, data):
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "broken.so").write_bytes(data)
    assert extension_kernel_names(str(tmp_path / "ext")) == set()


# A real CUDA library built here with nvcc (no GPU needed to build): its host stubs, read from its symbol table,
# must carry the names nvcc registers for the device, the names CUPTI reports and Kineto demangles.
CUDA_SOURCE = r"""
namespace { __global__ void anon_kernel(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] *= 2; } }
static __global__ void static_kernel(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] += 1; }
template <typename T> __global__ void tmpl_kernel(T* x, int n) { if (threadIdx.x < n) x[threadIdx.x] -= 1; }
extern "C" __global__ void c_kernel(float* x) { x[0] = 0; }
namespace mine { __global__ void vectorized_elementwise_kernel(float* x, int n) { x[0] = n; } }
void launch(float* x, int n) {
  anon_kernel<<<1, 32>>>(x, n); static_kernel<<<1, 32>>>(x, n); tmpl_kernel<float><<<1, 32>>>(x, n);
  c_kernel<<<1, 1>>>(x); mine::vectorized_elementwise_kernel<<<1, 1>>>(x, n);
}
"""
CUDA_KERNELS = {"anon_kernel": "(anonymous namespace)::anon_kernel(float*, int)",
                "static_kernel": "static_kernel(float*, int)",
                "tmpl_kernel": "void tmpl_kernel<float>(float*, int)",
                "c_kernel": "c_kernel",
                "vectorized_elementwise_kernel": "mine::vectorized_elementwise_kernel(float*, int)"}


@pytest.fixture(scope="module")
def cuda_library(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    folder = tmp_path_factory.mktemp("cuda_ext")
    (folder / "k.cu").write_text(CUDA_SOURCE)
    subprocess.run(["nvcc", "-O3", "-shared", "-Xcompiler", "-fPIC", "-arch=sm_90", "-o", str(folder / "k.so"),
                    str(folder / "k.cu")], check=True, capture_output=True, timeout=300)
    return folder


def test_a_cuda_librarys_kernels_are_read_whole_from_its_symbols(cuda_library):
    names = extension_kernel_names(str(cuda_library))
    assert own(*CUDA_KERNELS.values()) <= names
    assert own_kernels([ATEN_FILL, ATEN_ANONYMOUS, *CUDA_KERNELS.values()], frozenset(names)) == set(
        CUDA_KERNELS.values())


def test_the_device_names_nvcc_registers_demangle_to_the_names_read(cuda_library):
    # __cudaRegisterFunction is passed each kernel's device name as a string: what CUPTI will report for it. The
    # anonymous namespace's is _GLOBAL__N__<hash>_k_cu_<hash>, not the host compiler's _GLOBAL__N_1.
    names = extension_kernel_names(str(cuda_library))
    data = (cuda_library / "k.so").read_bytes()
    for kernel, expected in CUDA_KERNELS.items():
        source_name = f"{len(kernel)}{kernel}".encode()       # how the Itanium ABI spells the identifier
        device = {s.decode() for s in re.findall(rb"\0(_Z\w+|c_kernel)\0", data)
                  if (s == kernel.encode() or source_name in s) and b"__device_stub__" not in s}
        assert device, kernel
        assert {normalize_kernel_name(demangle(s)) for s in device} == {normalize_kernel_name(expected)} <= names


@pytest.fixture(scope="module")
def cpp_extension(tmp_path_factory):
    # A real torch extension (ATen's and pybind11's headers: thousands of functions defined), built for the CPU.
    from torch.utils.cpp_extension import load_inline
    folder = tmp_path_factory.mktemp("cpp_ext")
    load_inline("kb_profiling_symbols", cpp_sources=CPP_SOURCE, functions=["run"], build_directory=str(folder),
                no_implicit_headers=True)              # the headers CPP_SOURCE names: a third of the build time
    return folder


CPP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>
namespace {
__attribute__((noinline)) void anon_scale(float* x, int64_t n) { for (int64_t i = 0; i < n; ++i) x[i] *= 2.0f; }
}
extern "C" __attribute__((noinline)) void c_scale(float* x, int64_t n) { for (int64_t i = 0; i < n; ++i) x[i] += 1; }
namespace mine {
__attribute__((noinline)) void vectorized_elementwise_kernel(float* x, int64_t n) { x[0] = n; }
}
// Address taken, as nvcc's registration takes a kernel stub's: kept whole, not inlined or cloned.
void (*volatile keep[])(float*, int64_t) = {anon_scale, c_scale, mine::vectorized_elementwise_kernel};
at::Tensor run(at::Tensor x) {
  x = x.contiguous();
  for (auto f : keep) f(x.data_ptr<float>(), x.numel());
  return x;
}
"""


def test_a_torch_extensions_own_functions_are_read_and_atens_are_not_its_own(cpp_extension):
    names = extension_kernel_names(str(cpp_extension))
    mine = own("(anonymous namespace)::anon_scale(float*, long)", "c_scale",
               "mine::vectorized_elementwise_kernel(float*, long)", "run(at::Tensor)")
    assert mine <= names
    assert not any(name.startswith("at::native::") for name in names)
    # The inline ATen and c10 functions its headers instantiate are its own copies, but no kernel of ATen's.
    assert any(name.startswith("at::") or name.startswith("c10::") for name in names)
    launched = [ATEN_FILL, ATEN_ANONYMOUS, "(anonymous namespace)::anon_scale(float*, long)", "c_scale"]
    assert own_kernels(launched, frozenset(names)) == {"(anonymous namespace)::anon_scale(float*, long)", "c_scale"}
