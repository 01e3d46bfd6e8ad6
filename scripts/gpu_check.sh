#!/usr/bin/env bash
# Everything that needs the GPU, in one call (fits the device tool's 10-minute command on a 4-GPU machine):
#   phase 1, side by side: the GPU-marked tests on GPU 0, and lint of every problem on the other GPUs;
#   phase 2: `run_eval.py` over the whole suite with a cold build cache, on every GPU;
#   phase 3: the same run again, warm: nothing recompiles.
# Logs and results go to $OUT (the device tool's output folder) or ./gpu_check_out.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-gpu_check_out}
mkdir -p "$out"
n=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
all=$(seq -s, 0 $((n - 1)))
rest=$( [ "$n" -gt 1 ] && seq -s, 1 $((n - 1)) || echo 0)
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpus.txt"
cat "$out/gpus.txt"

echo "== phase 1: GPU tests (GPU 0) | lint (GPUs $rest)"
(timeout 280 python run_eval.py lint --gpus "$rest" --per-gpu 2 --output-dir "$out" > "$out/lint.txt" 2>&1) &
lint_pid=$!
timeout 280 python -m pytest -q -m gpu tests/ 2>&1 | tail -n 40 > "$out/gpu_tests.txt"
wait $lint_pid
tail -n 25 "$out/gpu_tests.txt"
tail -n 3 "$out/lint.txt"

echo "== phase 2: run_eval.py, cold build cache, GPUs $all"
rm -rf .cache/builds
/usr/bin/time -f "wall %e s" timeout 300 python run_eval.py --gpus "$all" --output-dir "$out/results" > "$out/run_cold.txt" 2>&1
grep -E "^(pairs|geomean|wall|run )" "$out/run_cold.txt"

echo "== phase 3: the same run, warm"
/usr/bin/time -f "wall %e s" timeout 200 python run_eval.py --gpus "$all" --output-dir "$out/results" > "$out/run_warm.txt" 2>&1
grep -E "^(pairs|geomean|wall|run )" "$out/run_warm.txt"
python - "$out/results" <<'PY'
import json, pathlib, sys
for run in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    meta = json.loads((run / "run.json").read_text())
    print(run.name, "wall", meta.get("wall_seconds"), "s; build stage", meta.get("build_seconds"), "s; compiled",
          meta.get("builds_compiled"), "cached", meta.get("builds_cached"), "; ceilings", meta.get("ceilings"))
PY
(cd "$out/results" && tar czf ../results.tgz . && cd .. && rm -rf results)
