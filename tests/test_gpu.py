"""GPU pipeline and fault isolation, on a real CUDA device (skipped where there is none)."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, SAMPLES_PER_ROUND, cuda_available, json_records, run_cli, subtree, write_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu")
    config = write_config(tmp, FIXTURES / "gpu_tree")
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timeout", "40", "--timing-mode", "cold")
    assert done.returncode == 0, done.stderr
    return json_records(done.stdout)


@pytest.mark.parametrize("candidate, status, words", [
    ("cuda_fused", "ok", None),
    ("illegal_address", "runtime_error", "illegal memory access"),
    ("hang_kernel", "timeout", "timeout"),
    ("oom", "oom", "out of memory"),
    ("zz_after_faults", "ok", "no_custom_kernel"),           # plain PyTorch: ok, with the warning flag
    ("fallback", "ok", "no_custom_kernel"),
    ("side_stream", "ok", None),
])
def test_gpu_verdicts(gpu_run, candidate, status, words):
    record = gpu_run[candidate]
    assert record["status"] == status, (record["error"], record["worker"])
    if status != "ok":
        assert words in record["error"].lower()
        if status != "timeout":
            assert record["worker"]["device_usable_after"] is True
    elif words:
        assert words in record["flags"]
    else:
        assert record["flags"] == [] and record["error"] is None


def test_gpu_timing_uses_events_with_l2_flush(gpu_run):
    timing = gpu_run["cuda_fused"]["timing"]
    assert timing["clock"] == "cuda_event" and timing["l2_flush"] is True
    for side in ("reference", "candidate"):
        assert timing[side]["n"] == timing["rounds"] * SAMPLES_PER_ROUND and timing[side]["median_ms"] > 0
    assert timing["mode"] == "cold"
    assert gpu_run["cuda_fused"]["gpu"]["name"]


def test_custom_kernel_share_is_recorded(gpu_run):
    kernels = gpu_run["cuda_fused"]["kernels"]
    assert kernels["custom_kernels"] and kernels["custom_share"] > 0.5
    assert kernels["profiled_calls"] == 3 and len(kernels["custom_shares"]) == 3     # at random among the timed calls
    assert "no_custom_kernel" not in gpu_run["cuda_fused"]["flags"]


def test_side_stream_work_is_timed(gpu_run):
    # Its kernel is the same as cuda_fused's: timed to the end of the device, it cannot look much faster.
    side = gpu_run["side_stream"]["timing"]["candidate"]["median_ms"]
    fused = gpu_run["cuda_fused"]["timing"]["candidate"]["median_ms"]
    assert side > 0.7 * fused, (side, fused)
    # how long the device ran on after the call returned: recorded (on an H200 a 0.1 ms kernel's lag is ~0.02 ms)
    assert gpu_run["side_stream"]["timing"]["candidate"]["stream_lag_median_ms"] > 0


def test_roofline_and_ceilings_recorded(gpu_run):
    perf = gpu_run["cuda_fused"]["performance"]
    assert perf["ceilings"]["copy_gbps"] > 100 and perf["ceilings"]["matmul_tflops_bf16"] > 10
    assert perf["bytes"] > 0 and perf["achieved_gbps"] > 0 and perf["floor_ms"] > 0
    assert "faster_than_physics" not in gpu_run["cuda_fused"]["flags"]


# tamper_timer, patch_sampler, precompute_at_inputs and arena_watcher work on what a staged candidate's process no
# longer does (timing.staged_gpu, issue 44): its timed samples' inputs are drawn, placed and flushed by trusted code,
# and the sampler they patch times nothing there. The first three gain nothing (their speedups are checked);
# arena_watcher's thread, which copies the arena from the device in a loop, holds the process's interpreter while
# the call runs: the parent's clock sees that time outside the call's events (timing_inconsistent, measured on an
# H100 on 2026-11-28). forge_sample_times forges the reply the executor builds from its events there, and the
# parent's clock catches that too.
STAGED_GAINS_NOTHING = ("tamper_timer", "patch_sampler", "precompute_at_inputs")


@pytest.mark.parametrize("staged", [False, True], ids=["in_process", "staged"])
def test_exploits_on_the_gpu(tmp_path, staged):
    """The CPU-reproducible exploit set, run on the GPU path (each side's samples in its own process, or staged by
    the reference with timing.staged_gpu): the verdicts below."""
    config = write_config(tmp_path, FIXTURES / "exploits", timing={"staged_gpu": "true" if staged else "false"})
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timeout", "60")
    assert done.returncode == 0, done.stderr
    records = json_records(done.stdout)
    expected = {"gc_steal": "incorrect", "fd_forge": "crashed", "mutate_inputs": "invalid",
                "mutate_after_first_call": "invalid",     # staged: the reference checks every timed sample's inputs
                "cache_by_shape": "incorrect", "lazy_after_trials": "invalid", "background_thread": "invalid",
                "tamper_timer": "invalid", "bf16_precision": "incorrect", "subclass_output": "invalid",
                "eval_mode_bn": "incorrect", "control_plain": "ok", "control_train_bn": "ok",
                "patch_reference": "ok", "reduced_mantissa": "invalid", "forge_sample_times": "invalid",
                "patch_sampler": "invalid", "compute_on_read": "incorrect", "read_points_only": "incorrect",
                "thread_when_timed": "invalid", "precompute_at_inputs": "invalid", "precompute_in_torch": "ok",
                "fill_checked_points": "invalid", "precision_when_timed": "invalid", "skip_captured_calls": "ok",
                "split_bf16": "invalid", "lower_reference": "ok", "layout_view": "ok", "layout_unconverted": "invalid"}
    if staged:       # lower_reference: the reference's executor lowered (on the in-process GPU path the reference
        #              worker times its own calls, and a candidate that lowers its priority there is not named: README)
        expected.update({name: "ok" for name in STAGED_GAINS_NOTHING}, arena_watcher="invalid",
                        alias_view="invalid", frames_and_instances="invalid", lower_reference="invalid")
    # compute_on_read and read_points_only forge torch's reads of an output whose memory never holds the answer:
    # on the CPU path their trial files (written through torch) pass and the timed reads of raw memory catch them
    # (`invalid`); on the GPU the reference reads each trial's output where it lies, so trial 0 fails (`incorrect`).
    # not scale_reports: on the GPU a report scaled by 0.75 stays inside the parent's clock allowance (25% of the
    # reported time, `consistency_tolerance`); README, Hardening, says so
    got = {name: records[name]["status"] for name in expected}
    # thread_when_timed on the staged path fills its output from a thread after the reply: a race with the stop that
    # follows it. Either its thread was done inside the parent's clock (it gains nothing) or the output is read
    # unfinished (invalid)
    if staged and got["thread_when_timed"] == "ok":
        expected["thread_when_timed"] = "ok"
        assert records["thread_when_timed"]["speedup_ci"][0] < 1.5, records["thread_when_timed"]["speedup_ci"]
    # compute_on_read keys its pending outputs by data pointer: where the allocator hands a stale pointer to
    # another tensor, the cheat's own code raises (seen on the H200): a crash is as much a failure for it
    if got["compute_on_read"] == "runtime_error":       # (now that trial 0 fails first, not expected any more)
        expected["compute_on_read"] = "runtime_error"
    # skip_captured_calls cheats only inside a CUDA graph: `ok` where `auto` chose cold timing for this problem,
    # caught where it chose graph (its cold probe sits near the line: both seen on one H200 on 2026-11-26)
    if (records["skip_captured_calls"].get("timing") or {}).get("mode") == "graph":
        expected["skip_captured_calls"] = "invalid"
        assert "output_changed_under_timing" in records["skip_captured_calls"]["flags"]
    assert got == expected, {n: (records[n]["status"], records[n]["error"]) for n in expected if got[n] != expected[n]}
    for name in ("control_plain", "control_train_bn", "patch_reference"):
        assert set(records[name]["flags"]) <= {"no_custom_kernel"}
    if staged:
        for name in STAGED_GAINS_NOTHING:
            assert records[name]["speedup_ci"][0] < 1.5, (name, records[name]["speedup"], records[name]["speedup_ci"])
        assert "timing_inconsistent" in records["arena_watcher"]["flags"], records["arena_watcher"]["error"]
        assert "aliased_output" in records["alias_view"]["flags"], records["alias_view"]["error"]
        assert "mutates_inputs" in records["frames_and_instances"]["flags"], records["frames_and_instances"]["error"]


@pytest.mark.parametrize("staged", [False, True], ids=["in_process", "staged"])
def test_forged_report_in_graph_mode_is_caught(tmp_path, staged):
    """forge_sample_times blinds the in-process checks and reports a hundredth of each sample. In graph mode its
    Python spin runs only at capture, so what it hides is the replays' real time: the parent picks enough replays
    per sample (timing.graph_replays) for its own clock to see that against the per-sample overhead (on the H200,
    with 20 calls a sample and no replays, it read `ok` at 96x)."""
    config = write_config(tmp_path, FIXTURES / "exploits", timing={"staged_gpu": "true" if staged else "false"})
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timeout", "60", "--timing-mode", "graph",
                   "--candidate", "forge_sample_times", "--problem", "*001_linear_relu")
    assert done.returncode == 0, done.stderr
    record = json_records(done.stdout)["forge_sample_times"]
    timing = record["timing"]
    assert timing["mode"] == "graph" and timing["graph_replays"] >= 1, timing.get("graph_error")
    assert record["status"] == "invalid" and "timing_inconsistent" in record["flags"], (record["error"],
                                                                                         timing["consistency"])


def test_skipped_captured_calls_are_caught_in_graph_mode(tmp_path):
    """skip_captured_calls records its kernels for one captured call in five and hands back the previous output for
    the rest: each captured call now has inputs of its own and the outputs of calls other than the last are read
    too, so the skipped ones fail their check."""
    config = write_config(tmp_path, FIXTURES / "exploits")
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timeout", "60", "--timing-mode", "graph",
                   "--candidate", "[sc][ko]*[sn]", "--problem", "*001_linear_relu")
    assert done.returncode == 0, done.stderr
    records = json_records(done.stdout)
    cheat, control = records["skip_captured_calls"], records["control_plain"]
    assert cheat["timing"]["mode"] == "graph", cheat["timing"].get("graph_error")
    assert cheat["status"] == "invalid" and "output_changed_under_timing" in cheat["flags"], cheat["error"]
    assert control["status"] == "ok", control["error"]


def test_work_left_running_to_slow_the_reference_is_invalid(gpu_run):
    """Work a candidate leaves queued lands on whoever runs next. Either the reference's counted samples run slower
    while the candidate is alive (`interference`), or, where the leftover ends inside the reference block's warm-up
    sample or delays the candidate's own next request, the parent's clock sees the candidate's requests take far
    longer than it reported (`timing_inconsistent`; seen on the H200 with block_warmup 1). Both are invalid."""
    record = gpu_run["slow_the_reference"]
    caught = {"interference", "timing_inconsistent"} & set(record["flags"])
    assert record["status"] == "invalid" and caught, (record["error"], record["flags"], record["timing"]["interference"])
    assert record["retried"]["reason"] in caught                # measured twice, flagged both times


def test_honest_pairs_show_no_interference(gpu_run):
    """On the staged GPU path (the default) the check counts the `after` bracket's three blocks; the one `before`
    block ran beside the candidate's live process, as the executor's warm-up (evaluate.BESIDE_BLOCKS)."""
    for name in ("cuda_fused", "side_stream", "fallback"):
        interference = gpu_run[name]["timing"]["interference"]
        assert interference["found"] is False
        assert (len(interference["before_ms"]), len(interference["after_ms"])) == (1, 3), interference


def test_tiny_call_is_timed_as_graph_replay_within_1_2x_of_graph_time(tmp_path):
    """A 1K-element relu: auto mode picks graph replay, and the time it reports is within 1.2x of the op's own
    CUDA-graph replay time measured here, outside the harness."""
    import statistics
    import torch
    config = write_config(tmp_path, FIXTURES / "gpu_small")
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timeout", "60")
    assert done.returncode == 0, done.stderr
    record = json_records(done.stdout)["same_as_reference"]
    assert record["status"] == "ok", record["error"]
    timing = record["timing"]
    assert timing["mode"] == "graph" and timing["cold_probe_ms"] > timing["reference"]["median_ms"]
    x = torch.randn(1024, device="cuda")
    graph = torch.cuda.CUDAGraph()
    torch.relu(x)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for _ in range(20):
            torch.relu(x)
    per_call = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / 20)
    graph_ms = statistics.median(per_call)
    sides = {side: {k: v for k, v in timing[side].items() if k != "samples_ms"} for side in ("reference", "candidate")}
    ratios = {side: round(timing[side]["median_ms"] / graph_ms, 3) for side in ("reference", "candidate")}
    print(f"graph {graph_ms * 1e3:.3f} us a call here; the harness's medians over it: {ratios} (graph calls "
          f"{timing.get('graph_calls')}, replays {timing.get('graph_replays')}, l2_flush {timing.get('l2_flush')})")
    assert timing["candidate"]["median_ms"] <= 1.2 * graph_ms, (graph_ms, sides)
    assert timing["reference"]["median_ms"] <= 1.2 * graph_ms, (graph_ms, sides)


@pytest.mark.parametrize("staged", [False, True], ids=["in_process", "staged"])
def test_calibrate_on_the_gpu_reads_one(tmp_path, staged):
    """The A/A test on the 16M-element elementwise fixture, in three process pairs. One pair of processes carries
    a bias of its own that no number of rounds averages away, and on this fixture it is large: one process pair
    read 1.026, 0.978, 0.980 and 1.044 on the H200, each with a CI of about +/-1% that missed 1.0. Three process
    pairs give a CI over the bias between processes (README, Process pairs), which must reach 1.0; the estimate
    must sit within 5% of it (the harness's own asymmetries once read 0.50x-0.86x)."""
    config = write_config(tmp_path, FIXTURES / "gpu_tree", timing={"staged_gpu": "true" if staged else "false"})
    done = run_cli("calibrate", "--config", str(config), "--device", "cuda", "--target-rel-ci", "0.01",
                   "--max-pair-seconds", "15", "--timing-mode", "cold", "--processes", "3")
    assert done.returncode == 0, done.stderr
    (path,) = (tmp_path / "results").glob("calibrate-*.json")
    import json
    row = json.loads(path.read_text())["rows"][0]
    # A 95% CI misses 1.0 one time in twenty even without bias: ask for the CI to reach within 1% of it.
    assert row["status"] == "ok" and abs(row["speedup"] - 1) < 0.05 and row["ci"][0] <= 1.01 and row["ci"][1] >= 0.99, row


# ---------------------------------------------------------------- the memory budget (harness.shared.memplan)

GIB = 1 << 30


def _memory_run(tmp_path, budget_gb: float, problem: str, staged: bool = True) -> dict[str, dict]:
    config = write_config(tmp_path, FIXTURES / "gpu_memory", timing={"staged_gpu": "true" if staged else "false"})
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timeout", "300", "--timing-mode", "cold",
                   "--gpu-memory-gb", str(budget_gb), "--problem", problem)
    assert done.returncode == 0, done.stderr
    return {f"{r['problem'].split('/')[-1]}/{name}": r for name, r in json_records(done.stdout).items()}


