"""harness.run.interleave: the parent's side of paired timing, against scripted workers (no processes).

The Interleaver alternates the reference's variants and the candidate in mirrored blocks (E C .. K on seeds X, then
K .. C E on seeds Y), one side at a time with the other (and the spares) stopped, and collects every sample and
output check. These tests drive it with fake workers that answer from a script and record what they were asked."""
from __future__ import annotations

import os
import time
import types

import pytest

from harness.core.seeds import SeedStream
from harness.run.clients import CandidateClient, CandidateFailed, FlusherClient, ReferenceClient
from harness.run.interleave import CANDIDATE, EAGER, FULL_CHECKS, GraphFallback, Interleaver, fastest, ratios
from harness.run.paired import StopRule
from harness.run.reference_executor import ExecutorClient
from harness.run.trusted import Checked
from harness.run.workerproc import WorkerExit

COMPILED = "compile:default"
COLD_MS = 50.0                  # what the fake's first sample after it was resumed takes (cold host caches)


class World:
    """What every fake process saw, in order: ("sample", worker, variant, seed, who else was running)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.members: list = []

    def running(self) -> set[str]:
        return {w.name for w in self.members if not w.paused}


class FakeWorker:
    """A worker process that answers each request at once. `ms(variant, seed)` is the sample time it reports; its
    first sample after each resume takes COLD_MS instead (as a real process whose caches the other one evicted)."""

    def __init__(self, world: World, name: str, ms, **sample_fields):
        self.world, self.name, self.ms, self.fields = world, name, ms, sample_fields
        self.paused, self.cold, self.reply, self.sleep = False, False, None, 0.0
        self.requests: list[dict] = []
        self.proc = types.SimpleNamespace(pid=os.getpid())   # the scheduling watch reads this test's own threads
        self.cpu_group = None                                # its cores counted over its (this test's) process tree
        world.members.append(self)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.cold = True
        self.paused = False

    wake = resume
    freeze = pause

    def arena_path(self) -> str:
        return f"/proc/1/fd/{self.name}"

    def awake_seconds(self) -> float:
        return 0.0                                   # (the cores meter: too little awake to judge)

    def send(self, message: dict) -> None:
        assert not self.paused, f"{self.name} was sent {message} while stopped"
        self.requests.append(message)
        op = message["op"]
        if op == "sample":
            self.world.events.append(("sample", self.name, message["variant"], message["seed"],
                                      self.world.running() - {self.name}))
            ms = COLD_MS if self.cold else self.ms(message["variant"], message["seed"])
            self.cold = False
            self.reply = {"kind": "sample", "ms": ms, "host_ms": ms, "lag_ms": 0.0, "tampered": [],
                          "outputs": [[{"dtype": "torch.float32", "shape": [4], "strides": [1], "address": 64}]],
                          **self.fields}
        elif op == "stage":
            self.world.events.append(("stage", self.name, message["side"], message["seed"],
                                      self.world.running() - {self.name}))
            self.reply = {"kind": "staged", "layout": {"entries": [], "bytes": 1 << 20}, "mutated": False}
        elif op == "call":
            self.world.events.append(("call", self.name, message["variant"], None,
                                      self.world.running() - {self.name}))
            self.reply = {"kind": "called", "outputs": [{"dtype": "torch.float32", "shape": [4], "strides": [1],
                                                         "address": 64}]}
        elif op == "arena":
            self.reply = {"kind": "arena_set", "error": None}
        elif op == "flush":
            self.world.events.append(("flush", self.name, None, None, self.world.running() - {self.name}))
            self.reply = {"kind": "flushed", "ms": 4.0}
        elif op == "profile":
            self.reply = {"kind": "profile", "profile": {          # the side and the seed, in a Profile's fields
                "kernels": 1, "custom_kernels": [self.name], "custom_share": 0.0, "other_kernels": [str(message["seed"])]}}
        else:
            raise AssertionError(f"unexpected request {message}")

    def recv(self, deadline: float) -> dict:
        if self.sleep:
            time.sleep(self.sleep)
        return self.reply


class FakeSpares:
    def __init__(self, world: World) -> None:
        self.name, self.paused = "spares", False
        world.members.append(self)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False


class FakeReader:
    """trusted.Reader's part: records every output read (side, sample seed, check seed, whole or not)."""

    def __init__(self, error: str | None = None) -> None:
        self.reads: list[tuple[str, int, bool]] = []
        self.kept: list[tuple[int, int]] = []           # (check seed, sample seed) the reference was told to keep
        self.log: list[tuple] = []                      # ("keep", check seed) and ("read", side, check seed, whole)
        self.error = error

    def read(self, side, candidate: bool, result, check_seed: int, full: bool, stay_stopped: bool = False) -> Checked:
        self.reads.append((side.worker.name, check_seed, full))
        self.log.append(("read", side.worker.name, check_seed, full))
        assert candidate == (side.worker.name == CANDIDATE)
        return Checked([1.0], [[4]], self.error if candidate else None)

    def keep(self, check_seed: int, seed: int, slot: int = 0) -> None:
        self.kept.append((check_seed, seed))
        self.log.append(("keep", check_seed))


