"""Stage 3 on a dask cluster (`executor: dask`, README: Scale-out on Dask).

The parent discovers and builds as for a local run (so its build cache is warm), then submits one dask task per
problem group (every pair of one problem) and stays the only writer of results: each task returns its records as
plain dicts and the parent hands them to ctx.emit, in the task's order, as tasks finish.

A task (`run_group`, on its dask worker's host) runs exactly what the local path runs for one problem group:
harness.run.schedule.run_problem on a local Slot (on a GPU worker the one GPU its CUDA_VISIBLE_DEVICES names; on the
CPU Slot("cpu", None)), with every defense and a fresh worker process per pair. Before that it calls build_one for
each built candidate, which returns at once where the cache has it (a LocalCluster or a shared cache_dir) and builds
on that host otherwise. It uses its host's own scratch (/dev/shm or the temp dir) and writes worker logs into the
run's log dir when that folder exists on its host (a LocalCluster, a shared filesystem), else under
<tempdir>/kbharness-logs/<run id>/ on the worker host; run.json's `dask.tasks` says which host and folder.

The task carries the run's seed, secret included (RunSeed.secret: the key of the timed samples' seed streams). It
goes only to the dask workers the user pointed the run at, which run the harness's own code; a candidate still
never sees it (it runs in a confined worker process started by that dask worker, as on a local run). Do not point
--scheduler at a cluster whose other users you do not trust with it.

A dask worker that dies mid-task makes the scheduler run the task again elsewhere (a LocalCluster started here
allows ALLOWED_FAILURES such deaths per task; an external scheduler uses its own
distributed.scheduler.allowed-failures). A task that finally fails (KilledWorker, or any exception) gives every
pair of its group a `crashed` record: nothing goes missing and the run goes on.

Nothing here is imported on a local run; `distributed` is imported only by the functions that need it.
"""
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

from harness.run.build import BuildResult, Toolchain, build_one
from harness.core.config import Config
from harness.run.executors.dask_task import task_payload
from harness.core.discover import Pair
from harness.core.errors import UsageError
from harness.run.evaluate import slug
from harness.results.records import Status, finish
from harness.run.schedule import pair_record
from harness.core.seeds import RunSeed

LOST = "dask worker lost while evaluating this problem"
SCHEDULER_UNREADABLE = "Error during deserialization of the task graph"     # distributed's words
ALLOWED_FAILURES = 2          # worker deaths a task may cause on a LocalCluster started here before it is given up
CPU_WORKERS = 2               # LocalCluster workers on the CPU when dask_workers is 0
CPU_RESOURCES: dict[str, float] | None = None     # CPU tasks need no resource: any worker (run with --nthreads 1)
GPU_RESOURCES = {"GPU": 1}    # CUDA tasks run only on workers started with --resources GPU=1


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


# ---------------------------------------------------------------- the parent


