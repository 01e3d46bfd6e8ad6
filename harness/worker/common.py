"""What every worker role shares: the channel to the parent, module loading, problem settings and inputs,
and the hooks around torch.utils.cpp_extension that tell compile errors and CPU-only runs apart.

Runs only inside worker processes, never in the parent.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.shared.channel import LineReader, encode, write_all
from harness.shared.messages import parse, wire


class Conn:
    """The worker's end of the private channel. Every message carries the parent's token; every reply is a
    harness.shared.messages dataclass with a KIND."""

    def __init__(self, cmd_fd: int, res_fd: int):
        self.reader = LineReader(cmd_fd)
        self.res_fd = res_fd
        self.token = None
        self.first: dict[str, Any] = {}     # fields the next reply carries (a confined worker's sandbox report)

    def recv(self) -> dict[str, Any]:
        message = self.reader.read(None)
        token = message.pop("token", None)
        if self.token is None:
            self.token = token
        return message

    def with_next_reply(self, **fields: Any) -> None:
        """Fields of the next reply, whatever it is (every first reply of a confined role has them: `sandbox`)."""
        self.first = fields

    def reply(self, message: Any) -> None:
        """Send `message` (a messages dataclass with a KIND) to the parent."""
        if self.first:
            first, self.first = self.first, {}
            message = dataclasses.replace(message, **first)
        write_all(self.res_fd, encode({"token": self.token, **wire(message)}))


class Handlers:
    """A worker's dispatch table: each request type of harness.shared.messages it serves, with what answers it (the
    parsed request in, a reply dataclass out). `parsers`: a type read by a function of its own instead of
    messages.parse (the staged call's, which parses a layout once, not at every sample)."""

    def __init__(self, table: dict[type, Callable[[Any], Any]],
                 parsers: dict[type, Callable[[dict[str, Any]], Any]] | None = None):
        self.table, self.parsers = table, parsers or {}
        self.by_op = {cls.OP: cls for cls in table}

    def reply(self, message: dict[str, Any]) -> Any:
        """The reply to `message`, or None when its op is not one this table serves."""
        cls = self.by_op.get(message.get("op"))
        if cls is None:
            return None
        read = self.parsers.get(cls)
        return self.table[cls](read(message) if read is not None else parse(cls, message))


def describe(exc: BaseException) -> str:
    """One line: the exception type and the first line of its message."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500] if first else type(exc).__name__


def is_oom(exc: BaseException | None) -> bool:
    """An out-of-memory error, here or anywhere down the exception's cause chain."""
    while exc is not None:
        if type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower():
            return True
        exc = exc.__cause__
    return False


def tail_traceback(exc: BaseException, limit: int = 4000) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-limit:]


def load_module(name: str, path: str):
    """Import a file as a fresh module named `name` (never '__main__', so `if __name__ == '__main__'` stays off)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- problem settings and inputs

_DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16", "half": "float16",
           "bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "float64"}
DEFAULT_TOLERANCE = {"float32": (1e-4, 1e-4), "float64": (1e-7, 1e-7), "float16": (1e-2, 1e-2),
                     "bfloat16": (1e-2, 1e-2)}


class ProblemError(Exception):
    """The problem file itself is wrong (bad setting, bad get_inputs)."""


@dataclass
class Settings:
    dtype: str = "float32"
    atol: float = 1e-4
    rtol: float = 1e-4
    allow_tf32: bool = False
    dtype_source: str = "default"       # "problem" (its DTYPE), "run" (--precision) or "default" (float32)


def problem_settings(module, precision: str | None = None) -> Settings:
    """The problem's dtype and tolerances: its own DTYPE wins; else the run's --precision; else float32. The
    tolerances default per dtype (DEFAULT_TOLERANCE) unless the problem sets ATOL/RTOL."""
    source = "problem" if getattr(module, "DTYPE", None) is not None else "run" if precision else "default"
    raw = getattr(module, "DTYPE", None) or precision or "float32"
    if not isinstance(raw, str) or raw.lower() not in _DTYPES:
        raise ProblemError(f"DTYPE must be one of float32, float16, bfloat16, got {raw!r}")
    dtype = _DTYPES[raw.lower()]
    atol, rtol = DEFAULT_TOLERANCE[dtype]
    for name in ("ATOL", "RTOL"):
        value = getattr(module, name, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ProblemError(f"{name} must be a non-negative number, got {value!r}")
    atol = float(getattr(module, "ATOL", atol) if getattr(module, "ATOL", None) is not None else atol)
    rtol = float(getattr(module, "RTOL", rtol) if getattr(module, "RTOL", None) is not None else rtol)
    allow = getattr(module, "ALLOW_TF32", False)
    if not isinstance(allow, bool):
        raise ProblemError(f"ALLOW_TF32 must be True or False, got {allow!r}")
    return Settings(dtype, atol, rtol, allow, source)


def setup_torch(settings: Settings) -> None:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = settings.allow_tf32
    torch.backends.cudnn.allow_tf32 = settings.allow_tf32
    torch.set_float32_matmul_precision("high" if settings.allow_tf32 else "highest")
    torch.set_grad_enabled(False)
    threads = os.environ.get("KB_CPU_THREADS")
    if threads:                                    # the same on both sides (config cpu_threads)
        torch.set_num_threads(int(threads))
    _hold_threads("KB_CPUS")                       # both sides of a pair on the same cores


def hold_spare_cores() -> bool:
    """A worker started ahead of its job (run.workerproc.SpareWorkers) imports torch on the slot's cores other than
    its timing cores (KB_SPARE_CPUS), where it does not compete with a pair's timed threads; whether it did.
    Called before any thread exists."""
    return _hold_threads("KB_SPARE_CPUS") is not None


def hold_slot_cores() -> None:
    """Back on the slot's whole share of cores (KB_CPUS) once the job has arrived."""
    _hold_threads("KB_CPUS")


