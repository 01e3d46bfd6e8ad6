"""Stage 2, build: compile every candidate's extensions in a pool of worker processes, each into its own build
directory keyed by a hash of the candidate source, the toolchain and the build flags.

A directory whose build.json exists is reused: an unchanged candidate is never rebuilt across runs, and the
execute worker, pointed at the same TORCH_EXTENSIONS_DIR with the same flags, finds its extensions built. The cache
is checked before it is trusted (`entry_damage`): an entry that is not a plain folder, holds a link, or whose build.json
is not a regular file with a build result's fields is removed and built again, once, with a warning.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from harness.core.discover import Pair, needs_cuda, uses_triton
from harness.shared import messages as m
from harness.shared.messages import BuildJob
from harness.run.clients import BuildClient
from harness.results.parts import Build, Sandbox
from harness.results.records import exit_status
from harness.run.workerproc import Worker, WorkerExit, worker_env
from harness.run.cachedirs import hidden_from_candidates
from harness.core.untrusted import ReadError, load_json, read_bytes, show_path, write_text

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
    sandbox: dict | None = None     # what confined the build worker (harness.worker.sandbox's report, as saved)
    warning: str | None = None      # a damaged cache entry that was removed and built again (said once, not saved)
    static: bool = False            # decided without a build worker (skipped_without_building); not saved

    def record(self) -> Build:
        """The record's `build`."""
        return Build(self.status, self.cached, self.seconds, self.key, self.extensions, self.compiler_output,
                     Sandbox.from_json(self.sandbox))


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


def build_worker_env(build_dir: Path, toolchain: Toolchain) -> dict[str, str]:
    """A build worker's whole environment: no GPU (it compiles; nothing of the candidate runs on a device)."""
    return worker_env({**build_env(build_dir, toolchain), "CUDA_VISIBLE_DEVICES": "", "KB_DEVICE": "cpu"})


SAVED_STATUSES = ("built", "compile_error", "skipped")
MARKER_LIMIT = 4 << 20          # bytes: a build.json larger than this is damaged
_SAVED_TYPES = {"status": str, "error": (str, type(None)), "compiler_output": (str, type(None)), "extensions": list,
                "seconds": (int, float), "sandbox": (dict, type(None))}


def entry_damage(build_dir: Path, source: str | None = None) -> str | None:
    """Why a cache entry cannot be trusted, or None (sound, or not there yet): not a plain folder, a link in it,
    a build.json that is not a regular file holding a build result, an extracted candidate.py that is not the
    candidate's code."""
    if not os.path.lexists(build_dir):
        return None
    if build_dir.is_symlink() or not build_dir.is_dir():
        return "not a folder (a link or a file)"
    try:
        links = sorted(entry.name for entry in os.scandir(build_dir) if entry.is_symlink())
    except OSError as exc:
        return f"cannot be listed ({exc.strerror})"
    if links:
        return f"{show_path(links[0])} is a link"
    marker = build_dir / "build.json"
    if os.path.lexists(marker):
        why = _saved_damage(marker)
        if why is not None:
            return f"build.json {why}"
    candidate = build_dir / "candidate.py"
    if source is not None and os.path.lexists(candidate):
        try:
            same = read_bytes(candidate, MARKER_LIMIT + len(source) * 4) == source.encode("utf-8", "surrogatepass")
        except ReadError:
            same = False
        if not same:
            return "candidate.py is not the candidate's code"
    return None


def _saved_damage(marker: Path) -> str | None:
    try:
        saved = load_json(read_bytes(marker, MARKER_LIMIT, follow=False))
    except ReadError as exc:
        return f"cannot be read: {exc.why}"
    except ValueError:
        return "is not JSON"
    if not isinstance(saved, dict):
        return "is not a build result"
    extra = sorted(set(saved) - set(_SAVED_TYPES))
    if extra:
        return f"has a field a build result does not have ({show_path(str(extra[0])[:40])})"
    for name, kind in _SAVED_TYPES.items():
        if not isinstance(saved.get(name), kind) or isinstance(saved.get(name), bool):
            return f"has no valid '{name}'"
    if saved["status"] not in SAVED_STATUSES or not all(isinstance(e, str) for e in saved["extensions"]):
        return "has no valid 'status' or 'extensions'"
    return None


def remove_entry(build_dir: Path) -> None:
    """A damaged cache entry out of the way (a link or a file is unlinked, never followed)."""
    if build_dir.is_symlink() or not build_dir.is_dir():
        build_dir.unlink()
    else:
        shutil.rmtree(build_dir)


