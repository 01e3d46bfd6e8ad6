"""`run_eval.py ci`: what a pull request changed, evaluated, judged. The GitHub Actions workflow
(.github/workflows/kernels.yml) only calls this; the logic lives here so that it is tested like the rest.

  1. changed files: `git diff --name-only BASE...HEAD` (what the branch changed since it left BASE) plus files not
     yet committed, under the problems and solutions trees;
  2. the pairs to evaluate: every changed candidate, and every candidate of a changed problem;
  3. the verdict: the PR fails when a pair is not `ok` (`invalid`, `incorrect`, a build or load error, a crash, a
     timeout, an out-of-memory; `skipped`, a CUDA candidate on a machine without a GPU, does not fail), when an
     `ok` pair is not ranked (a flag keeps it off the leaderboard: `no_custom_kernel`, `degenerate_problem`;
     harness.core.flags), or when it regresses against the last run of main (`compare`: SLOWER, its speedup CI
     entirely below main's, or BROKEN);
  4. a Markdown summary for the job summary ($GITHUB_STEP_SUMMARY) and stdout; it names, above its table, every
     problem file the branch changed (added, edited or deleted): a changed problem's candidates are judged against
     the branch's own reference, so a reviewer must read that reference.

The workflow runs the base branch's harness with --problems-dir/--solutions-dir pointing at the pull request's
checkout; the diff is computed in the tree the solutions live in, whatever harness reads it. --baseline is read
only: it is loaded before any candidate or problem code runs, and ci refuses to write anywhere inside it
(`check_outside_baseline`).
"""
from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from harness.core import flags
from harness.results import report
from harness.commands.compare import (BROKEN, SLOWER, Row, compare_runs, fmt_change, load_results, machine_notes,
    machine_of, run_meta)
from harness.core.discover import Pair
from harness.core.errors import UsageError
from harness.core.untrusted import WriteError, kind_of, show_path, show_text
from harness.results.records import Record, Status

PASSING = (Status.OK, Status.SKIPPED)
REGRESSIONS = (SLOWER, BROKEN)


def _git(*args: str, cwd: Path) -> str:
    done = _run_git(*args, cwd=cwd)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise UsageError(f"ci: git {' '.join(args)}: {show_text(last)}")
    return done.stdout


def _run_git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"ci: git {' '.join(args)}: {exc}") from None


def base_commit(base: str, cwd: Path) -> str:
    """The commit `base` names in the repository at `cwd`, as its full hash: what the diff is given, so that a
    --base that reads like an option (`--output=FILE`) never reaches git as one. A UsageError naming --base in one
    line when it names no commit."""
    if not base or base.startswith("-"):
        raise UsageError(f"--base {show_text(base)}: not a git ref (a branch, tag or commit, e.g. origin/main)")
    done = _run_git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{base}^{{commit}}", cwd=cwd)
    if done.returncode != 0:
        raise UsageError(f"--base {show_text(base)}: no such branch, tag or commit in the git repository at "
                         f"{show_path(cwd)} (fetch it first?)")
    return done.stdout.strip()


def changed_files(base: str, cwd: Path = Path(".")) -> set[Path]:
    """Absolute paths of the files the branch changed since it left `base`, and of uncommitted changes."""
    top = Path(_git("rev-parse", "--show-toplevel", cwd=cwd).strip())
    names = _git("diff", "--name-only", "--no-renames", f"{base_commit(base, cwd)}...HEAD", cwd=cwd).splitlines()
    for line in _git("status", "--porcelain", "--untracked-files=all", cwd=cwd).splitlines():
        names.append(line[3:].split(" -> ")[-1])        # "XY path" or "R  old -> new"
    return {(top / name.strip().strip('"')).resolve() for name in names if name.strip()}


def check_summary(path: Path | None, given_as: str = "--summary") -> None:
    """Before anything runs: the summary's path (`given_as`: --summary or $GITHUB_STEP_SUMMARY) must be a file ci
    can append to, or a new file in a folder that exists; a UsageError naming it otherwise (never a traceback
    after the whole evaluation)."""
    if path is None:
        return
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise UsageError(f"{given_as} {show_path(path)}: no folder {show_path(path.parent)} to write it in") \
                from None
        return
    except OSError as exc:
        raise UsageError(f"{given_as} {show_path(path)}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"{given_as} {show_path(path)}: not a regular file ({kind_of(mode)}); the summary is "
                         "appended to a file")
    if not os.access(path, os.W_OK):
        raise UsageError(f"{given_as} {show_path(path)}: not writable")


def append_summary(path: Path, text: str) -> None:
    """Append the summary; a write that fails (a full disk) is a WriteError naming the file."""
    try:
        with open(path, "a") as f:
            f.write(text)
    except OSError as exc:
        raise WriteError(path, exc) from None


def select(pairs: Iterable[Pair], changed: set[Path]) -> list[Pair]:
    """The pairs whose candidate file or problem file changed."""
    return [p for p in pairs if p.candidate.path.resolve() in changed
            or (p.problem is not None and p.problem.path.resolve() in changed)]


def changed_problems(changed: set[Path], problems_dir: Path) -> list[str]:
    """The changed files under the problems tree (added, edited or deleted), relative to it, sorted."""
    root = problems_dir.resolve()
    return sorted(str(path.relative_to(root)) for path in changed if path.is_relative_to(root))


def check_outside_baseline(baseline: str | None, writes: dict[str, Path | None]) -> None:
    """Refuse a place ci would write (output folder, cache, summary) that lies inside --baseline: main's last run is
    only ever read."""
    if baseline is None:
        return
    root = Path(baseline).resolve()
    for name, path in writes.items():
        if path is not None and path.resolve().is_relative_to(root):
            raise UsageError(f"ci: {name} {path} is inside --baseline {baseline}; ci never writes there")


