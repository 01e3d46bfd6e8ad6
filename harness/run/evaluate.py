"""One problem's reference side and one pair's protocol, from the parent's side.

Per problem, on one slot: the reference worker (it imports the problem only) computes the expected outputs,
compiles the torch.compile baselines, probes the eager call's time and then serves samples and verifications.
Per pair:
  1. reference blocks alone (the `before` bracket of the interference check);
  2. a fresh candidate worker imports the candidate and runs the correctness trials; the reference verifies;
  3. paired, interleaved rounds (harness.run.interleave) until the speedup's CI reaches its target or the time cap,
     with one call of each side profiled in a few round halves drawn at random;
     every timed output checked by the trusted side after the candidate handed it over (harness.run.trusted), a
     few of them whole; the candidate worker is killed;
  5. reference blocks alone again (the `after` bracket), then the verdict.
"""
from __future__ import annotations

import hashlib
import shutil
import statistics
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.run import defenses, memory, paired
from harness.core import flags
from harness.run.build import build_env
from harness.core.config import Config
from harness.core.discover import Pair
from harness.run.interleave import (CANDIDATE, EAGER, CandidateFailed, Collected, GraphFallback, Interleaver, fastest,
                                    ratios)
from harness.shared.messages import (CandidateJob, Derived, DeriveRequest, ProtocolError, ReferenceJob, TimingSpec,
                                     parse, wire)
from harness.run.workerproc import SpareWorkers, Worker, WorkerExit
from harness.results.records import finish
from harness.core.seeds import RunSeed
from harness.results.signing import RunKey
from harness.shared.stats import graph_replays, summarize
from harness.run.trusted import Reader


@dataclass
class PairContext:
    """What one pair needs from the run."""
    cfg: Config
    seed: RunSeed
    builds: dict
    toolchain: Any
    ceilings: dict[str, float]
    log_dir: Path


SLUG_BYTES = 160           # a file name made of ids stays well under NAME_MAX (255 bytes) with its suffix


def slug(text: str) -> str:
    """An id as one file name: '/' as '__'; a long one cut and told apart by a hash of the whole."""
    name = text.replace("/", "__").replace("\0", "")
    data = name.encode("utf-8", errors="surrogatepass")
    if len(data) <= SLUG_BYTES:
        return name
    digest = hashlib.sha256(data).hexdigest()[:12]
    return data[:SLUG_BYTES - 13].decode("utf-8", errors="ignore") + "-" + digest


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def timing_spec(cfg: Config, device: str, mode: str, variants: list[str] | None = None, replays: int = 1,
                graph_calls: int | None = None) -> TimingSpec:
    t = cfg.timing
    return TimingSpec("host" if device == "cpu" else mode, t.warmup, t.flush_l2, graph_calls or t.graph_calls,
                      variants or [EAGER], replays)


DERIVE_BESIDE_BYTES = 1 << 30      # ReferenceSide.beside_trials: 1 GiB of inputs, outputs and weights, 2 GiB in fp64


