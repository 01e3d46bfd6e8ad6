"""harness.core.config: the config file and the flags over it."""
from __future__ import annotations

import pytest

from harness.core.config import load_config
from harness.core.errors import InputError, UsageError


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
