"""Stage 2, build: compile every candidate's extensions in a pool of worker processes, each into its own build
directory keyed by a hash of the candidate source, the toolchain and the build flags.

A directory whose build.json exists is reused as it is: an unchanged candidate is never rebuilt across runs, and
the execute worker, pointed at the same TORCH_EXTENSIONS_DIR with the same flags, finds its extensions built.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .discover import Pair, needs_cuda
from .messages import BuildJob, wire
from .procs import Worker, WorkerExit, worker_env
from .signing import RunKey

BUILD_FORMAT = 2        # bump when the build recipe below changes, to invalidate every cached build


@dataclass
class Toolchain:
    device_kind: str                # "cpu" | "cuda"
    torch: str
    cuda: str | None
    arch: str | None                # TORCH_CUDA_ARCH_LIST
    python: str

    def as_key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class BuildResult:
    status: str                     # built | compile_error | skipped | timeout | crashed
    error: str | None = None
    compiler_output: str | None = None
    extensions: list[str] = field(default_factory=list)
    cached: bool = False
    seconds: float = 0.0
    key: str = ""
    build_dir: str = ""
    candidate_path: str = ""        # the file the execute worker imports
    sandbox: dict | None = None     # what confined the build worker (harness.sandbox's report)
    static: bool = False            # decided without a build worker (skipped_without_building); not saved

    def record(self) -> dict:
        return {"status": self.status, "cached": self.cached, "seconds": self.seconds, "key": self.key,
                "extensions": self.extensions, "compiler_output": self.compiler_output, "sandbox": self.sandbox}


def _report(message: dict) -> dict | None:
    """The sandbox report a worker's first message carries (a dict, or None)."""
    report = message.get("sandbox")
    return report if isinstance(report, dict) else None


def build_key(source: str, toolchain: Toolchain) -> str:
    digest = hashlib.sha256()
    for part in (str(BUILD_FORMAT), toolchain.as_key(), source):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:20]


def build_env(build_dir: Path, toolchain: Toolchain) -> dict[str, str]:
    """The variables that decide where and how extensions build; the execute worker gets the same ones."""
    env = {"TORCH_EXTENSIONS_DIR": str(build_dir / "ext"), "MAX_JOBS": "2"}
    if toolchain.arch:
        env["TORCH_CUDA_ARCH_LIST"] = toolchain.arch
    return env


def _prepare_dir(pair: Pair, root: Path, toolchain: Toolchain) -> tuple[str, Path, Path]:
    cand = pair.candidate
    key = build_key(cand.source or "", toolchain)
    build_dir = (root / key).absolute()              # its paths reach processes that change directory (ninja)
    build_dir.mkdir(parents=True, exist_ok=True)
    if cand.path.suffix == ".py":
        candidate_path = cand.path.resolve()
    else:                                               # an extracted response: the code block is the candidate
        candidate_path = build_dir / "candidate.py"
        if not candidate_path.exists():
            candidate_path.write_text(cand.source or "")
    return key, build_dir, candidate_path


class BuildCancelled(Exception):
    """The build stage was interrupted (Ctrl-C): no new build worker starts."""


