"""`run_eval.py import-kernelbench PATH`: bring KernelBench problems or generated kernels into our trees.

PATH is one of two layouts, told apart by the files it holds:

* a KernelBench checkout (`PATH/KernelBench/level1/19_ReLU.py`, or PATH is the `KernelBench` folder itself):
  levels 1-3 are copied byte-for-byte to `problems/kernelbench-level<L>/<NNN>_<name>.py`; level 4 needs network
  access (HuggingFace models) and is skipped;
* a KernelBench run folder (`PATH/level_<L>_problem_<P>_sample_<S>_kernel.py`): each kernel becomes the candidate
  `solutions/kernelbench-level<L>/<problem stem>/<run folder name>_sample_<S>.py` of the imported problem number P;
  KernelBench's own `eval_results.json` there is counted in the summary, its verdicts are not imported (the
  kernels are re-evaluated; `run_eval.py export-kernelbench` writes ours in its format, see
  harness/commands/kbexport.py).

Nothing is ever overwritten: an existing identical file is left as it is (re-importing is a no-op), an existing
different one is reported as skipped. Nothing here imports or runs the copied code.
"""
from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import OneLineParser, UsageError
from harness.core.untrusted import ReadError, WriteError, inside, load_json, read_bytes, show_path

LEVELS = (1, 2, 3)
LEVEL4_REASON = "level 4 needs network access (HuggingFace models); not imported"
PROBLEM_NAME = re.compile(r"^(\d+)_(.+)\.py$")
KERNEL_NAME = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
LEVEL_DIR = re.compile(r"^level(\d+)$")


@dataclass
class ImportReport:
    layout: str                                                       # "checkout" or "run"
    copied: list[tuple[Path, Path]] = field(default_factory=list)     # (source, destination); planned on dry-run
    unchanged: list[Path] = field(default_factory=list)               # destinations already identical
    skipped: list[tuple[Path, str]] = field(default_factory=list)     # (source, reason)
    unmatched: list[tuple[Path, str]] = field(default_factory=list)   # kernels without an imported problem
    eval_results: str | None = None                                   # a line on the run folder's eval_results.json


def level_dir_name(level: int) -> str:
    return f"kernelbench-level{level}"


def _not_imported(level: int) -> str | None:
    """Why a KernelBench level is not imported, or None for levels 1-3."""
    if level == 4:
        return LEVEL4_REASON
    return None if level in LEVELS else f"unknown KernelBench level {level}; only levels 1-3 are imported"


def _checkout_root(path: Path) -> Path | None:
    """The folder holding level<N>/ of a KernelBench checkout, or None when PATH is not one."""
    for root in (path / "KernelBench", path):
        if any(LEVEL_DIR.match(p.parent.name) for p in root.glob("level*/*.py")):
            return root
    return None


def _run_kernels(path: Path) -> list[Path]:
    return sorted(p for p in path.glob("level_*_kernel.py") if KERNEL_NAME.match(p.name) and p.is_file())


def _same_bytes(data: bytes, path: Path) -> bool:
    try:
        return read_bytes(path, COPY_LIMIT) == data
    except ReadError:
        return False


COPY_LIMIT = 64 << 20


def _place(src: Path, dest: Path, report: ImportReport, dry_run: bool, tree: Path) -> None:
    """Copy src, a file of the imported `tree`, to dest unless dest exists; identical -> unchanged, different ->
    skipped. A source that is a link out of `tree`, or not a regular file within COPY_LIMIT, is skipped: nothing
    from outside the imported folder is copied."""
    if not inside(src, tree):
        report.skipped.append((src, f"a link to {show_path(os.path.realpath(src))}, outside {show_path(tree)}; "
                                    "not copied"))
        return
    try:
        data = read_bytes(src, COPY_LIMIT)
    except ReadError as exc:
        report.skipped.append((src, f"cannot read: {exc.why}"))
        return
    try:
        if os.path.lexists(dest):                   # a link there (even a dangling one) is never written through
            if dest.is_symlink():
                report.skipped.append((src, f"{dest} is a link; left as it is, not written through"))
            elif _same_bytes(data, dest):
                report.unchanged.append(dest)
            else:
                report.skipped.append((src, f"{dest} exists and differs; left as it is"))
            return
        if any(d == dest for _, d in report.copied):
            report.skipped.append((src, f"{dest} is already the destination of another file"))
            return
        if not dry_run:
            dest.parent.mkdir(parents=True, exist_ok=True)
            _write_new(dest, data)
    except OSError as exc:                          # a full disk, a read-only tree: a failed write, named
        raise WriteError(exc.filename or dest, exc) from None
    report.copied.append((src, dest))


