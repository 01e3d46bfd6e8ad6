"""What a dask task runs on its worker's host (harness.run.executors.dask_task.enter imports it there): one problem
group, as a local slot runs it (harness.run.schedule.serve_slot), with that host's builds, scratch and log folder.
See harness.run.executors.dask for the parent's side."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import shutil
import socket
import sys
import tempfile
import threading
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from harness.core.config import Config
from harness.core.discover import Pair
from harness.core.seeds import RunSeed
from harness.results.records import Status, finish
from harness.run.build import BuildResult, Toolchain, build_one
from harness.run.executors import scratch_root
from harness.run.schedule import pair_record


@dataclass(frozen=True)
class GroupTask:
    """Everything one task needs, picklable: absolute paths only (the worker's cwd is not the parent's)."""
    cfg: Config
    run_id: str
    device: str                       # "cuda" | "cpu"
    toolchain: Toolchain
    builds: dict[str, BuildResult]    # the parent's build results for this group's candidates
    seed: RunSeed                     # carries the run's secret: see the module docstring
    log_dir: str
    group: list[Pair]
    between: Any = None               # the parent's between-process terms (harness.run.between.Terms) or None



def run_task_bytes(task_bytes: bytes) -> dict[str, Any]:
    """dask_task.enter's call on the worker: run_group's answer, or {"failed": one line} where the task cannot be
    read (a checkout unlike the parent's) or raises. The traceback goes to this dask worker's log; nothing of the
    harness's own types goes back through the scheduler."""
    try:
        return run_group(pickle.loads(task_bytes))
    except Exception as exc:                                       # noqa: BLE001 - every fault is the records' line
        traceback.print_exc()
        return {"failed": f"dask worker host {socket.gethostname()} failed the task: {describe_exception(exc)}"}


def run_group(task: GroupTask) -> dict[str, Any]:
    """One problem group on this dask worker's host, as the local executor runs one on a slot. Returns the records
    (plain dicts, in order), where it ran and, on a GPU, that GPU's ceilings."""
    from harness.run.schedule import Context, first_roles, measure_ceilings, serve_slot, slot_spares

    cfg = task.cfg
    slot = _prepared_slot(cfg, task.toolchain, task.device)   # its zygote's imports beside this host's build check
    log_dir = _log_dir(task)
    mismatch = toolchain_mismatch(task.toolchain)       # before any build: never cache a build under a wrong key
    cfg, builds = (cfg, dict(task.builds)) if mismatch else ensure_builds(task, cfg)
    records: list[dict[str, Any]] = []
    missing = task.group if mismatch else [p for p in task.group if not _on_this_host(p)]
    for pair in missing:                                        # a host unlike the parent: say so, run nothing
        why = mismatch or (f"has no {_missing_path(pair)}: every worker host needs the problems and solutions "
                           "trees at the same paths (a shared filesystem or the same checkout)")
        record = pair_record(pair, task.run_id, slot.device, builds)
        records.append(finish(record, Status.CRASHED, f"dask worker host {socket.gethostname()} {why}").to_json())
    group = [p for p in task.group if p not in missing]
    scratch = scratch_root(task.run_id) / f"dask-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True, exist_ok=True)
    ctx = Context(cfg, task.run_id, task.toolchain, builds, scratch, log_dir,
                  lambda record: records.append(record.to_json()), task.seed, between=task.between)
    spares = _take_spares(task.run_id, slot, lambda: slot_spares(ctx, slot))
    where = {"worker": _worker_address(), "host": socket.gethostname(), "pid": os.getpid(), "slot": slot.name,
             "log_dir": str(log_dir)}
    ceilings: dict[str, dict[str, float]] = {}
    try:
        if slot.gpu is not None and cfg.defenses and group:
            key = (task.run_id, slot.name)
            if key not in _CEILINGS:
                if spares.quiet:        # the first problem's workers import beside the ceilings, as serve_slot's do
                    spares.prime(first_roles(cfg, slot))
                _CEILINGS[key] = measure_ceilings(ctx, slot)
            ctx.ceilings[slot.name] = _CEILINGS[key]
            ceilings[f"{socket.gethostname()}/{slot.name}"] = _CEILINGS[key]
        groups = iter([group] if group else [])
        serve_slot(slot, ctx, lambda: next(groups, None), spares)   # the ceilings are in ctx.ceilings already
    except BaseException:
        spares.close()
        raise
    else:
        _keep_spares(task.run_id, slot, spares)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        with contextlib.suppress(OSError):
            scratch.parent.rmdir()                      # the run's scratch root on this host, once empty
    return {"records": records, "where": where, "ceilings": ceilings}


def warm(cfg: Config, toolchain: Toolchain, device: str) -> None:
    """A LocalCluster's worker as it starts (the parent's begin, beside the builds): what its first task would
    otherwise wait for, the harness's and torch's imports in this process and its slot's zygote (run_group's
    _prepared_slot starts the same one: same environment, same zygote)."""
    _prepared_slot(cfg, toolchain, device)
    toolchain_mismatch(toolchain)                       # imports torch here while the zygote imports it there


def _prepared_slot(cfg: Config, toolchain: Toolchain, device: str):
    """This worker's slot, its workers' memory cap set and their zygote started (not waited for)."""
    from harness.run.schedule import slot_worker_env
    from harness.run.workerproc import prestart, set_worker_memory_gb

    set_worker_memory_gb(cfg.worker_memory_gb)
    slot = local_slot(device)
    prestart(slot_worker_env(cfg, toolchain, slot))
    return slot


_CEILINGS: dict[tuple[str, str], dict[str, float]] = {}      # (run id, slot) -> measured once per worker process


def describe_exception(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500] if text else type(exc).__name__


# A dask worker keeps its slot's spare workers (SpareWorkers: the next reference and candidate processes, importing
# torch while a job runs) from one task of a run to the next, as a local slot keeps them across problems: a task is
# one problem, and spares made new per task would never be ready for its first pair. They are closed when a task of
# another run arrives, when a task fails, and after KEEP_SPARES_S without a task (an external cluster outlives the
# run; a spare holds a process and its imports).
KEEP_SPARES_S = 60.0
_KEPT: dict[tuple[str, str], tuple[Any, threading.Timer]] = {}     # (run id, slot) -> (SpareWorkers, its close timer)
_KEPT_LOCK = threading.Lock()


def _take_spares(run_id: str, slot: Any, make: Any) -> Any:
    """This run's kept spares for `slot` (taken out, so a second concurrent task makes its own), else make()'s.
    Spares kept for any other run are closed."""
    with _KEPT_LOCK:
        mine = _KEPT.pop((run_id, slot.name), None)
        stale = [_KEPT.pop(key) for key in [k for k in _KEPT if k[0] != run_id]]
    for spares, timer in stale:
        timer.cancel()
        spares.close()
    if mine is None:
        return make()
    mine[1].cancel()
    return mine[0]


def _keep_spares(run_id: str, slot: Any, spares: Any) -> None:
    """Keep `spares` for this run's next task on `slot`; closed by a timer after KEEP_SPARES_S unless taken."""
    key = (run_id, slot.name)
    timer = threading.Timer(KEEP_SPARES_S, _close_kept, args=(key, spares))
    timer.daemon = True
    with _KEPT_LOCK:
        previous = _KEPT.pop(key, None)
        _KEPT[key] = (spares, timer)
    if previous is not None:
        previous[1].cancel()
        previous[0].close()
    timer.start()


def _close_kept(key: tuple[str, str], spares: Any) -> None:
    with _KEPT_LOCK:
        if key not in _KEPT or _KEPT[key][0] is not spares:
            return                                      # taken by a task meanwhile
        del _KEPT[key]
    spares.close()


def toolchain_mismatch(toolchain: Toolchain) -> str | None:
    """Why this host cannot run the parent's builds (other torch, CUDA or Python: the build key is the parent's
    toolchain), or None."""
    import torch
    here = (torch.__version__, torch.version.cuda, sys.version.split()[0])
    there = (toolchain.torch, toolchain.cuda, toolchain.python)
    if here == there:
        return None
    return (f"has torch {here[0]} (CUDA {here[1]}), Python {here[2]}; the run was built for torch {there[0]} "
            f"(CUDA {there[1]}), Python {there[2]}: dask workers need the parent's environment")


def local_slot(device: str):
    """The slot this dask worker serves: on the CPU Slot("cpu", None); on CUDA the GPU its CUDA_VISIBLE_DEVICES
    names (the first one; the parent's LocalCluster pins one per worker). Its cores: KB_DASK_CPUS (set by the
    parent's LocalCluster) or this process's affinity (taskset/numactl on an external worker)."""
    from harness.run.schedule import Slot
    cpus_env = os.environ.get("KB_DASK_CPUS", "")
    cpus = tuple(int(c) for c in cpus_env.split(",") if c.strip().isdigit()) or tuple(sorted(os.sched_getaffinity(0)))
    if device != "cuda":
        return Slot("cpu", None, cpus=cpus)
    if not cpus_env and len(cpus) == os.cpu_count():   # an external worker, not pinned: a share no other run holds
        cpus = _external_share()
    from harness.run import meta
    found = meta.gpus()                             # the one CUDA_VISIBLE_DEVICES names
    if found:                                       # named as the machine numbers it: which GPU of the host
        g = found[0]
        return Slot(f"cuda:{g['machine_index']}", g["machine_index"], g["name"], cpus=cpus, visible_as=g["visible_as"])
    # not a GPU nvidia-smi lists (a MIG device): as given
    entry = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    gpu: Any = int(entry) if entry.isdigit() else entry
    return Slot(f"cuda:{gpu}", gpu, None, cpus=cpus, visible_as=entry)


_SHARE: list[tuple[int, ...]] = []     # this worker process's claimed cores, held while it lives


def _external_share() -> tuple[int, ...]:
    """An external dask worker's cores (one worker per GPU, each with this process's whole affinity): a share no
    other process of this host holds (harness.run.coreshares), claimed once and held while the worker lives."""
    if not _SHARE:
        from harness.run import coreshares, meta
        got = coreshares.claim(1, sorted(os.sched_getaffinity(0)), len(meta.machine_gpus()))
        _SHARE.append(got.shares[0])
        if got.contended:
            print(coreshares.contended_line([f"dask worker {os.getpid()}"]), file=sys.stderr)
    return _SHARE[0]


def ensure_builds(task: GroupTask, cfg: Config) -> tuple[Config, dict[str, BuildResult]]:
    """This host's build of every built candidate of the group (build_one: at once where the cache has it). The
    cache is cfg.cache_dir when this host can write there, else <tempdir>/kbharness-cache. The parent's result is
    kept for the record, with this host's paths; a build that fails here is this host's result."""
    root = Path(cfg.cache_dir) / "builds"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not os.access(root, os.W_OK):
            raise PermissionError(str(root))
    except OSError:
        root = Path(tempfile.gettempdir()) / "kbharness-cache" / "builds"
        root.mkdir(parents=True, exist_ok=True)
        cfg = dataclasses.replace(cfg, cache_dir=str(root.parent))
    builds = dict(task.builds)
    for pair in task.group:
        parent = builds.get(pair.candidate.id)
        if parent is None or parent.status != "built" or not _on_this_host(pair):
            continue
        with _file_lock(root / f"{parent.key}.lock"):            # two workers of one host: one build
            local = build_one(pair, root, task.toolchain, cfg.build_timeout, task.seed.base)
        if local.status == "built":
            builds[pair.candidate.id] = dataclasses.replace(parent, build_dir=local.build_dir,
                                                            candidate_path=local.candidate_path)
        else:
            builds[pair.candidate.id] = local
    return cfg, builds


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _log_dir(task: GroupTask) -> Path:
    """The run's log dir where this host sees it (same machine, shared filesystem), else one of its own."""
    run_logs = Path(task.log_dir)
    if run_logs.is_dir() and os.access(run_logs, os.W_OK):
        return run_logs
    own = Path(tempfile.gettempdir()) / "kbharness-logs" / task.run_id
    own.mkdir(parents=True, exist_ok=True)
    return own


def _on_this_host(pair: Pair) -> bool:
    return _missing_path(pair) is None


def _missing_path(pair: Pair) -> str | None:
    if pair.problem is not None and pair.problem.error is None and not pair.problem.path.is_file():
        return f"problem file {pair.problem.path}"
    if pair.candidate.error is None and pair.candidate.path.suffix == ".py" and not pair.candidate.path.is_file():
        return f"candidate file {pair.candidate.path}"
    return None


def _worker_address() -> str | None:
    try:
        from distributed import get_worker
        return get_worker().address
    except Exception:                                              # noqa: BLE001 - not on a dask worker
        return None
