"""Wall time of KernelBench's own eval against ours on the same 8 A/A pairs, back to back on one GPU machine.

What it measures: the 8 KernelBench problems in PROBLEMS (3 of level 1, 3 of level 2, 2 of level 3), each paired
with itself (the candidate is the problem's own source plus `class ModelNew(Model): pass`, the same text on both
sides), evaluated

* by KernelBench, as its `scripts/run_and_check.py` runs a pair locally: per pair a fresh Python process that
  imports `kernelbench`, reads the problem through its local dataset, runs its static checker (its verdict is
  recorded, not asserted: the A/A candidate has no kernel and always fails it), calls
  `eval_kernel_against_ref(ref, candidate, num_correct_trials=5, num_perf_trials=100, measure_performance=True,
  timing_method="cuda_event", backend="cuda", precision=fp32, device=cuda:0, build_dir=...)` (which, by its
  default check_for_excessive_speedup, also times the reference 100 times) and then times the reference eagerly
  with `timing.measure_ref_program_time(num_trials=100, use_torch_compile=False)`;
  KB speedup = that reference mean / the candidate's `runtime` (run_and_check's "speedup over eager"). Wall time
  per pair: the process, start to exit, from here; KB total: the 8 processes one after another.
  Left out on purpose: run_and_check's torch.compile baseline (no compile baselines on either side) and its
  imports of `modal` and `pydra` (not needed to run a pair; they would only add to KernelBench's time).
* by us, as a default run does: one `run_eval.py` over a solutions tree holding the 8 candidates, with the
  repository's config.yaml but a fresh build cache and output folder (so nothing cached from an earlier repeat and
  the default between-process term), `--compile-modes none`. Wall time: the CLI, start to exit (builds included).
  Per pair the table shows the record's `worker.phases` (`reference_setup` + `total`): they run inside the one
  CLI, so they do not add up to its wall. Our speedup: the record's, with its 95% CI.

Neither side's timing is asserted; the figures are printed (and saved with --json). Preparation (extracting the
KernelBench checkout, installing the carried wheels, importing the 8 problems with `run_eval.py
import-kernelbench`, writing the candidates, one untimed import of `kernelbench.eval` that also writes its .pyc
files) is not timed. Repeats alternate the order: --order kb-first runs KB then ours, then ours then KB, ...

Imports: `import kernelbench.eval` needs (besides torch and numpy) pydantic and requests (eval.py itself), tqdm
and python-dotenv (`kernelbench/__init__` -> `utils`), and `openai` and `litellm` (`utils` imports them for its
LLM queries, which an eval never calls). The first four and their own needs (pydantic-core, annotated-types,
typing-inspection, typing-extensions, urllib3, idna, charset-normalizer, certifi) are carried as wheels
(KB_WHEELS, 12 packages) and installed, untimed, into the work folder; openai and litellm are replaced by two
one-line stub modules written there (STUBS). Both folders go at the END of sys.path, in KernelBench's processes
only, so what the machine already has wins (unless that fails to import: the untimed check then puts them first
and says so) and our harness never sees them. KernelBench's src/ goes first on sys.path (kernelbench itself is
not pip-installed). Written against KernelBench 423217d9fda91e0c2d67e4a43bf62f96f6d104f1 (2026-03-05).

How to run it:

    # here (with network), once: the KernelBench checkout as a tarball in .kbsrc/ and the wheels in .whl/
    python benchmarks/vs_kernelbench.py --pack [--kb-root /path/to/KernelBench/git-dir-or-worktree]
    # on the GPU machine (carry .kbsrc and .whl): prepare, then KB, then ours, then the table
    python3 benchmarks/vs_kernelbench.py --wheels .whl --repeats 2 --order kb-first --json $OUT/vs_kb.json
    # here, without CUDA: everything short of running the pairs
    python benchmarks/vs_kernelbench.py --dry-run --kb-root /work/.mirror/ScalingIntelligence+KernelBench/repo

--kb-root takes a KernelBench work tree (src/kernelbench/eval.py in it) or its bare git directory (the HEAD commit
is extracted); without it the newest .kbsrc/kernelbench-<commit>.tar.gz is used. The commit is printed and saved.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# (level, KernelBench problem id, file stem): modest eager forwards (inputs + outputs + weights, fp32)
PROBLEMS: tuple[tuple[int, int, str], ...] = (
    (1, 1, "1_Square_matrix_multiplication_"),        # 4096^2 matmul: 128 MiB in, 64 MiB out
    (1, 40, "40_LayerNorm"),                          # 256 MiB in and out
    (1, 88, "88_MinGPTNewGelu"),                      # elementwise, 256 MiB in and out
    (2, 1, "1_Conv2D_ReLU_BiasAdd"),                  # conv2d, 512 MiB in, ~1 GiB out
    (2, 12, "12_Gemm_Multiply_LeakyReLU"),            # 1024 x 8192 x 8192 GEMM, 256 MiB of weights
    (2, 40, "40_Matmul_Scaling_ResidualAdd"),         # 16384 x 4096 x 4096, 256 MiB in and out
    (3, 4, "4_LeNet5"),                               # small convnet, 16 MiB in
    (3, 44, "44_MiniGPTBlock"),                       # transformer block, 192 MiB in, 1 GiB attention scores
)
NUM_CORRECT_TRIALS = 5
NUM_PERF_TRIALS = 100
CANDIDATE = "aa_kb_same"           # our candidate's file stem (an aa_* control: it runs like any candidate)
DEFAULT_MIRROR = Path("/work/.mirror/ScalingIntelligence+KernelBench/repo")
KBSRC_DIR = REPO / ".kbsrc"
RESULT_MARK = "VS_KB_RESULT "      # prefixes the KB worker's one JSON line on stdout (KernelBench prints a lot)
KB_PAIR_TIMEOUT_S = 900

# pure-Python (and pydantic-core's binary) wheels `kernelbench.eval` needs beyond torch and numpy; pydantic 2.11
# asks typing-extensions >= 4.12.2 only, which an older one already on the GPU machine (it wins) satisfies
KB_WHEELS = ("pydantic==2.11.9", "pydantic-core==2.33.2", "annotated-types==0.7.0", "typing-inspection==0.4.1",
             "typing-extensions==4.15.0", "requests==2.32.5", "urllib3==2.5.0", "idna==3.10",
             "charset-normalizer==3.4.3", "certifi==2025.8.3", "tqdm==4.67.1", "python-dotenv==1.1.1")
WHEEL_PYTHONS = ("3.12",)          # the GPU machine's; --pack adds this interpreter's for --dry-run here
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
STUBS = {   # kernelbench.utils imports these for its LLM queries (never called by an eval)
    "openai.py": '"""Stub (benchmarks/vs_kernelbench.py): kernelbench.utils imports it; an eval never calls it."""\n'
                 "class OpenAI:\n    def __init__(self, *a, **k):\n        raise RuntimeError('openai stub')\n",
    "litellm.py": '"""Stub (benchmarks/vs_kernelbench.py): kernelbench.utils imports it; an eval never calls it."""\n'
                  "def completion(*a, **k):\n    raise RuntimeError('litellm stub')\n",
}


def aa_source(problem_text: str) -> str:
    """The A/A candidate, the same text on both sides (as `run_eval.py calibrate` writes it)."""
    return f"{problem_text}\n\n\nclass ModelNew(Model):          # the A/A candidate: the reference itself\n    pass\n"


def pair_name(level: int, stem: str) -> str:
    return f"level{level}/{stem}"


def our_problem_id(level: int, pid: int, stem: str) -> str:
    """The id `import-kernelbench` gives the problem: kernelbench-level<L>/<NNN>_<name>."""
    return f"kernelbench-level{level}/{pid:03d}_{stem.split('_', 1)[1]}"


# ------------------------------------------------------------------------------------------------ the KB checkout


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def is_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def newest_tarball() -> Path | None:
    found = sorted(KBSRC_DIR.glob("kernelbench-*.tar.gz"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def extract_tarball(tar_path: Path, dest: Path) -> str:
    """Unpack a `git archive` tarball into dest; the commit from its pax header (or its file name)."""
    with tarfile.open(tar_path) as tar:
        tar.extractall(dest, filter="data")
        commit = tar.pax_headers.get("comment")
    return commit or tar_path.name.removeprefix("kernelbench-").removesuffix(".tar.gz")


def worktree_commit(root: Path) -> str:
    """HEAD of the work tree at root (not of a repository that merely holds the folder)."""
    try:
        if Path(git("-C", str(root), "rev-parse", "--show-toplevel")).resolve() == root:
            return git("-C", str(root), "rev-parse", "HEAD")
    except (subprocess.CalledProcessError, OSError):
        pass
    return "unknown (not a git work tree)"


def checkout(kb_root: Path | None, kb_tar: Path | None, dest: Path) -> tuple[Path, str]:
    """(a KernelBench work tree, its commit): kb_root used in place when it is a work tree, its HEAD extracted when it
    is a git directory; else the tarball (default: the newest in .kbsrc/)."""
    if kb_root is not None:
        if (kb_root / "src" / "kernelbench" / "eval.py").is_file():
            return kb_root.resolve(), worktree_commit(kb_root.resolve())
        if is_git_dir(kb_root):
            dest.mkdir(parents=True)
            archive = subprocess.run(["git", "--git-dir", str(kb_root), "archive", "HEAD"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
            return dest, git("--git-dir", str(kb_root), "rev-parse", "HEAD")
        raise SystemExit(f"{kb_root}: neither a KernelBench work tree nor its git directory")
    tar_path = kb_tar or newest_tarball()
    if tar_path is None:
        if is_git_dir(DEFAULT_MIRROR):
            return checkout(DEFAULT_MIRROR, None, dest)
        raise SystemExit("no KernelBench checkout: give --kb-root or --kb-tar, or run --pack first (.kbsrc/)")
    dest.mkdir(parents=True)
    return dest, extract_tarball(tar_path, dest)


def pack(kb_root: Path, wheels: Path) -> None:
    """Here, with network: .kbsrc/kernelbench-<commit>.tar.gz (git archive of HEAD) and KB_WHEELS in `wheels`."""
    if not is_git_dir(kb_root):
        kb_root = Path(git("-C", str(kb_root), "rev-parse", "--absolute-git-dir"))
    commit = git("--git-dir", str(kb_root), "rev-parse", "HEAD")
    KBSRC_DIR.mkdir(exist_ok=True)
    out = KBSRC_DIR / f"kernelbench-{commit}.tar.gz"
    git("--git-dir", str(kb_root), "archive", "--format=tar.gz", "-o", str(out), "HEAD")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    for version in dict.fromkeys(WHEEL_PYTHONS + (here,)):
        platforms = [a for p in WHEEL_PLATFORMS for a in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", version, "--implementation", "cp", *platforms, "-d", str(wheels),
                        *KB_WHEELS], check=True)
    size = sum(p.stat().st_size for p in wheels.glob("*.whl"))
    print(f"{out} ({out.stat().st_size / 2**20:.1f} MiB), commit {commit}")
    print(f"{wheels}/: {len(list(wheels.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB")


# ------------------------------------------------------------------------------------------------ preparation


def install_wheels(wheels: Path | None, site: Path) -> list[str]:
    """KB_WHEELS from `wheels` into `site` (pip picks each one's file for this interpreter); the names installed."""
    site.mkdir(parents=True, exist_ok=True)
    if wheels is None or not any(wheels.glob("*.whl")):
        return []
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-cache-dir",
                    "--disable-pip-version-check", "--target", str(site), "--find-links", str(wheels),
                    *KB_WHEELS], check=True)
    return list(KB_WHEELS)