def _write_new(dest: Path, data: bytes) -> None:
    """Create dest with `data`; an entry that appeared there since it was looked at (a link too) is an OSError,
    never written through."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _import_checkout(tree: Path, problems_dir: Path, report: ImportReport, dry_run: bool) -> None:
    root = _checkout_root(tree)
    for level_path in sorted(p for p in root.glob("level*") if p.is_dir() and LEVEL_DIR.match(p.name)):
        level = int(LEVEL_DIR.match(level_path.name).group(1))
        if _not_imported(level):
            report.skipped.append((level_path, _not_imported(level)))
            continue
        for src in sorted(p for p in level_path.glob("*.py") if p.is_file()):
            match = PROBLEM_NAME.match(src.name)
            if match is None:
                report.skipped.append((src, "name does not match <number>_<name>.py"))
                continue
            name = f"{int(match.group(1)):03d}_{match.group(2)}.py"
            _place(src, problems_dir / level_dir_name(level) / name, report, dry_run, tree)


def find_problem(problems_dir: Path, level: int, number: int) -> tuple[Path | None, str]:
    """The imported problem file for (level, number), or None and why not."""
    folder = problems_dir / level_dir_name(level)
    found = sorted(folder.glob(f"{number:03d}_*.py")) if folder.is_dir() else []
    if len(found) == 1:
        return found[0], ""
    if found:
        return None, f"several problems numbered {number:03d} in {folder}: {', '.join(p.name for p in found)}"
    return None, f"no problem {number:03d} in {folder}; import the KernelBench problems first"


def _import_run(run_dir: Path, problems_dir: Path, solutions_dir: Path, report: ImportReport,
                dry_run: bool) -> None:
    run_name = run_dir.resolve().name
    for src in _run_kernels(run_dir):
        level, number, sample = (int(g) for g in KERNEL_NAME.match(src.name).groups())
        if _not_imported(level):
            report.skipped.append((src, _not_imported(level)))
            continue
        problem, why = find_problem(problems_dir, level, number)
        if problem is None:
            report.unmatched.append((src, why))
            continue
        dest = solutions_dir / level_dir_name(level) / problem.stem / f"{run_name}_sample_{sample}.py"
        _place(src, dest, report, dry_run, run_dir)


def detect_layout(path: Path) -> str:
    """'checkout' or 'run'; a UsageError naming PATH when it is neither, both, or not a directory."""
    if not path.exists():
        raise UsageError(f"{path}: no such directory")
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory (expected a KernelBench checkout or run folder)")
    is_checkout, is_run = _checkout_root(path) is not None, bool(_run_kernels(path))
    if is_checkout and is_run:
        raise UsageError(f"{path}: holds both KernelBench problems (level<N>/) and run kernels "
                         "(level_<L>_problem_<P>_sample_<S>_kernel.py); point at one of them")
    if not (is_checkout or is_run):
        raise UsageError(f"{path}: neither a KernelBench checkout (KernelBench/level1/19_ReLU.py) nor a run folder "
                         "(level_1_problem_19_sample_0_kernel.py)")
    return "checkout" if is_checkout else "run"


def import_kernelbench(path: Path, problems_dir: Path, solutions_dir: Path, dry_run: bool = False) -> ImportReport:
    """Import a KernelBench checkout's problems or a run folder's kernels; on dry_run, write nothing."""
    path = Path(path)
    report = ImportReport(detect_layout(path))
    if report.layout == "checkout":
        _import_checkout(path, Path(problems_dir), report, dry_run)
    else:
        _import_run(path, Path(problems_dir), Path(solutions_dir), report, dry_run)
        report.eval_results = _eval_results_note(path / "eval_results.json")
    return report


def _sample_count(entry: dict | list) -> int:
    """Samples of one problem in any of KernelBench's layouts: a list of samples (today), an object keyed by sample
    id, or one sample (an object with a sample_id)."""
    if isinstance(entry, list):
        return len(entry)
    return 1 if "sample_id" in entry else len(entry)


def _eval_results_note(path: Path) -> str | None:
    """One line on KernelBench's own eval_results.json in a run folder (its verdicts are not imported), or None."""
    if not path.is_file():
        return None
    try:
        data = load_json(read_bytes(path, 1 << 30))
        if not isinstance(data, dict) or not all(isinstance(v, (dict, list)) for v in data.values()):
            raise ValueError("not an object of problems holding their samples")
    except (ReadError, ValueError) as exc:
        return f"found KernelBench's eval_results.json but could not read it ({exc}); it is not imported"
    samples = sum(_sample_count(v) for v in data.values())
    return (f"found KernelBench's eval_results.json: {len(data)} problem{'s' if len(data) != 1 else ''}, "
            f"{samples} sample{'s' if samples != 1 else ''}; its verdicts are not imported, the kernels are "
            "re-evaluated here")


