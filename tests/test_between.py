"""The between-process term (harness.run.between): a one-process-pair CI widened by the bias calibrate measured
between process pairs on this machine, or by a default before that; the record says which."""
from __future__ import annotations

import json
import math

import pytest

from conftest import FIXTURES, run_cli, run_dirs, verdict, write_config
from harness.run import between
from harness.run.paired import Estimate

TREE = FIXTURES / "tree"


def test_widen_adds_the_term_on_the_log_scale():
    est = Estimate(1.0, 0.99, 1.01, 20)
    wide = between.widen(est, between.Term(0.005, "default", "default"))
    half = math.log(1.01)
    assert math.isclose(math.log(wide.hi), math.sqrt(half ** 2 + (1.96 * 0.005) ** 2), rel_tol=1e-9)
    assert wide.lo < est.lo and wide.hi > est.hi and wide.value == est.value and wide.rounds == 20
    assert between.widen(est, None) is est
    assert between.widen(est, between.Term(0.0, "default", "default")) is est


def test_the_needed_sd_makes_the_readings_cover_one():
    inside = between.ProcessReading("p", "cold", 1.001, 0.995, 1.007)         # holds 1.0 already
    outside = between.ProcessReading("p", "cold", 1.02, 1.01, 1.03)           # misses it by ~1%
    assert between._need(inside) == 0.0
    need = between._need(outside)
    widened = between.widen(Estimate(1.02, 1.01, 1.03, 10), between.Term(need, "x", "mode"))
    assert math.isclose(widened.lo, 1.0, rel_tol=1e-9)                          # exactly reaches 1.0
    readings = [inside] * 39 + [outside]
    assert between.needed_sd(readings, coverage=0.975) == 0.0                   # 39 of 40 cover: enough
    assert between.needed_sd(readings, coverage=1.0) == need
    assert between.needed_sd([]) == 0.0


def test_terms_come_from_the_cache_by_machine_key_else_the_default(tmp_path):
    readings = [between.ProcessReading("level1/a", "cold", s, s * 0.998, s * 1.002) for s in (1.004, 0.997, 1.0)]
    readings += [between.ProcessReading("level1/b", "graph", s, s * 0.99, s * 1.01) for s in (1.03, 0.98, 1.0)]
    entry = between.derive(readings, "run-1", "gpu X | driver 1 | torch 2", "2026-11-25")
    between.save(tmp_path, "gpu X | driver 1 | torch 2", entry)
    between.save(tmp_path, "another machine", {"modes": {}})                     # kept beside it
    kept = json.loads((tmp_path / between.FILE).read_text())
    assert set(kept) == {"gpu X | driver 1 | torch 2", "another machine"}

    terms = between.load(tmp_path, "gpu X | driver 1 | torch 2")
    own = terms.for_pair("level1/a", "cold")
    assert own.scope == "problem" and own.source == "calibrate run-1" and own.rel_sd > 0
    assert terms.for_pair("level1/new", "graph").scope == "mode"                # no problem entry: the mode's
    assert terms.for_pair("level1/new", "cold").rel_sd >= between.DEFAULT_REL_SD["cold"]   # 3 readings: not below
    assert terms.for_pair("level1/a", "graph").scope == "mode"                  # calibrated in another mode
    fresh = between.load(tmp_path, "a machine never calibrated")
    assert fresh.for_pair("level1/a", "cold") == between.Term(between.DEFAULT_REL_SD["cold"], "default", "default")
    (tmp_path / between.FILE).write_text("{not json")
    assert between.load(tmp_path, "gpu X | driver 1 | torch 2").calibrated is None


def test_calibrate_keeps_the_term_and_a_default_run_widens_by_it(tmp_path):
    """calibrate --processes 2 records each process pair's estimate and keeps the term; a default run then widens
    its CI by it; a calibrated machine's calibrate runs one pair. (The --processes 2 record's checks were
    test_pipeline_cpu's, on a calibrate of its own over the same problem.)"""
    config = write_config(tmp_path, TREE, cache_dir=tmp_path / "cache")    # its own: the term is per cache
    first = run_cli("calibrate", "--config", str(config), "--problem", "001_linear_relu", "--processes", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "between-process term for cpu |" in first.stderr, first.stderr[-1000:]
    cache = json.loads((tmp_path / "cache" / between.FILE).read_text())
    (key, entry), = cache.items()
    assert entry["problems"]["level1/001_linear_relu"]["readings"] == 2 and "host" in entry["modes"]
    # --processes 2: the pair measured whole twice (a fresh reference and candidate worker each time); the record
    # keeps both estimates and the geometric mean of them, with a CI over the two
    (run_dir,) = run_dirs(tmp_path)
    (record,) = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert verdict(record) == "ok", record["error"]
    each = record["timing"]["processes"]
    assert len(each) == 2 and all(p["speedup"] > 0 for p in each)
    assert record["speedup"] == pytest.approx(math.sqrt(each[0]["speedup"] * each[1]["speedup"]))
    assert record["speedup_ci"][0] < record["speedup"] < record["speedup_ci"][1]
    assert record["timing"]["rounds"] == sum(p["rounds"] for p in each)
    assert each[0]["speedup"] != each[1]["speedup"]         # separate measurements, not one copied

    # a plain-PyTorch candidate for the same problem (tests/fixtures/exploits' honest control): nothing to compile
    # in this test's own cache (correct_cpp's C++ build was most of its time)
    run = run_cli("--config", str(config), "--problem", "001_linear_relu", "--candidate", "control_plain",
                  "--solutions-dir", str(FIXTURES / "exploits" / "solutions"), "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    record = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")][0]
    timing = record["timing"]
    assert timing["between_process"]["source"] == f"calibrate {entry['run_id']}", timing["between_process"]
    lo, hi = record["speedup_ci"]
    rlo, rhi = timing["speedup_ci_rounds"]
    assert lo <= rlo and hi >= rhi
    meta = json.loads((run_dirs(tmp_path)[-1] / "run.json").read_text())
    assert meta["between_process"]["key"] == key and meta["between_process"]["calibrated"]

    again = run_cli("calibrate", "--config", str(config), "--problem", "001_linear_relu")   # calibrated: 1 pair
    assert again.returncode == 0, again.stderr[-2000:]
    meta = json.loads((run_dirs(tmp_path)[-1] / "run.json").read_text())
    assert meta["config"]["timing"]["processes"] == 1
    assert "not measured (one process pair" in again.stderr