def write_stubs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in STUBS.items():
        (folder / name).write_text(text)


def import_problems(kb: Path, work: Path) -> Path:
    """The 8 problems through `run_eval.py import-kernelbench` (from a checkout folder holding only them); the
    problems dir. Each imported file must be byte-for-byte KernelBench's."""
    subset = work / "kbsubset" / "KernelBench"
    for level, _, stem in PROBLEMS:
        (subset / f"level{level}").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kb / "KernelBench" / f"level{level}" / f"{stem}.py", subset / f"level{level}" / f"{stem}.py")
    problems = work / "problems"
    subprocess.run([sys.executable, str(REPO / "run_eval.py"), "import-kernelbench", str(subset.parent),
                    "--problems-dir", str(problems)], cwd=REPO, check=True, capture_output=True, text=True)
    for level, pid, stem in PROBLEMS:
        ours = problems / f"{our_problem_id(level, pid, stem)}.py"
        if ours.read_bytes() != (kb / "KernelBench" / f"level{level}" / f"{stem}.py").read_bytes():
            raise SystemExit(f"{ours}: not KernelBench's file byte for byte")
    return problems


def write_candidates(problems: Path, work: Path) -> Path:
    solutions = work / "solutions"
    for level, pid, stem in PROBLEMS:
        pid_ours = our_problem_id(level, pid, stem)
        folder = solutions / pid_ours
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{CANDIDATE}.py").write_text(aa_source((problems / f"{pid_ours}.py").read_text()))
    return solutions


