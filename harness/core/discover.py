"""Stage 1, discover: walk problems/ and solutions/, pair candidates with problems.

Nothing here imports or runs problem or candidate code: files are read as text and checked with `ast` only.
"""
from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.core.errors import InputError
from harness.core.untrusted import ReadError, read_source, read_text, show_name, show_path, show_value

CANDIDATE_SUFFIXES = (".py", ".md", ".txt")
REQUIRED_PROBLEM_NAMES = ("Model", "get_inputs", "get_init_inputs")
SOURCE_LIMIT = 8 << 20          # bytes: a problem or candidate file larger than this is a load_error, not read
SKIPPED_SHOWN = 50              # skipped files named one per line; past this many, one line counts the rest


@dataclass(frozen=True)
class Problem:
    id: str                 # "<level>/<name>"
    path: Path
    error: str | None       # why the file cannot be used, found statically; None when it looks well-formed


@dataclass(frozen=True)
class Candidate:
    id: str                 # "<level>/<name>/<stem>"
    path: Path
    source: str | None      # the python source to run (extracted from .md/.txt responses)
    error: str | None       # static load error (syntax, no ModelNew, no code block)


@dataclass(frozen=True)
class Pair:
    problem: Problem | None  # None when the candidate's problem file does not exist
    candidate: Candidate
    problem_id: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.problem_id, self.candidate.id)


@dataclass(frozen=True)
class Skipped:
    path: Path
    why: str

    def line(self) -> str:
        return f"{show_path(self.path)}: skipped: {self.why}"


def _parse(source: str, path: Path) -> tuple[ast.Module | None, str | None]:
    """(tree, None), or (None, a one-line reason): a syntax error, or source nested too deeply for the parser."""
    try:
        return ast.parse(source, filename=show_path(path)), None
    except SyntaxError as exc:
        return None, f"{show_path(path)}: line {exc.lineno}: syntax error: {exc.msg}"
    except (RecursionError, MemoryError, ValueError) as exc:    # ValueError: a NUL byte (older Pythons)
        what = "nested too deeply to parse" if isinstance(exc, RecursionError) else "cannot be parsed"
        return None, f"{show_path(path)}: {what}"


def check_problem_source(path: Path, text: str) -> str | None:
    """Return a one-line reason the problem file is unusable, or None."""
    tree, error = _parse(text, path)
    if tree is None:
        return error
    defined = _top_level_names(tree)
    missing = [name for name in REQUIRED_PROBLEM_NAMES if name not in defined]
    if missing:
        return f"{show_path(path)}: not a problem file: no {', '.join(missing)} defined at module level"
    return None


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


_FENCE = re.compile(r"^```[ \t]*([A-Za-z0-9_+-]*)[ \t]*$")


def extract_code_block(text: str) -> str | None:
    """The last complete fenced python block that defines ModelNew, or None.

    A block is complete when its closing fence is present: a response cut off mid-block does not count. A fence
    with a language tag (```python) always opens a new block, even inside an unlabelled one: model responses
    often carry stray ``` lines in their prose, and the labelled fence is what the author meant.
    """
    blocks: list[str] = []
    lang: str | None = None                 # None: outside a block
    body: list[str] = []
    for line in text.splitlines():
        match = _FENCE.match(line.strip())
        if match is None:
            if lang is not None:
                body.append(line)
            continue
        tag = match.group(1).lower()
        if tag:                             # a labelled fence opens, abandoning any unlabelled block
            lang, body = tag, []
        elif lang is None:                  # a bare fence outside a block opens an unlabelled one
            lang, body = "", []
        else:                               # a bare fence inside a block closes it
            if lang in ("", "python", "py", "python3"):
                blocks.append("\n".join(body) + "\n")
            lang, body = None, []
    defining = [b for b in blocks if re.search(r"^\s*class\s+ModelNew\b", b, re.M)]
    return defining[-1] if defining else None


