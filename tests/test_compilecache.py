"""harness.run.compilecache: the reference's torch.compile caches under cache_dir, keyed and checked like builds,
hidden from the workers that run candidate code."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO, PAIR_TIMEOUT_ARG, run_cli, write_config
from harness.run import build, compilecache
from harness.run.cachedirs import compile_root, hidden_from_candidates

CPU = build.Toolchain("cpu", "2.13.0", None, None, "3.11.7")


def test_the_cache_lies_under_cache_dir_keyed_by_the_toolchain(tmp_path):
    entry = compilecache.entry(tmp_path, CPU)
    assert entry.parent == (tmp_path / "compile").resolve()
    assert compilecache.entry(tmp_path, build.Toolchain("cpu", "2.13.0", None, None, "3.11.7")) == entry
    for other in (build.Toolchain("cpu", "2.11.0", None, None, "3.11.7"),
                  build.Toolchain("cuda", "2.13.0", "12.8", "9.0", "3.11.7"),
                  build.Toolchain("cuda", "2.13.0", "12.8", "10.0", "3.11.7"),
                  build.Toolchain("cpu", "2.13.0", None, None, "3.12.1")):
        assert compilecache.entry(tmp_path, other) != entry


def test_the_reference_env_points_inductor_and_triton_at_the_entry(tmp_path):
    env = compilecache.reference_env(tmp_path, CPU)
    entry = compilecache.entry(tmp_path, CPU)
    assert env == {"TORCHINDUCTOR_CACHE_DIR": str(entry), "TRITON_CACHE_DIR": str(entry / "triton")}


def test_prepare_makes_the_entry_and_removes_a_damaged_one_like_a_build(tmp_path):
    assert compilecache.prepare(tmp_path, CPU) is None
    entry = compilecache.entry(tmp_path, CPU)
    assert entry.is_dir()
    (entry / "fxgraph").mkdir()
    assert compilecache.prepare(tmp_path, CPU) is None and (entry / "fxgraph").is_dir()    # a sound one is kept
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "kept").write_text("x")
    os.symlink(elsewhere, entry / "link")
    warning = compilecache.prepare(tmp_path, CPU)
    assert warning is not None and "link" in warning and "removed and made again" in warning
    assert entry.is_dir() and not entry.is_symlink() and list(entry.iterdir()) == []
    assert (elsewhere / "kept").read_text() == "x"                   # a link is removed, never followed


def test_prepare_replaces_a_compile_folder_that_is_a_link(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "cache").mkdir()
    os.symlink(target, tmp_path / "cache" / "compile")
    warning = compilecache.prepare(tmp_path / "cache", CPU)
    assert warning is not None and "not a folder" in warning
    assert not (tmp_path / "cache" / "compile").is_symlink() and list(target.iterdir()) == []


def test_candidate_code_does_not_see_the_compile_cache(tmp_path):
    """The build and candidate workers' sandbox hides the run keys and the compile caches alike."""
    hidden = hidden_from_candidates(tmp_path)
    assert str(compile_root(tmp_path)) in hidden and str((tmp_path / "keys").resolve()) in hidden


def _run_once(tmp_path, config):
    """One run of examples/cpu's first problem with the default-mode baseline: its record and its reference's log."""
    done = run_cli("--config", str(config), "--problem", "001_*", "--candidate", "aa_*", "--compile-modes",
                   "default", "--json", "--timeout", PAIR_TIMEOUT_ARG)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][0])
    (log,) = (tmp_path / "results" / record["run_id"] / "logs").glob("*__reference.log")
    return record, log.read_text(errors="replace")


def _said(log: str, cache: str) -> tuple[int, int]:
    """(hits, misses) the reference's log gives `cache` for the default-mode baseline (harness.worker.compilewarm)."""
    line = next(line for line in log.splitlines() if line.startswith("kb-harness: compile baseline default:"))
    found = re.search(rf"{cache}: (\d+) hit, (\d+) miss", line)
    assert found, line
    return int(found.group(1)), int(found.group(2))


