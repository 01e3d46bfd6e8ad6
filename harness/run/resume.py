"""--resume RUN_ID: a run goes on with the configuration and the selection it recorded in run.json ("config",
"selection"), never with today's config.yaml or flags. Flags that only say where and how the work is spread
(--output-dir, --jobs, --gpus, --timeout, --json, --config) may be given; any other flag that differs from what the
run recorded is refused, because the records would no longer measure one thing. New lines are signed with the run's
own key, read back from the key file run.json names; a run whose key file is gone cannot be resumed (exit 2).

A run records the pairs it selected (run.json's "pairs"); a resume evaluates those of them that have no record and
never a pair the run did not have (a candidate written since it started). `--add-new` adds such pairs to the run,
and says which."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from harness.core.config import Config, config_from_dict, config_to_dict, flatten, load_config, merge_overrides
from harness.core.discover import Pair
from harness.core.errors import InputError, UsageError
from harness.core.request import RunRequest
from harness.results.signing import key_to_resume

FREE_FLAGS = ("resume", "add_new", "output_dir", "json", "config", "jobs", "gpus", "timeout", "strict", "help")
RUNTIME_KEYS = ("output_dir", "jobs", "gpus", "timeout")
SELECTION_KEYS = ("problems_dir", "solutions_dir", "level", "problem", "candidate", "problem_file", "solution_file")
PATH_KEYS = ("problems_dir", "solutions_dir", "problem_file", "solution_file")


@dataclass(frozen=True)
class GivenFlag:
    """A flag given with --resume, as harness.cli lists them: `flag` as typed ('--samples'), `dest` its name here
    (FREE_FLAGS, SELECTION_KEYS), `value` as parsed, `sets` the config overrides it makes on its own (None: it
    sets no config key)."""
    flag: str
    dest: str
    value: Any
    sets: dict[str, Any] | None = None


def selection_record(cfg: Config, request: RunRequest) -> dict[str, Any]:
    """What a run evaluates, for run.json: directories and files as absolute paths, so a resume from another
    working directory finds the same trees."""
    def path(value: Any) -> str | None:
        return None if value is None else str(Path(value).resolve())
    return {"problems_dir": path(cfg.problems_dir), "solutions_dir": path(cfg.solutions_dir), "level": cfg.level,
            "problem": cfg.problem, "candidate": cfg.candidate,
            "problem_file": path(request.problem_file), "solution_file": path(request.solution_file)}


def resumed_config(request: RunRequest, given: Sequence[GivenFlag], flags: dict[str, str],
                   output_dir: Path) -> tuple[Config, RunRequest]:
    """The run's recorded config, and `request` with the run's recorded pair files; --output-dir, --jobs, --gpus
    and --timeout apply; another flag that differs from the recorded value is a UsageError (`flags`: dotted config
    key -> its flag, for the messages)."""
    from harness.results.store import RunStore
    store = RunStore.open(output_dir, request.resume)
    meta = store.metadata()
    recorded = meta.get("config")
    if not isinstance(recorded, dict):
        raise InputError(f"{store.run_json}: no recorded \"config\"; this run cannot be resumed")
    key_to_resume(meta, store.run_json)                     # new lines are signed with the run's own key
    base = config_from_dict(recorded, f"{store.run_json} (recorded config)")
    selection = meta.get("selection")
    if not isinstance(selection, dict):                     # a run recorded before "selection" existed
        selection = {k: getattr(base, k) for k in SELECTION_KEYS[:5]}
    _check_given(given, selection, base, flags)
    runtime = {k: v for g in given for k, v in flatten(g.sets or {}).items() if k in RUNTIME_KEYS}
    runtime["output_dir"] = str(output_dir)
    load_config(None, runtime, flags)                       # a bad --jobs/--gpus/--timeout names its flag
    chosen = {k: selection[k] for k in SELECTION_KEYS[:5] if k in selection and selection[k] is not None}
    cfg = config_from_dict(merge_overrides({**recorded, **chosen}, runtime), f"{store.run_json} (recorded config)")
    files = {k: None if selection.get(k) is None else Path(selection[k]) for k in ("problem_file", "solution_file")}
    return cfg, replace(request, **files)


def _check_given(given: Sequence[GivenFlag], selection: dict[str, Any], base: Config, flags: dict[str, str]) -> None:
    """Each given flag that is not a where-and-how flag against what the run recorded."""
    for g in given:
        if g.dest in FREE_FLAGS:
            continue
        if g.dest in SELECTION_KEYS:
            _check_selection(g.flag, g.dest, g.value, selection.get(g.dest))
        elif g.sets is not None:
            _check_config(g.flag, g.value, g.sets, base, flags)


def _check_config(flag: str, value: Any, single: dict[str, Any], base: Config, flags: dict[str, str]) -> None:
    load_config(None, single, flags)                        # the flag's value must be valid on its own first
    recorded = config_to_dict(base)
    changed = config_to_dict(config_from_dict(merge_overrides(recorded, single), flag))
    before, after = _flat_all(recorded), _flat_all(changed)
    for key in before.keys() | after.keys():
        if key not in RUNTIME_KEYS and before.get(key) != after.get(key):
            raise UsageError(f"{flag} {_show(value)} differs from the run's recorded {key} {_show(before.get(key))}; "
                             f"--resume continues a run with its own settings")


def _check_selection(flag: str, dest: str, value: Any, recorded: Any) -> None:
    if dest in PATH_KEYS:
        same = recorded is not None and Path(value).resolve() == Path(recorded)
    elif dest == "level":
        same = recorded is not None and _level(str(value)) == _level(str(recorded))
    else:
        same = str(value) == str(recorded)
    if not same:
        raise UsageError(f"{flag} {_show(value)} differs from the run's recorded {dest} {_show(recorded)}; "
                         f"--resume continues a run with its own settings")


def _level(value: str) -> str:
    return f"level{value}" if value.isdigit() else value


def _flat_all(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flat_all(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "[]"
    return str(value)


def pair_keys(pairs: list[Pair]) -> list[list[str]]:
    """What run.json records of a run's selection: each pair's [problem, solution]."""
    return [list(p.key) for p in pairs]


@dataclass(frozen=True)
class Resumed:
    """What a resume evaluates: `todo`, the run's own pairs without a record (and with --add-new the new ones);
    `new`, pairs the selection matches today that the run did not have; `added`, whether --add-new took them."""
    todo: list[Pair]
    new: list[Pair]
    added: bool
    keys: list[list[str]]           # the run's pairs after this resume (run.json's "pairs")


def resume_selection(pairs: list[Pair], meta: dict[str, Any], done: set[tuple[str, str]],
                     add_new: bool) -> Resumed:
    """The pairs a resume runs, out of `pairs` (what the recorded selection matches today). A run.json from before
    the pair list: a finished run had the pairs it has records of, an unfinished one what the selection matches."""
    recorded = _recorded_keys(meta)
    if recorded is None:
        recorded = set(done) if meta.get("finished_at") else {p.key for p in pairs}
    new = [p for p in pairs if p.key not in recorded]
    own = [p for p in pairs if p.key in recorded and p.key not in done]
    keys = sorted(recorded | ({p.key for p in new} if add_new else set()))
    return Resumed(own + (new if add_new else []), new, add_new, [list(k) for k in keys])


def resume_note(resumed: Resumed, run_id: str) -> str | None:
    """The one line about pairs the run did not have: added (--add-new), or left out and how to add them."""
    if not resumed.new:
        return None
    count = f"{len(resumed.new)} pair{'s' if len(resumed.new) != 1 else ''}"
    names = ", ".join(p.candidate.id for p in resumed.new[:3]) + (", ..." if len(resumed.new) > 3 else "")
    if resumed.added:
        return f"--add-new: adding {count} that run {run_id} did not have: {names}"
    one = len(resumed.new) == 1
    return (f"{count} {'matches' if one else 'match'} the run's selection but {'was' if one else 'were'} not in run "
            f"{run_id} (written since it started: {names}); left out: --resume {run_id} --add-new adds "
            f"{'it' if one else 'them'} to this run, or start a new run")


def _recorded_keys(meta: dict[str, Any]) -> set[tuple[str, str]] | None:
    keys = meta.get("pairs")
    if not isinstance(keys, list) or not all(isinstance(k, list) and len(k) == 2 for k in keys):
        return None
    return {(str(k[0]), str(k[1])) for k in keys}