def _prepare_dir(pair: Pair, root: Path, toolchain: Toolchain) -> tuple[str, Path, Path, str | None]:
    """(key, build dir, the file the workers import, a warning when a damaged entry was removed); OSError when
    the entry cannot be made."""
    cand = pair.candidate
    key = build_key(cand.source or "", toolchain)
    build_dir = (root / key).absolute()              # its paths reach processes that change directory (ninja)
    extracted = cand.path.suffix != ".py"            # an extracted response: the code block is the candidate
    damage = entry_damage(build_dir, cand.source if extracted else None)
    warning = None
    if damage is not None:
        warning = f"build cache {show_path(build_dir)}: {damage}; removed and built again"
        remove_entry(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    if not extracted:
        return key, build_dir, cand.path.resolve(), warning
    candidate_path = build_dir / "candidate.py"
    if not candidate_path.exists():
        write_text(candidate_path, cand.source or "")
    return key, build_dir, candidate_path, warning


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
    try:
        key, build_dir, candidate_path, warning = _prepare_dir(pair, root, toolchain)
    except OSError as exc:
        key = build_key(pair.candidate.source or "", toolchain)
        return BuildResult("crashed", f"build cache {show_path(root / key)}: cannot be used: "
                                      f"{exc.strerror or exc}", key=key)
    base = {"key": key, "build_dir": str(build_dir), "candidate_path": str(candidate_path), "warning": warning}
    if toolchain.device_kind == "cpu" and uses_triton(pair.candidate):
        return BuildResult("skipped", "the candidate uses Triton, whose kernels need a GPU; this run is on the CPU",
                           **base)
    marker = build_dir / "build.json"
    if os.path.lexists(marker):                 # checked by entry_damage: a regular file holding a build result
        try:
            saved = load_json(read_bytes(marker, MARKER_LIMIT, follow=False))
            return BuildResult(**{**saved, **base, "cached": True})
        except (ReadError, ValueError, TypeError):  # changed since it was checked: built again
            marker.unlink(missing_ok=True)
    if not may_build_extensions(pair.candidate):
        return _saved(BuildResult("built", **base), marker, base)
    if live is not None and live.cancelled:
        raise BuildCancelled()
    started = time.monotonic()
    _remove_stale_locks(build_dir, older_than=timeout)
    env = build_worker_env(build_dir, toolchain)
    worker = Worker("build", env, build_dir / "build.log")
    try:
        if live is not None:
            live.add(worker)
        reply = BuildClient(worker).build(BuildJob(str(candidate_path), str(pair.problem.path.resolve()),
                                                   toolchain.device_kind, seed,
                                                   hide=hidden_from_candidates(root.parent)),   # <cache_dir>/builds
                                          time.monotonic() + timeout)
    except WorkerExit as exc:
        _remove_stale_locks(build_dir)
        if live is not None and live.cancelled:
            raise BuildCancelled() from None
        status = exit_status(exc.kind).value
        said = exc.detail if exc.kind == "protocol" else f"build {exc.detail}"   # the client names the worker
        error = (f"build did not finish within {timeout:g} s" if status == "timeout"
                 else f"{said}: {worker.log_tail(300).strip().splitlines()[-1:]}")
        return BuildResult(status, error, worker.log_tail(), seconds=round(time.monotonic() - started, 3), **base)
    finally:
        if live is not None:
            live.discard(worker)
        worker.close()
    if isinstance(reply, m.HarnessError):
        return BuildResult("crashed", reply.error, seconds=round(time.monotonic() - started, 3),
                           sandbox=reply.sandbox, **base)
    return _saved(BuildResult(status=reply.status, error=reply.error, compiler_output=reply.compiler_output,
                              extensions=reply.extensions, seconds=round(time.monotonic() - started, 3),
                              sandbox=reply.sandbox, **base), marker, base)


def _saved(result: BuildResult, marker: Path, base: dict) -> BuildResult:
    """The result, written to the entry's build.json where it is one a later run may reuse (SAVED_STATUSES)."""
    if result.status in SAVED_STATUSES:
        saved = {k: v for k, v in asdict(result).items() if k not in base and k not in ("cached", "static")}
        try:
            write_text(marker, json.dumps(saved))
        except OSError as exc:                  # the result stands; the next run builds it again
            result.warning = f"build cache {show_path(marker.parent)}: result not saved: {exc.strerror or exc}"
    return result


# What a build worker is for: running the candidate's import (and its ModelNew's construction) with the
# load_inline/load of torch.utils.cpp_extension hooked, so that its extensions compile here rather than in its pair.
# A source that names none of cpp_extension's ways in and reaches no module beyond the standard library and torch
# builds nothing there: a worker that imports torch (~2 s of CPU) to find that out is not started.
_EXTENSION_WORDS = re.compile(r"cpp_extension|load_inline|\bload\s*\(|torch\.utils|__import__|importlib|"
                              r"(?<![\w.])(?:exec|eval|compile)\s*\(")
_NOTHING_TO_BUILD_MODULES = frozenset(sys.stdlib_module_names) | {"torch"}


def may_build_extensions(candidate) -> bool:
    """A static look at a candidate's source: False when importing it cannot reach a torch extension build (no
    cpp_extension, load_inline, load(...) or torch.utils named; no __import__, importlib, exec, eval or compile;
    no relative import and no import of a module outside the standard library and torch, such as a helper of its
    own that might build for it). Such a candidate is `built` without a build worker (`seconds` 0, `sandbox`
    None) and saved as any build is. One that reaches cpp_extension in a way this look misses compiles in its
    candidate worker, which hooks load_inline the same way (harness.worker.candidate), as a candidate whose
    extension is built only when its forward runs does. True (a build worker decides) when in doubt."""
    source = candidate.source or ""
    if _EXTENSION_WORDS.search(source):
        return True
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                return True
            modules = [node.module]
        else:
            continue
        if any(name.split(".")[0] not in _NOTHING_TO_BUILD_MODULES for name in modules):
            return True
    return False


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