def our_config(work: Path, problems: Path, solutions: Path, device: str) -> Path:
    """The repository's config.yaml with the trees, the device, and a fresh output folder and build cache."""
    import yaml
    base = REPO / "config.yaml"
    values = (yaml.safe_load(base.read_text()) or {}) if base.is_file() else {}
    values.update(problems_dir=str(problems), solutions_dir=str(solutions), output_dir=str(work / "results"),
                  cache_dir=str(work / "cache"), device=device)
    work.mkdir(parents=True, exist_ok=True)
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------------------ KernelBench's side


def kb_spec(kb: Path, extra_paths: list[Path], pairs: list[tuple[int, int, str]], dry_run: bool,
            carried_first: bool) -> dict[str, Any]:
    return {"kb_src": str(kb / "src"), "kb_dataset": str(kb / "KernelBench"),
            "extra_paths": [str(p) for p in extra_paths], "carried_first": carried_first,
            "pairs": [list(p) for p in pairs], "dry_run": dry_run}


def run_kb_worker(spec: dict[str, Any], cwd: Path) -> tuple[float, list[dict[str, Any]], str]:
    """One fresh process over spec's pairs: (wall seconds, its result lines, the tail of its output)."""
    cwd.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--kb-worker", json.dumps(spec)],
                              cwd=cwd, capture_output=True, text=True, timeout=KB_PAIR_TIMEOUT_S)
        out, rc = done.stdout, done.returncode
        err = done.stderr
    except subprocess.TimeoutExpired as exc:
        out, rc, err = exc.stdout or "", "timeout", exc.stderr or ""
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    wall = time.monotonic() - started
    results = [json.loads(line[len(RESULT_MARK):]) for line in out.splitlines() if line.startswith(RESULT_MARK)]
    return wall, results, f"exit {rc}: {(err or out)[-1500:]}"


