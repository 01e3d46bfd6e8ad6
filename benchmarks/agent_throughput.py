"""Issue 45 item 3's throughput: verdicts per GPU-minute for N candidates of one problem (default 32 of a shipped
level-2 problem), through harness.api.iter_evaluate, against a loop of KernelBench's own eval_kernel_against_ref
over the same candidates on the same GPU.

The candidates. N variations of one honest shipped candidate (default: level2/014_gemm_min_constant_subtract's
triton_min_sub_epilogue, whose kernel compiles in seconds; `--candidate` for another): the same code with a comment
line naming its variant at the top of the file and as the first line of every `@triton.jit` function's body, so
that each is a distinct build for us (the build key hashes the source), a distinct load_inline build for
KernelBench (its build_dir hashes the source), and a distinct Triton compile on both sides (Triton's cache key
hashes the kernel's source). The variant names carry a nonce of this invocation, so no cache of an earlier one
is hit.

* ours: `harness.api.iter_evaluate(problem_file, {name: source, ...})` with the repository's config.yaml, one GPU
  (gpus [0]), `--compile-modes none` (KernelBench's eval has no torch.compile baseline either), a fresh cache_dir
  and output folder under the work folder: every candidate is built (in parallel, as a run builds) and measured in
  a fresh confined worker against one reference worker, with every defense, until its CI or the time cap. Wall: from
  the call to the last record (builds included; `import harness.api` before it, not timed).
* KernelBench: one process that imports `kernelbench.eval` (not timed: an agent's loop imports it once) and then,
  candidate after candidate, calls `eval_kernel_against_ref(ref, candidate, num_correct_trials=5,
  num_perf_trials=100, measure_performance=True, timing_method="cuda_event", backend=triton|cuda,
  precision=fp32, device=cuda:0, build_dir=<per source>)`; by its default check_for_excessive_speedup it also times
  the reference, so each result has a speedup (ref_runtime / runtime). A fresh TRITON_CACHE_DIR. Wall: the loop.
  The checkout, the carried wheels and the stubs come from benchmarks/vs_kernelbench.py (its helpers, imported).

Printed: each verdict as it comes (seconds since the side's start), then per side the verdicts, how many are `ok`
(ours) or correct (KernelBench), the wall seconds, verdicts per GPU-minute (verdicts / (wall / 60) / 1 GPU), and
the ratio ours / KernelBench (issue 45's target: >= 3x, every candidate `ok`). Nothing is asserted.

How to run it:

    # here (with network), once, as for vs_kernelbench.py: .kbsrc/kernelbench-<commit>.tar.gz and the wheels in .whl
    python benchmarks/vs_kernelbench.py --pack
    # on the GPU machine (carry .kbsrc and .whl), about 5-8 minutes for 32 candidates
    python benchmarks/agent_throughput.py --wheels .whl --json $OUT/throughput.json
    bash scripts/gpu_check.sh throughput                                   # the same, as a gpu_check phase
    # CUDA candidates, which KernelBench's loop compiles one after another (load_inline, tens of seconds each): its
    # rate from what it finished in 240 s
    python benchmarks/agent_throughput.py --wheels .kbw --candidate \
        solutions/level2/001_gemm_relu_scale/cuda_fused_relu_scale.py --kb-seconds 240
    # here, on the CPU: 3 variants of examples/cpu's C++ relu_scale; KernelBench's side only loads each candidate
    # and compares one forward on the CPU (its eval needs CUDA), or is skipped, saying why
    python benchmarks/agent_throughput.py --device cpu --count 3 --wheels /tmp/kbwhl
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO, REPO / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
import vs_kernelbench as vkb  # noqa: E402 - KernelBench's checkout, wheels, stubs and trial counts

DEFAULT_CANDIDATE = {
    "cuda": REPO / "solutions/level2/014_gemm_min_constant_subtract/triton_min_sub_epilogue.py",
    "cpu": REPO / "examples/cpu/solutions/level1/001_relu_scale/cpp_loop.py",
}
KB_TIMEOUT_S = 3600


# ------------------------------------------------------------------------------------------------ the candidates


def problem_of(candidate: Path) -> Path:
    """<tree>/solutions/<level>/<problem>/<name>.py -> <tree>/problems/<level>/<problem>.py"""
    level, problem = candidate.parent.parent.name, candidate.parent.name
    return candidate.parents[3] / "problems" / level / f"{problem}.py"


def mark(source: str, label: str) -> str:
    """`source` with a comment naming `label` on its first line and as the first line of each @triton.jit body."""
    inserts = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and any(is_triton_jit(d) for d in node.decorator_list):
            first = node.body[0]
            if first.lineno > node.lineno:                 # not `def f(): ...` on one line
                inserts[first.lineno - 1] = " " * first.col_offset + f"# {label}\n"
    out = [f"# {label}: the candidate below, unchanged; a distinct build\n"]
    for number, line in enumerate(source.splitlines(keepends=True)):
        out += [inserts[number]] if number in inserts else []
        out.append(line)
    return "".join(out)


def is_triton_jit(decorator: ast.expr) -> bool:
    """@triton.jit, @triton.jit(...), or @jit (from triton)."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target) in ("triton.jit", "jit")


