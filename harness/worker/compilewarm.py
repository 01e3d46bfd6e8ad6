"""The part of a torch.compile baseline's compilation that is the process's, not the problem's, paid beside the
reference's setup instead of inside its first baseline.

A reference worker compiles its baselines once per process, and with the compile cache (harness.run.compilecache)
holding the problem's graphs, a second run's compilation is mostly what any first compile in a process costs:
importing torch._dynamo and torch._inductor, hashing torch's own sources for the cache keys (`torch_key`), and on
the CPU probing which vector ISA the C++ kernels may use (a compile, cached in the compile folder, then a Python
child that loads each candidate ISA's library); what each costs is in docs/measurements.md ("torch.compile
baselines' second run on the CPU"). None of it depends on the problem, so the reference starts it in a thread as
soon as its job arrives (`Warming`), before it builds the model and computes the expected outputs, and its first
baseline waits for what is left (`Warming.wait`, counted in that baseline's `compile_seconds`). The thread imports,
hashes and, on the CPU, probes (child processes, and a build the first time in a cache folder); it touches no device
memory and starts no CUDA work of its own (on a GPU it imports Triton's Python side). `begin` starts the same thread
before the job, for a worker started ahead of it (harness.worker.__main__ calls it for a run's reference workers when
the run has compile modes); `warm` is the work itself.

`cache_counts` reads Inductor's own counters (torch._dynamo.utils.counters): how many of a baseline's graphs the FX
graph cache and the AOTAutograd cache answered, which the reference writes in its log per baseline (`log_line`)."""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
import time
from typing import Any

# The compile stack: the first two start no thread anywhere; compile_fx's import loads Triton's NVIDIA backend, which
# on a GPU host starts a CUDA driver thread (preload leaves it out there).
_THREADLESS_MODULES = ("torch._dynamo", "torch._functorch.aot_autograd")
_STACK_MODULES = (*_THREADLESS_MODULES, "torch._inductor.compile_fx")
# A graph whose wrapper loads Triton kernels imports these on its first call (GPU); nothing of them starts CUDA.
_GPU_MODULES = ("triton", "triton.language", "torch._inductor.runtime.triton_heuristics",
                "torch._inductor.runtime.triton_helpers")


def warm(device: str, folder: str | None = None) -> dict[str, Any]:
    """Import and initialise the compile stack for `device` ("cpu" or a CUDA device); each step's seconds, and the
    first error (a step that fails is left to the compile itself, which reports it as the baseline's error).

    `folder`: the compile cache's entry (harness.run.compilecache.entry, what the job's `env` will name), for a worker
    that warms up before its job; it becomes TORCHINDUCTOR_CACHE_DIR from here on. Where no folder is set (neither
    given nor in the environment), it only imports and hashes: Inductor's import sets that variable to its default
    folder in the machine's temp dir, which is undone here, and the vector ISA probe, which builds and loads a
    library in the cache folder, is left to the job (the temp dir's folder is one candidate code could write)."""
    steps: dict[str, Any] = {}
    if folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    folder_set = "TORCHINDUCTOR_CACHE_DIR" in os.environ
    for name, step in _steps(device if folder_set else None):
        started = time.monotonic()
        try:
            step()
        except Exception as exc:                       # noqa: BLE001 - the baseline's compile meets it again
            steps.setdefault("error", f"{name}: {type(exc).__name__}: {exc}"[:300])
        steps[name] = round(time.monotonic() - started, 3)
    if not folder_set:
        try:
            from torch._inductor.runtime.cache_dir_utils import default_cache_dir
            if os.environ.get("TORCHINDUCTOR_CACHE_DIR") == os.path.abspath(default_cache_dir()):
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)     # (not a folder the job has set meanwhile)
        except Exception as exc:                       # noqa: BLE001
            steps.setdefault("error", f"cache folder: {type(exc).__name__}: {exc}"[:300])
    return steps


def preload(device: str) -> None:
    """A zygote's part of the warm-up (harness.run.zygote.preloads), before it forks any worker: on the CPU warm()'s
    steps without a folder; on a GPU host only the imports that start no thread: torch._dynamo and AOTAutograd
    (torch._inductor.compile_fx's import loads Triton's NVIDIA backend, which starts a CUDA driver thread)."""
    if device == "cpu":
        warm("cpu")
        return
    for name in _THREADLESS_MODULES:
        importlib.import_module(name)


