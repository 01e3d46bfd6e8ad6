"""The flag table (harness/flags.py): every flag the harness sets is a row of it, the table is consistent, the
README's flag table says the same, and `ranked` decides what may top a problem and count in the geomean and fast_p
everywhere those are computed (report, leaderboard.md, the HTML pages, ci, the KernelBench export)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import REPO
from harness.commands import ci
from harness.run import defenses, schedule, verdicts
from harness.core import flags, ranking
from harness.commands import kbexport
from harness.results import records, report
from harness.results.records import RecordDraft
from harness.core.flags import FLAGS, Flag
from harness.results.html import write_run_page, write_site
from test_html import Dom, body_rows, record, rows_by_head, run_meta

HARNESS = REPO / "harness"
# The modules that decide things on flags: none of them may spell a flag's name as a string.
DECIDING = ("results/records", "run/schedule", "run/defenses", "run/verdicts", "results/report", "results/html",
            "results/standings", "commands/ci", "commands/compare", "commands/calibrate", "commands/kbexport")
PROBLEM, OTHER = "level1/019_gelu", "level2/001_matmul"
RUN = "20250101-090000-aaaa"


# ---------------------------------------------------------------- the table


def _flag_calls() -> list[tuple[str, ast.expr]]:
    """(module, the flag argument) of every call in harness/ that raises a flag: flag(record, X, ...) and
    add_flag(record, X), which write it into a record, and a verdict's .flag(X, ...) (harness.run.defenses)."""
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name not in ("flag", "add_flag"):
                continue
            on_record = isinstance(func, ast.Name) or (isinstance(func.value, ast.Name) and func.value.id == "verdicts")
            if len(node.args) >= 2 or not on_record:
                found.append((path.stem, node.args[1] if on_record else node.args[0]))
    return found


def _set_by_harness() -> set[str]:
    """The names of every flag harness/ passes to flag() / add_flag(), as a table row or as a string, and those a
    worker's message carries."""
    names = {m.name for m in defenses.MESSAGE_FLAGS}
    for module, arg in _flag_calls():
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            names.add(arg.value)
        elif isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "flags":
            row = getattr(flags, arg.attr)
            assert isinstance(row, Flag), f"{module}: flags.{arg.attr} is not a row of the table"
            names.add(row.name)
        else:       # a variable: only the generic helpers pass one on
            assert module in ("defenses", "records", "verdicts"), f"{module}: flag({ast.unparse(arg)})"
    return names


def test_every_flag_the_harness_sets_is_a_row_of_the_table_and_every_row_is_set():
    set_by_harness = _set_by_harness()
    assert set_by_harness <= set(flags.NAMES), set_by_harness - set(flags.NAMES)
    assert set(flags.NAMES) <= set_by_harness, set(flags.NAMES) - set_by_harness      # no dead rows


def test_deciding_modules_spell_no_flag_name_as_a_string():
    for module in DECIDING:
        tree = ast.parse((HARNESS / f"{module}.py").read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                      and isinstance(n.body[0], ast.Expr)}
        spelled = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in docstrings
                   and n.value in flags.NAMES]
        assert not spelled, f"harness/{module}.py spells {spelled}"


def test_the_worker_sends_the_message_flags_under_their_names():
    source = (HARNESS / "worker" / "candidate.py").read_text()
    for row in defenses.MESSAGE_FLAGS:
        assert f'"{row.name}":' in source, row.name


def test_table_properties():
    names = [f.name for f in FLAGS]
    assert len(names) == len(set(names)) and all(re.fullmatch(r"[a-z][a-z_]*", n) for n in names)
    for f in FLAGS:
        assert f.meaning and "\n" not in f.meaning and not f.meaning.endswith("."), f.name
        assert not f.retry or f.invalidates, f.name                    # only an invalidating flag is retried
        assert not (f.invalidates and f.ranked), f.name                # an invalid pair is never ranked
        assert flags.get(f.name) is f and str(f) == f.name
    warnings = {f.name: f.ranked for f in FLAGS if not f.invalidates}
    assert warnings == {"noisy": True, "little_custom_work": True, "no_custom_kernel": False,
                        "degenerate_problem": False, "harness_oom": False, "harness_write": False}
    assert set(flags.RETRIED) == {"interference", "timing_inconsistent"}
    with pytest.raises(ValueError):
        Flag("x", "y", invalidates=False, retry=True)
    with pytest.raises(ValueError):
        Flag("x", "y", invalidates=True, ranked=True)


