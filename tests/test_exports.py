"""Exports and scaffolding: `report --csv/--jsonl`, `new LEVEL/PROBLEM NAME`, `export-kernelbench` and
`report --kernelbench` (fast_p on sample 0 over the whole problems tree, pass@k by the unbiased estimator)."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from conftest import FIXTURES, json_records, PAIR_TIMEOUT_ARG, run_cli, verdict, write_config
from harness.commands.kbexport import eval_results, kernelbench_metrics, pass_at_k, tree_problems
from harness.commands.kbimport import import_kernelbench, summary_lines
from harness.results.store import RunStore
from harness.results.records import as_records

TREE = FIXTURES / "tree"


# ---------------------------------------------------------------- a real run (conftest's tree_run): CSV and JSON lines

@pytest.fixture(scope="module")
def real_run(tree_run):
    tmp, _, records, _ = tree_run
    (run_dir,) = [p for p in (tmp / "results").iterdir() if p.is_dir()]
    return run_dir, records


def test_report_csv_has_a_header_and_one_row_per_record(real_run):
    run_dir, printed = real_run
    done = run_cli("report", run_dir.name, "--output-dir", str(run_dir.parent), "--csv")
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader(io.StringIO(done.stdout)))
    assert rows[0] == ["problem", "solution", "status", "correct", "speedup", "speedup_ci_lo", "speedup_ci_hi",
                       "speedup_vs_compile", "candidate_median_ms", "reference_median_ms", "flags", "error",
                       "sizes_geomean", "sizes", "ranked"]
    by_solution = {row["solution"]: row for row in csv.DictReader(io.StringIO(done.stdout))}
    assert len(by_solution) == len(rows) - 1 == len(printed)
    row = by_solution["level1/001_linear_relu/correct_cpp"]
    record = printed["correct_cpp"]
    assert row["problem"] == "level1/001_linear_relu" and row["status"] == record["status"] and verdict(record) == "ok"
    assert row["correct"] == "true"
    assert float(row["speedup"]) == pytest.approx(record["speedup"])
    assert float(row["speedup_ci_lo"]) <= float(row["speedup"]) <= float(row["speedup_ci_hi"])
    assert float(row["candidate_median_ms"]) == pytest.approx(record["timing"]["candidate"]["median_ms"])
    assert float(row["reference_median_ms"]) == pytest.approx(record["timing"]["reference"]["median_ms"])
    assert row["speedup_vs_compile"] == ""                  # no compile baselines in the tests
    assert row["flags"] == ";".join(record["flags"]) and row["error"] == ""
    assert row["sizes"] == row["sizes_geomean"] == ""      # one size
    broken = [r for s, r in by_solution.items() if s.startswith("level1/002_broken_problem/")]
    assert all(r["status"] == "load_error" and r["correct"] == "false" and r["error"] for r in broken)


def test_report_jsonl_prints_the_records_as_read(real_run):
    run_dir, printed = real_run
    done = run_cli("report", run_dir.name, "--output-dir", str(run_dir.parent), "--jsonl")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines == [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert {r["solution"].rsplit("/", 1)[-1] for r in lines} == set(printed)
    aggregates = run_cli("report", run_dir.name, "--output-dir", str(run_dir.parent), "--json")
    assert json.loads(aggregates.stdout)["pairs"] == len(lines)          # --json: still the aggregates
    clash = run_cli("report", run_dir.name, "--output-dir", str(run_dir.parent), "--csv", "--jsonl")
    assert clash.returncode == 2 and len(clash.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- new: a skeleton that runs as it is

def test_new_skeleton_builds_and_runs_ok_on_the_cpu(tmp_path):
    """The skeleton's C++ extension builds and runs ok, with config.yaml's relative cache_dir (cache, under the
    run's working directory): the compiler runs in the extension's own folder, so the build's temporary folder
    must be absolute there; with a relative one g++ fell back to /tmp, which the build's sandbox does not let it
    write, and the README's CPU example read compile_error. (That check was a run of its own over examples/cpu,
    which cost a second C++ build; this build is fresh either way.)"""
    solutions = tmp_path / "solutions"
    done = run_cli("new", "level1/001_linear_relu", "my_kernel", "--problems-dir", str(TREE / "problems"),
                   "--solutions-dir", str(solutions))
    assert done.returncode == 0, done.stderr
    path = solutions / "level1" / "001_linear_relu" / "my_kernel.py"
    text = path.read_text()
    assert "load_inline(" in text and "cpp_sources=" in text and "cuda_sources" not in text
    assert "def __init__(self, in_features, out_features):" in text and "class ModelNew(nn.Module):" in text
    assert "self.linear = nn.Linear" in text and "def get_inputs" not in text
    config = write_config(tmp_path, TREE, cache_dir=tmp_path / "cache")
    config.write_text(config.read_text().replace(f"cache_dir: {tmp_path / 'cache'}", "cache_dir: cache"))
    run = run_cli("--config", str(config), "--solutions-dir", str(solutions), "--problem", "001_linear_relu",
                  "--json", "--timeout", PAIR_TIMEOUT_ARG, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    record = json_records(run.stdout)["my_kernel"]
    assert record["build"]["status"] == "built", record["error"]
    assert verdict(record) == "ok", (record["error"], record.get("error_detail"))
    assert record["correctness"]["param_match"] == "state_dict"
    assert list((tmp_path / "cache" / "builds").rglob("*.so"))            # built under the relative cache_dir


def test_new_cuda_stub_uses_cuda_sources(tmp_path):
    done = run_cli("new", "level1/001_linear_relu", "gpu_kernel", "--cuda", "--problems-dir",
                   str(TREE / "problems"), "--solutions-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "level1" / "001_linear_relu" / "gpu_kernel.py").read_text()
    assert "cuda_sources=_cuda_src" in text and "__global__ void copy_kernel" in text
    compile(text, "gpu_kernel.py", "exec")


def test_new_copies_kernelbench_style_models(tmp_path):
    """`super(Model, self)`, helper methods, module constants and a two-argument forward survive the copy."""
    problems = tmp_path / "problems" / "kernelbench-level1"
    problems.mkdir(parents=True)
    (problems / "019_ReLU.py").write_text(
        'import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nSCALE = 2.0\nATOL = 1e-3\n\n'
        'class Model(nn.Module):\n    """doc"""\n    def __init__(self, dim: int = 1, *, eps=1e-5):\n'
        '        super(Model, self).__init__()\n        self.dim = dim\n        self.eps = eps\n\n'
        '    def _scale(self, x):\n        return x * SCALE\n\n'
        '    def forward(self, a, b=None):\n        # keep comments\n'
        '        return F.relu(self._scale(a) + (0 if b is None else b)).sum(self.dim) + self.eps\n\n'
        'def get_inputs():\n    return [torch.randn(4, 5), torch.randn(4, 5)]\n\n'
        'def get_init_inputs():\n    return [1]\n\nif __name__ == "__main__":\n    print(Model()(*get_inputs()))\n')
    done = run_cli("new", "kernelbench-level1/019_ReLU.py", "k", "--problems-dir", str(tmp_path / "problems"),
                   "--solutions-dir", str(tmp_path / "solutions"))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "solutions" / "kernelbench-level1" / "019_ReLU" / "k.py").read_text()
    assert "super(ModelNew, self).__init__()" in text and "# keep comments" in text
    assert "def forward(self, a, b=None):" in text and "self.reference_forward(a, b)" in text
    assert "ATOL" not in text and "__main__" not in text and "SCALE = 2.0" in text
    import ast
    tree = ast.parse(text)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assert ast.unparse(init.args) == "self, dim: int=1, *, eps=1e-05"


@pytest.mark.parametrize("args, message", [
    (["level1/001_linear", "x"], "did you mean level1/001_linear_relu?"),
    (["level7/001_linear_relu", "x"], "no level 'level7'"),
    (["level1/999_nothing", "x"], "problems there: 001_linear_relu, 002_broken_problem"),
    (["level1/001_linear_relu", "9lives"], "is not a Python identifier"),
    (["level1/001_linear_relu", "class"], "is not a Python identifier"),
    (["level1/001_linear_relu", "correct_cpp"], "exists; not overwritten"),
    (["level1"], "the following arguments are required"),
])
def test_new_refuses_in_one_line(tmp_path, args, message):
    solutions = tmp_path / "solutions"
    existing = solutions / "level1" / "001_linear_relu" / "correct_cpp.py"
    existing.parent.mkdir(parents=True)
    existing.write_text("# mine\n")
    done = run_cli("new", *args, "--problems-dir", str(TREE / "problems"), "--solutions-dir", str(solutions))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert existing.read_text() == "# mine\n"


# ---------------------------------------------------------------- KernelBench: fabricated signed runs

def record(problem: str, candidate: str, status: str = "ok", speedup: float | None = 1.0,
           median: float = 2.0, error: str | None = None) -> dict:
    ok = status == "ok"
    return {"schema_version": 2, "problem": problem, "solution": f"{problem}/{candidate}", "status": status,
            "correct": ok, "flags": [], "error": error, "speedup": speedup if ok else None,
            "speedup_ci": [speedup * 0.9, speedup * 1.1] if ok and speedup else None, "device": "cpu",
            "gpu": {"index": 0, "name": "NVIDIA H200"},
            "timing": {"candidate": side(median), "reference": side(median * (speedup or 1.0))}}


def side(median: float, n: int = 24) -> dict:
    """One side's sample summary (stats.summarize's keys) with its mean 0.1 ms above its median."""
    return {"n": n, "median_ms": median, "mean_ms": median + 0.1, "stdev_ms": 0.05, "min_ms": median - 0.2,
            "max_ms": median + 0.5}


def fabricated_run(tmp: Path, records: list[dict]) -> Path:
    store = RunStore.create(tmp / "results", {"config": {"cache_dir": str(tmp / "cache"),
                                                          "problems_dir": str(tmp / "problems")}})
    for r in records:
        store.append({**r, "run_id": store.run_id})
    store.finish()
    return store.dir


def make_tree(tmp: Path, level: str, stems: list[str]) -> None:
    for stem in stems:
        path = tmp / "problems" / level / f"{stem}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("class Model: pass\n")


KB1 = "kernelbench-level1"


def kb_records() -> list[dict]:
    run = "gpt_run"
    return [record(f"{KB1}/001_Square_matmul", f"{run}_sample_0", speedup=1.6, median=3.0),
            record(f"{KB1}/001_Square_matmul", f"{run}_sample_1", "incorrect", error="max abs err 0.5"),
            record(f"{KB1}/019_ReLU", f"{run}_sample_0", "compile_error", error="nvcc: error"),
            record(f"{KB1}/019_ReLU", f"{run}_sample_3", speedup=0.8),
            record(f"{KB1}/019_ReLU", "hand_written", speedup=5.0)]        # not from a KernelBench run folder


def test_a_sample_never_built_is_not_exported_as_compiled():
    """A CUDA sample skipped on a CPU machine never reached a compiler: KernelBench must not read it as compiled."""
    from harness.commands.kbexport import kb_sample
    from harness.results.records import Record
    built = {"status": "built", "cached": False, "seconds": 1.0, "key": "k", "extensions": [],
             "compiler_output": None, "sandbox": None}
    skipped = {**record(f"{KB1}/019_ReLU", "gpt_run_sample_0", "skipped", error="holds CUDA code"),
               "build": {**built, "status": "skipped", "seconds": 0.0}}
    assert kb_sample(Record.of(skipped), "r", 0)["compiled"] is False
    assert kb_sample(Record.of({k: v for k, v in skipped.items() if k != "build"}), "r", 0)["compiled"] is False
    ran = {**record(f"{KB1}/019_ReLU", "gpt_run_sample_1"), "build": built}
    assert kb_sample(Record.of(ran), "r", 1)["compiled"] is True


def test_export_kernelbench_writes_eval_results_json(tmp_path):
    run_dir = fabricated_run(tmp_path, kb_records())
    out = tmp_path / "eval_results.json"
    done = run_cli("export-kernelbench", run_dir.name, "--output-dir", str(run_dir.parent), "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert "2 problems, 4 samples" in done.stdout
    data = json.loads(out.read_text())
    # the layout KernelBench's scripts/benchmark_eval_analysis.py reads: per problem id a list of samples, from
    # which it takes the one entry whose sample_id is 0
    assert sorted(data) == ["1", "19"]
    assert [e["sample_id"] for e in data["1"]] == [0, 1] and [e["sample_id"] for e in data["19"]] == [0, 3]
    for entries in data.values():
        assert len([e for e in entries if e["sample_id"] == 0]) == 1
        for sample in entries:
            assert set(sample) == {"sample_id", "compiled", "correctness", "metadata", "runtime", "runtime_stats"}
            assert {"status", "error", "speedup"} <= set(sample["metadata"])
    raw, data = data, {pid: {str(e["sample_id"]): e for e in entries} for pid, entries in data.items()}
    ok = data["1"]["0"]
    # runtime is runtime_stats["mean"], kernelbench.timing.get_timing_stats's figures: 3 significant figures, std
    # the population's (numpy's), from our sample stdev 0.05 over 24 samples
    assert ok["compiled"] is True and ok["correctness"] is True and ok["runtime"] == 3.1
    assert ok["runtime_stats"] == {"mean": 3.1, "std": 0.0489, "min": 2.8, "max": 3.5, "num_trials": 24,
                                   "hardware": "NVIDIA H200", "device": "cpu"}
    assert ok["metadata"]["reference_runtime_stats"]["mean"] == 4.9 and ok["metadata"]["ranked"] is True
    assert ok["metadata"]["status"] == "ok" and ok["metadata"]["speedup"] == 1.6
    wrong = data["1"]["1"]
    assert wrong["compiled"] is True and wrong["correctness"] is False and wrong["runtime"] == -1.0
    assert wrong["runtime_stats"] == {} and wrong["metadata"]["error"] == "max abs err 0.5"
    broken = data["19"]["0"]
    assert broken["compiled"] is False and broken["correctness"] is False
    assert broken["metadata"]["status"] == "compile_error" and broken["metadata"]["speedup"] is None
    # by default, KernelBench's own layout under the current directory: runs/<KernelBench run name>/
    default = run_cli("export-kernelbench", run_dir.name, "--output-dir", str(run_dir.parent), cwd=tmp_path)
    assert default.returncode == 0, default.stderr
    assert json.loads((tmp_path / "runs" / "gpt_run" / "eval_results.json").read_text()) == raw
    assert (tmp_path / "runs" / "gpt_run" / "pass_at_k_results.json").is_file()
    assert (tmp_path / "results" / "timing" / "NVIDIA_H200" / "baseline_time_torch.json").is_file()
    assert "benchmark_eval_analysis.py run_name=gpt_run level=1 hardware=NVIDIA_H200" in default.stdout


def test_export_kernelbench_refuses_a_run_without_kernelbench_samples(tmp_path):
    run_dir = fabricated_run(tmp_path, [record("level1/001_linear_relu", "mine")])
    done = run_cli("export-kernelbench", run_dir.name, "--output-dir", str(run_dir.parent))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert f"run {run_dir.name} has no candidates imported from a KernelBench run folder" in done.stderr
    missing = run_cli("export-kernelbench", "no-such-run", "--output-dir", str(run_dir.parent))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


def test_export_kernelbench_asks_which_run_folder_when_there_are_several():
    records = kb_records() + [record(f"{KB1}/001_Square_matmul", "other_run_sample_0")]
    with pytest.raises(Exception, match="choose one with --kb-run"):
        eval_results(as_records(records), "r")
    assert sorted(eval_results(as_records(records), "r", kb_run="other_run")) == ["1"]


def test_pass_at_k_estimator_by_hand():
    assert pass_at_k(1, 1, 1) == 1.0 and pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))    # 1 - 21/252
    assert pass_at_k(6, 2, 5) == 1.0                                                         # n - c < k


def test_report_kernelbench_fast_p_counts_missing_problems_and_pass_at_k(tmp_path):
    stems = ["001_Square_matmul", "002_Other", "019_ReLU", "020_LeakyReLU"]
    make_tree(tmp_path, KB1, stems)
    make_tree(tmp_path, "level1", ["001_a", "002_b"])
    records = kb_records()
    # 020: six samples, two correct (sample 0 among them, at 2.5x)
    records += [record(f"{KB1}/020_LeakyReLU", f"gpt_run_sample_{s}", "ok" if s in (0, 4) else "incorrect",
                       speedup=2.5) for s in range(6)]
    # our own level: candidates by name, "a_first" is sample 0 of 001_a; 002_b has no record
    records += [record("level1/001_a", "b_second", speedup=3.0), record("level1/001_a", "a_first", speedup=1.2)]
    run_dir = fabricated_run(tmp_path, records)
    done = run_cli("report", run_dir.name, "--output-dir", str(run_dir.parent), "--kernelbench", "--json")
    assert done.returncode == 0, done.stderr
    levels = json.loads(done.stdout)["levels"]
    kb = levels[KB1]
    assert kb["problems"] == 4 and kb["evaluated"] == 3 and kb["missing"] == [f"{KB1}/002_Other"]
    assert kb["sample0"] == {f"{KB1}/001_Square_matmul": f"{KB1}/001_Square_matmul/gpt_run_sample_0",
                             f"{KB1}/019_ReLU": f"{KB1}/019_ReLU/gpt_run_sample_0",
                             f"{KB1}/020_LeakyReLU": f"{KB1}/020_LeakyReLU/gpt_run_sample_0"}
    # sample 0: 001 ok 1.6x, 019 compile_error, 020 ok 2.5x; 002 missing -> denominator 4
    assert kb["fast_p"] == {"0.0": 0.5, "0.5": 0.5, "0.8": 0.5, "1.0": 0.5, "1.5": 0.5, "2.0": 0.25}
    # pass@1 over problems with samples: 001 (n=2, c=1) 0.5; 019 (n=3: sample_0, sample_3, hand_written; c=2) 2/3;
    # 020 (n=6, c=2) 1/3
    assert kb["pass_at_k"]["1"]["problems"] == 3
    assert kb["pass_at_k"]["1"]["value"] == pytest.approx((0.5 + 2 / 3 + 1 / 3) / 3)
    # pass@5: only 020 has >= 5 samples: 1 - C(4,5)/C(6,5) = 1
    assert kb["pass_at_k"]["5"] == {"value": 1.0, "problems": 1}
    own = levels["level1"]
    assert own["problems"] == 2 and own["missing"] == ["level1/002_b"]
    assert own["sample0"] == {"level1/001_a": "level1/001_a/a_first"}
    assert own["fast_p"] == {"0.0": 0.5, "0.5": 0.5, "0.8": 0.5, "1.0": 0.5, "1.5": 0.0, "2.0": 0.0}
    assert own["pass_at_k"] == {"1": {"value": 1.0, "problems": 1}}
    table = run_cli("report", run_dir.name, "--output-dir", str(run_dir.parent), "--kernelbench")
    assert table.returncode == 0, table.stderr
    assert "fast_1.5" in table.stdout and "pass@5" in table.stdout and "002_Other" in table.stdout


def test_kernelbench_metrics_without_a_tree_count_only_problems_with_records():
    metrics = kernelbench_metrics(as_records(kb_records()), tree_problems(None))
    assert metrics["levels"][KB1]["problems"] == 2 and metrics["levels"][KB1]["fast_p"]["1.5"] == 0.5


# ---------------------------------------------------------------- KernelBench's own reader on the export
# A re-implementation, for checking only, of the arithmetic of ScalingIntelligence/KernelBench (MIT License,
# (c) 2023 Anne Ouyang, Simon Guo, Azalia Mirhoseini): scripts/benchmark_eval_analysis.py (analyze_greedy_eval with
# patch: sample_id 0 of each problem, problems without one patched as failures, problems missing from the baseline
# file skipped), src/kernelbench/score.py (fastp) and src/kernelbench/dataset.py (a level's problems by the number
# that starts each file name). Paths as analyze_greedy_eval builds them without overrides.

KB_P_VALUES = [0.0, 0.5, 0.8, 1.0, 1.5, 2.0]


def kb_dataset(checkout: Path, level: int) -> dict[int, str]:
    """construct_kernelbench_dataset(level) of a local checkout: {problem_id: file name}."""
    folder = checkout / "KernelBench" / f"level{level}"
    return {int(f.name.split("_")[0]): f.name for f in folder.iterdir() if f.name.endswith(".py")}


def kb_fastp(is_correct, baseline_speed, actual_speed, n: int, p: float):
    import numpy as np
    filtered_baseline_speed = np.array([x for i, x in enumerate(baseline_speed) if is_correct[i]])
    filtered_actual_speed = np.array([x for i, x in enumerate(actual_speed) if is_correct[i]])
    speed_up = filtered_baseline_speed / filtered_actual_speed
    fast_p_score = np.sum(speed_up > p)
    return fast_p_score / n if n > 0 else 0


def kb_analyze_greedy_eval(kb_root: Path, run_name: str, hardware: str, baseline: str, level: int,
                           dataset: dict[int, str]) -> dict:
    import numpy as np
    eval_results = json.loads((kb_root / f"runs/{run_name}/eval_results.json").read_text())
    baseline_results = json.loads((kb_root / f"results/timing/{hardware}/{baseline}.json").read_text())
    stripped = {}
    for key, result in eval_results.items():
        entry = [r for r in result if r["sample_id"] == 0]
        assert len(entry) <= 1, "Multiple entries for sample_id = 0"
        if len(entry) == 1:
            stripped[key] = entry[0]
    for pid in dataset:                                                            # patch()
        if str(pid) not in stripped:
            stripped[str(pid)] = {"sample_id": 0, "compiled": False, "correctness": False, "metadata": {},
                                  "runtime": -1.0, "runtime_stats": {}}
    is_correct_list, baseline_speed_list, actual_speed_list = [], [], []
    for pid in sorted(dataset):
        if str(pid) not in stripped or dataset[pid] not in baseline_results[f"level{level}"]:
            continue
        is_correct_list.append(stripped[str(pid)]["correctness"])
        actual_speed_list.append(stripped[str(pid)]["runtime"])
        baseline_speed_list.append(baseline_results[f"level{level}"][dataset[pid]]["mean"])
    is_correct, baseline_speed = np.array(is_correct_list), np.array(baseline_speed_list)
    actual_speed, n = np.array(actual_speed_list), len(is_correct_list)
    return {"aligned": n, "fast_p": {str(p): float(kb_fastp(is_correct, baseline_speed, actual_speed, n, p))
                                     for p in KB_P_VALUES}}


def timed(mean: float) -> dict:
    return {"n": 100, "median_ms": mean, "mean_ms": mean, "stdev_ms": 0.01, "min_ms": mean * 0.9,
            "max_ms": mean * 1.2}


def kb_pair(stem: str, sample: int, status: str = "ok", ref: float = 1.0, cand: float = 1.0, flags=(),
            speedup: float | None = None, compiled: float | None = None) -> dict:
    """A record of sample S of a KernelBench run folder, its reference and candidate means in ms (its paired
    speedup, if given, may differ from the ratio of the means, as ours does)."""
    r = record(f"{KB1}/{stem}", f"gpt_run_sample_{sample}", status, speedup=speedup or ref / cand)
    r["flags"] = list(flags)
    r["timing"] = {"candidate": timed(cand), "reference": timed(ref),
                   "baselines": {} if compiled is None else {"compile:default": {**timed(compiled), "speedup": 1.0}}}
    return r


KB_CHECKOUT_LEVEL1 = ["1_Square_matmul.py", "2_Flagged.py", "3_Even.py", "4_Broken_first.py", "5_No_sample_0.py",
                      "6_Never_run.py", "7_Slower.py", "8_Much_slower.py"]


def kb_checkout_and_run(tmp: Path) -> tuple[Path, Path]:
    """A KernelBench checkout with level 1's problems, imported into our problems tree, and a signed run of
    samples of its run folder `gpt_run`: (the checkout, the run folder)."""
    checkout = tmp / "KernelBench-checkout"
    for name in KB_CHECKOUT_LEVEL1:
        (checkout / "KernelBench" / "level1").mkdir(parents=True, exist_ok=True)
        (checkout / "KernelBench" / "level1" / name).write_text("class Model: pass\n")
    import_kernelbench(checkout, tmp / "problems", tmp / "solutions")
    records = [
        kb_pair("001_Square_matmul", 0, ref=4.9, cand=3.1, compiled=4.0),                  # 1.58x
        kb_pair("001_Square_matmul", 1, "incorrect"),
        kb_pair("002_Flagged", 0, ref=3.0, cand=1.0, flags=["no_custom_kernel"]),         # 3x, not ranked
        kb_pair("002_Flagged", 1, ref=3.0, cand=1.5),
        kb_pair("003_Even", 0, ref=1.0004, cand=1.0, speedup=1.01),   # KernelBench's figures: 1.00 / 1.00
        kb_pair("004_Broken_first", 0, "compile_error"),
        kb_pair("004_Broken_first", 2, ref=2.0, cand=1.0),
        kb_pair("005_No_sample_0", 3, ref=2.0, cand=1.0),                                 # no sample_id 0
        kb_pair("007_Slower", 0, ref=0.81, cand=1.0),                                     # 0.81x
        kb_pair("008_Much_slower", 0, ref=0.6, cand=1.0, compiled=0.5),                   # 0.6x
    ]
    for r in records:
        if r["status"] != "ok":
            r["timing"] = None
    return checkout, fabricated_run(tmp, records)


def test_benchmark_eval_analysis_on_the_export_agrees_with_report_kernelbench(tmp_path):
    checkout, run_dir = kb_checkout_and_run(tmp_path)
    kb_root = tmp_path / "kb-root"
    done = run_cli("export-kernelbench", run_dir.name, "--output-dir", str(run_dir.parent), "--kb-root",
                   str(kb_root))
    assert done.returncode == 0, done.stderr
    assert "hardware=NVIDIA_H200 baseline=baseline_time_torch" in done.stdout
    dataset = kb_dataset(checkout, 1)
    ours = kb_analyze_greedy_eval(kb_root, "gpt_run", "NVIDIA_H200", "baseline_time_torch", 1, dataset)
    report = run_cli("report", run_dir.name, "--output-dir", str(run_dir.parent), "--kernelbench", "--json")
    assert report.returncode == 0, report.stderr
    level = json.loads(report.stdout)["levels"][KB1]
    # all 8 problems aligned (006, never run, has a not-measured baseline entry and fails, as in the report);
    # 002's 3x is not ranked, 003 reads 1.00/1.00 (not > 1) though our paired speedup says 1.01, 004's sample 0
    # did not compile, 005 has no sample_id 0
    assert ours["aligned"] == level["problems"] == 8
    assert ours["fast_p"] == level["fast_p"] == {"0.0": 0.5, "0.5": 0.5, "0.8": 0.375, "1.0": 0.125, "1.5": 0.125,
                                                 "2.0": 0.0}
    # the torch.compile baseline, measured for two problems, reads the same way
    compiled = kb_analyze_greedy_eval(kb_root, "gpt_run", "NVIDIA_H200",
                                      "baseline_time_torch_compile_inductor_default", 1, dataset)
    assert compiled["aligned"] == 8 and compiled["fast_p"]["1.0"] == 0.125      # 001 4.0/3.1; 008 0.5/1.0
    # pass_at_k_results.json, as KernelBench's calculate_pass_at_k lays it out, says what the report says
    passes = json.loads((kb_root / "runs" / "gpt_run" / "pass_at_k_results.json").read_text())
    assert set(passes) == {"averages", "metadata", "problems"}
    assert passes["averages"]["avg_pass@1"] == level["pass_at_k"]["1"]["value"]
    assert passes["metadata"]["pass@1_count"] == level["pass_at_k"]["1"]["problems"] == 7
    assert passes["problems"]["2"] == {"total_samples": 2, "correct_samples": 2, "pass@1": 1.0}
    assert passes["problems"]["1"] == {"total_samples": 2, "correct_samples": 1, "pass@1": 0.5}


def test_baseline_files_are_kernelbench_layout_and_never_overwrite_its_own(tmp_path):
    checkout, run_dir = kb_checkout_and_run(tmp_path)
    kb_root = tmp_path / "kb-root"
    timing = kb_root / "results" / "timing" / "H100_Modal" / "baseline_time_torch.json"
    timing.parent.mkdir(parents=True)
    theirs = {"level2": {"1_Conv2D_ReLU_BiasAdd.py": {"mean": 0.1, "std": 0.01, "min": 0.09, "max": 0.2,
                                                      "num_trials": 100}}}
    timing.write_text(json.dumps(theirs))
    args = ["export-kernelbench", run_dir.name, "--output-dir", str(run_dir.parent), "--kb-root", str(kb_root)]
    done = run_cli(*args, "--hardware", "H100_Modal", "--run-name", "mine")
    assert done.returncode == 0, done.stderr
    data = json.loads(timing.read_text())
    assert data["level2"] == theirs["level2"]                                  # their other level is kept
    level1 = data["level1"]
    assert sorted(level1) == sorted(KB_CHECKOUT_LEVEL1)
    assert {k: level1["1_Square_matmul.py"][k] for k in ("mean", "std", "min", "max", "num_trials")} == \
        {"mean": 4.9, "std": 0.00995, "min": 4.41, "max": 5.88, "num_trials": 100}
    assert level1["1_Square_matmul.py"]["hardware"] == "NVIDIA H200"
    assert level1["6_Never_run.py"]["mean"] == -1.0 and level1["6_Never_run.py"]["num_trials"] == 0
    compiled = json.loads((timing.parent / "baseline_time_torch_compile_inductor_default.json").read_text())
    assert compiled["level1"]["1_Square_matmul.py"]["mean"] == 4.0
    assert compiled["level1"]["3_Even.py"]["mean"] == -1.0                     # not measured for 003
    assert (kb_root / "runs" / "mine" / "eval_results.json").is_file()
    again = run_cli(*args, "--hardware", "H100_Modal", "--run-name", "mine")       # ours: written again
    assert again.returncode == 0, again.stderr
    # KernelBench's own files: a level's timings and a run's eval_results.json are never overwritten
    timing.write_text(json.dumps({"level1": theirs["level2"]}))
    refused = run_cli(*args, "--hardware", "H100_Modal", "--run-name", "other")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "holds level1 timings not written by export-kernelbench" in refused.stderr
    assert not (kb_root / "runs" / "other").exists()
    own = kb_root / "runs" / "gpt_run" / "eval_results.json"
    own.parent.mkdir(parents=True)
    own.write_text(json.dumps({"1": [{"sample_id": 0, "compiled": True, "correctness": True, "metadata": {},
                                      "runtime": 1.0, "runtime_stats": {}}]}))
    refused = run_cli(*args)
    assert refused.returncode == 2 and "was not written by export-kernelbench; not overwritten" in refused.stderr
    bad = run_cli(*args, "--run-name", "../x")
    assert bad.returncode == 2 and "--run-name '../x'" in bad.stderr


def test_import_of_a_run_folder_mentions_its_eval_results_json(tmp_path):
    problems = tmp_path / "problems"
    make_tree(tmp_path, KB1, ["019_ReLU"])
    run = tmp_path / "my_run"
    run.mkdir()
    (run / "level_1_problem_19_sample_0_kernel.py").write_text("class ModelNew: pass\n")
    (run / "eval_results.json").write_text(json.dumps({"19": {"0": {"sample_id": 0}, "1": {"sample_id": 1}},
                                                       "20": {"0": {"sample_id": 0}}}))
    report = import_kernelbench(run, problems, tmp_path / "solutions")
    lines = summary_lines(report)
    assert "found KernelBench's eval_results.json: 2 problems, 3 samples; its verdicts are not imported" in lines[-1]
    (run / "eval_results.json").write_text(json.dumps({"19": [{"sample_id": 0}, {"sample_id": 1}],     # today's
                                                       "20": {"sample_id": 0, "compiled": True}}))   # the oldest
    lines = summary_lines(import_kernelbench(run, problems, tmp_path / "solutions"))
    assert "found KernelBench's eval_results.json: 2 problems, 3 samples" in lines[-1]
    (run / "eval_results.json").unlink()
    assert not any("eval_results" in line for line in summary_lines(import_kernelbench(run, problems,
                                                                                      tmp_path / "solutions")))


def test_precision_per_run_casts_problems_without_dtype_and_is_recorded(tmp_path):
    """--precision bf16 over the CPU examples: the A/A control runs in bfloat16 with bf16's tolerance, and the
    record says the dtype came from the run."""
    from conftest import REPO
    examples = REPO / "examples" / "cpu"
    config = write_config(tmp_path, examples)
    done = run_cli("--config", str(config), "--json", "--precision", "bf16", "--problem", "*001*",
                   "--candidate", "aa_same_ops")
    assert done.returncode == 0, done.stderr
    (record,) = json_records(done.stdout).values()
    assert record["status"] in ("ok", "invalid"), record["error"]        # invalid only through a noisy machine
    assert record["precision"] == {"requested": "bf16", "dtype": "bfloat16", "source": "run"}
    assert record["correctness"]["dtype"] == "bfloat16" and record["correctness"]["atol"] == 1e-2