class LiveBuilds:
    """The build workers running now, so that an interrupted stage kills them at once instead of waiting."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.workers: set[Worker] = set()
        self.cancelled = False

    def add(self, worker: Worker) -> None:
        with self.lock:
            if not self.cancelled:
                self.workers.add(worker)
                return
        worker.kill()
        raise BuildCancelled()

    def discard(self, worker: Worker) -> None:
        with self.lock:
            self.workers.discard(worker)

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            workers = list(self.workers)
        for worker in workers:
            worker.kill()


def _remove_stale_locks(build_dir: Path, older_than: float | None = None) -> None:
    """torch.utils.cpp_extension waits, without a timeout, for a `lock` file that a killed build left in its
    extension folder: remove those of a build we killed, and (before building) any older than the build timeout."""
    now = time.time()
    for lock in (build_dir / "ext").glob("*/lock"):
        try:
            if older_than is None or now - lock.stat().st_mtime > older_than:
                lock.unlink()
        except OSError:
            pass


def build_one(pair: Pair, root: Path, toolchain: Toolchain, timeout: float, seed: int,
              live: LiveBuilds | None = None) -> BuildResult:
    key, build_dir, candidate_path = _prepare_dir(pair, root, toolchain)
    base = {"key": key, "build_dir": str(build_dir), "candidate_path": str(candidate_path)}
    marker = build_dir / "build.json"
    if marker.exists():
        try:
            saved = json.loads(marker.read_text())
            return BuildResult(**{**saved, **base, "cached": True})
        except (ValueError, TypeError):
            marker.unlink()
    if live is not None and live.cancelled:
        raise BuildCancelled()
    started = time.monotonic()
    _remove_stale_locks(build_dir, older_than=timeout)
    env = worker_env({**build_env(build_dir, toolchain), "CUDA_VISIBLE_DEVICES": "", "KB_DEVICE": "cpu"})
    worker = Worker("build", env, build_dir / "build.log")
    try:
        if live is not None:
            live.add(worker)
        worker.send(wire(BuildJob(str(candidate_path), str(pair.problem.path.resolve()), toolchain.device_kind, seed,
                                  hide=[str(RunKey.keys_dir(root.parent))])))     # root: <cache_dir>/builds
        message = worker.recv(time.monotonic() + timeout)
    except WorkerExit as exc:
        _remove_stale_locks(build_dir)
        if live is not None and live.cancelled:
            raise BuildCancelled() from None
        status = {"timeout": "timeout", "oom": "oom"}.get(exc.kind, "crashed")
        error = (f"build did not finish within {timeout:g} s" if status == "timeout"
                 else f"build {exc.detail}: {worker.log_tail(300).strip().splitlines()[-1:]}")
        return BuildResult(status, error, worker.log_tail(), seconds=round(time.monotonic() - started, 3), **base)
    finally:
        if live is not None:
            live.discard(worker)
        worker.close()
    result = BuildResult(status=message.get("status", "crashed"), error=message.get("error"),
                         compiler_output=message.get("compiler_output"), extensions=message.get("extensions", []),
                         seconds=round(time.monotonic() - started, 3), sandbox=_report(message), **base)
    if result.status in ("built", "compile_error", "skipped"):
        saved = {k: v for k, v in asdict(result).items() if k not in base and k not in ("cached", "static")}
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(json.dumps(saved))
        os.replace(tmp, marker)
    return result


CPU_SKIP_REASON = "candidate holds CUDA code (CUDA sources, .cu files or Triton) and this run is on the CPU"


def skipped_without_building(pair: Pair, toolchain: Toolchain) -> BuildResult | None:
    """On the CPU path, a candidate that discover's static look finds CUDA code in (`needs_cuda`: what the run's
    first line announced as skipped) gets its `skipped` result here: no build worker, no build folder
    (`seconds` 0, `sandbox` None). Elsewhere None: the build decides."""
    if toolchain.device_kind != "cpu" or not needs_cuda(pair.candidate):
        return None
    return BuildResult("skipped", CPU_SKIP_REASON, key=build_key(pair.candidate.source or "", toolchain),
                       static=True)


def build_all(pairs: list[Pair], root: Path, toolchain: Toolchain, jobs: int, timeout: float, seed: int,
              on_done: Callable[[Pair, BuildResult], None] | None = None) -> dict[str, BuildResult]:
    """Build every buildable pair's candidate in parallel; returns candidate id -> result. A candidate the CPU
    path skips is not built (skipped_without_building)."""
    root.mkdir(parents=True, exist_ok=True)
    buildable = [p for p in pairs if p.problem is not None and p.problem.error is None and p.candidate.error is None]
    results: dict[str, BuildResult] = {}
    todo = []
    for pair in buildable:
        skipped = skipped_without_building(pair, toolchain)
        if skipped is None:
            todo.append(pair)
            continue
        results[pair.candidate.id] = skipped
        if on_done:
            on_done(pair, skipped)

    locks: dict[str, threading.Lock] = {}
    for pair in todo:                                   # identical sources share one build directory
        locks.setdefault(build_key(pair.candidate.source or "", toolchain), threading.Lock())

    live = LiveBuilds()

    def task(pair: Pair) -> None:
        try:
            with locks[build_key(pair.candidate.source or "", toolchain)]:
                result = build_one(pair, root, toolchain, timeout, seed, live)
        except BuildCancelled:
            return
        results[pair.candidate.id] = result
        if on_done:
            on_done(pair, result)

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    futures = [pool.submit(task, pair) for pair in todo]
    try:
        for future in futures:
            future.result()
    except BaseException:
        # Ctrl-C (or a harness fault): queued builds never start, running ones are killed now, not awaited.
        pool.shutdown(wait=False, cancel_futures=True)
        live.cancel()
        wait([f for f in futures if not f.cancelled()], timeout=10)   # (wait() never counts a cancelled one)
        raise
    pool.shutdown()
    return results