def test_a_second_run_finds_the_baseline_in_cache_dir(tmp_path):
    """A CPU run with a torch.compile baseline leaves Inductor's FX graph and AOTAutograd caches under
    <cache_dir>/compile/<key>/; the candidate worker's sandbox hid that folder (where the machine can hide one). A
    second run over the same cache_dir loads the baseline from there: its reference's log counts a hit and no miss
    in both caches, where the first run's counted misses; and both say what the compile stack's warm-up took."""
    tree = REPO / "examples" / "cpu"
    config = write_config(tmp_path, tree, cache_dir=tmp_path / "cache")
    record, first_log = _run_once(tmp_path, config)
    assert record["timing"]["baselines"]["compile:default"]["error"] is None
    (entry,) = (tmp_path / "cache" / "compile").iterdir()
    assert any((entry / "fxgraph").rglob("*")) and (entry / "aotautograd").is_dir()
    hidden = record["sandbox"]["hidden"]
    assert not hidden or str(entry.parent.resolve()) in hidden
    assert _said(first_log, "fx graph cache")[1] >= 1 and _said(first_log, "AOTAutograd cache")[1] >= 1
    from torch._inductor import codecache
    if hasattr(codecache, "_HEADER_DIR"):                   # the C++ kernel's precompiled header: in the entry too
        assert any((entry / "precompiled_headers").glob("*.gch")), sorted(p.name for p in entry.iterdir())

    again, second_log = _run_once(tmp_path, config)
    assert again["run_id"] != record["run_id"]
    assert again["timing"]["baselines"]["compile:default"]["error"] is None
    for cache in ("fx graph cache", "AOTAutograd cache"):
        hits, misses = _said(second_log, cache)
        assert hits >= 1 and misses == 0, (cache, second_log[-3000:])
    for log in (first_log, second_log):
        assert "kb-harness: compile warm-up beside the setup:" in log and "(of which" in log
        # the compile stack was imported in the zygote the reference was forked from (harness.run.zygote): what is
        # left of its import in the worker is looking up modules already there
        if os.environ.get("KB_ZYGOTE", "1") != "0":
            imports = float(re.search(r"imports ([0-9.]+) s", log).group(1))
            assert imports < 0.5, log[-2000:]


def test_the_log_line_counts_each_cache(monkeypatch):
    """compilewarm reads Inductor's own counters (torch._dynamo.utils.counters) and says per baseline what each cache
    answered since the baseline began."""
    import collections
    import types
    from harness.worker import compilewarm
    fake = types.SimpleNamespace(counters=collections.defaultdict(collections.Counter))
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", fake)
    fake.counters["inductor"]["fxgraph_cache_miss"] = 2
    before = compilewarm.cache_counts()
    assert before["fx graph cache"] == {"hit": 0, "miss": 2, "bypass": 0}
    fake.counters["inductor"]["fxgraph_cache_hit"] += 1
    fake.counters["aot_autograd"]["autograd_cache_hit"] += 1
    counts = compilewarm.counted_since(before)
    assert counts == {"fx graph cache": {"hit": 1, "miss": 0, "bypass": 0},
                      "AOTAutograd cache": {"hit": 1, "miss": 0, "bypass": 0}}
    line = compilewarm.log_line("default", 0.25, counts, waited=0.1)
    assert line == ("kb-harness: compile baseline default: 0.25 s (of which 0.10 s waiting for the warm-up); "
                    "fx graph cache: 1 hit, 0 miss, 0 bypass; AOTAutograd cache: 1 hit, 0 miss, 0 bypass")


def test_the_warm_up_without_a_cache_folder_only_imports(tmp_path):
    """Before a job names the cache folder (a worker waiting for its job: compilewarm.begin), the warm-up imports
    and hashes but builds nothing: no vector ISA probe, and TORCHINDUCTOR_CACHE_DIR, which Inductor's import sets to
    its default folder, is unset again. The job's start() takes that warm-up over rather than starting another.
    Each step works on this torch (the steps' API)."""
    code = ("import json, os, torch; from harness.worker import compilewarm; w = compilewarm.begin('cpu'); "
            "w.wait(); print(json.dumps({'steps': w.steps, 'dir': os.environ.get('TORCHINDUCTOR_CACHE_DIR')}))")
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, "TMPDIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["dir"] is None and "error" not in said["steps"], said
    assert set(said["steps"]) >= {"imports", "torch_key"} and "vec_isa" not in said["steps"]


def test_the_job_takes_over_a_warm_up_begun_before_it(tmp_path):
    """compilewarm.start: the job's warm-up is the one begun before it with the cache folder (no second one), and
    none at all without compile modes. (Threads that never start: the test only looks at which object is handed.)"""
    from harness.worker import compilewarm

    class Begun:
        folder_set = True
    begun = Begun()
    saved, compilewarm._begun = compilewarm._begun, begun
    try:
        assert compilewarm.start("cpu", ["default"]) is begun
        assert compilewarm.start("cpu", []) is None
    finally:
        compilewarm._begun = saved