def _within_target(memory: dict) -> None:
    """Each side's peak (torch.cuda.max_memory_allocated, whole process) at most 2x the eager peak + 1.5 GiB, the
    staged path's arena (`arena_peak_bytes`, the inputs the candidate reads) counted on the candidate's side."""
    eager = memory["eager_peak_bytes"]
    target = 2 * eager + 1.5 * GIB
    arena = memory.get("arena_peak_bytes") or 0
    for side, extra in (("reference_peak_bytes", 0), ("candidate_peak_bytes", arena)):
        assert memory[side] is not None and memory[side] + extra <= target, (side, memory)


# The staged path (the default) plans more than the in-process one: the inputs' arena (1 GiB for these problems)
# and two more CUDA contexts (the reference's executor and the flusher, 0.5 GiB each in the plan); with the budgets
# below it said "the pair needs 6.1 GiB ... budget 6.0 GiB" (docs/measurements.md, nineteenth session).
STAGED_EXTRA_GB = 1


@pytest.mark.parametrize("staged", [False, True], ids=["in_process", "staged"])
def test_memory_aa_pair_with_1_gib_inputs_fits_a_6_gib_budget(tmp_path, staged):
    """An A/A pair on a problem with 1 GiB of inputs under --gpu-memory-gb 6 (7 on the staged path): ok, the plan's
    shares within the budget, each side's peak within 2x the eager peak + 1.5 GiB."""
    budget = 6 + STAGED_EXTRA_GB * staged
    record = _memory_run(tmp_path, budget, "*rowsum*", staged)["001_rowsum_1gib/same_as_reference"]
    assert record["status"] == "ok", (record["error"], record["worker"])
    memory = record["worker"]["memory"]
    assert memory["budget_bytes"] == budget * GIB and 0.9 * GIB < memory["eager_peak_bytes"] < 1.5 * GIB, memory
    assert memory["cuda_contexts"] == (4 if staged else 2) and (memory["arena_bytes"] > 0) == staged, memory
    contexts = memory["cuda_contexts"] * GIB // 2
    assert (memory["reference_share_bytes"] + memory["candidate_share_bytes"] + memory["arena_bytes"] + contexts
            == budget * GIB), memory
    _within_target(memory)
    # the shares hold what each side asks for: neither allocator met its cap (a retry synchronises mid-sample)
    assert memory["reference_alloc_retries"] == memory["candidate_alloc_retries"] == 0, memory


