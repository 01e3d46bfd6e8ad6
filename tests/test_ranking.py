"""Every output tells the same story about ranking (issue 47): a run of examples/cpu's tree, whose A/A controls
(`aa_same_ops`) read faster than the real candidates, goes through the terminal summary, leaderboard.md,
`report --json/--csv/--kernelbench`, the run's page and the site page, `compare` and `ci`; each names the same
ranked pairs with the same geometric mean and fast_p, and no control is among them."""
from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from harness.commands import ci
from harness.core import ranking
from harness.core.discover import discover
from harness.results.store import RunStore

EXAMPLES = REPO / "examples" / "cpu"
CANDIDATE_SPEEDUP = {"level1/001_relu_scale": 0.4, "level1/002_row_softmax": 0.5, "level1/003_linear_bias": 1.6}
CONTROL_SPEEDUP = 1.2           # above every candidate's but one: a control that ranked would move every figure


def side(median: float) -> dict:
    return {"n": 24, "median_ms": median, "mean_ms": median, "stdev_ms": 0.05, "min_ms": median * 0.9,
            "max_ms": median * 1.1}


def record(problem: str, candidate: str, speedup: float) -> dict:
    return {"schema_version": 2, "problem": problem, "solution": f"{problem}/{candidate}", "status": "ok",
            "correct": True, "flags": [], "error": None, "speedup": speedup,
            "speedup_ci": [speedup * 0.95, speedup * 1.05], "device": "cpu", "build": {
                "status": "built", "cached": False, "seconds": 1.0, "key": "k", "extensions": [],
                "compiler_output": None, "sandbox": None},
            "timing": {"candidate": side(2.0), "reference": side(2.0 * speedup)}}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, str]:
    """A run over examples/cpu's pairs (discovered, not listed here), each with a fixed reading."""
    tmp = tmp_path_factory.mktemp("ranking")
    _, pairs = discover(EXAMPLES / "problems", EXAMPLES / "solutions", None, "*", "*")
    assert {p.candidate.id.rsplit("/", 1)[-1] for p in pairs} == {"cpp_loop", "aa_same_ops"}
    store = RunStore.create(tmp / "results", {"config": {"cache_dir": str(tmp / "cache"),
                                                          "problems_dir": str(EXAMPLES / "problems")},
                                               "argv": ["run_eval.py"]})
    for p in pairs:
        control = ranking.is_control_name(p.candidate.id.rsplit("/", 1)[-1])
        store.append({**record(p.problem_id, p.candidate.id.rsplit("/", 1)[-1],
                               CONTROL_SPEEDUP if control else CANDIDATE_SPEEDUP[p.problem_id]),
                      "run_id": store.run_id})
    store.finish()
    return tmp / "results", store.run_id


RANKED = {f"{problem}/cpp_loop" for problem in CANDIDATE_SPEEDUP}
GEOMEAN = math.prod(CANDIDATE_SPEEDUP.values()) ** (1 / len(CANDIDATE_SPEEDUP))
FAST_1 = sum(s > 1 for s in CANDIDATE_SPEEDUP.values()) / len(CANDIDATE_SPEEDUP)


def summary_figures(text: str) -> tuple[int, str, str]:
    """(ranked count, geomean, fast_1) from a summary line 'geomean speedup over N ranked ...: G;  ... fast_1.0=F'."""
    text = " ".join(text.split())                           # a summary wrapped between words at 80 columns
    found = re.search(r"geomean speedup over (\d+) ranked[^:]*: ([0-9.]+x);.*fast_1\.0=(\d+%)", text)
    assert found, text
    return int(found.group(1)), found.group(2), found.group(3)


EXPECTED = (len(RANKED), f"{GEOMEAN:.2f}x", f"{FAST_1:.0%}")


def test_the_decision_itself():
    assert ranking.ranks("cpp_loop", True, ["noisy"])
    assert not ranking.ranks("aa_same_ops", True, [])                  # a control, however fast
    assert not ranking.ranks("control_plain", True, [])
    assert not ranking.ranks("cpp_loop", True, [], calibrate=True)     # any pair of a calibrate run
    assert not ranking.ranks("cpp_loop", True, ["no_custom_kernel"])   # a flag that keeps it off
    assert not ranking.ranks("cpp_loop", False, [])
    assert ranking.is_calibrate_run({"argv": ["run_eval.py", "calibrate"]})


