"""The page a leaderboard user wants, one test per behaviour (issue 31): controls never rank, flags rank as
harness.core.flags says, each figure from the newest record that has it with its run named, no false drop in a problem's
best, history newest first under unique run-id headers with CIs, colours by the CI's verdict against 1.0, skipped
shown as skipped, no empty section, a site header that describes the runs, and (in headless Chromium, when one is
installed) main tables that fit a 1280 and an 800 px window."""
from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.core import flags as flag_table
from harness.results.html import clip, write_run_page, write_site
from harness.results.records import Record
from harness.results.standings import Run, best_history
from test_html import XSS, Dom, body_rows, record, rows_by_head, run_meta, run_records

P1, P2 = "level1/001_relu", "level1/002_softmax"
R1, R2, R3, R4 = "20250101-090000-aaaa", "20250101-090030-bbbb", "20250102-100000-cccc", "20250103-110000-dddd"


def meta(run_id: str, calibrate: bool = False, modes: list[str] | None = None) -> dict:
    m = run_meta(run_id)
    m["argv"] = ["run_eval.py", *(["calibrate"] if calibrate else []), "--device", "cuda"]
    m["config"] = {"timing": {"compile_modes": ["default"] if modes is None else modes}}
    return m


def rec(problem: str, candidate: str, status: str = "ok", **fields) -> Record:
    """test_html's record, typed as the store gives it."""
    return Record.of(record(problem, candidate, status, **fields))


def ok(problem: str, candidate: str, speedup: float, run_id: str, **extra) -> Record:
    return rec(problem, candidate, speedup=speedup, ci=[speedup * 0.97, speedup * 1.03], run_id=run_id, **extra)


def site(tmp_path: Path, runs: list[tuple[str, dict, list[Record]]]) -> tuple[str, Dom]:
    text = write_site(tmp_path, runs).read_text()
    return text, Dom(text)


def board(dom: Dom) -> dict[str, dict[str, str]]:
    return {row["problem"]: row for row in rows_by_head(dom, "leaderboard")}