def load_candidate(path: Path, cid: str) -> Candidate:
    try:
        text = read_text(path, SOURCE_LIMIT) if path.suffix in (".md", ".txt") else read_source(path, SOURCE_LIMIT)
    except ReadError as exc:
        return Candidate(cid, path, None, f"{show_path(path)}: cannot read: {exc.why}")
    if path.suffix in (".md", ".txt"):
        source = extract_code_block(text)
        if source is None:
            return Candidate(cid, path, None,
                             f"{show_path(path)}: response has no complete python code block defining ModelNew")
    else:
        source = text
    tree, error = _parse(source, path)
    if tree is None:
        return Candidate(cid, path, source, error)
    if "ModelNew" not in _top_level_names(tree) and not _assigns_anywhere(tree, "ModelNew"):
        return Candidate(cid, path, source, f"{show_path(path)}: defines no ModelNew class")
    return Candidate(cid, path, source, None)


def _assigns_anywhere(tree: ast.AST, name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, ast.Constant) and node.value == name:      # setattr/globals()["ModelNew"] = ...
            return True
    return False


def load_problem(path: Path, pid: str) -> Problem:
    try:
        text = read_source(path, SOURCE_LIMIT)
    except ReadError as exc:
        return Problem(pid, path, f"{show_path(path)}: cannot read: {exc.why}")
    return Problem(pid, path, check_problem_source(path, text))


def _level_matches(level: str, wanted: str | None) -> bool:
    if wanted is None:
        return True
    return level == wanted or level == f"level{wanted}"


def _glob_matches(value: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern) or fnmatch.fnmatchcase(value.rsplit("/", 1)[-1], pattern)


def discover(problems_dir: Path, solutions_dir: Path, level: str | None = None,
             problem_glob: str = "*", candidate_glob: str = "*",
             warn: Callable[[str], None] | None = None) -> tuple[list[Problem], list[Pair]]:
    """All selected problems, and every (problem, candidate) pair under the two trees, sorted. Every other entry of
    the selection that is not a hidden or private name (`.x`, `_x`) is named to `warn` in one line saying why it
    was skipped. Ids are file names shown as text (harness.core.untrusted.show_name); two files whose ids would be the
    same (`x.py` and `x.md`) both get a pair, the second with its suffix in its id (`x.md`)."""
    if not problems_dir.is_dir():
        raise InputError(f"{show_path(problems_dir)}: problems directory does not exist{looked_at(problems_dir)}")
    skipped: list[Skipped] = []
    problems = _find_problems(problems_dir, level, problem_glob, skipped)
    pairs: list[Pair] = []
    if solutions_dir.is_dir():
        for path, pid, cid in _find_candidates(solutions_dir, level, problem_glob, candidate_glob, skipped):
            pairs.append(Pair(problems.get(pid), load_candidate(path, cid), pid))
    elif solutions_dir.exists():
        raise InputError(f"{show_path(solutions_dir)}: solutions path is not a directory")
    _say_skipped(skipped, warn)
    return list(problems.values()), pairs


def looked_at(path: Path) -> str:
    """For a relative path that is not there: where it was looked for (the command may run from another folder)."""
    return "" if path.is_absolute() else f" (looked at {show_path(Path.cwd() / path)})"


def _visible(path: Path) -> bool:
    return not path.name.startswith(("_", "."))


def _entries(folder: Path) -> list[Path]:
    """The entries of `folder`, sorted; none when it cannot be listed (a loop, no permission)."""
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _find_problems(problems_dir: Path, level: str | None, problem_glob: str,
                   skipped: list[Skipped]) -> dict[str, Problem]:
    problems: dict[str, Problem] = {}
    for level_dir in _entries(problems_dir):
        if not _visible(level_dir) or not _level_matches(show_name(level_dir.name), level):
            continue
        if not _is_dir(level_dir):
            skipped.append(Skipped(level_dir, "not in a level folder (<level>/<NNN>_<name>.py)"))
            continue
        for path in _entries(level_dir):
            pid = f"{show_name(level_dir.name)}/{show_name(path.stem)}"
            if not _visible(path) or not _glob_matches(pid, problem_glob):
                continue
            if path.suffix != ".py":
                skipped.append(Skipped(path, "not a problem file (<NNN>_<name>.py)"))
            elif pid in problems:
                skipped.append(Skipped(path, f"its id {pid} is already {show_path(problems[pid].path)}'s"))
            else:
                problems[pid] = load_problem(path, pid)
    return problems