def run_all_dask(pairs: list[Pair], ctx: Any, slots: list[Any], device: str,
                 say: Any = lambda text: None) -> dict[str, Any]:
    """Every pair gets exactly one record through ctx.emit. Returns what run.json records under `dask`."""
    require_distributed()
    from distributed import Client, as_completed

    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair.problem_id, []).append(_absolute(pair))
    order = sorted(groups, key=lambda p: -len(groups[p]))            # big groups first: better balance
    cfg = _absolute_config(ctx.cfg)
    info: dict[str, Any] = {"scheduler": cfg.scheduler or "LocalCluster", "tasks": {}}
    if not groups:
        return info
    cluster = None
    client = None
    futures: dict[Any, str] = {}
    try:
        if cfg.scheduler:
            try:
                client = Client(cfg.scheduler, timeout="60s")
            except (OSError, TimeoutError) as exc:
                raise UsageError(f"--scheduler {cfg.scheduler}: cannot connect: {_describe(exc)} (finished pairs "
                                 f"are in results.jsonl; continue with --resume {ctx.run_id})") from None
        else:
            cluster = start_local_cluster(cfg, device, slots)
            client = Client(cluster)
        info["workers"] = describe_workers(client, device, say)
        resources = GPU_RESOURCES if device == "cuda" else CPU_RESOURCES
        for pid in order:
            group = groups[pid]
            task = GroupTask(cfg, ctx.run_id, device, ctx.toolchain,
                             {p.candidate.id: ctx.builds[p.candidate.id] for p in group if p.candidate.id in ctx.builds},
                             ctx.seed, str(Path(ctx.log_dir).resolve()), group)
            future = client.submit(pickle.loads, task_payload(task), key=f"kb-{ctx.run_id}-{slug(pid)}",
                                   resources=resources, pure=False, retries=0)
            futures[future] = pid
        said: set[str] = set()
        for future in as_completed(list(futures)):
            pid = futures[future]
            group = groups[pid]
            try:
                result = future.result()
            except Exception as exc:                              # noqa: BLE001 - KilledWorker, the scheduler's
                result = {"failed": failure_text(exc, cfg.scheduler)}
            if "records" in result:
                records = result["records"]
                info["tasks"][pid] = result["where"]
                for name, ceilings in (result.get("ceilings") or {}).items():
                    ctx.ceilings[name] = ceilings
            else:
                why = result_error(result)
                records = failed_records(group, ctx.run_id, device, ctx.builds, why)
                info["tasks"][pid] = {"error": why}
                if "unavailable" in result and why not in said:    # a host without the harness: once, on the terminal
                    said.add(why)
                    say(why)
            for record in checked(group, records, ctx.run_id, device, ctx.builds):
                ctx.emit(record)
            future.release()
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.cancel(list(futures), force=True)
            with contextlib.suppress(Exception):
                client.close(timeout=10)
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close(timeout=20)
    return info


def require_distributed() -> None:
    """A one-line error, before anything is built, where dask.distributed is not installed."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise UsageError("--executor dask needs dask.distributed, the harness's dask extra: pip install -e '.[dask]' "
                         "in the checkout (or pip install 'dask[distributed]>=2024.1')") from None


def start_local_cluster(cfg: Config, device: str, slots: list[Any]):
    """A cluster on this machine, processes=True, one thread per worker. CUDA: one worker per GPU in `gpus`, that
    worker's CUDA_VISIBLE_DEVICES pinned to it and resources GPU=1 (a SpecCluster, LocalCluster's base: LocalCluster
    cannot give each worker its own environment). CPU: dask_workers workers (0 = CPU_WORKERS). Each worker gets its
    own share of this process's cores (KB_DASK_CPUS), as local slots do."""
    import dask
    from distributed import Nanny, Scheduler, SpecCluster

    if device == "cuda":
        envs = [({"CUDA_VISIBLE_DEVICES": str(slot.gpu)}, dict(GPU_RESOURCES)) for slot in slots]
    else:
        envs = [({}, {}) for _ in range(cfg.dask_workers or CPU_WORKERS)]
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // len(envs))
    workers = {}
    for i, (env, resources) in enumerate(envs):
        mine = cores[i * share:(i + 1) * share] or cores
        options = {"nthreads": 1, "env": {**env, "KB_DASK_CPUS": ",".join(map(str, mine))},
                   "dashboard_address": None, "silence_logs": 40}
        if resources:
            options["resources"] = resources
        workers[f"kb-{i}"] = {"cls": Nanny, "options": options}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": None, "host": "127.0.0.1"}}
    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
                          "distributed.scheduler.worker-saturation": 1.0}):   # a worker holds only its running task
        return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=40, name="kb-harness")