@pytest.mark.parametrize("staged", [False, True], ids=["in_process", "staged"])
def test_memory_peaks_per_side_within_twice_the_eager_peak(tmp_path, staged):
    """1 GiB in, 1 GiB out under --gpu-memory-gb 8 (9 on the staged path): ok, each side's peak within 2x the eager
    peak + 1.5 GiB; a candidate that holds 8 GiB of its own is its own `oom` where the reference fits."""
    records = _memory_run(tmp_path, 8 + STAGED_EXTRA_GB * staged, "*relu_1gib*", staged)
    record = records["002_relu_1gib/same_as_reference"]
    assert record["status"] == "ok", (record["error"], record["worker"])
    _within_target(record["worker"]["memory"])
    hog = records["002_relu_1gib/hog_memory"]
    assert hog["status"] == "oom" and "harness_oom" not in hog["flags"], hog["error"]


def test_memory_a_problem_the_budget_cannot_hold_is_skipped_not_blamed(tmp_path):
    """The same problem under --gpu-memory-gb 3: the eager call (2 GiB) and the pair cannot fit beside the CUDA
    contexts: every pair `skipped` with `harness_oom`, none `oom`, no candidate run."""
    records = _memory_run(tmp_path, 3, "*relu_1gib*")
    for name, record in records.items():
        assert record["status"] == "skipped" and record["flags"] == ["harness_oom"], (name, record["error"])
        assert record["error"].startswith("harness_oom: ") and "budget 3.0 GiB" in record["error"], record["error"]
        assert record["sandbox"] is None                # the candidate worker never started