def _find_candidates(solutions_dir: Path, level: str | None, problem_glob: str, candidate_glob: str,
                     skipped: list[Skipped]) -> list[tuple[Path, str, str]]:
    """(path, problem id, candidate id) of every candidate file of the selection; the rest into `skipped`."""
    found: dict[str, Path] = {}
    out: list[tuple[Path, str, str]] = []
    for level_dir in _entries(solutions_dir):
        if not _visible(level_dir) or not _level_matches(show_name(level_dir.name), level):
            continue
        if not _is_dir(level_dir):
            skipped.append(Skipped(level_dir, "not in a level folder (<level>/<problem>/<candidate>.py)"))
            continue
        for problem_dir in _entries(level_dir):
            pid = f"{show_name(level_dir.name)}/{show_name(problem_dir.name)}"
            if not _visible(problem_dir) or not _glob_matches(pid, problem_glob):
                continue
            if not _is_dir(problem_dir):
                skipped.append(Skipped(problem_dir, "not in a problem folder (<level>/<problem>/<candidate>.py)"))
                continue
            for path in sorted(_entries(problem_dir), key=_suffix_rank):
                cid = _candidate_id(path, pid, found, skipped)
                if cid is not None and _glob_matches(cid, candidate_glob):
                    found[cid] = path
                    out.append((path, pid, cid))
    return sorted(out, key=lambda item: item[2])


def _suffix_rank(path: Path) -> tuple[str, int, str]:
    """.py before .md before .txt for the same stem: the .py file keeps the plain id."""
    rank = CANDIDATE_SUFFIXES.index(path.suffix) if path.suffix in CANDIDATE_SUFFIXES else len(CANDIDATE_SUFFIXES)
    return path.stem, rank, path.name


def _candidate_id(path: Path, pid: str, found: dict[str, Path], skipped: list[Skipped]) -> str | None:
    """The candidate id of one entry of a problem folder, or None (skipped: said why in `skipped`, unless it is a
    hidden or private name)."""
    if not _visible(path):
        return None
    if path.suffix not in CANDIDATE_SUFFIXES:
        why = "a folder" if _is_dir(path) else "not a candidate file"
        skipped.append(Skipped(path, f"{why} ({', '.join(CANDIDATE_SUFFIXES)} files are candidates)"))
        return None
    if _is_dir(path):
        skipped.append(Skipped(path, "a folder, not a candidate file"))
        return None
    cid = f"{pid}/{show_name(path.stem)}"
    if cid in found:
        cid = f"{pid}/{show_name(path.name)}"
    if cid in found:
        skipped.append(Skipped(path, f"its id {cid} is already {show_path(found[cid])}'s"))
        return None
    return cid


def _say_skipped(skipped: list[Skipped], warn: Callable[[str], None] | None) -> None:
    if warn is None:
        return
    for item in skipped[:SKIPPED_SHOWN]:
        warn(item.line())
    if len(skipped) > SKIPPED_SHOWN:
        warn(f"... and {len(skipped) - SKIPPED_SHOWN} more files skipped")


def check_trees(problems_dir: Path, solutions_dir: Path | None) -> tuple[list[Path], list[Path]]:
    """The problem and candidate files of the two trees (problems only when `solutions_dir` is None); InputError
    naming a directory that is missing or empty."""
    if not problems_dir.is_dir():
        raise InputError(f"{show_path(problems_dir)}: problems directory does not exist{looked_at(problems_dir)}")
    problem_files = [p for p in sorted(problems_dir.glob("*/*.py")) if not p.name.startswith("_")]
    if not problem_files:
        raise InputError(f"{show_path(problems_dir)}: no problem files here (expected <level>/<NNN>_<name>.py)")
    if solutions_dir is None:
        return problem_files, []
    if not solutions_dir.is_dir():
        what = "is not a directory" if solutions_dir.exists() else "directory does not exist"
        raise InputError(f"{show_path(solutions_dir)}: solutions {what}{looked_at(solutions_dir)}")
    candidates = [p for p in sorted(solutions_dir.glob("*/*/*")) if p.suffix in CANDIDATE_SUFFIXES
                  and _visible(p) and not _is_dir(p)]
    if not candidates:
        raise InputError(f"{show_path(solutions_dir)}: no candidate files here "
                         f"(expected <level>/<problem>/<candidate>.py)")
    return problem_files, candidates


def _id(*parts: str) -> str:
    return "/".join(show_name(part) for part in parts)