def setup(reference_ms=2.0, candidate_ms=1.0, variants=(EAGER,), block=2, warmup=1, profiles=0, **candidate_fields):
    world = World()
    reference = FakeWorker(world, "reference",
                           reference_ms if callable(reference_ms) else lambda variant, seed: reference_ms)
    candidate = FakeWorker(world, CANDIDATE, candidate_ms if callable(candidate_ms) else lambda v, s: candidate_ms,
                           **candidate_fields)
    spares = FakeSpares(world)
    interleaver = Interleaver(ReferenceClient(reference), list(variants), block, SeedStream(b"samples"),
                              SeedStream(b"checks"), time.monotonic() + 60, warmup=warmup, profiles=profiles,
                              spares=spares)
    interleaver.reader = FakeReader()
    return world, interleaver, reference, candidate, spares


def rounds(il: Interleaver, candidate: FakeWorker, rule: StopRule):
    """The rounds against `candidate`, through the client the run gives the Interleaver."""
    return il.rounds(CandidateClient(candidate), rule)


RULE = StopRule(min_rounds=6, max_rounds=40, target_rel_ci=0.05, max_seconds=60)


def samples_of(world: World) -> list[tuple[str, str, int]]:
    return [(worker, variant, seed) for kind, worker, variant, seed, _ in world.events if kind == "sample"]


def test_rounds_mirror_the_order_and_every_variant_gets_the_candidates_inputs():
    world, il, _, candidate, _ = setup(variants=(EAGER, COMPILED), block=2, warmup=1)
    out = rounds(il, candidate, RULE)
    assert len(out.rounds) == 6 and not out.noisy           # steady 2x: the CI is met at min_rounds
    seen = samples_of(world)
    per_block = 3                                           # warmup + block
    assert len(seen) == 6 * 2 * 3 * per_block
    all_seeds = []
    for r in range(6):
        rnd = seen[r * 18:(r + 1) * 18]
        blocks = [rnd[i:i + per_block] for i in range(0, 18, per_block)]
        order = [(b[0][0], b[0][1]) for b in blocks]
        assert order == [("reference", EAGER), ("reference", COMPILED), (CANDIDATE, CANDIDATE),
                         (CANDIDATE, CANDIDATE), ("reference", COMPILED), ("reference", EAGER)]
        forward, backward = [[s for _, _, s in b] for b in blocks[:3]], [[s for _, _, s in b] for b in blocks[3:]]
        assert forward[0] == forward[1] == forward[2] and backward[0] == backward[1] == backward[2]
        all_seeds += forward[0] + backward[0]
    assert len(set(all_seeds)) == len(all_seeds)            # fresh inputs in every block of every round
    assert out.rounds[0] == {EAGER: [2.0] * 4, COMPILED: [2.0] * 4, CANDIDATE: [1.0] * 4}
    assert ratios(out, EAGER) == [2.0] * 6 and fastest(out, [EAGER, COMPILED]) in (EAGER, COMPILED)


def test_only_the_side_being_timed_runs():
    world, il, reference, candidate, spares = setup(variants=(EAGER, COMPILED))
    rounds(il, candidate, RULE)
    assert world.events
    for _, worker, _, _, others in world.events:
        assert others == set(), f"{others} ran while {worker} was timed"
    il.release()
    assert not reference.paused and not candidate.paused and not spares.paused