def test_memory_graph_mode_captures_only_the_calls_that_fit(tmp_path):
    """Graph mode on a call with 128 MiB in and out: 2 of the 20 calls captured (each holds 512 MiB per side), said
    in the record's timing, and the pair is ok."""
    config = write_config(tmp_path, FIXTURES / "gpu_memory")
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timeout", "300", "--timing-mode", "graph",
                   "--problem", "*relu_128mib*", "--candidate", "*/same_as_reference")
    assert done.returncode == 0, done.stderr
    record = json_records(done.stdout)["same_as_reference"]
    assert record["status"] == "ok", (record["error"], record["worker"])
    timing = record["timing"]
    assert timing["mode"] == "graph" and timing["graph_calls"] == 2, timing
    assert timing["graph_calls_capped"].startswith("2 of 20 calls captured"), timing["graph_calls_capped"]


def test_a_candidate_that_takes_the_cards_memory_loses_no_record_and_the_next_pair_is_ok(tmp_path):
    """hog_uncapped lifts its own allocator cap and takes all but 256 MiB of the card's free memory while it is
    built, beside the staged path's executor loading (the default path). Whatever that breaks for its own pair, it
    gains nothing (not `ok` faster than 1.2x), every pair has its record, and the pair after it, the reference's own
    code as the candidate, is `ok` (its memory is back once its process ends). Not yet run on a GPU (written in the
    nineteenth session with no device time left): where the executor fails to load, its pair reads `crashed`
    ("harness fault"), which names the wrong party (docs/measurements.md, nineteenth session)."""
    config = write_config(tmp_path, FIXTURES / "gpu_memory")
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timeout", "300", "--timing-mode", "cold",
                   "--problem", "*relu_128mib*")
    assert done.returncode == 0, done.stderr
    records = json_records(done.stdout)
    assert set(records) == {"hog_uncapped", "same_as_reference"}, sorted(records)
    hog = records["hog_uncapped"]
    assert hog["status"] != "ok" or hog["speedup"] < 1.2, (hog["status"], hog["speedup"], hog["error"])
    after = records["same_as_reference"]
    assert after["status"] == "ok", (after["error"], after["worker"])