def check_problem_selection(problems_dir: Path, level: str | None, problem_glob: str) -> None:
    """Called when a selection of problems (lint, calibrate) gave none: raise InputError naming the flag that
    matched nothing and what there is instead."""
    problem_files, _ = check_trees(problems_dir, None)
    _check_level(level, {show_name(p.parent.name) for p in problem_files})
    pids = [_id(p.parent.name, p.stem) for p in problem_files if _level_matches(show_name(p.parent.name), level)]
    where = f" of --level {level}" if level is not None else ""
    raise InputError(f"--problem {show_value(problem_glob)} matches no problem{where} in "
                     f"{show_path(problems_dir)} ({len(pids)} problems; e.g. {pids[0] if pids else 'none'})")


def _check_level(level: str | None, levels: set[str]) -> None:
    if level is not None and not any(_level_matches(name, level) for name in levels):
        raise InputError(f"--level: no level {show_value(level)}; levels here: {', '.join(sorted(levels))}")


def check_selection(problems_dir: Path, solutions_dir: Path, level: str | None, problem_glob: str,
                    candidate_glob: str) -> None:
    """Called when a selection gave no pair: raise InputError naming the flag that matched nothing and what there
    is instead."""
    problem_files, candidates = check_trees(problems_dir, solutions_dir)
    _check_level(level, {show_name(p.parent.name) for p in problem_files}
                 | {show_name(p.parent.parent.name) for p in candidates})
    pids = [_id(p.parent.name, p.stem) for p in problem_files if _level_matches(show_name(p.parent.name), level)]
    cids = [_id(p.parent.parent.name, p.parent.name, p.stem) for p in candidates
            if _level_matches(show_name(p.parent.parent.name), level)]
    where = f" of --level {level}" if level is not None else ""
    chosen = [c for c in cids if _glob_matches(c.rsplit("/", 1)[0], problem_glob)]
    if not chosen:
        if not any(_glob_matches(pid, problem_glob) for pid in pids):
            raise InputError(f"--problem {show_value(problem_glob)} matches no problem{where} in "
                             f"{show_path(problems_dir)} ({len(pids)} problems; e.g. {pids[0] if pids else 'none'})")
        raise InputError(f"no candidate in {show_path(solutions_dir)} for the problems{where} matching "
                         f"{show_value(problem_glob)} (candidates go in "
                         f"{show_path(solutions_dir)}/<level>/<problem>/<candidate>.py)")
    raise InputError(f"--candidate {show_value(candidate_glob)} matches no candidate of the selected problems in "
                     f"{solutions_dir} ({len(chosen)} candidates; e.g. {chosen[0]})")


_TRITON = r"^\s*(?:import|from)\s+triton\b|@triton\.jit"
_CUDA_CODE = re.compile(r"cuda_sources|\.cuh?['\"]|with_cuda\s*=\s*True|" + _TRITON, re.M)
_TRITON_CODE = re.compile(_TRITON, re.M)


def needs_cuda(candidate: Candidate) -> bool:
    """A static look at the source: CUDA sources for load_inline, .cu files, with_cuda=True or Triton. Such a
    candidate is skipped on the CPU."""
    return bool(candidate.source and _CUDA_CODE.search(candidate.source))


def uses_triton(candidate: Candidate) -> bool:
    """A static look at the source: `import triton`, `from triton ...` or `@triton.jit`. Triton kernels need a GPU
    (and Triton, which comes with torch's CUDA wheels): such a candidate is skipped on the CPU without being
    imported, where a load_inline with CUDA sources is skipped by the build worker when the call is made."""
    return bool(candidate.source and _TRITON_CODE.search(candidate.source))


def single_pair(problem_file: Path, solution_file: Path) -> Pair:
    """--problem-file/--solution-file: one pair; a missing or malformed problem is a usage error."""
    for path in (problem_file, solution_file):
        if not path.exists():
            raise InputError(f"{show_path(path)}: no such file")
    pid = _id(problem_file.parent.name, problem_file.stem)
    problem = load_problem(problem_file, pid)
    if problem.error:
        raise InputError(problem.error)
    cid = f"{pid}/{show_name(solution_file.stem)}"
    return Pair(problem, load_candidate(solution_file, cid), pid)
