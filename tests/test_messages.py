"""harness.shared.messages: what travels between the parent and its workers."""
from __future__ import annotations

import pytest


def test_check_values_travel_packed_with_nan_and_inf():
    import math
    from harness.shared import messages as m
    values = [1.5, -0.0, float("inf"), float("-inf"), float("nan"), 1e-300]
    back = m.unpack_floats(m.pack_floats(values))
    assert back[:4] == values[:4] and math.isnan(back[4]) and back[5] == 1e-300
    for bad in ("not base64!", "AAAA"):                   # garbage, and bytes that are not whole float64s
        with pytest.raises(m.ProtocolError):
            m.unpack_floats(bad)


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


def test_every_request_travels_as_a_typed_message_and_round_trips():
    """Every parent -> worker request is a messages dataclass with an OP; its wire form goes through JSON and parses
    back to the same request (a verify's TrialFiles included); no two requests share an OP."""
    import dataclasses
    import json
    from harness.shared import messages as m
    files = [m.TrialFile("trial0", "", 0, [{"dtype": "torch.float32", "shape": [2], "strides": [1], "address": 8}]),
             m.TrialFile("timed", "/tmp/t.kbt", -1, shapes=[[2, 3]], strides=[[3, 1]], check_seed=11)]
    requests = [m.VerifyRequest(files), m.BudgetRequest(1 << 30, "skipped: needs 2 GiB"), m.BudgetRequest(None),
                m.MemoryRequest(), m.HealthRequest(), m.PeerCloseRequest(), m.NextRequest(), m.ExitRequest(),
                m.KeepRequest(5, 1), m.ArenaRequest("", "executor"), m.StageRequest("candidate", 3),
                m.ReadRequest([[files[0].outputs[0]]], 4, remember=False), m.DeriveRequest(False)]
    for request in requests:
        data = json.loads(json.dumps(m.wire(request)))
        assert data["op"] == type(request).OP
        assert m.parse(type(request), data) == request
    ops = [cls.OP for cls in vars(m).values() if isinstance(cls, type) and dataclasses.is_dataclass(cls)
           and "OP" in vars(cls)]
    assert len(ops) == len(set(ops))
    with pytest.raises(m.ProtocolError, match="share_bytes"):
        m.parse(m.BudgetRequest, {"op": "budget", "share_bytes": True})


def test_every_reply_travels_as_a_typed_message_and_round_trips():
    """Worker replies are messages dataclasses with a KIND: nested parts (TrialFile, FileCheck, CompileNote, SizeInfo,
    ProblemChecks) go over the wire as dicts and parse back; from_fields drops a worker's extra figures."""
    import json
    from harness.shared import messages as m
    checks = m.ProblemChecks(False, False, False, False, True, False, [])
    replies = [
        m.BudgetSet(1 << 30, None), m.MemoryPeak(10, 12, 0, 0, arena_bytes=4), m.MemoryPeak(), m.PeerClosed(), m.Health(True),
        m.Verified([m.from_fields(m.FileCheck, {"ok": True, "label": "t", "max_abs_err": 0.0, "mismatches": 0})]),
        m.Outputs("seed", [], "eval", [m.TrialFile("trial0", "/tmp/o.kbt", 0)], False, False, False,
                  sandbox={"mode": "off"}),
        m.Ready("float32", "default", 1e-4, 1e-4, False, [[2]], 0, "eval", 64, checks,
                {"default": m.CompileNote(None, 1.5)}, 0.01, 0.2, None,
                [m.SizeInfo("main", True, {}, [[2]], 8)]),
        m.ModeSet("cold"), m.HarnessError("RuntimeError: x", traceback="tb"), m.Flushed(0.5)]
    for reply in replies:
        data = json.loads(json.dumps(m.wire(reply)))
        assert data["kind"] == type(reply).KIND
        assert m.parse(type(reply), data) == reply
    assert "mismatches" not in m.wire(replies[5])["results"][0]
    # a memory reply without the arena's figure reads as None (not reported), not 0
    assert m.parse(m.MemoryPeak, {"kind": "memory", "peak_allocated_bytes": 10}) == m.MemoryPeak(10)


def test_a_worker_dispatches_from_one_table_of_request_types():
    """harness.worker.common.Handlers: the op picks the request type, the request is parsed (or read by the type's
    own parser) and handed to its handler; an op not in the table is None (the worker ends)."""
    from harness.shared import messages as m
    from harness.worker.common import Handlers
    seen = []
    handlers = Handlers({m.HealthRequest: lambda req: m.Health(True),
                         m.BudgetRequest: lambda req: m.BudgetSet(req.share_bytes, req.fp64),
                         m.SizeRequest: lambda req: seen.append(req) or m.SizeSet(req.size)},
                        {m.SizeRequest: lambda data: m.SizeRequest(data["size"].upper())})
    assert handlers.reply(m.wire(m.HealthRequest())) == m.Health(True)
    assert handlers.reply(m.wire(m.BudgetRequest(8, "skipped"))) == m.BudgetSet(8, "skipped")
    assert handlers.reply(m.wire(m.SizeRequest("small"))) == m.SizeSet("SMALL") and seen == [m.SizeRequest("SMALL")]
    assert handlers.reply(m.wire(m.ExitRequest())) is None and handlers.reply({"op": "nonsense"}) is None
    with pytest.raises(m.ProtocolError, match="share_bytes"):
        handlers.reply({"op": "budget", "share_bytes": "8"})
