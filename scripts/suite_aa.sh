#!/usr/bin/env bash
# Issue 29's whole-suite figures on one GPU, meant to run detached (`BG=scripts/suite_aa.sh bash scripts/gpu_check.sh
# bg`, then `follow` until it ends):
#   1. benchmarks/vs_kernelbench.py: KernelBench's own eval against ours on 8 A/A pairs, back to back (KB wheels in
#      .kbwheels, its checkout in .kbsrc: carry both; SKIP_KB=1 to leave it out);
#   2. the A/A pass as a default run makes it: `calibrate --processes 1` (one process pair, the CI widened by the
#      between-process term; on an uncalibrated machine its default), under `--gpu-memory-gb 24`, per level of
#      LEVELS (default level2 level3 level1), the workers tracing their stages (KB_TRACE=1).
#      LEVELS entries are a level or LEVEL:GLOB (e.g. "level1:*0[3-6]?_*"), each with @N for N process pairs
#      instead of one (e.g. "level2@2", written to aa-p2/).
#   3. with BIAS=1 first: the transposed convolutions whose one-process-pair A/A read above 1.0
#      (level2/040, level1/016), in 4 process pairs each under --gpu-memory-gb 24, with the reference capped at its
#      need (a copy of this tree as it was before memplan.even_share) and with this tree (docs/suite-aa-h200.md);
#      then with TESTS=1 the GPU-marked tests (gpu_tests.txt).
# Read back: benchmarks/pair_time.py --from RUN_DIR, benchmarks/trace_pair.py RUN_DIR, scripts/calibration_table.py.
set -u
out=${OUT:?}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
if [ -n "${BIAS:-}" ]; then
    # the same tree with the reference's cap at its need (memplan.even_share returning it), as before the even share
    tight=/tmp/tight && rm -rf "$tight" && mkdir -p "$tight" && cp -r harness run_eval.py config.yaml problems \
        solutions "$tight"/ && sed -i 's/^    return max(ref, min(usable \/\/ 2, usable - cand))$/    return ref/' \
        "$tight/harness/shared/memplan.py" && grep -q "^    return ref$" "$tight/harness/shared/memplan.py" \
        || echo "bias: could not make the tight-share tree"
    for tree in "$tight" "$PWD"; do
        for sel in "level2 *040_conv_transpose2d*" "level1 *016_conv_transpose2d"; do
            set -f
            set -- $sel
            echo "== bias $1 $2 $tree --gpu-memory-gb 24"
            (cd "$tree" && python run_eval.py calibrate --processes 4 --gpu-memory-gb 24 --level "$1" --problem "$2" \
                --output-dir "$out/bias/$(basename "$tree")") >> "$out/bias.txt" 2>&1
            set +f
            grep -E "level[12]/" "$out/bias.txt" | tail -n 1
        done
    done
fi
if [ -n "${TESTS:-}" ]; then
    echo "== GPU tests"
    timeout 560 python -m pytest -q -rs -m gpu --durations=12 tests/ > "$out/gpu_tests.txt" 2>&1
    tail -n 15 "$out/gpu_tests.txt"
fi
if [ -z "${SKIP_KB:-}" ]; then
    echo "== vs_kernelbench"
    python3 benchmarks/vs_kernelbench.py --wheels .kbwheels --repeats 1 --order kb-first --workdir /tmp/vskb \
        --json "$out/vs_kb.json" > "$out/vs_kb.log" 2>&1
    (cd /tmp/vskb && tar czf "$out/vskb_runs.tgz" repeat*/ours/results/*/results.jsonl repeat*/ours/results/*/run.json)
fi
set -f
for entry in ${LEVELS:-level2 level3 level1}; do
    sel=${entry%@*} procs=1 dir=aa
    [ "$entry" != "$sel" ] && procs=${entry##*@} && dir=aa-p$procs
    lvl=${sel%%:*} glob=()
    [ "$sel" != "$lvl" ] && glob=(--problem "${sel#*:}")
    echo "== calibrate $sel, $procs process pair(s)"
    KB_TRACE=1 /usr/bin/time -f "$entry wall %e s" python run_eval.py calibrate --processes "$procs" \
        --gpu-memory-gb 24 --level "$lvl" "${glob[@]}" --output-dir "$out/$dir" >> "$out/$dir.txt" 2>&1
    tail -n 3 "$out/$dir.txt"
done
set +f