def variants(candidate: Path, count: int, nonce: str) -> dict[str, str]:
    source = candidate.read_text()
    return {f"v{i:03d}_{candidate.stem}": mark(source, f"agent_throughput {nonce} variant {i:03d}")
            for i in range(count)}


# ------------------------------------------------------------------------------------------------ our side


def ours(problem: Path, candidates: dict[str, str], args: argparse.Namespace, work: Path,
         side: dict[str, Any]) -> None:
    """Every candidate through harness.api.iter_evaluate, into `side` as each verdict comes (printed): a side cut
    short keeps its verdicts so far, its wall_s the time of the last one."""
    from harness.api import iter_evaluate
    overrides: dict[str, Any] = {"device": args.device, "output_dir": str(work / "ours-results"),
                                 "cache_dir": str(work / "ours-cache"), "timing": {"compile_modes": []}}
    if args.device == "cuda":
        overrides["gpus"] = [0]
    if args.max_pair_seconds is not None:
        overrides["timing"]["max_pair_seconds"] = args.max_pair_seconds
    side.update(rows=[], ok=0, wall_s=None, complete=False)
    started = time.monotonic()
    try:
        for record in iter_evaluate(problem, candidates, config=REPO / "config.yaml", overrides=overrides):
            at = time.monotonic() - started
            side["rows"].append({"candidate": record.candidate, "status": record.status.value,
                                 "speedup": record.speedup, "speedup_ci": record.speedup_ci,
                                 "flags": list(record.flags), "error": record.error, "at_s": at,
                                 "run_id": record.run_id})
            side.update(wall_s=at, ok=side["ok"] + record.ok)
            print(f"  ours {record.candidate:44} {record.status.value:14} speedup {vkb.fmt(record.speedup)} "
                  f"{vkb.fmt_ci(list(record.speedup_ci) if record.speedup_ci else None):>17}  at {at:6.1f} s"
                  + (f"  {record.error[:150]}" if record.error else ""), flush=True)
    except Exception as exc:                      # noqa: BLE001 - said, and the other side still runs
        side["error"] = f"{type(exc).__name__}: {exc}"
        return
    side.update(wall_s=time.monotonic() - started, complete=True, run=run_phases(side["rows"], work))


def run_phases(rows: list[dict[str, Any]], work: Path) -> dict[str, Any] | None:
    """The run's build_seconds and wall_seconds, from its run.json."""
    run_id = next((r["run_id"] for r in rows if r.get("run_id")), None)
    path = work / "ours-results" / str(run_id) / "run.json"
    if not path.is_file():
        return None
    meta = json.loads(path.read_text())
    return {k: meta.get(k) for k in ("run_id", "build_seconds", "wall_seconds", "builds_compiled", "builds_cached")}


# ------------------------------------------------------------------------------------------------ KernelBench's side