class ReferenceSide:
    """The reference worker for one problem on one slot."""

    def __init__(self, pair: Pair, pc: PairContext, device: str, problem_dir: Path, spares: SpareWorkers,
                 known: dict[str, Any] | None = None):
        self.pc, self.device = pc, device
        self.known = known if known is not None else {}     # the problem's figures that no process pair changes
        self.state_path = problem_dir / "reference_state.pt"
        self.error: str | None = None
        self.error_status = "load_error"
        self.info: dict[str, Any] = {}
        self.mode = "host" if device == "cpu" else "cold"
        self.graph_replays = 1              # graph mode: replays a sample, sized by the pair's first blocks
        self.replays_sized = False
        self.graph_error: str | None = None     # why graph mode was given up for the whole problem
        self.variants = [EAGER]
        self.derive = "not asked"           # -> "asked" (the reply not read yet) -> "read" (merged into info)
        self.plan = None                    # the pairs' device memory (harness.run.memory; None on the CPU path)
        self.error_flag = None              # put on the records of the pairs it could not serve (harness_oom)
        cfg = pc.cfg
        started = time.monotonic()
        self.setup_seconds: float | None = None     # its start until `ready`: reported by the first pair it serves
        self.worker = spares.take("reference", pc.log_dir / f"{slug(pair.problem_id)}__reference.log")
        probe = pc.seed.stream("probe", pair.problem_id).take(5)
        self.worker.send(wire(ReferenceJob(
            str(pair.problem.path.resolve()), device, pc.seed.base, cfg.trials, timing_spec(cfg, device, "cold"),
            list(cfg.timing.compile_modes), probe, str(problem_dir), cfg.defenses, cfg.precision,
            cfg.gpu_memory_gb, 2 + int(spares.enabled))))     # CUDA contexts: a spare reference holds one too
        try:
            message = self.worker.recv(time.monotonic() + cfg.reference_timeout)
        except WorkerExit as exc:
            self._fail(exc, cfg.reference_timeout)
            return
        self.setup_seconds = time.monotonic() - started
        if message.get("kind") != "ready":
            self.error_status = "load_error"
            self.error = f"problem {pair.problem_id}: {message.get('stage', 'problem')}: {message.get('error')}"
            if message.get("oom"):              # before any candidate ran: the harness's limit, no one's `oom`
                self._out_of_budget(str(message.get("harness_oom") or f"harness_oom: {self.error}"))
            return
        self.info = message
        compiled = message.get("compile") if isinstance(message.get("compile"), dict) else {}
        self.variants += [f"compile:{mode}" for mode in cfg.timing.compile_modes
                          if isinstance(compiled.get(mode), dict) and compiled[mode].get("error") is None]
        self.mode = self._choose_mode(message.get("cold_probe_ms"))
        try:
            self.plan = memory.plan(self)
        except WorkerExit as exc:
            self._fail(exc, cfg.reference_timeout)
        if self.plan is not None and self.plan.error:
            self._out_of_budget(self.plan.error)

    def graph_calls(self) -> int:
        """Calls per captured graph: timing.graph_calls, capped by the memory plan."""
        return self.plan.graph_calls if self.plan is not None else self.pc.cfg.timing.graph_calls

    def _out_of_budget(self, line: str) -> None:
        self.error, self.error_status, self.error_flag = line, "skipped", flags.HARNESS_OOM

    def failed(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record of a pair this reference could not serve (`error`)."""
        return memory.skipped(record, self.error) if self.error_flag else finish(record, self.error_status, self.error)

    def _choose_mode(self, probe_ms: Any) -> str:
        t = self.pc.cfg.timing
        if self.device == "cpu":
            return "host"
        if t.mode != "auto":
            return t.mode
        fast = isinstance(probe_ms, (int, float)) and probe_ms < t.graph_below_ms
        return "graph" if fast else "cold"

    def _fail(self, exc: WorkerExit, timeout: float) -> None:
        if exc.kind == "timeout":
            self.error = f"reference side did not finish within {timeout:g} s"
            self.error_status = "timeout"
        elif exc.kind == "oom" or memory.out_of_budget(self.worker):     # no candidate ran: no one's `oom`
            self._out_of_budget(memory.out_of_budget(self.worker) or f"harness_oom: reference side: {exc.detail}")
        else:
            self.error = f"reference side: {exc.detail}: {last_line(self.worker.log_tail())}"
            self.error_status = "crashed"

    def beside_trials(self) -> bool:
        """Whether the reference may work out what DeriveRequest asks for while the candidate runs its trials on the
        same device: not when its float64 copy is large (DERIVE_BESIDE_BYTES), where the two could run the device
        out of memory and the candidate's trials would read `oom` for the reference's allocations."""
        footprint = self.info.get("footprint_bytes")
        return isinstance(footprint, int) and footprint <= DERIVE_BESIDE_BYTES

    def ask_derived(self) -> None:
        """Ask for what the checks need from the reference alone (messages.DeriveRequest), once per reference
        process (no-op after that)."""
        if self.derive == "not asked":
            self.worker.resume()
            self.worker.send(wire(DeriveRequest(flops="work" not in self.known)))
            self.derive = "asked"

    def read_derived(self) -> None:
        """The reply to ask_derived, merged into `info`; every other request waits for it (one pipe, in order)."""
        if self.derive != "asked":
            return
        self.derive = "read"
        self.worker.resume()
        try:
            reply = parse(Derived, self.worker.recv(time.monotonic() + self.pc.cfg.reference_timeout))
        except ProtocolError as exc:
            raise WorkerExit("protocol", None, f"reference answered derive with {exc}") from None
        self.info.update({k: v for k, v in wire(reply).items() if k != "kind"})
        if reply.work is not None:
            self.known.setdefault("work", reply.work)
        self.info["work"] = self.known.get("work")

    def verify(self, files: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.read_derived()
        self.worker.resume()
        self.worker.send({"op": "verify", "files": files})
        message = self.worker.recv(time.monotonic() + self.pc.cfg.reference_timeout)
        if message.get("kind") != "verified" or not isinstance(message.get("results"), list):
            raise WorkerExit("protocol", None, f"reference answered {message.get('kind')!r} to verify")
        return message["results"]

    def healthy(self) -> bool:
        if self.error is not None or not self.worker.alive():
            return False
        try:
            self.read_derived()
            self.worker.resume()
            self.worker.send({"op": "health"})
            return bool(self.worker.recv(time.monotonic() + 60).get("ok"))
        except WorkerExit:
            return False

    def close(self) -> None:
        self.worker.resume()
        self.worker.close()


# ---------------------------------------------------------------- one pair

def run_pair(pair: Pair, record: dict[str, Any], reference: ReferenceSide, pc: PairContext, device: str,
             problem_dir: Path, spares: SpareWorkers, attempt: int = 0, process: int = 0) -> None:
    """One pair, start to verdict, into `record`. `attempt` > 0 is a second try (after interference), `process` > 0
    a further process pair (timing.processes): their timed samples and checks come from streams of their own, so
    nothing an earlier try saw repeats."""
    cfg = pc.cfg
    tags = ((pair.key[0], pair.key[1]) + ((f"attempt {attempt}",) if attempt else ())
            + ((f"process {process}",) if process else ()))
    record["seed"] = pc.seed.record()
    pair_dir = problem_dir / slug(pair.candidate.id.rsplit("/", 1)[-1])
    pair_dir.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    if reference.setup_seconds is not None:         # before this pair: outside its `total`
        phases["reference_setup"], reference.setup_seconds = reference.setup_seconds, None
    started = time.monotonic()
    deadline = started + cfg.timeout
    inter = Interleaver(reference.worker, reference.variants, cfg.timing.block_samples,
                        pc.seed.stream("samples", *tags), pc.seed.stream("checks", *tags), deadline,
                        cfg.timing.block_warmup, defenses.PROFILED_CALLS if cfg.defenses else 0, spares)
    inter.prepare = device == "cpu"
    inter.reader = Reader(reference.worker, device, str(pair_dir), deadline)
    try:
        _set_reference_mode(reference, inter, reference.graph_calls())
        before = inter.reference_blocks(cfg.timing.baseline_blocks)
    except WorkerExit as exc:
        memory.reference_lost(record, reference.worker,
                              f"reference side: {exc.detail}; last output: {last_line(reference.worker.log_tail())}")
        record["worker"] = {"exit_code": None, "seconds": 0.0, "log_tail": None, "device_usable_after": False}
        return
    phases["baseline_before"] = time.monotonic() - started
    t_start = time.monotonic()
    worker = spares.take("candidate", pc.log_dir / f"{slug(pair.candidate.id)}.log")
    build = pc.builds[pair.candidate.id]
    env = {**build_env(Path(build.build_dir), pc.toolchain), "TRITON_CACHE_DIR": str(pair_dir / "triton")}
    worker.send(wire(CandidateJob(
        str(pair.problem.path.resolve()), build.candidate_path, device, pc.seed.base, cfg.trials,
        timing_spec(cfg, device, reference.mode, [CANDIDATE], reference.graph_replays, reference.graph_calls()),
        str(pair_dir), str(reference.state_path),
        cfg.defenses, cfg.precision, hide=[str(RunKey.keys_dir(cfg.cache_dir))], env=env,
        memory_share_bytes=reference.plan.candidate if reference.plan else None)))
    phases["start"] = time.monotonic() - t_start
    collected = None
    try:
        if reference.beside_trials():
            reference.ask_derived()
        collected = _drive(worker, record, reference, inter, pc, phases)
    except WorkerExit as exc:
        if not reference.worker.alive():
            memory.reference_lost(record, reference.worker, f"reference side: {exc.detail}; last output: "
                                                            f"{last_line(reference.worker.log_tail())}")
        elif exc.kind == "timeout":
            finish(record, "timeout", f"killed after the pair timeout of {cfg.timeout:g} s")
        elif exc.kind == "oom":
            finish(record, "oom", f"{exc.detail}; last output: {last_line(worker.log_tail())}")
        else:
            finish(record, "crashed", f"{exc.detail}; last output: {last_line(worker.log_tail())}")
    except CandidateFailed as failed:
        finish(record, str(failed.message.get("status", "crashed")), failed.message.get("error"))
        record["error_detail"] = failed.message.get("detail")
    except Exception as exc:                           # noqa: BLE001 - one pair's fault must not end the run
        record["error_detail"] = traceback.format_exc()[-4000:]
        finish(record, "crashed", f"harness fault while evaluating this pair: {type(exc).__name__}: {exc}")
    finally:
        inter.release()
        candidate_peak = memory.peak(worker, device) if collected is not None else None
        t0 = time.monotonic()
        code = worker.close()
        try:
            inter.reader.close()                    # the reference drops its views of the candidate's memory
        except WorkerExit:
            pass                                    # the reference is dead or out of step: the next use says so
        phases["close"] = time.monotonic() - t0
        try:
            reference.read_derived()                # not read when the candidate failed before verify
        except WorkerExit:
            pass                                    # the reference is dead or out of step: the next use says so
        record["worker"] = {"exit_code": code, "seconds": round(time.monotonic() - started, 3),
                            "log_tail": None, "phases": phases}
        if collected is not None:
            record["worker"]["memory"] = memory.record(reference, candidate_peak, memory.peak(reference.worker, device))
        shutil.rmtree(pair_dir, ignore_errors=True)
    if collected is not None and record["status"] is None:
        _conclude(record, reference, inter, collected, before, pc, phases)
    record["worker"]["phases"] = {k: round(v, 3) for k, v in phases.items()}
    record["worker"]["phases"]["total"] = round(time.monotonic() - started, 3)
    if record["status"] != "ok":
        record["worker"]["log_tail"] = worker.log_tail()
    if record["status"] in ("crashed", "timeout", "oom", "runtime_error"):
        record["worker"]["device_usable_after"] = reference.healthy()


def _drive(worker: Worker, record: dict[str, Any], reference: ReferenceSide, inter: Interleaver, pc: PairContext,
           phases: dict[str, float]) -> Collected | None:
    """Correctness trials, then the timed rounds. Returns what the rounds collected, or None when the record was
    finished here (a failure or an incorrect result)."""
    t0 = time.monotonic()
    message = worker.recv(inter.deadline)
    phases["trials"] = time.monotonic() - t0
    record["sandbox"] = message.get("sandbox") if isinstance(message.get("sandbox"), dict) else None
    if message.get("kind") == "failed":
        finish(record, message.get("status", "crashed"), message.get("error"))
        record["error_detail"] = message.get("detail")
        return None
    if message.get("kind") != "outputs":
        raise WorkerExit("protocol", None, f"worker sent {message.get('kind')!r}: {message.get('error')}")
    t0 = time.monotonic()
    reference.ask_derived()                     # asked already when it could run beside the trials
    reference.read_derived()
    phases["derive_wait"] = time.monotonic() - t0
    t0 = time.monotonic()
    results = reference.verify(_files(message))
    phases["checks"] = time.monotonic() - t0
    record["correctness"] = _correctness(results, message, reference.info, pc)
    record["precision"] = {"requested": pc.cfg.precision, "dtype": reference.info.get("dtype"),
                           "source": reference.info.get("dtype_source")}
    evidence = defenses.Evidence(record, reference.info, pc.cfg.timing, reference.device, message)
    defenses.run(defenses.AFTER_TRIALS[:1], evidence, pc.cfg.defenses)      # the trials' own flags
    failing = [r for r in results if not r.get("ok")]
    if failing:
        first = failing[0]
        hint = f"{first['hint']}; " if first.get("hint") else ""
        reason = f"{str(first.get('label')).replace('trial', 'trial ')}: {hint}{first.get('reason')}"
        unsynchronized = flags.UNSYNCHRONIZED_WORK
        if unsynchronized.name in record["flags"]:          # the values checked were not the final ones
            finish(record, "invalid", f"{unsynchronized}: {unsynchronized.meaning}; {reason}")
        else:
            finish(record, "incorrect", reason)
        return None
    earlier = list(record["flags"])
    defenses.run(defenses.AFTER_TRIALS[1:], evidence, pc.cfg.defenses)
    invalid = flags.invalidating([f for f in record["flags"] if f not in earlier])
    if invalid:                                             # e.g. inside the tolerance, but not fp32 arithmetic
        finish(record, "invalid", f"{invalid[0]}: {record['flag_details'].get(invalid[0], '')}")
        return None
    t0 = time.monotonic()
    rule = paired.StopRule(pc.cfg.timing.rounds_floor(), pc.cfg.timing.max_rounds, pc.cfg.timing.target_rel_ci,
                           pc.cfg.timing.max_pair_seconds)
    try:
        collected = inter.rounds(worker, rule)
    except GraphFallback as fell:
        collected = _cold_again(worker, reference, inter, rule, fell)
    phases["timing"] = time.monotonic() - t0
    phases["timing_profile"] = collected.profile_seconds      # parts of "timing"
    phases["timing_switch"] = collected.switch_seconds
    return collected


def _cold_again(worker: Worker, reference: ReferenceSide, inter: Interleaver, rule: paired.StopRule,
                fell: GraphFallback) -> Collected:
    """One side could not be captured in a CUDA graph: both go back to cold timing for this pair (and the
    reference for the rest of the problem when it was the reference)."""
    if fell.side != CANDIDATE:
        reference.mode = "cold"
    inter.release()
    inter.set_mode(reference.worker, "cold")
    inter.set_mode(worker, "cold")
    inter.calls_per_sample = 1
    collected = inter.rounds(worker, rule)
    collected.graph_error = f"{fell.side}: {fell.error}"
    return collected


def _conclude(record: dict[str, Any], reference: ReferenceSide, inter: Interleaver, out: Collected,
              before: list[float], pc: PairContext, phases: dict[str, float]) -> None:
    """The candidate is gone: the `after` bracket, the estimates and the verdict."""
    t0 = time.monotonic()
    inter.candidate = None
    inter.deadline = time.monotonic() + pc.cfg.reference_timeout
    try:
        after = inter.reference_blocks(pc.cfg.timing.baseline_blocks)
    except WorkerExit as exc:
        memory.reference_lost(record, reference.worker, f"reference side: {exc.detail}")
        return
    finally:
        inter.release()
    phases["baseline_after"] = time.monotonic() - t0
    _timing_record(record, reference, out, before, after, pc)
    t0 = time.monotonic()
    evidence = defenses.Evidence(record, reference.info, pc.cfg.timing, reference.device, out=out, before=before,
                                 after=after, calls_per_sample=inter.calls_per_sample, ceilings=pc.ceilings)
    defenses.run(defenses.AFTER_ROUNDS, evidence, pc.cfg.defenses)
    phases["checks"] = phases.get("checks", 0.0) + time.monotonic() - t0
    invalid = flags.invalidating(record["flags"])
    if invalid:
        finish(record, "invalid", f"{invalid[0]}: {record.get('flag_details', {}).get(invalid[0], '')}".rstrip(": "))
    else:
        finish(record, "ok")


def _set_reference_mode(reference: ReferenceSide, inter: Interleaver, graph_calls: int) -> None:
    """The reference's timing mode for this pair. Graph mode: one block with one replay a sample sizes the replays
    (stats.graph_replays, once per problem) so that a sample holds enough work for the parent's clock; it captures
    `graph_calls` calls (timing.graph_calls, capped by the memory plan)."""
    if reference.mode == "graph" and not reference.replays_sized:
        inter.set_mode(reference.worker, "graph", 1, graph_calls)
        inter.calls_per_sample = graph_calls
        try:
            reference.graph_replays = graph_replays(min(inter.reference_blocks(1)), graph_calls)
        except GraphFallback as fell:                  # the reference cannot be captured: cold for the problem
            reference.mode, reference.graph_error = "cold", f"reference: {fell.error}"
        reference.replays_sized = True
    inter.set_mode(reference.worker, reference.mode, reference.graph_replays, graph_calls)
    inter.calls_per_sample = graph_calls * reference.graph_replays if reference.mode == "graph" else 1


def _side_stats(out: Collected, variant: str) -> dict[str, Any]:
    stats = summarize(out.samples(variant))
    if out.host_ms.get(variant):
        stats["host_median_ms"] = statistics.median(out.host_ms[variant])
        stats["stream_lag_median_ms"] = statistics.median(out.lag_ms[variant])
    return stats


def _timing_record(record: dict[str, Any], reference: ReferenceSide, out: Collected, before: list[float],
                   after: list[float], pc: PairContext) -> None:
    t = pc.cfg.timing
    main = paired.estimate(ratios(out, EAGER))
    record["speedup"], record["speedup_ci"] = main.value, main.ci()
    baselines: dict[str, Any] = {}
    compiled = reference.info.get("compile") if isinstance(reference.info.get("compile"), dict) else {}
    for mode, note in compiled.items():
        variant = f"compile:{mode}"
        entry = {"error": note.get("error"), "compile_seconds": note.get("compile_seconds")}
        if variant in reference.variants and out.samples(variant):
            est = paired.estimate(ratios(out, variant))
            side = summarize(out.samples(variant))          # mean/stdev/min/max: KernelBench's baseline files
            entry.update({k: side[k] for k in ("n", "median_ms", "mean_ms", "stdev_ms", "min_ms", "max_ms")},
                         speedup=est.value, speedup_ci=est.ci())
        baselines[variant] = entry
    best = fastest(out, [v for v in reference.variants if v != EAGER])
    if best is not None:
        est = paired.estimate(ratios(out, best))
        record["speedup_vs_compile"], record["speedup_vs_compile_ci"] = est.value, est.ci()
    mode = "host" if reference.device == "cpu" else "cold" if out.graph_error else reference.mode
    record["timing"] = {
        "clock": "host" if reference.device == "cpu" else "cuda_event",
        "mode": mode,
        "l2_flush": bool(t.flush_l2 and mode in ("cold", "host")),     # host: the CPU's caches (timing.py)
        "timer_floor_ms": reference.info.get("timer_floor_ms"),
        "cold_probe_ms": reference.info.get("cold_probe_ms"),
        "graph_replays": reference.graph_replays if mode == "graph" else None,
        "graph_calls": reference.graph_calls() if mode == "graph" else None,
        "graph_calls_capped": reference.plan.graph_capped if mode == "graph" and reference.plan else None,
        "graph_error": out.graph_error or reference.graph_error,
        "cpu_threads": pc.cfg.cpu_threads,
        "block_samples": t.block_samples, "block_warmup": t.block_warmup, "profiled_calls": len(out.profiles),
        "rounds": main.rounds,
        "seconds": round(out.seconds, 3),
        "target_rel_ci": t.target_rel_ci, "rel_ci_half_width": main.rel_half_width, "noisy": out.noisy,
        "round_ratios": [round(r, 6) for r in ratios(out, EAGER)],
        "reference": _side_stats(out, EAGER), "candidate": _side_stats(out, CANDIDATE),
        "baselines": baselines, "baseline_before_ms": before, "baseline_after_ms": after,
    }


def _files(message: dict[str, Any]) -> list[dict[str, Any]]:
    files = message.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) and {"label", "path", "trial"} <= f.keys()
                                              for f in files):
        raise WorkerExit("protocol", None, "worker sent a malformed file list")
    return [{"label": str(f["label"]), "path": str(f["path"]), "trial": int(f["trial"])} for f in files]


def _correctness(results, message, info, pc: PairContext) -> dict[str, Any]:
    passed = sum(1 for r in results if r.get("ok"))
    first_bad = next((r for r in results if not r.get("ok")), None)
    return {
        "trials": len(results), "trials_passed": passed,
        "max_abs_err": defenses.largest([r.get("max_abs_err") for r in results]),
        "max_rel_err": defenses.largest([r.get("max_rel_err") for r in results]),
        "atol": info.get("atol"), "rtol": info.get("rtol"), "dtype": info.get("dtype"),
        "first_mismatch": first_bad and {"trial": first_bad.get("label"), "reason": first_bad.get("reason"),
                                         **(first_bad.get("first_mismatch") or {})},
        "param_match": message.get("param_match"), "module_mode": message.get("module_mode"),
        "fp64_max_abs_err": next((r.get("fp64_max_abs_err") for r in results if r.get("label") == "trial0"), None),
        "fp64_reference_max_abs_err": info.get("fp64_reference_max_abs_err"),
        "fp64": info.get("fp64"),
        "reference_module_mode": info.get("module_mode"), "seed": pc.seed.base,
        "timed_outputs_checked": 0, "timed_outputs_full_checked": 0,
    }
