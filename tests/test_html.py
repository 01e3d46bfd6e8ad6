"""The HTML leaderboard: DOM checks over a realistic run, escaping of hostile record text, missing fields, and a
render in headless Chromium when one is installed."""
from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from harness.results.html import write_run_page, write_site
from harness.results.records import Record, as_records

XSS = "<script>alert(1)</script>"
RUN_A, RUN_B = "20250101-090000-aaaa", "20250102-100000-bbbb"


def record(problem: str, candidate: str, status: str = "ok", speedup: float | None = None, ci=None, **extra) -> dict:
    r = {"schema_version": 2, "problem": problem, "solution": f"{problem}/{candidate}", "status": status,
         "correct": status == "ok", "flags": [], "error": None, "speedup": speedup, "speedup_ci": ci,
         "speedup_vs_compile": None, "speedup_vs_compile_ci": None, "device": "cuda",
         "gpu": {"index": 0, "name": "NVIDIA H200"}, "timing": None, "performance": None}
    r.update(extra)
    return r


def perf(floor_ms: float, cand_ms: float, bw: float, flops: float) -> dict:
    return {"timing": {"candidate": {"median_ms": cand_ms}, "reference": {"median_ms": cand_ms * 2}},
            "performance": {"floor_ms": floor_ms, "achieved_gbps": 3000.0, "achieved_tflops": 1.0,
                            "pct_of_peak_bandwidth": bw, "pct_of_peak_flops": flops}}


def run_records(scale: float = 1.0) -> list[Record]:
    return as_records(run_json(scale))


def run_json(scale: float = 1.0) -> list[dict]:
    gelu, mm, sm, ln = "level1/019_gelu", "level1/001_matmul", "level1/023_softmax", "level1/040_layernorm"
    return [
        record(gelu, "cuda_gelu_float4", speedup=2.41 * scale, ci=[2.38, 2.45], speedup_vs_compile=1.31,
               speedup_vs_compile_ci=[1.28, 1.33], **perf(0.010, 0.012, 83.0, 2.1)),
        record(gelu, "triton_gelu", speedup=1.52 * scale, ci=[1.49, 1.55], **perf(0.010, 0.019, 52.0, 1.3)),
        record(gelu, "naive_gelu", speedup=0.71, ci=[0.69, 0.73], flags=["noisy"], **perf(0.010, 0.041, 24.0, 0.6)),
        record(mm, "cublas_wrapper", "invalid", speedup=9.8, ci=[9.1, 10.2], flags=["reduced_precision", "cached"],
               error="outputs match only at reduced precision"),
        record(mm, "tiled_mm", speedup=0.93 * scale, ci=[0.91, 0.95], **perf(0.20, 0.61, 11.0, 33.0)),
        record(sm, "online_softmax", "incorrect", error=f"max abs err 3.2e-01 {XSS}"),
        record(sm, "warp_softmax", "compile_error", error="nvcc: error: identifier 'x' is undefined " * 6),
        {"schema_version": 1, "problem": ln, "solution": f"{ln}/welford_ln", "status": "ok", "correct": True,
         "speedup": 1.17, "flags": [], "error": None, "device": "cuda"},   # schema 1: no CI, no timing, no gpu
        record(ln, "two_pass_ln", "runtime_error", error="CUDA error: an illegal memory access was encountered"),
    ]


def run_meta(run_id: str) -> dict:
    stamp = f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T{run_id[9:11]}:{run_id[11:13]}:{run_id[13:15]}+00:00"
    return {"run_id": run_id, "started_at": stamp, "device": "cuda", "torch": "2.6.0",
            "gpus": [{"index": 0, "name": "NVIDIA H200"}], "git": {"sha": "0123456789abcdef0123", "dirty": False},
            "seed": {"base": 1234, "fixed": True}}