def kb_side(prep: dict[str, Any], work: Path) -> dict[str, Any]:
    """Each pair in a fresh process, one after another, as run_and_check.py runs one pair."""
    pairs, started = [], time.monotonic()
    for level, pid, stem in PROBLEMS:
        spec = kb_spec(prep["kb"], prep["extra_paths"], [(level, pid, stem)], False, prep["carried_first"])
        wall, results, tail = run_kb_worker(spec, work / "kb")
        row = results[0] if results else {"error": f"no result ({tail})"}
        pairs.append({"pair": pair_name(level, stem), "wall_s": wall, **row})
        print(f"  KB   {pair_name(level, stem):42} {wall:7.1f} s  speedup {fmt(row.get('speedup'))}"
              + (f"  {row['error'][:200]}" if row.get("error") else ""), flush=True)
    return {"wall_s": time.monotonic() - started, "pairs": pairs}


def kb_worker(spec: dict[str, Any]) -> None:
    """In KernelBench's process: each pair as run_and_check.py's local path does it; one marked JSON line each."""
    here = Path(__file__).resolve().parent       # benchmarks/: not on a KernelBench user's path
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, spec["kb_src"])
    if spec["carried_first"]:                     # only where the machine's own versions failed to import
        sys.path[1:1] = spec["extra_paths"]
    else:                                         # carried deps and stubs last: the machine's own packages win
        sys.path.extend(spec["extra_paths"])
    started = time.monotonic()
    import torch
    from kernelbench import eval as kernel_eval
    from kernelbench.dataset import construct_kernelbench_dataset
    from kernelbench.kernel_static_checker import validate_kernel_static
    from kernelbench.timing import get_timing_function, measure_ref_program_time
    import_s = time.monotonic() - started
    for level, pid, stem in spec["pairs"]:
        problem = construct_kernelbench_dataset(level=level, source="local",
                                                base_path=spec["kb_dataset"]).get_problem_by_id(pid)
        ref_src = problem.code
        kernel_src = aa_source(ref_src)
        static_ok, static_errors, _ = validate_kernel_static(kernel_src, backend="cuda", precision="fp32")
        row: dict[str, Any] = {"pair": pair_name(level, stem), "kb_problem": problem.name, "import_s": import_s,
                               "static_check_ok": static_ok, "static_check_errors": static_errors}
        if spec["dry_run"]:
            row.update(kb_dry_check(kernel_eval, ref_src, kernel_src, get_timing_function))
        else:
            row.update(kb_eval_pair(torch, kernel_eval, measure_ref_program_time, ref_src, kernel_src))
        print(RESULT_MARK + json.dumps(row, default=str), flush=True)


