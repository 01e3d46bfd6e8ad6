#!/usr/bin/env bash
# Everything that needs the GPU, in phases that each fit one 10-minute device command on a 2-GPU machine:
#   smoke:     the GPU-marked tests on GPU 0, beside an A/A calibration of six problems (all levels) on GPU 1;
#              then three honest candidates with the torch.compile baselines (default mode)
#   validate:  the GPU-marked tests on GPU 0 beside `calibrate --level level3` on GPU 1, then `calibrate --level
#              level2` on every GPU
#   calibrate: `run_eval.py calibrate` over the whole suite on every GPU (LEVEL=level1 etc. to split it, or
#              SELS="level1:GLOB level2:GLOB" for several selections in turn; PROCS=3 for three process pairs per
#              problem; CAL_TIMEOUT seconds in all)
#   suite:     `run_eval.py` over every shipped candidate on every GPU (GPUS=0 for one; EXECUTOR=dask for a
#              LocalCluster of one dask worker per GPU, dask carried as wheels in .whl; COMPILE=none|default|... for
#              the torch.compile baselines, default: default mode only, to bound the time; PROCS process pairs;
#              TAG names the output folder, so several runs of one call stay apart; SOLUTIONS_DIR another tree of
#              candidates (e.g. only the new ones, copied into an ignored folder); RESUME=RUN_ID continues a run
#              cut by its time limit: copy its folder to .resume/RUN_ID here and carry .resume)
#   spread:    A/A of two problems calibrated REPEAT times each (fresh process pairs), beside two GPU tests
#   placement: benchmarks/placement.py on four problems whose A/A moved between process pairs
#   bias:      one GPU: placement on three problems, then A/A of three problems in three fresh process pairs each
#   processes: A/A of seven problems with --processes PROCS (3), then the level3 candidates (custom_share)
#   trusted:   issue 28's GPU checks: the exploit set and graph-mode skipping, A/A and a pair's cost on this tree
#              and on the tree before it (.old/, carried)
#   first:     the GPU tests, then (with CAL_SECONDS) an A/A calibration of level 1-3's 002 and 003
#   root:      the tests of the sandbox, the exploits and the process tree as the device's user (root there)
#   overhead:  benchmarks/sample_overhead.py on three problems (where a sample's harness work goes)
#   stage44:   issue 44's GPU half: staged samples on two honest pairs and the gpu_tree candidates, then the GPU
#              tests (K selects; SMOKE_ONLY=1 for the pairs alone)
#   exec44:    issue 44's reference executor: A/A of short problems on the default and the staged GPU path, back to
#              back (PATHS="default staged", PROCS process pairs, EXEC_PROBLEMS="level:glob ...", CAL_ARGS added to
#              each calibrate), then the GPU tests (K; SMOKE_ONLY=1: not)
#   mem48:     one GPU, detached: issue 44 item 8's memory on the default and the staged path at once, over level1's
#              007/009/011/042-060 and levels 2 and 3 (MEM_CAP s a pair, MEM_TIMEOUT, MEM_TRIALS trials: 1; a default
#              run makes 5), then each path's summary
#   aa48:      one GPU, detached: huber_loss's staged reference traced, then A/A of AA_LEVEL/AA_GLOB (level 2's
#              020-099) on the default path and the staged one, back to back (AA_CAP s a pair, AA_TIMEOUT each)
#   aa49:      one GPU, detached: the precision GPU tests, the staged path's A/A over the whole suite at the default
#              cap (calibrate --processes 1, AA49_LEVELS: "level1 level3 level2", each LEVEL or LEVEL:GLOB), then the
#              staged GPU exploit tests
#   flip44:    one GPU, detached: after staged_gpu became the default, level3/007's memory with 5 trials, the GPU tests
#              the staged parametrizations do not cover, a plain run_eval.py with shipped CUDA candidates (see the phase)
#   flip44b:   one GPU, short: the GPU tests changed after flip44 (memory on both paths, cover_window's bound)
#   aa44:      one GPU, short: aa_both alone (AA_LEVEL, AA_GLOB, AA_CAP, AA_TIMEOUT), its runs as aa44.tgz in $OUT
#   close44:   a 2-GPU machine, detached: issue 44 item 8 on one tree (TREE): test_gpu.py in two shards, one per
#              GPU, then the whole suite's traced staged A/A at the default cap over both GPUs; the pass, the untimed
#              part a pair (mean, median, how many at most 3 s) and each side's memory over all of it (see the phase)
#   shards:    a 2-GPU machine: tests/test_gpu.py in two shards, one per GPU (all 30 in about 330 s on two H200s)
#   rest44:    a 2-GPU machine, detached: the level 1 A/A close44 never reached, on TREE; then test_gpu.py in two
#              shards on IOCTL_TREE (the device ioctl rule on GPU workers) and what its records' sandboxes say
#   duo23:     a 2-GPU machine, detached: branch issue44-gpu-pending (carried as branch_tree/): its test_gpu.py
#              whole on GPU 0; on GPU 1 a traced A/A of level 1's 010-029 on the branch and on this tree, back to back
#   derive44:  one GPU, detached: this tree against old_files/ (harness/worker files put back), back to back:
#              derive_time, a traced A/A, memory; then the precision and memory GPU tests and host_link
#   cost44b:   one GPU, detached: the precision and memory GPU tests, host_link, derive_time on DERIVE_PROBLEMS ("" for
#              none), traced staged A/As of AA_SELS with parts, stages, memory
#   pin44:     one GPU, short: host_link three ways (torch's pinning, registered pinning with 8 threads from the
#              environment, and as a GPU reference pins: --harness), into pin_link.txt
#   traced44:  one GPU, detached: cost44b's traced A/As of AA_SELS alone (default all of level 1, cut at 500 s)
#   cost44:    one GPU, detached: flip44b's tests, then a traced staged A/A (AA_*): pair_time's parts, trace_pair's stages
#   verify44:  one GPU, detached: the GPU exploit and staged tests on the last tree, reuse_buffer staged in cold and
#              graph mode, then level 1's A/A on both paths back to back with pair_time's parts (see the phase)
#   beside44:  one GPU, detached: the staged exploit tests, two problems' memory with 5 trials, then level 2's A/A
#              on the default and the staged path back to back, with pair_time's parts (see the phase)
#   beside44b: one GPU, short: a subset of the exploit fixtures on the staged path, then level 2's A/A on both
#              paths back to back, with pair_time's parts (see the phase)
#   next44:    one GPU, detached: the GPU tests of the seventeenth session's changes, mem48 with 5 trials over the
#              problems near the memory target (MEM_PICK), the staged A/A of level 2 from 034 (see the phase)
#   lease44:   issue 44 in one detached run: the GPU tests alone, then suite44's sweep (STEPS="T S P R C G A": P is
#              paths44, R test_gpu.py's last tests, C short44, G the precision GPU tests, A the whole suite's staged A/A)
#   short44:   issue 44: short cold calls on both paths with GPU 0's SM clock sampled (is the staged path's GPU idling?)
#   paths44:   issue 44: A/A on the default path (GPU 0) and the staged path (GPU 1) at the same time
#   suite44:   issue 44 items 6 and 8 on the staged GPU path, then issue 45's scaling (see the phase; run it as bg)
#   cpu44:     issue 44 on the device's quiet CPU cores: the CPU exploits and privileges tests as root, then the CPU
#              path's A/A (calibrate of examples/cpu, PROCS process pairs a problem)
#   kblint:    lint of the imported KernelBench problems (import them here first, into the ignored .kb/:
#              `python run_eval.py import-kernelbench CHECKOUT --problems-dir .kb/problems`, and carry `.kb`, and
#              einops as a wheel in `.kbwhl`); `--json` lines are printed as each problem finishes
#   tests:     the GPU-marked tests alone
#   recheck:   one GPU: profile on three pairs (PROFILE_SELS, "" for none; PROFILE_TIMEOUT s each, builds included),
#              one sized problem (SIZES_PROBLEMS, "" for none), with MEMTRACE=1 the memory fixtures under 6 and 8 GiB
#              (KB_TRACE stage lines, the records' worker.memory), then the GPU tests K selects (PYTEST_ARGS added)
#   quad45:    a 4-GPU machine, detached: issue 45's scaling over 1, 2 and 4 GPUs, then a CUDA candidate's throughput
#              on GPU 0 beside issue 44's short44 (GPU 2) and precision tests (GPU 3) (see the phase)
#   quad46:    a 4-GPU machine, detached: the GPU tests over 4 GPUs, scaling traced, the compile cache (see the phase)
#   solo46c:   one GPU: the compile stack's zygote, matrix_vector's memory and cost, the compile cache
#   solo46:    one GPU, detached: matrix_vector's memory beside the other GPU tests, the compile cache, the cover window
#   quad46b:   a 4-GPU machine, detached: builds beside the other GPU tests, scaling, the compile cache (see the phase)
#   duo47:     a 2-GPU machine, detached: scaling's builds alone, scaling on 1 and 2 GPUs with both executors, then
#              the GPU tests (GPU 0) beside the compile stack's zygote probe and the compile cache (GPU 1) (see the phase)
#   solo47:    one GPU, detached: the zygote probe, the compile cache, test_gpu.py, the other GPU files, in turn
#   mem47:     one GPU, detached: issue 44 item 8 on both GPU paths, `calibrate` of LEVEL (level1) on the default
#              path, then on the staged one: the A/A figures and each side's peak memory against 2x eager + 1.5 GiB
#   quad:      a 4-GPU machine: GPU tests | profile + sizes | suite on GPUs 2-3 (see the phase)
#   multi:     a machine of 2+ GPUs: the GPU tests on GPU 0 beside `suite` (KB_TRACE=1) on the other GPUs
#   cluster:   README's external-cluster recipe on this machine (issue 33): `dask scheduler` where the harness cannot
#              be imported (only dask, as on a login node), one `dask worker --nthreads 1 --resources GPU=1` per GPU
#              (CUDA_VISIBLE_DEVICES=g, in the checkout, the harness installed with pip install -e . or else on
#              PYTHONPATH), then the same selection (LEVEL/PROBLEM, default four level1 problems, pairs cut at
#              CLUSTER_PAIR_SECONDS, 8) run locally and with --scheduler, statuses compared (KILL_AFTER=S: the last
#              worker SIGKILLed S seconds into the dask run); every process stopped afterwards, what is left counted.
#              DEVICE=cpu: a dry run on the CPU
#   twice:     issue 8's same-machine check: every selection of SELS ("level3:*004_* level1:*033_*") run twice back to
#              back (output folders a/ and b/, one run_eval.py per selection and run, PROCS process pairs, COMPILE
#              baselines), so that what ends before the machine goes back is whole pairs of runs; the candidates of all
#              selections are built first, in parallel. A selection starts only while twice the longest run so far
#              of its level (EST seconds at first) fits into TWICE_SECONDS; one that does not is skipped, and a later,
#              shorter level's may still start. PROBLEMS_DIR/SOLUTIONS_DIR/DEVICE for a dry run on
#              the CPU; it writes twice.done in its output folder when it ends
#   bg:        BG=SCRIPT for longer than one device command (e.g. BG=scripts/suite_aa.sh): a copy of this tree runs it
#              under setsid (such a process runs on between commands while the machine is held), writing to $W/out
#              (W=/tmp/w) and $W/out/bg.done when it ends, then `follow`
#   twice-bg:  `twice` as a bg script
#   follow:    until $W/out/bg.done appears or FOLLOW_SECONDS (570) pass, copy $W/out and its log into
#              $OUT/snap.tgz every 15 s (what a call cut short still returns); the next device command is `follow`
#              again, made within the machine's 30 s idle release
#   scaling:   issue 45 item 1, benchmarks/scaling.py: level 2's 40 honest candidates (SCALE_ARGS for others, e.g.
#              "--pairs 32"), --compile-modes none, on local:1, local:2, dask:2, local:4, dask:4 (those this machine
#              has; SCALE_SETTINGS=local:1,dask:2 for others), built once up front; the table of evaluate-phase
#              seconds, parallel efficiency and agreement with local:1. The runs stay in results/scaling while the
#              machine is held: a call runs the settings that fit into SCALE_SECONDS (500) and the next call the
#              rest; or all at once in the background: BG="scripts/gpu_check.sh scaling" SCALE_SECONDS=1500 ... bg,
#              then `follow`. dask from .whl, as `suite`
#   throughput: issue 45 item 3, benchmarks/agent_throughput.py on GPU 0: COUNT (32) variants of level2/014's
#              Triton candidate through harness.api.iter_evaluate, against a loop of KernelBench's
#              eval_kernel_against_ref (carry .kbsrc and the wheels in .whl, from `python
#              benchmarks/vs_kernelbench.py --pack`); THROUGHPUT_ARGS (e.g. "--order ours-first", "--candidate P", for a CUDA
#              candidate with "--kb-seconds 240": KernelBench's rate from what its serial loop finished by then)
# Logs and results go to $OUT (the device tool's output folder) or ./gpu_check_out. The device returns at most 8
# files: end a device command with `cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/`.
#   profile:   issue 32 part 3: tests/test_profile.py's GPU test, then `run_eval.py profile` on three pairs (a CUDA
#              level1 candidate, a Triton one, a level2 GEMM epilogue; PROFILE_SELS="SEL SEL ..." for others), their
#              tables in $out/profile.txt, the reports and records under $out/profile/
#   usage: bash scripts/gpu_check.sh [first|root|stage44|exec44|cpu44|smoke|validate|calibrate|suite|twice|twice-bg|bg|follow|spread|placement|overhead|kblint|tests|multi|cluster|profile]
#
# What the phases cost, and so how to split the work into device commands (the figures: docs/measurements.md,
# "Figures that were in code comments"): the GPU tests need TESTS_TIMEOUT=450 in `first`; `calibrate` over the whole
# suite, or a whole-suite run on a fresh machine (its builds first), does not fit one command: split it by LEVEL and
# PROBLEM, and make the calls back to back (a machine held warm keeps .cache, and the builds in it, between calls).
set -uo pipefail
phase=${1:-smoke}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-gpu_check_out}
mkdir -p "$out"
n=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
all=$(seq -s, 0 $((n - 1)))
last=$((n - 1))
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/gpus.txt"
cat "$out/gpus.txt"
level_args=()
[ -n "${LEVEL:-}" ] && level_args=(--level "$LEVEL")
[ -n "${PROBLEM:-}" ] && level_args+=(--problem "$PROBLEM")

