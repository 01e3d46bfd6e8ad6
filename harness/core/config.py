"""One typed config object: defaults, overridden by config.yaml, overridden by CLI flags, validated once."""
from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.core.errors import InputError, UsageError
from harness.core.numbers import as_float
from harness.core.untrusted import ReadError, read_bytes, show_path, show_text, show_value


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
TIMING_MODES = ("auto", "cold", "graph")     # what a user may ask for: each but auto a row of run.modes.MODES
PRECISIONS = ("fp32", "fp16", "bf16")
# Where a run's pairs are measured: executor name -> the module under harness/run/executors that implements it
# (its `make(cfg)` returns a harness.run.executors.Executor). Adding an executor is a module there and a row here.
EXECUTORS = {"local": "harness.run.executors.local", "dask": "harness.run.executors.dask"}


@dataclass(frozen=True)
class TimingConfig:
    """Paired, interleaved timing (README: How a speedup is measured)."""
    warmup: int = 10                    # untimed calls per side before sampling
    samples: int | None = None          # deprecated (schema 1): at least this many samples per side; sets min_rounds
    flush_l2: bool = True               # write 2x the L2 (CPU: 2x the last-level cache) before every cold sample
    mode: str = "auto"                  # auto | cold | graph: auto = graph when the reference's call < graph_below_ms
    graph_below_ms: float = 0.1         # auto mode: calls shorter than this are timed as CUDA-graph replays
    graph_calls: int = 20               # graph mode: calls captured per graph (a sample = replay time / calls)
    block_samples: int = 4              # samples per block; a round is blocks A B B A (A = reference, B = candidate)
    block_warmup: int = 1               # samples at the start of each block run and checked but not counted
    min_rounds: int = 10                # rounds before the stopping rule is looked at
    max_rounds: int = 400               # never more rounds than this
    target_rel_ci: float = 0.005        # stop when the speedup's 95% CI half-width is within this fraction of it
    max_pair_seconds: float = 30.0      # time cap for one pair's timed rounds; hitting it adds the flag `noisy`
    baseline_blocks: int = 3            # reference blocks before and after each pair (the interference check)
    interference_tolerance: float = 0.03  # reference slower during the pair than before and after by more: invalid
    consistency_tolerance: float = 0.25   # parent's clock vs the candidate's reported time (timing_inconsistent)
    compile_modes: tuple[str, ...] = ("default", "max-autotune-no-cudagraphs")   # torch.compile baselines; [] = off
    processes: int = 1                  # process pairs per pair, each measured whole; the speedups combined (pyperf)
    between_process: str = "auto"      # processes 1: widen the CI by the machine's between-process term (calibrate's,
                                        # else a default; harness.run.between) | off
    sizes: str = "main"                 # problems with several sizes (SIZES): main = time the main size only,
                                        # all = time every size too (correctness runs on every size either way)
    staged_gpu: bool = True             # GPU: the reference stages every timed sample's inputs in device memory the
                                        # candidate maps, a flusher process flushes the L2 (issue 44; the CPU path
                                        # always stages); off: each side draws, flushes and checks in its own process

    def rounds_floor(self) -> int:
        """min_rounds, raised so that a deprecated `samples` still means at least that many samples per side."""
        if self.samples is None:
            return self.min_rounds
        return max(self.min_rounds, -(-self.samples // (2 * self.block_samples)))


# The CPU path's own timing defaults (README: The CPU path's defaults; the runs behind them: docs/measurements.md): what
# `cpu_timing` holds when no config file sets it. A key the config file sets under `timing` (and no `cpu_timing`
# section) or a flag sets wins over these.
CPU_TIMING: dict[str, Any] = {"target_rel_ci": 0.05, "max_pair_seconds": 8.0, "compile_modes": ()}


@dataclass(frozen=True)
class Config:
    problems_dir: str = "problems"
    solutions_dir: str = "solutions"
    output_dir: str = "results"
    cache_dir: str = ".cache"           # build cache: one directory per candidate build key
    level: str | None = None            # e.g. "level1" or "1"; None = all levels
    problem: str = "*"                  # glob over "<level>/<name>" (or "<name>")
    candidate: str = "*"                # glob over the candidate's file stem (or "<level>/<name>/<stem>")
    device: str = "auto"                # auto | cuda | cpu
    precision: str | None = None        # fp32 | fp16 | bf16 for problems without DTYPE; None = float32
    gpus: tuple[int, ...] = (0,)        # GPU indices pairs are scheduled over
    trials: int = 5                     # correctness trials, each with fresh inputs
    seed: int | None = None             # base seed for weights and trials; None = drawn from os.urandom per run
    cpu_threads: int = 1                # intra-op threads on both sides (torch, OpenMP, MKL), recorded
    timeout: float = 600.0              # seconds for one (problem, candidate) pair in its worker
    build_timeout: float = 900.0        # seconds for one candidate's build
    reference_timeout: float = 900.0    # seconds for the reference side of one problem
    jobs: int = 0                       # parallel builds; 0 = number of CPU cores
    cuda_arch: str | None = None        # TORCH_CUDA_ARCH_LIST for builds; None = the first GPU's capability
    defenses: bool = True               # anti-cheat checks (README: Hardening); off only to measure their cost
    spare_workers: str = "auto"         # start the next worker ahead: auto (on GPU slots) | on | off
    worker_memory_gb: float | None = None   # memory cap per worker (RLIMIT_DATA); None = 0.8 x RAM, 0 = none
    gpu_memory_gb: float | None = None      # GPU memory a pair's two workers plan within, in GiB; None = the card's
    executor: str = "local"             # local | dask (README: Scale-out on Dask)
    scheduler: str | None = None        # dask scheduler address (tcp://host:8786); None = start a LocalCluster
    dask_workers: int = 0               # LocalCluster workers on the CPU; 0 = 2 (on CUDA: one per GPU in gpus)
    timing: TimingConfig = field(default_factory=TimingConfig)
    cpu_timing: dict[str, Any] = field(default_factory=lambda: dict(CPU_TIMING))   # timing keys for the CPU path

    def build_jobs(self) -> int:
        return self.jobs or (os.cpu_count() or 1)

    def for_device(self, device: str) -> Config:
        """The config a run on `device` uses: on the CPU path, `cpu_timing`'s keys replace `timing`'s (load_config
        has already dropped those a flag or the file's own `timing` section set); elsewhere unchanged."""
        if device != "cpu" or not self.cpu_timing:
            return self
        return dataclasses.replace(self, timing=dataclasses.replace(self.timing, **self.cpu_timing))


_FIELD_TYPES = {f.name: f for f in dataclasses.fields(Config)}
_TIMING_FIELDS = {f.name: f for f in dataclasses.fields(TimingConfig)}


def load_config(path: Path | None, overrides: dict[str, Any], flags: dict[str, str] | None = None) -> Config:
    """Defaults <- YAML file (if any) <- overrides (flags). Raises InputError/UsageError naming the bad key: a bad
    flag value names the flag (`flags` maps a dotted key such as 'timing.samples' to its flag, '--samples')."""
    values: dict[str, Any] = {}
    if path is not None:
        values.update(_read_yaml(path))
    source = str(path) if path else "defaults"
    merged = merge_overrides(values, overrides)
    try:
        return _without_flagged(_build(merged, source), overrides)
    except UsageError:
        for key, value in flatten(overrides).items():       # a flag whose value is bad on its own takes the blame
            flag = (flags or {}).get(key) or "--" + key.split(".")[-1].replace("_", "-")
            try:
                _build(merge_overrides({}, _nest(key, value)), flag)
            except UsageError as exc:
                raise type(exc)(_flag_message(str(exc), flag, key, value)) from None
        raise


def _without_flagged(cfg: Config, overrides: dict[str, Any]) -> Config:
    """A timing key set by a flag applies on every device: it leaves `cpu_timing`."""
    flagged = {k for k, v in (overrides.get("timing") or {}).items() if v is not None}
    if not flagged & cfg.cpu_timing.keys():
        return cfg
    return dataclasses.replace(cfg, cpu_timing={k: v for k, v in cfg.cpu_timing.items() if k not in flagged})


def config_from_dict(values: Any, source: str) -> Config:
    """A Config from a recorded config (run.json's "config"), checked like a config file."""
    if not isinstance(values, dict):
        raise InputError(f"{source}: a recorded config must be a mapping, got {type(values).__name__}")
    return _build(values, source)


def merge_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """values with every non-None override on top ('timing' merged key by key)."""
    merged = dict(values)
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "timing":
            timing = merged.get("timing")
            if timing is not None and not isinstance(timing, dict):      # _build names it: not a mapping
                continue
            merged["timing"] = {**(timing or {}), **value}
        else:
            merged[key] = value
    return merged


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'timing': {'samples': 3}} -> {'timing.samples': 3}; None values are left out."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        elif value is not None:
            flat[f"{prefix}{key}"] = value
    return flat


def _nest(key: str, value: Any) -> dict[str, Any]:
    """'timing.samples', 3 -> {'timing': {'samples': 3}}."""
    head, _, rest = key.partition(".")
    return {head: _nest(rest, value) if rest else value}


def _flag_message(message: str, flag: str, key: str, value: Any) -> str:
    """'--samples: 'timing.samples' must be at least 1' -> '--samples: must be at least 1, got -1'."""
    own = f"{flag}: '{key}' "
    if message.startswith(own):
        rest = message[len(own):]
        return f"{flag}: {rest}" if ", got " in rest else f"{flag}: {rest}, got {show_text(value)}"
    return f"{flag} {show_text(value)}: {message[len(flag) + 2:] if message.startswith(flag + ': ') else message}"


CONFIG_LIMIT = 1 << 20          # bytes: a config file larger than this is refused
CONFIG_DEPTH = 16               # nested mappings and lists
CONFIG_NODES = 10_000           # values, counting each use of an alias (a "billion laughs" document is refused)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = read_bytes(path, CONFIG_LIMIT).decode("utf-8")
    except ReadError as exc:
        raise InputError(f"{show_path(path)}: cannot read config: {exc.why}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{show_path(path)}: not a UTF-8 text file (byte {exc.start}: "
                         f"{exc.object[exc.start]:#04x})") from None
    data = parse_yaml(text, show_path(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{show_path(path)}: config must be a mapping of keys to values, got {type(data).__name__}")
    return data


def parse_yaml(text: str, source: str) -> Any:
    """YAML parsed with limits: at most CONFIG_DEPTH levels and CONFIG_NODES values once aliases are expanded, no
    key twice in a mapping (InputError naming the key and both lines), no Python tags (safe_load's constructors)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_node(node, source)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise InputError(f"{source}:{where} invalid YAML: {show_text(getattr(exc, 'problem', None) or str(exc))}") \
            from None
    except RecursionError:
        raise InputError(f"{source}: invalid YAML: nested more than {CONFIG_DEPTH} levels deep") from None
    finally:
        loader.dispose()


def _check_node(root: yaml.Node, source: str) -> None:
    """Walk the composed document once per distinct node: its depth, its size with every alias expanded (a
    shared node counts as often as it is used) and its mappings' keys."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        if depth > CONFIG_DEPTH:
            raise InputError(f"{source}: line {node.start_mark.line + 1}: nested more than {CONFIG_DEPTH} levels deep")
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in active:
            raise InputError(f"{source}: line {node.start_mark.line + 1}: an alias refers to a value that holds it")
        active.add(id(node))
        total = 1
        if isinstance(node, yaml.MappingNode):
            _check_keys(node, source)
            children = [child for pair in node.value for child in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        for child in children:
            total += size(child, depth + 1)
            if total > CONFIG_NODES:
                raise InputError(f"{source}: line {node.start_mark.line + 1}: more than {CONFIG_NODES} values once "
                                 f"its aliases are expanded")
        active.discard(id(node))
        sizes[id(node)] = total
        return total

    size(root, 0)


def _check_keys(node: yaml.MappingNode, source: str) -> None:
    seen: dict[str, int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
            continue
        line = key.start_mark.line + 1
        if key.value in seen:
            raise InputError(f"{source}: key {show_value(key.value)} given twice (lines {seen[key.value]} and {line})")
        seen[key.value] = line


def _build(values: dict[str, Any], source: str) -> Config:
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in _FIELD_TYPES:
            raise InputError(f"{source}: unknown config key {show_value(key)} "
                             f"(known: {', '.join(sorted(_FIELD_TYPES))})")
        if key == "timing":
            kwargs[key] = _build_timing(value, source)
        elif key == "cpu_timing":
            kwargs[key] = _build_cpu_timing(value, source)
        else:
            kwargs[key] = _coerce(key, value, source)
    if "cpu_timing" not in values:          # the built-in CPU defaults, less the keys the file's timing sets
        kwargs["cpu_timing"] = {k: v for k, v in CPU_TIMING.items() if k not in (values.get("timing") or {})}
    cfg = Config(**kwargs)
    _check_ranges(cfg, source)
    return cfg


def _build_timing(value: Any, source: str) -> TimingConfig:
    if value is None:
        return TimingConfig()
    if not isinstance(value, dict):
        raise InputError(f"{source}: 'timing' must be a mapping, got {type(value).__name__}")
    kwargs = {}
    for key, item in value.items():
        if key not in _TIMING_FIELDS:
            raise InputError(f"{source}: unknown config key {show_value(f'timing.{key}')} "
                             f"(known: {', '.join(_TIMING_FIELDS)})")
        kwargs[key] = _coerce(f"timing.{key}", item, source, _TIMING_FIELDS[key].default)
    return TimingConfig(**kwargs)


def _build_cpu_timing(value: Any, source: str) -> dict[str, Any]:
    """`cpu_timing`: timing keys for the CPU path, checked as `timing`'s are (null or {} = none)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{source}: 'cpu_timing' must be a mapping, got {type(value).__name__}")
    out = {}
    for key, item in value.items():
        if key not in _TIMING_FIELDS:
            raise InputError(f"{source}: unknown config key 'cpu_timing.{key}' (known: {', '.join(_TIMING_FIELDS)})")
        out[key] = _coerce(f"cpu_timing.{key}", item, source, _TIMING_FIELDS[key].default)
    return out


def _coerce(key: str, value: Any, source: str, default: Any = dataclasses.MISSING) -> Any:
    if default is dataclasses.MISSING:
        f = _FIELD_TYPES[key]
        default = f.default if f.default is not dataclasses.MISSING else None
    name = key.split(".")[-1]
    if name == "gpus":
        return _parse_gpus(value, source)
    if name == "scheduler":
        if value is None or (isinstance(value, str) and _SCHEDULER_ADDRESS.match(value)):
            return value
        raise InputError(f"{source}: 'scheduler' must be a dask scheduler address like tcp://host:8786, "
                         f"got {show_value(value)}")
    if name in ("level", "cuda_arch", "precision"):
        return None if value is None else str(value)
    if name == "seed" or (name == "samples" and key.startswith("timing")):
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        raise InputError(f"{source}: '{key}' must be an integer or null, got {show_value(value)}")
    if name == "compile_modes":
        return _parse_compile_modes(value, source)
    if name == "worker_memory_gb":
        if value is None or (_finite(value) and value >= 0):
            return None if value is None else float(value)
        raise InputError(f"{source}: 'worker_memory_gb' must be a number of GB (0 = no cap) or null, "
                         f"got {show_value(value)}")
    if name == "gpu_memory_gb":
        if value is None or (_finite(value) and value > 0):
            return None if value is None else float(value)
        raise InputError(f"{source}: 'gpu_memory_gb' must be a positive number of GiB or null (the card's memory), "
                         f"got {show_value(value)}")
    if name == "spare_workers" and isinstance(value, bool):        # YAML reads a bare on/off as a boolean
        return "on" if value else "off"
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise InputError(f"{source}: '{key}' must be true or false, got {show_value(value)}")
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise InputError(f"{source}: '{key}' must be an integer, got {show_value(value)}")
    if isinstance(default, float):
        if _finite(value):
            return float(value)
        raise InputError(f"{source}: '{key}' must be a finite number, got {show_value(value)}")
    if isinstance(default, str):
        if isinstance(value, str) and value:
            return value
        raise InputError(f"{source}: '{key}' must be a non-empty string, got {show_value(value)}")
    return value


def _finite(value: Any) -> bool:
    """An int or float (not a bool) that is a finite float: `.inf`, `.nan` and a 400-digit integer are not."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(as_float(value))


# tcp://host:8786, tls://10.0.0.1:8786, host:8786, [::1]:8786, ucx://host:13337
_SCHEDULER_ADDRESS = re.compile(r"^([a-z][a-z0-9+]*://)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+)(:[0-9]{1,5})?$")


def _parse_compile_modes(value: Any, source: str) -> tuple[str, ...]:
    if value is None or value in ("none", "off", ""):
        return ()
    items = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or any(not isinstance(v, str) or v not in COMPILE_MODES for v in items):
        raise InputError(f"{source}: 'timing.compile_modes' must be a list of {', '.join(COMPILE_MODES)} "
                         f"(or none), got {show_value(value)}")
    return tuple(dict.fromkeys(items))


def _parse_gpus(value: Any, source: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    elif isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise InputError(f"{source}: 'gpus' must be a list of GPU indices like [0, 1], got {show_value(value)}")
    try:
        gpus = tuple(int(item) for item in items)
    except (TypeError, ValueError):
        raise InputError(f"{source}: 'gpus' must be GPU indices like 0,1, got {show_value(value)}") from None
    if not gpus or any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
        raise InputError(f"{source}: 'gpus' must be distinct non-negative indices, got {show_value(value)}")
    return gpus


def _check_ranges(cfg: Config, source: str) -> None:
    checks = [
        (cfg.device in ("auto", "cuda", "cpu"), "'device' must be auto, cuda or cpu"),
        (cfg.precision in (None, *PRECISIONS), f"'precision' must be one of {', '.join(PRECISIONS)} or null"),
        (cfg.spare_workers in ("auto", "on", "off"), "'spare_workers' must be auto, on or off"),
        (cfg.trials >= 1, "'trials' must be at least 1"),
        (cfg.timeout > 0, "'timeout' must be positive"),
        (cfg.build_timeout > 0, "'build_timeout' must be positive"),
        (cfg.reference_timeout > 0, "'reference_timeout' must be positive"),
        (cfg.jobs >= 0, "'jobs' must be 0 (all cores) or more"),
        (cfg.executor in EXECUTORS, f"'executor' must be one of {', '.join(EXECUTORS)}"),
        (cfg.scheduler is None or cfg.executor == "dask",
         "'scheduler' goes with executor dask (--executor dask --scheduler ADDRESS)"),
        (cfg.dask_workers >= 0, "'dask_workers' must be 0 (auto) or more"),
        (cfg.timing.samples is None or cfg.timing.samples >= 1, "'timing.samples' must be at least 1"),
        (cfg.timing.warmup >= 0, "'timing.warmup' must be 0 or more"),
        (cfg.seed is None or 0 <= cfg.seed < 2**31, "'seed' must be between 0 and 2**31 - 1"),
        (cfg.cpu_threads >= 1, "'cpu_threads' must be at least 1"),
        (cfg.timing.mode in TIMING_MODES, f"'timing.mode' must be one of {', '.join(TIMING_MODES)}"),
        (cfg.timing.graph_below_ms >= 0, "'timing.graph_below_ms' must be 0 or more"),
        (cfg.timing.graph_calls >= 1, "'timing.graph_calls' must be at least 1"),
        (cfg.timing.block_samples >= 1, "'timing.block_samples' must be at least 1"),
        (cfg.timing.block_warmup >= 0, "'timing.block_warmup' must be 0 or more"),
        (cfg.timing.min_rounds >= 1, "'timing.min_rounds' must be at least 1"),
        (cfg.timing.max_rounds >= cfg.timing.rounds_floor(), "'timing.max_rounds' must be at least min_rounds"),
        (0 < cfg.timing.target_rel_ci < 1, "'timing.target_rel_ci' must be between 0 and 1"),
        (cfg.timing.max_pair_seconds > 0, "'timing.max_pair_seconds' must be positive"),
        (cfg.timing.baseline_blocks >= 1, "'timing.baseline_blocks' must be at least 1"),
        (cfg.timing.interference_tolerance > 0, "'timing.interference_tolerance' must be positive"),
        (cfg.timing.consistency_tolerance > 0, "'timing.consistency_tolerance' must be positive"),
        (1 <= cfg.timing.processes <= 30, "'timing.processes' must be between 1 and 30"),
        (cfg.timing.between_process in ("auto", "off"), "'timing.between_process' must be auto or off"),
        (cfg.timing.sizes in ("main", "all"), "'timing.sizes' must be main or all"),
    ]
    for ok, message in checks + _upper_bounds(cfg):
        if not ok:
            raise UsageError(f"{source}: {message}")
    if cfg.cpu_timing:                      # the CPU path's timing must pass the same checks
        on_cpu = cfg.for_device("cpu")
        try:
            _check_ranges(dataclasses.replace(on_cpu, cpu_timing={}), source)
        except UsageError as exc:
            raise UsageError(str(exc).replace("'timing.", "'cpu_timing.")) from None


# Upper bounds: a value past one is a typo or a hostile file, never a setting (an infinite timeout overflowed the
# run's clock and lost its records; a count of 10**8 took the machine's memory before a pair ran).
MAX_SECONDS = 7 * 24 * 3600         # a duration: timeouts, max_pair_seconds
MAX_COUNT = 100_000                 # a count: trials, rounds, samples, calls, blocks, jobs, workers
MAX_FACTOR = 1000                   # a tolerance (a fraction of a time)
MAX_GIB = 1 << 20                   # memory: 1 PiB


def usable_cores() -> int:
    """The cores this process may run on (its affinity), which a run's workers share."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def count_flag(flag: str, value: int, low: int, high: int = MAX_COUNT) -> int:
    """A count that a command's own flag gives, outside the config's keys (lint --per-gpu, profile --warmup):
    `value` when it lies in [low, high], else a UsageError naming the flag."""
    if not low <= value <= high:
        raise UsageError(f"{flag} {show_value(value)}: must be between {low} and {high}")
    return value


def _upper_bounds(cfg: Config) -> list[tuple[bool, str]]:
    """(holds, message) for every number's upper bound. cpu_threads is held to the cores of this machine unless a
    remote dask scheduler runs the pairs elsewhere."""
    t = cfg.timing
    seconds = {"timeout": cfg.timeout, "build_timeout": cfg.build_timeout, "reference_timeout": cfg.reference_timeout,
               "timing.max_pair_seconds": t.max_pair_seconds}
    counts = {"trials": cfg.trials, "jobs": cfg.jobs, "dask_workers": cfg.dask_workers, "timing.warmup": t.warmup,
              "timing.samples": t.samples or 0, "timing.graph_calls": t.graph_calls,
              "timing.block_samples": t.block_samples, "timing.block_warmup": t.block_warmup,
              "timing.min_rounds": t.min_rounds, "timing.max_rounds": t.max_rounds,
              "timing.baseline_blocks": t.baseline_blocks}
    factors = {"timing.interference_tolerance": t.interference_tolerance,
               "timing.consistency_tolerance": t.consistency_tolerance}
    gib = {"worker_memory_gb": cfg.worker_memory_gb or 0.0, "gpu_memory_gb": cfg.gpu_memory_gb or 0.0}
    bounds = [(seconds, MAX_SECONDS, " seconds (a week)"), (counts, MAX_COUNT, ""), (factors, MAX_FACTOR, ""),
              (gib, MAX_GIB, " GiB"), ({"timing.graph_below_ms": t.graph_below_ms}, MAX_SECONDS * 1000, " ms")]
    checks = [(value <= high, f"'{key}' must be at most {high}{unit}")
              for values, high, unit in bounds for key, value in values.items()]
    cores = usable_cores()
    if cfg.scheduler is None:
        checks.append((cfg.cpu_threads <= cores, f"'cpu_threads' must be at most {cores} (the cores this run may "
                                                 f"use)"))
    return checks


def config_to_dict(cfg: Config) -> dict[str, Any]:
    data = dataclasses.asdict(cfg)
    data["gpus"] = list(cfg.gpus)
    data["timing"]["compile_modes"] = list(cfg.timing.compile_modes)
    if "compile_modes" in data["cpu_timing"]:
        data["cpu_timing"]["compile_modes"] = list(data["cpu_timing"]["compile_modes"])
    return data