def kb_dry_check(kernel_eval, ref_src: str, kernel_src: str, get_timing_function) -> dict[str, Any]:
    """Short of CUDA: both sources load through KernelBench's loaders and its cuda_event timer exists."""
    context: dict[str, Any] = {}                  # one context for both, as eval_kernel_against_ref has
    loaded = kernel_eval.load_original_model_and_inputs(ref_src, context)
    model_new = kernel_eval.load_custom_model(kernel_src, context, None)
    ok = (loaded is not None and all(x is not None for x in loaded) and isinstance(model_new, type)
          and issubclass(model_new, context["Model"]))
    get_timing_function("cuda_event")
    return {"loaded": ok, "error": None if ok else "Model/ModelNew did not load"}


def kb_eval_pair(torch, kernel_eval, measure_ref_program_time, ref_src: str, kernel_src: str) -> dict[str, Any]:
    """eval_kernel_against_ref as run_and_check.evaluate_single_sample_src calls it, then the eager reference time."""
    device = torch.device("cuda:0")
    t0 = time.monotonic()
    try:
        result = kernel_eval.eval_kernel_against_ref(
            original_model_src=ref_src, custom_model_src=kernel_src, measure_performance=True,
            timing_method="cuda_event", verbose=False, num_correct_trials=NUM_CORRECT_TRIALS,
            num_perf_trials=NUM_PERF_TRIALS, build_dir=os.path.join("test_build", str(hash(kernel_src))),
            device=device, backend="cuda", precision=kernel_eval.get_torch_dtype_from_string("fp32"))
    except Exception as exc:                      # run_and_check's "last level catch"
        return {"error": f"eval_kernel_against_ref raised {type(exc).__name__}: {exc}"}
    t1 = time.monotonic()
    ref = measure_ref_program_time(ref_arch_name="Reference Program", ref_arch_src=ref_src,
                                   num_trials=NUM_PERF_TRIALS, use_torch_compile=False, timing_method="cuda_event",
                                   device=device, verbose=False, precision="fp32")
    t2 = time.monotonic()
    if result is None:
        return {"error": "eval_kernel_against_ref returned None (lock file error)"}
    ref_ms = (ref or {}).get("mean")
    runtime = result.runtime if result.runtime and result.runtime > 0 else None
    return {"compiled": result.compiled, "correctness": result.correctness, "runtime_ms": runtime,
            "eval_ref_runtime_ms": result.ref_runtime, "ref_eager_ms": ref_ms,
            "speedup": ref_ms / runtime if ref_ms and runtime and result.correctness else None,
            "hardware": result.metadata.get("hardware"), "eval_s": t1 - t0, "ref_time_s": t2 - t1,
            "metadata": {k: str(v)[:300] for k, v in result.metadata.items()},
            "error": None if result.correctness else "not correct"}


# ------------------------------------------------------------------------------------------------ our side


def phases_s(record: dict[str, Any]) -> float | None:
    """The pair's own seconds inside the run: reference_setup + total of worker.phases (None without)."""
    phases = (record.get("worker") or {}).get("phases")
    if not isinstance(phases, dict) or not isinstance(phases.get("total"), (int, float)):
        return None
    return float(phases["total"]) + float(phases.get("reference_setup") or 0.0)


def our_side(problems: Path, solutions: Path, work: Path, device: str) -> dict[str, Any]:
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    import pair_time                              # its interrupt-tolerant run of run_eval.py
    config = our_config(work, problems, solutions, device)
    try:
        done = pair_time.run(config, work / "results", ["--compile-modes", "none"])
    except SystemExit as exc:
        return {"wall_s": None, "pairs": [], "error": str(exc)[-2000:]}
    by_problem = {r.get("problem"): r for r in done.records}
    pairs = []
    for level, pid, stem in PROBLEMS:
        r = by_problem.get(our_problem_id(level, pid, stem)) or {}
        pairs.append({"pair": pair_name(level, stem), "status": r.get("status"), "speedup": r.get("speedup"),
                      "speedup_ci": r.get("speedup_ci"), "pair_s": phases_s(r), "error": r.get("error"),
                      "mode": (r.get("timing") or {}).get("mode"), "rounds": (r.get("timing") or {}).get("rounds"),
                      "flags": r.get("flags")})
        print(f"  ours {pair_name(level, stem):42} {fmt(phases_s(r), 7, 1)} s  speedup "
              f"{fmt(r.get('speedup'))} {fmt_ci(r.get('speedup_ci'))} {r.get('status')}", flush=True)
    return {"wall_s": done.wall_s, "pairs": pairs, "run_dir": str(done.run_dir), "interrupted": done.interrupted}