dask_wheels() {   # dask.distributed is not in the image: .whl's wheels for this Python into /tmp/site, on PYTHONPATH
    local py wheels
    py=$(python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
    wheels=$(ls .whl/*.whl 2>/dev/null | grep -E -- "-((py2\.py3|py3|$py)-[^-]+|cp3[0-9]+-abi3)-[^-]+\.whl$")
    [ -n "$wheels" ] && python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site $wheels && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
}

path_config() {   # config.yaml with timing.staged_gpu set to $1 (true: the staged path, the default since the
    # nineteenth session; false: the earlier default path), written to /tmp/staged_gpu_$1.yaml; its path
    sed "s/^  staged_gpu: \(true\|false\)/  staged_gpu: $1/" config.yaml > "/tmp/staged_gpu_$1.yaml"
    grep -q "^  staged_gpu: $1" "/tmp/staged_gpu_$1.yaml" || { echo "config.yaml has no 'staged_gpu:' line" >&2; return 1; }
    echo "/tmp/staged_gpu_$1.yaml"
}

staged_config() { path_config true; }       # the staged GPU path (config.yaml's own since the nineteenth session)
unstaged_config() { path_config false; }    # the GPU path where each side draws, flushes and checks in its process

gpu_tests() {   # GPU tests of tests/test_gpu.py that -k "$3" selects, cut at $2 s, into $out/$1.txt; its last $4 lines
    timeout -s INT "$2" python -m pytest -q -rfxX --tb=short -m gpu tests/test_gpu.py -k "$3" > "$out/$1.txt" 2>&1
    tail -n "$4" "$out/$1.txt"
}

aa_both() {   # issue 44: A/A of level $1's problems $2 (calibrate, one process pair, $3 s a pair, each run cut at $4 s)
    # on the in-process path and then on the staged one, back to back, into $out/aa_<path>, with pair_time's parts
    local path cfg staged_cfg
    staged_cfg=$(staged_config) || return 1
    for path in in_process staged; do
        cfg=$(unstaged_config); [ "$path" = staged ] && cfg=$staged_cfg
        echo "== A/A $1 $path ($(date +%T))"
        /usr/bin/time -f "calibrate $path wall %e s" timeout -s INT "$4" python run_eval.py calibrate --config "$cfg" \
            --processes 1 --compile-modes none --level "$1" --problem "$2" --max-pair-seconds "$3" \
            --output-dir "$out/aa_$path" > "$out/aa_$path.txt" 2>&1
        grep -E "wall|within" "$out/aa_$path.txt" | tail -n 2
        python benchmarks/pair_time.py --from "$out"/aa_$path/2* 2>&1 | tail -n 1
    done
}

traced_aa() {   # issue 44 item 8: a traced staged A/A (calibrate, one process pair, AA_CAP s a pair) of level $1's
    # problems $2, cut at $3 s, run in folder $5 (default .), into $out/aa_$4 with pair_time's parts, trace_pair's
    # stages ($out/stages_$4.txt) and each side's memory ($out/memory_$4.txt)
    (cd "${5:-.}" && KB_TRACE=1 /usr/bin/time -f "calibrate wall %e s" timeout -s INT "$3" python run_eval.py calibrate \
        --processes 1 --compile-modes none --level "$1" --problem "$2" --max-pair-seconds "${AA_CAP:-3}" \
        --output-dir "$out/aa_$4") > "$out/aa_$4.txt" 2>&1
    grep -E "wall|within" "$out/aa_$4.txt" | tail -n 2
    python benchmarks/pair_time.py --from "$out"/aa_$4/2* 2>&1 | tail -n 1
    python benchmarks/trace_pair.py "$out"/aa_$4/2* > "$out/stages_$4.txt" 2>&1
    python benchmarks/memory.py --from "$out"/aa_$4/2* > "$out/memory_$4.txt" 2>&1; tail -n 3 "$out/memory_$4.txt"
}

gpu_test_shards() {   # tests/test_gpu.py of tree $1 in two shards, one per GPU (CUDA_VISIBLE_DEVICES 0 and 1), each
    # cut at $2 s, output in $out/gpu_tests_$3_<gpu>.txt; the shards' last lines printed
    (cd "$1" && python -m pytest --collect-only -q -m gpu tests/test_gpu.py 2>/dev/null | grep '::' \
        > "$out/gpu_test_ids.txt")
    local shards=() g
    for g in 0 1; do
        awk -v g=$g '(NR - 1) % 2 == g' "$out/gpu_test_ids.txt" > "$out/shard$g.txt"
        (cd "$1" && mapfile -t ids < "$out/shard$g.txt" && CUDA_VISIBLE_DEVICES=$g timeout -s INT "$2" \
            python -m pytest -q -rfxX --tb=short -m gpu "${ids[@]}" > "$out/gpu_tests_$3_$g.txt" 2>&1) &
        shards+=($!)
    done
    wait "${shards[@]}"
    for g in 0 1; do echo "-- shard $g ($(wc -l < "$out/shard$g.txt") tests)"; tail -n 12 "$out/gpu_tests_$3_$g.txt"; done
}

traced_sels() {   # issue 44 item 8: traced_aa for each "level:glob:timeout" of $1, the runs then as $out/$2.tgz
    local sels=$1 name=$2 sel lvl rest glob secs tag
    set -f; set -- $sels; set +f
    for sel in "$@"; do
        lvl=${sel%%:*}; rest=${sel#*:}; glob=${rest%%:*}; secs=${rest#*:}; tag=${lvl}_$(echo "$glob" | tr -cd '0-9a-z')
        echo "== A/A $lvl $glob staged, traced ($(date +%T))"
        traced_aa "$lvl" "$glob" "$secs" "$tag"
    done
    (cd "$out" && tar czf "/tmp/$name.tgz" aa_level* && rm -rf aa_level*/ && mv "/tmp/$name.tgz" .)
}

precision_link() {   # issue 44 item 8: the precision and memory GPU tests, then host_link's transfer figures
    echo "== precision and memory GPU tests ($(date +%T))"
    timeout 200 python -m pytest -q -rfxX --tb=short -m gpu tests/test_precision_gpu.py tests/test_memory.py \
        > "$out/precision_tests.txt" 2>&1
    tail -n 3 "$out/precision_tests.txt"
    echo "== host_link ($(date +%T))"
    timeout 120 python benchmarks/host_link.py > "$out/host_link.txt" 2>&1; cat "$out/host_link.txt"
}

matvec() {   # issue 44's memory clause: level1/005_matrix_vector with its candidate into $out/mv (args: run_eval flags)
    timeout -s INT 300 python run_eval.py "$@" --level level1 --problem '*005_matrix_vector*' --compile-modes none \
        --max-pair-seconds 3 --json --output-dir "$out/mv" > "$out/mv.txt" 2>&1
}

matvec_report() {   # each matrix_vector record's verdict, worker memory and phases
    python - "$out"/mv/*/results.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["solution"], r["status"], r.get("speedup"), r.get("speedup_ci"), (r.get("error") or "")[:200])
    print(json.dumps((r.get("worker") or {}).get("memory"))[:1500], json.dumps((r.get("worker") or {}).get("phases")))
PY
}

compile_cache_run() {   # issue 45 item 2: benchmarks/compile_cache.py's two runs of level 2's 001-002 ($1: the GPU)
    set -f
    CUDA_VISIBLE_DEVICES=$1 timeout -s INT "${COMPILE_TIMEOUT:-240}" python benchmarks/compile_cache.py --tree . \
        --device cuda --compile-modes default,max-autotune-no-cudagraphs --level level2 \
        --problem "${COMPILE_PROBLEMS:-*00[12]_*}" --max-pair-seconds 3 > "$out/compile_cache.txt" 2>&1
    set +f
}

zygote_probe() {   # whether a zygote that imports the compile stack is ready on GPU $1 (the reason where not)
    CUDA_VISIBLE_DEVICES=$1 timeout -s INT 120 python - > "$out/zygote_probe.txt" 2>&1 <<'PY'
from pathlib import Path
from harness.run import workerproc as procs
env = procs.worker_env({"KB_DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": "0", "KB_COMPILE_WARM": "1", "KB_SANDBOX": "off"})
worker = procs.Worker("build", env, Path("/tmp/zygote_probe.log"))
print("worker:", type(worker.proc).__name__, "preload kept:", procs._spawner.zygotes.preload,
      "zygotes:", [z.preload for z in procs._spawner.zygotes.live.values()])
worker.kill(); worker.close()
PY
}

summary() {   # the one-line summary of each run folder under $1: wall, builds, and pairs a minute after the builds
    python - "$1" <<'PY'
import json, pathlib, sys
for run in sorted(pathlib.Path(sys.argv[1]).glob("*/run.json")):
    meta = json.loads(run.read_text())
    jsonl = run.parent / "results.jsonl"
    pairs = len(jsonl.read_text().splitlines()) if jsonl.exists() else 0
    wall, built = meta.get("wall_seconds"), meta.get("build_seconds") or 0
    rate = f"{60 * pairs / (wall - built):.2f}" if wall and wall > built else "-"
    print(run.parent.name, "wall", wall, "s; builds", built, "s (compiled", meta.get("builds_compiled"), "cached",
          meta.get("builds_cached"), f"); {pairs} pairs, {rate} pairs a minute after the builds; ceilings",
          meta.get("ceilings"))
PY
}

case "$phase" in
smoke)
    echo "== GPU tests (GPU 0) | calibrate six problems (GPU $last)"
    (timeout 400 python run_eval.py calibrate --gpus "$last" --output-dir "$out/cal" \
        --problem '*00[2-3]_*' > "$out/cal_smoke.txt" 2>&1) &
    timeout 400 python -m pytest -q -m gpu tests/test_gpu.py -x 2>&1 | tail -n 40 > "$out/gpu_tests.txt"
    wait
    tail -n 30 "$out/gpu_tests.txt"
    tail -n 40 "$out/cal_smoke.txt"
    echo "== three honest candidates with the torch.compile baseline (default mode)"
    timeout 150 python run_eval.py --gpus "$all" --output-dir "$out/res" --compile-modes default \
        --problem '*03[03]_*' --level level1 > "$out/compile_smoke.txt" 2>&1
    tail -n 12 "$out/compile_smoke.txt"
    ;;
validate)
    echo "== GPU tests (GPU 0) | calibrate level3 (GPU $last)"
    (timeout 330 python run_eval.py calibrate --gpus "$last" --trials 1 --output-dir "$out/cal" --level level3 \
        > "$out/cal_level3.txt" 2>&1) &
    timeout 330 python -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tail -n 40 > "$out/gpu_tests.txt"
    wait
    tail -n 30 "$out/gpu_tests.txt"
    grep -v "━" "$out/cal_level3.txt" | tail -n 24
    echo "== calibrate level2 (GPUs $all)"
    timeout 220 python run_eval.py calibrate --gpus "$all" --trials 1 --jobs 16 --output-dir "$out/cal" \
        --level level2 > "$out/cal_level2.txt" 2>&1
    grep -v "━" "$out/cal_level2.txt" | tail -n 50
    ;;
calibrate)
    # SELS="level1:*04[0-9]_* level2:*01[1-7]_*" runs those selections one after another, within CAL_TIMEOUT in all
    sels=${SELS:-"${LEVEL:-}:${PROBLEM:-}"}
    echo "== calibrate ${sels} on GPUs $all, ${PROCS:-1} process pair(s) per problem"
    deadline=$(( $(date +%s) + ${CAL_TIMEOUT:-560} ))
    set -f                                              # the globs are run_eval.py's, not the shell's
    for sel in $sels; do
        lvl=${sel%%:*} glob=${sel#*:} sel_args=()
        [ -n "$lvl" ] && sel_args+=(--level "$lvl")
        [ -n "$glob" ] && sel_args+=(--problem "$glob")
        left=$(( deadline - $(date +%s) ))
        [ "$left" -gt 30 ] || { echo "no time left for $sel"; break; }
        /usr/bin/time -f "wall %e s" timeout -s INT "$left" python run_eval.py calibrate --gpus "$all" --jobs 16 \
            --trials 1 --processes "${PROCS:-1}" --output-dir "$out/cal" "${sel_args[@]}" >> "$out/calibrate.txt" 2>&1
    done
    set +f
    grep -v "━" "$out/calibrate.txt" | grep -E "level[123]/|wall|within|miss" | tail -n 140
    summary "$out/cal"
    ;;
suite)
    gpus=${GPUS:-$all}
    executor=${EXECUTOR:-local}
    tag=${TAG:-res}
    [ "$executor" = dask ] && dask_wheels
    resume_args=()
    if [ -n "${RESUME:-}" ]; then                       # RESUME=RUN_ID: continue a cut run, carried in .resume/
        mkdir -p "$out/$tag" && cp -r ".resume/$RESUME" "$out/$tag/" && resume_args=(--resume "$RESUME")
    fi
    echo "== every shipped candidate on GPUs $gpus, executor $executor (compile baselines: ${COMPILE:-default})"
    /usr/bin/time -f "wall %e s" timeout -s INT "${SUITE_TIMEOUT:-560}" python run_eval.py --gpus "$gpus" \
        --executor "$executor" --jobs "${JOBS:-16}" --output-dir "$out/$tag" --compile-modes "${COMPILE:-default}" \
        --processes "${PROCS:-1}" --solutions-dir "${SOLUTIONS_DIR:-solutions}" "${level_args[@]}" "${resume_args[@]}" \
        ${PAIR_SECONDS:+--max-pair-seconds "$PAIR_SECONDS"} --json > "$out/$tag.jsonl" 2> "$out/$tag.txt"
    tail -n 4 "$out/$tag.txt"
    python - "$out/$tag.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for r in sorted(rows, key=lambda r: r["problem"]):
    t = r.get("timing") or {}
    ci, cc = r.get("speedup_ci"), r.get("speedup_vs_compile_ci")
    fmt = lambda s, c: "-" if s is None else f"{s:.3f} [{c[0]:.3f},{c[1]:.3f}]"
    print(f"{r['problem'][:48]:48} {r['solution'].rsplit('/',1)[-1][:34]:34} {r['status']:13} "
          f"{fmt(r.get('speedup'), ci):24} {fmt(r.get('speedup_vs_compile'), cc):24} {t.get('mode','-'):5} "
          f"{t.get('rounds','-')!s:>4} {','.join(r.get('flags') or [])}")
PY
    summary "$out/$tag"
    ;;
twice)
    deadline=$(( $(date +%s) + ${TWICE_SECONDS:-560} ))
    declare -A longest=()                               # per level: the longest run so far
    tree_args=(--problems-dir "${PROBLEMS_DIR:-problems}" --solutions-dir "${SOLUTIONS_DIR:-solutions}")
    where_args=(--device "${DEVICE:-cuda}")
    [ "${DEVICE:-cuda}" = cuda ] && where_args+=(--gpus "${GPUS:-0}")
    set -f                                              # the globs are run_eval.py's, not the shell's
    echo "== building the candidates of: ${SELS}"
    /usr/bin/time -f "builds %e s" python - "${PROBLEMS_DIR:-problems}" "${SOLUTIONS_DIR:-solutions}" \
        "${DEVICE:-cuda}" ${SELS} <<'PY'
import sys
from pathlib import Path
from harness import meta
from harness.run.build import build_all
from harness.core.config import load_config
from harness.core.discover import discover
from harness.run.pipeline import toolchain_for
problems, solutions, device, *sels = sys.argv[1:]
cfg = load_config(Path("config.yaml"), {})
pairs = []
for sel in sels:
    level, glob = sel.split(":", 1)
    pairs += discover(Path(problems), Path(solutions), level or None, glob or "*")[1]
builds = build_all(pairs, Path(cfg.cache_dir) / "builds", toolchain_for(device, cfg, meta.gpus()), 16,
                   cfg.build_timeout, 0)
