"""Which GPU kernels one call launched, and which of them are the candidate's own: a kernel is the candidate's when
its whole demangled signature is that of a function defined in the candidate's extension libraries
(TORCH_EXTENSIONS_DIR, read from their ELF symbol tables) or the name of a Triton kernel compiled in this worker
(TRITON_CACHE_DIR, a folder of the pair's own). Never by a part of the name: ATen's kernels share base names and
namespaces with anything a candidate may define. Both workers answer the parent's profile requests through here
(harness.worker.sampler): the candidate's answer is the `kernels` check, the reference's only keeps the two sides'
per-sample work the same."""
from __future__ import annotations

import ctypes
import functools
import json
import mmap
import os
import re
import struct
from typing import Any, Callable, Iterable, Iterator


def profile_call(call: Callable[[list], Any], inputs: list, device: str):
    """One call under torch.profiler: kernels, custom_kernels, custom_share, other_kernels; None on the CPU."""
    if device == "cpu":
        return None
    import torch
    own = own_kernel_names(os.environ.get("TORCH_EXTENSIONS_DIR", ""), os.environ.get("TRITON_CACHE_DIR", ""))
    torch.cuda.synchronize()
    with cuda_trace() as prof:
        call(inputs)
        torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for event in prof.function_events:
        if str(getattr(event, "device_type", "")).endswith("CUDA"):
            us = getattr(event, "device_time_total", None)
            if us is None:
                us = getattr(event, "cuda_time_total", 0.0)
            kernels[event.name] = kernels.get(event.name, 0.0) + float(us or 0.0)
    total = sum(kernels.values())
    custom = {name: kernels[name] for name in own_kernels(kernels, own)}
    from harness.shared.messages import Profile
    return Profile(len(kernels), sorted(custom)[:20], (sum(custom.values()) / total) if total else 0.0,
                   sorted(set(kernels) - set(custom))[:20])


def ncu_call(call: Callable[[list], Any], inputs: list, warmup: int, device: str):
    """`warmup` calls, then one call between cudaProfilerStart and cudaProfilerStop (messages.NcuRequest): under
    `ncu --profile-from-start off` only that call's kernels are profiled. Outside ncu the two are no-ops. The
    warm-up runs first so that builds, Triton's JIT and cuDNN's autotuning are not what gets profiled."""
    import time
    import torch
    from harness.shared.messages import NcuCalled
    for _ in range(max(0, warmup)):
        call(inputs)
    if device != "cpu":
        torch.cuda.synchronize()
    started = time.perf_counter()
    if device != "cpu":
        torch.cuda.profiler.start()
    try:
        call(inputs)
        if device != "cpu":
            torch.cuda.synchronize()
    finally:
        if device != "cpu":
            torch.cuda.profiler.stop()
    return NcuCalled(max(0, warmup), (time.perf_counter() - started) * 1e3)


def cuda_trace():
    """A trace of CUDA activity only, through the autograd profiler that torch.profiler.profile wraps. Not through
    torch.profiler.profile itself: its start asks `hasattr(torch, "_inductor")`, which imports torch._inductor,
    torch._dynamo and sympy (seconds of a worker's first trace that way, next to nothing through here:
    benchmarks/profiler_start.py)."""
    from torch.autograd.profiler import profile
    return profile(use_cpu=False, use_device="cuda", use_kineto=True)


def warm_up() -> None:
    """Start and stop CUDA tracing once, with nothing to trace: the first start in a process costs more than the
    later ones (CUPTI starting). Both workers of a pair call it before their timed rounds (common.warm_profiler)."""
    import torch
    torch.cuda.init()
    with cuda_trace():
        torch.cuda.synchronize()


def own_kernels(launched: Iterable[str], own: frozenset[str]) -> set[str]:
    """The launched kernels that are the candidate's: their whole normalized name is one of `own`
    (own_kernel_names). 'void at::native::vectorized_elementwise_kernel<4, ...>(...)' is not the candidate's
    however often 'vectorized_elementwise_kernel' or 'at::native' occur in its library."""
    return {name for name in launched if normalize_kernel_name(name) in own}


def own_kernel_names(ext_dir: str, triton_dir: str) -> frozenset[str]:
    """Normalized names of every function the candidate's extension libraries define, and of the Triton kernels
    this pair's worker compiled."""
    triton = {normalize_kernel_name(name) for name in triton_kernel_names(triton_dir)}
    return frozenset(extension_kernel_names(ext_dir) | triton)


