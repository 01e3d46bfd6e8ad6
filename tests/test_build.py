"""harness.run.build: build keys, the cache, and what is never built."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from harness.core.discover import Candidate, Pair, Problem
from harness.run import build
from harness.run.workerproc import WorkerExit

from conftest import REPO, json_records, run_cli, verdict, write_config


def test_a_triton_candidate_is_skipped_on_the_cpu_without_a_build_worker(tmp_path, monkeypatch):
    """The CPU notice says Triton candidates are skipped there: they are, before anything imports them (they used
    to reach the import and fail as load_error: No module named 'triton')."""
    from harness.run import build
    from harness.core.discover import Candidate, Pair, Problem, needs_cuda, uses_triton
    source = "import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x):\n    pass\n"
    path = tmp_path / "tri.py"
    path.write_text(source)
    pair = Pair(Problem("level1/001_p", tmp_path / "p.py", None), Candidate("level1/001_p/tri", path, source, None),
                "level1/001_p")
    assert uses_triton(pair.candidate) and needs_cuda(pair.candidate)
    assert not uses_triton(Candidate("c", path, "import torch  # not triton\nx = 'triton'\n", None))
    monkeypatch.setattr(build, "Worker", lambda *a, **k: pytest.fail("a build worker was started"))
    cpu = build.Toolchain("cpu", "2.13.0", None, None, "3.11")
    result = build.build_one(pair, tmp_path / "builds", cpu, 60, 0)
    assert result.status == "skipped" and "Triton" in result.error and "CPU" in result.error


# ---------------------------------------------------------------- keys and the cache, against a scripted build worker

CPU = build.Toolchain("cpu", "2.13.0", None, None, "3.11.7")
# a candidate that builds an extension (may_build_extensions): only such a one gets a build worker
SOURCE = "import torch\nfrom torch.utils.cpp_extension import load_inline\nclass ModelNew(torch.nn.Module):\n    pass\n"


def make_pair(tmp: Path, name: str = "cand", source: str = SOURCE, suffix: str = ".py") -> Pair:
    path = tmp / f"{name}{suffix}"
    path.write_text(source if suffix == ".py" else f"```python\n{source}```\n")
    problem = tmp / "p.py"
    problem.write_text("")
    return Pair(Problem("level1/001_p", problem, None), Candidate(f"level1/001_p/{name}", path, source, None),
                "level1/001_p")


class BuildWorkers:
    """Stands in for build.Worker: each start is recorded (env, log, the job sent); `reply` is the worker's
    message, or a WorkerExit it ends with."""

    def __init__(self, reply):
        self.reply, self.started, self.lock = reply, [], threading.Lock()

    def __call__(self, role: str, env: dict, log_path: Path):
        outer = self

        class Started:
            def __init__(self):
                self.env, self.log_path, self.job = env, log_path, None
                with outer.lock:
                    outer.started.append(self)

            def send(self, message):
                self.job = message

            def recv(self, deadline):
                time.sleep(0.05)                        # a build takes a moment: overlapping builds would show
                if isinstance(outer.reply, Exception):
                    raise outer.reply
                return {"kind": "built", "error": None, "compiler_output": None, "extensions": [], "seconds": 0.1,
                        **outer.reply}          # every field the real build worker sends (harness.worker.build)

            def log_tail(self, limit=2000):
                return "g++: fatal error: Killed signal terminated program cc1plus\n"

            def close(self):
                return 0

            def kill(self):
                pass

        assert role == "build"
        return Started()


BUILT = {"status": "built", "extensions": ["kb_ext_cpp"], "sandbox": {"applied": True}}


@pytest.fixture()
def workers(monkeypatch):
    def install(reply=BUILT) -> BuildWorkers:
        fake = BuildWorkers(reply)
        monkeypatch.setattr(build, "Worker", fake)
        return fake
    return install


def test_the_build_key_is_the_source_the_toolchain_and_the_recipe(monkeypatch):
    key = build.build_key(SOURCE, CPU)
    assert len(key) == 20 and key == build.build_key(SOURCE, build.Toolchain("cpu", "2.13.0", None, None, "3.11.7"))
    others = [build.build_key(SOURCE + "\n", CPU),
              build.build_key(SOURCE, dataclasses.replace(CPU, torch="2.13.1")),
              build.build_key(SOURCE, dataclasses.replace(CPU, python="3.12.1")),
              build.build_key(SOURCE, dataclasses.replace(CPU, device_kind="cuda", cuda="12.8", arch="9.0")),
              build.build_key(SOURCE, dataclasses.replace(CPU, device_kind="cuda", cuda="12.8", arch="10.0"))]
    monkeypatch.setattr(build, "BUILD_FORMAT", build.BUILD_FORMAT + 1)
    others.append(build.build_key(SOURCE, CPU))
    assert len({key, *others}) == len(others) + 1


def test_a_candidate_is_compiled_once_then_found_in_the_cache(tmp_path, workers):
    fake = workers()
    pair, root = make_pair(tmp_path), tmp_path / "cache" / "builds"
    first = build.build_one(pair, root, CPU, 60, 7)
    assert (first.status, first.cached, first.extensions) == ("built", False, ["kb_ext_cpp"])
    entry = root / build.build_key(SOURCE, CPU)
    assert first.build_dir == str(entry) and first.key == entry.name and (entry / "build.json").is_file()
    (worker,) = fake.started
    assert worker.env["TORCH_EXTENSIONS_DIR"] == str(entry / "ext")     # where the execute worker looks too
    assert worker.env == {**worker.env, **build.build_env(entry, CPU)} and worker.env["CUDA_VISIBLE_DEVICES"] == ""
    assert worker.job["candidate_path"] == str(pair.candidate.path.resolve()) and worker.job["seed"] == 7
    assert worker.log_path == entry / "build.log"
    again = build.build_one(pair, root, CPU, 60, 7)
    assert again.cached and (again.status, again.extensions, again.sandbox) == ("built", ["kb_ext_cpp"],
                                                                                 {"applied": True})
    assert len(fake.started) == 1                                       # no second build worker
    elsewhere = build.build_one(pair, root, dataclasses.replace(CPU, torch="2.14.0"), 60, 7)
    assert not elsewhere.cached and len(fake.started) == 2 and elsewhere.build_dir != first.build_dir


def test_an_extracted_response_is_built_from_its_code_block(tmp_path, workers):
    fake = workers()
    pair = make_pair(tmp_path, suffix=".md")
    result = build.build_one(pair, tmp_path / "builds", CPU, 60, 0)
    assert Path(result.candidate_path) == Path(result.build_dir) / "candidate.py"
    assert Path(result.candidate_path).read_text() == SOURCE
    assert fake.started[0].job["candidate_path"] == result.candidate_path


def test_a_compile_error_is_cached_a_timeout_or_crash_is_not(tmp_path, workers):
    """A compile error is the candidate's own (the same source fails the same way): kept. A build that timed out
    or died may pass next time (a loaded machine, the OOM killer): built again."""
    fake = workers({"status": "compile_error", "error": "error: 'x' was not declared", "compiler_output": "..."})
    pair, root = make_pair(tmp_path, "broken"), tmp_path / "builds"
    assert build.build_one(pair, root, CPU, 60, 0).status == "compile_error"
    again = build.build_one(pair, root, CPU, 60, 0)
    assert again.cached and again.error == "error: 'x' was not declared" and len(fake.started) == 1
    for exit, status, words in [(WorkerExit("timeout", None, "timed out"), "timeout", "did not finish within 60 s"),
                                (WorkerExit("exited", -9, "was killed by SIGKILL"), "crashed", "Killed signal")]:
        fake = workers(exit)
        pair = make_pair(tmp_path, f"slow_{status}", source=SOURCE + f"# {status}\n")
        for _ in range(2):
            result = build.build_one(pair, root, CPU, 60, 0)
            assert result.status == status and words in result.error and not result.cached
        assert len(fake.started) == 2 and not (Path(result.build_dir) / "build.json").exists()


def test_a_killed_build_leaves_no_lock_that_would_stall_the_next(tmp_path, workers, monkeypatch):
    """torch's cpp_extension waits without a timeout on a `lock` a killed build left in its extension folder: a
    build removes such locks older than the build timeout first, and every lock of a build it had to kill."""
    pair, root = make_pair(tmp_path), tmp_path / "builds"
    ext = root / build.build_key(SOURCE, CPU) / "ext"
    stale, fresh = ext / "old_ext" / "lock", ext / "busy_ext" / "lock"
    for lock in (stale, fresh):
        lock.parent.mkdir(parents=True)
        lock.write_text("")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    workers(WorkerExit("timeout", None, "timed out"))
    original = build._remove_stale_locks
    seen = []

    def watched(build_dir, older_than=None):
        original(build_dir, older_than)
        seen.append((older_than, stale.exists(), fresh.exists()))
    monkeypatch.setattr(build, "_remove_stale_locks", watched)
    build.build_one(pair, root, CPU, 600, 0)
    assert seen == [(600, False, True), (None, False, False)]


def test_identical_sources_share_one_build(tmp_path, workers):
    """Two candidates with the same source (a response saved twice) are one build, even with parallel jobs; the
    other finds it cached. Every pair is reported once."""
    fake = workers()
    pairs = [make_pair(tmp_path, "first"), make_pair(tmp_path, "second"), make_pair(tmp_path, "other", SOURCE + "#\n")]
    done = []
    results = build.build_all(pairs, tmp_path / "builds", CPU, 3, 60, 0, on_done=lambda p, r: done.append(p))
    assert sorted(results) == sorted(p.candidate.id for p in pairs) and sorted(done, key=str) == sorted(pairs, key=str)
    assert len(fake.started) == 2
    first, second = results["level1/001_p/first"], results["level1/001_p/second"]
    assert first.build_dir == second.build_dir and {first.cached, second.cached} == {True, False}
    assert results["level1/001_p/other"].build_dir != first.build_dir


PYTHON_ONLY = "import math\nimport torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n"


def test_a_candidate_that_cannot_build_an_extension_gets_no_build_worker(tmp_path, workers):
    """A source of the standard library and torch alone, naming no way into cpp_extension, is `built` without a
    worker that would import torch to find nothing to compile; saved, so a later run finds it cached."""
    fake = workers()
    pair, root = make_pair(tmp_path, "plain", PYTHON_ONLY), tmp_path / "builds"
    first = build.build_one(pair, root, CPU, 60, 0)
    assert (first.status, first.cached, first.extensions, first.sandbox) == ("built", False, [], None)
    assert (Path(first.build_dir) / "build.json").is_file() and build.build_one(pair, root, CPU, 60, 0).cached
    md = build.build_one(make_pair(tmp_path, "plain_md", PYTHON_ONLY + "#\n", suffix=".md"), root, CPU, 60, 0)
    assert md.status == "built" and Path(md.candidate_path).read_text() == PYTHON_ONLY + "#\n"
    assert fake.started == []


@pytest.mark.parametrize("source", [
    SOURCE, "import torch.utils.cpp_extension as ce\n", "from torch.utils import cpp_extension\n",
    "import torch\nx = torch.utils\n", "m = __import__('torch')\n", "import importlib\n",
    "exec('import torch')\n", "eval('1')\n", "compile('1', 'f', 'eval')\n", "from torch import load\nload('f')\n",
    "import helper_of_its_own\n", "from . import helper\n", "import triton\n", "import numpy\n",
    "this is ( not python\n"])
def test_a_candidate_that_may_build_gets_its_build_worker(source):
    from harness.core.discover import Candidate
    assert build.may_build_extensions(Candidate("c", Path("c.py"), source, None))


@pytest.mark.parametrize("source", [PYTHON_ONLY, "import os, sys, threading\nimport torch.nn.functional as F\n"
                                    "m = torch.compile(m)\nmodel.eval()\n"])
def test_a_python_only_candidate_needs_no_build_worker(source):
    from harness.core.discover import Candidate
    assert not build.may_build_extensions(Candidate("c", Path("c.py"), source, None))


# A cheat on may_build_extensions: the static look misses an extension reached through getattr on strings, so the
# candidate gets no build worker and compiles in its own worker instead. It must gain nothing: the compile happens
# in the candidate worker's confinement, into the pair's own build folder (load_inline hooked as in a build
# worker), before its trials, and the pair is judged as any other.
EVASIVE = '''"""relu_scale, its extension reached by names no static look finds."""
import torch
import torch.nn as nn

_ext_module = getattr(getattr(torch, "ut" + "ils"), "cpp_" + "extension")
_src = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/relu.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>
at::Tensor relu_scale(at::Tensor x, double scale) { return at::relu(x).mul_(scale); }
"""
ext = getattr(_ext_module, "load_" + "inline")(name="evasive_relu_scale", cpp_sources=_src,
                                              functions=["relu_scale"], no_implicit_headers=True, verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ext.relu_scale(x, self.scale)
'''


def test_an_extension_hidden_from_the_static_look_is_built_confined_in_its_own_pair(tmp_path):
    tree = tmp_path / "tree"
    (tree / "problems" / "level1").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "cpu" / "problems" / "level1" / "001_relu_scale.py", tree / "problems" / "level1")
    solution = tree / "solutions" / "level1" / "001_relu_scale" / "evasive.py"
    solution.parent.mkdir(parents=True)
    solution.write_text(EVASIVE)
    assert not build.may_build_extensions(Candidate("evasive", solution, EVASIVE, None))
    cache = tmp_path / "cache"
    done = run_cli("--config", str(write_config(tmp_path, tree, cache_dir=cache)), "--json")
    assert done.returncode == 0, done.stderr
    record = json_records(done.stdout)["evasive"]
    assert verdict(record) == "ok" and record["correct"], (record["error"], json.dumps(record["worker"])[:2000])
    assert record["build"]["sandbox"] is None and record["build"]["extensions"] == []     # no build worker ran
    assert list((cache / "builds" / record["build"]["key"] / "ext").rglob("*.so"))         # the pair's own folder
    sandbox = record["sandbox"]
    assert sandbox["filesystem"] or not sandbox["landlock_abi"], sandbox                  # confined as ever