for cid, b in sorted(builds.items()):
    print(f"  {cid}: {b.status}{' (cached)' if b.cached else ''} {b.seconds} s")
PY
    for sel in ${SELS}; do
        lvl=${sel%%:*} glob=${sel#*:}
        key=${lvl:-any}                                 # the level whose longest run decides
        est=${longest[$key]:-${EST:-120}}
        left=$(( deadline - $(date +%s) ))
        if [ "$left" -lt $(( 2 * est + 20 )) ]; then
            echo "skip $sel: $left s left, two runs may take $(( 2 * est )) s"; continue
        fi
        for tag in a b; do
            t0=$(date +%s)
            [ $(( deadline - t0 )) -gt 10 ] || { echo "no time left for $sel run $tag"; break 2; }   # (timeout 0: none)
            timeout -s INT "$(( deadline - t0 ))" python run_eval.py "${tree_args[@]}" "${where_args[@]}" --jobs 16 \
                --output-dir "$out/$tag" --compile-modes "${COMPILE:-default}" --processes "${PROCS:-3}" \
                ${lvl:+--level "$lvl"} --problem "${glob:-*}" --json >> "$out/$tag.jsonl" 2>> "$out/$tag.txt"
            rc=$? dt=$(( $(date +%s) - t0 ))
            [ "$dt" -gt "${longest[$key]:-0}" ] && longest[$key]=$dt      # measured: EST no longer counts
            echo "$sel run $tag: exit $rc, $dt s"
        done
    done
    set +f
    for tag in a b; do [ -d "$out/$tag" ] && summary "$out/$tag"; done
    [ -d "$out/b" ] && python scripts/candidate_table.py "$out"/b/*/ --against "$out"/a/*/
    touch "$out/twice.done"
    ;;
twice-bg)
    BG="scripts/gpu_check.sh twice" bash "$0" bg
    ;;
bg)
    # BG=script: that script run detached (setsid) in a copy of this tree, its OUT under $W/out, then `follow`
    w=${W:-/tmp/w}
    rm -rf "$w/h" "$w/out" && mkdir -p "$w/out" && cp -a . "$w/h"
    (cd "$w/h" && OUT="$w/out" setsid nohup bash -c "bash ${BG:?}; touch $w/out/bg.done" > "$w/log" 2>&1 < /dev/null &)
    echo "== $BG started under setsid in $w/h; following it"
    bash "$0" follow
    ;;
follow)
    w=${W:-/tmp/w}
    snap() { tar czf "$out/snap.tgz.tmp" -C "$w" out log 2>/dev/null && mv -f "$out/snap.tgz.tmp" "$out/snap.tgz"; }
    end=$(( $(date +%s) + ${FOLLOW_SECONDS:-570} ))
    until [ -e "$w/out/bg.done" ] || [ "$(date +%s)" -ge "$end" ]; do sleep 15; snap; done
    snap
    grep -E "run [ab]:|skip |no time left|builds |^== |wall|pairs:|reduced_precision" "$w/log" | tail -n 40
    tail -n 5 "$w/log"
    if [ -e "$w/out/twice.done" ]; then
        echo "== twice has ended"; sed -n '/^| /,$p' "$w/log" | tail -n 60
    elif [ -e "$w/out/bg.done" ]; then
        echo "== the background script has ended"
    else
        echo "== the background script still runs: call follow again"
    fi
    ;;
spread)
    echo "== A/A spread across process pairs: the same problem calibrated ${REPEAT:-4} times per GPU"
    (for i in $(seq "${REPEAT:-4}"); do timeout 120 python run_eval.py calibrate --gpus "$last" --trials 1 \
        --output-dir "$out/spread" --level level2 --problem '*024_conv2d_batchnorm_relu' 2>&1 | grep "level2/"; done \
        > "$out/spread_024.txt") &
    timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -k "graph_replay or calibrate_on_the_gpu" 2>&1 | tail -n 20
    for i in $(seq "${REPEAT:-4}"); do timeout 120 python run_eval.py calibrate --gpus 0 --trials 1 \
        --output-dir "$out/spread" --level level3 --problem '*009_gru' 2>&1 | grep "level3/"; done
    wait
    cat "$out/spread_024.txt"
    ;;
placement)
    echo "== does memory placement move a call's time? (benchmarks/placement.py; GPU 0 and GPU $last)"
    (for p in problems/level2/024_conv2d_batchnorm_relu.py problems/level2/012_gemm_bias_leakyrelu_gelu.py; do
        echo "-- $p"; CUDA_VISIBLE_DEVICES=$last timeout 200 python benchmarks/placement.py "$p"; done > "$out/placement_b.txt" 2>&1) &
    for p in problems/level3/009_gru.py problems/level3/010_lstm_last_hidden.py; do
        echo "-- $p"; CUDA_VISIBLE_DEVICES=0 timeout 200 python benchmarks/placement.py "$p"; done 2>&1
    wait
    cat "$out/placement_b.txt"
    ;;
bias)
    echo "== where does an A/A pair's between-process bias come from? placement, then fresh process pairs"
    for p in problems/level1/019_gelu.py problems/level2/024_conv2d_batchnorm_relu.py problems/level3/009_gru.py; do
        echo "-- $p"; timeout 120 python benchmarks/placement.py "$p" --placements 6 --rounds 8
    done 2>&1 | tee "$out/placement.txt"
    for i in 1 2 3; do timeout 100 python run_eval.py calibrate --gpus 0 --trials 1 --output-dir "$out/bias" \
        --level level1 --problem '*01[89]_*' 2>&1 | grep "level1/"; done | tee "$out/aa_gelu_relu.txt"
    for pin in "" "taskset -c 5"; do echo "-- GRU A/A ${pin:-unpinned}"; for i in 1 2 3; do timeout 100 $pin python \
        run_eval.py calibrate --gpus 0 --trials 1 --output-dir "$out/bias" --level level3 --problem '*009_gru' 2>&1 \
        | grep "level3/"; done; done | tee "$out/aa_gru.txt"
    ;;
processes)
    echo "== A/A in ${PROCS:-3} process pairs per problem (--processes), problems whose A/A moved between processes"
    for sel in "level1 */0[01][1589]_[grm][ealu]*" "level2 */024_*" "level3 */0[01][09]_*"; do
        set -- $sel
        timeout "${CAL_TIMEOUT:-300}" python run_eval.py calibrate --gpus 0 --trials 1 --processes "${PROCS:-3}" \
            --output-dir "$out/proc" --level "$1" --problem "$2" 2>&1 | grep -E "level[123]/|within"
    done | tee "$out/processes.txt"
    echo "== the shipped level3 candidates (no compile baselines): custom_share and little_custom_work"
    timeout "${SUITE_TIMEOUT:-240}" python run_eval.py --gpus 0 --output-dir "$out/l3" --level level3 \
        --compile-modes none --json > "$out/l3.jsonl" 2> "$out/l3.txt"
    python - "$out/l3.jsonl" <<'PY'
import json, sys
for r in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")):
    k = (r.get("timing") or {})
    print(r["problem"], r["solution"].rsplit("/", 1)[-1], r["status"], r.get("speedup"), r.get("flags"),
          (r.get("kernels") or r.get("profile") or {}).get("custom_share") if isinstance(r.get("kernels") or r.get("profile"), dict) else "")
PY
    ;;
