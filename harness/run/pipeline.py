"""A run, stage by stage: resolve the device, discover, build, execute, store, report."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.run import between, compilecache, gpubusy, meta
from harness.run.build import Toolchain, build_all
from harness.core.config import Config, config_to_dict
from harness.run.resume import pair_keys, resume_note, resume_selection, selection_record
from harness.core.discover import Pair, check_selection, check_trees, discover, needs_cuda, single_pair
from harness.core.errors import RunInterrupted, UsageError, command_line, interrupted_code
from harness.core.request import RunRequest
from harness.run import scratch as scratch_space
from harness.run.executors import executor_for
from harness.run.schedule import Context, Slot
from harness.core.seeds import RunSeed
from harness.results.records import Record, RecordDraft, now
from harness.results.report import CPU_HINT       # names examples/cpu, a tree that runs without a GPU
from harness.results.store import RunStore


def resolve_slots(cfg: Config, gpu_list: list[dict[str, Any]], gpus_given: bool = False) -> tuple[str, list[Slot]]:
    """The device and its slots. `gpus_given`: --gpus was on the command line, so device auto without a GPU is an
    error rather than a quiet run on the CPU."""
    cuda = meta.torch_versions()["cuda"]
    has_cuda = cuda is not None and bool(gpu_list)
    device = cfg.device if cfg.device != "auto" else ("cuda" if has_cuda else "cpu")
    if device == "cpu" and gpus_given and cfg.device == "auto":
        why = "this torch build has no CUDA support" if cuda is None else "nvidia-smi lists no GPU"
        raise UsageError(f"--gpus {','.join(map(str, cfg.gpus))}: no GPU here ({why}); --device cpu runs on the CPU")
    if device == "cpu":
        return "cpu", [Slot("cpu", None)]
    if cuda is None:
        raise UsageError("--device cuda: this torch build has no CUDA support")
    if not gpu_list and executor_for(cfg).remote_gpus:
        if not cfg.cuda_arch:                           # the parent builds for the remote workers' GPUs
            raise UsageError(f"--device cuda with --executor {cfg.executor} on a machine without a GPU: set "
                             "cuda_arch to the workers' compute capability (e.g. cuda_arch: \"9.0\") so that "
                             "builds target them")
        return "cuda", []                               # the executor's workers' GPUs, not this machine's
    if not gpu_list:
        raise UsageError("--device cuda: no GPU found (nvidia-smi lists none)")
    by_index = {g["index"]: g for g in gpu_list}
    missing = [g for g in cfg.gpus if g not in by_index]
    if missing:
        setting = os.environ.get("CUDA_VISIBLE_DEVICES")
        numbered = "" if setting is None else f"; CUDA_VISIBLE_DEVICES={setting} numbers the GPUs it names from 0"
        raise UsageError(f"--gpus: no GPU with index {missing[0]} (found {sorted(by_index)}{numbered})")
    return "cuda", [Slot(f"cuda:{g}", g, by_index[g]["name"], visible_as=by_index[g].get("visible_as"))
                    for g in cfg.gpus]


def toolchain_for(device: str, cfg: Config, gpu_list: list[dict[str, Any]]) -> Toolchain:
    versions = meta.torch_versions()                    # read without importing torch (the parent needs no more)
    arch = None
    if device == "cuda":
        arch = cfg.cuda_arch or (gpu_list[cfg.gpus[0]]["compute_capability"] if gpu_list else None)
    return Toolchain(device, versions["torch"], versions["cuda"], arch, sys.version.split()[0])


def between_terms(cfg: Config, device: str, gpu_list: list[dict[str, Any]]) -> between.Terms | None:
    """The machine's between-process terms, where each pair's CI takes one (one process pair, the default)."""
    if cfg.timing.processes != 1 or cfg.timing.between_process != "auto":
        return None
    return between.load(cfg.cache_dir, between.machine_key(device, gpu_list, meta.torch_versions()["torch"]))


def select_pairs(cfg: Config, request: RunRequest) -> list[Pair]:
    """The request's one pair (--problem-file, --solution-file), or what the config's trees, level and globs select."""
    if request.problem_file is not None:
        return [single_pair(request.problem_file, request.solution_file)]
    check_trees(Path(cfg.problems_dir), Path(cfg.solutions_dir))
    _, pairs = discover(Path(cfg.problems_dir), Path(cfg.solutions_dir), cfg.level, cfg.problem, cfg.candidate,
                        warn=stderr_warning)
    if not pairs:
        check_selection(Path(cfg.problems_dir), Path(cfg.solutions_dir), cfg.level, cfg.problem, cfg.candidate)
    return pairs


def stderr_warning(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


def cpu_notice(pairs: list[Pair], gpu_list: list[dict[str, Any]]) -> str | None:
    """On the CPU: one line saying how many candidates hold CUDA code (skipped here) and where a tree is that runs."""
    cuda = sum(1 for p in pairs if needs_cuda(p.candidate))
    if not cuda:
        return None
    where = "no GPU here" if not gpu_list else "running on the CPU"
    return (f"{where}: {cuda} of {len(pairs)} candidates hold CUDA code (cuda_sources, .cu files or Triton) and will "
            f"be skipped; {CPU_HINT}")


def make_dir(path: Path, key: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{key} {path}: cannot create it: {exc.strerror}") from None


def prepare_compile_cache(cfg: Config, toolchain: Toolchain, warn: Callable[[str], None]) -> None:
    """The reference workers' torch.compile caches, under cache_dir (harness.run.compilecache)."""
    try:
        said = compilecache.prepare(cfg.cache_dir, toolchain)
    except OSError as exc:
        raise UsageError(f"cache_dir {cfg.cache_dir}: cannot make its compile cache: {exc.strerror or exc}") from None
    if said:
        warn(said)