class Dom(HTMLParser):
    """The few things the tests look at: tables' rows as cell texts, element counts, src/href, script bodies."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.counts: dict[str, int] = {}
        self.urls: list[str] = []
        self.script_text: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._in_script = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1
        attrs = dict(attrs)
        self.urls += [v for k, v in attrs.items() if k in ("src", "href") and v]
        if tag == "table":
            self._table = attrs.get("id") or f"table{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_script:
            self.script_text.append(data)


def body_rows(dom: Dom, table: str) -> list[list[str]]:
    return dom.tables[table][1:]                                        # the first row is the header


def rows_by_head(dom: Dom, table: str) -> list[dict[str, str]]:
    """A table's body rows as {heading: cell text}."""
    head, *rows = dom.tables[table]
    return [dict(zip(head, row)) for row in rows]


def check_self_contained(dom: Dom, text: str) -> None:
    assert not [u for u in dom.urls if u.startswith(("http://", "https://", "//"))], dom.urls
    assert dom.counts.get("link", 0) == 0 and "@import" not in text
    assert dom.counts.get("script", 0) == 0 and not dom.script_text     # no script element from record text
    assert XSS not in text


def test_run_and_site_pages(tmp_path):
    records = run_records()
    page = write_run_page(tmp_path / RUN_A, records, run_meta(RUN_A))
    assert page == tmp_path / RUN_A / "index.html"
    text = page.read_text()
    dom = Dom(text)
    check_self_contained(dom, text)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert dom.counts.get("svg", 0) >= 2

    board = {row[0]: row for row in body_rows(dom, "leaderboard")}
    assert sorted(board) == sorted({"level1/019_gelu", "level1/001_matmul", "level1/023_softmax",
                                    "level1/040_layernorm"})                       # one row per problem
    assert len(body_rows(dom, "leaderboard")) == 4
    gelu = board["level1/019_gelu"]
    assert "cuda_gelu_float4" in gelu and "2.41x [2.38, 2.45]" in gelu and "1.31x [1.28, 1.33]" in gelu
    assert "83% BW 2.1% FLOPs" in gelu
    assert "tiled_mm" in board["level1/001_matmul"]                 # the invalid 9.8x never wins
    assert "welford_ln" in board["level1/040_layernorm"] and "1.17x" in board["level1/040_layernorm"]
    softmax = board["level1/023_softmax"]                           # no correct candidate: best attempt's error
    assert "incorrect" in softmax and any(XSS in cell for cell in softmax)   # parser unescapes: text, not a tag
    assert "-" in board["level1/040_layernorm"]                     # missing roofline shows "-"

    pairs = body_rows(dom, "pairs")
    assert len(pairs) == len(records)
    assert max(len(row[-1]) for row in pairs) <= 120                # errors truncated
    assert any("reduced_precision" in row["flags"] for row in rows_by_head(dom, "pairs"))
    assert "NVIDIA H200" in text and "0123456789ab" in text and "1234 (fixed)" in text

    write_run_page(tmp_path / RUN_B, run_records(1.2), run_meta(RUN_B))
    site = write_site(tmp_path, [(RUN_B, run_meta(RUN_B), run_records(1.2)), (RUN_A, run_meta(RUN_A), records)])
    text = site.read_text()
    dom = Dom(text)
    check_self_contained(dom, text)
    assert dom.counts.get("svg", 0) >= 3                            # the history plot besides the run's plots
    runs = body_rows(dom, "runs")
    assert [row[0] for row in runs] == [RUN_B, RUN_A]               # newest first
    assert f"{RUN_A}/index.html" in dom.urls
    best = {row["problem"]: row for row in rows_by_head(dom, "history-best")}
    assert best["level1/019_gelu"][RUN_B].startswith("2.89x") and best["level1/019_gelu"][RUN_A].startswith("2.41x")
    assert best["level1/023_softmax"][RUN_A] == best["level1/023_softmax"][RUN_B] == "-"
    assert dom.tables["history-best"][0] == ["problem", RUN_B, RUN_A]   # newest first, headed by run id


