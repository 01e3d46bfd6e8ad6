"""Unit tests for the pure parts: response extraction, comparison, config, aggregates, CLI input errors."""
from __future__ import annotations

import pytest
import torch

from conftest import REPO, run_cli
from harness.results import report
from harness.core.config import load_config
from harness.core.discover import check_problem_source, extract_code_block
from harness.core.errors import InputError, UsageError
from harness.worker.verify import compare_outputs, compare_tensor

SEEDS = REPO / "solutions" / "level2"


def test_extract_last_complete_block_defining_modelnew():
    text = "intro\n```python\nclass ModelNew: a = 1\n```\nprose\n```python\nclass ModelNew: a = 2\n```\n"
    assert "a = 2" in extract_code_block(text)


def test_extract_ignores_a_cut_off_block():
    text = "```python\nclass ModelNew: a = 1\n```\n```python\nclass ModelNew: a = 2\n"
    assert "a = 1" in extract_code_block(text)


def test_extract_labelled_fence_reopens_after_stray_fences():
    text = "```\nstray prose\n```\nmore\n```\n```python\nclass ModelNew: a = 3\n```\n"
    assert extract_code_block(text).strip() == "class ModelNew: a = 3"


def test_extract_none_without_modelnew():
    assert extract_code_block("```python\ndef get_inputs(): pass\n```\n") is None
    assert extract_code_block("no code at all") is None


def test_seed_002_uses_its_first_block_because_the_second_is_cut_off():
    text = (SEEDS / "073_conv2d_batchnorm_scaling" / "seed_002.txt").read_text()
    block = extract_code_block(text)
    lines = text.splitlines()
    second_start = max(i for i, l in enumerate(lines) if l.strip() == "```python")
    assert block.strip().splitlines()[0] == lines[max(i for i, l in enumerate(lines[:second_start])
                                                        if l.strip() == "```python") + 1].strip()


def test_problem_check_names_what_is_missing(tmp_path):
    assert "no get_inputs" in check_problem_source(tmp_path / "p.py", "class Model: pass\ndef get_init_inputs(): pass")
    assert "syntax error" in check_problem_source(tmp_path / "p.py", "def (:")
    assert check_problem_source(tmp_path / "p.py", "class Model: pass\ndef get_inputs(): pass\n"
                                                   "def get_init_inputs(): pass") is None


def test_compare_tolerance_nan_and_shape():
    ref = torch.tensor([1.0, 2.0, float("nan"), 0.0])
    assert compare_tensor(ref.clone(), ref, 1e-4, 1e-4)["ok"]
    off = ref.clone()
    off[1] = 2.0 + 2.1e-4 + 1e-4                      # just over atol + rtol*|2|
    result = compare_tensor(off, ref, 1e-4, 1e-4)
    assert not result["ok"] and result["first_mismatch"]["index"] == [1]
    nan = ref.clone()
    nan[0] = float("nan")
    assert "NaN" in compare_tensor(nan, ref, 1e-4, 1e-4)["reason"]
    assert "shape" in compare_tensor(ref[:3], ref, 1e-4, 1e-4)["reason"]
    assert "dtype" in compare_tensor(ref.double(), ref, 1e-4, 1e-4)["reason"]
    assert "2 outputs, expected 1" in compare_outputs([ref, ref], [ref], 1e-4, 1e-4)["reason"]


def test_compare_multi_dim_index():
    ref = torch.zeros(3, 4)
    out = ref.clone()
    out[2, 1] = 1.0
    assert compare_tensor(out, ref, 1e-4, 1e-4)["first_mismatch"]["index"] == [2, 1]