def test_report_terminal_json_and_leaderboard(run):
    out, run_id = run
    done = run_cli("report", run_id, "--output-dir", str(out))
    assert done.returncode == 0, done.stderr
    assert summary_figures(done.stdout) == EXPECTED
    assert "3 controls never ranked" in " ".join(done.stdout.split())
    board = (out / run_id / "leaderboard.md").read_text()
    assert summary_figures(board) == EXPECTED
    best = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in board.splitlines()
            if line.startswith("| level1/")}
    assert {f"{p}/{c}" for p, c in best.items()} == RANKED
    done = run_cli("report", run_id, "--output-dir", str(out), "--json")
    agg = json.loads(done.stdout)
    assert (agg["ranked"], f"{agg['geomean_speedup']:.2f}x", f"{agg['fast_p']['1.0']:.0%}") == EXPECTED
    assert agg["controls"] == 3


def test_report_csv_marks_the_same_ranked_pairs(run):
    out, run_id = run
    done = run_cli("report", run_id, "--output-dir", str(out), "--csv")
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert {r["solution"] for r in rows if r["ranked"] == "true"} == RANKED
    assert len(rows) == 6


def test_report_kernelbench_takes_no_control_as_sample_0(run):
    out, run_id = run
    done = run_cli("report", run_id, "--output-dir", str(out), "--kernelbench", "--json")
    assert done.returncode == 0, done.stderr
    level = json.loads(done.stdout)["levels"]["level1"]
    assert set(level["sample0"].values()) == RANKED
    assert f"{level['fast_p']['1.0']:.0%}" == EXPECTED[2]     # one candidate per problem: the same count


def test_html_pages_read_the_same(run):
    out, run_id = run
    page = (out / run_id / "index.html").read_text()
    cards = dict((k, v) for v, k in re.findall(r'<div class="v">([^<]*)</div><div class="k">([^<]*)</div>', page))
    assert (int(cards["ranked"]), cards["geomean speedup (ranked)"], cards["fast_1"]) == EXPECTED
    done = run_cli("report", "--html", "--output-dir", str(out))
    assert done.returncode == 0, done.stderr
    site = (out / "index.html").read_text()
    cards = dict((k, v) for v, k in re.findall(r'<div class="v">([^<]*)</div><div class="k">([^<]*)</div>', site))
    assert (int(cards["ranked"]), cards["geomean speedup (ranked)"], cards["fast_1"]) == EXPECTED


def test_compare_and_ci_read_the_same(run):
    out, run_id = run
    done = run_cli("compare", run_id, run_id, "--output-dir", str(out), "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["solution"] for r in rows if r["a"]["ranked"]} == RANKED
    lines = [line for line in done.stderr.splitlines() if line.startswith(("A ", "B "))]
    assert len(lines) == 2 and all(summary_figures(line) == EXPECTED for line in lines)
    records = RunStore.open(out, run_id).records()
    verdict = ci.judge(records, None)
    assert verdict.exit_code == 0 and not verdict.unranked            # a control is not a flagged candidate
    assert summary_figures(ci.markdown(records, verdict, run_id, None)) == EXPECTED


def test_skipped_cuda_candidates_are_a_line_per_family_and_the_hint_ends_the_output(tmp_path):
    """A first run on a machine without a GPU over a CUDA tree: no row per never-built pair, a count per level,
    and the last line names the tree that runs on the CPU."""
    store = RunStore.create(tmp_path / "results", {"config": {"cache_dir": str(tmp_path / "cache")}})
    skipped = {"status": "skipped", "cached": False, "seconds": 0.0, "key": "k", "extensions": [],
               "compiler_output": None, "sandbox": None}
    for level, count in (("level1", 30), ("level2", 12)):
        for i in range(count):
            problem = f"{level}/{i:03d}_op"
            store.append({**record(problem, "cuda_kernel", 1.0), "status": "skipped", "correct": False,
                          "speedup": None, "speedup_ci": None, "error": "candidate holds CUDA code",
                          "build": skipped, "timing": None, "run_id": store.run_id})
    store.append({**record("level1/000_op", "cpp_loop", 1.5), "run_id": store.run_id})
    store.finish()
    done = run_cli("report", store.run_id, "--output-dir", str(tmp_path / "results"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert "cuda_kernel" not in done.stdout and "cpp_loop" in done.stdout
    assert "42 pairs: level1 30, level2 12" in " ".join(done.stdout.split()), done.stdout
    assert lines[-1].startswith("a tree that runs on the CPU: python run_eval.py --problems-dir examples/cpu")
