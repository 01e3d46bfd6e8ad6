"""Which GPU kernels one call launched, and which of them are the candidate's own: found in its extension
libraries (TORCH_EXTENSIONS_DIR) or compiled by Triton in this worker (TRITON_CACHE_DIR, a folder of the pair's
own). Both workers answer the parent's profile requests through here (harness.worker.sampler): the candidate's
answer is the `kernels` check, the reference's only keeps the two sides' per-sample work the same."""
from __future__ import annotations

import json
import os
import re
from typing import Any, Callable


def profile_call(call: Callable[[list], Any], inputs: list, device: str):
    """One call under torch.profiler: kernels, custom_kernels, custom_share, other_kernels; None on the CPU."""
    if device == "cpu":
        return None
    import torch
    own = (extension_kernel_names(os.environ.get("TORCH_EXTENSIONS_DIR", ""))
           | triton_kernel_names(os.environ.get("TRITON_CACHE_DIR", "")))
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
    custom = {name: us for name, us in kernels.items() if kernel_base_name(name) in own}
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
    torch._dynamo and sympy (a worker's first trace took 3.5-5.9 s that way on the H200, 0.02 s through here:
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


_MANGLED = re.compile(rb"_Z(N(?:\d+[A-Za-z_][A-Za-z0-9_]*)+E|\d+[A-Za-z_][A-Za-z0-9_]*)")


def extension_kernel_names(ext_dir: str) -> set[str]:
    """Identifiers of the functions defined in the candidate's extension libraries (read from the mangled
    symbol names in the .so files; no external tools needed)."""
    names: set[str] = set()
    for root, _, files in os.walk(ext_dir or "/nonexistent"):
        for name in files:
            if name.endswith(".so"):
                try:
                    data = open(os.path.join(root, name), "rb").read()
                except OSError:
                    continue
                for match in _MANGLED.finditer(data):
                    names.update(_identifiers(match.group(1)))
    return names


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


def _identifiers(mangled: bytes) -> list[str]:
    """The last identifier of a mangled name: b'10scale_reluPKf' -> ['scale_relu']."""
    text = mangled.decode(errors="replace")
    if text.startswith("N"):
        text = text[1:]
    found, i = [], 0
    while i < len(text) and text[i].isdigit():
        j = i
        while j < len(text) and text[j].isdigit():
            j += 1
        length = int(text[i:j])
        found.append(text[j:j + length])
        i = j + length
    return found[-1:] if found else []


def kernel_base_name(name: str) -> str:
    """'void ns::scale_relu<float>(float const*, int)' -> 'scale_relu'."""
    head = name.split("(", 1)[0]
    depth, cleaned = 0, []
    for ch in head:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            cleaned.append(ch)
    head = "".join(cleaned).strip().split(" ")[-1]
    return head.split("::")[-1]