def run_pipeline(cfg: Config, request: RunRequest, pairs: list[Pair] | None = None,
                 conclude: Callable[[RunStore], int] | None = None,
                 on_record: Callable[[Record], None] | None = None) -> int:
    """A run over the pairs `request` selects (or `pairs`, e.g. calibrate's A/A pairs); `conclude` renders and
    chooses the exit code instead of the default table; `on_record` is handed each record as it is stored
    (harness.api)."""
    from harness.results.render import wide_console
    from harness.run.workerproc import set_worker_memory_gb
    console = wide_console(stderr=True)
    set_worker_memory_gb(cfg.worker_memory_gb)         # the memory cap of every worker this run starts
    gpu_list = meta.gpus()
    device, slots = resolve_slots(cfg, gpu_list, gpus_given=request.gpus_given)
    cfg = cfg.for_device(device)                        # the CPU path's timing defaults (cpu_timing); recorded
    pairs = select_pairs(cfg, request) if pairs is None else pairs
    make_dir(Path(cfg.cache_dir) / "builds", "cache_dir")

    def say(text: str) -> None:
        console.print(text, highlight=False, markup=False, soft_wrap=True)

    def warn(message: str) -> None:
        say(f"warning: {message}")

    if request.resume:
        store, pairs, seed = _resumed_store(cfg, request, pairs, say, warn)
    else:
        store, seed = _new_store(cfg, request, pairs, device, gpu_list, warn)
    notice = cpu_notice(pairs, gpu_list) if device == "cpu" else None
    if notice:                                          # before the scratch sweep's lines: the run's own news first
        print(notice, file=sys.stderr, flush=True)
    with _resume_hint_on_interrupt(store, cfg, request.argv), scratch_space.owned(store.run_id, warn) as scratch:
        scratch_space.probe(store.dir)                     # a full disk stops the run here, named as a failed write
        executor = executor_for(cfg)
        console.print(f"run {store.run_id}: {len(pairs)} pairs on {executor.where(device, [s.name for s in slots])}",
                      highlight=False)
        executor.check()
        if device == "cuda":
            _say_busy_gpus(store, slots, gpu_list, warn)
        started = time.monotonic()
        toolchain = toolchain_for(device, cfg, gpu_list)
        if pairs:
            executor.begin(cfg, slots, toolchain)
        prepare_compile_cache(cfg, toolchain, warn)
        with _progress(console) as progress:
            builds = _build_stage(cfg, pairs, toolchain, seed, store, progress, warn, started)
            emitter = _Emitter(store, progress, progress.add_task("evaluate", total=len(pairs)), cfg, warn,
                             request.json, on_record)
            terms = between_terms(cfg, device, gpu_list)
            if terms is not None:
                store.update_metadata(between_process={"key": terms.key, "calibrated": bool(terms.calibrated),
                                                       "run_id": (terms.calibrated or {}).get("run_id")})
            ctx = Context(cfg, store.run_id, toolchain, builds, scratch, store.dir / "logs", emitter.emit, seed,
                          started=emitter.started, between=terms)
            said = executor.run(pairs, ctx, slots, device, say)
            if said is not None:
                store.update_metadata(**{cfg.executor: said})
        store.update_metadata(finished_at=now(), wall_seconds=round(time.monotonic() - started, 3),
                              ceilings=ctx.ceilings)
        store.finish()                                     # results.jsonl and run.json hold what this run wrote
        return _conclude(store, request, conclude, console)


