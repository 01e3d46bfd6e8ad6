"""Stage 3, execute: schedule problems over the devices, run the reference side once per problem and the
candidate side in a fresh worker per pair, and turn whatever happens into exactly one record per pair.

Per problem, on one slot (a GPU, or the CPU):
  reference worker  -- imports the problem only; expected outputs, reference timing, weights for candidates
  candidate worker  -- one per pair; writes its outputs to files, times itself when told to
  reference worker  -- compares those files with the expected outputs it kept
"""
from __future__ import annotations

import queue
import shutil
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .build import BuildResult, Toolchain, build_env
from .config import Config
from .discover import Pair
from .procs import SpareWorkers, Worker, WorkerExit, worker_env
from .records import INVALIDATING_FLAGS, add_flag, finish, new_record


@dataclass
class Slot:
    name: str                       # "cuda:3" or "cpu"
    gpu: int | None
    gpu_name: str | None = None

    @property
    def device(self) -> str:
        return "cpu" if self.gpu is None else "cuda:0"   # each worker sees only its own GPU

    def env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": "" if self.gpu is None else str(self.gpu), "KB_DEVICE": self.device}


@dataclass
class Context:
    cfg: Config
    run_id: str
    toolchain: Toolchain
    builds: dict[str, BuildResult]
    scratch: Path
    log_dir: Path
    emit: Callable[[dict[str, Any]], None]
    stop: threading.Event = field(default_factory=threading.Event)
    ceilings: dict[str, dict[str, float]] = field(default_factory=dict)   # slot name -> measured ceilings


def slug(text: str) -> str:
    return text.replace("/", "__")


