"""Stage 6, store: <output-dir>/<run-id>/run.json (metadata, written atomically) and results.jsonl (one line per
pair, appended and fsync'ed as each pair ends, so a killed run loses nothing it finished)."""
from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any, Iterator

from . import SCHEMA_VERSION
from .errors import InputError, UsageError
from .channel import clean_json
from .records import check_record


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


class RunStore:
    def __init__(self, output_dir: Path, run_id: str):
        self.dir = output_dir / run_id
        self.run_id = run_id
        self.results_path = self.dir / "results.jsonl"
        self.lock = threading.Lock()

    @classmethod
    def create(cls, output_dir: Path, metadata: dict[str, Any]) -> "RunStore":
        store = cls(output_dir, new_run_id())
        store.dir.mkdir(parents=True, exist_ok=False)
        (store.dir / "logs").mkdir()
        write_json_atomic(store.dir / "run.json", {"schema_version": SCHEMA_VERSION, "run_id": store.run_id,
                                                   **metadata})
        store.results_path.touch()
        return store

    @classmethod
    def open(cls, output_dir: Path, run_id: str) -> "RunStore":
        store = cls(output_dir, run_id)
        if not (store.dir / "run.json").is_file():
            raise UsageError(f"{store.dir}: no such run (no run.json)")
        (store.dir / "logs").mkdir(exist_ok=True)
        store.results_path.touch()
        return store

    def metadata(self) -> dict[str, Any]:
        try:
            return json.loads((self.dir / "run.json").read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.dir / 'run.json'}: unreadable: {exc}") from None

    def update_metadata(self, **fields: Any) -> None:
        with self.lock:
            data = self.metadata()
            data.update(fields)
            write_json_atomic(self.dir / "run.json", data)

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(clean_json(record), default=str, allow_nan=False) + "\n"
        with self.lock:
            with open(self.results_path, "a") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())

    def records(self) -> list[dict[str, Any]]:
        return list(read_records(self.results_path))

    def done_keys(self) -> set[tuple[str, str]]:
        return {(r["problem"], r["solution"]) for r in self.records()}


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a results file; a torn last line (a run killed mid-write) is skipped, other damage is named."""
    if not path.is_file():
        raise UsageError(f"{path}: no such results file")
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if number == len(lines):
                continue
            raise InputError(f"{path}:{number}: not a JSON line") from None
        problems = check_record(record)
        if problems:
            raise InputError(f"{path}:{number}: bad record: {problems[0]}")
        yield record