class CellClasses(HTMLParser):
    """Each table's body cells as (class, text)."""

    def __init__(self, text: str):
        super().__init__()
        self.cells: dict[str, list[tuple[str, str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._cls = ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = attrs.get("id")
            self.cells[self._table] = []
        elif tag == "td" and self._table:
            self._cell, self._cls = [], attrs.get("class") or ""

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells[self._table].append((self._cls, "".join(self._cell).strip()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_controls_never_rank(tmp_path):
    """aa_* and control_* candidates and every pair of a calibrate run (its aa_reference) show, marked, but are
    never a problem's best nor counted in the cards."""
    recs = [ok(P1, "aa_same_ops", 3.0, R1), ok(P1, "control_copy", 5.0, R1), ok(P1, "fused", 1.2, R1),
            ok(P2, "aa_same_ops", 1.01, R1)]
    dom = Dom(write_run_page(tmp_path / R1, recs, meta(R1)).read_text())
    rows = board(dom)
    assert list(rows) == [P1] and rows[P1]["best candidate"] == "fused"       # P2 has a control only
    text = (tmp_path / R1 / "index.html").read_text()
    assert '<div class="v">1.20x</div><div class="k">geomean speedup (ranked)</div>' in text
    assert '<div class="v">3</div><div class="k">controls (not counted)</div>' in text
    assert {r["candidate"] for r in rows_by_head(dom, "controls")} == {"aa_same_ops control", "control_copy control"}

    calib = [rec(P1, "aa_reference", speedup=1.0, ci=[0.99, 1.01], run_id=R2)]
    page = write_run_page(tmp_path / R2, calib, meta(R2, calibrate=True)).read_text()
    assert "Every pair here is a control" in page and "leaderboard" not in Dom(page).tables
    # a calibrate run's pair is a control whatever its name
    odd = [rec(P2, "renamed", speedup=9.0, ci=[8.9, 9.1], run_id=R3)]
    _, sdom = site(tmp_path, [(R1, meta(R1), recs), (R2, meta(R2, True), calib), (R3, meta(R3, True), odd)])
    assert board(sdom)[P1]["best candidate"] == "fused" and P2 not in board(sdom)
    assert {r["candidate"] for r in rows_by_head(sdom, "controls")} >= {"aa_reference control", "renamed control"}


def test_flagged_pairs_rank_as_the_flag_table_says(tmp_path):
    unranked = next(f.name for f in flag_table.FLAGS if not f.invalidates and not f.ranked)
    warning = next(f.name for f in flag_table.FLAGS if not f.invalidates and f.ranked)
    recs = [ok(P1, "flagged_off", 4.0, R1, flags=[unranked]), ok(P1, "warned", 1.5, R1, flags=[warning]),
            ok(P2, "only_flagged", 2.0, R1, flags=[unranked])]
    rows = board(Dom(write_run_page(tmp_path / R1, recs, meta(R1)).read_text()))
    assert rows[P1]["best candidate"] == "warned" and rows[P1]["vs eager [95% CI]"].startswith("1.50x")
    assert rows[P2]["best candidate"].startswith("none ranked") and rows[P2]["vs eager [95% CI]"] == "-"
    assert rows[P2]["note"] == f"not ranked: flagged {unranked}"


def test_each_metric_from_the_newest_record_that_has_it_with_its_run(tmp_path):
    """A run with compile baselines off (or no roofline) does not blank what an earlier run measured: the figure
    is kept, its run named; a newer failing record is not papered over; a skipped one does not hide a reading."""
    old = [ok(P1, "fused", 2.0, R1, speedup_vs_compile=1.4, speedup_vs_compile_ci=[1.3, 1.5],
              performance={"pct_of_peak_bandwidth": 71.0, "pct_of_peak_flops": 3.0}),
           ok(P2, "tiled", 1.5, R1, speedup_vs_compile=1.1, speedup_vs_compile_ci=[1.0, 1.2]),
           ok(P2, "cuda_only", 1.8, R1)]
    new = [ok(P1, "fused", 2.2, R2),
           rec(P2, "tiled", "incorrect", error="max abs err 1", run_id=R2),
           rec(P2, "cuda_only", "skipped", error="needs CUDA", run_id=R2)]
    _, dom = site(tmp_path, [(R1, meta(R1), old), (R2, meta(R2, modes=[]), new)])
    row = board(dom)[P1]
    assert row["run"] == R2 and row["vs eager [95% CI]"] == "2.20x [2.13, 2.27]"
    assert row["vs torch.compile [95% CI]"] == f"1.40x [1.30, 1.50] run {R1}"
    assert row["% peak"] == f"71% BW 3.0% FLOPs run {R1}"
    pairs = {r["candidate"]: r for r in rows_by_head(dom, "pairs")}
    assert pairs["tiled"]["status"] == "incorrect" and pairs["tiled"]["vs torch.compile [95% CI]"] == "-"
    assert pairs["cuda_only"]["status"] == "ok" and pairs["cuda_only"]["run"] == R1   # the skip hides nothing
    run_page = Dom(write_run_page(tmp_path / R2, new, meta(R2, modes=[])).read_text())
    assert "vs torch.compile [95% CI]" not in run_page.tables["leaderboard"][0]        # no all-empty column
    assert "torch.compile baselines were off" in (tmp_path / R2 / "index.html").read_text()


def test_best_over_history_never_drops_for_a_run_that_did_not_measure_it(tmp_path):
    runs = [(R1, meta(R1), [ok(P1, "fast", 2.0, R1), ok(P1, "slow", 1.1, R1)]),
            (R2, meta(R2), [ok(P1, "new_try", 0.13, R2)]),                       # one new candidate only
            (R3, meta(R3, calibrate=True), [ok(P1, "aa_reference", 1.0, R3)]),
            (R4, meta(R4), [ok(P1, "fast", 1.6, R4)])]                            # remeasured: a real change
    points = best_history([Run.of(*r) for r in runs])[P1]
    assert [(b.run_id, b.pair.candidate, b.pair.speedup, b.measured) for b in points] == [
        (R1, "fast", 2.0, True), (R2, "fast", 2.0, False), (R3, "fast", 2.0, False), (R4, "fast", 1.6, True)]
    _, dom = site(tmp_path, runs)
    row = rows_by_head(dom, "history-best")[0]
    assert row[R2] == "2.00x [1.94, 2.06] fast (kept)" and row[R4] == "1.60x [1.55, 1.65] fast"


def test_history_is_per_candidate_newest_first_under_unique_run_ids(tmp_path):
    """Two runs in the same minute get two columns, each headed by its run id; each cell has its CI."""
    runs = [(R1, meta(R1), [ok(P1, "fused", 1.5, R1), ok(P1, "aa_same_ops", 1.0, R1)]),
            (R2, meta(R2), [ok(P1, "fused", 1.6, R2)])]
    _, dom = site(tmp_path, runs)
    head, *rows = dom.tables["history"]
    assert head == ["problem", "candidate", R2, R1]
    fused = next(r for r in rows_by_head(dom, "history") if r["candidate"] == "fused")
    assert fused[R2] == "1.60x [1.55, 1.65]" and fused[R1] == "1.50x [1.46, 1.54]"
    assert [r["candidate"] for r in rows_by_head(dom, "history")] == ["fused", "aa_same_ops control"]
    assert [row[0] for row in body_rows(dom, "runs")] == [R2, R1]


@pytest.mark.parametrize("speedup, ci, verdict", [
    (0.98, [0.90, 1.02], "same"), (1.01, [0.97, 1.04], "same"), (1.20, [1.10, 1.30], "faster"),
    (0.80, [0.70, 0.90], "slower"), (1.30, None, "")])
def test_colour_is_the_verdict_of_the_ci_against_one(tmp_path, speedup, ci, verdict):
    text = write_run_page(tmp_path / R1, [rec(P1, "k", speedup=speedup, ci=ci)], meta(R1)).read_text()
    cells = CellClasses(text).cells["leaderboard"]
    cls = next(c for c, t in cells if t.startswith(f"{speedup:.2f}x"))
    assert set(cls.split()) - {"num"} == ({verdict} if verdict else set())


def test_skipped_is_shown_as_skipped(tmp_path):
    recs = [rec(P1, "cuda_kernel", "skipped", error="holds CUDA code; skipped on the CPU")]
    row = board(Dom(write_run_page(tmp_path / R1, recs, meta(R1)).read_text()))[P1]
    assert row["best candidate"] == "skipped (cuda_kernel)" and row["status"] == "skipped"
    assert "none correct" not in row["best candidate"] and row["note"].startswith("holds CUDA code")


def sections(text: str) -> dict[str, str]:
    """Each <h2> heading and what follows it up to the next one."""
    parts = re.split(r"<h2>(.*?)</h2>", text.split("<main>", 1)[1])
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("calibrate_only", [False, True])
def test_no_empty_section(tmp_path, calibrate_only):
    runs = [(R3, meta(R3, calibrate=True), [ok(P1, "aa_reference", 1.0, R3)])]
    if not calibrate_only:
        runs.append((R1, meta(R1), run_records()))
    text, _ = site(tmp_path, runs)
    for title, body in sections(text).items():
        assert re.sub(r"<[^>]+>|\s", "", body.split("<h2>")[0]), f"section {title!r} is empty"
    assert "Summary" not in sections(text) and "Standings" not in text


def test_site_header_describes_the_runs_not_the_newest(tmp_path):
    runs = [(R1, meta(R1), [ok(P1, "fused", 1.5, R1)]), (R3, meta(R3, calibrate=True), []),
            (R2, {**meta(R2), "seed": {"base": 987654, "fixed": True}}, [ok(P2, "aa_x", 1.0, R2)])]
    text, _ = site(tmp_path, runs)
    header = re.search(r'<div class="meta">(.*?)</div>', text).group(1)
    plain = re.sub(r"<[^>]+>", "", header)
    assert "runs 3 (1 calibrate)" in plain and "from 2025-01-01 09:00:00" in plain and "to 2025-01-02 10:00:00" in plain
    assert "problems 2" in plain and "candidates 1 (+1 controls)" in plain
    assert R3 not in header and "987654" not in header and "seed" not in header


def test_errors_clip_at_a_word_and_an_all_empty_error_column_is_left_out(tmp_path):
    long = "nvcc: error: identifier 'x' is undefined " * 6
    short = clip(long)
    assert short.endswith("\u2026") and len(short) <= 120
    assert long.startswith(short[:-1]) and long[len(short) - 1] == " "        # cut between two words
    dom = Dom(write_run_page(tmp_path / R1, [ok(P1, "a", 1.5, R1), ok(P1, "b", 1.2, R1)], meta(R1)).read_text())
    assert "error" not in dom.tables["pairs"][0] and "note" not in dom.tables["leaderboard"][0]


# ---------------------------------------------------------------- headless Chromium

MAIN_TABLES = ("leaderboard", "pairs")
MEASURE = """<script>(function () {
  var out = [];
  ["leaderboard", "pairs", "controls", "runs"].forEach(function (id) {
    var t = document.getElementById(id);
    if (t) out.push(id + " " + t.parentElement.scrollWidth + " " + t.parentElement.clientWidth);
  });
  var d = document.documentElement;
  out.push("document " + d.scrollWidth + " " + d.clientWidth);
  var pre = document.createElement("pre");
  pre.id = "overflow-report";
  pre.textContent = out.join("\\n");
  document.body.appendChild(pre);
})();</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def render(binary: str, page: Path, width: int, out: Path) -> dict[str, tuple[int, int]]:
    """Screenshot `page` at `width` px into `out`, then load a copy with a measuring script appended (the pages
    themselves carry no script) and read back each table box's scrollWidth and clientWidth."""
    common = [binary, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
              f"--window-size={width},1600", f"--user-data-dir={out.parent / 'profile'}"]
    subprocess.run([*common, f"--screenshot={out}", page.as_uri()], capture_output=True, timeout=120, check=True)
    probe = page.with_name(f"probe-{width}.html")
    probe.write_text(page.read_text().replace("</main></body>", f"</main>{MEASURE}</body>"))
    dumped = subprocess.run([*common, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120,
                            check=True).stdout
    report = re.search(r'<pre id="overflow-report">(.*?)</pre>', dumped, re.S)
    assert report, dumped[-2000:]
    sizes = {}
    for line in report.group(1).splitlines():
        name, scroll, client = line.split()
        sizes[name] = (int(scroll), int(client))
    return sizes


def pages(tmp_path: Path) -> dict[str, Path]:
    """A run page and a site page with the awkward cases: long errors, flags, controls, a calibrate run, compile
    baselines off in the newest run."""
    recs = run_records() + [ok("level1/019_gelu", "aa_same_ops", 1.0, R1),
                            rec("level1/023_softmax", "cuda_only", "skipped", error="holds CUDA code " * 9)]
    run_page = write_run_page(tmp_path / R1, recs, meta(R1))
    runs = [(R1, meta(R1), recs), (R2, meta(R2, calibrate=True), [ok("level1/019_gelu", "aa_reference", 1.0, R2)]),
            (R3, meta(R3, modes=[]), run_records(1.1))]
    return {"run": run_page, "site": write_site(tmp_path, runs)}


@pytest.mark.parametrize("width", [1280, 800])
def test_main_tables_fit_the_window_in_chromium(tmp_path, width):
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium / chromium-browser binary on PATH")
    for name, page in pages(tmp_path).items():
        shot = tmp_path / f"{name}-{width}.png"
        sizes = render(binary, page, width, shot)
        assert shot.exists() and shot.stat().st_size > 20_000
        assert 0.8 * width <= sizes["document"][1] <= width, sizes              # the window is what was asked
        assert sizes["document"][0] <= sizes["document"][1], (name, sizes)      # the page never scrolls sideways
        for table in MAIN_TABLES:
            scroll, client = sizes[table]
            assert scroll <= client, f"{name} page at {width} px: #{table} overflows ({scroll} > {client})"
    assert XSS not in pages(tmp_path)["run"].read_text()
