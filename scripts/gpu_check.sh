#!/usr/bin/env bash
# Everything that needs the GPU, in one call: the GPU-marked tests, a real `run_eval.py` pass (cold build cache),
# the same pass again (warm: nothing recompiles), and the harness overhead benchmark. Logs and results go to
# $OUT (the device tool's output folder) or ./gpu_check_out.
#   usage: bash scripts/gpu_check.sh [extra run_eval.py flags, e.g. --gpus 0,1,2,3]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-gpu_check_out}
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpus.txt"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"

echo "== GPU tests"
python -m pytest -q -m gpu tests/ 2>&1 | tail -n 30 | tee "$out/gpu_tests.txt"

echo "== run_eval.py (cold)"
/usr/bin/time -f "wall %e s" python run_eval.py --output-dir "$out/results" "$@" 2>&1 | tail -n 150 > "$out/run_cold.txt"
tail -n 100 "$out/run_cold.txt"
echo "== run_eval.py (warm: nothing recompiles)"
/usr/bin/time -f "wall %e s" python run_eval.py --output-dir "$out/results" "$@" 2>&1 | tail -n 150 > "$out/run_warm.txt"
tail -n 6 "$out/run_warm.txt"
python - "$out/results" <<'PY'
import json, pathlib, sys
for run in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    meta = json.loads((run / "run.json").read_text())
    print(run.name, "wall", meta.get("wall_seconds"), "s; builds compiled", meta.get("builds_compiled"),
          "cached", meta.get("builds_cached"))
PY
(cd "$out/results" && tar czf ../results.tgz .)