def check_ours(problems: Path, solutions: Path, work: Path) -> dict[str, Any]:
    """Dry run: our config loads and discovery finds the 8 pairs, each with its problem and no static error."""
    sys.path.insert(0, str(REPO))
    from harness.core.config import load_config
    from harness.core.discover import discover
    load_config(our_config(work, problems, solutions, "cuda"), {})
    _, pairs = discover(problems, solutions)
    bad = [p.candidate.id for p in pairs if p.problem is None or p.problem.error or p.candidate.error]
    if len(pairs) != len(PROBLEMS) or bad:
        raise SystemExit(f"ours: {len(pairs)} pairs found, with errors: {bad}")
    return {"pairs": [p.candidate.id for p in pairs]}


# ------------------------------------------------------------------------------------------------ the table


def fmt(x: Any, width: int = 6, digits: int = 3) -> str:
    return f"{x:>{width}.{digits}f}" if isinstance(x, (int, float)) else f"{'-':>{width}}"


def fmt_ci(ci: Any) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if isinstance(ci, list) and len(ci) == 2 else "-"


def table(repeat: dict[str, Any]) -> list[str]:
    kb, ours = repeat["kb"], repeat["ours"]
    lines = [f"repeat {repeat['index'] + 1} ({repeat['order']}):",
             f"  {'pair':42} {'KB wall s':>9} {'KB speedup':>10} {'our pair s*':>11} {'our speedup':>11} "
             f"{'our 95% CI':>16} {'our status':>10}"]
    for k, o in zip(kb["pairs"], ours["pairs"] or [{}] * len(kb["pairs"])):
        lines.append(f"  {k['pair']:42} {fmt(k.get('wall_s'), 9, 1)} {fmt(k.get('speedup'), 10)} "
                     f"{fmt(o.get('pair_s'), 11, 1)} {fmt(o.get('speedup'), 11)} {fmt_ci(o.get('speedup_ci')):>16} "
                     f"{o.get('status') or '-':>10}")
    lines.append(f"  {'total wall (KB: 8 processes; ours: one run)':42} {fmt(kb['wall_s'], 9, 1)} "
                 f"{'':>10} {fmt(ours.get('wall_s'), 11, 1)}")
    return lines


def summary(repeats: list[dict[str, Any]]) -> list[str]:
    lines = ["totals (wall s):  repeat  order       KB      ours   ours/KB"]
    for r in repeats:
        kb_s, our_s = r["kb"]["wall_s"], r["ours"].get("wall_s")
        ratio = our_s / kb_s if kb_s and our_s else None
        lines.append(f"                  {r['index'] + 1:>6}  {r['order']:10} {fmt(kb_s, 7, 1)} {fmt(our_s, 9, 1)} "
                     f"{fmt(ratio, 9, 2)}")
    lines.append("* our pair s: the record's worker.phases reference_setup + total (inside the one run; they do not "
                 "add up to its wall)")
    return lines


# ------------------------------------------------------------------------------------------------ main