def run_all(pairs: list[Pair], ctx: Context, slots: list[Slot]) -> None:
    """Every pair gets a record through ctx.emit; problems are spread over the slots."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair.problem_id, []).append(pair)
    work: queue.Queue = queue.Queue()
    for pid in sorted(groups, key=lambda p: -len(groups[p])):      # big groups first: better balance
        work.put(groups[pid])
    errors: list[BaseException] = []

    def serve(slot: Slot) -> None:
        spares = SpareWorkers(worker_env(slot.env()), ctx.log_dir, slot.name.replace(":", ""),
                              spares_enabled(ctx.cfg, slot))
        try:
            if slot.gpu is not None and ctx.cfg.defenses:
                ctx.ceilings[slot.name] = measure_ceilings(ctx, slot)
            while not ctx.stop.is_set():
                try:
                    group = work.get_nowait()
                except queue.Empty:
                    return
                run_problem(group, ctx, slot, spares)
        except BaseException as exc:                                 # noqa: BLE001 - re-raised in the caller
            errors.append(exc)
            ctx.stop.set()
        finally:
            spares.close()

    threads = [threading.Thread(target=serve, args=(slot,), name=slot.name, daemon=True) for slot in slots]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)
    if errors:
        raise errors[0]


def spares_enabled(cfg: Config, slot: Slot) -> bool:
    """'auto': on GPU slots, where a starting worker only uses an idle core; off on the CPU, where it would
    compete with the host-clock timing."""
    return cfg.spare_workers == "on" or (cfg.spare_workers == "auto" and slot.gpu is not None)


def measure_ceilings(ctx: Context, slot: Slot) -> dict[str, float]:
    """Copy bandwidth and matmul throughput of this GPU, once per run (a worker of its own)."""
    worker = Worker("ceilings", worker_env(slot.env()), ctx.log_dir / f"ceilings_{slot.name.replace(':', '')}.log")
    worker.send({"device": slot.device})
    try:
        message = worker.recv(time.monotonic() + 300)
    except WorkerExit:
        return {}
    finally:
        worker.close()
    return {k: v for k, v in message.items() if k != "kind" and isinstance(v, (int, float))}


def _base_record(pair: Pair, ctx: Context, slot: Slot) -> dict[str, Any]:
    record = new_record(pair.problem_id, pair.candidate.id, slot.device.split(":")[0], ctx.run_id)
    if slot.gpu is not None:
        record["gpu"] = {"index": slot.gpu, "name": slot.gpu_name}
    build = ctx.builds.get(pair.candidate.id)
    record["build"] = build.record() if build else None
    return record


def _decided_without_running(pair: Pair, ctx: Context, slot: Slot) -> dict[str, Any] | None:
    """A record for pairs that cannot run: missing/broken problem, unloadable candidate, failed build."""
    record = _base_record(pair, ctx, slot)
    if pair.problem is None:
        return finish(record, "load_error", f"no problem file for this candidate ({pair.problem_id}.py)")
    if pair.problem.error:
        return finish(record, "load_error", f"problem: {pair.problem.error}")
    if pair.candidate.error:
        return finish(record, "load_error", pair.candidate.error)
    build = ctx.builds.get(pair.candidate.id)
    if build is None:
        return finish(record, "crashed", "no build result (harness fault)")
    if build.status == "built":
        return None
    status = {"compile_error": "compile_error", "skipped": "skipped", "timeout": "timeout"}.get(build.status, "crashed")
    return finish(record, status, build.error)


def run_problem(group: list[Pair], ctx: Context, slot: Slot, spares: SpareWorkers) -> None:
    runnable = []
    for pair in group:
        record = _decided_without_running(pair, ctx, slot)
        if record is None:
            runnable.append(pair)
        else:
            ctx.emit(record)
    if not runnable:
        return
    problem_dir = ctx.scratch / slot.name.replace(":", "") / slug(runnable[0].problem_id)
    problem_dir.mkdir(parents=True, exist_ok=True)
    reference = None
    try:
        for pair in runnable:
            if ctx.stop.is_set():
                return
            if reference is None:
                reference = ReferenceSide(runnable[0], ctx, slot, problem_dir, spares)
            record = _base_record(pair, ctx, slot)
            if reference.error is not None:
                ctx.emit(finish(record, reference.error_status, reference.error))
                continue
            run_pair(pair, record, reference, ctx, slot, problem_dir, spares)
            lint = reference.info.get("lint") or {}
            if lint.get("degenerate"):
                _flag(record, "degenerate_problem", "; ".join(lint.get("reasons", [])))
            ctx.emit(record)
            if (record["worker"] or {}).get("device_usable_after") is False:
                reference.close()                       # the next pair gets a fresh reference process too
                reference = None
    finally:
        if reference is not None:
            reference.close()
        shutil.rmtree(problem_dir, ignore_errors=True)


class ReferenceSide:
    """The reference worker for one problem on one slot."""

    def __init__(self, pair: Pair, ctx: Context, slot: Slot, problem_dir: Path, spares: SpareWorkers):
        self.ctx = ctx
        self.state_path = problem_dir / "reference_state.pt"
        self.error: str | None = None
        self.error_status = "load_error"
        self.info: dict[str, Any] = {}
        cfg = ctx.cfg
        log = ctx.log_dir / f"{slug(pair.problem_id)}__reference.log"
        self.worker = spares.take("reference", log)
        self.worker.send({"problem_path": str(pair.problem.path.resolve()), "device": slot.device,
                          "seed": cfg.seed, "trials": cfg.trials, "timing": _timing_job(cfg),
                          "scratch": str(problem_dir), "defenses": cfg.defenses})
        try:
            message = self.worker.recv(time.monotonic() + cfg.reference_timeout)
        except WorkerExit as exc:
            self._fail(exc, cfg.reference_timeout)
            return
        if message.get("kind") == "ready":
            self.info = message
        else:
            self.error_status = "oom" if message.get("oom") else "load_error"
            self.error = f"problem {pair.problem_id}: {message.get('stage', 'problem')}: {message.get('error')}"

    def _fail(self, exc: WorkerExit, timeout: float) -> None:
        if exc.kind == "timeout":
            self.error = f"reference side did not finish within {timeout:g} s"
            self.error_status = "timeout"
        else:
            self.error = f"reference side: {exc.detail}: {_last_line(self.worker.log_tail())}"
            self.error_status = "crashed"

    def verify(self, files: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.worker.send({"op": "verify", "files": files})
        message = self.worker.recv(time.monotonic() + self.ctx.cfg.reference_timeout)
        if message.get("kind") != "verified":
            raise WorkerExit("protocol", None, f"reference answered {message.get('kind')!r} to verify")
        return message["results"]

    def check_fingerprints(self, path: str) -> dict[str, Any]:
        self.worker.send({"op": "fingerprints", "path": path})
        message = self.worker.recv(time.monotonic() + self.ctx.cfg.reference_timeout)
        if message.get("kind") != "fingerprints":
            raise WorkerExit("protocol", None, f"reference answered {message.get('kind')!r} to fingerprints")
        return message

    def healthy(self) -> bool:
        if self.error is not None:
            return False
        try:
            self.worker.send({"op": "health"})
            return bool(self.worker.recv(time.monotonic() + 60).get("ok"))
        except WorkerExit:
            return False

    def close(self) -> None:
        self.worker.close()


def _timing_job(cfg: Config) -> dict[str, Any]:
    t = cfg.timing
    return {"warmup": t.warmup, "samples": t.samples, "flush_l2": t.flush_l2}


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def run_pair(pair: Pair, record: dict[str, Any], reference: ReferenceSide, ctx: Context, slot: Slot,
             problem_dir: Path, spares: SpareWorkers) -> None:
    cfg = ctx.cfg
    build = ctx.builds[pair.candidate.id]
    pair_dir = problem_dir / slug(pair.candidate.id.rsplit("/", 1)[-1])
    pair_dir.mkdir(parents=True, exist_ok=True)
    worker = spares.take("candidate", ctx.log_dir / f"{slug(pair.candidate.id)}.log")
    started = time.monotonic()
    deadline = started + cfg.timeout
    env = {**build_env(Path(build.build_dir), ctx.toolchain), "TRITON_CACHE_DIR": str(pair_dir / "triton")}
    worker.send({"env": env, "problem_path": str(pair.problem.path.resolve()),
                 "candidate_path": build.candidate_path, "device": slot.device, "seed": cfg.seed,
                 "trials": cfg.trials, "timing": _timing_job(cfg),
                 "scratch": str(pair_dir), "state_path": str(reference.state_path), "defenses": cfg.defenses})
    try:
        _drive(worker, record, reference, deadline, ctx.ceilings.get(slot.name, {}))
    except WorkerExit as exc:
        if exc.kind == "timeout":
            finish(record, "timeout", f"killed after the pair timeout of {cfg.timeout:g} s")
        else:
            finish(record, "crashed", f"{exc.detail}; last output: {_last_line(worker.log_tail())}")
    except Exception as exc:                           # noqa: BLE001 - one pair's fault must not end the run
        record["error_detail"] = traceback.format_exc()[-4000:]
        finish(record, "crashed", f"harness fault while evaluating this pair: {type(exc).__name__}: {exc}")
    finally:
        code = worker.close()
        record["worker"] = {"exit_code": code, "seconds": round(time.monotonic() - started, 3),
                            "log_tail": None if record["status"] == "ok" else worker.log_tail()}
        if record["status"] in ("crashed", "timeout", "oom", "runtime_error"):
            record["worker"]["device_usable_after"] = reference.healthy()
        shutil.rmtree(pair_dir, ignore_errors=True)


def _drive(worker: Worker, record: dict[str, Any], reference: ReferenceSide, deadline: float,
           ceilings: dict[str, float]) -> None:
    message = worker.recv(deadline)
    if message.get("kind") == "failed":
        finish(record, message.get("status", "crashed"), message.get("error"))
        record["error_detail"] = message.get("detail")
        return
    if message.get("kind") != "outputs":
        raise WorkerExit("protocol", None, f"worker sent {message.get('kind')!r}: {message.get('error')}")
    results = reference.verify(_files(message))
    record["correctness"] = _correctness(results, message, reference.info, reference.ctx.cfg)
    _flag_from(record, message)
    failing = [r for r in results if not r["ok"]]
    if failing:
        worker.send({"op": "exit"})
        first = failing[0]
        hint = f"{first['hint']}; " if first.get("hint") else ""
        reason = f"{first['label'].replace('trial', 'trial ')}: {hint}{first['reason']}"
        if "unsynchronized_work" in record["flags"]:          # the values checked were not the final ones
            finish(record, "invalid", f"unsynchronized_work: {_FLAG_DETAILS['unsynchronized_work']}; {reason}")
        else:
            finish(record, "incorrect", reason)
        return
    worker.send({"op": "time"})
    message = worker.recv(deadline)
    if message.get("kind") == "failed":
        finish(record, message.get("status", "crashed"), message.get("error"))
        return
    if message.get("kind") != "timed":
        raise WorkerExit("protocol", None, f"worker sent {message.get('kind')!r} while timing")
    _timing(record, message, reference)
    _flag_from(record, message)
    _check_timed_outputs(record, message, reference)
    _check_kernels(record, message.get("profile"))
    _check_physics(record, reference.info.get("work"), ceilings)
    invalid = [f for f in record["flags"] if f in INVALIDATING_FLAGS]
    if invalid:
        finish(record, "invalid", f"{invalid[0]}: {record.get('flag_details', {}).get(invalid[0], '')}".rstrip(": "))
    else:
        finish(record, "ok")


_FLAG_DETAILS = {
    "mutates_inputs": "the candidate changed its input tensors",
    "unsynchronized_work": "outputs kept changing after the call returned and the device was idle",
    "output_not_plain_tensor": "the call returned a tensor subclass or lazy object, not a plain tensor",
    "tampered_timer": "candidate code replaced clock functions",
}


def _flag(record: dict[str, Any], flag: str, detail: str) -> None:
    add_flag(record, flag)
    record.setdefault("flag_details", {})[flag] = detail


def _flag_from(record: dict[str, Any], message: dict[str, Any]) -> None:
    for key in ("mutates_inputs", "unsynchronized_work", "output_not_plain_tensor"):
        if message.get(key):
            _flag(record, key, _FLAG_DETAILS[key])
    tampered = message.get("tampered_timers")
    if tampered:
        _flag(record, "tampered_timer", f"{_FLAG_DETAILS['tampered_timer']}: {', '.join(map(str, tampered))}")


def _check_timed_outputs(record: dict[str, Any], message: dict[str, Any], reference: ReferenceSide) -> None:
    if not reference.ctx.cfg.defenses:
        return
    full = reference.verify(_files(message))
    path = message.get("fingerprints")
    sampled = reference.check_fingerprints(str(path)) if path else {"checked": 0, "failed": None,
                                                                    "reason": "no fingerprints sent"}
    record["correctness"]["timed_outputs_checked"] = sampled.get("checked", 0)
    record["correctness"]["timed_outputs_full_checked"] = len(full)
    bad_full = next((r for r in full if not r["ok"]), None)
    expected_samples = reference.ctx.cfg.timing.samples
    if bad_full is not None:
        _flag(record, "output_changed_under_timing", f"{bad_full['label']}: {bad_full['reason']}")
    elif sampled.get("failed") is not None or sampled.get("checked") != expected_samples:
        _flag(record, "output_changed_under_timing", sampled.get("reason") or "timed outputs were not all checked")


def _check_kernels(record: dict[str, Any], profile: Any) -> None:
    if not isinstance(profile, dict):
        return
    record["kernels"] = {k: profile.get(k) for k in ("kernels", "custom_kernels", "custom_share", "other_kernels")}
    if not profile.get("custom_kernels"):
        _flag(record, "no_custom_kernel",
              "no GPU kernel from the candidate's own extension or Triton kernels ran during a profiled call")


def _check_physics(record: dict[str, Any], work: Any, ceilings: dict[str, float]) -> None:
    """Achieved rates for every timed pair; `faster_than_physics` below 60% of the roofline floor (the floor
    uses the measured copy bandwidth and the bf16 tensor-core rate, the fastest the device goes; the 40% margin
    covers output writes that stay in the 60 MB L2 and copy-measured bandwidth under the true peak)."""
    cand = (record.get("timing") or {}).get("candidate") or {}
    ms = cand.get("median_ms")
    if not isinstance(work, dict) or not ms:
        return
    flops, moved = work.get("flops"), work.get("bytes")
    perf: dict[str, Any] = {"flops": flops, "bytes": moved, "ceilings": ceilings or None,
                            "achieved_tflops": flops / (ms * 1e-3) / 1e12 if flops else None,
                            "achieved_gbps": moved / (ms * 1e-3) / 1e9 if moved else None}
    bw, peak = ceilings.get("copy_gbps"), ceilings.get("matmul_tflops_bf16")
    if bw and peak:
        floor_ms = max((flops or 0) / (peak * 1e12), (moved or 0) / (bw * 1e9)) * 1e3
        perf.update(floor_ms=floor_ms,
                    pct_of_peak_bandwidth=100 * perf["achieved_gbps"] / bw if perf["achieved_gbps"] else None,
                    pct_of_peak_flops=100 * perf["achieved_tflops"] / peak if perf["achieved_tflops"] else None)
        if ms < 0.6 * floor_ms:
            _flag(record, "faster_than_physics", f"{ms:.4f} ms is under 60% of the roofline floor {floor_ms:.4f} ms")
    record["performance"] = perf


def _files(message: dict[str, Any]) -> list[dict[str, Any]]:
    files = message.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) and {"label", "path", "trial"} <= f.keys()
                                              for f in files):
        raise WorkerExit("protocol", None, "worker sent a malformed file list")
    return [{"label": str(f["label"]), "path": str(f["path"]), "trial": int(f["trial"])} for f in files]


def _number(value: Any) -> float | None:
    """A number from a worker message: JSON carries NaN/Inf as the strings 'nan'/'inf'; anything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def _largest(values: list[Any]) -> float | None:
    numbers = [v for v in map(_number, values) if v is not None]
    if any(v != v for v in numbers):
        return float("nan")
    return max(numbers, default=None)


