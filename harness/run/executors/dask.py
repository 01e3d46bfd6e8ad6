"""Stage 3 on a dask cluster (`executor: dask`, README: Scale-out on Dask).

The parent discovers and builds as for a local run (so its build cache is warm), then submits one dask task per
problem group (every pair of one problem) and stays the only writer of results: each task returns its records as
plain dicts and the parent hands them to ctx.emit, in the task's order, as tasks finish.

A task (`dask_host.run_group`, on its dask worker's host) runs exactly what the local path runs for one problem group:
harness.run.schedule.serve_slot on a local Slot (on a GPU worker the one GPU its CUDA_VISIBLE_DEVICES names; on the
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

This module is the parent's side; harness.run.executors.dask_host is what runs on a dask worker's host (reached
through harness.run.executors.dask_task). Nothing here is imported on a local run; `distributed` is imported only by
the functions that need it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from harness.core.config import Config
from harness.core.discover import Pair
from harness.core.errors import UsageError
from harness.results.records import Status, finish
from harness.run import coreshares
from harness.run.build import BuildResult
from harness.run.evaluate import slug
from harness.run.executors import problem_groups
from harness.run.executors import dask_host
from harness.run.executors.dask_host import GroupTask, describe_exception
from harness.run.executors.dask_task import task_payload
from harness.run.schedule import pair_record


LOST = "dask worker lost while evaluating this problem"
SCHEDULER_UNREADABLE = "Error during deserialization of the task graph"     # distributed's words
ALLOWED_FAILURES = 2          # worker deaths a task may cause on a LocalCluster started here before it is given up
CPU_WORKERS = 2               # LocalCluster workers on the CPU when dask_workers is 0
CPU_RESOURCES: dict[str, float] | None = None     # CPU tasks need no resource: any worker (run with --nthreads 1)
GPU_RESOURCES = {"GPU": 1}    # CUDA tasks run only on workers started with --resources GPU=1


# ---------------------------------------------------------------- the parent


class DaskExecutor:
    def __init__(self, cfg: Config) -> None:
        self.scheduler = cfg.scheduler
        self.remote_gpus = bool(cfg.scheduler)          # an external cluster's GPUs; a LocalCluster uses this host's
        self.early: ClusterStart | None = None

    def where(self, device: str, slot_names: list[str]) -> str:
        return f"dask ({self.scheduler or 'LocalCluster here'}, {device})"

    def check(self) -> None:
        require_distributed()

    def begin(self, cfg: Config, slots: list[Any], toolchain: Any) -> None:
        """A LocalCluster starts now, beside the builds (ClusterStart). An external cluster's workers are already
        up; the run reaches them when its pairs are ready."""
        if not self.scheduler and slots:
            self.early = ClusterStart(_absolute_config(cfg), slots, toolchain)

    def run(self, pairs: list[Pair], ctx: Any, slots: list[Any], device: str,
            say: Callable[[str], None]) -> dict[str, Any]:
        early, self.early = self.early, None
        return run_all_dask(pairs, ctx, slots, device, say, early)


def make(cfg: Config) -> DaskExecutor:
    return DaskExecutor(cfg)


def run_all_dask(pairs: list[Pair], ctx: Any, slots: list[Any], device: str,
                 say: Callable[[str], None] = lambda text: None, early: ClusterStart | None = None) -> dict[str, Any]:
    """Every pair gets exactly one record through ctx.emit. Returns what run.json records under `dask`. `early`: the
    LocalCluster begin() started (used where it came up, closed here either way)."""
    require_distributed()
    from distributed import Client, as_completed

    groups = {group[0].problem_id: [_absolute(p) for p in group] for group in problem_groups(pairs)}
    order = list(groups)                                             # big groups first: better balance
    cfg = _absolute_config(ctx.cfg)
    info: dict[str, Any] = {"scheduler": cfg.scheduler or "LocalCluster", "tasks": {}}
    cluster = None
    client = None
    cores = None
    futures: dict[Any, str] = {}
    try:
        if early is not None:
            cluster, client, cores = early.take(say)
            info["cluster_start"] = early.timings()
        if not groups:
            return info
        if cfg.scheduler:
            try:
                client = Client(cfg.scheduler, timeout="60s")
            except (OSError, TimeoutError) as exc:
                raise UsageError(f"--scheduler {cfg.scheduler}: cannot connect: {describe_exception(exc)} "
                                 f"(finished pairs are in results.jsonl; continue with --resume {ctx.run_id})") from None
        elif client is None:
            started = time.monotonic()
            cores = coreshares.assign(slots, say) if device == "cuda" else None   # held until the cluster closes
            cluster = start_local_cluster(cfg, device, slots)
            client = Client(cluster)
            info["cluster_start"] = {"seconds": round(time.monotonic() - started, 3), "early": False}
        info["workers"] = describe_workers(client, device, say)
        resources = GPU_RESOURCES if device == "cuda" else CPU_RESOURCES
        for pid in order:
            group = groups[pid]
            task = GroupTask(cfg, ctx.run_id, device, ctx.toolchain,
                             {p.candidate.id: ctx.builds[p.candidate.id] for p in group if p.candidate.id in ctx.builds},
                             ctx.seed, str(Path(ctx.log_dir).resolve()), group, ctx.between)
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
        close_cluster(client, cluster, cores)
    return info


def close_cluster(client: Any, cluster: Any, cores: Any) -> None:
    """The client, the cluster started here and the cores claimed for it, each where there is one; a failure to
    close is not the run's."""
    if client is not None:
        with contextlib.suppress(Exception):
            client.close(timeout=10)
    if cluster is not None:
        with contextlib.suppress(Exception):
            cluster.close(timeout=20)
    if cores is not None:
        cores.release()


