"""The worker's in-process checks (harness.worker.integrity): what candidate code replaced is named, and inputs
are drawn with torch as it was before candidate code ran."""
from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from harness.worker import integrity


def test_clean_torch_undoes_replacements_for_its_duration_only(monkeypatch):
    integrity.snapshot()
    original_randn, original_linear = torch.randn, F.linear
    fake = lambda *a, **k: "patched"                       # noqa: E731
    monkeypatch.setattr(torch, "randn", fake)
    monkeypatch.setattr(F, "linear", fake)
    monkeypatch.setattr(torch.Tensor, "clone", fake, raising=False)     # added on the Python class
    monkeypatch.setattr(torch, "brand_new_name", fake, raising=False)
    with integrity.clean_torch():
        assert torch.randn is original_randn and F.linear is original_linear
        assert "clone" not in vars(torch.Tensor)
        assert torch.brand_new_name is fake        # a name torch did not have cannot be what get_inputs calls
        assert isinstance(torch.randn(2).clone(), torch.Tensor)
    assert torch.randn is fake and F.linear is fake and vars(torch.Tensor)["clone"] is fake
    assert torch.brand_new_name is fake


def test_clean_torch_changes_nothing_when_nothing_was_replaced():
    integrity.snapshot()
    before = dict(vars(torch))
    with integrity.clean_torch():
        pass
    assert dict(vars(torch)) == before


def test_clean_torch_walks_torch_only_when_the_replacements_change(monkeypatch):
    """A candidate that replaced a name pays one dict comparison a sample, as one that did not (a walk over torch's
    names each sample read as hidden time on the GPU): the names found are reused while the namespace stays as it
    was, and found again when it changes; a value whose == raises changes nothing of this."""
    integrity.snapshot()
    original_relu, original_sigmoid = torch.relu, torch.sigmoid
    monkeypatch.setattr(torch, "relu", lambda *a, **k: "patched")
    with integrity.clean_torch():
        assert torch.relu is original_relu
    first = integrity._last_seen[0]
    assert first[1] == ["relu"] and torch.relu is not original_relu
    for _ in range(3):
        with integrity.clean_torch():
            assert torch.relu is original_relu
    assert integrity._last_seen[0] is first                        # not walked again

    class Odd:
        def __eq__(self, other):
            raise RuntimeError("no")
        __hash__ = object.__hash__
    monkeypatch.setattr(torch, "sigmoid", Odd())
    with integrity.clean_torch():
        assert torch.relu is original_relu and torch.sigmoid is original_sigmoid
    assert sorted(integrity._last_seen[0][1]) == ["relu", "sigmoid"]
    assert isinstance(torch.sigmoid, Odd)


def test_clean_torch_sees_a_replacement_that_claims_to_equal_everything(monkeypatch):
    """A candidate's object whose == answers True to anything is still not the original: torch.randn is put back
    while inputs are drawn, the first time and after the names found are reused."""
    integrity.snapshot()
    original = torch.randn

    class Equal:
        def __eq__(self, other):
            return True
        __hash__ = object.__hash__
    monkeypatch.setattr(torch, "randn", Equal())
    for _ in range(2):
        with integrity.clean_torch():
            assert torch.randn is original
    assert isinstance(torch.randn, Equal)


def test_a_wrapped_problem_function_is_named():
    problem = types.ModuleType("kb_problem_test")
    problem.get_inputs = lambda: [torch.zeros(1)]
    integrity.snapshot()
    integrity.watch_module(problem)
    assert integrity.changed() == []
    problem.get_inputs = lambda: [torch.ones(1)]
    assert integrity.changed() == ["kb_problem_test.get_inputs"]