def kernelbench(problem_src: str, candidates: dict[str, str], args: argparse.Namespace, work: Path,
                side: dict[str, Any]) -> None:
    """KernelBench's checkout and its process over the candidates, into `side`; {"skipped": why} where it cannot
    run."""
    try:
        kb, commit = vkb.checkout(args.kb_root, args.kb_tar, work / "kb-checkout")
        site, stubs = work / "kbsite", work / "kbstubs"
        installed = vkb.install_wheels(args.wheels, site)
        vkb.write_stubs(stubs)
        carried_first, _ = vkb.check_kb(kb, [site, stubs], work, bool(installed))
    except (SystemExit, subprocess.CalledProcessError, OSError) as exc:
        side["skipped"] = f"KernelBench unavailable: {exc}"
        return
    spec = {"kb_src": str(kb / "src"), "extra_paths": [str(site), str(stubs)], "carried_first": carried_first,
            "problem_src": problem_src, "candidates": candidates, "device": args.device,
            "build_root": str(work / "kb-builds")}
    spec_path = work / "kb-spec.json"
    spec_path.write_text(json.dumps(spec))
    side.update(commit=commit, wheels=installed, carried_first=carried_first)
    print(f"KernelBench {commit}: one process, {len(candidates)} candidates", flush=True)
    kb_process(spec_path, work, side, args.kb_seconds or KB_TIMEOUT_S)


def kb_process(spec_path: Path, work: Path, side: dict[str, Any], limit_s: float = KB_TIMEOUT_S) -> None:
    """The KernelBench worker (this file, --kb-worker), its marked lines read into `side` as they come, killed after
    `limit_s`: a side cut short keeps its verdicts so far, its wall_s the loop's time at the last one (its loop is
    serial, so its rate over the first N candidates is its rate over all of them)."""
    env = {**os.environ, "TRITON_CACHE_DIR": str(work / "kb-triton-cache")}
    side.update(rows=[], correct=0, wall_s=None, complete=False)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--kb-worker", str(spec_path)],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    cut = threading.Event()
    watchdog = threading.Timer(limit_s, lambda: (cut.set(), proc.kill()))
    watchdog.start()
    try:
        for line in proc.stdout:                  # KernelBench prints a lot: only the marked lines are ours
            tail = (tail + [line])[-40:]
            if line.startswith(vkb.RESULT_MARK):
                take_kb_line(json.loads(line[len(vkb.RESULT_MARK):]), side)
        proc.wait()
    finally:
        watchdog.cancel()
        side.update(process_s=time.monotonic() - started, exit=proc.poll())
    if not side["complete"] and not cut.is_set():      # cut by the limit: no error, the rate over what it finished
        side["error"] = "the KernelBench process ended before its loop did: " + "".join(tail)[-2000:]


def take_kb_line(item: dict[str, Any], side: dict[str, Any]) -> None:
    """One marked line of the KernelBench worker: a candidate's verdict (printed), or the loop's end."""
    if "loop_s" in item:
        side.update(wall_s=item["loop_s"], import_s=item["import_s"], complete=True)
        return
    side["rows"].append(item)
    side.update(wall_s=item.get("at_s"), correct=side["correct"] + bool(item.get("correct")))
    print(f"  KB   {item['candidate']:44} {kb_verdict(item):14} speedup {vkb.fmt(item.get('speedup'))} "
          f"eval {item.get('eval_s', 0):5.1f} s  at {item.get('at_s', 0):6.1f} s"
          + (f"  {str(item.get('error'))[:150]}" if item.get("error") else ""), flush=True)


def kb_verdict(item: dict[str, Any]) -> str:
    if item.get("error") and not item.get("compiled"):
        return "error"
    return "correct" if item.get("correct") else ("compiled" if item.get("compiled") else "not compiled")


def kb_worker(spec_path: str) -> None:
    """In KernelBench's process (sys.path as vs_kernelbench's worker sets it): import once, then each candidate."""
    spec = json.loads(Path(spec_path).read_text())
    here = Path(__file__).resolve().parent       # benchmarks/: not on a KernelBench user's path
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() not in (here, REPO)]
    sys.path.insert(0, spec["kb_src"])
    if spec["carried_first"]:
        sys.path[1:1] = spec["extra_paths"]
    else:
        sys.path.extend(spec["extra_paths"])
    started = time.monotonic()
    import torch
    from kernelbench import eval as kernel_eval
    import_s = time.monotonic() - started
    loop_started = time.monotonic()
    for name, source in spec["candidates"].items():
        t0 = time.monotonic()
        build_dir = os.path.join(spec["build_root"], str(abs(hash(source))))
        if spec["device"] == "cuda":
            row = kb_eval(torch, kernel_eval, spec["problem_src"], source, build_dir)
        else:
            row = kb_cpu_check(torch, kernel_eval, spec["problem_src"], source, build_dir)
        row.update(candidate=name, eval_s=time.monotonic() - t0, at_s=time.monotonic() - loop_started)
        print(vkb.RESULT_MARK + json.dumps(row, default=str), flush=True)
    print(vkb.RESULT_MARK + json.dumps({"loop_s": time.monotonic() - loop_started, "import_s": import_s}), flush=True)