class ClusterStart:
    """A LocalCluster started on a thread of its own while the parent builds (DaskExecutor.begin): its workers'
    processes and their imports, then on each worker its slot's zygote (dask_host.warm), which a local run's begin
    starts for its slots. Without it the first task of each worker waited for all of that after the builds. take()
    waits for the start and hands over the cluster, its client and the cores claimed for it; a start that failed
    hands over nothing (it is closed, and run_all_dask starts one the usual way, where a failure is the run's)."""

    def __init__(self, cfg: Config, slots: list[Any], toolchain: Any) -> None:
        self.device = "cuda" if any(slot.gpu is not None for slot in slots) else "cpu"
        self.said: list[str] = []
        self.cluster: Any = None
        self.client: Any = None
        self.cores: Any = None
        self.seconds: float | None = None
        self.warm_seconds: float | None = None
        self.waited: float | None = None
        self.warm_error: str | None = None
        self._began = time.monotonic()
        self._thread = threading.Thread(target=self._start, args=(cfg, slots, toolchain), name="kb-dask-start",
                                        daemon=True)
        self._thread.start()

    def _start(self, cfg: Config, slots: list[Any], toolchain: Any) -> None:
        try:
            from distributed import Client
            self.cores = coreshares.assign(slots, self.said.append) if self.device == "cuda" else None
            self.cluster = start_local_cluster(cfg, self.device, slots)
            self.client = Client(self.cluster)
        except BaseException:                                          # noqa: BLE001 - run_all_dask starts anew
            self.close()
            return
        finally:
            self.seconds = round(time.monotonic() - self._began, 3)
        try:
            self.client.run(dask_host.warm, cfg, toolchain, self.device)
        except BaseException as exc:                                   # noqa: BLE001 - a task meets it, as before
            self.warm_error = describe_exception(exc)
        self.warm_seconds = round(time.monotonic() - self._began - self.seconds, 3)

    def take(self, say: Callable[[str], None]) -> tuple[Any, Any, Any]:
        """(cluster, client, cores), all None where the start failed."""
        waited = time.monotonic()
        self._thread.join()
        self.waited = round(time.monotonic() - waited, 3)
        for line in self.said:
            say(line)
        return self.cluster, self.client, self.cores

    def timings(self) -> dict[str, Any]:
        """What run.json records: the seconds the cluster took to come up and then to warm its workers, and how
        long the run waited for both after its builds."""
        return {"seconds": self.seconds, "warm_seconds": self.warm_seconds, "waited": self.waited, "early": True,
                **({"warm_error": self.warm_error} if self.warm_error else {})}

    def close(self) -> None:
        close_cluster(self.client, self.cluster, self.cores)
        self.cluster = self.client = self.cores = None


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
    own share of this process's cores (KB_DASK_CPUS): on CUDA its slot's (harness.run.coreshares.assign, done by the
    caller), as local slots do."""
    import dask
    from distributed import Nanny, Scheduler, SpecCluster

    if device == "cuda":
        envs = [({"CUDA_VISIBLE_DEVICES": slot.cuda_visible}, dict(GPU_RESOURCES)) for slot in slots]
    else:
        envs = [({}, {}) for _ in range(cfg.dask_workers or CPU_WORKERS)]
    shares = coreshares.split(os.sched_getaffinity(0), len(envs))
    workers = {}
    for i, (env, resources) in enumerate(envs):
        mine = (slots[i].cpus if device == "cuda" else ()) or shares[i]
        options = {"nthreads": 1, "env": {**env, "KB_DASK_CPUS": ",".join(map(str, mine))},
                   "dashboard_address": None, "silence_logs": 40}
        if resources:
            options["resources"] = resources
        workers[f"kb-{i}"] = {"cls": Nanny, "options": options}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": None, "host": "127.0.0.1"}}
    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
                          "distributed.scheduler.worker-saturation": 1.0}):   # a worker holds only its running task
        return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=40, name="kb-harness")


def describe_workers(client: Any, device: str, say: Callable[[str], None]) -> dict[str, Any]:
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


def failure_text(exc: BaseException, scheduler: str | None) -> str:
    """The error of a task that raised in the parent's hands: the worker died (KilledWorker) or the scheduler could
    not read the graph (an environment unlike the parent's: other dask or Python versions)."""
    text = describe_exception(exc)
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


if __name__ == "__main__":                                         # pragma: no cover
    sys.exit("harness.run.executors.dask is used by run_eval.py --executor dask")