def _steps(device: str | None):
    """(name, step) in order; `device` None: the steps that need no cache folder."""
    def imports() -> None:
        for name in _STACK_MODULES:
            importlib.import_module(name)

    def cache_key() -> None:
        from torch._inductor.codecache import torch_key
        torch_key()

    def vec_isa() -> None:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
        pick_vec_isa()

    def triton() -> None:
        if importlib.util.find_spec("triton") is None:
            return
        for name in _GPU_MODULES:
            importlib.import_module(name)

    def header_folder() -> None:
        # Inductor's precompiled C++ headers (large, one per compiler flags) go to its *default* folder in the
        # machine's temp dir whatever TORCHINDUCTOR_CACHE_DIR says (codecache._HEADER_DIR, fixed at import); read at
        # each use, so pointing it into the cache folder keeps them with the rest, keyed and cleaned alike.
        from torch._inductor import codecache
        if hasattr(codecache, "_HEADER_DIR") and hasattr(codecache, "_HEADER_LOCK_DIR"):
            codecache._HEADER_DIR = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "precompiled_headers")
            codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")

    yield "imports", imports
    yield "torch_key", cache_key
    if device is not None:
        yield "header_folder", header_folder
    if device == "cpu":
        yield "vec_isa", vec_isa
    elif device is not None or importlib.util.find_spec("triton") is not None:
        yield "triton", triton


class Warming:
    """`warm(device)` in a daemon thread, started at once; `wait()` joins it."""

    def __init__(self, device: str, after: "Warming | None" = None):
        self.steps: dict[str, Any] = {}
        self.started = time.monotonic()
        self.seconds: float | None = None
        self.folder_set = "TORCHINDUCTOR_CACHE_DIR" in os.environ
        self._thread = threading.Thread(target=self._run, args=(device, after), name="kb-compile-warm", daemon=True)
        self._thread.start()

    def _run(self, device: str, after: "Warming | None") -> None:
        try:
            if after is not None:               # the part begun before the job; then what needed its folder
                after.wait()
                self.steps["before the job"] = after.seconds
            self.steps.update(warm(device))
        finally:
            self.seconds = round(time.monotonic() - self.started, 3)

    def wait(self) -> float:
        """Block until the warm-up is done; the seconds this call waited."""
        started = time.monotonic()
        self._thread.join()
        return round(time.monotonic() - started, 3)


_begun: Warming | None = None


def begin(device: str, folder: str | None = None) -> Warming:
    """Start the warm-up before a job has arrived (a worker started ahead of its job, which waits for it anyway);
    the job's `start` then takes this one over and its first baseline waits for what is left, so that none of it
    runs outside `compile_seconds` on the pair's critical path. The worker's entry point (harness.worker.__main__)
    calls it for a reference worker of a run with compile modes (KB_COMPILE_WARM, harness.run.schedule
    .compile_warm_env) before it reads its job, with `folder` the compile cache's entry (KB_COMPILE_CACHE)."""
    global _begun
    if _begun is None:
        if folder:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
        _begun = Warming(device)
    return _begun


def start(device: str, modes: list[str]) -> Warming | None:
    """A Warming for a job that compiles baselines (`modes` not empty), else None: the one `begin` started before
    the job where it had the cache folder, else a new one (after that one, where there is one)."""
    if not modes:
        return None
    if _begun is not None and _begun.folder_set:
        return _begun
    return Warming(device, after=_begun)    # (begun without a folder: the vector ISA probe is still to come)


_COUNTERS = (("fx graph cache", "inductor", "fxgraph_cache_"), ("AOTAutograd cache", "aot_autograd", "autograd_cache_"))


def cache_counts() -> dict[str, dict[str, int]]:
    """{'fx graph cache': {'hit': n, 'miss': n, 'bypass': n}, 'AOTAutograd cache': {...}} as Inductor counts them in
    this process so far (all zero before torch._dynamo is imported)."""
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None) or {}
    return {label: {what: int(counters.get(group, {}).get(prefix + what, 0)) for what in ("hit", "miss", "bypass")}
            for label, group, prefix in _COUNTERS}


def counted_since(before: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    now = cache_counts()
    return {label: {what: now[label][what] - before.get(label, {}).get(what, 0) for what in now[label]}
            for label in now}


def log_line(mode: str, seconds: float, counts: dict[str, dict[str, int]], waited: float | None = None) -> str:
    """The reference log's line for one baseline: its compile_seconds, what it waited for the warm-up (the first
    baseline) and what the caches answered, e.g. `... fx graph cache: 1 hit, 0 miss, 0 bypass; ...`."""
    caches = "; ".join(f"{label}: " + ", ".join(f"{n} {what}" for what, n in c.items()) for label, c in counts.items())
    wait = f" (of which {waited:.2f} s waiting for the warm-up)" if waited is not None else ""
    return f"kb-harness: compile baseline {mode}: {seconds:.2f} s{wait}; {caches}"


def warm_line(warming: Warming) -> str:
    """The reference log's line for the warm-up: its steps' seconds, all of them beside the setup until the first
    baseline waited."""
    steps = ", ".join(f"{k} {v:.2f} s" if isinstance(v, float) else f"{k} {v}" for k, v in warming.steps.items())
    total = f"{warming.seconds:.2f} s" if warming.seconds is not None else "not finished"
    return f"kb-harness: compile warm-up beside the setup: {total} ({steps})"