def test_warmup_samples_are_checked_but_never_counted():
    """Each block's first sample after a switch is cold (COLD_MS here): it runs and its output is checked like the
    others, but no sample time of it reaches the rounds."""
    world, il, _, candidate, _ = setup(block=2, warmup=1)
    out = rounds(il, candidate, RULE)
    assert COLD_MS not in out.samples(EAGER) + out.samples(CANDIDATE)
    assert len(out.samples(CANDIDATE)) == len(out.host_ms[CANDIDATE]) == 6 * 2 * 2
    reads = il.reader.reads
    assert len([r for r in reads if r[0] == CANDIDATE]) == 6 * 2 * 3        # warm-up included
    without = setup(block=2, warmup=0)
    cold = rounds(without[1], without[3], RULE)
    assert COLD_MS in cold.samples(CANDIDATE)                 # what the warm-up keeps out


def test_both_sides_are_checked_at_the_same_drawn_positions():
    """A sample seed's outputs (eager and candidate, on the same inputs) are read with one check seed; each sample
    gets its own; compiled variants are not read; at least FULL_CHECKS of the candidate's are compared whole, each
    right after the reference was told to keep that sample (its seed, to recompute its own output on the same
    inputs)."""
    world, il, _, candidate, _ = setup(variants=(EAGER, COMPILED), block=2, warmup=0)
    rounds(il, candidate, RULE)
    reads = il.reader.reads
    assert {side for side, _, _ in reads} == {"reference", CANDIDATE}
    sample_seeds = [(w, v, s) for w, v, s in samples_of(world) if v != COMPILED]
    assert len(reads) == len(sample_seeds)                    # one read per eager and candidate sample
    by_seed: dict[int, dict[str, tuple[int, bool]]] = {}
    for (worker, _, seed), (side, check_seed, full) in zip(sample_seeds, reads):
        assert worker == side
        by_seed.setdefault(seed, {})[side] = (check_seed, full)
    assert all(sides["reference"][0] == sides[CANDIDATE][0] for sides in by_seed.values())
    check_seeds = [sides[CANDIDATE][0] for sides in by_seed.values()]
    assert len(set(check_seeds)) == len(check_seeds)
    full = [seed for seed, sides in by_seed.items() if sides[CANDIDATE][1]]
    assert len(full) >= FULL_CHECKS                       # FULL_CHECKS early, more where the pair runs long
    assert not any(sides["reference"][1] for sides in by_seed.values())     # the reference's own: at points
    assert sorted(il.reader.kept) == sorted((by_seed[s][CANDIDATE][0], s) for s in full)
    log = il.reader.log
    for i, entry in enumerate(log):
        if entry[0] == "read" and entry[3]:
            assert log[i - 1] == ("keep", entry[2])


def test_whole_checks_come_from_both_halves_of_a_round(monkeypatch):
    """A candidate tells a round's halves apart (a reference block before its forward block, its own just before
    its backward one) and may be wrong in one of them: a red team's was wrong in every backward-half call and read
    `ok` while whole checks came from forward halves only. The drawn positions count a round's samples forward
    then backward; the candidate's sample there is compared whole whether the reference's side ran those inputs
    before it or runs them after."""
    from harness.run import interleave
    monkeypatch.setattr(interleave, "full_check_samples", lambda draw, m, top, per_round: {(0, 1), (0, 2), (1, 3)})
    world, il, _, candidate, _ = setup(block=2, warmup=1)
    rounds(il, candidate, RULE)
    order = [seed for worker, _, seed in samples_of(world) if worker == CANDIDATE]
    per_round = [order[i:i + 6] for i in range(0, len(order), 6)]      # forward block (1 + 2), backward block
    expected = {per_round[0][2], per_round[0][4], per_round[1][5]}       # round 0: forward's 2nd, backward's 1st; ...
    checked = {s for s, c in zip(order, [r for r in il.reader.reads if r[0] == CANDIDATE]) if c[2]}
    assert checked == expected
    assert {seed for _, seed in il.reader.kept} == expected