trusted)
    # issue 28 (the trusted side reads what it checks): the exploit set and graph-mode skipping on the GPU, then A/A
    # of four problems and the cost of a pair, on this tree and (when carried in .old/, `git archive 73b98c5 harness
    # run_eval.py config.yaml`) on the tree before it, back to back on this machine
    echo "== GPU exploit tests (trusted reads, graph slots)"
    timeout -s INT "${TESTS_TIMEOUT:-300}" python -m pytest -q -rf --tb=short -m gpu tests/test_gpu.py \
        -k "${K:-exploits_on_the_gpu or graph_mode or captured}" 2>&1 | tee "$out/trusted_tests.txt" | tail -n 40
    here=$(pwd); abs_out=$(cd "$out" && pwd)
    for tree in . .old; do
        [ -f "$tree/run_eval.py" ] || continue
        name=$([ "$tree" = . ] && echo new || echo old)
        echo "== A/A, one process pair each ($name tree)"
        (cd "$tree" && timeout -s INT "${CAL_SECONDS:-150}" python run_eval.py calibrate --processes 1 \
            --problems-dir "$here/problems" --solutions-dir "$here/solutions" --output-dir "$abs_out/cal-$name" \
            --problem "${PROBLEM:-*00[23]_*}" --level "${LEVEL:-level1}" 2>&1) | grep -v "━" | tail -n 8
        python benchmarks/pair_time.py --from $(ls -d "$abs_out"/cal-$name/*/ 2>/dev/null) 2>&1 | tail -n 6
    done
    ;;
first)
    echo "== GPU tests, then (CAL_SECONDS) six A/A problems"
    export TEST_RUNS_OUT="$out/runs"
    timeout -s INT "${TESTS_TIMEOUT:-450}" python -m pytest -q -rf --tb=short -m gpu tests/ ${K:+-k "$K"} 2>&1 \
        | tee "$out/gpu_tests.txt" | tail -n 60
    if [ -n "${CAL_SECONDS:-}" ]; then
        timeout -s INT "$CAL_SECONDS" python run_eval.py calibrate --gpus "$all" --output-dir "$out/cal" \
            --problem '*00[2-3]_*' 2>&1 | grep -v "━" | tee "$out/cal_smoke.txt" | tail -n 20
    fi
    ;;
root)
    echo "== the sandbox, exploit and process-tree tests as this machine's user (root there)"
    export TEST_RUNS_OUT="$out/runs"
    timeout -s INT "${ROOT_TIMEOUT:-560}" python -m pytest -q -rf --tb=short -p no:cacheprovider tests/test_sandbox.py \
        tests/test_exploits.py tests/test_processes.py ${K:+-k "$K"} 2>&1 | tee "$out/root_tests.txt" | tail -n 40
    ;;
stage44)
    # issue 44's GPU half: a smoke of staged samples (inputs written by the reference into device memory the
    # candidate maps, the L2 flush and the mutation check in the reference), cold and graph mode, an exploit set;
    # then (unless SMOKE_ONLY) the GPU tests K selects
    echo "== staged GPU samples: two honest pairs, cold (GEMM) and graph (elementwise), and the gpu_tree candidates"
    export TEST_RUNS_OUT="$out/runs"
    for sel in level2/001_gemm_relu_scale level1/018_relu; do
        timeout -s INT "${SMOKE_TIMEOUT:-150}" python run_eval.py --compile-modes none --output-dir "$out/smoke" \
            --problem "$sel" 2>&1 | grep -v "━" | tail -n 12
    done
    timeout -s INT "${SMOKE_TIMEOUT:-200}" python run_eval.py --compile-modes none --output-dir "$out/tree" \
        --problems-dir tests/fixtures/gpu_tree/problems --solutions-dir tests/fixtures/gpu_tree/solutions \
        2>&1 | grep -v "━" | tail -n 25
    if [ -z "${SMOKE_ONLY:-}" ]; then
        timeout -s INT "${TESTS_TIMEOUT:-330}" python -m pytest -q -rf --tb=short -m gpu tests/ ${K:+-k "$K"} 2>&1 \
            | tee "$out/gpu_tests.txt" | tail -n 40
    fi
    ;;
exec44)
    # issue 44, the reference's executor: A/A of short problems on one GPU, back to back, on the default (in-process)
    # path and on the staged path (timing.staged_gpu in a config of its own), PROCS (2) process pairs a problem;
    # then (unless SMOKE_ONLY) the GPU tests K selects, their runs kept under $out/runs
    staged_cfg=$(staged_config) || exit 1
    for path in ${PATHS:-default staged}; do
        cfgs=(--config "$(unstaged_config)"); [ "$path" = staged ] && cfgs=(--config "$staged_cfg")
        echo "== A/A, $path path: the gpu_tree fixtures and ${EXEC_PROBLEMS:-level1 018/019/026, level2 001}"
        timeout -s INT "${CAL_TIMEOUT:-150}" python run_eval.py calibrate "${cfgs[@]}" --compile-modes none \
            --processes "${PROCS:-2}" ${CAL_ARGS:-} --problems-dir tests/fixtures/gpu_tree/problems \
            --solutions-dir tests/fixtures/gpu_tree/solutions --output-dir "$out/cal_tree_$path" 2>&1 \
            | grep -v "━" | tail -n 8
        for sel in ${EXEC_PROBLEMS:-level1:018_* level1:019_* level1:026_* level2:001_*}; do
            timeout -s INT "${CAL_TIMEOUT:-150}" python run_eval.py calibrate "${cfgs[@]}" --compile-modes none \
                --processes "${PROCS:-2}" ${CAL_ARGS:-} --level "${sel%%:*}" --problem "${sel#*:}" \
                --output-dir "$out/cal_${path}" 2>&1 | grep -v "━" | grep -E "^(level|0|problem)" | tail -n 3
        done
    done
    if [ -z "${SMOKE_ONLY:-}" ]; then
        export TEST_RUNS_OUT="$out/runs"
        timeout -s INT "${TESTS_TIMEOUT:-330}" python -m pytest -q -rf --tb=short -m gpu tests/ ${K:+-k "$K"} 2>&1 \
            | tee "$out/gpu_tests.txt" | tail -n 40
    fi
    ;;
suite44)
    # issue 44 items 6 and 8 on the staged GPU path (timing.staged_gpu in a config of its own), then issue 45 item 1,
    # within TOTAL_SECONDS (1400) from the start, meant to run detached (BG="scripts/gpu_check.sh suite44" ... bg):
    #   1. every shipped candidate on GPUs $all, short timing (SWEEP_ARGS), compile baselines none: the statuses, and
    #      how many are flagged reduced_precision (0 expected)
    #   2. `calibrate` over the whole suite (LEVELS, default level2 level3 level1), one process pair a problem
    #   3. benchmarks/scaling.py (SCALE_SETTINGS, default local:1,local:2,dask:2; --pairs 32) with what time is left
    # STEPS picks some of them ("sweep aa scaling", the default). A fresh 2-GPU host took 342 s to build the 103
    # shipped candidates (32 jobs): the sweep needs most of a command for its builds alone.
    t_end=$(( $(date +%s) + ${TOTAL_SECONDS:-1400} ))
    staged_cfg=$(staged_config) || exit 1
    left() { echo $(( t_end - $(date +%s) )); }
    steps=" ${STEPS:-sweep aa scaling} "
    [[ "$steps" == *" sweep "* ]] && echo "== 1. every shipped candidate, staged, GPUs $all ($(left) s left)" &&
    /usr/bin/time -f "sweep wall %e s" timeout -s INT "${SWEEP_TIMEOUT:-420}" python run_eval.py --config "$staged_cfg" \
        --gpus "$all" --jobs 32 --compile-modes none --output-dir "$out/sweep" ${SWEEP_ARGS:---max-pair-seconds 3} \
        --json > "$out/sweep.jsonl" 2> "$out/sweep.txt"
    [[ "$steps" == *" sweep "* ]] && tail -n 3 "$out/sweep.txt" && python - "$out/sweep.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(len(rows), "pairs:", dict(collections.Counter(r["status"] for r in rows)))
print("reduced_precision:", [r["problem"] + " " + r["solution"] for r in rows if "reduced_precision" in (r.get("flags") or [])])
for r in rows:
    if r["status"] != "ok":
        print(" ", r["status"], r["problem"], r["solution"].rsplit("/", 1)[-1], (r.get("error") or "")[:160])
PY
    set -f
    for lvl in ${LEVELS:-level2 level3 level1}; do
        [[ "$steps" == *" aa "* ]] || break
        [ "$(left)" -gt 60 ] || { echo "no time left for the A/A of $lvl"; break; }
        echo "== 2. A/A of $lvl, staged, GPUs $all ($(left) s left)"
        /usr/bin/time -f "calibrate $lvl wall %e s" timeout -s INT "$(( $(left) - 30 ))" python run_eval.py calibrate \
            --config "$staged_cfg" --gpus "$all" --jobs 32 --trials 1 --processes 1 --compile-modes none \
            --level "$lvl" --output-dir "$out/aa" >> "$out/aa.txt" 2>&1
        grep -E "wall|within" "$out/aa.txt" | tail -n 2
    done
    set +f
    if [[ "$steps" == *" scaling "* ]] && [ "$(left)" -gt 120 ]; then
        echo "== 3. scaling ($(left) s left)"
        SCALE_SECONDS=$(( $(left) - 40 )) SCALE_SETTINGS=${SCALE_SETTINGS:-local:1,local:2,dask:2} \
            SCALE_ARGS=${SCALE_ARGS:---pairs 32} bash "$0" scaling
    fi
    touch "$out/suite44.done"
    ;;
lease45)
    # Issue 45's GPU measurements and the GPU tests in one detached run (BG="scripts/gpu_check.sh lease45" ... bg):
    #   A. GPU 0: tests/test_gpu.py; GPU 1: the other GPU-marked tests; the upper half of the cores: scaling's builds
    #      (beside the compile warm-up's max-autotune the tests' timed pairs read inconsistent: it runs alone, E)
    #   B. benchmarks/scaling.py: local:1, dask:2, local:2 over 32 pairs (item 1; SCALE_ARGS), within SCALE_SECONDS
    #      (480 s: local:1 and local:2 alone take ~300 s on an H200 host; docs/measurements.md)
    #   C. benchmarks/agent_throughput.py on GPU 0 (item 3; carry .kbsrc, and KernelBench's wheels in KB_WHEELS_DIR)
    #   D. `cluster` with the last dask worker killed KILL_AFTER (40) s into the dask run (item 4)
    #   E. benchmarks/compile_cache.py on GPU 1: two level-2 problems, both default torch.compile modes (item 2)
    # STEPS picks some ("A B C D E", the default).
    export TEST_RUNS_OUT="$out/runs"
    steps=" ${STEPS:-A B C D E} "
    if [[ "$steps" == *" A "* ]]; then
        echo "== A. GPU tests on both GPUs, scaling's builds ($(date +%T))"
        (CUDA_VISIBLE_DEVICES=0 timeout -s INT "${TESTS_TIMEOUT:-400}" python -m pytest -q -rf --tb=short -m gpu \
            tests/test_gpu.py ${K:+-k "$K"} > "$out/gpu_tests_a.txt" 2>&1) &
        (export CUDA_VISIBLE_DEVICES=1
         timeout -s INT "${TESTS_TIMEOUT:-400}" python -m pytest -q -rf --tb=short -m gpu tests/test_peer.py \
             tests/test_precision_gpu.py tests/test_profile.py tests/test_profiling_gpu.py > "$out/gpu_tests_b.txt" 2>&1) &
        # the builds on the second half of the cores (the GPU tests' core share is the first), --deadline-s 1: no run;
        # NO_BUILDS=1: the tests alone
        [ -z "${NO_BUILDS:-}" ] && SCALE_SECONDS=1 SCALE_TIMEOUT=380 SCALE_ARGS=${SCALE_ARGS:---pairs 32 --max-pair-seconds 3} \
            taskset -c "$(( $(nproc) / 2 ))-$(( $(nproc) - 1 ))" bash "$0" scaling > "$out/scaling_build.txt" 2>&1
        wait
        [ -e "$out/scaling_build.txt" ] && tail -n 4 "$out/scaling_build.txt"
        echo "-- tests/test_gpu.py (GPU 0)"; tail -n 15 "$out/gpu_tests_a.txt"
        echo "-- the other GPU tests (GPU 1)"; tail -n 10 "$out/gpu_tests_b.txt"
    fi
    if [[ "$steps" == *" B "* ]]; then
        echo "== B. scaling ($(date +%T))"
        SCALE_SECONDS=${SCALE_SECONDS:-480} SCALE_SETTINGS=${SCALE_SETTINGS:-local:1,dask:2,local:2} \
            SCALE_ARGS=${SCALE_ARGS:---pairs 32 --max-pair-seconds 3} bash "$0" scaling | tail -n 20
    fi
    if [[ "$steps" == *" C "* ]]; then
        echo "== C. throughput ($(date +%T))"
        KB_WHEELS_DIR=${KB_WHEELS_DIR:-.kbw} THROUGHPUT_TIMEOUT=${THROUGHPUT_TIMEOUT:-450} bash "$0" throughput \
            | tail -n 12
    fi
    if [[ "$steps" == *" D "* ]]; then
        echo "== D. cluster, a worker killed ($(date +%T))"
        KILL_AFTER=${KILL_AFTER:-40} CLUSTER_TIMEOUT=${CLUSTER_TIMEOUT:-240} bash "$0" cluster
    fi
    if [[ "$steps" == *" E "* ]]; then
        echo "== E. the compile warm-up, GPU 1 ($(date +%T))"
        COMPILE_TIMEOUT=${COMPILE_TIMEOUT:-330} compile_cache_run 1
        tail -n 14 "$out/compile_cache.txt"
    fi
    echo "== lease45 ended ($(date +%T))"
    ;;
quad45)
    # Issue 45 on a 4-GPU host in one detached run (BG="scripts/gpu_check.sh quad45" ... bg), with issue 44's C and G:
    #   1. scaling: every setting this machine has (local:1, local:2, dask:2, local:4, dask:4) over 32 pairs
    #   2. at once: throughput of a CUDA candidate on GPU 0 (item 3: KernelBench compiles serially, ours in parallel),
    #      short44 on GPU 2, the signature forwards' GPU tests (lease44's G) on GPU 3
    echo "== 1. scaling ($(date +%T))"
    SCALE_SECONDS=${SCALE_SECONDS:-1000} SCALE_ARGS=${SCALE_ARGS:---pairs 32 --max-pair-seconds 3} bash "$0" scaling \
        | tail -n 20
    echo "== 2. throughput on GPU 0, short44 on GPU 2, the precision tests on GPU 3 ($(date +%T))"
    (SHORT_GPU=2 bash "$0" short44 > "$out/short44.txt" 2>&1) &
    (export TEST_RUNS_OUT="$out/runs" CUDA_VISIBLE_DEVICES=3
     timeout -s INT 300 python -m pytest -q -rfs --tb=short -m gpu tests/test_precision_gpu.py tests/test_gpu.py \
         -k "precision or graph_mode_captures" > "$out/precision_gpu.txt" 2>&1) &
    CUDA_VISIBLE_DEVICES=0 KB_WHEELS_DIR=${KB_WHEELS_DIR:-.kbw} THROUGHPUT_TIMEOUT=${THROUGHPUT_TIMEOUT:-720} \
        THROUGHPUT_ARGS=${THROUGHPUT_ARGS:---candidate solutions/level2/001_gemm_relu_scale/cuda_fused_relu_scale.py --kb-seconds 240} \
        bash "$0" throughput | tail -n 14
    wait
    echo "-- short44 (GPU 2)"; cat "$out/short44.txt"
    echo "-- precision (GPU 3)"; tail -n 12 "$out/precision_gpu.txt"
    echo "== quad45 ended ($(date +%T))"
    ;;
quad46)
    # The zygote's first full GPU lease on a 4-GPU host, detached (BG="scripts/gpu_check.sh quad46" ... bg); STEPS picks
    # ("T S E", the default):
    #   T. every GPU-marked test, alone on the host, split over the 4 GPUs (test_gpu.py in three parts, T0-T2 their -k;
    #      the memory tests and the other GPU files on GPU 3); QUAD_TESTS_TIMEOUT (330) each
    #   S. scaling (issue 45 item 1): SCALE_SETTINGS over 32 pairs, workers traced (KB_TRACE), the builds first
    #   E. the compile cache's second run on GPU 0 (issue 45 item 2): two level-2 problems, both default modes
    export TEST_RUNS_OUT="$out/runs"
    steps=" ${STEPS:-T S E} "
    if [[ "$steps" == *" T "* ]]; then
        echo "== T. GPU tests over 4 GPUs ($(date +%T))"
        t0=${T0:-verdicts or events_with or custom_kernel or side_stream or roofline or left_running or interference or tiny_call}
        t1=${T1:-exploits or forged or skipped_captured}
        t2=${T2:-calibrate or start_event}
        g=0
        for k in "$t0" "$t1" "$t2"; do
            (CUDA_VISIBLE_DEVICES=$g timeout -s INT "${QUAD_TESTS_TIMEOUT:-330}" python -m pytest -q -rfxX --tb=short -m gpu \
                tests/test_gpu.py -k "$k" > "$out/gpu_tests_$g.txt" 2>&1) &
            g=$((g + 1))
        done
        (CUDA_VISIBLE_DEVICES=3 timeout -s INT "${QUAD_TESTS_TIMEOUT:-330}" python -m pytest -q -rfxX --tb=short -m gpu \
            tests/test_gpu.py -k memory tests/test_peer.py tests/test_precision_gpu.py tests/test_profile.py \
            tests/test_profiling_gpu.py > "$out/gpu_tests_3.txt" 2>&1) &
        wait
        for g in 0 1 2 3; do echo "-- GPU $g"; tail -n 8 "$out/gpu_tests_$g.txt"; done
    fi
    if [[ "$steps" == *" S "* ]]; then
        echo "== S. scaling ($(date +%T))"
        KB_TRACE=1 SCALE_SECONDS=${SCALE_SECONDS:-600} SCALE_SETTINGS=${SCALE_SETTINGS:-local:1,local:4,dask:4,local:2,dask:2} \
            SCALE_ARGS=${SCALE_ARGS:---pairs 32 --max-pair-seconds 3} bash "$0" scaling | tail -n 20
    fi
    if [[ "$steps" == *" E "* ]]; then
        echo "== E. the compile cache's second run, GPU 0 ($(date +%T))"
        COMPILE_TIMEOUT=${COMPILE_TIMEOUT:-300} compile_cache_run 0
        tail -n 14 "$out/compile_cache.txt"
    fi
    echo "== quad46 ended ($(date +%T))"
    ;;
solo46c)
    # One GPU: whether a zygote that imports the compile stack is ready on a GPU host (a worker forked from it),
    # then level1/005_matrix_vector (issue 44's memory clause and its untimed cost), then the compile cache's
    # second run (issue 45 item 2) with every run's stderr kept
    echo "== the compile stack's zygote ($(date +%T))"
    timeout -s INT 120 python - <<'PY' 2>&1 | tail -n 5
from pathlib import Path
from harness.run import workerproc as procs
env = procs.worker_env({"KB_DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": "0", "KB_COMPILE_WARM": "1", "KB_SANDBOX": "off"})
worker = procs.Worker("build", env, Path("/tmp/zygote_probe.log"))
print("worker:", type(worker.proc).__name__, "preload kept:", procs._spawner.zygotes.preload,
      "zygotes:", [z.preload for z in procs._spawner.zygotes.live.values()])
worker.kill(); worker.close()
PY
    echo "== matrix_vector ($(date +%T))"
    matvec
    grep -i "zygote" "$out/mv.txt" | head -n 3
    matvec_report
    echo "== the compile cache's second run ($(date +%T))"
    compile_cache_run 0
    tail -n 12 "$out/compile_cache.txt"
    grep -rih "could not be forked\|compile warm-up" "$out/compile_cache.txt" /tmp/kb-compile-cache* 2>/dev/null | head -n 6
    echo "== solo46c ended ($(date +%T))"
    ;;
solo46)
    # The fourteenth session on one GPU, detached (BG="scripts/gpu_check.sh solo46" ... bg):
    #   A. at once: level1/005_matrix_vector (issue 44's memory clause) and the GPU files other than test_gpu.py
    #   C. the compile cache's second run (issue 45 item 2), then the cover-window tests alone
    export TEST_RUNS_OUT="$out/runs"
    echo "== A. matrix_vector beside the other GPU tests ($(date +%T))"
    (timeout -s INT 300 python -m pytest -q -rfxX --tb=short -m gpu tests/test_peer.py tests/test_precision_gpu.py \
        tests/test_profile.py tests/test_profiling_gpu.py > "$out/gpu_tests_0.txt" 2>&1) &
    matvec
    wait
    tail -n 8 "$out/gpu_tests_0.txt"
    echo "-- matrix_vector"
    matvec_report
    echo "== C. the compile cache's second run, then the cover window ($(date +%T))"
    compile_cache_run 0
    tail -n 12 "$out/compile_cache.txt"
    timeout -s INT 200 python -m pytest -q -rfxX --tb=short -m gpu tests/test_gpu.py -k start_event \
        > "$out/gpu_tests_cover.txt" 2>&1
    echo "-- cover window"; tail -n 25 "$out/gpu_tests_cover.txt"
    echo "== solo46 ended ($(date +%T))"
    ;;
quad46b)
    # The second 4-GPU lease of the fourteenth session, detached (BG="scripts/gpu_check.sh quad46b" ... bg):
    #   A. at once: scaling's builds on every core (the build time with one zygote for all builds); GPU 0: test_peer
    #      and test_precision_gpu; GPU 1: test_profile and test_profiling_gpu; GPU 2: level1/005_matrix_vector (issue
    #      44's memory clause: each worker's peak against 2x the eager peak + 1.5 GiB)
    #   B. scaling (issue 45 item 1), SCALE_SETTINGS within SCALE_SECONDS (420)
    #   C. at once: the compile cache's second run on GPU 0 (issue 45 item 2); the cover-window tests on GPU 1
    export TEST_RUNS_OUT="$out/runs"
    steps=" ${STEPS:-A B C} "
    if [[ "$steps" == *" A "* ]]; then
        echo "== A. builds, the other GPU tests, matrix_vector ($(date +%T))"
        (CUDA_VISIBLE_DEVICES=0 timeout -s INT 300 python -m pytest -q -rfxX --tb=short -m gpu tests/test_peer.py \
            tests/test_precision_gpu.py > "$out/gpu_tests_0.txt" 2>&1) &
        (CUDA_VISIBLE_DEVICES=1 timeout -s INT 300 python -m pytest -q -rfxX --tb=short -m gpu tests/test_profile.py \
            tests/test_profiling_gpu.py > "$out/gpu_tests_1.txt" 2>&1) &
        (matvec --gpus 2) &
        SCALE_SECONDS=1 SCALE_TIMEOUT=300 SCALE_ARGS=${SCALE_ARGS:---pairs 32 --max-pair-seconds 3} \
            bash "$0" scaling > "$out/scaling_build.txt" 2>&1
        wait
        grep "builds:" "$out/scaling_build.txt"
        for g in 0 1; do echo "-- GPU $g"; tail -n 6 "$out/gpu_tests_$g.txt"; done
        echo "-- matrix_vector (GPU 2)"
        matvec_report
    fi
    if [[ "$steps" == *" B "* ]]; then
        echo "== B. scaling ($(date +%T))"
        KB_TRACE=1 SCALE_SECONDS=${SCALE_SECONDS:-420} SCALE_SETTINGS=${SCALE_SETTINGS:-local:1,local:4,dask:4,local:2,dask:2} \
            SCALE_ARGS=${SCALE_ARGS:---pairs 32 --max-pair-seconds 3} bash "$0" scaling | tail -n 20
    fi
    if [[ "$steps" == *" C "* ]]; then
        echo "== C. the compile cache's second run (GPU 0), the cover-window tests (GPU 1) ($(date +%T))"
        (CUDA_VISIBLE_DEVICES=1 timeout -s INT 200 python -m pytest -q -rfxX --tb=short -m gpu tests/test_gpu.py \
            -k start_event > "$out/gpu_tests_cover.txt" 2>&1) &
        compile_cache_run 0
        wait
        tail -n 12 "$out/compile_cache.txt"
        echo "-- cover window (GPU 1)"; tail -n 25 "$out/gpu_tests_cover.txt"
    fi
    echo "== quad46b ended ($(date +%T))"
    ;;
duo47)
    # The fifteenth session's 2-GPU lease, detached (BG="scripts/gpu_check.sh duo47" ... bg); STEPS picks:
    #   A. scaling's 32 builds alone, every core (the build time with one zygote for all builds)
    #   B. scaling (issue 45 item 1): local:1, local:2, dask:2, then dask:1 (dask's own baseline: `own eff.`)
    #   C. at once: the GPU tests of test_gpu.py on GPU 0; on GPU 1 the other GPU files, the compile stack's zygote
    #      probe and the compile cache's second run (issue 45 item 2)
    export TEST_RUNS_OUT="$out/runs"
    steps=" ${STEPS:-A B C} "
    if [[ "$steps" == *" A "* ]]; then
        echo "== A. scaling's builds ($(date +%T))"
        SCALE_SECONDS=1 SCALE_TIMEOUT=300 SCALE_ARGS=${SCALE_ARGS:---pairs 32 --max-pair-seconds 3} \
            bash "$0" scaling > "$out/scaling_build.txt" 2>&1
        grep "builds" "$out/scaling_build.txt" | head -n 3
    fi
    if [[ "$steps" == *" B "* ]]; then
        echo "== B. scaling ($(date +%T))"
        SCALE_SECONDS=${SCALE_SECONDS:-480} SCALE_SETTINGS=${SCALE_SETTINGS:-local:1,local:2,dask:2,dask:1} \
            SCALE_ARGS=${SCALE_ARGS:---pairs 32 --max-pair-seconds 3} bash "$0" scaling | tail -n 20
        python - results/scaling/runs <<'PY'
import json, pathlib, sys
for run in sorted(pathlib.Path(sys.argv[1]).glob("*/*/run.json")):
    meta = json.loads(run.read_text())
    print(run.parent.parent.name, "wall", meta.get("wall_seconds"), "cluster_start", (meta.get("dask") or {}).get("cluster_start"))
PY
    fi
    if [[ "$steps" == *" C "* ]]; then
        echo "== C. test_gpu.py (GPU 0); the other GPU files, the zygote probe, the compile cache (GPU 1) ($(date +%T))"
        (CUDA_VISIBLE_DEVICES=0 timeout -s INT "${TESTS_TIMEOUT:-420}" python -m pytest -q -rfxX --tb=short -m gpu \
            tests/test_gpu.py > "$out/gpu_tests_0.txt" 2>&1) &
        (CUDA_VISIBLE_DEVICES=1 timeout -s INT 300 python -m pytest -q -rfxX --tb=short -m gpu tests/test_peer.py \
            tests/test_precision_gpu.py tests/test_memory.py tests/test_profile.py tests/test_profiling_gpu.py \
            > "$out/gpu_tests_1.txt" 2>&1
         zygote_probe 1
         compile_cache_run 1) &
        wait
        echo "-- test_gpu.py (GPU 0)"; tail -n 25 "$out/gpu_tests_0.txt"
        echo "-- the other GPU files (GPU 1)"; tail -n 8 "$out/gpu_tests_1.txt"
        echo "-- the zygote probe"; tail -n 6 "$out/zygote_probe.txt"
        echo "-- the compile cache"; tail -n 12 "$out/compile_cache.txt"
        grep -rih "could not be forked\|compile warm-up\|not ready" "$out/compile_cache.txt" 2>/dev/null | head -n 6
    fi
    echo "== duo47 ended ($(date +%T))"
    ;;
solo47)
    # The fifteenth session on one GPU, detached (BG="scripts/gpu_check.sh solo47" ... bg), one step after another:
    # the compile stack's zygote probe, the compile cache's second run (issue 45 item 2), test_gpu.py, the other GPU
    # files
    export TEST_RUNS_OUT="$out/runs"
    echo "== the zygote probe ($(date +%T))"; zygote_probe 0; tail -n 6 "$out/zygote_probe.txt"
    echo "== the compile cache ($(date +%T))"; compile_cache_run 0; tail -n 12 "$out/compile_cache.txt"
    grep -rih "could not be forked\|compile warm-up\|not ready" "$out/compile_cache.txt" 2>/dev/null | head -n 6
    echo "== test_gpu.py ($(date +%T))"
    timeout -s INT "${TESTS_TIMEOUT:-420}" python -m pytest -q -rfxX --tb=short -m gpu tests/test_gpu.py \
        > "$out/gpu_tests_0.txt" 2>&1; tail -n 25 "$out/gpu_tests_0.txt"
    if [ -z "${NO_OTHER:-}" ]; then         # NO_OTHER=1: test_gpu.py's files only
        echo "== the other GPU files ($(date +%T))"
        timeout -s INT 240 python -m pytest -q -rfxX --tb=short -m gpu tests/test_peer.py tests/test_precision_gpu.py \
            tests/test_profile.py tests/test_profiling_gpu.py > "$out/gpu_tests_1.txt" 2>&1; tail -n 8 "$out/gpu_tests_1.txt"
    fi
    echo "== solo47 ended ($(date +%T))"
    ;;
