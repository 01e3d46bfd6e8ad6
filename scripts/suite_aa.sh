#!/usr/bin/env bash
# Issue 29's whole-suite figures on one GPU, meant to run detached (`BG=scripts/suite_aa.sh bash scripts/gpu_check.sh
# bg`, then `follow` until it ends):
#   1. benchmarks/vs_kernelbench.py: KernelBench's own eval against ours on 8 A/A pairs, back to back (KB wheels in
#      .kbwheels, its checkout in .kbsrc: carry both; SKIP_KB=1 to leave it out);
#   2. the A/A pass as a default run makes it: `calibrate --processes 1` (one process pair, the CI widened by the
#      between-process term; on an uncalibrated machine its default), under `--gpu-memory-gb 24`, per level of
#      LEVELS (default level2 level3 level1), the workers tracing their stages (KB_TRACE=1).
#   3. with BIAS=1 first: the transposed convolutions whose one-process-pair A/A read 1.06-1.07 on 2026-11-26
#      (level2/040, level1/016), in 4 process pairs each, under --gpu-memory-gb 24 and with the whole card, to tell a
#      per-process bias from the reference's capped allocator (docs/suite-aa-h200.md).
# Read back: benchmarks/pair_time.py --from RUN_DIR, benchmarks/trace_pair.py RUN_DIR, scripts/calibration_table.py.
set -u
out=${OUT:?}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
if [ -n "${BIAS:-}" ]; then
    for cap in "--gpu-memory-gb 24" ""; do
        for sel in "level2 *040_conv_transpose2d*" "level1 *016_conv_transpose2d"; do
            set -- $sel
            echo "== bias $1 $2 ${cap:-whole card}"
            set -f
            python run_eval.py calibrate --processes 4 $cap --level "$1" --problem "$2" \
                --output-dir "$out/bias" >> "$out/bias.txt" 2>&1
            set +f
            grep -E "level[12]/" "$out/bias.txt" | tail -n 1
        done
    done
fi
if [ -z "${SKIP_KB:-}" ]; then
    echo "== vs_kernelbench"
    python3 benchmarks/vs_kernelbench.py --wheels .kbwheels --repeats 1 --order kb-first --workdir /tmp/vskb \
        --json "$out/vs_kb.json" > "$out/vs_kb.log" 2>&1
    (cd /tmp/vskb && tar czf "$out/vskb_runs.tgz" repeat*/ours/results/*/results.jsonl repeat*/ours/results/*/run.json)
fi
for lvl in ${LEVELS:-level2 level3 level1}; do
    echo "== calibrate $lvl"
    KB_TRACE=1 /usr/bin/time -f "$lvl wall %e s" python run_eval.py calibrate --processes 1 --gpu-memory-gb 24 \
        --level "$lvl" --output-dir "$out/aa" >> "$out/aa.txt" 2>&1
    tail -n 3 "$out/aa.txt"
done
