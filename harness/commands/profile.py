"""`run_eval.py profile SELECTION`: one call of each selected candidate, and of its reference, under Nsight Compute
(harness.run.profile), in the same workers and confinement as a run. Writes <output-dir>/profile-<id>/ with each
pair's two reports (<problem>__<candidate>.{reference,candidate}.ncu-rep), its record (<...>.json: the run's record
with a `profile` part and no timing) and the workers' logs (logs/, ncu's own output included); prints a table per
pair: each kernel's duration, DRAM and SM throughput (% of peak), achieved occupancy and registers per thread."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.core.config import PRECISIONS, Config, count_flag, load_config
from harness.core.discover import Pair, check_selection, check_trees, discover
from harness.core.errors import UsageError
from harness.core.untrusted import write_text
from harness.results.parts import ProfileSide
from harness.results.records import Record, RecordDraft
from harness.run import ncu

NAME_WIDTH = 70             # a kernel's name in the table is cut to this many characters (the record keeps it whole)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "One call of each selected candidate and of its reference under Nsight Compute (ncu), each in the worker a "
        "run uses (the candidate's confined as in a run; what ncu needs opened is in the record's sandbox.relaxed), "
        "after --warmup calls. Writes <output-dir>/profile-<id>/: per pair the two .ncu-rep reports and a JSON "
        "record with each kernel's duration, DRAM and SM throughput (% of peak), achieved occupancy and registers "
        "per thread, which the table shows. Needs a CUDA GPU and ncu on PATH; clocks are held at base and caches "
        "flushed before each kernel (ncu's defaults), so durations read longer than a run's.")
    p.add_argument("selection", nargs="?", metavar="SELECTION",
                   help="what to profile, as ids or globs: <level>/<problem> (its every candidate), <problem>, or "
                        "<level>/<problem>/<candidate>; e.g. level1/019_gelu or 'level1/*/cuda_*' (default: all)")
    p.add_argument("--candidate", metavar="GLOB", help="only candidates matching GLOB (on the file stem)")
    p.add_argument("--level", help="only this level, e.g. level1 or 1")
    p.add_argument("--config", type=Path, help="config file (default: ./config.yaml when it exists)")
    p.add_argument("--problems-dir", help="root of <level>/<name>.py problem files (default: problems)")
    p.add_argument("--solutions-dir", help="root of <level>/<name>/<candidate>.py files (default: solutions)")
    p.add_argument("--output-dir", help="where the profile-<id>/ folder goes (default: results)")
    p.add_argument("--gpu", type=int, metavar="N", help="the GPU to profile on (default: the first of gpus)")
    p.add_argument("--warmup", type=int, default=3, metavar="N",
                   help="calls of each side before its profiled one (builds, JIT, autotuning; default: 3)")
    p.add_argument("--precision", choices=PRECISIONS, help="as for a run (a problem's own DTYPE wins)")
    p.add_argument("--seed", type=int, help="base seed for the weights and inputs (default: drawn per command)")
    p.add_argument("--timeout", type=float, help="seconds one candidate worker may take, ncu included (default: "
                                                 "timeout in config, 600)")
    p.add_argument("--json", action="store_true", help="print each record as a JSON line on stdout (the tables "
                                                       "go to stderr)")


def split_selection(selection: str | None) -> tuple[str, str | None]:
    """SELECTION as (problem glob, candidate glob or None): `a/b/c` is problem `a/b`, candidate `c`; fewer parts
    are a problem glob alone (on <level>/<name> or <name>, as --problem)."""
    if not selection:
        return "*", None
    parts = selection.strip("/").split("/")
    if len(parts) >= 3:
        return "/".join(parts[:-1]), parts[-1]
    return "/".join(parts), None


def load(args: argparse.Namespace) -> Config:
    problem, candidate = split_selection(args.selection)
    if candidate is not None and args.candidate is not None:
        raise UsageError("a candidate in SELECTION and --candidate: give one (see run_eval.py profile --help)")
    count_flag("--warmup", args.warmup, 0)
    path = args.config
    if path is None and Path("config.yaml").is_file():
        path = Path("config.yaml")
    elif path is not None and not path.is_file():
        raise UsageError(f"{path}: no such config file")
    overrides = {"problems_dir": args.problems_dir, "solutions_dir": args.solutions_dir,
                 "output_dir": args.output_dir, "level": args.level, "problem": problem,
                 "candidate": candidate or args.candidate, "precision": args.precision, "seed": args.seed,
                 "timeout": args.timeout, "gpus": str(args.gpu) if args.gpu is not None else None}
    return load_config(path, {k: v for k, v in overrides.items() if v is not None},
                       {"problem": "SELECTION", "gpus": "--gpu"})


def select(cfg: Config) -> list[Pair]:
    check_trees(Path(cfg.problems_dir), Path(cfg.solutions_dir))
    _, pairs = discover(Path(cfg.problems_dir), Path(cfg.solutions_dir), cfg.level, cfg.problem, cfg.candidate,
                        warn=lambda text: print(f"warning: {text}", file=sys.stderr))
    if not pairs:
        check_selection(Path(cfg.problems_dir), Path(cfg.solutions_dir), cfg.level, cfg.problem, cfg.candidate)
    return pairs


def check_machine(cfg: Config, gpu_list: list[dict[str, Any]], has_cuda: bool, path_env: str | None = None) -> ncu.Ncu:
    """ncu on PATH and a CUDA GPU, or ProfileUnavailable with the one line that says which is missing."""
    found = ncu.locate(path_env)
    if cfg.device == "cpu" or not has_cuda or not gpu_list:
        raise ncu.ProfileUnavailable(ncu.NO_CUDA)
    indices = {g["index"] for g in gpu_list}
    if cfg.gpus[0] not in indices:
        raise UsageError(f"--gpu: no GPU with index {cfg.gpus[0]} (found {sorted(indices)})")
    return found


def main(args: argparse.Namespace) -> int:
    cfg = load(args)
    from harness.run import meta
    import torch                                    # here: --help and usage errors stay quick
    gpu_list = meta.gpus()
    found = check_machine(cfg, gpu_list, torch.version.cuda is not None)   # as a run decides: no CUDA in the parent
    pairs = select(cfg)
    return _profile(cfg, pairs, found, gpu_list, args)


def _profile(cfg: Config, pairs: list[Pair], found: ncu.Ncu, gpu_list: list[dict[str, Any]],
             args: argparse.Namespace) -> int:
    from harness.core.seeds import RunSeed
    from harness.results.parts import Gpu
    from harness.results.render import wide_console
    from harness.results.store import new_run_id
    from harness.run.build import build_all
    from harness.run.evaluate import PairContext
    from harness.run import scratch as scratch_space
    from harness.run.pipeline import make_dir, toolchain_for
    from harness.run.profile import ProfileRun, profile_config, profile_pair, record_path
    from harness.run import coreshares
    from harness.run.schedule import Slot
    from harness.run.workerproc import set_worker_memory_gb, worker_env
    cfg = profile_config(cfg.for_device("cuda"))
    set_worker_memory_gb(cfg.worker_memory_gb)
    run_id = f"profile-{new_run_id()}"
    folder = Path(cfg.output_dir) / run_id
    make_dir(folder / "logs", "output_dir")
    make_dir(Path(cfg.cache_dir) / "builds", "cache_dir")
    console = wide_console(stderr=args.json)
    console.print(f"{run_id}: {len(pairs)} pairs under {found.version or found.path}", highlight=False)
    toolchain = toolchain_for("cuda", cfg, gpu_list)
    seed = RunSeed.resolve(cfg.seed)
    builds = build_all(pairs, Path(cfg.cache_dir) / "builds", toolchain, cfg.build_jobs(), cfg.build_timeout,
                       seed.base)
    gpu = next(g for g in gpu_list if g["index"] == cfg.gpus[0])
    slot = Slot(f"cuda:{gpu['index']}", gpu["index"], gpu["name"], visible_as=gpu.get("visible_as"))
    coreshares.assign([slot], lambda text: console.print(f"warning: {text}", highlight=False))   # held to the end
    with scratch_space.owned(run_id, lambda text: console.print(f"warning: {text}", highlight=False)) as scratch:
        tmp = scratch / "ncu-tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        env = worker_env({**slot.env(cfg.cpu_threads), "KB_NCU": f"{ncu.BASE_PORT}:{ncu.PORT_COUNT}",
                          "KB_NCU_TMP": str(tmp), "TMPDIR": str(tmp)})
        run = ProfileRun(PairContext(cfg, seed, builds, toolchain, {}, folder / "logs"), found, folder, scratch,
                         env, Gpu(gpu["index"], gpu["name"]), run_id, args.warmup)
        for pair in pairs:
            record = profile_pair(pair, run)
            write_text(record_path(run, pair), json.dumps(record.to_json(), indent=1, default=str) + "\n")
            if args.json:
                print(json.dumps(record.to_json(), default=str), flush=True)
            render(record, console)
    console.print(f"profiles: {folder}", highlight=False)
    return 0


def table_rows(record: Record | RecordDraft) -> list[tuple[str, ...]]:
    """The table's rows for one pair: per side its kernels (name cut to NAME_WIDTH), then its total duration; a
    side without kernels, one row saying why."""
    rows: list[tuple[str, ...]] = []
    profile = record.profile or None
    for side in ("reference", "candidate"):
        got: ProfileSide | None = getattr(profile, side, None) if profile is not None else None
        if got is None:
            continue
        if not got.kernels:
            rows.append((side, f"(no kernels: {got.error or 'none profiled'})", "", "", "", "", ""))
            continue
        for k in got.kernels:
            rows.append((side, _cut(k.name), _fmt(k.duration_us, 2), _fmt(k.dram_pct, 1), _fmt(k.sm_pct, 1),
                         _fmt(k.occupancy_pct, 1), "" if k.registers is None else str(k.registers)))
        rows.append((side, f"(total, {len(got.kernels)} kernels)", _fmt(got.duration_us, 2), "", "", "", ""))
    return rows


COLUMNS = (("side", "left"), ("kernel", "left"), ("duration us", "right"), ("DRAM %", "right"), ("SM %", "right"),
           ("occupancy %", "right"), ("regs", "right"))


def render(record: Record | RecordDraft, console) -> None:
    """The pair's table (kernel names and errors as plain text: a `[` in a C++ name is not markup)."""
    from rich.table import Table
    from rich.text import Text
    status = getattr(record.status, "value", record.status)
    title = f"{record.solution}: {status}" + (f" ({record.error})" if record.error else "")
    table = Table(title=Text(title), title_justify="left")
    for header, justify in COLUMNS:
        table.add_column(header, justify=justify)
    for row in table_rows(record):
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)


def _cut(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 3] + "..."


def _fmt(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"