def triton_kernel_names(cache_dir: str) -> set[str]:
    """Names of the Triton kernels this pair's worker compiled: each compiled kernel leaves <name>.json metadata
    in TRITON_CACHE_DIR, which the harness points at a folder of the pair's own."""
    names: set[str] = set()
    for root, _, files in os.walk(cache_dir or "/nonexistent"):
        for name in files:
            if name.endswith(".json") and not name.startswith("__grp__"):
                try:
                    with open(os.path.join(root, name)) as f:
                        meta = json.load(f)
                except (OSError, ValueError):
                    continue
                if isinstance(meta, dict) and isinstance(meta.get("name"), str):
                    names.add(meta["name"])
    return names


def normalize_kernel_name(name: str) -> str:
    """One spelling for one signature. The profiler's names come from __cxa_demangle (Kineto), ours from the same
    demangler, so this only guards against other demanglers: GCC's '{anonymous}', and spaces ('> >' or '>>',
    'char *' or 'char*'). Spaces between two words ('unsigned int') are kept."""
    text = name.replace("{anonymous}", "(anonymous namespace)")
    text = " ".join(text.split())
    return re.sub(r" ?([^\w ]) ?", r"\1", text)


def extension_kernel_names(ext_dir: str) -> set[str]:
    """Normalized, demangled names of the functions defined in the .so files under the candidate's extension
    folder. A __global__ kernel's host stub has the kernel's own mangled name (nvcc gives an anonymous namespace
    the same _GLOBAL__N__<hash> on both sides), so this is the name the profiler shows for it. Functions only
    referenced (undefined symbols: the ATen calls a candidate makes) are not its own and are not read."""
    names: set[str] = set()
    for root, _, files in os.walk(ext_dir or "/nonexistent"):
        for name in files:
            if name.endswith(".so"):
                path = os.path.join(root, name)
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                names.update(_library_names(path, stat.st_size, stat.st_mtime_ns))
    return names


@functools.lru_cache(maxsize=64)
def _library_names(path: str, size: int, mtime_ns: int) -> frozenset[str]:
    """extension_kernel_names of one library, kept while it is unchanged (size and mtime are the key): each pair
    profiles three calls, and an extension built with torch's headers defines ~10^4 functions (~0.2 s to read)."""
    return frozenset(normalize_kernel_name(demangle(symbol)) for symbol in _so_functions(path))


def _so_functions(path: str) -> set[str]:
    """Defined function symbols of one shared library; none when it cannot be read or is not ELF64
    little-endian (a library this process could not load either, so none of its kernels ran)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return set(elf_defined_functions(data))
    except (OSError, ValueError, struct.error, IndexError, UnicodeDecodeError):
        return set()


_SHT_SYMTAB, _SHT_DYNSYM = 2, 11            # .symtab (local symbols too: anonymous namespaces) and .dynsym
_STT_FUNC, _STT_GNU_IFUNC = 2, 10
_SHDR = struct.Struct("<IIQQQQIIQQ")        # Elf64_Shdr: name type flags addr offset size link info addralign entsize
_SYM = struct.Struct("<IBBHQQ")             # Elf64_Sym: name info other shndx value size


def elf_defined_functions(data: bytes | mmap.mmap) -> Iterator[str]:
    """Names of the functions an ELF64 little-endian file defines (section index not SHN_UNDEF), from its symbol
    tables: a pure-Python read, as neither nm nor readelf is sure to be on a GPU host."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind not in (_SHT_SYMTAB, _SHT_DYNSYM) or entsize != _SYM.size:
            continue
        strtab = sections[link]
        strings = bytes(data[strtab[4]:strtab[4] + strtab[5]])
        for name, info, _, shndx, _, _ in _SYM.iter_unpack(bytes(data[offset:offset + size - size % entsize])):
            if shndx != 0 and info & 0xF in (_STT_FUNC, _STT_GNU_IFUNC) and name:
                yield strings[name:strings.index(b"\0", name)].decode()


def demangle(symbol: str) -> str:
    """The Itanium ABI demangling of `symbol` by libstdc++'s __cxa_demangle, the function Kineto names kernels
    with; the symbol itself when it is not a mangled name (extern "C" kernels) or no demangler loads."""
    cxa = _cxa_demangle()
    if cxa is None or not symbol.startswith("_Z"):
        return symbol
    status = ctypes.c_int(0)
    out = cxa(symbol.encode(), None, None, ctypes.byref(status))
    if not out:
        return symbol
    try:
        return ctypes.string_at(out).decode(errors="replace")
    finally:
        _libc().free(ctypes.c_void_p(out))


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> Any:
    try:
        fn = ctypes.CDLL("libstdc++.so.6").__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p       # a malloc'd string: freed by demangle, so not c_char_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    return fn


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    return libc