def test_the_old_names_are_derived_from_the_table():
    assert records.INVALIDATING_FLAGS == tuple(f.name for f in FLAGS if f.invalidates)
    assert schedule.RETRIED_FLAGS == tuple(f.name for f in FLAGS if f.retry)
    assert defenses.FLAG_DETAILS == {f.name: f.meaning for f in FLAGS}


def test_helpers():
    assert flags.invalidating(["noisy", "interference", "mutates_inputs"]) == ["interference", "mutates_inputs"]
    assert flags.retryable(["noisy", "timing_inconsistent", "interference"]) == "timing_inconsistent"
    assert flags.retryable(["interference", "mutates_inputs"]) is None
    assert flags.retryable(["noisy"]) is None
    assert flags.unranked(["noisy", "no_custom_kernel", "little_custom_work"]) == ["no_custom_kernel"]
    assert flags.ranks(["noisy", "little_custom_work"]) and flags.ranks([])
    assert not flags.ranks(["a_flag_from_a_newer_harness"])              # unknown: fails closed
    ok = {"status": "ok", "correct": True, "solution": "level1/001_x/fast"}
    assert ranking.record_ranks({**ok, "flags": ["noisy"]})
    assert not ranking.record_ranks({**ok, "flags": ["degenerate_problem"]})
    assert not ranking.record_ranks({**ok, "status": "invalid", "correct": False, "flags": ["interference"]})
    assert not ranking.record_ranks({**ok, "solution": "level1/001_x/aa_same_ops", "flags": []})     # a control
    assert not ranking.record_ranks({**ok, "flags": []}, calibrate=True)                            # calibrate
    invalid = RecordDraft.from_json({"status": "invalid", "flags": ["interference", "noisy"]})
    assert schedule._load_sensitive(invalid) == "interference"


def test_flag_puts_the_name_and_its_detail_on_the_record():
    record = RecordDraft.from_json({"flags": []})
    verdicts.flag(record, flags.MUTATES_INPUTS)
    verdicts.flag(record, flags.NOISY, "CI 3%")
    verdicts.flag(record, flags.NOISY, "CI 4%")
    assert record.flags == ["mutates_inputs", "noisy"]
    assert record.flag_details == {"mutates_inputs": flags.MUTATES_INPUTS.meaning, "noisy": "CI 4%"}


def _readme_flag_table() -> dict[str, list[str]]:
    rows, inside = {}, False
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("| flag | meaning | invalidates | retried | ranked |"):
            inside = True
        elif inside and line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells[1:]
        elif inside and not line.startswith("|"):
            break
    return rows


def test_the_readme_table_says_what_the_table_says():
    table = _readme_flag_table()
    assert list(table) == list(flags.NAMES)
    yes = {True: "yes", False: "no"}
    for f in FLAGS:
        meaning, invalidates, retried, ranked = table[f.name]
        assert meaning.startswith(f.meaning), f.name
        assert [invalidates, retried, ranked] == [yes[f.invalidates], yes[f.retry], yes[f.ranked]], f.name


# ---------------------------------------------------------------- ranked, wherever a best or a geomean is computed


def _cheat_and_honest(cheat_flag: str = "no_custom_kernel") -> list[records.Record]:
    """One problem with a flagged cheat at 2.8x above a noisy honest kernel at 1.5x; another whose only correct
    candidate is flagged off the ranking."""
    return records.as_records([record(PROBLEM, "cheat", speedup=2.8, ci=[2.7, 2.9], flags=[cheat_flag]),
            record(PROBLEM, "honest", speedup=1.5, ci=[1.3, 1.7], flags=["noisy"]),
            record(OTHER, "lonely_cheat", speedup=4.0, ci=[3.9, 4.1], flags=[cheat_flag]),
            record(OTHER, "broken", "incorrect", error="max abs err 1e-1")])