def backend_of(source: str) -> str:
    return "triton" if re.search(r"^\s*(import|from)\s+triton\b", source, re.M) else "cuda"


def kb_eval(torch, kernel_eval, ref_src: str, source: str, build_dir: str) -> dict[str, Any]:
    """eval_kernel_against_ref as vs_kernelbench.kb_eval_pair calls it, with the candidate's backend."""
    try:
        result = kernel_eval.eval_kernel_against_ref(
            original_model_src=ref_src, custom_model_src=source, measure_performance=True,
            timing_method="cuda_event", verbose=False, num_correct_trials=vkb.NUM_CORRECT_TRIALS,
            num_perf_trials=vkb.NUM_PERF_TRIALS, build_dir=build_dir, device=torch.device("cuda:0"),
            backend=backend_of(source), precision=kernel_eval.get_torch_dtype_from_string("fp32"))
    except Exception as exc:                      # run_and_check's "last level catch"
        return {"error": f"eval_kernel_against_ref raised {type(exc).__name__}: {exc}"}
    if result is None:
        return {"error": "eval_kernel_against_ref returned None (lock file error)"}
    runtime = result.runtime if result.runtime and result.runtime > 0 else None
    ref = result.ref_runtime if result.ref_runtime and result.ref_runtime > 0 else None
    return {"compiled": result.compiled, "correct": bool(result.correctness), "runtime_ms": runtime,
            "ref_runtime_ms": ref, "speedup": ref / runtime if ref and runtime and result.correctness else None,
            "error": None if result.correctness else str(result.metadata)[:500]}


def kb_cpu_check(torch, kernel_eval, ref_src: str, source: str, build_dir: str) -> dict[str, Any]:
    """Short of CUDA (KernelBench's eval asserts it): both sources through its loaders, one forward each on the CPU,
    compared with its fp32 tolerance."""
    try:
        context: dict[str, Any] = {}
        model, init_inputs, get_inputs = kernel_eval.load_original_model_and_inputs(ref_src, context)
        os.makedirs(build_dir, exist_ok=True)
        model_new = kernel_eval.load_custom_model(source, context, build_dir)
        kernel_eval.set_seed(42)
        init = init_inputs()
        kernel_eval.set_seed(42)
        ref_model = model(*init)
        kernel_eval.set_seed(42)
        new_model = model_new(*init)
        kernel_eval.set_seed(42)
        inputs = get_inputs()
        with torch.no_grad():
            expected, got = ref_model(*inputs), new_model(*inputs)
        tol = kernel_eval.get_tolerance_for_precision("fp32")
        correct = bool(torch.allclose(expected, got, atol=tol, rtol=tol))
    except Exception as exc:                      # noqa: BLE001 - recorded as the candidate's error
        return {"compiled": False, "correct": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"compiled": True, "correct": correct, "speedup": None, "error": None if correct else "not allclose"}


# ------------------------------------------------------------------------------------------------ the summary


def per_gpu_minute(verdicts: int, wall_s: float | None, gpus: int = 1) -> float | None:
    return verdicts / (wall_s / 60.0) / gpus if wall_s else None


def rate(side: dict[str, Any]) -> float | None:
    return per_gpu_minute(len(side.get("rows") or []), side.get("wall_s"))


def side_line(name: str, side: dict[str, Any], ok: int) -> str:
    cut = "" if side.get("complete") else "   (cut short: the rate over its verdicts so far)"
    return (f"  {name:12} {len(side.get('rows') or []):>8} {ok:>5} {vkb.fmt(side.get('wall_s'), 8, 1)} "
            f"{vkb.fmt(rate(side), 17, 2)}{cut}")


