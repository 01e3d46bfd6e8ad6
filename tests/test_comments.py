"""Comments and docstrings in harness/ say what the code does and why (issue 46 item 5): no dated lab notes (the
figures live in docs/measurements.md), and no module named by a path that no longer exists.

Only comments (tokenize) and docstrings (ast) are read, so a date in a string that is data (a format example, a
default) is allowed."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "harness"
DATE = re.compile(r"20\d\d-\d\d-\d\d")
DOTTED = re.compile(r"(?<![\w.])harness(?:\.[A-Za-z_]\w*)+")
SLASHED = re.compile(r"(?<![\w./])harness(?:/\w+)+\.py\b")


def _docstrings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                yield body[0].lineno, body[0].value.value


def _comments(source: str):
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring line of one file."""
    source = path.read_text()
    found = []
    for line, text in [*_docstrings(ast.parse(source)), *_comments(source)]:
        found += [(line + i, piece) for i, piece in enumerate(text.splitlines())]
    return found


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def dotted_exists(reference: str) -> bool:
    """Whether `harness.a.b...` names a module, or a top-level name of the longest module it starts with."""
    parts = reference.split(".")
    for n in range(len(parts), 0, -1):
        found = _module_file(parts[:n])
        if found is not None:
            return n == len(parts) or parts[n] in _top_level_names(found)
    return False


def stale(text: str) -> list[str]:
    """What one line of prose names wrongly: a date, or a harness module path that does not exist."""
    wrong = [f"date {m.group(0)}" for m in DATE.finditer(text)]
    wrong += [f"no module {m.group(0)}" for m in DOTTED.finditer(text) if not dotted_exists(m.group(0))]
    wrong += [f"no file {m.group(0)}" for m in SLASHED.finditer(text) if not (ROOT / m.group(0)).is_file()]
    return wrong


FILES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_comments_carry_no_dates_and_no_stale_module_paths(path: Path):
    problems = [f"{path.relative_to(ROOT)}:{line}: {what}: {text.strip()}"
                for line, text in prose(path) for what in stale(text)]
    assert not problems, "move dated figures to docs/measurements.md; name modules where they are now:\n" + \
        "\n".join(problems)


def test_the_checks_catch_what_they_are_for():
    assert stale("# measured on the H200 (2026-11-26)") == ["date 2026-11-26"]
    assert stale("see harness.integrity") == ["no module harness.integrity"]
    assert stale("see harness/signing.py") == ["no file harness/signing.py"]
    assert stale("see harness.worker.integrity, harness.run.modes.MODES and harness/results/signing.py.") == []
    assert stale("harness.run.modes.NO_SUCH_NAME") == ["no module harness.run.modes.NO_SUCH_NAME"]


def test_dates_in_data_strings_are_allowed(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text('"""A module."""\nEXAMPLE = "2026-11-28"   # a format example\n')
    assert [stale(text) for _, text in prose(module)] == [[], []]