def baseline_results(spec: str) -> Path:
    """The results.jsonl of `spec`: a run folder, or an output folder whose newest run is taken (the last run of
    main, kept on the runner)."""
    path = Path(spec)
    if (path / "results.jsonl").is_file():
        return path / "results.jsonl"
    runs = sorted(p for p in path.glob("*/results.jsonl")) if path.is_dir() else []
    if not runs:
        raise UsageError(f"--baseline {spec}: neither a run folder nor a folder of runs")
    return runs[-1]


@dataclass
class Verdict:
    failing: list[Record] = field(default_factory=list)             # records that are not ok
    unranked: list[Record] = field(default_factory=list)           # ok, but a flag keeps them off the leaderboard
    regressions: list[Row] = field(default_factory=list)           # SLOWER or BROKEN against the baseline
    rows: dict[tuple[str, str], Row] = field(default_factory=dict)  # (problem, solution) -> comparison

    @property
    def exit_code(self) -> int:
        return 1 if self.failing or self.unranked or self.regressions else 0


def judge(records: Iterable[Record], baseline: Iterable[Record] | None) -> Verdict:
    records = list(records)
    verdict = Verdict(failing=[r for r in records if r.status not in PASSING],
                      unranked=[r for r in records if r.ok and not r.control and not r.ranked])
    if baseline is not None:
        keys = {r.key for r in records}
        ours = [r for r in baseline if r.key in keys]
        for row in compare_runs(ours, records):
            verdict.rows[(row.problem, row.solution)] = row
            if row.verdict in REGRESSIONS:
                verdict.regressions.append(row)
    return verdict


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def problems_note(problems: Iterable[str]) -> list[str]:
    """Lines that put the changed problem files in front of a reviewer (none when no problem changed)."""
    problems = list(problems)
    if not problems:
        return []
    return [f"> **This branch changes {len(problems)} problem file{'s' if len(problems) != 1 else ''}**: "
            + ", ".join(f"`{_cell(p)}`" for p in problems) + ".",
            "> Their candidates are judged against the branch's own reference: a reviewer must read the change "
            "(a weakened reference, tolerance or input makes a wrong candidate pass).", ""]


def markdown(records: Iterable[Record], verdict: Verdict, run_id: str,
             baseline_name: str | None, machines: Iterable[str] = (), problems: Iterable[str] = ()) -> str:
    """The summary; `machines` (machine_lines) say how main's run's machine and this run's differ, since a
    speedup's CI does not cover the machine; `problems` (changed_problems) are named above everything else."""
    records = list(records)
    agg = report.aggregate(records)
    head = "PASS" if verdict.exit_code == 0 else "FAIL"
    lines = [f"## Kernel evaluation: {head}", "", *problems_note(problems),
             f"run `{run_id}`: {agg['pairs']} pairs, {agg['correct']} correct; "
             + ", ".join(f"{k} {v}" for k, v in agg["by_status"].items())
             + (f"; compared with `{baseline_name}`" if baseline_name else "; no baseline run of main given"),
             "", report.summary_lines(agg)[1], ""]
    notes = list(machines)
    lines += [*(f"> {n}" for n in notes), ""] if notes else []
    lines += ["| problem | candidate | status | speedup [95% CI] | vs main | flags / error |",
              "| --- | --- | --- | --- | --- | --- |"]
    for r in sorted(records, key=lambda r: r.key):
        row = verdict.rows.get(r.key)
        against = f"{row.verdict} {fmt_change(row.change)}".strip() if row else "-"
        note = " ".join(r.flags)
        if r.error:
            note = f"{note} {report.abbreviate(r.error, 160)}".strip()
        lines.append(f"| {_cell(r.problem)} | {_cell(r.candidate)} | {r.status.value} | "
                     f"{report.fmt_speedup(r.speedup, r.speedup_ci)} | {_cell(against)} | {_cell(note) or '-'} |")
    if verdict.failing:
        lines += ["", f"Not ok: {', '.join(r.solution for r in verdict.failing)}"]
    if verdict.unranked:
        named = ", ".join(f"{r.solution} ({', '.join(flags.unranked(r.flags))})" for r in verdict.unranked)
        lines += ["", f"Correct but not ranked (flagged off the leaderboard): {named}"]
    if verdict.regressions:
        regressed = ", ".join(f"{row.solution} ({row.verdict})" for row in verdict.regressions)
        lines += ["", f"Regressed against main: {regressed}"]
    return "\n".join(lines) + "\n"


def load_baseline(spec: str | None) -> tuple[str | None, list[Record] | None, dict[str, Any] | None]:
    """(run name, records, run.json) of main's last run; Nones without --baseline."""
    if spec is None:
        return None, None, None
    path = baseline_results(spec)
    name, records = load_results(path)
    return name, records, run_meta(path)


def machine_lines(baseline: list[Record] | None, baseline_meta: dict[str, Any] | None,
                  records: list[Record], meta: dict[str, Any]) -> list[str]:
    """compare's lines on how the baseline's machine and this run's differ (none without a baseline)."""
    if baseline is None:
        return []
    notes = machine_notes(machine_of(baseline_meta, baseline), machine_of(meta, records), ("main's run", "this run"))
    return [*notes, "a speedup's CI does not cover the machine: a FASTER or SLOWER against this baseline may be the "
                    "machines' doing, not the branch's"] if notes else []