def pin_for_timing() -> list[int] | None:
    """Hold every thread of this process to the slot's timing cores (KB_TIMING_CPUS) from now on; the cores, or None
    where there are none to hold to. Both sides of a pair do it before timing starts, so each side's timed thread
    runs on the same core as the other's. With a slot's whole share of cores to choose from, the scheduler leaves
    each process on a core of its own for seconds at a time, and on a shared machine one core can be slower than
    another for that long (steal time, a busy sibling thread), which put runs of rounds off 1.0 on one side of A/A
    process pairs; with this pin they are rare (docs/measurements.md)."""
    return _hold_threads("KB_TIMING_CPUS")


def env_cores(variable: str) -> list[int]:
    """The cores the environment variable lists (KB_CPUS, KB_TIMING_CPUS, KB_SPARE_CPUS: "4,5,6"); [] where it names
    none or is not such a list."""
    try:
        return sorted({int(c) for c in os.environ.get(variable, "").split(",") if c.strip()})
    except ValueError:
        return []


def _hold_threads(variable: str) -> list[int] | None:
    """Hold every thread of this process (and the threads it starts later) to the cores listed in the environment
    variable; the cores, or None when it names none or they cannot be set."""
    cores = env_cores(variable)
    if not cores:
        return None
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), cores)
            except OSError:                            # a thread that just ended
                pass
    except OSError:
        return None
    return cores


def init_inputs(problem) -> list:
    args = problem.get_init_inputs()
    if not isinstance(args, (list, tuple)):
        raise ProblemError(f"get_init_inputs() must return a list, got {type(args).__name__}")
    return list(args)


def as_tensor_list(output) -> list:
    """A forward's result as a list of plain tensors; anything else is a ValueError with a readable reason."""
    import torch
    items = list(output) if isinstance(output, (list, tuple)) else [output]
    result = []
    for i, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            raise ValueError(f"output {i} is a {type(item).__name__}, expected a tensor")
        result.append(item.detach().as_subclass(torch.Tensor))
    return result


# ---------------------------------------------------------------- extension hooks

class SkipCandidate(BaseException):
    """Raised inside the worker when a candidate cannot run on this device (BaseException: `except Exception`
    in candidate code does not swallow it)."""


@dataclass
class ExtensionLog:
    calls: list[str] = field(default_factory=list)          # extension names requested
    compile_errors: list[str] = field(default_factory=list)  # full compiler messages
    skip_reason: str | None = None


def _uses_cuda(kind: str, args: tuple, kwargs: dict) -> bool:
    if kind == "load_inline":
        cuda = kwargs.get("cuda_sources", args[2] if len(args) > 2 else None)
        return bool(cuda) or bool(kwargs.get("with_cuda"))
    sources = kwargs.get("sources", args[1] if len(args) > 1 else [])
    if isinstance(sources, str):
        sources = [sources]
    return any(str(s).endswith((".cu", ".cuh")) for s in sources or []) or bool(kwargs.get("with_cuda"))