def describe_workers(client: Any, device: str, say: Any) -> dict[str, Any]:
    """The cluster's workers (address -> host, resources), said once; a CUDA run on a cluster without a GPU=1
    worker says that its tasks will wait for one."""
    try:
        client.wait_for_workers(1, timeout=60)
    except Exception:                                              # noqa: BLE001 - dask's TimeoutError
        say(f"dask: no worker joined {client.scheduler.address} within 60 s; tasks wait until one does")
    workers = client.scheduler_info(n_workers=-1).get("workers", {}) if _takes_n_workers(client) else \
        client.scheduler_info().get("workers", {})
    seen = {addr: {"host": w.get("host"), "resources": w.get("resources", {}), "nthreads": w.get("nthreads")}
            for addr, w in workers.items()}
    gpu = sum(1 for w in seen.values() if (w["resources"] or {}).get("GPU", 0) >= 1)
    say(f"dask: {len(seen)} workers at {client.scheduler.address}" + (f", {gpu} with GPU=1" if device == "cuda" else ""))
    if device == "cuda" and seen and not gpu:
        say("dask: no worker has the resource GPU=1; start one per GPU with "
            "CUDA_VISIBLE_DEVICES=N dask worker ADDRESS --nthreads 1 --resources GPU=1")
    if device == "cpu" and any((w["nthreads"] or 1) > 1 for w in seen.values()):
        say("dask: a worker with --nthreads > 1 runs several problems at once on its cores, which skews CPU timing; "
            "start CPU workers with --nthreads 1")
    return seen


def _takes_n_workers(client: Any) -> bool:
    import inspect
    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500] if text else type(exc).__name__


def failure_text(exc: BaseException, scheduler: str | None) -> str:
    """The error of a task that raised in the parent's hands: the worker died (KilledWorker) or the scheduler could
    not read the graph (an environment unlike the parent's: other dask or Python versions)."""
    text = _describe(exc)
    if SCHEDULER_UNREADABLE in text:
        return (f"dask scheduler {scheduler or ''} could not read the task graph: it needs the same dask and "
                f"distributed versions as this process ({_dask_versions()}); its log says why").replace("  ", " ")
    return f"{LOST}: {text}"


def result_error(result: dict[str, Any]) -> str:
    """One line for a task's non-record answer: the harness missing on its worker, or what the task raised."""
    gone = result.get("unavailable")
    if gone:
        missing = gone.get("missing") or ""
        what = "the harness" if missing.split(".")[0] in ("", "harness") else f"{missing!r}, which the harness needs"
        return (f"dask worker host {gone.get('host')} cannot import {what} ({gone.get('error')}; its Python: "
                f"{gone.get('python')}): install the harness in that environment (`pip install -e .` in the "
                "checkout, README: Scale-out on Dask)")
    return str(result.get("failed") or "its task returned no records (harness fault)")


def failed_records(group: list[Pair], run_id: str, device: str, builds: dict[str, BuildResult],
                   why: str) -> list[dict[str, Any]]:
    """A `crashed` record for each pair of a group whose task finally failed."""
    return [finish(pair_record(pair, run_id, device, builds), Status.CRASHED, why).to_json() for pair in group]


def _dask_versions() -> str:
    import dask
    import distributed
    return f"dask {dask.__version__}, distributed {distributed.__version__}, Python {sys.version.split()[0]}"


def checked(group: list[Pair], records: list[dict[str, Any]], run_id: str, device: str,
            builds: dict[str, BuildResult]) -> list[dict[str, Any]]:
    """The task's records in its order, one per pair of the group: a duplicate or a stranger is dropped, a pair
    without one gets a `crashed` record."""
    wanted = {(p.problem_id, p.candidate.id): p for p in group}
    out = []
    for record in records:
        key = (record.get("problem"), record.get("solution"))
        if key in wanted:
            out.append(record)
            del wanted[key]
    for pair in wanted.values():
        out.append(finish(pair_record(pair, run_id, device, builds), Status.CRASHED,
                          f"{LOST}: its task returned no record for this pair (harness fault)").to_json())
    return out