def summary(report: dict[str, Any]) -> list[str]:
    o, k = report["ours"], report["kb"]
    where = "1 GPU" if report["device"] == "cuda" else "1 CPU slot, counted as a GPU"
    lines = [f"{report['count']} candidates of {report['problem']} ({report['device']}, {where}):",
             f"  {'side':12} {'verdicts':>8} {'ok':>5} {'wall s':>8} {'verdicts/GPU-min':>17}",
             side_line("ours", o, o.get("ok", 0))]
    if "skipped" in k:
        lines.append(f"  KernelBench: skipped ({k['skipped']})")
    else:
        lines.append(side_line("KernelBench", k, k.get("correct", 0)))
        what = "its eval" if report["device"] == "cuda" else "on the CPU only loaded, one forward compared: no eval"
        lines.append(f"  (KernelBench: ok = correct; wall = its loop; its process {vkb.fmt(k.get('process_s'), 0, 1)} "
                     f"s with the import {vkb.fmt(k.get('import_s'), 0, 1)} s; {what})")
    ratio = rate(o) / rate(k) if rate(o) and rate(k) else None
    lines.append(f"  ratio ours / KernelBench: {vkb.fmt(ratio, 0, 3)}x (issue 45's target: >= 3x, every candidate ok)")
    run = o.get("run") or {}
    if run:
        lines.append(f"  ours: builds {run.get('build_seconds')} s of the run's {run.get('wall_seconds')} s (compiled "
                     f"{run.get('builds_compiled')}, cached {run.get('builds_cached')}); run {run.get('run_id')}")
    lines += [f"  error: {side['error'][-1500:]}" for side in (o, k) if side.get("error")]
    return lines


# ------------------------------------------------------------------------------------------------ main


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--count", type=int, default=32, help="candidates (default 32)")
    p.add_argument("--candidate", type=Path, help="the candidate to vary (default: level2/014's Triton epilogue; "
                                                  "CPU: examples/cpu's relu_scale cpp_loop)")
    p.add_argument("--problem", type=Path, help="its problem file (default: from the candidate's path)")
    p.add_argument("--order", choices=("kb-first", "ours-first"), default="kb-first")
    p.add_argument("--skip-kb", action="store_true", help="ours only")
    p.add_argument("--max-pair-seconds", type=float, help="our time cap per pair (default: the config's)")
    p.add_argument("--kb-root", type=Path, help="as vs_kernelbench.py: a KernelBench work tree or git directory")
    p.add_argument("--kb-tar", type=Path, help="as vs_kernelbench.py (default: the newest in .kbsrc/)")
    p.add_argument("--wheels", type=Path, help="folder of vs_kernelbench.py's KB_WHEELS (default: none installed)")
    p.add_argument("--workdir", type=Path, help="keep the work here (default: a temporary folder, removed)")
    p.add_argument("--json", type=Path, help="save every figure here")
    p.add_argument("--kb-seconds", type=float, help="stop KernelBench's loop after this many seconds and take its rate "
                                                    "over the verdicts so far (CUDA candidates: tens of seconds each)")
    p.add_argument("--kb-worker", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def save(path: Path | None, report: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def run_sides(args: argparse.Namespace, work: Path, report: dict[str, Any]) -> None:
    """Both sides, in --order, into `report` (saved after each: a run cut short keeps the side it finished)."""
    candidate = (args.candidate or DEFAULT_CANDIDATE[args.device]).resolve()
    problem = (args.problem or problem_of(candidate)).resolve()
    nonce = secrets.token_hex(3)
    candidates = variants(candidate, args.count, nonce)
    report.update(problem=str(problem.relative_to(REPO) if problem.is_relative_to(REPO) else problem),
                  candidate=str(candidate), count=args.count, device=args.device, nonce=nonce,
                  kb={"skipped": "--skip-kb"}, ours={})
    print(f"{args.count} variants of {candidate.name} against {report['problem']} (nonce {nonce})", flush=True)
    sides = ["kb", "ours"] if args.order == "kb-first" else ["ours", "kb"]
    for side in sides:
        if side == "ours":
            print("ours: harness.api.iter_evaluate", flush=True)
            ours(problem, candidates, args, work, report["ours"])
        elif not args.skip_kb:
            report["kb"] = {}
            kernelbench(problem.read_text(), candidates, args, work, report["kb"])
            if "skipped" in report["kb"]:
                print(f"KernelBench: skipped ({report['kb']['skipped']})", flush=True)
        save(args.json, report)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.kb_worker:
        kb_worker(args.kb_worker)
        return 0
    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="agent_throughput-")
    work = args.workdir.resolve() if args.workdir else Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    try:
        run_sides(args, work, report)
    except KeyboardInterrupt:
        print("interrupted: the sides that finished follow", flush=True)
    finally:
        if report.get("ours") is not None:
            print("\n".join(summary(report)), flush=True)
        save(args.json, report)
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