mem47)
    # Issue 44 item 8 on one GPU, detached (BG="scripts/gpu_check.sh mem47" ... bg): every problem of LEVEL (level1)
    # calibrated (A/A, one process pair, MEM_ARGS: --max-pair-seconds 2) on the default path, then the staged path;
    # per path the A/A summary and every side over 2x the eager peak + 1.5 GiB
    staged_cfg=$(staged_config) || exit 1
    set -f
    for path in default staged; do
        cfg=$(unstaged_config); [ "$path" = staged ] && cfg=$staged_cfg
        echo "== $path ($(date +%T))"
        /usr/bin/time -f "calibrate $path wall %e s" timeout -s INT "${MEM_TIMEOUT:-400}" python run_eval.py calibrate \
            --config "$cfg" --trials 1 --processes 1 --compile-modes none --level "${LEVEL:-level1}" \
            ${MEM_ARGS:---max-pair-seconds 2} --output-dir "$out/aa_$path" > "$out/aa_$path.txt" 2>&1
        grep -E "wall|within|problems" "$out/aa_$path.txt" | tail -n 4
        python - "$out/aa_$path" <<'PY'
import json, pathlib, sys
GIB = 1 << 30
rows = [json.loads(l) for f in pathlib.Path(sys.argv[1]).glob("*/results.jsonl") for l in f.read_text().splitlines() if l.strip()]
over, n = [], 0
for r in rows:
    m = (r.get("worker") or {}).get("memory") or {}
    eager = m.get("eager_peak_bytes")
    if not isinstance(eager, int):
        continue
    n += 1
    target = 2 * eager + 1.5 * GIB
    for side in ("reference", "candidate"):
        peak = m.get(f"{side}_peak_bytes")
        if side == "candidate" and isinstance(peak, int):
            peak += m.get("arena_peak_bytes") or 0      # the staged inputs' arena counts on the candidate's side
        if isinstance(peak, int) and peak > target:
            over.append(f"{r['problem']} {side} {peak / GIB:.2f} > {target / GIB:.2f} GiB (eager {eager / GIB:.2f})")
print(f"memory: {n} records with an eager peak; {len(over)} sides over 2x eager + 1.5 GiB")
print("\n".join(over))
PY
    done
    set +f
    echo "== mem47 ended ($(date +%T))"
    ;;
mem48)
    # Issue 44 item 8 on one GPU, detached (BG="scripts/gpu_check.sh mem48" ... bg): the bf16x3 host test, then
    # `calibrate` (one process pair, MEM_CAP s a pair) on the default and the staged path at the same time, each on
    # its own cores: a side's peak is its own process's, so the two runs do not change each other's; their A/A
    # figures are not read. MEM_SEL: level1's 007, 009 and 011 (over the target in the fifteenth session) and
    # 042-060 (not reached then), and levels 2 and 3. Then benchmarks/memory.py's summary of each path
    export TEST_RUNS_OUT="$out/runs"
    if [ -z "${MEM_SKIP_HOST:-}" ]; then        # MEM_SKIP_HOST=1: straight to the memory runs
        echo "== the bf16x3 host test ($(date +%T))"
        timeout -s INT 120 python -m pytest -q -rfxX --tb=short -m gpu tests/test_precision_gpu.py -k large \
            > "$out/precision_host.txt" 2>&1; tail -n 3 "$out/precision_host.txt"
    fi
    sel=/tmp/memsel; rm -rf "$sel"; mkdir -p "$sel/level1" "$sel/level2" "$sel/level3"
    if [ -n "${MEM_PICK:-}" ]; then             # e.g. "level1/0{07,55}_*.py level3/007_*.py" (paths under problems/)
        for pick in $(cd problems && eval "ls -d $MEM_PICK"); do cp "problems/$pick" "$sel/${pick%%/*}/"; done
        rmdir "$sel"/level? 2>/dev/null     # the levels it picked nothing of
    else
        cp problems/level1/0{07,09,11}_*.py problems/level1/0{4[2-9],5[0-9],60}_*.py "$sel/level1/"
        cp -r problems/level2 problems/level3 "$sel/"
    fi
    echo "== $(ls "$sel"/*/*.py | wc -l) problems, both paths at once ($(date +%T))"
    staged_cfg=$(staged_config) || exit 1
    for path in default staged; do
        cfg=$(unstaged_config); [ "$path" = staged ] && cfg=$staged_cfg
        (/usr/bin/time -f "calibrate $path wall %e s" timeout -s INT "${MEM_TIMEOUT:-1000}" python run_eval.py \
            calibrate --config "$cfg" --problems-dir "$sel" --trials "${MEM_TRIALS:-1}" --processes 1 \
            --compile-modes none \
            --max-pair-seconds "${MEM_CAP:-1.5}" --output-dir "$out/mem_$path" > "$out/mem_$path.txt" 2>&1
         echo "== $path ended ($(date +%T))") &
    done
    wait
    for path in default staged; do
        echo "-- $path"; grep -E "wall" "$out/mem_$path.txt" | tail -n 1
        python benchmarks/memory.py --from "$out/mem_$path"/*/ > "$out/mem_${path}_table.txt" 2>&1
        sed -n '/^target/,$p' "$out/mem_${path}_table.txt"
    done
    echo "== mem48 ended ($(date +%T))"
    ;;
flip44)
    # Issue 44 after the nineteenth session turned timing.staged_gpu on in config.yaml, one GPU, detached
    # (BG="scripts/gpu_check.sh flip44" ... bg, then `follow`). In turn: each side's memory with 5 trials on both paths
    # at once for level3/007 (the trials' expected outputs now kept on the device only within half of KEEP_BYTES) and
    # FLIP_PICK's others; the GPU tests of test_gpu.py that the staged parametrizations do not cover, now on the
    # staged path by default; then a plain `run_eval.py` (config.yaml as it is) over four level-1 problems with their
    # shipped CUDA candidates, builds included
    export TEST_RUNS_OUT="$out/runs"
    MEM_SKIP_HOST=1 MEM_TRIALS=5 MEM_CAP=${MEM_CAP:-1.5} MEM_TIMEOUT=${MEM_TIMEOUT:-150} \
        MEM_PICK=${FLIP_PICK:-"level3/007_*.py level2/00[1-3]_*.py"} bash "$0" mem48
    echo "== GPU tests, the default config now staged ($(date +%T))"
    gpu_tests flip_tests "${FLIP_TESTS_TIMEOUT:-400}" \
        "not exploits_on_the_gpu and not calibrate_on_the_gpu and not forged_report" 12
    echo "== run_eval.py as configured ($(date +%T))"
    /usr/bin/time -f "run_eval wall %e s" timeout -s INT "${FLIP_RUN_TIMEOUT:-200}" python run_eval.py --level level1 \
        --problem '0[12][89]_*' --compile-modes none --max-pair-seconds 3 --output-dir "$out/flip_run" \
        > "$out/flip_run.txt" 2>&1
    grep -v "━" "$out/flip_run.txt" | tail -n 14
    echo "== flip44 ended ($(date +%T))"
    ;;
flip44b)
    # Issue 44, one GPU, short: the GPU tests changed after flip44 (the memory tests on both paths, the staged one
    # with the arena's and two more contexts' room; cover_window against the parent's clock's allowance; the graph
    # test's candidate named; hog_uncapped, written after the nineteenth session's last lease)
    gpu_tests flip44b_tests "${FLIP_TESTS_TIMEOUT:-400}" \
        "memory_aa_pair or memory_peaks or start_event or takes_the_cards_memory or graph_mode_captures" 20
    ;;
cost44)
    # Issue 44 item 8, one GPU, detached: flip44b's tests, then A/A of AA_LEVEL's AA_GLOB problems on the staged path
    # (the default) with the workers' stages traced (KB_TRACE), cap AA_CAP s, cut at AA_TIMEOUT s; pair_time's parts
    # and trace_pair's stages, where the untimed part of a pair goes
    gpu_tests flip44b_tests "${FLIP_TESTS_TIMEOUT:-400}" \
        "memory_aa_pair or memory_peaks or start_event or takes_the_cards_memory or graph_mode_captures" 20
    echo "== A/A ${AA_LEVEL:-level2} ${AA_GLOB:-02*} staged, traced ($(date +%T))"
    traced_aa "${AA_LEVEL:-level2}" "${AA_GLOB:-02*}" "${AA_TIMEOUT:-150}" staged
    tail -n 60 "$out/stages_staged.txt"
    cd "$out" && tar czf /tmp/cost44.tgz aa_staged && rm -rf aa_staged && mv /tmp/cost44.tgz .
    ;;
close44)
    # Issue 44 item 8 on one tree (TREE, default .; a carried branch_tree/ for the branch), a 2-GPU machine, detached
    # (BG="scripts/gpu_check.sh close44" ... bg, then `follow`). The tree must have 5074eb3 (CUDA_VISIBLE_DEVICES
    # honoured): before it, every worker ran on GPU 0 (docs/measurements.md, twenty-fifth session).
    #   1. the tree's tests/test_gpu.py in two shards, one per GPU, each cut at TESTS_TIMEOUT (420 s; TESTS=0 skips);
    #   2. the whole suite's traced staged A/A at the default cap (`calibrate --processes 1 --compile-modes none`,
    #      AA_CAP 30): GPU 0 level 1's 001-029 then level 3, GPU 1 level 1's 030-060 then level 2, each run cut at
    #      CLOSE_TIMEOUTS ("level 1's halves, level 2, level 3": "600 400 240"; at 450 s each half stopped at 25
    #      pairs, twenty-sixth session);
    #   3. item 8's three figures over all four runs: the A/A pass (calibration_table), the untimed part a pair
    #      (pair_time, pooled: mean, median, how many at most 3 s), each side's memory (memory.py --from).
    # Every phase prints nvidia-smi's two GPUs once a minute into $out/gpu_use.txt: both must be busy.
    tree=${TREE:-.}
    [ -d "$tree" ] || { echo "close44: no $tree here"; exit 2; }
    export TEST_RUNS_OUT="$out/runs" AA_CAP=${AA_CAP:-30}
    read -r t_half t_two t_three <<< "${CLOSE_TIMEOUTS:-600 400 240}"
    (while sleep 60; do nvidia-smi --query-gpu=index,utilization.gpu,memory.used,power.draw --format=csv,noheader \
        | tr '\n' ' '; echo " $(date +%T)"; done) > "$out/gpu_use.txt" 2>&1 &
    watcher=$!
    if [ "${TESTS:-1}" = 1 ]; then
        echo "== test_gpu.py in two shards, $tree ($(date +%T))"
        gpu_test_shards "$tree" "${TESTS_TIMEOUT:-420}" close44
    fi
    (export CUDA_VISIBLE_DEVICES=0
     echo "== A/A level1 0[0-2]* ($(date +%T))"; traced_aa level1 '0[0-2]*' "$t_half" level1_a "$tree"
     echo "== A/A level3 ($(date +%T))"; traced_aa level3 '*' "$t_three" level3 "$tree"
    ) > "$out/close44_gpu0.txt" 2>&1 &
    a=$!
    (export CUDA_VISIBLE_DEVICES=1
     echo "== A/A level1 0[3-6]* ($(date +%T))"; traced_aa level1 '0[3-6]*' "$t_half" level1_b "$tree"
     echo "== A/A level2 ($(date +%T))"; traced_aa level2 '*' "$t_two" level2 "$tree"
    ) > "$out/close44_gpu1.txt" 2>&1 &
    b=$!
    wait $a $b
    kill $watcher 2>/dev/null
    cat "$out/close44_gpu0.txt" "$out/close44_gpu1.txt"
    grep -h "at work before this run starts" "$out"/aa_level*.txt | head -n 4
    runs=$(ls -d "$out"/aa_level*/2* 2>/dev/null)
    echo "== the pass ($(date +%T))"
    python scripts/calibration_table.py $runs --tree "$tree" > "$out/close44_table.txt" 2>&1
    tail -n 8 "$out/close44_table.txt"
    python benchmarks/pair_time.py --from $runs > "$out/close44_untimed.txt" 2>&1; tail -n 1 "$out/close44_untimed.txt"
    python benchmarks/memory.py --from $runs > "$out/close44_memory.txt" 2>&1; tail -n 3 "$out/close44_memory.txt"
    (cd "$out" && tar czf /tmp/close44.tgz aa_level* && rm -rf aa_level*/ && mv /tmp/close44.tgz .)
    ;;
