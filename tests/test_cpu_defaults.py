"""The CPU path's defaults (issue 31): CUDA candidates skipped without a build, the CPU path's own timing defaults
(`cpu_timing`) and where they give way, and compare's noise floor for CPU records."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO, json_records, run_cli, run_dirs
from harness.run import build
from harness.commands import compare
from harness.run.build import Toolchain, build_all
from harness.core.config import CPU_TIMING, TimingConfig, load_config
from harness.core.discover import discover

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
'''

CUDA_CANDIDATE = '''import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="cpu_defaults_cuda", cpp_sources="torch::Tensor f(torch::Tensor x);",
                  cuda_sources="#include <torch/extension.h>\\ntorch::Tensor f(torch::Tensor x) { return x; }",
                  functions=["f"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f(x)
'''


def cuda_tree(tmp: Path) -> Path:
    """One problem with one candidate that holds CUDA sources."""
    (tmp / "problems" / "level1").mkdir(parents=True)
    (tmp / "problems" / "level1" / "001_double.py").write_text(PROBLEM)
    folder = tmp / "solutions" / "level1" / "001_double"
    folder.mkdir(parents=True)
    (folder / "cuda_kernel.py").write_text(CUDA_CANDIDATE)
    return tmp


CPU_TOOLCHAIN = Toolchain("cpu", "2.13.0", None, None, "3.12")


# ---------------------------------------------------------------- skipped without a build


def test_a_cuda_candidate_gets_skipped_without_a_build_worker(tmp_path, monkeypatch):
    _, pairs = discover(cuda_tree(tmp_path) / "problems", tmp_path / "solutions")

    def no_worker(*args, **kwargs):
        raise AssertionError("a build worker was started for a candidate the CPU path skips")

    monkeypatch.setattr(build, "Worker", no_worker)
    done = []
    results = build_all(pairs, tmp_path / "cache" / "builds", CPU_TOOLCHAIN, 2, 60, 0,
                        on_done=lambda pair, result: done.append(pair.candidate.id))
    (result,) = results.values()
    assert result.status == "skipped" and result.static and "CUDA" in result.error
    assert result.seconds == 0 and result.sandbox is None and not result.cached
    assert done == [pairs[0].candidate.id]                  # the progress bar still counts it
    assert not any((tmp_path / "cache" / "builds").iterdir())   # no build folder either


def test_on_the_gpu_path_a_cuda_candidate_is_built(tmp_path):
    _, pairs = discover(cuda_tree(tmp_path) / "problems", tmp_path / "solutions")
    gpu = Toolchain("cuda", "2.13.0", "12.8", "9.0", "3.12")
    assert build.skipped_without_building(pairs[0], gpu) is None
    assert build.skipped_without_building(pairs[0], CPU_TOOLCHAIN) is not None


def test_a_cpu_run_records_the_skip_and_builds_nothing(tmp_path):
    tree = cuda_tree(tmp_path)
    done = run_cli("--problems-dir", str(tree / "problems"), "--solutions-dir", str(tree / "solutions"),
                   "--output-dir", str(tmp_path / "results"), "--device", "cpu", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 of 1 candidates hold CUDA code" in done.stderr
    record = json_records(done.stdout)["cuda_kernel"]
    assert record["status"] == "skipped" and "CUDA" in record["error"]
    assert record["build"]["status"] == "skipped" and record["build"]["seconds"] == 0
    assert record["build"]["sandbox"] is None                # no build worker was confined: none ran
    meta = json.loads((run_dirs(tmp_path)[-1] / "run.json").read_text())
    assert (meta["builds_compiled"], meta["builds_cached"], meta["builds_skipped"]) == (0, 0, 1)
    assert not list((tmp_path / ".cache" / "builds").iterdir())


# ---------------------------------------------------------------- the CPU path's timing defaults


def test_without_a_config_the_cpu_path_gets_its_own_timing():
    cfg = load_config(None, {})
    assert cfg.for_device("cuda").timing == TimingConfig()
    cpu = cfg.for_device("cpu").timing
    for key, value in CPU_TIMING.items():
        assert getattr(cpu, key) == value


def test_a_flag_wins_on_the_cpu_path():
    cfg = load_config(None, {"timing": {"target_rel_ci": 0.004, "compile_modes": "default"}})
    cpu = cfg.for_device("cpu").timing
    assert cpu.target_rel_ci == 0.004 and cpu.compile_modes == ("default",)
    assert cpu.max_pair_seconds == CPU_TIMING["max_pair_seconds"]     # a key no flag set keeps the CPU default


def test_a_config_files_timing_key_wins_and_cpu_timing_wins_over_it(tmp_path):
    own = tmp_path / "own.yaml"
    own.write_text("timing:\n  target_rel_ci: 0.01\n")
    cpu = load_config(own, {}).for_device("cpu").timing
    assert cpu.target_rel_ci == 0.01                                    # the file's key, on every device
    assert cpu.max_pair_seconds == CPU_TIMING["max_pair_seconds"]
    own.write_text("timing:\n  target_rel_ci: 0.01\ncpu_timing:\n  target_rel_ci: 0.03\n")
    cfg = load_config(own, {})
    assert cfg.for_device("cpu").timing.target_rel_ci == 0.03
    assert cfg.for_device("cpu").timing.max_pair_seconds == TimingConfig().max_pair_seconds   # cpu_timing as set
    assert cfg.for_device("cuda").timing.target_rel_ci == 0.01


def test_a_bad_cpu_timing_value_names_its_key(tmp_path):
    own = tmp_path / "own.yaml"
    for text, words in (("cpu_timing:\n  target_rel_ci: 2\n", "'cpu_timing.target_rel_ci' must be between"),
                        ("cpu_timing:\n  nope: 1\n", "unknown config key 'cpu_timing.nope'")):
        own.write_text(text)
        with pytest.raises(Exception, match=words):
            load_config(own, {})


def test_the_shipped_config_gives_the_built_in_defaults_on_both_paths():
    shipped = yaml.safe_load((REPO / "config.yaml").read_text())
    assert {k: tuple(v) if isinstance(v, list) else v for k, v in shipped["cpu_timing"].items()} == CPU_TIMING
    cfg = load_config(REPO / "config.yaml", {})
    built_in = load_config(None, {})
    for device in ("cpu", "cuda"):
        assert cfg.for_device(device).timing == built_in.for_device(device).timing


# ---------------------------------------------------------------- compare's noise floor on the CPU path


def _record(device: str, speedup: float, half: float, reference_ms: float = 0.2) -> dict:
    return {"schema_version": 2, "run_id": "r", "problem": "level1/p", "solution": "level1/p/c", "status": "ok",
            "correct": True, "flags": [], "error": None, "device": device, "speedup": speedup,
            "speedup_ci": [speedup * (1 - half), speedup * (1 + half)],
            "timing": {"reference": {"median_ms": reference_ms}}}


def _compare(a: dict, b: dict, **options):
    """compare_pair on two records' JSON, typed as the store gives them."""
    from harness.results.records import Record
    return compare.compare_pair(Record.of(a), Record.of(b), **options)


