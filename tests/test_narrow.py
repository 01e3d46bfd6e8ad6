"""Tables at 80 and at 200 columns (issue 47): every line within the width, every header whole, columns left out by
priority rather than folded into two-character cells, ids cut in their middle so that their number and end
survive. Piped output takes COLUMNS (or 80), not a fixed 200."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console

from conftest import REPO
from harness.commands import calibrate, kbexport, lint
from harness.results import fit, report
from harness.results.store import RunStore

WIDTHS = (80, 200)
LONG = "level1/042_conv_transpose3d_batchnorm_gelu_fused_residual"


def printed(renderable, width: int) -> list[str]:
    console = Console(record=True, width=width)
    console.print(renderable)
    return console.export_text().splitlines()


def header_cells(lines: list[str], first: str) -> list[str]:
    header = next(line for line in lines if re.match(rf"\s*{re.escape(first)}\s{{2,}}", line))
    return re.split(r"\s{2,}", header.strip())


def lint_result(i: int) -> dict:
    return {"problem": f"{LONG}_{i:02d}", "verdict": "degenerate" if i % 2 else "ok", "mean_abs": 0.123,
            "std": 0.5, "zeros_pass": False, "constant_pass": bool(i % 2), "identity_pass": False,
            "input_dependent": True, "param_dependent": True, "deterministic": True, "nan_or_inf": False,
            "eager_ms": 1.234, "peak_memory_gb": 0.01, "sizes": None,
            "reasons": ["a constant output matches the reference within tolerance"] if i % 2 else []}


@pytest.mark.parametrize("width", WIDTHS)
def test_lint_table_drops_columns_by_priority_and_keeps_ids_apart(width):
    lines = printed(lint.table([lint_result(i) for i in range(6)], width), width)
    assert all(len(line) <= width for line in lines)
    header = header_cells(lines, "problem")
    assert header[:3] == ["problem", "verdict", "why"]
    assert all(len(cell) > 2 for cell in header)                       # no header becomes a sliver
    names = [c.name for c in lint.LINT_COLUMNS]
    assert set(header) <= set(names)
    for i in range(6):                                                 # the distinctive end of every id
        assert sum(line.split()[0].endswith(f"_{i:02d}") for line in lines if "\u2026" in line or LONG in line) == 1
    if width == 200:
        assert len(header) == len(names)                               # room for every column
    else:
        assert "left out at 80 columns" in "\n".join(lines)


@pytest.mark.parametrize("width", WIDTHS)
def test_kernelbench_table_headers_stay_whole(width):
    metrics = {"levels": {f"kernelbench-level{n}": {
        "problems": 100, "evaluated": 100, "samples": 500, "fast_p": {str(p): 0.25 for p in kbexport.FAST_P},
        "pass_at_k": {"1": {"value": 0.5, "problems": 100}, "5": {"value": 0.75, "problems": 100}}}
        for n in (1, 2, 3)}}
    lines = printed(kbexport.kernelbench_table(metrics, "kb", width), width)
    assert all(len(line) <= width for line in lines)
    header = header_cells(lines, "level")
    assert "fast_0" in header and "fast_1" in header
    assert all(cell in {c for c in ("level", "problems", "evaluated", "samples", "pass@1", "pass@5")}
               or re.fullmatch(r"fast_[0-9.]+", cell) for cell in header), header
    assert sum("kernelbench-level" in line or "\u2026" in line for line in lines[3:]) == 3


@pytest.mark.parametrize("width", WIDTHS)
def test_calibrate_table_and_its_summary_agree(width):
    rows = [calibrate.Row(f"{LONG}_{i}", "ok", s, [s * 0.99, s * 1.01], 10, "host", False, abs(s - 1) <= 0.05,
                          s * 0.99 <= 1 <= s * 1.01, None) for i, s in enumerate((1.0, 1.001, 1.2))]
    rows.append(calibrate.Row(f"{LONG}_3", "timeout", None, None, None, None, False, False, False, "killed"))
    console = Console(record=True, width=width)
    calibrate.render(rows, 0.05, console)
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines)
    start = next(i for i, line in enumerate(lines) if line.startswith("2 of 4 ok"))   # wrapped between words
    summary, rows_text = " ".join(line.strip() for line in lines[start:]), "\n".join(lines[:start])
    assert rows_text.count(calibrate.OUTSIDE_TARGET) == 1 and rows_text.count("not measured") == 1
    assert "; 1 outside target; 1 not measured" in summary


def test_elide_middle_keeps_the_number_and_the_end():
    assert fit.elide_middle("level1/001_relu_scale_fused", 16) == "001_\u2026scale_fused"
    assert fit.elide_middle("gpt_run_sample_12", 12) == "gpt_\u2026mple_12"
    assert all(len(fit.elide_middle(LONG, n)) <= n for n in range(2, len(LONG)))
    assert fit.elide_middle("level1/001_relu_scale", 16) == "001_relu_scale"        # the shared level goes first


def _run(tmp_path) -> tuple[str, str]:
    store = RunStore.create(tmp_path / "results", {"config": {"cache_dir": str(tmp_path / "cache")}})
    for i in range(8):
        problem = f"{LONG}_{i}"
        store.append({"schema_version": 2, "problem": problem, "solution": f"{problem}/candidate_number_{i}",
                      "status": "ok", "correct": True, "flags": ["noisy"] if i % 3 == 0 else [], "error": None,
                      "speedup": 1.0 + i / 10, "speedup_ci": [0.9 + i / 10, 1.1 + i / 10], "device": "cpu",
                      "run_id": store.run_id})
    store.finish()
    return str(tmp_path / "results"), store.run_id


def _cli(*args: str, columns: int | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, str(REPO / "run_eval.py"), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.mark.parametrize("width", [*WIDTHS, None])
def test_report_and_compare_through_a_pipe_fit_its_width(tmp_path, width):
    """`report RUN | less` and `compare A B | less`: COLUMNS where it is set, 80 where nothing says (never 200)."""
    out, run_id = _run(tmp_path)
    limit = width or 80
    for args in (("report", run_id), ("compare", run_id, run_id)):
        done = _cli(*args, "--output-dir", out, columns=width)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        paths = ("results: ", "leaderboard: ", "page: ")           # a path is one word, never broken
        assert lines and all(len(line) <= limit for line in lines if not line.startswith(paths)), done.stdout
        rows = [line.strip("\u2502\u2503 ") for line in lines]                # a wide table's borders
        rows = [row for row in rows if row.startswith(("level1", "042_"))]
        for i in range(8):                                   # each id keeps its end, on one line
            assert sum(row.split()[0].endswith(f"_{i}") for row in rows) == 1, (args, i, done.stdout)
    if width == 200:
        assert LONG in _cli("report", run_id, "--output-dir", out, columns=200).stdout


def test_report_json_is_not_a_table(tmp_path):
    out, run_id = _run(tmp_path)
    done = _cli("report", run_id, "--output-dir", out, "--json", columns=80)
    assert json.loads(done.stdout)["pairs"] == 8


@pytest.mark.parametrize("width", WIDTHS)
def test_sizes_tables_fit(width):
    from harness.commands import compare
    from harness.results.records import as_records
    sizes = [{"name": name, "main": name == "m", "shape": "x: [4096, 4096] float32, w: [4096, 4096] float32",
              "trials_passed": 3, "trials": 3, "correct": True, "speedup": 1.5, "speedup_ci": [1.4, 1.6],
              "error": None} for name in ("s", "m", "l")]
    records = as_records({"schema_version": 2, "problem": f"{LONG}_{i}", "solution": f"{LONG}_{i}/candidate_{i}",
                          "status": "ok", "correct": True, "flags": [], "error": None, "speedup": 1.5,
                          "speedup_ci": [1.4, 1.6], "device": "cpu", "sizes": sizes, "sizes_geomean": 1.5}
                         for i in range(3))
    for table in (report.sizes_table(records, "sizes", width),
                  compare.sizes_table(compare.compare_runs(records, records), "sizes", width)):
        lines = printed(table, width)
        assert all(len(line) <= width for line in lines)
        rows = [line for line in lines if line.startswith(("level1", "042_"))]
        assert len(rows) in (9, 12) and all(row.split()[0].endswith(("_0", "_1", "_2")) for row in rows)