shards)
    # a 2-GPU machine: this tree's tests/test_gpu.py in two shards, one per GPU, cut at TESTS_TIMEOUT (420 s)
    export TEST_RUNS_OUT="$out/runs"
    gpu_test_shards . "${TESTS_TIMEOUT:-420}" shards
    ;;
rest44)
    # What close44 left (a 2-GPU machine, detached): the A/A of level 1's problems its 450 s halves never reached
    # (026-029 on GPU 0, 055-060 on GPU 1) on the same tree (TREE, the carried branch_tree/), then the GPU tests
    # on IOCTL_TREE (the device ioctl rule on GPU workers) in two shards, one per GPU, each cut at TESTS_TIMEOUT
    # (200 s), their records kept in $out/runs for the sandbox reports. Put the runs beside close44's to pool them.
    tree=${TREE:-.}
    export TEST_RUNS_OUT="$out/runs" AA_CAP=${AA_CAP:-30}
    (export CUDA_VISIBLE_DEVICES=0
     echo "== A/A level1 02[6-9]* ($(date +%T))"; traced_aa level1 '02[6-9]*' 200 level1_c "$tree"
    ) > "$out/rest44_gpu0.txt" 2>&1 &
    a=$!
    (export CUDA_VISIBLE_DEVICES=1
     echo "== A/A level1 05[5-9]* ($(date +%T))"; traced_aa level1 '05[5-9]*' 200 level1_d "$tree"
     echo "== A/A level1 060* ($(date +%T))"; traced_aa level1 '060*' 60 level1_e "$tree"
    ) > "$out/rest44_gpu1.txt" 2>&1 &
    b=$!
    wait $a $b
    cat "$out/rest44_gpu0.txt" "$out/rest44_gpu1.txt"
    (cd "$out" && tar czf /tmp/rest44.tgz aa_level* && rm -rf aa_level*/ && mv /tmp/rest44.tgz .)
    itree=${IOCTL_TREE:-.}
    echo "== test_gpu.py in two shards, $itree ($(date +%T))"
    gpu_test_shards "$itree" "${TESTS_TIMEOUT:-200}" rest44
    echo "== the GPU tests' records (their --json lines): device, sandbox.device_ioctl, status"
    cat "$out"/runs/*.txt 2>/dev/null | grep '^{' | python -c '
import collections, json, sys
seen = collections.Counter()
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    seen[(r.get("device"), (r.get("sandbox") or {}).get("device_ioctl"), r.get("status"))] += 1
for key, n in sorted(seen.items(), key=str): print(n, key)'
    ;;
duo23)
    # Branch issue44-gpu-pending on a 2-GPU machine, detached (BG="scripts/gpu_check.sh duo23" ... bg), the branch
    # carried as branch_tree/ (`git archive issue44-gpu-pending | tar x -C .gpu_base/branch_tree`):
    #   GPU 0: all of the branch's tests/test_gpu.py, its exploit set among them (TESTS_TIMEOUT, 570 s);
    #   GPU 1: a traced staged A/A of AA_LEVEL's AA_GLOB (level1, 0[12]*; cap AA_CAP s, cut at AA_TIMEOUT s) on the
    #          branch and on this tree, back to back, each with pair_time's parts
    [ -d branch_tree ] || { echo "duo23: no branch_tree/ here"; exit 2; }
    export TEST_RUNS_OUT="$out/runs"
    (cd branch_tree && CUDA_VISIBLE_DEVICES=0 timeout -s INT "${TESTS_TIMEOUT:-570}" python -m pytest -q -rfxX \
        --tb=short -m gpu tests/test_gpu.py > "$out/gpu_tests_branch.txt" 2>&1) &
    (export CUDA_VISIBLE_DEVICES=1
     for t in branch main; do
         d=.; [ "$t" = branch ] && d=branch_tree
         echo "== A/A ${AA_LEVEL:-level1} ${AA_GLOB:-0[12]*} staged, $t ($(date +%T))"
         traced_aa "${AA_LEVEL:-level1}" "${AA_GLOB:-0[12]*}" "${AA_TIMEOUT:-240}" "$t" "$d"
     done > "$out/aa_duo23.txt" 2>&1) &
    wait
    echo "-- the branch's test_gpu.py (GPU 0)"; tail -n 25 "$out/gpu_tests_branch.txt"
    echo "-- A/A, the branch then main (GPU 1)"; cat "$out/aa_duo23.txt"
    (cd "$out" && tar czf /tmp/duo23.tgz aa_branch aa_main 2>/dev/null && rm -rf aa_branch aa_main \
        && mv /tmp/duo23.tgz .)
    ;;
derive44)
    # Issue 44 item 8, one GPU, detached: this tree against an old one, back to back (the old tree is old_tree/, a
    # whole tree carried beside this one, e.g. `git archive REV | tar x -C old_tree`; else this one with the files in
    # old_files/ put back into harness/worker/): benchmarks/derive_time.py on DERIVE_PROBLEMS, then a traced staged
    # A/A of AA_LEVEL's AA_GLOB (cap AA_CAP s, cut at AA_TIMEOUT s) on each tree, new first; then the precision and
    # memory GPU tests and host_link's transfer figures
    if [ -d old_tree ]; then
        old=$PWD/old_tree
    else
        old=/tmp/old_tree; rm -rf "$old"; cp -a . "$old"
        cp old_files/*.py "$old/harness/worker/"
    fi
    probs=${DERIVE_PROBLEMS-"problems/level2/02[0-4]*.py problems/level1/005*.py problems/level1/010*.py problems/level1/019*.py problems/level3/003*.py"}
    for t in new old; do
        [ -n "$probs" ] || break
        d=.; [ "$t" = old ] && d=$old
        echo "== derive_time $t ($(date +%T))"
        (cd "$d" && timeout 200 python benchmarks/derive_time.py $probs) > "$out/derive_$t.txt" 2>&1; tail -n 12 "$out/derive_$t.txt"
    done
    for t in new old; do
        d=.; [ "$t" = old ] && d=$old
        echo "== A/A ${AA_LEVEL:-level2} ${AA_GLOB:-02*} staged, $t tree ($(date +%T))"
        traced_aa "${AA_LEVEL:-level2}" "${AA_GLOB:-02*}" "${AA_TIMEOUT:-150}" "$t" "$d"
        grep -E "trial0 out -> trial0 checked|flops -> derived|budget -> flops|float64 -> derived|baselines -> probe" \
            "$out/stages_$t.txt"
    done
    precision_link
    cd "$out" && tar czf /tmp/derive44.tgz aa_new aa_old && rm -rf aa_new aa_old && mv /tmp/derive44.tgz .
    ;;
pin44)
    # Issue 44 item 8, one GPU, short: what pinning host memory costs, as torch does it by default and by registering
    # memory whose pages several threads touch (from the environment), and as a GPU reference does (--harness: held
    # to one core, the setting made at run time, each block pinned on the process's cores): benchmarks/host_link.py
    # three times, into pin_link.txt
    conf="pinned_use_cuda_host_register:True,pinned_num_register_threads:8"
    for args in "" "--harness" "--alloc-conf $conf"; do
        echo "== host_link $args ($(date +%T))"
        timeout 150 python benchmarks/host_link.py $args 2>&1 | tee -a "$out/pin_link.txt"
    done
    ;;
cost44b)
    # Issue 44 item 8, one GPU, detached: the precision and memory GPU tests, host_link's transfer figures,
    # derive_time on DERIVE_PROBLEMS, then traced staged A/As of each of AA_SELS
    # ("level:glob:timeout ..."; cap AA_CAP s), each with pair_time's parts, trace_pair's stages and each side's memory
    precision_link
    probs=${DERIVE_PROBLEMS-problems/level1/005*.py problems/level1/007*.py problems/level1/019*.py problems/level2/020*.py}
    if [ -n "$probs" ]; then
        echo "== derive_time ($(date +%T))"
        timeout 240 python benchmarks/derive_time.py $probs > "$out/derive_time.txt" 2>&1; tail -n 6 "$out/derive_time.txt"
    fi
    traced_sels "${AA_SELS:-level1:0[0-2]*:240 level3:*:150}" cost44b
    ;;
traced44)
    # Issue 44 item 8, one GPU, detached: cost44b's traced staged A/As of each of AA_SELS alone (no tests, no host_link)
    traced_sels "${AA_SELS:-level1:*:500}" traced44
    ;;
aa44)
    # Issue 44 item 8, one GPU, short: aa_both alone (A/A of AA_LEVEL's AA_GLOB problems, AA_CAP s a pair, each run
    # cut at AA_TIMEOUT, on the in-process and then the staged path, back to back, with pair_time's parts)
    aa_both "${AA_LEVEL:-level2}" "${AA_GLOB:-02*}" "${AA_CAP:-3}" "${AA_TIMEOUT:-120}"
    cd "$out" && tar czf /tmp/aa44.tgz aa_* && rm -rf aa_* && mv /tmp/aa44.tgz .
    ;;
verify44)
    # Issue 44's next lease on one GPU, detached (BG="scripts/gpu_check.sh verify44" ... bg, then `follow`): what the
    # eighteenth session's last tree (the executor warmed beside the candidate's trials, attached after them) has not
    # run on a GPU. In turn: the GPU exploit tests on both paths and the staged path's own GPU tests; `reuse_buffer`
    # alone on the staged path in cold and in graph mode (it read invalid in graph mode, where auto chose it); then
    # level 1's A/A (the short calls) on the in-process and the staged path back to back, AA_CAP s a pair, with
    # pair_time's parts
    export TEST_RUNS_OUT="$out/runs"
    echo "== GPU tests ($(date +%T))"
    gpu_tests verify_tests "${VERIFY_TESTS_TIMEOUT:-360}" "exploits_on_the_gpu or work_moved or staged" 8
    staged_cfg=$(staged_config) || exit 1
    for mode in cold graph; do
        echo "== reuse_buffer, staged, $mode ($(date +%T))"
        timeout -s INT 90 python run_eval.py --config "$staged_cfg" --compile-modes none --json --timing-mode "$mode" \
            --problems-dir tests/fixtures/exploits/problems --solutions-dir tests/fixtures/exploits/solutions \
            --problem '*004_scale*' --max-pair-seconds 4 --output-dir "$out/reuse_$mode" > "$out/reuse_$mode.txt" 2>&1
        python - "$out/reuse_$mode.txt" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(r["solution"].rsplit("/", 1)[-1], r["status"], (r.get("timing") or {}).get("mode"), ",".join(r["flags"]),
              r.get("speedup"), (r["error"] or "")[:160])
PY
    done
    aa_both level1 "${AA_GLOB:-0[0-4]*}" "${AA_CAP:-6}" "${AA_TIMEOUT:-240}"
    echo "== verify44 ended ($(date +%T))"
    ;;
beside44)
    # Issue 44 item 8, one GPU, detached (BG="scripts/gpu_check.sh beside44" ... bg), after the eighteenth session
    # started the staged path's executor beside the candidate: the staged exploit tests, each side's memory with 5
    # trials on both paths for the two problems fixed last session (MEM_PICK), then the A/A (calibrate, one process
    # pair, AA_CAP s a pair) of AA_LEVEL's AA_GLOB problems on the default path and then on the staged one, back to
    # back, each run's parts read by benchmarks/pair_time.py
    export TEST_RUNS_OUT="$out/runs"
    echo "== staged exploit tests ($(date +%T))"
    gpu_tests beside_tests "${BESIDE_TESTS_TIMEOUT:-220}" "exploits_on_the_gpu and staged" 5
    MEM_TRIALS=5 MEM_CAP=${MEM_CAP:-1.5} MEM_TIMEOUT=${MEM_TIMEOUT:-120} \
        MEM_PICK=${MEM_PICK:-"level1/055_*.py level3/007_*.py"} bash "$0" mem48
    aa_both "${AA_LEVEL:-level2}" "${AA_GLOB:-0[23]*}" "${AA_CAP:-6}" "${AA_TIMEOUT:-170}"
    echo "== beside44 ended ($(date +%T))"
    ;;
beside44b)
    # Issue 44 item 8, one GPU, short: the staged path with its executor warmed beside the candidate's trials and
    # attached after them (eighteenth session): a subset of the exploit fixtures on the staged path (statuses), then
    # the A/A (calibrate, one process pair, AA_CAP s a pair) of AA_GLOB's level-2 problems on the default and the
    # staged path back to back, each run's parts read by benchmarks/pair_time.py
    staged_cfg=$(staged_config) || exit 1
    echo "== exploit subset, staged ($(date +%T))"
    # EX_GLOB: fnmatch's * crosses /, so the id's last part is matched after "*/" ("[cmbfl]*" alone matched
    # every id: they all start with "level1/")
    timeout -s INT "${EX_TIMEOUT:-80}" python run_eval.py --config "$staged_cfg" --compile-modes none --json \
        --problems-dir tests/fixtures/exploits/problems --solutions-dir tests/fixtures/exploits/solutions \
        --problem '*001_linear_relu*' --candidate "${EX_GLOB:-*/[cmbfl]*}" --max-pair-seconds 4 \
        --output-dir "$out/ex" > "$out/ex.txt" 2>&1
    python - "$out/ex.txt" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(r["solution"].rsplit("/", 1)[-1], r["status"], ",".join(r["flags"]), (r["error"] or "")[:90])