def test_the_stop_rule_ends_the_rounds():
    """Steady ratios stop at min_rounds; ratios too spread for the target go on to max_rounds and read noisy; the
    time cap ends the pair after the round in progress."""
    spread = setup(reference_ms=lambda variant, seed: 1.0 + seed % 7, candidate_ms=1.0, block=1, warmup=1)
    out = rounds(spread[1], spread[3], StopRule(6, 9, 0.01, 60))
    assert len(out.rounds) == 9 and out.noisy
    capped = setup()
    out = rounds(capped[1], capped[3], StopRule(6, 40, 0.05, 0.0))
    assert len(out.rounds) == 1 and out.noisy


def test_what_the_candidate_reports_is_kept():
    world, il, _, candidate, _ = setup(tampered=["time.perf_counter"], mutated=True, not_plain=True,
                                       changed_after_return=True)
    il.reader.error = "value at [2] differs"
    out = rounds(il, candidate, RULE)
    assert out.tampered == {"time.perf_counter"}
    assert out.mutated and out.not_plain and out.changed_after_return
    assert out.output_errors[0] == "timed call (candidate): value at [2] differs"
    assert len(out.output_errors) == 6 * 2 * 3


def test_a_failed_graph_capture_names_the_side():
    world, il, _, candidate, _ = setup(error="graph capture failed: operation not permitted when stream is capturing")
    with pytest.raises(GraphFallback) as caught:
        rounds(il, candidate, RULE)
    assert caught.value.side == CANDIDATE and "graph capture failed" in caught.value.error


@pytest.mark.parametrize("reply, kind, words", [
    ({"kind": "sample", "ms": 0.0, "host_ms": 0.0, "lag_ms": 0.0, "tampered": []}, WorkerExit, "sample of 0.0 ms"),
    ({"kind": "sample", "ms": -1.0, "host_ms": 0.0, "lag_ms": 0.0, "tampered": []}, WorkerExit, "sample of -1.0 ms"),
    ({"kind": "sample", "ms": "fast", "host_ms": 0.0, "lag_ms": 0.0, "tampered": []}, WorkerExit, "malformed"),
    ({"kind": "sample", "ms": 1.0}, WorkerExit, "malformed 'sample' reply"),
    ({"kind": "failed", "status": "runtime_error", "error": "RuntimeError: boom"}, CandidateFailed, "boom"),
    ({"kind": "failed", "error": "RuntimeError: boom"}, WorkerExit, "malformed"),      # a failure names its status
])
def test_a_candidate_that_answers_wrong_ends_the_timing(reply, kind, words):
    """The candidate's process is untrusted: a sample of no time, a reply of the wrong shape is a protocol fault
    (WorkerExit), and its code raising mid-timing is CandidateFailed; never a crash of the parent."""
    world, il, _, candidate, _ = setup()
    original = candidate.send

    def send(message):
        original(message)
        candidate.reply = dict(reply)
    candidate.send = send
    with pytest.raises(kind, match=words) as caught:
        rounds(il, candidate, RULE)
    if kind is WorkerExit:
        assert caught.value.kind == "protocol"
    else:
        assert caught.value.reply.error == "RuntimeError: boom"


def test_profiled_halves_profile_both_sides_after_their_blocks():
    world, il, reference, candidate, _ = setup(variants=(EAGER, COMPILED), profiles=3)
    out = rounds(il, candidate, RULE)
    assert len(out.profiles) == len(out.reference_profiles) == 3
    assert {p.custom_kernels[0] for p in out.profiles} == {CANDIDATE}
    assert {p.custom_kernels[0] for p in out.reference_profiles} == {"reference"}
    for worker in (reference, candidate):
        ops = [m["op"] for m in worker.requests]
        for i, op in enumerate(ops):
            if op == "profile":
                assert ops[i - 1] == "sample"                   # after a block, never inside one
    assert all(m["variant"] == EAGER for m in reference.requests if m["op"] == "profile")   # compiled: never
    profiled_seeds = [p.other_kernels[0] for p in out.profiles]
    assert sorted(profiled_seeds) == sorted(p.other_kernels[0] for p in out.reference_profiles)   # the same inputs
    none = setup(profiles=0)
    assert rounds(none[1], none[3], RULE).profiles == []


