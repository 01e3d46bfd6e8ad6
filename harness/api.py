"""A Python API for agent loops: evaluate one candidate's source, or many, against one problem (a file or its
source), and get each record as its pair finishes.

It is a run like `run_eval.py --problem-file P --solution-file S`, made by the same pipeline (build, execute,
store): every candidate is built in a confined build worker and measured in a fresh confined candidate worker,
against one reference worker for the problem (harness.run.schedule.run_problem serves every pair of a problem
from the same reference process, as in a CLI run), and the run is written to `<output_dir>/<run-id>/` with its
signed results.jsonl. Nothing in the run layer imports this module.

Records come back typed, as harness.results.records.Record (what `report` and `compare` read): `status`,
`speedup`, `speedup_ci`, `error`, ... as attributes, and `raw`, the very JSON object results.jsonl holds for the
pair (without its signature), for anything else or for logging as JSON."""
from __future__ import annotations

import dataclasses
import queue
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, Union

from harness.core.config import load_config
from harness.core.discover import Pair, single_pair
from harness.core.errors import UsageError
from harness.core.request import RunRequest
from harness.results import signing
from harness.results.records import Record

Problem = Union[str, Path]                      # a Path: the problem's file; a str: its source
Candidates = Union[str, Sequence[str], Mapping[str, str]]   # one source, several, or name -> source
API_LEVEL = "api"                               # the level of a problem given as source (its id: api/<name>)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def evaluate(problem: Problem, candidates: Candidates, *, config: str | Path | None = None,
             overrides: Mapping[str, Any] | None = None, name: str = "problem",
             on_record: Callable[[Record], None] | None = None) -> list[Record]:
    """Every candidate against `problem`, each record handed to `on_record` as its pair ends; returns them all.
    `config`: a config file (default: ./config.yaml where it exists, as the CLI); `overrides`: config keys over it,
    as the flags would set them (e.g. {"device": "cpu", "timing": {"compile_modes": []}}); `name`: the id's stem of a
    problem given as source. Raises UsageError (or InputError) for what the CLI would refuse."""
    cfg = load_config(_config_path(config), dict(overrides or {}))
    got: list[Record] = []

    def take(stored: Record) -> None:                # the Record the run's store wrote
        record = _unsigned(stored)
        got.append(record)
        if on_record is not None:
            on_record(record)

    from harness.run.pipeline import run_pipeline
    with tempfile.TemporaryDirectory(prefix="kb-api-") as tmp:
        pairs = make_pairs(Path(tmp), problem, candidates, name)
        request = RunRequest(("api", pairs[0].problem_id), problem_file=pairs[0].problem.path)
        run_pipeline(cfg, request, pairs=pairs, conclude=lambda store: 0, on_record=take)
    return got


def _unsigned(record: Record) -> Record:
    """The record as its line reads without the run's signature, as the API hands records out."""
    return dataclasses.replace(record, raw={k: v for k, v in record.raw.items() if k != signing.FIELD})


def iter_evaluate(problem: Problem, candidates: Candidates, **options: Any) -> Iterator[Record]:
    """evaluate() in a thread of its own, its records yielded as they come (the same keyword options, without
    on_record). The run goes on to its end even when the caller stops iterating; an error is raised here."""
    found: queue.SimpleQueue = queue.SimpleQueue()
    end = object()

    def work() -> None:
        try:
            evaluate(problem, candidates, on_record=found.put, **options)
        except BaseException as exc:               # noqa: BLE001 - raised in the caller's thread below
            found.put(_Failed(exc))
        else:
            found.put(end)

    thread = threading.Thread(target=work, name="kb-api", daemon=True)
    thread.start()
    while (item := found.get()) is not end:
        if isinstance(item, _Failed):
            raise item.exc
        yield item
    thread.join()


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _config_path(config: str | Path | None) -> Path | None:
    if config is not None:
        path = Path(config)
        if not path.is_file():
            raise UsageError(f"{path}: no such config file")
        return path
    return Path("config.yaml") if Path("config.yaml").is_file() else None


def make_pairs(tmp: Path, problem: Problem, candidates: Candidates, name: str = "problem") -> list[Pair]:
    """The pairs of one problem and its candidates, as discover makes them for files: a problem given as source and
    every candidate are written under `tmp` (candidate ids: <problem id>/<candidate name>)."""
    problem_file = problem if isinstance(problem, Path) else _write(tmp / API_LEVEL / f"{_checked(name)}.py", problem)
    sources = _named(candidates)
    if not sources:
        raise UsageError("no candidate to evaluate")
    folder = tmp / "candidates"
    return [single_pair(problem_file, _write(folder / f"{cand}.py", source)) for cand, source in sources.items()]


def _named(candidates: Candidates) -> dict[str, str]:
    if isinstance(candidates, str):
        return {"candidate": candidates}
    if isinstance(candidates, Mapping):
        return {_checked(k): v for k, v in candidates.items()}
    return {f"candidate_{i:03d}": source for i, source in enumerate(candidates)}


def _checked(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name.endswith(".py"):
        raise UsageError(f"{name!r}: a name is letters, digits, '_', '.' and '-' (a file stem, no .py)")
    return name


def _write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path