def install_extension_hooks(device: str) -> ExtensionLog:
    """Wrap load_inline/load: record each extension, turn build failures into compile errors, and refuse CUDA
    sources on the CPU path. Installed before candidate code is imported, so `from ... import load_inline` in
    the candidate gets the wrapper."""
    import torch.utils.cpp_extension as ce
    log = ExtensionLog()

    def wrap(kind: str, original: Callable) -> Callable:
        def hooked(*args, **kwargs):
            name = kwargs.get("name", args[0] if args else "?")
            log.calls.append(str(name))
            if device == "cpu" and _uses_cuda(kind, args, kwargs):
                log.skip_reason = f"extension '{name}' has CUDA sources and this run is on the CPU"
                raise SkipCandidate(log.skip_reason)
            kwargs["verbose"] = False               # verbose=True prints the compiler's output instead of raising it
            try:
                return original(*args, **kwargs)
            except Exception as exc:
                log.compile_errors.append(f"extension '{name}': {exc}")
                raise
        hooked.__wrapped__ = original
        return hooked

    ce.load_inline = wrap("load_inline", ce.load_inline)
    ce.load = wrap("load", ce.load)
    return log


_DIAGNOSTIC = re.compile(r"(\berror\b\s*(#\w+-D)?:|\bfatal error\b|undefined reference|undefined symbol)", re.I)
_NOISE = ("FAILED:", "ninja:", "[", "c++ ", "g++ ", "gcc ", "nvcc ", "/usr/local/cuda/bin/nvcc ", "Error building extension")


def compiler_summary(message: str, max_lines: int = 20) -> tuple[str, str]:
    """(one line, the first error lines) from a torch extension build failure.

    The one line names the extension and the compiler's first diagnostic, with build-directory paths cut to the
    file name, e.g. "extension 'conv' failed to build: main.cpp:2:47: error: 'x' was not declared in this scope".
    """
    name_match = re.search(r"extension '([^']+)'", message)
    name = name_match.group(1) if name_match else "?"
    symbol = re.search(r"undefined symbol: (\S+)", message)
    if symbol:                                      # it compiled, but a declared function was never defined
        pretty = _demangle(symbol.group(1))
        return (f"extension '{name}' failed to load: undefined symbol {pretty} (declared but never defined)"[:400],
                message[-4000:])
    lines = [line.rstrip() for line in message.splitlines() if line.strip()]
    diagnostics = [_short_paths(line.strip()) for line in lines
                   if _DIAGNOSTIC.search(line) and not line.lstrip().startswith(_NOISE)]
    if diagnostics:
        first = diagnostics[0]
    else:
        rest = [line for line in lines if not line.lstrip().startswith(_NOISE)]
        first = _short_paths(rest[-1].strip()) if rest else "the build failed (no compiler diagnostic)"
    detail = "\n".join(diagnostics[:max_lines]) if diagnostics else "\n".join(lines[-max_lines:])
    return f"extension '{name}' failed to build: {first}"[:400], detail[-4000:]


