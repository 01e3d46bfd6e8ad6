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


def test_a_wrapped_problem_function_is_named():
    problem = types.ModuleType("kb_problem_test")
    problem.get_inputs = lambda: [torch.zeros(1)]
    integrity.snapshot()
    integrity.watch_module(problem)
    assert integrity.changed() == []
    problem.get_inputs = lambda: [torch.ones(1)]
    assert integrity.changed() == ["kb_problem_test.get_inputs"]
