"""What a run leaves for people to read: the terminal table and summary, `leaderboard.md` and the HTML pages
(`<run>/index.html`, and `<output-dir>/index.html` across runs, harness/results/html.py). Used by the run, `report`,
`lint` and `compare`; imports nothing of the CLI, which sits on top."""
from __future__ import annotations

import errno
import functools
import json
from pathlib import Path
from typing import Any

from harness.results import report
from harness.results.records import Record
from harness.core.config import load_config
from harness.core.numbers import number
from harness.core.untrusted import show_path, write_text


def wide_console(stderr: bool = False):
    """A rich console as wide as the output: a terminal's width; piped (`report RUN | less`, a CI log), COLUMNS
    when set, else the width of the terminal on stdin or stderr when there is one, else 80. Tables fit that width
    (harness.results.fit); `--json`/`--csv` are the machine-readable outputs."""
    return _console_class()(stderr=stderr)


@functools.cache
def _console_class():
    """rich's Console, except that a closed pipe (`report RUN | head`) is a BrokenPipeError for harness.cli.main to
    end quietly on, where rich's own handler would exit 1."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader of the console's output has gone")

    return PipeConsole


def config_output_dir(path: Path | None) -> str:
    """output_dir from the given config file, else ./config.yaml, else 'results'."""
    if path is None and Path("config.yaml").is_file():
        path = Path("config.yaml")
    return load_config(path, {}).output_dir if path else "results"


def render(records: list[Record], store, json_mode: bool, console) -> None:
    """leaderboard.md and index.html in the run folder, then the table and summary (or the aggregates as JSON)."""
    from harness.results.html import write_run_page
    agg = report.aggregate(records)
    write_text(store.dir / "leaderboard.md", report.leaderboard(records, store.run_id))   # a link there is replaced
    page = write_run_page(store.dir, records, store.metadata())
    if json_mode:
        print(json.dumps({"run_id": store.run_id, **agg}))
        return
    if console is None:
        return
    shown = [r for r in records if not report.never_built(r)]   # those: a line per family
    if shown or not records:
        console.print(report.table(shown, f"run {store.run_id}", width=console.width))
    sizes = report.sizes_table(records, "input sizes (problems that declare several)", console.width)
    if sizes is not None:
        console.print(sizes)
    unbuilt = report.unbuilt_lines(records)
    widened = report.widening_lines(records, run_target(store.metadata()))
    for line in [*widened, *unbuilt[:1], *report.summary_lines(agg)]:
        console.print(line, highlight=False)
    for name, path in (("results", store.results_path), ("leaderboard", store.dir / "leaderboard.md"),
                       ("page", page)):                   # a path is one word: never broken, one to a line
        console.print(f"{name}: {path}", highlight=False, soft_wrap=True)
    for line in unbuilt[1:]:                                # the hint last, where a first run on a CPU ends
        console.print(line, highlight=False, soft_wrap=True)   # a command, never broken


def run_target(meta: Any) -> float | None:
    """The run's timing.target_rel_ci, as run.json recorded it (None when it does not say)."""
    config = meta.get("config") if isinstance(meta, dict) else None
    timing = config.get("timing") if isinstance(config, dict) else None
    value = timing.get("target_rel_ci") if isinstance(timing, dict) else None
    return number(value)


def write_site(output_dir: Path, warn) -> tuple[Path, int]:
    """<output-dir>/index.html over every run there (and each run's own page again); (its path, runs read). A run
    folder that cannot be read is named in a warning and left out."""
    from harness.core.errors import UsageError
    from harness.results.html import write_run_page, write_site as site
    from harness.results.store import RunStore, check_run_id
    runs = []
    for run_dir in sorted(p for p in output_dir.iterdir() if p.is_dir() and (p / "run.json").is_file()) \
            if output_dir.is_dir() else []:
        if run_dir.is_symlink():                # another run's folder, or one outside: its page is not ours to write
            warn(f"{show_path(run_dir)}: a link to another folder, not a run folder; left out")
            continue
        try:
            check_run_id(run_dir.name)
            store = RunStore.open(output_dir, run_dir.name)
            records, meta = store.records(), store.metadata()
        except UsageError as exc:
            warn(f"{run_dir}: {exc}; left out")
            continue
        write_run_page(run_dir, records, meta)
        runs.append((run_dir.name, meta, records))
    if not runs:
        raise UsageError(f"{output_dir}: no run folders (with a run.json) to build a page from")
    return site(output_dir, runs), len(runs)