@pytest.mark.parametrize("cheat_flag", ["no_custom_kernel", "degenerate_problem"])
def test_report_a_flagged_cheat_never_tops_a_problem_nor_counts(cheat_flag):
    recs = _cheat_and_honest(cheat_flag)
    agg = report.aggregate(recs)
    assert agg["correct"] == 3 and agg["ranked"] == 1
    assert agg["geomean_speedup"] == pytest.approx(1.5)                 # the noisy one counts, the cheats do not
    assert agg["fast_p"] == {"0.0": 0.25, "1.0": 0.25, "1.5": 0.0, "2.0": 0.0}
    board = report.leaderboard(recs, "r")
    assert f"| {PROBLEM} | honest | 1.50x [1.30, 1.70] |" in board and f"| {PROBLEM} | cheat" not in board
    assert f"| {OTHER} | (no ranked candidate; correct but flagged: lonely_cheat: {cheat_flag}) | - |" in board
    assert "geomean speedup over 1 ranked (2 correct but flagged off the ranking): 1.50x" in board


def test_html_a_flagged_cheat_never_tops_a_problem_nor_counts(tmp_path):
    dom = Dom(write_run_page(tmp_path / RUN, _cheat_and_honest(), run_meta(RUN)).read_text())
    board = {row[0]: row for row in body_rows(dom, "leaderboard")}
    assert board[PROBLEM][1] == "honest" and "1.50x [1.30, 1.70]" in board[PROBLEM]
    other = board[OTHER]
    assert other[1].startswith("none ranked") and "lonely_cheat" in other[1]
    assert "4.00x [3.90, 4.10]" not in other and "no_custom_kernel" in other[-2]
    assert other[-1] == "not ranked: flagged no_custom_kernel"
    pairs = {row[1]: row for row in body_rows(dom, "pairs")}
    assert "no_custom_kernel" in pairs["cheat"][4] and "2.80x" in pairs["cheat"][3]    # shown, with its flag
    site = Dom(write_site(tmp_path, [(RUN, run_meta(RUN), _cheat_and_honest())]).read_text())
    assert body_rows(site, "runs")[0][-2] == "1.50x"                     # the run's geomean: ranked pairs only
    best = {row["problem"]: row[RUN] for row in rows_by_head(site, "history-best")}
    assert best == {PROBLEM: "1.50x [1.30, 1.70] honest", OTHER: "-"}


def test_html_summary_cards_count_ranked_pairs(tmp_path):
    text = write_run_page(tmp_path / RUN, _cheat_and_honest(), run_meta(RUN)).read_text()
    assert '<div class="v">1.50x</div><div class="k">geomean speedup (ranked)</div>' in text
    assert '<div class="v">1</div><div class="k">ranked</div>' in text


def test_ci_fails_a_correct_pair_that_is_not_ranked_and_passes_a_noisy_one():
    cheat, honest = _cheat_and_honest()[:2]
    assert ci.judge([honest], None).exit_code == 0
    verdict = ci.judge([honest, cheat], None)
    assert verdict.exit_code == 1 and [r.candidate for r in verdict.unranked] == ["cheat"] and not verdict.failing
    summary = ci.markdown([honest, cheat], verdict, "r", None)
    assert "## Kernel evaluation: FAIL" in summary
    assert f"Correct but not ranked (flagged off the leaderboard): {PROBLEM}/cheat (no_custom_kernel)" in summary


def test_kernelbench_fast_p_counts_ranked_pairs_only():
    level = "kernelbench-level1"
    def timed(mean: float) -> dict:
        return {"n": 10, "mean_ms": mean, "stdev_ms": 0.0, "min_ms": mean, "max_ms": mean}

    def timing(speedup: float) -> dict:             # KernelBench's speedup: reference mean / candidate mean
        return {"candidate": timed(1.0), "reference": timed(speedup)}

    recs = [record(f"{level}/001_A", "run_sample_0", speedup=3.0, flags=["no_custom_kernel"], timing=timing(3.0)),
            record(f"{level}/002_B", "run_sample_0", speedup=2.0, flags=["little_custom_work"], timing=timing(2.0))]
    metrics = kbexport.kernelbench_metrics(records.as_records(recs), {})["levels"][level]
    assert metrics["fast_p"]["1.0"] == 0.5
    assert metrics["pass_at_k"]["1"]["value"] == 1.0                    # both are correct: pass@k is correctness