def _correctness(results, message, info, cfg: Config) -> dict[str, Any]:
    passed = sum(1 for r in results if r["ok"])
    first_bad = next((r for r in results if not r["ok"]), None)
    return {
        "trials": len(results), "trials_passed": passed,
        "max_abs_err": _largest([r.get("max_abs_err") for r in results]),
        "max_rel_err": _largest([r.get("max_rel_err") for r in results]),
        "atol": info.get("atol"), "rtol": info.get("rtol"), "dtype": info.get("dtype"),
        "first_mismatch": first_bad and {"trial": first_bad["label"], "reason": first_bad["reason"],
                                         **(first_bad.get("first_mismatch") or {})},
        "param_match": message.get("param_match"), "module_mode": message.get("module_mode"),
        "fp64_max_abs_err": next((r.get("fp64_max_abs_err") for r in results if r["label"] == "trial0"), None),
        "fp64_reference_max_abs_err": info.get("fp64_reference_max_abs_err"),
        "reference_module_mode": info.get("module_mode"), "seed": cfg.seed,
    }


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def _timing(record: dict[str, Any], message: dict[str, Any], reference: ReferenceSide) -> None:
    cand = message.get("timing")
    if not isinstance(cand, dict) or not _positive(cand.get("median_ms")) or not isinstance(cand.get("samples_ms"), list):
        raise WorkerExit("protocol", None, "worker sent timing without a positive median and its samples")
    ref = reference.info.get("timing") or {}
    record["timing"] = {"clock": cand.get("clock"), "l2_flush": cand.get("l2_flush"),
                        "timer_floor_ms": reference.info.get("timer_floor_ms"),
                        "reference": ref, "candidate": cand}
    if ref.get("median_ms") and cand.get("median_ms"):
        record["speedup"] = ref["median_ms"] / cand["median_ms"]