PY
    aa_both level2 "${AA_GLOB:-02[0-7]*}" "${AA_CAP:-4}" "${AA_TIMEOUT:-70}"
    echo "== beside44b ended ($(date +%T))"
    ;;
aa48)
    # Issue 44, one GPU, detached (BG="scripts/gpu_check.sh aa48" ... bg): level1/055_huber_loss on the staged path
    # with KB_TRACE=1 (each stage's allocator figures: where its reference holds 2 GiB more than on the default
    # path), then the A/A (calibrate, one process pair, AA_CAP s a pair) of AA_LEVEL's AA_GLOB problems on the
    # default path and then on the staged one, back to back
    staged_cfg=$(staged_config) || exit 1
    set -f
    echo "== huber, staged, traced ($(date +%T))"
    KB_TRACE=1 timeout -s INT 150 python run_eval.py calibrate --config "$staged_cfg" --trials 1 --processes 1 \
        --compile-modes none --level level1 --problem '*055_huber*' --max-pair-seconds 2 --output-dir "$out/huber" \
        > "$out/huber.txt" 2>&1
    set +f
    for log in "$out"/huber/*/logs/*.log; do echo "# $log"; grep "trace" "$log"; done > "$out/huber_trace.txt" 2>&1
    grep -c trace "$out/huber_trace.txt"
    set -f
    for path in default staged; do
        cfg=$(unstaged_config); [ "$path" = staged ] && cfg=$staged_cfg
        echo "== A/A $path ($(date +%T))"
        /usr/bin/time -f "calibrate $path wall %e s" timeout -s INT "${AA_TIMEOUT:-300}" python run_eval.py calibrate \
            --config "$cfg" --processes 1 --compile-modes none --level "${AA_LEVEL:-level2}" \
            --problem "${AA_GLOB:-0[2-9]*}" --max-pair-seconds "${AA_CAP:-6}" --output-dir "$out/aa_$path" \
            > "$out/aa_$path.txt" 2>&1
        grep -E "wall|within|problems" "$out/aa_$path.txt" | tail -n 4
    done
    set +f
    echo "== aa48 ended ($(date +%T))"
    ;;
aa49)
    # Issue 44 item 8, one GPU, detached (BG="scripts/gpu_check.sh aa49" ... bg): the precision GPU tests, then the
    # staged path's A/A over the whole suite at the default cap, as a default run makes it (`calibrate --processes 1`,
    # each level of AA49_LEVELS in turn, level 1 first: its short calls are the staged path's weak spot), then the GPU
    # exploit tests on the staged path. Read back: scripts/calibration_table.py, benchmarks/pair_time.py --from,
    # benchmarks/memory.py --from
    staged_cfg=$(staged_config) || exit 1
    export TEST_RUNS_OUT="$out/runs"
    echo "== precision GPU tests ($(date +%T))"
    timeout -s INT 200 python -m pytest -q -rfxX --tb=short -m gpu tests/test_precision_gpu.py \
        > "$out/precision.txt" 2>&1; tail -n 3 "$out/precision.txt"
    set -f
    for entry in ${AA49_LEVELS:-level1 level3 level2}; do       # LEVEL or LEVEL:GLOB
        lvl=${entry%%:*} glob=()
        [ "$entry" != "$lvl" ] && glob=(--problem "${entry#*:}")
        echo "== A/A staged $entry ($(date +%T))"
        /usr/bin/time -f "calibrate $entry wall %e s" python run_eval.py calibrate --config "$staged_cfg" \
            --processes 1 --compile-modes none --level "$lvl" "${glob[@]}" --output-dir "$out/aa_staged" \
            > "$out/aa_$lvl.txt" 2>&1
        grep -E "wall|within|problems" "$out/aa_$lvl.txt" | tail -n 4
    done
    set +f
    echo "== the exploit tests, staged ($(date +%T))"
    timeout -s INT 300 python -m pytest -q -rfxX --tb=short -m gpu tests/test_gpu.py -k "staged and exploits" \
        > "$out/exploits.txt" 2>&1; tail -n 3 "$out/exploits.txt"
    echo "== aa49 ended ($(date +%T))"
    ;;
next44)
    # Issue 44's next lease on one GPU, detached (BG="scripts/gpu_check.sh next44" ... bg, then `follow`): the GPU
    # tests of what the seventeenth session could not run there (test_precision_gpu.py; test_gpu.py's exploits, the
    # layout fixtures among them, and its memory tests, arena_peak_bytes), then each side's memory with the default
    # 5 trials on both paths over the problems that were over or near the target (mem48, MEM_PICK), then the staged
    # A/A of level 2's problems the last pass did not reach (aa49 without its tests)
    export TEST_RUNS_OUT="$out/runs"
    echo "== GPU tests ($(date +%T))"
    timeout -s INT "${NEXT_TESTS_TIMEOUT:-480}" python -m pytest -q -rfxX --tb=short -m gpu \
        tests/test_precision_gpu.py tests/test_gpu.py -k "precision or exploits or memory" > "$out/next_tests.txt" 2>&1
    tail -n 5 "$out/next_tests.txt"
    MEM_TRIALS=5 MEM_CAP=${MEM_CAP:-1.5} MEM_TIMEOUT=${MEM_TIMEOUT:-480} \
        MEM_PICK=${MEM_PICK:-"level1/0{05,07,18,19,2[0-8],3[4-9],4[67],5[2-8],60}_*.py level3/007_*.py"} \
        bash "$0" mem48
    echo "== staged A/A, level 2 from 034 ($(date +%T))"
    staged_cfg=$(staged_config) || exit 1
    set -f
    /usr/bin/time -f "calibrate level2 rest wall %e s" timeout -s INT "${NEXT_AA_TIMEOUT:-300}" python run_eval.py \
        calibrate --config "$staged_cfg" --processes 1 --compile-modes none --level level2 \
        --problem "${NEXT_AA_GLOB:-0[3-9]*}" --output-dir "$out/aa_staged" > "$out/aa_level2_rest.txt" 2>&1
    set +f
    grep -E "wall|within|problems" "$out/aa_level2_rest.txt" | tail -n 4
    echo "== next44 ended ($(date +%T))"
    ;;
lease44)
    # Issue 44 on the GPU in one detached run (BG="scripts/gpu_check.sh lease44" ... bg); STEPS picks ("T S", default):
    #   T. the GPU tests alone (lease45's A with NO_BUILDS: test_gpu.py on GPU 0, the other GPU files on GPU 1)
    #   S. suite44's sweep: every shipped candidate on the staged GPU path (statuses; item 6's reduced_precision)
    #   P. paths44: the A/A of both GPU paths at once, the workers' stages traced
    #   R. test_gpu.py's last tests, split over both GPUs (R0, R1: their -k)
    #   C. short44: short cold calls on both paths, GPU 0's SM clock sampled
    #   G. the signature forwards on the GPU (tests/test_precision_gpu.py) and test_gpu.py's graph-mode memory test
    #   A. suite44's A/A of the whole suite on the staged path (item 8; AA_SECONDS, 900)
    steps=" ${STEPS:-T S} "
    [[ "$steps" == *" T "* ]] && echo "== T. GPU tests ($(date +%T))" && STEPS=A NO_BUILDS=1 TESTS_TIMEOUT=${TESTS_TIMEOUT:-480} bash "$0" lease45
    [[ "$steps" == *" S "* ]] && echo "== S. sweep, staged ($(date +%T))" && STEPS=sweep SWEEP_TIMEOUT=${SWEEP_TIMEOUT:-720} bash "$0" suite44
    [[ "$steps" == *" P "* ]] && echo "== P. paths44 ($(date +%T))" && bash "$0" paths44
    if [[ "$steps" == *" R "* ]]; then     # R: test_gpu.py's last tests (R0 on GPU 0, R1 on GPU 1), RTESTS_TIMEOUT each
        echo "== R. the rest of test_gpu.py ($(date +%T))"
        export TEST_RUNS_OUT="$out/runs"
        for g in 0 1; do
            k=${R0:-calibrate_on_the_gpu or start_event}; [ "$g" = 1 ] && k=${R1:-memory}
            (CUDA_VISIBLE_DEVICES=$g timeout -s INT "${RTESTS_TIMEOUT:-200}" python -m pytest -q -rfxX --tb=short -m gpu \
                tests/test_gpu.py -k "$k" > "$out/gpu_tests_r$g.txt" 2>&1) &
        done
        wait
        for g in 0 1; do echo "-- GPU $g"; tail -n 12 "$out/gpu_tests_r$g.txt"; done
    fi
    [[ "$steps" == *" C "* ]] && echo "== C. short44 ($(date +%T))" && bash "$0" short44
    if [[ "$steps" == *" G "* ]]; then
        echo "== G. the signature forwards on the GPU ($(date +%T))"
        export TEST_RUNS_OUT="$out/runs"
        CUDA_VISIBLE_DEVICES=0 timeout -s INT 240 python -m pytest -q -rfs --tb=short -m gpu tests/test_precision_gpu.py \
            tests/test_gpu.py -k "precision or graph_mode_captures" 2>&1 | tail -n 12
    fi
    [[ "$steps" == *" A "* ]] && echo "== A. the whole suite's A/A, staged ($(date +%T))" &&
        STEPS=aa TOTAL_SECONDS=${AA_SECONDS:-900} bash "$0" suite44
    echo "== lease44 ended ($(date +%T))"
    ;;
short44)
    # issue 44: short cold calls on the staged path (0.15 ms gpu_tree calls read +/-12% CIs there, a ~20 us call
    # 2.2 ms a sample, and the flusher's memset took 8x its time on level 2). GPU 0's SM clock sampled every 10 ms
    # (nvidia-smi, read only) while `calibrate --timing-mode cold` of tests/fixtures/gpu_tree runs on the staged path,
    # then on the default path; the clock's quartiles during each (SHORT_GPU: another GPU than 0)
    staged_cfg=$(staged_config) || exit 1
    for p in staged default; do
        cfg=$(unstaged_config); [ "$p" = staged ] && cfg=$staged_cfg
        nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits -i "${SHORT_GPU:-0}" -lms 10 > "$out/clocks_$p.txt" &
        smi=$!
        CUDA_VISIBLE_DEVICES=${SHORT_GPU:-0} KB_TRACE=1 timeout -s INT "${SHORT_SECONDS:-150}" python run_eval.py calibrate \
            --config "$cfg" --problems-dir tests/fixtures/gpu_tree/problems --timing-mode cold --trials 1 \
            --processes 1 --compile-modes none --output-dir "$out/short_$p" > "$out/short_$p.txt" 2>&1
        kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
        echo "== $p"; grep -v "━" "$out/short_$p.txt" | grep -E "^[0-9l]|of .* ok" | head -n 8
        python - "$out/clocks_$p.txt" <<'PY'
import statistics, sys
mhz = [int(l) for l in open(sys.argv[1]) if l.strip().isdigit()]
if len(mhz) > 1:
    q = statistics.quantiles(mhz, n=4)
    print(f"SM clock MHz, {len(mhz)} readings: min {min(mhz)} q1 {q[0]:.0f} median {q[1]:.0f} q3 {q[2]:.0f} max {max(mhz)}")
PY
    done
    ;;
paths44)
    # issue 44: the default and the staged GPU path at the same time, the default on GPU 0 and the staged on GPU 1
    # (each run holds its own core share): `calibrate` of PATHS_PROBLEMS (level:glob ...; default level 2's first 19)
    # within PATHS_SECONDS (240) each, one process pair a problem, the workers tracing their stages (KB_TRACE); then
    # both runs' tables, pair_time's split and trace_pair's stages
    staged_cfg=$(staged_config) || exit 1
    set -f
    for p in default staged; do
        cfg=$(unstaged_config); g=0
        [ "$p" = staged ] && cfg=$staged_cfg && g=1
        (for sel in ${PATHS_PROBLEMS:-level2:*0[01][0-9]_*}; do
             KB_TRACE=1 timeout -s INT "${PATHS_SECONDS:-240}" python run_eval.py calibrate --config "$cfg" --gpus "$g" --trials 1 \
                 --processes 1 --compile-modes none --level "${sel%%:*}" --problem "${sel#*:}" \
                 --output-dir "$out/aa_$p" >> "$out/aa_$p.txt" 2>&1
         done) &
    done
    wait
    set +f
    for p in default staged; do echo "== $p"; grep -v "━" "$out/aa_$p.txt" | grep -E "^[0-9]|ok \(|of .* ok"; done
    python benchmarks/pair_time.py --from "$out"/aa_default/*/ "$out"/aa_staged/*/ 2>&1 | tail -n 5
    for p in default staged; do        # the workers' stages (KB_TRACE): where the staged executor's start goes
        echo "== $p: stages"; python benchmarks/trace_pair.py "$out"/aa_$p/*/ 2>&1 | tail -n 40
    done
    ;;