def _say_busy_gpus(store: RunStore, slots: list[Slot], gpu_list: list[dict[str, Any]],
                   warn: Callable[[str], None]) -> None:
    """A line for each of the run's GPUs that another process is using as the run starts (harness.run.gpubusy),
    and what was seen, in run.json."""
    busy = gpubusy.check(slots, gpu_list)
    for text, _ in busy:
        warn(text)
    if busy:
        store.update_metadata(gpus_busy_at_start=[seen for _, seen in busy])


def _conclude(store: RunStore, request: RunRequest, conclude: Callable[[RunStore], int] | None, console) -> int:
    """The finished run shown (with --json: its summary lines after the JSON lines), or the caller's `conclude`."""
    from harness.results.render import render, wide_console
    if request.json:
        from harness.results import report
        for line in report.summary_lines(report.aggregate(store.records())):
            console.print(line, highlight=False)
    if conclude is not None:
        return conclude(store)
    render(store.records(), store, json_mode=False, console=None if request.json else wide_console())
    return 0


def _resumed_store(cfg: Config, request: RunRequest, pairs: list[Pair], say: Callable[[str], None],
                   warn: Callable[[str], None]) -> tuple[RunStore, list[Pair], RunSeed]:
    """--resume: the run's folder, the pairs it still has to evaluate (with --add-new the new ones) and its seed."""
    store = RunStore.resume(Path(cfg.output_dir), request.resume, warn)
    resumed = resume_selection(pairs, store.metadata(), store.done_keys(), request.add_new)
    note = resume_note(resumed, store.run_id)
    if note:
        say(note)
    seed = RunSeed.resumed(store.metadata().get("seed"), cfg.seed)
    store.update_metadata(resumed_at=[*store.metadata().get("resumed_at", []), now()], pairs=resumed.keys)
    return store, resumed.todo, seed


def _new_store(cfg: Config, request: RunRequest, pairs: list[Pair], device: str, gpu_list: list[dict[str, Any]],
               warn: Callable[[str], None]) -> tuple[RunStore, RunSeed]:
    """A new run's folder, its run.json saying what it runs, where and with what, and its seed."""
    seed = RunSeed.resolve(cfg.seed)
    store = RunStore.create(Path(cfg.output_dir), {
        **meta.collect(["run_eval.py", *request.argv], gpu_list), "device": device, "started_at": now(),
        "config": config_to_dict(cfg), "selection": selection_record(cfg, request), "pairs": pair_keys(pairs),
        "seed": seed.record()}, warn)
    return store, seed


