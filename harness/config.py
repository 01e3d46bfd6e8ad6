"""One typed config object: defaults, overridden by config.yaml, overridden by CLI flags, validated once."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import InputError, UsageError


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 10            # untimed calls before sampling
    samples: int = 100          # timed calls (one sample each)
    flush_l2: bool = True       # write a buffer of 2x the L2 size before every sample (GPU only)


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
    gpus: tuple[int, ...] = (0,)        # GPU indices pairs are scheduled over
    trials: int = 5                     # correctness trials, each with fresh inputs
    seed: int = 42                      # base seed; trial k uses seed + k
    timeout: float = 600.0              # seconds for one (problem, candidate) pair in its worker
    build_timeout: float = 900.0        # seconds for one candidate's build
    reference_timeout: float = 900.0    # seconds for the reference side of one problem
    jobs: int = 0                       # parallel builds; 0 = number of CPU cores
    cuda_arch: str | None = None        # TORCH_CUDA_ARCH_LIST for builds; None = the first GPU's capability
    defenses: bool = True               # anti-cheat checks (README: Hardening); off only to measure their cost
    spare_workers: str = "auto"         # start the next worker ahead: auto (on GPU slots) | on | off
    timing: TimingConfig = field(default_factory=TimingConfig)

    def build_jobs(self) -> int:
        return self.jobs or (os.cpu_count() or 1)


_FIELD_TYPES = {f.name: f for f in dataclasses.fields(Config)}
_TIMING_FIELDS = {f.name: f for f in dataclasses.fields(TimingConfig)}


def load_config(path: Path | None, overrides: dict[str, Any]) -> Config:
    """Defaults <- YAML file (if any) <- overrides (flags). Raises InputError/UsageError naming the bad key."""
    values: dict[str, Any] = {}
    if path is not None:
        values.update(_read_yaml(path))
    source = str(path) if path else "defaults"
    merged = dict(values)
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "timing":
            merged["timing"] = {**(merged.get("timing") or {}), **value}
        else:
            merged[key] = value
    return _build(merged, source)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read config: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise InputError(f"{path}:{where} invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: config must be a mapping of keys to values, got {type(data).__name__}")
    return data


def _build(values: dict[str, Any], source: str) -> Config:
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in _FIELD_TYPES:
            raise InputError(f"{source}: unknown config key '{key}' (known: {', '.join(sorted(_FIELD_TYPES))})")
        if key == "timing":
            kwargs[key] = _build_timing(value, source)
        else:
            kwargs[key] = _coerce(key, value, source)
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
            raise InputError(f"{source}: unknown config key 'timing.{key}' (known: {', '.join(_TIMING_FIELDS)})")
        kwargs[key] = _coerce(f"timing.{key}", item, source, _TIMING_FIELDS[key].default)
    return TimingConfig(**kwargs)


def _coerce(key: str, value: Any, source: str, default: Any = dataclasses.MISSING) -> Any:
    if default is dataclasses.MISSING:
        f = _FIELD_TYPES[key]
        default = f.default if f.default is not dataclasses.MISSING else None
    name = key.split(".")[-1]
    if name == "gpus":
        return _parse_gpus(value, source)
    if name in ("level", "cuda_arch"):
        return None if value is None else str(value)
    if name == "spare_workers" and isinstance(value, bool):        # YAML reads a bare on/off as a boolean
        return "on" if value else "off"
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise InputError(f"{source}: '{key}' must be true or false, got {value!r}")
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise InputError(f"{source}: '{key}' must be an integer, got {value!r}")
    if isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise InputError(f"{source}: '{key}' must be a number, got {value!r}")
    if isinstance(default, str):
        if isinstance(value, str) and value:
            return value
        raise InputError(f"{source}: '{key}' must be a non-empty string, got {value!r}")
    return value


def _parse_gpus(value: Any, source: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    elif isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise InputError(f"{source}: 'gpus' must be a list of GPU indices like [0, 1], got {value!r}")
    try:
        gpus = tuple(int(item) for item in items)
    except (TypeError, ValueError):
        raise InputError(f"{source}: 'gpus' must be GPU indices like 0,1, got {value!r}") from None
    if not gpus or any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
        raise InputError(f"{source}: 'gpus' must be distinct non-negative indices, got {value!r}")
    return gpus


def _check_ranges(cfg: Config, source: str) -> None:
    checks = [
        (cfg.device in ("auto", "cuda", "cpu"), "'device' must be auto, cuda or cpu"),
        (cfg.spare_workers in ("auto", "on", "off"), "'spare_workers' must be auto, on or off"),
        (cfg.trials >= 1, "'trials' must be at least 1"),
        (cfg.timeout > 0, "'timeout' must be positive"),
        (cfg.build_timeout > 0, "'build_timeout' must be positive"),
        (cfg.reference_timeout > 0, "'reference_timeout' must be positive"),
        (cfg.jobs >= 0, "'jobs' must be 0 (all cores) or more"),
        (cfg.timing.samples >= 1, "'timing.samples' must be at least 1"),
        (cfg.timing.warmup >= 0, "'timing.warmup' must be 0 or more"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(f"{source}: {message}")


def config_to_dict(cfg: Config) -> dict[str, Any]:
    data = dataclasses.asdict(cfg)
    data["gpus"] = list(cfg.gpus)
    return data