def _absolute(pair: Pair) -> Pair:
    problem = pair.problem
    if problem is not None:
        problem = dataclasses.replace(problem, path=problem.path.resolve())
    candidate = dataclasses.replace(pair.candidate, path=pair.candidate.path.resolve())
    return dataclasses.replace(pair, problem=problem, candidate=candidate)


def _absolute_config(cfg: Config) -> Config:
    return dataclasses.replace(cfg, cache_dir=str(Path(cfg.cache_dir).resolve()),
                               problems_dir=str(Path(cfg.problems_dir).resolve()),
                               solutions_dir=str(Path(cfg.solutions_dir).resolve()),
                               output_dir=str(Path(cfg.output_dir).resolve()))


# ---------------------------------------------------------------- the task, on a dask worker

_CEILINGS: dict[tuple[str, str], dict[str, float]] = {}      # (run id, slot) -> measured once per worker process


def run_task_bytes(task_bytes: bytes) -> dict[str, Any]:
    """dask_task.enter's call on the worker: run_group's answer, or {"failed": one line} where the task cannot be
    read (a checkout unlike the parent's) or raises. The traceback goes to this dask worker's log; nothing of the
    harness's own types goes back through the scheduler."""
    try:
        return run_group(pickle.loads(task_bytes))
    except Exception as exc:                                       # noqa: BLE001 - every fault is the records' line
        traceback.print_exc()
        return {"failed": f"dask worker host {socket.gethostname()} failed the task: {_describe(exc)}"}


def run_group(task: GroupTask) -> dict[str, Any]:
    """One problem group on this dask worker's host, as run_all runs it on a local slot. Returns the records (plain
    dicts, in order), where it ran and, on a GPU, that GPU's ceilings."""
    from harness.run.pipeline import scratch_root
    from harness.run.workerproc import SpareWorkers, set_worker_memory_gb
    from harness.run.schedule import Context, measure_ceilings, pair_worker_env, run_problem, spares_enabled

    cfg = task.cfg
    set_worker_memory_gb(cfg.worker_memory_gb)
    slot = local_slot(task.device)
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
    ctx = Context(cfg, task.run_id, task.toolchain, builds, scratch, log_dir, records.append, task.seed)
    spares = _take_spares(task.run_id, slot, lambda: SpareWorkers(
        pair_worker_env(cfg, slot), log_dir, slot.name.replace(":", ""), spares_enabled(cfg, slot)))
    where = {"worker": _worker_address(), "host": socket.gethostname(), "pid": os.getpid(), "slot": slot.name,
             "log_dir": str(log_dir)}
    ceilings: dict[str, dict[str, float]] = {}
    try:
        if slot.gpu is not None and cfg.defenses and group:
            key = (task.run_id, slot.name)
            if key not in _CEILINGS:
                _CEILINGS[key] = measure_ceilings(ctx, slot)
            ctx.ceilings[slot.name] = _CEILINGS[key]
            ceilings[f"{socket.gethostname()}/{slot.name}"] = _CEILINGS[key]
        if group:
            run_problem(group, ctx, slot, spares)
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


# A dask worker keeps its slot's spare workers (SpareWorkers: the next reference and candidate processes, importing
# torch while a job runs) from one task of a run to the next, as a local slot keeps them across problems: a task is
# one problem, and spares made new per task would never be ready for its first pair. They are closed when a task of
# another run arrives, when a task fails, and after KEEP_SPARES_S without a task (an external cluster outlives the
# run; a reference spare holds a CUDA context).
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
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    gpu: Any = int(visible) if visible.isdigit() else visible       # an index, or a GPU UUID
    name = None
    if isinstance(gpu, int):
        from harness.run import meta
        name = next((g["name"] for g in meta.gpus() if g["index"] == gpu), None)
    return Slot(f"cuda:{gpu}", gpu, name, cpus=cpus)


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


if __name__ == "__main__":                                         # pragma: no cover
    sys.exit("harness.run.executors.dask is used by run_eval.py --executor dask")