@pytest.fixture(scope="module")
def cover_run(tmp_path_factory):
    """cover_window (the call's work moved in front of its start event) and its honest control, on the staged GPU
    path in cold mode (where the timer spins before the start event)."""
    tmp = tmp_path_factory.mktemp("cover")
    tree = subtree(FIXTURES / "exploits", tmp / "tree", lambda stem: stem in ("cover_window", "control_plain"))
    config = write_config(tmp, tree, timing={"staged_gpu": "true"})
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timing-mode", "cold", "--timeout", "60")
    assert done.returncode == 0, done.stderr
    return json_records(done.stdout)


def test_work_moved_in_front_of_the_start_event_still_computes_the_answer(cover_run):
    assert cover_run["control_plain"]["status"] == "ok", cover_run["control_plain"]["error"]
    assert cover_run["cover_window"]["correct"] is True, cover_run["cover_window"]["error"]


def test_work_moved_in_front_of_the_start_event_gains_at_most_the_clocks_allowance(cover_run):
    """Not caught; bounded only by the parent's clock: the staged timer's ~50 us cover spin runs in the candidate's
    process outside the events (docs/hardening.md, What it cannot stop, 4), so work moved there is hidden unless the
    consistency check sees it. The bound is the check's allowance, not the spin: on an H200 the cheat hid 19 us a
    sample with the GPU to itself once, 0.111 ms (allowance 0.249 ms) another time, and 0.24 ms, its whole cold call,
    beside three other test runs on the host. What must hold: the hidden time lies inside the parent's clock, so a
    pair that reads `ok` hid at most what the consistency check allowed it."""
    cheat = cover_run["cover_window"]
    if cheat["status"] == "invalid":
        return
    timing = cheat["timing"]
    hidden = timing["reference"]["median_ms"] - timing["candidate"]["median_ms"]
    consistency = timing["consistency"]
    seen = consistency["candidate_unexplained_ms"] - consistency["reference_unexplained_ms"]
    assert cheat["status"] == "ok" and not consistency["found"], (cheat["status"], cheat["flags"], consistency)
    assert hidden <= consistency["allowed_ms"] and seen >= 0.5 * hidden, (hidden, seen, cheat["speedup_ci"],
                                                                          timing["reference"], timing["candidate"],
                                                                          consistency)
