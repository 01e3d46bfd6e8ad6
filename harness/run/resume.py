"""--resume RUN_ID: a run goes on with the configuration and the selection it recorded in run.json ("config",
"selection"), never with today's config.yaml or flags. Flags that only say where and how the work is spread
(--output-dir, --jobs, --gpus, --timeout, --json, --config) may be given; any other flag that differs from what the
run recorded is refused, because the records would no longer measure one thing. New lines are signed with the run's
own key, read back from the key file run.json names; a run whose key file is gone cannot be resumed (exit 2).

A run records the pairs it selected (run.json's "pairs"); a resume evaluates those of them that have no record and
never a pair the run did not have (a candidate written since it started). `--add-new` adds such pairs to the run,
and says which."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

from dataclasses import dataclass

from harness.core.config import Config, config_from_dict, config_to_dict, flatten, load_config, merge_overrides
from harness.core.discover import Pair
from harness.core.errors import InputError, UsageError
from harness.results.signing import key_to_resume

FREE_FLAGS = ("resume", "add_new", "output_dir", "json", "config", "jobs", "gpus", "timeout", "strict", "help")
RUNTIME_KEYS = ("output_dir", "jobs", "gpus", "timeout")
SELECTION_KEYS = ("problems_dir", "solutions_dir", "level", "problem", "candidate", "problem_file", "solution_file")
PATH_KEYS = ("problems_dir", "solutions_dir", "problem_file", "solution_file")

Overrides = Callable[[argparse.Namespace], dict[str, Any]]


def selection_record(cfg: Config, args: argparse.Namespace) -> dict[str, Any]:
    """What a run evaluates, for run.json: directories and files as absolute paths, so a resume from another
    working directory finds the same trees."""
    def path(value: Any) -> str | None:
        return None if value is None else str(Path(value).resolve())
    return {"problems_dir": path(cfg.problems_dir), "solutions_dir": path(cfg.solutions_dir), "level": cfg.level,
            "problem": cfg.problem, "candidate": cfg.candidate,
            "problem_file": path(getattr(args, "problem_file", None)),
            "solution_file": path(getattr(args, "solution_file", None))}


def flag_keys(parser: argparse.ArgumentParser, overrides: Overrides) -> dict[str, tuple[str, list[str]]]:
    """dest -> (flag, the dotted config keys it sets), found by passing one flag at a time through `overrides`:
    a flag added to the parser and to `overrides` is covered without a table here."""
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    mapping: dict[str, tuple[str, list[str]]] = {}
    for dest, action in actions.items():
        marker = object()
        ns = argparse.Namespace(**{d: None for d in actions})
        setattr(ns, dest, marker)
        try:
            flat = flatten(overrides(ns))
        except Exception:                                   # noqa: BLE001 - an override that transforms its value
            flat = {}
        mapping[dest] = (max(action.option_strings, key=len), [k for k, v in flat.items() if v is marker])
    return mapping


def flag_names(parser: argparse.ArgumentParser, overrides: Overrides) -> dict[str, str]:
    """dotted config key -> the flag that sets it ('timing.samples' -> '--samples')."""
    return {key: flag for flag, keys in flag_keys(parser, overrides).values() for key in keys}


def resumed_config(args: argparse.Namespace, parser: argparse.ArgumentParser, overrides: Overrides,
                   output_dir: Path) -> Config:
    """The run's recorded config and selection (args.problem_file/solution_file are set from it); --output-dir,
    --jobs, --gpus and --timeout apply; another flag that differs from the recorded value is a UsageError."""
    from harness.results.store import RunStore
    store = RunStore.open(output_dir, args.resume)
    meta = store.metadata()
    recorded = meta.get("config")
    if not isinstance(recorded, dict):
        raise InputError(f"{store.run_json}: no recorded \"config\"; this run cannot be resumed")
    key_to_resume(meta, store.run_json)                     # new lines are signed with the run's own key
    base = config_from_dict(recorded, f"{store.run_json} (recorded config)")
    selection = meta.get("selection")
    if not isinstance(selection, dict):                     # a run recorded before "selection" existed
        selection = {k: getattr(base, k) for k in SELECTION_KEYS[:5]}
    flags = flag_names(parser, overrides)
    for dest, (flag, keys) in flag_keys(parser, overrides).items():
        value = getattr(args, dest, None)
        if dest in FREE_FLAGS or value is None or value is False:
            continue
        if dest in SELECTION_KEYS:
            _check_selection(flag, dest, value, selection.get(dest))
        elif keys:
            _check_config(flag, value, _single(args, dest, overrides), base, flags)
    runtime = {k: v for k, v in flatten(overrides(args)).items() if k in RUNTIME_KEYS}
    runtime["output_dir"] = str(output_dir)
    load_config(None, runtime, flags)                       # a bad --jobs/--gpus/--timeout names its flag
    chosen = {k: selection[k] for k in SELECTION_KEYS[:5] if k in selection and selection[k] is not None}
    cfg = config_from_dict(merge_overrides({**recorded, **chosen}, runtime), f"{store.run_json} (recorded config)")
    for key in ("problem_file", "solution_file"):
        setattr(args, key, None if selection.get(key) is None else Path(selection[key]))
    return cfg


def _single(args: argparse.Namespace, dest: str, overrides: Overrides) -> dict[str, Any]:
    ns = argparse.Namespace(**{k: (v if k == dest else None) for k, v in vars(args).items()})
    return overrides(ns)


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