def _demangle(symbol: str) -> str:
    import shutil
    import subprocess
    if shutil.which("c++filt"):
        try:
            return subprocess.run(["c++filt", symbol], capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return symbol


def _short_paths(line: str) -> str:
    return re.sub(r"(/[^\s:]+/)+([^/\s:]+\.(cpp|cu|cuh|h|hpp|o|so))", r"\2", line)


# Modules that take a second or more to import; a trace line names those first imported during its stage (a lazy
# import inside torch, such as unravel_index's of sympy, can cost each reference seconds).
_HEAVY = ("sympy", "torch._dynamo", "torch._inductor", "triton", "numpy", "scipy")
_heavy_seen: set[str] = set()


def trace(stage: str) -> None:
    """With KB_TRACE=1 (benchmarks/trace_pair.py): one log line per stage of a worker's job, with the wall clock, so
    that the stages of both workers of a pair line up. Nothing otherwise."""
    if os.environ.get("KB_TRACE") == "1":
        import time
        new = [m for m in _HEAVY if m in sys.modules and m not in _heavy_seen]
        _heavy_seen.update(new)
        imported = f" [imported {', '.join(new)}]" if new else ""
        print(f"kb-harness: trace {time.time():.4f} {stage}{_device_memory()}{imported}", file=sys.stderr, flush=True)


def _device_memory() -> str:
    """' (allocated X MiB, peak Y MiB, reserved Z MiB)' of torch's allocator where CUDA is in use in this process,
    else ''."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return ""
    mib = 1 << 20
    return (f" (allocated {torch.cuda.memory_allocated() // mib} MiB, "
            f"peak {torch.cuda.max_memory_allocated() // mib} MiB, reserved {torch.cuda.memory_reserved() // mib} MiB)")


def warm_profiler() -> None:
    """A process's first CUDA trace costs more than the later ones (CUPTI starting; through torch.profiler it also
    imported torch._inductor, which takes seconds: profiling.cuda_trace). Both roles pay it before their timed
    rounds (KB_WARM_PROFILER, set on GPU slots with the defenses on), so the first profiled call does not stall a
    round and both sides run the rounds with the profiler in the same state. After the job arrives: it starts the
    process's CUDA context, which a spare must not do while another process is timed. A failure only means the
    first profiled call pays it, as before."""
    if os.environ.get("KB_WARM_PROFILER") != "1":
        return
    try:
        from harness.worker.profiling import warm_up
        warm_up()
    except Exception as exc:                           # noqa: BLE001
        print(f"kb-harness: profiler warm-up failed: {describe(exc)}", file=sys.stderr, flush=True)


def worker_device() -> str:
    return os.environ.get("KB_DEVICE", "cpu")


# ---------------------------------------------------------------- timed inputs

def device_inputs(problem, seed: int, settings: Settings, device: str, size=None) -> list:
    """The problem's get_inputs() after manual_seed(seed), with tensors created directly on the device (the same
    distributions as on the CPU, drawn fast enough for every trial and every timed sample); the reference and
    candidate workers draw the same ones for the same seed. `size`: one of the problem's declared sizes
    (harness.worker.sizes; None: the main size)."""
    return device_input_sets(problem, seed, settings, device, 1, size)[0]


def device_input_set_at(problem, seed: int, settings: Settings, device: str, index: int, size=None) -> list:
    """Set `index` of what device_input_sets(..., count > index) draws, drawing the sets before it and dropping
    each (one set on the device at a time): the inputs of one captured call, drawn again."""
    import torch
    if device == "cpu":
        torch.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)
    one: list = []
    for _ in range(index + 1):
        one = []                                    # the previous set goes before the next is drawn
        one = _draw_set(problem, settings, device, size)
    return one


def _draw_set(problem, settings: Settings, device: str, size=None) -> list:
    import torch
    from harness.worker.sizes import applied
    with torch.device(device), applied(problem, size):
        inputs = problem.get_inputs()
    if not isinstance(inputs, (list, tuple)):
        raise ProblemError(f"get_inputs() must return a list, got {type(inputs).__name__}")
    dtype = getattr(torch, settings.dtype)
    return [(x.to(device=device, dtype=dtype) if x.is_floating_point() else x.to(device))
            if isinstance(x, torch.Tensor) else x for x in inputs]


def device_input_sets(problem, seed: int, settings: Settings, device: str, count: int, size=None) -> list[list]:
    """`count` input sets drawn one after another after one manual_seed(seed) (graph mode: one set per captured
    call; seeding once, not per set: seeding the CUDA generators costs ~0.5 ms a time)."""
    import torch
    if device == "cpu":
        torch.default_generator.manual_seed(seed)   # torch.manual_seed also queues a CUDA seeding, with a stack trace
    else:
        torch.manual_seed(seed)
    return [_draw_set(problem, settings, device, size) for _ in range(count)]


# ---------------------------------------------------------------- device memory

def apply_memory_share(share: int | None, device: str) -> int | None:
    """Cap this process's device memory at `share` bytes (torch.cuda.set_per_process_memory_fraction: an allocation
    past it raises OutOfMemoryError here, whatever the card has free), before anything is allocated; returns the
    card's memory (None on the CPU path, or when no share is given and nothing is capped)."""
    if device == "cpu":
        return None
    import torch
    from harness.shared.memplan import fraction
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    card = int(torch.cuda.get_device_properties(index).total_memory)
    if share is not None:
        torch.cuda.set_per_process_memory_fraction(fraction(share, card), index)
    return card


def tensor_bytes(items) -> int:
    """Bytes of the tensors in `items` (a list, nested lists included)."""
    import torch
    total = 0
    for x in items:
        if isinstance(x, (list, tuple)):
            total += tensor_bytes(x)
        elif isinstance(x, torch.Tensor):
            total += x.numel() * x.element_size()
    return total