def summary_lines(report: ImportReport, dry_run: bool = False) -> list[str]:
    lines = [f"skipped {src}: {why}" for src, why in report.skipped]
    lines += [f"unmatched {src}: {why}" for src, why in report.unmatched]
    verb = "would copy" if dry_run else "copied"
    lines.append(f"{verb} {len(report.copied)}, already there {len(report.unchanged)}, skipped "
                 f"{len(report.skipped)}, unmatched {len(report.unmatched)}"
                 f" ({'problems' if report.layout == 'checkout' else 'candidates'}{', dry run' if dry_run else ''})")
    if report.eval_results:
        lines.append(report.eval_results)
    return lines


def _default_dirs() -> tuple[str, str]:
    """problems_dir/solutions_dir from ./config.yaml when it exists (as `run_eval.py` reads them), else defaults."""
    from harness.core.config import load_config
    cfg = load_config(Path("config.yaml") if Path("config.yaml").is_file() else None, {})
    return cfg.problems_dir, cfg.solutions_dir


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`import-kernelbench`'s description and arguments, on run_eval.py's subparser (or a parser of its own)."""
    p.description = ("Copy KernelBench problems (from a checkout) into problems/kernelbench-level<L>/, or a "
                     "KernelBench run folder's generated kernels into solutions/ as candidates of those problems. "
                     "Existing files are never overwritten.")
    p.add_argument("path", type=Path, help="a KernelBench checkout (or its KernelBench/ folder), or a run folder")
    p.add_argument("--problems-dir", type=Path, help="default: problems_dir in ./config.yaml, or problems")
    p.add_argument("--solutions-dir", type=Path, help="default: solutions_dir in ./config.yaml, or solutions")
    p.add_argument("--dry-run", action="store_true", help="report what would be copied, write nothing")
    return p


def cmd_import(argv: list[str]) -> int:
    """`import-kernelbench` from its own arguments (what follows the command's name)."""
    return main(add_arguments(OneLineParser(prog="run_eval.py import-kernelbench")).parse_args(argv))


def main(args: argparse.Namespace) -> int:
    """`run_eval.py import-kernelbench PATH`, parsed."""
    if args.problems_dir is None or args.solutions_dir is None:
        problems, solutions = _default_dirs()
        args.problems_dir = args.problems_dir or Path(problems)
        args.solutions_dir = args.solutions_dir or Path(solutions)
    report = import_kernelbench(args.path, args.problems_dir, args.solutions_dir, dry_run=args.dry_run)
    for line in summary_lines(report, args.dry_run):
        print(line)
    return 0