def prepare(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    kb, commit = checkout(args.kb_root, args.kb_tar, work / "kb-checkout")
    site, stubs = work / "kbsite", work / "kbstubs"
    installed = install_wheels(args.wheels, site)
    write_stubs(stubs)
    problems = import_problems(kb, work)
    solutions = write_candidates(problems, work)
    carried_first, results = check_kb(kb, [site, stubs], work, bool(installed))
    print(f"KernelBench {commit} at {kb}; kernelbench.eval imported in {results[0]['import_s']:.1f} s "
          f"({'carried wheels ' + ('first' if carried_first else 'last') if installed else 'no wheels installed'} "
          f"on sys.path, stubs for {', '.join(STUBS)})", flush=True)
    return {"kb": kb, "commit": commit, "extra_paths": [site, stubs], "carried_first": carried_first,
            "problems": problems, "solutions": solutions, "wheels": installed, "kb_check": results}


def check_kb(kb: Path, extra_paths: list[Path], work: Path, may_go_first: bool) -> tuple[bool, list[dict[str, Any]]]:
    """One untimed KernelBench process over all 8 pairs, short of CUDA (it also writes the .pyc files): the carried
    wheels last on sys.path, or, where the machine's own versions fail to import, first. (carried_first, results)."""
    why = ""
    for carried_first in (False, True) if may_go_first else (False,):
        spec = kb_spec(kb, extra_paths, list(PROBLEMS), True, carried_first)
        _, results, tail = run_kb_worker(spec, work / "kb-check")
        bad = [r for r in results if r.get("error")]
        if len(results) == len(PROBLEMS) and not bad:
            return carried_first, results
        why += f"\n  carried wheels {'first' if carried_first else 'last'}: {bad or tail}"
    raise SystemExit(f"KernelBench's side does not load:{why}")


def run_repeats(args: argparse.Namespace, prep: dict[str, Any], work: Path, report: dict[str, Any]) -> None:
    first, second = ("kb", "ours") if args.order == "kb-first" else ("ours", "kb")
    for i in range(args.repeats):
        order = (first, second) if i % 2 == 0 else (second, first)
        rep: dict[str, Any] = {"index": i, "order": "-".join(order)}
        print(f"repeat {i + 1}/{args.repeats}: {' then '.join(order)}", flush=True)
        for side in order:
            if side == "kb":
                rep["kb"] = kb_side(prep, work / f"repeat{i}")
            else:
                rep["ours"] = our_side(prep["problems"], prep["solutions"], work / f"repeat{i}" / "ours",
                                       args.device)
        report["repeats"].append(rep)
        print("\n".join(table(rep)), flush=True)
        save(args.json, report)                   # after each repeat: a run cut short keeps what it finished
    print("\n".join(summary(report["repeats"])))


def save(path: Path | None, report: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb-root", type=Path, help="a KernelBench work tree, or its git directory (HEAD is extracted)")
    p.add_argument("--kb-tar", type=Path, help="a `git archive` tarball of KernelBench (default: the newest in "
                                               ".kbsrc/)")
    p.add_argument("--wheels", type=Path, help="folder of the carried wheels (KB_WHEELS; default: none installed)")
    p.add_argument("--repeats", type=int, default=1, help="back-to-back repeats, the order alternating (default 1)")
    p.add_argument("--order", choices=("kb-first", "ours-first"), default="kb-first",
                   help="the first repeat's order; later repeats alternate (default kb-first)")
    p.add_argument("--device", default="cuda", help="our run's device (default cuda)")
    p.add_argument("--json", type=Path, help="save every figure here (after each repeat)")
    p.add_argument("--workdir", type=Path, help="keep the work here (default: a temporary folder, removed)")
    p.add_argument("--dry-run", action="store_true", help="prepare and check both sides' loading; run no pair")
    p.add_argument("--pack", action="store_true", help="write .kbsrc/kernelbench-<commit>.tar.gz from --kb-root "
                                                       "(default: the mirror) and download KB_WHEELS into --wheels "
                                                       "(default .whl); needs network")
    p.add_argument("--kb-worker", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.kb_worker:
        kb_worker(json.loads(args.kb_worker))
        return 0
    if args.pack:
        pack(args.kb_root or DEFAULT_MIRROR, args.wheels or REPO / ".whl")
        return 0
    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="vs_kernelbench-")
    work = args.workdir.resolve() if args.workdir else Path(tmp.name)
    try:
        prep = prepare(args, work)
        report: dict[str, Any] = {"kb_commit": prep["commit"], "problems": [list(p) for p in PROBLEMS],
                                  "num_correct_trials": NUM_CORRECT_TRIALS, "num_perf_trials": NUM_PERF_TRIALS,
                                  "wheels": prep["wheels"], "stubs": list(STUBS), "repeats": []}
        if args.dry_run:
            report["ours_check"] = check_ours(prep["problems"], prep["solutions"], work / "dry-ours")
            report["kb_check"] = prep["kb_check"]
            save(args.json, report)
            print(f"dry run ok: KernelBench {prep['commit']}: {len(prep['kb_check'])} pairs load through "
                  f"kernelbench.eval; ours: {len(report['ours_check']['pairs'])} pairs discovered")
            return 0
        run_repeats(args, prep, work, report)
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