def test_cpu_path_stages_every_sample_in_the_trusted_worker():
    """staged (the CPU path): before every call the reference writes that sample's inputs into the arena of the side
    that runs it, with the candidate stopped, and the flusher flushes with both sides stopped; the side that runs
    gets a call that names no seed, and its sample is the parent's clock around that call. After the rounds the
    reference checks each side's last inputs once more (a stage request without a seed)."""
    world, il, reference, candidate, _ = setup()
    flusher = FakeWorker(world, "flusher", lambda v, s: 0.0)
    il.staged, il.flusher = True, FlusherClient(flusher)
    candidate.sleep = 0.01
    out = rounds(il, candidate, RULE)
    assert {m["op"] for m in candidate.requests} == {"call"}                 # nothing but "call now"
    assert not any("seed" in m for m in candidate.requests)
    assert reference.requests[0] == {"op": "arena", "path": candidate.arena_path(), "side": "candidate"}
    events = world.events
    calls = [i for i, e in enumerate(events) if e[0] == "call"]
    assert len(calls) == sum(len(r[v]) for r in out.rounds for v in r) + 4 * len(out.rounds) * il.warmup
    for i in calls:
        flush, stage = events[i - 1], events[i - 2]
        assert flush[0] == "flush" and flush[4] == set()                     # both sides stopped meanwhile
        assert stage[0] == "stage" and stage[2] == ("reference" if events[i][1] == "reference" else CANDIDATE)
        assert CANDIDATE not in stage[4] and events[i][4] <= {"flusher"}     # one side at a time
    ends = [m for m in reference.requests if m["op"] == "stage" and m["seed"] is None]
    assert [m["side"] for m in ends] == ["reference", CANDIDATE]
    assert min(out.samples(CANDIDATE)) >= 9.0                               # the parent's clock, not a report
    assert set(out.flush_ms[CANDIDATE]) == {4.0}


def test_the_parents_clock_sees_time_a_worker_does_not_report():
    """unexplained_ms: the parent's bracket around a sample request minus the time the worker reported; a candidate
    that reports 1 ms for a request that takes 20 ms shows the rest."""
    world, il, _, candidate, _ = setup(block=1, warmup=1)
    candidate.sleep = 0.02
    out = rounds(il, candidate, RULE)
    assert min(out.unexplained_ms[CANDIDATE]) >= 18.0
    assert len(out.unexplained_ms[CANDIDATE]) == len(out.samples(CANDIDATE))


def test_reference_blocks_time_the_reference_alone():
    world, il, reference, _, _ = setup(reference_ms=lambda variant, seed: 3.0, block=3, warmup=1)
    medians = il.reference_blocks(4)
    assert medians == [3.0] * 4                              # the cold warm-up sample is not in a median
    assert {worker for _, worker, _, _, _ in world.events} == {"reference"}
    assert len(world.events) == 4 * 4


def test_fastest_is_the_variant_with_the_smallest_median():
    world, il, _, candidate, _ = setup(reference_ms=lambda variant, seed: 2.0 if variant == EAGER else 1.5,
                                       variants=(EAGER, COMPILED))
    out = rounds(il, candidate, RULE)
    assert fastest(out, [EAGER, COMPILED]) == COMPILED
    assert ratios(out, COMPILED) == [1.5] * len(out.rounds)
    assert fastest(out, []) is None


def test_the_candidate_is_stopped_while_the_executors_first_blocks_run_after_its_trials():
    """The staged GPU path attaches the reference's executor after the candidate's trials and runs its first blocks
    then (harness.run.evaluate._executor_beside): the candidate, alive by then, is held (candidate_alive) so that it is
    stopped while the executor's calls run, as in the rounds; the two never run at once."""
    world, il, _, candidate, _ = setup(block=2, warmup=1)
    executor = FakeWorker(world, "executor", lambda variant, seed: 2.0)
    il.use_mode(1, staged=True)
    il.attach_executor(ExecutorClient(executor))

    def beside() -> list[set]:
        return [running for kind, name, _, _, running in world.events if kind == "call" and name == "executor"]
    il.reference_blocks(1)
    assert beside() and all(CANDIDATE in running for running in beside())    # not held: it ran beside them
    world.events.clear()
    il.candidate_alive(CandidateClient(candidate))
    il.reference_blocks(1)
    assert beside() and all(running == set() for running in beside()), beside()