def test_config_rejects_unknown_keys_and_bad_values(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("trails: 5\n")
    with pytest.raises(InputError, match="unknown config key 'trails'"):
        load_config(bad, {})
    bad.write_text("trials: [1\n")
    with pytest.raises(InputError, match="invalid YAML"):
        load_config(bad, {})
    bad.write_text("timing:\n  samples: many\n")
    with pytest.raises(InputError, match="timing.samples"):
        load_config(bad, {})
    with pytest.raises(UsageError, match="trials"):
        load_config(None, {"trials": 0})
    good = tmp_path / "g.yaml"
    good.write_text("trials: 7\ngpus: [0, 1]\n")
    cfg = load_config(good, {"trials": 3, "gpus": "2,3"})
    assert cfg.trials == 3 and cfg.gpus == (2, 3)                  # flags win


def test_aggregate_fast_p_and_geomean():
    recs = [{"status": "ok", "correct": True, "speedup": 2.0}, {"status": "ok", "correct": True, "speedup": 0.5},
            {"status": "incorrect", "correct": False, "speedup": None}, {"status": "timeout", "correct": False,
                                                                        "speedup": None}]
    agg = report.aggregate(recs)
    assert agg["correctness_rate"] == 0.5
    assert agg["geomean_speedup"] == pytest.approx(1.0)
    assert agg["fast_p"] == {"0.0": 0.5, "1.0": 0.25, "1.5": 0.25, "2.0": 0.0}


@pytest.mark.parametrize("args, words", [
    (["--trials", "x"], "invalid int value"),
    (["--device", "tpu"], "invalid choice"),
    (["--problem-file", "nope.py", "--solution-file", "nope2.py"], "nope.py: no such file"),
    (["--problem-file", "x.py"], "go together"),
    (["--config", "missing.yaml"], "missing.yaml: no such config file"),
    (["--problems-dir", "/nonexistent/problems", "--device", "cpu"], "problems directory does not exist"),
    (["--gpus", "a,b", "--device", "cpu"], "gpus"),
])
def test_cli_usage_errors_exit_2_with_one_line(args, words):
    done = run_cli(*args)
    assert done.returncode == 2
    assert words in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_config_typo_names_file_and_key(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("device: cpu\nsamplez: 3\n")
    done = run_cli("--config", str(cfg))
    assert done.returncode == 2 and f"{cfg}: unknown config key 'samplez'" in done.stderr


def test_cli_single_pair_with_broken_problem_is_exit_2(tmp_path):
    problem = REPO / "tests/fixtures/tree/problems/level1/002_broken_problem.py"
    solution = REPO / "tests/fixtures/tree/solutions/level1/002_broken_problem/identity.py"
    done = run_cli("--problem-file", str(problem), "--solution-file", str(solution), "--device", "cpu",
                   "--output-dir", str(tmp_path))
    assert done.returncode == 2 and "no get_inputs" in done.stderr and "Traceback" not in done.stderr


def test_help_exits_0():
    done = run_cli("--help")
    assert done.returncode == 0 and "--resume" in done.stdout


def test_lint_constant_check_on_scalar_outputs_uses_another_input_draw():
    from harness.worker.lint import degenerate_checks
    x = [torch.randn(4, 4)]
    loss, loss_other = [torch.tensor(4.32)], [torch.tensor(5.10)]
    checks = degenerate_checks(loss, loss_other, x, 1e-4, 1e-3)
    assert not checks["constant_pass"] and not checks["degenerate"]
    stable = degenerate_checks(loss, [torch.tensor(4.3201)], x, 1e-4, 1e-3)
    assert stable["constant_pass"] and stable["degenerate"]     # a loss that barely moves with its inputs


def test_tensor_file_round_trip_keeps_dtype_shape_and_values(tmp_path):
    from harness.shared.tensorfile import read_tensors, write_tensors
    outs = [torch.randn(3, 5).t(), torch.tensor(2.5, dtype=torch.float64), torch.zeros(0, 4),
            torch.arange(9, dtype=torch.int64).view(3, 3), torch.tensor([True, False]),
            torch.randn(7).to(torch.bfloat16)]
    back = read_tensors(write_tensors(outs, str(tmp_path / "o.kbt")), "cpu")
    assert [(t.dtype, t.shape) for t in back] == [(t.dtype, t.shape) for t in outs]
    assert all(torch.equal(a, b) for a, b in zip(outs, back))


@pytest.mark.parametrize("mutate", ["truncate", "huge_header_length", "not_json", "bad_dtype", "shape_past_end"])
def test_tensor_file_written_by_candidate_code_is_checked(tmp_path, mutate):
    """The candidate's process writes the file, so a malformed one is a clear error, never a crash or a
    read outside the file."""
    import json
    import struct
    from harness.shared.tensorfile import TensorFileError, read_tensors, write_tensors
    path = tmp_path / "o.kbt"
    write_tensors([torch.ones(4, 4)], str(path))
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    def aligned(n):
        return (n + 63) // 64 * 64
    header, payload = json.loads(data[8:8 + length]), data[aligned(8 + length):]
    expected = {"truncate": "does not match", "huge_header_length": "header length", "not_json": "not JSON",
                "bad_dtype": "bad tensor entry", "shape_past_end": "does not match"}[mutate]
    if mutate == "truncate":
        data = data[:-16]
    elif mutate == "huge_header_length":
        data = struct.pack("<Q", 1 << 40) + data[8:]
    elif mutate == "not_json":
        data = data[:8] + b"{" * length + data[8 + length:]
    else:
        entry = header["tensors"][0]
        entry.update({"dtype": "object"} if mutate == "bad_dtype" else {"shape": [4, 4000], "nbytes": 64000})
        raw = json.dumps(header).encode()
        data = (struct.pack("<Q", len(raw)) + raw).ljust(aligned(8 + len(raw)), b" ") + payload
    path.write_bytes(data)
    with pytest.raises(TensorFileError, match=expected):
        read_tensors(str(path), "cpu")


def test_own_kernels_include_triton_kernels_compiled_by_the_pair(tmp_path):
    import json
    from harness.worker.profiling import kernel_base_name, triton_kernel_names
    entry = tmp_path / "triton" / "3f9a"
    entry.mkdir(parents=True)
    (entry / "fused_add_relu.json").write_text(json.dumps({"name": "fused_add_relu", "num_warps": 4}))
    (entry / "__grp__fused_add_relu.json").write_text(json.dumps({"child_paths": {}}))
    (entry / "broken.json").write_text("{not json")
    assert triton_kernel_names(str(tmp_path / "triton")) == {"fused_add_relu"}
    assert triton_kernel_names("") == set()
    assert kernel_base_name("fused_add_relu") == "fused_add_relu"
    assert kernel_base_name("void ns::scale_relu<float, 4>(float const*, int)") == "scale_relu"


def test_consistency_catches_hidden_work_with_a_small_allowance_on_the_cpu():
    from harness.run.paired import OVERHEAD_SHARE_CPU, REPORTED_SHARE_CPU, consistency
    ref = [0.8 + 0.01 * (i % 5) for i in range(24)]                   # the call's request alone: ~0.8 ms of wake-up
    reported = [1.0] * 24                                              # and reads around a 1 ms call
    # CPU path (the flush and the inputs have a request of their own): 0.1 ms more in the other process is noise
    assert not consistency(ref, [x + 0.1 for x in ref], reported, REPORTED_SHARE_CPU, OVERHEAD_SHARE_CPU).found
    # a quarter of a 1 ms call hidden (a report scaled by 0.75) is caught there
    scaled = consistency(ref, [x + 0.25 for x in ref], [0.75] * 24, REPORTED_SHARE_CPU, OVERHEAD_SHARE_CPU)
    assert scaled.found
    # the allowance: 5% of the report + 5% of the reference's own per-sample work + 0.05 + four standard errors
    assert 0.12 < scaled.allowed_ms < 0.2
    # GPU path (no share of the overhead, 25% of the report): a forger hiding 0.3 ms on a 0.1 ms report is
    # caught, an honest 0.05 ms is not
    gpu = [4.0 + 0.01 * (i % 5) for i in range(24)]
    assert consistency(gpu, [x + 0.3 for x in gpu], [0.1] * 24, 0.25).found
    assert not consistency(gpu, [x + 0.05 for x in gpu], [0.1] * 24, 0.25).found
    # a large cache flush in the overhead (where it is still in the bracket) widens it by 5%: 10 ms hidden behind
    # a 0.1 ms report is caught, a flush 2 ms slower in the other process is not
    flushed = [75.0 + x for x in gpu]
    assert consistency(flushed, [x + 10.0 for x in flushed], [0.1] * 24, 0.25, OVERHEAD_SHARE_CPU, 75.0).found
    assert not consistency(flushed, [x + 2.0 for x in flushed], [0.1] * 24, 0.25, OVERHEAD_SHARE_CPU, 75.0).found


def test_check_values_travel_packed_with_nan_and_inf():
    import math
    from harness.shared import messages as m
    values = [1.5, -0.0, float("inf"), float("-inf"), float("nan"), 1e-300]
    back = m.unpack_floats(m.pack_floats(values))
    assert back[:4] == values[:4] and math.isnan(back[4]) and back[5] == 1e-300
    for bad in ("not base64!", "AAAA"):                   # garbage, and bytes that are not whole float64s
        with pytest.raises(m.ProtocolError):
            m.unpack_floats(bad)


FUSED = {"kernels": 4, "custom_kernels": ["fused_bn_relu"], "custom_share": 0.28}


@pytest.mark.parametrize("profiles, flags", [
    ([{"kernels": 3, "custom_kernels": [], "custom_share": 0.0}], ["no_custom_kernel"]),
    ([{"kernels": 9, "custom_kernels": ["bias_add"], "custom_share": 0.04}], ["little_custom_work"]),
    ([FUSED, FUSED, FUSED], []),
    ([FUSED, {"kernels": 2, "custom_kernels": [], "custom_share": 0.0}, FUSED], ["no_custom_kernel"]),  # once is enough
    ([FUSED, {**FUSED, "custom_share": 0.04}], ["little_custom_work"]),                      # the least share counts
    (["not an object"], []),                                                  # read as no profile at all
    ([None, None, None], []),                                                                  # the CPU path
])
def test_custom_kernel_share_warnings(profiles, flags):
    from harness.run import defenses
    from harness.results.records import RecordDraft
    from harness.shared import messages as m
    record = RecordDraft.from_json({"flags": []})
    parsed = [m.parse(m.Profile, {"other_kernels": [], **p}) if isinstance(p, dict) else None for p in profiles]
    defenses.check_kernels(record, parsed)
    assert record.flags == flags
    if flags == ["little_custom_work"]:
        assert "4.0%" in record.flag_details["little_custom_work"]
    if flags == ["no_custom_kernel"] and len(profiles) == 3:
        assert "1 of 3 profiled calls" in record.flag_details["no_custom_kernel"]
    if any(isinstance(p, dict) for p in profiles):
        assert record.kernels.profiled_calls == len(profiles)


@pytest.mark.parametrize("flags, reason", [
    (["interference"], "interference"),
    (["no_custom_kernel", "interference", "timing_inconsistent"], "interference"),   # a burst of load raises both
    (["timing_inconsistent"], "timing_inconsistent"),
    (["interference", "tampered_timer"], None),            # a verdict load cannot produce: no second try
    (["noisy"], None),
])
def test_which_invalid_pairs_are_measured_again(flags, reason):
    from harness.results.records import RecordDraft
    from harness.run.schedule import _load_sensitive
    assert _load_sensitive(RecordDraft.from_json({"status": "invalid", "flags": flags})) == reason
    assert _load_sensitive(RecordDraft.from_json({"status": "ok", "flags": flags})) is None


# ---------------------------------------------------------------- several process pairs (timing.processes)

def test_combine_is_the_geometric_mean_with_a_t_interval_over_processes():
    import math
    import statistics
    from harness.run.paired import Estimate, combine, t95
    pairs = [Estimate(1.02, 1.015, 1.025, 50), Estimate(0.98, 0.975, 0.985, 60), Estimate(1.0, 0.995, 1.005, 40)]
    est = combine(pairs)
    assert est.value == pytest.approx(math.exp(sum(math.log(e.value) for e in pairs) / 3))
    assert est.rounds == 150
    # three processes that disagree by 2%: the CI covers the spread between them, not the narrow CIs within
    assert est.lo < 0.98 and est.hi > 1.02
    spread = statistics.stdev(math.log(e.value) for e in pairs)
    assert math.log(est.hi / est.value) == pytest.approx(t95(2) * spread / math.sqrt(3))
    # processes that agree by chance: the CI is no narrower than what each process's own CI says
    same = combine([Estimate(1.0, 0.99, 1.01, 10)] * 2)
    assert same.hi - same.lo >= 0.02 * t95(1) / 1.96 / math.sqrt(2) * 0.99
    assert combine(pairs[:1]) == pairs[0]


def _ok_record(speedup: float, ci: list[float], rounds: int, flags=()):
    from harness.results.records import RecordDraft
    return RecordDraft.from_json({
        "status": "ok", "error": None, "speedup": speedup, "speedup_ci": ci, "flags": list(flags),
        "flag_details": {f: "why" for f in flags}, "speedup_vs_compile": None, "speedup_vs_compile_ci": None,
        "timing": {"rounds": rounds, "seconds": 1.0, "round_ratios": [speedup] * rounds, "noisy": "noisy" in flags,
                   "baselines": {}}})


def test_merge_of_process_pairs_keeps_each_and_combines_the_speedup():
    from harness.results.parts import WorkerRun
    from harness.run import merge as processes
    first, second = _ok_record(1.1, [1.09, 1.11], 10), _ok_record(1.0, [0.99, 1.01], 12, ["noisy"])
    first.worker, second.worker = (WorkerRun.from_json({"phases": {"total": 3.0}}),
                                   WorkerRun.from_json({"phases": {"total": 2.0}}))
    merged = processes.merge([first, second])
    assert merged.status == "ok"
    assert [p.speedup for p in merged.timing.processes] == [1.1, 1.0]
    assert [p.phases for p in merged.timing.processes] == [{"total": 3.0}, {"total": 2.0}]
    assert merged.speedup == pytest.approx((1.1 * 1.0) ** 0.5)
    assert merged.timing.rounds == 22 and len(merged.timing.round_ratios) == 22
    assert merged.flags == ["noisy"] and merged.timing.noisy is True


def test_merge_lets_a_failing_process_pair_stand_and_says_which():
    from harness.results.records import RecordDraft
    from harness.run import merge as processes

    def bad():
        return RecordDraft.from_json({"status": "invalid", "error": "interference: slower", "flags": ["interference"],
                                      "timing": None})
    merged = processes.merge([_ok_record(1.1, [1.09, 1.11], 10), bad()], planned=3)   # the third never ran
    assert merged.status == "invalid"
    assert merged.error == "process pair 2 of 3: interference: slower"
    first = processes.merge([bad()], planned=3)
    assert first.error == "process pair 1 of 3: interference: slower"
    assert processes.merge([bad()]).error == "interference: slower"       # one process pair: nothing to say


def test_jobs_travel_as_typed_messages():
    """A worker's job is a dataclass on both ends: the nested TimingSpec included; a wrong field is a ProtocolError."""
    import json
    from harness.shared import messages as m
    spec = m.TimingSpec("cold", 3, True, 20, ["candidate"])
    job = m.CandidateJob("p.py", "c.py", "cuda:0", 7, 2, spec, "/tmp/s", "/tmp/state.pt", True, None,
                         hide=["/k"], env={"A": "1"})
    data = json.loads(json.dumps(m.wire(job)))
    assert "kind" not in data and "op" not in data
    assert m.parse(m.CandidateJob, data) == job
    ref = m.ReferenceJob("p.py", "cpu", 7, 2, spec, ["default"], [1, 2], "/tmp/p", False, "bf16")
    assert m.parse(m.ReferenceJob, json.loads(json.dumps(m.wire(ref)))) == ref
    with pytest.raises(m.ProtocolError, match="seed"):
        m.parse(m.ReferenceJob, {**m.wire(ref), "seed": "7"})


def test_graph_replays_fill_a_sample_with_about_three_ms():
    from harness.worker.timing import GRAPH_MAX_REPLAYS, graph_replays
    assert graph_replays(0.0145, 20) == 10          # 20 calls of 0.0145 ms: 0.29 ms a replay
    assert graph_replays(0.2, 20) == 1              # already longer than the target
    assert graph_replays(1e-6, 20) == GRAPH_MAX_REPLAYS
    assert graph_replays(None, 20) == 1 and graph_replays(0.0, 20) == 1


def test_pair_workers_warm_the_profiler_only_where_calls_are_profiled(tmp_path):
    """torch.profiler's first CUDA trace costs seconds: the reference and candidate workers of a GPU slot start it
    before the rounds when the defenses (which profile calls) are on; nowhere else."""
    from harness.run.schedule import Slot, pair_worker_env
    cfg = tmp_path / "config.yaml"
    cfg.write_text("trials: 1\n")
    gpu, cpu = Slot("cuda:0", 0), Slot("cpu", None)
    assert pair_worker_env(load_config(cfg, {}), gpu).get("KB_WARM_PROFILER") == "1"
    assert "KB_WARM_PROFILER" not in pair_worker_env(load_config(cfg, {"defenses": False}), gpu)
    assert "KB_WARM_PROFILER" not in pair_worker_env(load_config(cfg, {}), cpu)


def test_both_sides_are_timed_on_the_same_cores():
    """Every worker of a GPU slot gets the slot's timing cores (the first cpu_threads of its share), and once a side is
    about to be timed every one of its threads, those started earlier included, is held to them: the two sides'
    timed threads cannot land on two different cores of a shared machine."""
    import os
    import subprocess
    import sys
    from harness.run.schedule import Slot
    slot = Slot("cuda:0", 0, cpus=(4, 5, 6, 7))
    assert slot.env(1)["KB_TIMING_CPUS"] == "4" and slot.env(2)["KB_TIMING_CPUS"] == "4,5"
    assert slot.env(1)["KB_CPUS"] == "4,5,6,7"
    assert Slot("cpu", None, cpus=(0, 1)).env(1)["KB_TIMING_CPUS"] == ""      # the CPU path: not held (caches)
    core = min(os.sched_getaffinity(0))
    script = (
        "import os, threading\n"
        "from harness.worker.common import pin_for_timing\n"
        "started, stop = threading.Event(), threading.Event()\n"
        "t = threading.Thread(target=lambda: (started.set(), stop.wait())); t.start(); started.wait()\n"
        "print(sorted(os.sched_getaffinity(t.native_id)) == sorted(os.sched_getaffinity(0)))\n"
        "print(pin_for_timing())\n"
        "print(sorted(os.sched_getaffinity(t.native_id)), sorted(os.sched_getaffinity(0)))\n"
        "stop.set()\n")
    env = {**os.environ, "KB_TIMING_CPUS": str(core), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["True", f"[{core}]", f"[{core}] [{core}]"]
    env.pop("KB_TIMING_CPUS")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[1] == "None"            # nothing to hold to: left as it was


class _ScriptedReference:
    """A reference worker that records what it was sent and answers from a script."""

    def __init__(self, replies: list[dict]):
        self.sent, self.replies = [], list(replies)

    def resume(self) -> None:
        pass

    def send(self, message: dict) -> None:
        self.sent.append(message)

    def recv(self, deadline: float) -> dict:
        return self.replies.pop(0)


def _reference_side(worker, known: dict):
    from types import SimpleNamespace
    from harness.run.evaluate import ReferenceSide
    from harness.shared import messages as m
    side = ReferenceSide.__new__(ReferenceSide)      # the protocol alone: no process behind it
    side.worker, side.known, side.ready, side.derive = worker, known, None, "not asked"
    side.derived = m.Derived(None)
    side.pc = SimpleNamespace(cfg=load_config(None, {}))
    return side


def test_later_process_pairs_reuse_the_flop_count_and_still_report_it():
    """Counting a forward's FLOPs imports torch._dynamo (seconds): the first reference process of a problem counts
    them, the later ones (timing.processes) are asked not to and their pairs report the first count. Each asks
    once, and its reply is read before anything else is asked of it."""
    import dataclasses
    from harness.run.workerproc import WorkerExit
    from harness.shared import messages as m
    known: dict = {}
    first = _ScriptedReference([{"kind": "derived", "work": {"flops": 10, "bytes": 20},
                                 "fp64_reference_max_abs_err": 1e-7, "fp64_output_scale": 2.0}])
    side = _reference_side(first, known)
    side.ask_derived()
    side.ask_derived()
    assert first.sent == [{"op": "derive", "flops": True}]
    side.read_derived()
    side.read_derived()
    assert side.derived.work == m.Work(10, 20) and side.derived.fp64_reference_max_abs_err == 1e-7
    later = _ScriptedReference([{"kind": "derived", "work": None, "fp64_reference_max_abs_err": 2e-7}])
    side = _reference_side(later, known)
    side.ask_derived()
    side.read_derived()
    assert later.sent == [{"op": "derive", "flops": False}]
    assert side.derived.work == m.Work(10, 20) and side.derived.fp64_reference_max_abs_err == 2e-7
    assert not side.beside_trials()                 # no `ready` yet: nothing known of its size
    ready = m.Ready("float32", "default", 1e-4, 1e-4, False, [[2]], 0, "train", 64 << 20,
                    m.ProblemChecks(False, False, False, False, True, False, []), {}, 0.001, None)
    side.ready = ready
    assert side.beside_trials()                     # small: worked out while the candidate runs its trials
    side.ready = dataclasses.replace(ready, footprint_bytes=4 << 30)
    assert not side.beside_trials()                 # its float64 copy could run the candidate out of memory
    wrong = _reference_side(_ScriptedReference([{"kind": "sample", "ms": 1.0}]), {})
    wrong.ask_derived()
    with pytest.raises(WorkerExit, match="derive"):
        wrong.read_derived()


def test_each_process_pair_keeps_the_kernels_both_sides_ran():
    """Two process pairs that picked different library kernels for the same call read apart: the record says which
    kernels eager PyTorch ran beside the candidate's, per process pair."""
    from harness.run import defenses
    from harness.run import merge as processes
    from harness.shared.messages import Profile
    records = []
    for gemm in ("sm90_gemm_a", "sm80_gemm_b"):
        record = _ok_record(1.0, [0.99, 1.01], 10)
        defenses.check_kernels(record, [Profile(1, [], 0.0, [gemm])], [Profile(1, [], 0.0, [gemm, "fill"]), None])
        records.append(record)
    assert records[0].kernels.reference_kernels == ["fill", "sm90_gemm_a"]
    merged = processes.merge(records)
    assert [p.kernels.to_json() for p in merged.timing.processes] == [
        {"candidate": ["sm90_gemm_a"], "reference": ["fill", "sm90_gemm_a"]},
        {"candidate": ["sm80_gemm_b"], "reference": ["fill", "sm80_gemm_b"]}]
    assert processes.merge([_ok_record(1.0, [0.99, 1.01], 10)] * 2).timing.processes[0].kernels is None


# ---------------------------------------------------------------- the CPU path's cold samples

def _sysfs_cache(root, caches):
    for i, (kind, size) in enumerate(caches):
        index = root / f"index{i}"
        index.mkdir(parents=True)
        (index / "type").write_text(kind + "\n")
        (index / "size").write_text(size + "\n")
    return str(root)


def test_cpu_cache_size_is_the_largest_data_cache_sysfs_lists(tmp_path):
    from harness.worker import timing
    tree = _sysfs_cache(tmp_path / "c", [("Data", "48K"), ("Instruction", "64M"), ("Unified", "1024K"),
                                         ("Unified", "32768K")])
    assert timing.cpu_cache_bytes(tree) == 32 << 20              # the instruction cache is not what a call's data hits
    assert timing.cpu_cache_bytes(str(tmp_path / "none")) == 0
    broken = _sysfs_cache(tmp_path / "b", [("Data", "lots"), ("Unified", "2M")])
    assert timing.cpu_cache_bytes(broken) == 2 << 20


def test_a_cpu_sample_flushes_the_caches_before_the_clock_starts():
    from harness.worker import timing
    flusher = timing.HostCacheFlusher(cache_bytes=1 << 20)
    assert flusher.bytes == 16 << 20                              # never less than 16 MiB
    assert timing.HostCacheFlusher(cache_bytes=1 << 30).bytes == 512 << 20
    assert timing.HostCacheFlusher(cache_bytes=0).bytes == 64 << 20   # sysfs silent: 32 MiB assumed
    events = []

    class Watched(timing.HostCacheFlusher):
        def __call__(self):
            super().__call__()
            events.append(("flush", int(self.buffer[-1])))

    meter = timing.measurement("cold", "cpu", Watched(cache_bytes=1 << 20), 1)
    assert isinstance(meter, timing.HostClock)
    for _ in range(2):
        meter.measure(lambda x: events.append(("call", None)), [])
    assert [e[0] for e in events] == ["flush", "call", "flush", "call"]
    assert events[0][1] != events[2][1]                           # each flush writes a new value: none is skipped
    assert isinstance(timing.make_flusher("cpu"), timing.HostCacheFlusher)
    assert timing.measurement("cold", "cpu", timing.make_flusher("cpu"), 1).flusher is not None


def test_run_json_names_each_gpu_by_uuid_where_nvidia_smi_gives_one():
    from harness.run import meta
    six = "0, NVIDIA H200, 580.159.04, 143771, 9.0, GPU-3f2a\n1, NVIDIA H200, 580.159.04, 143771, 9.0, GPU-77c1"
    assert [g.get("uuid") for g in meta.parse_gpus(six)] == ["GPU-3f2a", "GPU-77c1"]
    five = meta.parse_gpus("0, NVIDIA H100, 570.1, 81559, 9.0")
    assert five == [{"index": 0, "name": "NVIDIA H100", "driver": "570.1", "memory_mib": "81559",
                     "compute_capability": "9.0"}]
    assert meta.parse_gpus(None) == [] and meta.parse_gpus("No devices were found") == []


def test_a_fixed_seed_leaves_the_timed_samples_secret():
    """--seed N fixes weights and trials; the timed samples' and checks' streams are keyed by a fresh secret every
    run, since everything a fixed seed determines the candidate's process could derive too (it knows the base
    seed, the streams' tags and harness/seeds.py)."""
    from harness.core.seeds import RunSeed
    first, second = RunSeed.resolve(5), RunSeed.resolve(5)
    assert first.base == second.base == 5 and first.fixed and second.fixed
    assert first.stream("samples", "level1/001", "c").take(4) != second.stream("samples", "level1/001", "c").take(4)
    resumed = RunSeed.resumed(first.record(), None)
    assert (resumed.base, resumed.fixed) == (5, True) and resumed.secret != first.secret


def test_a_triton_candidate_is_skipped_on_the_cpu_without_a_build_worker(tmp_path, monkeypatch):
    """The CPU notice says Triton candidates are skipped there: they are, before anything imports them (they used
    to reach the import and fail as load_error: No module named 'triton')."""
    from harness.run import build
    from harness.core.discover import Candidate, Pair, Problem, needs_cuda, uses_triton
    source = "import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x):\n    pass\n"
    path = tmp_path / "tri.py"
    path.write_text(source)
    pair = Pair(Problem("level1/001_p", tmp_path / "p.py", None), Candidate("level1/001_p/tri", path, source, None),
                "level1/001_p")
    assert uses_triton(pair.candidate) and needs_cuda(pair.candidate)
    assert not uses_triton(Candidate("c", path, "import torch  # not triton\nx = 'triton'\n", None))
    monkeypatch.setattr(build, "Worker", lambda *a, **k: pytest.fail("a build worker was started"))
    cpu = build.Toolchain("cpu", "2.13.0", None, None, "3.11")
    result = build.build_one(pair, tmp_path / "builds", cpu, 60, 0)
    assert result.status == "skipped" and "Triton" in result.error and "CPU" in result.error