def test_site_leaderboard_is_each_pairs_newest_record_across_runs(tmp_path):
    """Runs that each cover part of the suite (a level at a time, as on the H200) make one leaderboard: each pair's
    record from the newest run that has it, not the newest run alone."""
    gelu, mm = "level1/019_gelu", "level2/001_matmul"
    older = as_records([record(gelu, "cuda_gelu", speedup=2.0, ci=[1.9, 2.1]),
                        record(mm, "tiled", speedup=1.3, ci=[1.2, 1.4])])
    newer = as_records([record(gelu, "cuda_gelu", speedup=2.5, ci=[2.4, 2.6])])          # level1 only, later
    dom = Dom(write_site(tmp_path, [(RUN_A, run_meta(RUN_A), older), (RUN_B, run_meta(RUN_B), newer)]).read_text())
    board = {row[0]: row for row in body_rows(dom, "leaderboard")}
    assert sorted(board) == [gelu, mm]
    assert "2.50x [2.40, 2.60]" in board[gelu] and "1.30x [1.20, 1.40]" in board[mm]
    assert len(body_rows(dom, "pairs")) == 2


def test_missing_fields_never_crash(tmp_path):
    """Parts missing, null or odd inside (a record's parts read back leniently). A line that does not read as a
    Record at all never reaches a page: the store names it and leaves it out (test_records)."""
    least = {"schema_version": 1, "problem": "p/w", "solution": "p/w/c", "status": "ok", "correct": True,
             "flags": [], "error": None, "speedup": None, "device": "cuda"}
    hostile = as_records([
        least,
        {**least, "problem": "p/x", "solution": "p/x/c", "speedup": float("nan"), "timing": {"candidate": None},
         "performance": {"floor_ms": None}, "gpu": {"index": None, "name": ["?"]}},
        {**least, "schema_version": 2, "problem": "p/y", "solution": "p/y/c", "speedup": 1.5, "speedup_ci": None,
         "performance": {"floor_ms": 0.1, "pct_of_peak_bandwidth": "x"}, "timing": {"candidate": {"median_ms": 0.2}}},
        {**least, "problem": "p/z", "solution": "p/z/c", "status": "incorrect", "correct": False, "error": XSS,
         "sizes": [{"name": None}], "flag_details": {"noisy": 3}}])
    assert Dom(write_run_page(tmp_path / "run", hostile, {}).read_text()).tables["leaderboard"]
    empty = write_run_page(tmp_path / "empty-run", [], {}).read_text()
    assert "This run has no records." in empty and "<h2>" not in empty              # no empty section
    cpu = as_records({**r, "device": "cpu", "gpu": None, "performance": None} for r in run_json())
    text = write_run_page(tmp_path / "cpu", cpu, {"device": "cpu"}).read_text()
    assert "No record has performance data" in text and Dom(text).counts.get("svg", 0) == 2
    assert write_site(tmp_path, [("r1", {}, hostile), ("r2", None, None)]).exists()    # type: ignore[list-item]
    assert "No runs yet" in write_site(tmp_path / "empty", []).read_text()


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_renders_in_headless_chromium(tmp_path):
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium / chromium-browser binary on PATH")
    page = write_run_page(tmp_path / RUN_A, run_records(), run_meta(RUN_A))
    shot = tmp_path / "shot.png"
    common = [binary, "--headless", "--disable-gpu", "--no-sandbox", "--window-size=1400,2000",
              f"--user-data-dir={tmp_path / 'profile'}"]
    subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
    dom_text = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120,
                              check=True).stdout
    dom = Dom(dom_text)
    assert len(body_rows(dom, "leaderboard")) == 4
    assert dom.counts.get("svg", 0) >= 2 and dom.counts.get("script", 0) == 0
    assert shot.exists() and shot.stat().st_size > 50_000