def test_compare_needs_a_cpu_change_past_the_noise_floor():
    small = 1 + compare.CPU_MIN_CHANGE * 0.8              # outside both CIs, inside the CPU path's floor
    assert _compare(_record("cpu", 1.0, 0.01), _record("cpu", small, 0.01)).verdict == compare.SAME
    big = 1 + compare.CPU_MIN_CHANGE * 1.5
    assert _compare(_record("cpu", 1.0, 0.01), _record("cpu", big, 0.01)).verdict == compare.FASTER
    assert _compare(_record("cpu", big, 0.01), _record("cpu", 1.0, 0.01)).verdict == compare.SLOWER
    # on the GPU no floor unless asked for, and an explicit --min-change wins on the CPU too
    assert _compare(_record("cuda", 1.0, 0.01), _record("cuda", small, 0.01)).verdict == compare.FASTER
    assert _compare(_record("cpu", 1.0, 0.01), _record("cpu", small, 0.01),
                                min_change=0.0).verdict == compare.FASTER


def test_compare_on_the_cpu_allows_for_how_far_the_reference_itself_moved():
    # measured: a C++ candidate 0.280x then 0.227x (-19%), its reference's own median 0.169 then 0.130 ms (-23%)
    a, b = _record("cpu", 0.280, 0.04, reference_ms=0.169), _record("cpu", 0.227, 0.04, reference_ms=0.130)
    row = _compare(a, b)
    assert row.verdict == compare.SAME and row.floor == pytest.approx(compare.CPU_MIN_CHANGE + 0.039 / 0.169)
    # the candidate itself 2x slower while the reference held still: SLOWER
    assert _compare(a, _record("cpu", 0.140, 0.04, reference_ms=0.170)).verdict == compare.SLOWER


def test_compare_on_the_cpu_allows_for_a_run_whose_rounds_were_not_alike():
    # measured: 0.340x as the median of round ratios while the sides' medians gave 0.1451 / 0.5907 = 0.246x; the next
    # run 0.227x (0.1302 / 0.5687 ms): -33%, CIs apart, the reference's median only 10% apart
    a = {**_record("cpu", 0.340, 0.035), "timing": {"reference": {"median_ms": 0.1451},
                                                    "candidate": {"median_ms": 0.5907}}}
    b = {**_record("cpu", 0.227, 0.04), "timing": {"reference": {"median_ms": 0.1302},
                                                   "candidate": {"median_ms": 0.5687}}}
    row = _compare(a, b)
    assert row.verdict == compare.SAME and row.floor > 0.4
    slower = {**b, "speedup": 0.113, "speedup_ci": [0.11, 0.116],
              "timing": {"reference": {"median_ms": 0.1451}, "candidate": {"median_ms": 1.28}}}
    assert _compare(a, slower).verdict == compare.SLOWER    # the candidate itself 2x slower
