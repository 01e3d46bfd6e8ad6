"""What a run is asked to do beside its Config: the pair files, the run it continues, how records are shown and the
command run.json records. harness.cli builds one from the parsed flags (cli.load_run, the one place), harness.api
builds one without any; the run layer reads this and the Config, never argparse."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunRequest:
    argv: tuple[str, ...] = ()
    """The command as given after run_eval.py, its subcommand first for calibrate and ci ("api" first for
    harness.api): run.json's argv, and what the line printed on Ctrl-C builds the command that goes on from."""

    problem_file: Path | None = None
    """--problem-file: the one problem to evaluate (recorded in run.json's selection); None: the pairs the Config's
    trees, level and globs select."""

    solution_file: Path | None = None
    """--solution-file: the one candidate for problem_file; None with a problem_file only where the caller hands
    run_pipeline its pairs (harness.api)."""

    resume: str | None = None
    """--resume RUN_ID: continue that run (its recorded config is the Config, its recorded pair files are above);
    None: a new run."""

    add_new: bool = False
    """--add-new: with resume, also evaluate and add the pairs the run's selection matches now that it did not have."""

    json: bool = False
    """--json: each record as a JSON line on stdout, then the summary lines on stderr instead of the table."""

    gpus_given: bool = False
    """--gpus was given: device auto on a machine without a GPU is then an error, not a quiet run on the CPU."""