cpu44)
    echo "== issue 44 on this machine's quiet CPU: the staged CPU path's exploits and privileges tests (as root here)"
    export TEST_RUNS_OUT="$out/runs"
    timeout -s INT "${ROOT_TIMEOUT:-300}" python -m pytest -q -rf --tb=short -p no:cacheprovider tests/test_exploits.py \
        tests/test_privileges.py ${K:+-k "$K"} 2>&1 | tee "$out/cpu44_tests.txt" | tail -n 30
    echo "== the CPU path's A/A: calibrate of examples/cpu, ${PROCS:-3} process pairs a problem"
    timeout -s INT "${CAL_TIMEOUT:-240}" python run_eval.py calibrate --device cpu --problems-dir examples/cpu/problems \
        --solutions-dir examples/cpu/solutions --processes "${PROCS:-3}" --output-dir "$out/cpu44" \
        2>&1 | tee "$out/cpu44_calibrate.txt" | tail -n 20
    ;;
overhead)
    echo "== per-sample harness work, part by part (benchmarks/sample_overhead.py)"
    for p in problems/level1/001_square_matmul.py problems/level1/019_gelu.py problems/level3/009_gru.py; do
        [ -f "$p" ] && timeout 60 python benchmarks/sample_overhead.py "$p" --samples 150
    done 2>&1 | tee "$out/overhead.txt"
    ;;
kblint)
    [ -d .kbwhl ] && python -m pip install -q --no-index --no-deps --target /tmp/site .kbwhl/*.whl \
        && export PYTHONPATH=/tmp/site
    /usr/bin/time -f "lint wall %e s" timeout -s INT "${LINT_TIMEOUT:-540}" python run_eval.py lint \
        --problems-dir .kb/problems --device cuda --output-dir "$out/lint" --per-gpu 6 --json "${level_args[@]}" \
        > "$out/lint.jsonl" 2> "$out/lint.err"
    grep -v "━" "$out/lint.err" | tail -n 3
    python - "$out/lint.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(len(rows), "problems:", dict(collections.Counter(r["verdict"] for r in rows)),
      "not bit-for-bit deterministic:", sum(1 for r in rows if r.get("deterministic") is False))
PY
    ;;
cluster)
    dev=${DEVICE:-cuda}
    dask_wheels
    site=${PYTHONPATH:-}
    python -m pip install -q --no-deps --no-build-isolation -e . > "$out/install.txt" 2>&1
    if (cd / && env PYTHONPATH="$site" python -c 'import harness' 2>/dev/null); then
        wpath=$site; echo "workers: the harness installed (pip install -e .)"
    else
        wpath=$PWD${site:+:$site}; echo "workers: pip install -e . failed here ($(tail -n 1 "$out/install.txt")); PYTHONPATH=$PWD"
    fi
    stub=/tmp/kb-no-harness/harness; mkdir -p "$stub"
    echo 'raise ModuleNotFoundError("No module named '"'harness'"'", name="harness")' > "$stub/__init__.py"
    port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    addr=tcp://127.0.0.1:$port
    pids=()
    before=$(pgrep -f 'harness[.]worker' | sort)     # another run's workers on this machine are not ours
    group() {   # LOG CMD...: CMD in a session of its own, its id (the process group to kill) appended to pids
        local log=$1 f; shift; f=$(mktemp)
        setsid sh -c 'echo $$ > "$0"; exec "$@"' "$f" "$@" > "$log" 2>&1 &
        for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$f" ] && break; sleep 0.2; done
        pids+=("$(cat "$f")"); rm -f "$f"
    }
    stop_cluster() { for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done; sleep 5
                     for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done; }
    trap stop_cluster EXIT
    (cd /tmp && DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION=1.0 PYTHONPATH="/tmp/kb-no-harness${site:+:$site}" \
        group "$out/scheduler.txt" python -m dask scheduler --host 127.0.0.1 --port "$port" --no-dashboard
        echo "${pids[@]}" > /tmp/kb-scheduler.pgid)
    pids+=("$(cat /tmp/kb-scheduler.pgid)")
    sleep 3
    if [ "$dev" = cuda ]; then
        for g in $(seq 0 "$last"); do
            CUDA_VISIBLE_DEVICES=$g PYTHONPATH="$wpath" group "$out/worker$g.txt" python -m dask worker "$addr" \
                --nthreads 1 --resources GPU=1 --name "gpu$g" --no-dashboard
        done
        sel=(--level "${LEVEL:-level1}" --problem "${PROBLEM:-*0[12][019]_*}" --max-pair-seconds "${CLUSTER_PAIR_SECONDS:-8}")
    else
        for c in 0 1; do
            PYTHONPATH="$wpath" group "$out/worker$c.txt" taskset -c "$c" python -m dask worker "$addr" --nthreads 1 \
                --name "cpu$c" --no-dashboard
        done
        sel=(--problems-dir examples/cpu/problems --solutions-dir examples/cpu/solutions --target-rel-ci 0.05 \
             --max-pair-seconds 5)
    fi
    common=(--device "$dev" --compile-modes "${COMPILE:-none}" "${sel[@]}" --json)
    echo "== local run"
    timeout -s INT "${CLUSTER_TIMEOUT:-250}" python run_eval.py "${common[@]}" --output-dir "$out/local" \
        > "$out/local.jsonl" 2> "$out/local.txt"; tail -n 3 "$out/local.txt"
    echo "== the same over $addr${KILL_AFTER:+, the last worker killed (SIGKILL, its process group) after $KILL_AFTER s}"
    killer=
    if [ -n "${KILL_AFTER:-}" ]; then
        (sleep "$KILL_AFTER"; kill -KILL -- "-${pids[-1]}" 2>/dev/null && echo "killed worker group ${pids[-1]} at" \
            "$KILL_AFTER s" >> "$out/killed.txt") &
        killer=$!
    fi
    timeout -s INT "${CLUSTER_TIMEOUT:-250}" python run_eval.py "${common[@]}" --executor dask --scheduler "$addr" \
        --output-dir "$out/dask" > "$out/dask.jsonl" 2> "$out/dask.txt"; echo "rc $?"
    [ -n "$killer" ] && { kill "$killer" 2>/dev/null; wait "$killer" 2>/dev/null; }
    cat "$out/killed.txt" 2>/dev/null
    echo "records: local $(grep -c '^{' "$out/local.jsonl"), dask $(grep -c '^{' "$out/dask.jsonl")"
    grep -v "━" "$out/dask.txt" | grep -E "^dask|worker|harness|pairs" | head -n 8
    python - "$out/local.jsonl" "$out/dask.jsonl" <<'PY'
import json, sys
runs = [{(r["problem"], r["solution"]): (r["status"], r.get("speedup")) for r in map(json.loads, open(f))
         if r.get("problem")} for f in sys.argv[1:]]
for key in sorted(set(runs[0]) | set(runs[1])):
    a, b = (run.get(key, ("missing", None)) for run in runs)
    print(f"{key[1]:60s} local {a[0]:14s} {a[1] or 0:6.3f}  dask {b[0]:14s} {b[1] or 0:6.3f}  {'' if a[0] == b[0] else 'DIFFERENT'}")
print("statuses equal" if all(runs[0].get(k, ("",))[0] == runs[1].get(k, ("",))[0] for k in set(runs[0]) | set(runs[1]))
      else "statuses differ")
PY
    summary "$out/dask"
    grep -c "No module named 'harness'" "$out/scheduler.txt" | sed 's/^/scheduler log lines naming a missing harness: /'
    stop_cluster; trap - EXIT
    sleep 2; echo "left running: $(pgrep -f 'dask (scheduler|worker)' | wc -l) dask processes," \
        "$(comm -13 <(echo "$before") <(pgrep -f 'harness[.]worker' | sort) | grep -c .) harness worker processes"
    ;;
tests)
    timeout 560 python -m pytest -q -m gpu tests/ 2>&1 | tail -n 40
    ;;
multi)
    # A machine of 2+ GPUs: the GPU tests on GPU 0 beside `suite` on the others (KB_TRACE=1: the workers' stages in
    # the run's logs, for benchmarks/trace_pair.py); the tests' summary printed after the suite's table.
    rest=$(seq -s, 1 "$last")
    export TEST_RUNS_OUT="$out/runs"
    (CUDA_VISIBLE_DEVICES=0 timeout -s INT "${TESTS_TIMEOUT:-540}" python -m pytest -q -rf --tb=short -m gpu tests/ \
        ${K:+-k "$K"} > "$out/gpu_tests.txt" 2>&1) &
    KB_TRACE=1 GPUS=${GPUS:-$rest} bash "$0" suite
    wait
    echo "== GPU tests (GPU 0)"
    tail -n 40 "$out/gpu_tests.txt"
    ;;
recheck)
    # One GPU, nothing beside it: `run_eval.py profile` on three pairs, one sized problem at every size, then the
    # GPU tests K selects (default: all), each within its own time limit.
    for sel in ${PROFILE_SELS-level1/019_gelu/cuda_gelu_float4 level1/026_sigmoid/triton_sigmoid_stream \
               level2/014_gemm_min_constant_subtract/triton_min_sub_epilogue}; do
        timeout "${PROFILE_TIMEOUT:-100}" python run_eval.py profile "$sel" --output-dir "$out/profile" \
            >> "$out/profile.txt" 2>&1
        echo "$sel: rc $?" >> "$out/profile.txt"
    done
    grep -v "━" "$out/profile.txt" | tail -n 45
    tail -n 3 "$out"/profile/*/logs/*.log 2>/dev/null | tail -n 12
    if [ -n "${MEMTRACE:-}" ]; then     # the memory fixtures under budgets of 6 and 8 GiB, each stage's memory logged
        for pb in "*rowsum*:6" "*relu_1gib*:8"; do
            KB_TRACE=1 timeout 200 python run_eval.py --problems-dir tests/fixtures/gpu_memory/problems \
                --solutions-dir tests/fixtures/gpu_memory/solutions --timing-mode cold --compile-modes none \
                --gpu-memory-gb "${pb#*:}" --problem "${pb%%:*}" --output-dir "$out/mem" --json \
                >> "$out/mem.jsonl" 2>> "$out/mem.txt"
        done
        python - "$out/mem.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(r["problem"], r["solution"], r["status"], r.get("flags"), (r.get("error") or "")[:300])
        print("   memory", (r.get("worker") or {}).get("memory"))
PY
        grep -h "kb-harness" "$out"/mem/*/logs/*.log 2>/dev/null | tail -n 80
    fi
    set -f
    for p in ${SIZES_PROBLEMS-*019_gelu}; do
        timeout 100 python run_eval.py --level level1 --problem "$p" --time-sizes all --compile-modes none \
            --max-pair-seconds 6 --output-dir "$out/sizes" --json >> "$out/sizes.jsonl" 2>> "$out/sizes.txt"
    done
    set +f
    python - "$out/sizes.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(r["problem"], r["status"], r.get("flags"), [(s["name"], s["correct"], s.get("speedup")) for s in r.get("sizes") or []])
PY
    export TEST_RUNS_OUT="$out/runs"
    timeout -s INT "${TESTS_TIMEOUT:-330}" python -m pytest -q -rf --tb=short -m gpu tests/ ${K:+-k "$K"} \
        ${PYTEST_ARGS:-} 2>&1 | tee "$out/gpu_tests.txt" | tail -n 25
    ;;
quad)
    # One command on a 4-GPU machine: the GPU tests on GPU 0; `run_eval.py profile` on three pairs, then SIZES_PROBLEMS
    # timed at every declared size (--time-sizes all), on GPU 1; `suite` (SOLUTIONS_DIR, COMPILE, KB_TRACE=1, and
    # --max-pair-seconds PAIR_SECONDS) on GPUs 2-3. Summaries printed at the end.
    export TEST_RUNS_OUT="$out/runs"
    (CUDA_VISIBLE_DEVICES=0 timeout -s INT "${TESTS_TIMEOUT:-540}" python -m pytest -q -rf --tb=short -m gpu tests/ \
        ${K:+-k "$K"} > "$out/gpu_tests.txt" 2>&1) &
    (export CUDA_VISIBLE_DEVICES=1
     for sel in ${PROFILE_SELS:-level1/019_gelu/cuda_gelu_float4 level1/026_sigmoid/triton_sigmoid_stream \
                level2/014_gemm_min_constant_subtract/triton_min_sub_epilogue}; do
         timeout 150 python run_eval.py profile "$sel" --output-dir "$out/profile" >> "$out/profile.txt" 2>&1
         echo "$sel: rc $?" >> "$out/profile.txt"
     done
     set -f
     for p in ${SIZES_PROBLEMS:-*019_gelu *030_layernorm *041_softmax}; do
         timeout 120 python run_eval.py --gpus 0 --level level1 --problem "$p" --time-sizes all --compile-modes none \
             --max-pair-seconds 8 --output-dir "$out/sizes" --json >> "$out/sizes.jsonl" 2>> "$out/sizes.txt"
     done) &
    KB_TRACE=1 GPUS=${GPUS:-2,3} bash "$0" suite
    wait
    echo "== profile (GPU 1)"; grep -v "━" "$out/profile.txt" | tail -n 60
    echo "== sizes (GPU 1)"; python - "$out/sizes.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(r["problem"], r["solution"].rsplit("/", 1)[-1], r["status"], r.get("speedup"), r.get("sizes_geomean"),
              [(s["name"], s["correct"], s.get("speedup")) for s in (r.get("sizes") or [])], r.get("error"))
PY
    echo "== GPU tests (GPU 0)"; tail -n 30 "$out/gpu_tests.txt"
    ;;
profile)
    echo "== the profile GPU test"
    which ncu && ncu --version | tail -n 1
    timeout 300 python -m pytest -q -rf --tb=short -m gpu tests/test_profile.py 2>&1 | tail -n 20
    echo "== run_eval.py profile on three pairs"
    for sel in ${PROFILE_SELS:-level1/019_gelu/cuda_gelu_float4 level1/026_sigmoid/triton_sigmoid_stream \
               level2/014_gemm_min_constant_subtract/triton_min_sub_epilogue}; do
        timeout 280 python run_eval.py profile "$sel" --output-dir "$out/profile" >> "$out/profile.txt" 2>&1
        echo "$sel: rc $?"
    done
    cat "$out/profile.txt"
    ;;
scaling)
    # issue 45 item 1: see the header; SCALE_SECONDS bounds this call, the runs already in results/scaling stay
    dask_wheels
    timeout -s INT "${SCALE_TIMEOUT:-$(( ${SCALE_SECONDS:-500} + 60 ))}" python benchmarks/scaling.py --deadline-s "${SCALE_SECONDS:-500}" \
        ${SCALE_SETTINGS:+--settings "$SCALE_SETTINGS"} ${SCALE_ARGS:-} --json "$out/scaling.json" 2>&1 \
        | tee "$out/scaling.txt"
    tar czf "$out/scaling_runs.tgz" -C results scaling/selection.json scaling/runs 2>/dev/null
    ;;
throughput)
    # issue 45 item 3: see the header; both sides on GPU 0, one after the other (KernelBench first)
    timeout -s INT "${THROUGHPUT_TIMEOUT:-560}" python benchmarks/agent_throughput.py --count "${COUNT:-32}" \
        --wheels "${KB_WHEELS_DIR:-.whl}" --json "$out/throughput.json" ${THROUGHPUT_ARGS:-} 2>&1 | grep -v "━" | tee "$out/throughput.txt"
    ;;
esac
