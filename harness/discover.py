"""Stage 1, discover: walk problems/ and solutions/, pair candidates with problems.

Nothing here imports or runs problem or candidate code: files are read as text and checked with `ast` only.
"""
from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

CANDIDATE_SUFFIXES = (".py", ".md", ".txt")
REQUIRED_PROBLEM_NAMES = ("Model", "get_inputs", "get_init_inputs")


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


def check_problem_source(path: Path, text: str) -> str | None:
    """Return a one-line reason the problem file is unusable, or None."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        return f"{path}: line {exc.lineno}: syntax error: {exc.msg}"
    defined = _top_level_names(tree)
    missing = [name for name in REQUIRED_PROBLEM_NAMES if name not in defined]
    if missing:
        return f"{path}: not a problem file: no {', '.join(missing)} defined at module level"
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
        text = path.read_text(errors="replace")
    except OSError as exc:
        return Candidate(cid, path, None, f"{path}: cannot read: {exc.strerror}")
    if path.suffix in (".md", ".txt"):
        source = extract_code_block(text)
        if source is None:
            return Candidate(cid, path, None,
                             f"{path}: response has no complete python code block defining ModelNew")
    else:
        source = text
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        return Candidate(cid, path, source, f"{path}: line {exc.lineno}: syntax error: {exc.msg}")
    if "ModelNew" not in _top_level_names(tree) and not _assigns_anywhere(tree, "ModelNew"):
        return Candidate(cid, path, source, f"{path}: defines no ModelNew class")
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
        text = path.read_text(errors="replace")
    except OSError as exc:
        return Problem(pid, path, f"{path}: cannot read: {exc.strerror}")
    return Problem(pid, path, check_problem_source(path, text))


def _level_matches(level: str, wanted: str | None) -> bool:
    if wanted is None:
        return True
    return level == wanted or level == f"level{wanted}"


def _glob_matches(value: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern) or fnmatch.fnmatchcase(value.rsplit("/", 1)[-1], pattern)


def discover(problems_dir: Path, solutions_dir: Path, level: str | None = None,
             problem_glob: str = "*", candidate_glob: str = "*") -> tuple[list[Problem], list[Pair]]:
    """All selected problems, and every (problem, candidate) pair under the two trees, sorted."""
    if not problems_dir.is_dir():
        raise InputError(f"{problems_dir}: problems directory does not exist{looked_at(problems_dir)}")
    problems: dict[str, Problem] = {}
    for path in sorted(problems_dir.glob("*/*.py")):
        level_name = path.parent.name
        pid = f"{level_name}/{path.stem}"
        if path.name.startswith("_") or not _level_matches(level_name, level) or not _glob_matches(pid, problem_glob):
            continue
        problems[pid] = load_problem(path, pid)
    pairs: list[Pair] = []
    if solutions_dir.is_dir():
        for path in sorted(solutions_dir.glob("*/*/*")):
            if path.suffix not in CANDIDATE_SUFFIXES or path.name.startswith(("_", ".")) or not path.is_file():
                continue
            pid = f"{path.parent.parent.name}/{path.parent.name}"
            if not _level_matches(path.parent.parent.name, level) or not _glob_matches(pid, problem_glob):
                continue
            cid = f"{pid}/{path.stem}"
            if not _glob_matches(cid, candidate_glob):
                continue
            pairs.append(Pair(problems.get(pid), load_candidate(path, cid), pid))
    elif solutions_dir.exists():
        raise InputError(f"{solutions_dir}: solutions path is not a directory")
    return list(problems.values()), pairs


def looked_at(path: Path) -> str:
    """For a relative path that is not there: where it was looked for (the command may run from another folder)."""
    return "" if path.is_absolute() else f" (looked at {Path.cwd() / path})"


def check_trees(problems_dir: Path, solutions_dir: Path | None) -> tuple[list[Path], list[Path]]:
    """The problem and candidate files of the two trees (problems only when `solutions_dir` is None); InputError
    naming a directory that is missing or empty."""
    if not problems_dir.is_dir():
        raise InputError(f"{problems_dir}: problems directory does not exist{looked_at(problems_dir)}")
    problem_files = [p for p in sorted(problems_dir.glob("*/*.py")) if not p.name.startswith("_")]
    if not problem_files:
        raise InputError(f"{problems_dir}: no problem files here (expected <level>/<NNN>_<name>.py)")
    if solutions_dir is None:
        return problem_files, []
    if not solutions_dir.is_dir():
        what = "is not a directory" if solutions_dir.exists() else "directory does not exist"
        raise InputError(f"{solutions_dir}: solutions {what}{looked_at(solutions_dir)}")
    candidates = [p for p in sorted(solutions_dir.glob("*/*/*")) if p.suffix in CANDIDATE_SUFFIXES
                  and not p.name.startswith(("_", ".")) and p.is_file()]
    if not candidates:
        raise InputError(f"{solutions_dir}: no candidate files here (expected <level>/<problem>/<candidate>.py)")
    return problem_files, candidates


def check_problem_selection(problems_dir: Path, level: str | None, problem_glob: str) -> None:
    """Called when a selection of problems (lint, calibrate) gave none: raise InputError naming the flag that
    matched nothing and what there is instead."""
    problem_files, _ = check_trees(problems_dir, None)
    _check_level(level, {p.parent.name for p in problem_files})
    pids = [f"{p.parent.name}/{p.stem}" for p in problem_files if _level_matches(p.parent.name, level)]
    where = f" of --level {level}" if level is not None else ""
    raise InputError(f"--problem '{problem_glob}' matches no problem{where} in {problems_dir} "
                     f"({len(pids)} problems; e.g. {pids[0] if pids else 'none'})")


def _check_level(level: str | None, levels: set[str]) -> None:
    if level is not None and not any(_level_matches(name, level) for name in levels):
        raise InputError(f"--level: no level '{level}'; levels here: {', '.join(sorted(levels))}")


def check_selection(problems_dir: Path, solutions_dir: Path, level: str | None, problem_glob: str,
                    candidate_glob: str) -> None:
    """Called when a selection gave no pair: raise InputError naming the flag that matched nothing and what there
    is instead."""
    problem_files, candidates = check_trees(problems_dir, solutions_dir)
    _check_level(level, {p.parent.name for p in problem_files} | {p.parent.parent.name for p in candidates})
    pids = [f"{p.parent.name}/{p.stem}" for p in problem_files if _level_matches(p.parent.name, level)]
    cids = [f"{p.parent.parent.name}/{p.parent.name}/{p.stem}" for p in candidates
            if _level_matches(p.parent.parent.name, level)]
    where = f" of --level {level}" if level is not None else ""
    chosen = [c for c in cids if _glob_matches(c.rsplit("/", 1)[0], problem_glob)]
    if not chosen:
        if not any(_glob_matches(pid, problem_glob) for pid in pids):
            raise InputError(f"--problem '{problem_glob}' matches no problem{where} in {problems_dir} "
                             f"({len(pids)} problems; e.g. {pids[0] if pids else 'none'})")
        raise InputError(f"no candidate in {solutions_dir} for the problems{where} matching '{problem_glob}' "
                         f"(candidates go in {solutions_dir}/<level>/<problem>/<candidate>.py)")
    raise InputError(f"--candidate '{candidate_glob}' matches no candidate of the selected problems in "
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
        if not path.is_file():
            raise InputError(f"{path}: no such file")
    pid = f"{problem_file.parent.name}/{problem_file.stem}"
    problem = load_problem(problem_file, pid)
    if problem.error:
        raise InputError(problem.error)
    cid = f"{pid}/{solution_file.stem}"
    return Pair(problem, load_candidate(solution_file, cid), pid)
