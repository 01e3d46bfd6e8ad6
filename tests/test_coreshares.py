"""Two runs at once on one machine time on cores of their own (harness.run.coreshares): a GPU slot takes the first
share of the machine's cores that no other process holds, by flock, held until it releases or its process ends."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass

from harness.run import coreshares

CORES = list(range(8))


@dataclass
class FakeSlot:
    name: str
    gpu: int | None
    cpus: tuple[int, ...] = ()


def test_split_is_equal_shares_in_order():
    assert coreshares.split(CORES, 2) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert coreshares.split([3, 1, 2], 2) == [(1,), (2,)]          # the remainder (core 3) unused
    assert coreshares.split([0, 1], 4) == [(0, 1)] * 4             # fewer cores than shares: all of them each


def test_a_second_run_takes_the_next_free_share_and_a_third_is_told(tmp_path):
    first = coreshares.claim(1, CORES, machine_gpus=2, folder=tmp_path)
    second = coreshares.claim(1, CORES, machine_gpus=2, folder=tmp_path)
    third = coreshares.claim(1, CORES, machine_gpus=2, folder=tmp_path)
    assert first.shares == [(0, 1, 2, 3)] and not first.contended
    assert second.shares == [(4, 5, 6, 7)] and not second.contended
    assert third.shares == [(0, 1, 2, 3)] and third.contended == [0] and not third.held
    first.release()
    again = coreshares.claim(1, CORES, machine_gpus=2, folder=tmp_path)
    assert again.shares == [(0, 1, 2, 3)] and not again.contended
    for c in (second, again):
        c.release()


def test_a_run_of_two_slots_holds_both_shares(tmp_path):
    both = coreshares.claim(2, CORES, machine_gpus=2, folder=tmp_path)
    assert both.shares == [(0, 1, 2, 3), (4, 5, 6, 7)] and not both.contended
    other = coreshares.claim(1, CORES, machine_gpus=2, folder=tmp_path)
    assert other.contended == [0]
    both.release()


def test_a_share_held_by_another_process_is_freed_when_it_ends(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, pathlib
        from harness.run import coreshares
        got = coreshares.claim(1, {CORES}, machine_gpus=2, folder=pathlib.Path({str(tmp_path)!r}))
        print(got.shares[0], flush=True)
        sys.stdin.read()                                    # holds its share until told to end
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "(0, 1, 2, 3)"
        mine = coreshares.claim(1, CORES, machine_gpus=2, folder=tmp_path)
        assert mine.shares == [(4, 5, 6, 7)]
        mine.release()
    finally:
        holder.kill()                                       # no release: the kernel frees its locks
        holder.wait(10)
    after = coreshares.claim(1, CORES, machine_gpus=2, folder=tmp_path)
    assert after.shares == [(0, 1, 2, 3)] and not after.contended
    after.release()


def test_assign_gives_gpu_slots_shares_the_cpu_slot_every_core_and_says_contention(tmp_path, monkeypatch):
    monkeypatch.setenv(coreshares.LOCKS_VAR, str(tmp_path))
    import os
    cores = tuple(sorted(os.sched_getaffinity(0)))
    said: list[str] = []
    cpu = FakeSlot("cpu", None)
    coreshares.assign([cpu], said.append, machine_gpus=0).release()
    assert cpu.cpus == cores and not said
    held = coreshares.claim(len(cores), list(cores), machine_gpus=len(cores))   # every share taken by "another run"
    gpu = FakeSlot("cuda:1", 1)
    late = coreshares.assign([gpu], said.append, machine_gpus=len(cores))
    assert gpu.cpus and len(said) == 1 and said[0].startswith("cuda:1: every share")
    late.release()
    held.release()


def test_an_unpinned_external_dask_worker_takes_a_share_and_a_pinned_one_keeps_its_cores(tmp_path, monkeypatch):
    import os
    from harness.run import meta
    from harness.run.executors import dask_host
    monkeypatch.setenv(coreshares.LOCKS_VAR, str(tmp_path))
    monkeypatch.delenv("KB_DASK_CPUS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    cores = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(meta, "machine_gpus", lambda: [{"index": i, "name": "GPU"} for i in range(len(cores))])
    monkeypatch.setattr(os, "cpu_count", lambda: len(cores))
    monkeypatch.setattr(dask_host, "_SHARE", [])
    other = coreshares.claim(1, cores, machine_gpus=len(cores))             # another worker of this host, first
    slot = dask_host.local_slot("cuda")
    assert slot.gpu == 1 and slot.env()["CUDA_VISIBLE_DEVICES"] == "1"
    assert slot.cpus == coreshares.split(cores, len(cores))[1 if len(cores) > 1 else 0]
    other.release()
    monkeypatch.setattr(os, "cpu_count", lambda: len(cores) + 4)            # pinned (taskset): its cores as given
    monkeypatch.setattr(dask_host, "_SHARE", [])
    assert dask_host.local_slot("cuda").cpus == tuple(cores)


def test_candidates_cannot_reach_the_lock_files(tmp_path, monkeypatch):
    """A candidate that opened a core's lock file and flocked it (a read-only open is enough for flock) would make
    another run starting meanwhile find its share held: the lock folder is among what the sandbox hides from the
    workers that run candidate code."""
    from harness.run.cachedirs import hidden_from_candidates
    monkeypatch.setenv(coreshares.LOCKS_VAR, str(tmp_path / "locks"))
    assert str(tmp_path / "locks") in hidden_from_candidates(tmp_path / "cache")
