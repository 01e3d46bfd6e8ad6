#!/usr/bin/env bash
# Everything that needs the GPU. Phases (default: all), each bounded so that `tests` and `suite` each fit one
# 10-minute device command on a 4-GPU machine:
#   tests: side by side, the GPU-marked tests on GPU 0 and lint of every problem on the other GPUs;
#          then the harness overhead benchmark on the exploit set (cold, warm, defenses off) on the GPU;
#   suite: `run_eval.py` over the whole suite with a cold build cache, on every GPU, with lint of every problem
#          running while the candidates build (the GPUs are idle then; lint takes about a minute on 4 GPUs);
#          then the same run, warm.
# Builds run 24 at a time (JOBS=N to change): a first attempt with one build per core (64) lost the machine,
# maybe by coincidence.
# Logs and results go to $OUT (the device tool's output folder) or ./gpu_check_out.
#   usage: bash scripts/gpu_check.sh [tests|suite|all]
set -uo pipefail
phase=${1:-all}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-gpu_check_out}
mkdir -p "$out"
n=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
all=$(seq -s, 0 $((n - 1)))
rest=$( [ "$n" -gt 1 ] && seq -s, 1 $((n - 1)) || echo 0)
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpus.txt"
cat "$out/gpus.txt"

if [ "$phase" = tests ] || [ "$phase" = all ]; then
echo "== phase 1: GPU tests (GPU 0) | lint (GPUs $rest)"
(timeout 280 python run_eval.py lint --gpus "$rest" --per-gpu 2 --output-dir "$out/lint_tmp" > "$out/lint.txt" 2>&1;
 mv "$out"/lint_tmp/lint-*.json "$out"/ 2>/dev/null; rm -rf "$out/lint_tmp") &
lint_pid=$!
timeout 280 python -m pytest -q -m gpu tests/ 2>&1 | tail -n 40 > "$out/gpu_tests.txt"
wait $lint_pid
tail -n 25 "$out/gpu_tests.txt"
tail -n 3 "$out/lint.txt"
echo "== harness overhead on the exploit set, GPU"
timeout 200 python benchmarks/harness_overhead.py --device cuda --samples 100 2>&1 | tee "$out/overhead.txt"
fi
[ "$phase" = suite ] || [ "$phase" = all ] || exit 0

echo "== phase 2: run_eval.py, cold build cache, GPUs $all; lint of every problem while the candidates build"
rm -rf .cache/builds
(timeout 150 python run_eval.py lint --gpus "$all" --per-gpu 2 --output-dir "$out/lint_tmp" > "$out/lint_suite.txt" 2>&1;
 mv "$out"/lint_tmp/lint-*.json "$out"/ 2>/dev/null; rm -rf "$out/lint_tmp") &
/usr/bin/time -f "wall %e s" timeout "${COLD_TIMEOUT:-290}" python run_eval.py --gpus "$all" --jobs "${JOBS:-24}" --output-dir "$out/results" > "$out/run_cold.txt" 2>&1
grep -E "^(pairs|geomean|wall|run )" "$out/run_cold.txt"
wait
tail -n 1 "$out/lint_suite.txt"

echo "== phase 3: the same run, warm"
/usr/bin/time -f "wall %e s" timeout "${WARM_TIMEOUT:-180}" python run_eval.py --gpus "$all" --jobs "${JOBS:-24}" --output-dir "$out/results" > "$out/run_warm.txt" 2>&1
grep -E "^(pairs|geomean|wall|run )" "$out/run_warm.txt"
python - "$out/results" <<'PY'
import json, pathlib, sys
for run in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    meta = json.loads((run / "run.json").read_text())
    print(run.name, "wall", meta.get("wall_seconds"), "s; build stage", meta.get("build_seconds"), "s; compiled",
          meta.get("builds_compiled"), "cached", meta.get("builds_cached"), "; ceilings", meta.get("ceilings"))
PY
(cd "$out/results" && tar czf ../results.tgz . && cd .. && rm -rf results)