def _build_stage(cfg: Config, pairs: list[Pair], toolchain: Toolchain, seed: RunSeed, store: RunStore, progress,
                 warn: Callable[[str], None], started: float) -> dict:
    """Every pair's candidate built (or found in the cache), with a progress bar; the counts go in run.json."""
    task = progress.add_task("build", total=len(pairs))

    def built(result) -> None:
        if result.warning:
            warn(result.warning)
        progress.advance(task)

    builds = build_all(pairs, Path(cfg.cache_dir) / "builds", toolchain, cfg.build_jobs(), cfg.build_timeout,
                       seed.base, on_done=lambda pair, result: built(result))
    progress.update(task, completed=len(pairs))
    store.update_metadata(builds_compiled=sum(1 for b in builds.values() if not b.cached and not b.static),
                          builds_cached=sum(1 for b in builds.values() if b.cached),
                          builds_skipped=sum(1 for b in builds.values() if b.static),
                          build_seconds=round(time.monotonic() - started, 1))
    return builds


class _Emitter:
    """Where each record goes as its pair ends: the store, the caller's on_record, the progress bar, and stdout as
    a JSON line with --json."""

    def __init__(self, store: RunStore, progress, task, cfg: Config, warn: Callable[[str], None], json_lines: bool,
                 on_record: Callable[[Record], None] | None) -> None:
        from harness.run.progress import Current
        self.store, self.progress, self.task, self.warn = store, progress, task, warn
        self.json_lines, self.on_record = json_lines, on_record
        self.current = Current(progress, task, cfg.timing.processes)

    def started(self, slot: str, pair: Pair, process: int) -> None:
        self.current.started(slot, pair.candidate.id, process)

    def emit(self, draft: RecordDraft | dict[str, Any]) -> None:
        """A pair's record as the schedule hands it over (a draft; a dask task's record is its JSON already): the
        store writes it and gives back the Record its line reads as, which on_record and the progress read;
        --json prints the record's JSON as it was handed over (unsigned, as it always printed)."""
        from harness.run.workerproc import unlogged
        for failed in unlogged():
            self.warn(f"{failed}; that worker's output from there on is dropped (the run goes on)")
        record = self.store.append(draft)
        if self.on_record is not None:
            self.on_record(record)
        self.current.finished(record.solution)
        self.progress.advance(self.task)
        if self.json_lines:
            data = draft.to_json() if isinstance(draft, RecordDraft) else draft
            print(json.dumps(data, default=str), flush=True)


@contextlib.contextmanager
def _resume_hint_on_interrupt(store: RunStore, cfg: Config, argv: Sequence[str]):
    """Ctrl-C once the run has its folder: a RunInterrupted that names the run and the command that goes on."""
    try:
        yield
    except KeyboardInterrupt as exc:
        raise RunInterrupted(resume_hint(store.run_id, store.results_path, cfg.output_dir, argv),
                             interrupted_code(exc)) from None


def resume_hint(run_id: str, results_path: Path, output_dir: str, argv: Sequence[str]) -> str:
    """What Ctrl-C prints: where the finished pairs are and the command that runs the rest (`argv`: the run's, with
    its subcommand first for calibrate and ci)."""
    said = f"interrupted: finished pairs are in {results_path}"
    first = argv[0] if argv else None
    if first == "ci":                           # ci selects from git and takes no --resume
        return f"{said} (run {run_id})"
    command = [*(["calibrate"] if first == "calibrate" else []), "--resume", run_id]
    if Path(output_dir) != Path("results"):
        command += ["--output-dir", str(output_dir)]
    return f"{said}; continue with: {command_line(command)}"


def _progress(console):
    from harness.run.progress import bar
    return bar(console)
