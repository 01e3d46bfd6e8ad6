"""HTML leaderboard: a self-contained page per run (`write_run_page`) and a site page across runs (`write_site`).

Pages open from disk with no network and no script: CSS is inline and plots are inline SVG drawn by matplotlib
through `matplotlib.figure.Figure` (no pyplot, so no GUI backend and no global figure state). Every text that comes
from a record is HTML-escaped (records come from untrusted candidates), and any field may be missing or null (schema
1 records have no CI, CPU records have no `performance`). Records are `Record`s, as RunStore.records() gives them
(a line that does not read as one is named there and left out). What is shown is worked out in
harness/results/standings.py (controls, standings, each problem's best over the runs); this module only lays it out:
tables that fit their column down to an 800 px window (CIs on a line of their own, long names broken at / _ -, a
column left out when every cell of it is empty), speedups coloured by their verdict against 1.0, history newest
first.
"""
from __future__ import annotations

import html
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, TypeVar

from harness.core import flags as flag_table
from harness.results.records import Record
from harness.core.untrusted import write_text
from harness.results.report import tally
from harness.results.standings import (BestPoint, Pair, Run, SizeRow, best_history, best_per_problem, compile_modes,
                                       interval, is_calibrate_run, pairs_of, standings, verdict)

__all__ = ["write_run_page", "write_site", "Pair", "pairs_of", "best_per_problem", "standings"]

ERROR_LIMIT = 120

CSS = """
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--zebra:#f6f8fa;--good:#1a7f37;--bad:#cf222e;--warn:#9a6700}
*{box-sizing:border-box}body{margin:0;color:var(--fg);font:14px/1.45 system-ui,"Segoe UI",Roboto,sans-serif}
main{max-width:1240px;margin:0 auto;padding:24px 28px 64px}h1{font-size:24px;margin:0 0 6px}.muted{color:var(--muted)}
h2{font-size:17px;margin:32px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin:20px 0 8px}
.meta{color:var(--muted);display:flex;flex-wrap:wrap;gap:4px 18px;margin-bottom:18px}.meta b{color:var(--fg)}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid var(--line);border-radius:8px;padding:8px 14px}
.card{min-width:110px}.card .v{font-size:20px;font-weight:600}.card .k{color:var(--muted);font-size:12px}
table{border-collapse:collapse;width:100%;font-size:13px}.scroll{overflow-x:auto}
table.narrow{width:auto;max-width:100%}
th{text-align:left;background:#eaeef2;padding:6px 8px;vertical-align:bottom;font-weight:600}
tbody tr:nth-child(even){background:var(--zebra)}td{padding:5px 8px;border-top:1px solid var(--line);vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}td.num{white-space:nowrap}
.ci,.src{display:block;font-size:11px;color:var(--muted);font-weight:400}
.faster{color:var(--good);font-weight:600}.slower{color:var(--bad);font-weight:600}.same{color:var(--fg)}
td.err{color:var(--muted);font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;overflow-wrap:anywhere}
.st{display:inline-block;border-radius:10px;padding:1px 8px;font-size:12px;font-weight:600}
.st{background:#eee;color:#656d76}
.st-ok{background:#dafbe1;color:var(--good)}.st-incorrect{background:#ffebe9;color:var(--bad)}.note{color:var(--muted)}
.st-invalid,.flag{background:#fff8c5;color:var(--warn)}.st-skipped{background:#eef1f4;color:var(--muted)}
.flag,.ctl{display:inline-block;border-radius:4px;padding:0 5px;margin:1px 3px 1px 0;font-size:12px}
.ctl{background:#ddf4ff;color:#0969da}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:16px}.note{font-style:italic}
figure{margin:0;border:1px solid var(--line);border-radius:8px;padding:10px}figure.wide{max-width:900px;margin-top:16px}
figcaption{font-weight:600;margin-bottom:4px}figure svg{width:100%;height:auto;display:block}
.legend{font-size:12px;color:var(--muted);margin:6px 0 0}
@media (max-width:900px){main{padding:16px 12px 48px}td,th{padding:4px 5px}table{font-size:12px}}
"""

T = TypeVar("T")


# ---------------------------------------------------------------- tables

@dataclass(frozen=True)
class Cell:
    """One table cell: inner HTML (already escaped), extra classes, a tooltip."""
    html: str = ""
    cls: str = ""
    title: str = ""


@dataclass(frozen=True)
class Column(Generic[T]):
    """A table column: its heading, what each item shows in it, whether it is numeric (right-aligned), whether it is
    left out when every cell of it is empty (`optional`), a class for its cells."""
    head: str
    cell: Callable[[T], Cell]
    num: bool = False
    optional: bool = False
    cls: str = ""


def _table(columns: list[Column[T]], items: Iterable[T], table_id: str, narrow: bool = False) -> str:
    """A table in a scrolling box (the box scrolls only if a cell cannot shrink: the tables are laid out not to).
    An empty cell of a kept column shows "-" when numeric."""
    items = list(items)
    if not items:
        return ""
    grid = [[col.cell(item) for item in items] for col in columns]
    kept = [(col, cells) for col, cells in zip(columns, grid) if not (col.optional and not any(c.html for c in cells))]
    head = "".join(f'<th class="{"num" if col.num else ""}">{_breakable(col.head)}</th>' for col, _ in kept)
    rows = "".join("<tr>" + "".join(_td(col, cells[i]) for col, cells in kept) + "</tr>" for i in range(len(items)))
    cls = ' class="narrow"' if narrow else ""
    return (f'<div class="scroll"><table id="{table_id}"{cls}><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>")


def _td(col: Column, cell: Cell) -> str:
    classes = " ".join(c for c in ("num" if col.num else "", col.cls, cell.cls) if c)
    title = f' title="{_e(cell.title)}"' if cell.title else ""
    body = cell.html or ("-" if col.num else "")
    return f'<td class="{classes}"{title}>{body}</td>' if classes else f"<td{title}>{body}</td>"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _breakable(text: str) -> str:
    """Escaped text with a line-break opportunity after each / _ - (names and run ids then fit a narrow column)."""
    return re.sub(r"([/_\-])", r"\1<wbr>", _e(text))


def _section(title: str, body: str) -> str:
    """A titled section, or nothing when it has no body (no heading over an empty section)."""
    return f"<h2>{_e(title)}</h2>{body}" if body else ""


# ---------------------------------------------------------------- cells

VERDICT_TITLE = {"faster": "faster: the 95% CI lies entirely above 1.0",
                 "same": "no difference shown: the 95% CI contains 1.0",
                 "slower": "slower: the 95% CI lies entirely below 1.0"}


def speedup_cell(value: float | None, ci: Any, trusted: bool = True, source: str | None = None) -> Cell:
    """"2.41x" with its CI on a line below; coloured by the verdict against 1.0 (faster / same / slower, from the
    CI: 0.98x [0.90, 1.02] is the same, not slower) when trusted; `source` names the run it comes from."""
    if value is None:
        return Cell()
    bounds = interval(ci)
    text = f"{value:.2f}x" + (f' <span class="ci">[{bounds[0]:.2f}, {bounds[1]:.2f}]</span>' if bounds else "")
    if source:
        text += f' <span class="src">run {_breakable(source)}</span>'
    found = verdict(value, ci) if trusted else None
    title = VERDICT_TITLE.get(found or "", "no CI: no verdict" if trusted and bounds is None else "")
    return Cell(text, found or "", title)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%" if value < 10 else f"{value:.0f}%"


def peak_cell(p: Pair, show: bool = True) -> Cell:
    """% of peak bandwidth and FLOPs (the roofline), one per line, with the run they come from when borrowed."""
    if not show or not p.has_perf:
        return Cell()
    text = f'{_pct(p.pct_bandwidth)} BW <span class="ci">{_pct(p.pct_flops)} FLOPs</span>'
    if p.perf_run:
        text += f' <span class="src">run {_breakable(p.perf_run)}</span>'
    return Cell(text)


def status_cell(p: Pair) -> Cell:
    known = p.status if p.status in ("ok", "incorrect", "invalid", "skipped") else "other"
    return Cell(f'<span class="st st-{known}">{_breakable(p.status)}</span>')


def flags_cell(p: Pair) -> Cell:
    return Cell("".join(f'<span class="flag">{_breakable(f)}</span>' for f in p.flags))


def clip(text: str, limit: int = ERROR_LIMIT) -> str:
    """`text` within `limit` characters, cut at a word boundary where there is one in its second half, the cut
    marked with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "\u2026"


def error_cell(error: str) -> Cell:
    """An error, clipped at a word (the whole of it in the cell's tooltip): a long one squeezed into a narrow column
    made a row hundreds of pixels tall (seen on a real H200 run's leaderboard)."""
    return Cell(_e(clip(error)), title=error if len(error) > ERROR_LIMIT else "")


def name_cell(text: str) -> Cell:
    return Cell(_breakable(text))


def candidate_cell(p: Pair) -> Cell:
    badge = ' <span class="ctl" title="a control: never ranked">control</span>' if p.control else ""
    return Cell(_breakable(p.candidate) + badge)


def run_cell(p: Pair) -> Cell:
    return Cell(_breakable(p.run_id)) if p.run_id else Cell()


def best_name(p: Pair) -> Cell:
    """The best candidate's name; a problem without a ranked pair says why, naming its best attempt."""
    if p.ranked:
        return name_cell(p.candidate)
    why = "none ranked" if p.correct else "skipped" if p.skipped else "none correct"
    return Cell(f'<i>{why}</i> <span class="muted">({_breakable(p.candidate)})</span>')


def best_note(p: Pair) -> Cell:
    """What the leaderboard's last cell says: nothing for a ranked pair, why a correct one is not ranked, else the
    best attempt's error (a skipped pair's reason)."""
    if p.ranked:
        return Cell()
    if p.correct:
        return error_cell(f"not ranked: flagged {', '.join(flag_table.unranked(p.flags))}")
    return error_cell(p.error)


# ---------------------------------------------------------------- the sections

def leaderboard_table(pairs: list[Pair], site: bool = False) -> str:
    """Each problem's best ranked candidate (controls never; harness.core.flags decides on flags), or why there is
    none. On the site, the run each figure comes from."""
    columns: list[Column[Pair]] = [
        Column("problem", lambda p: name_cell(p.problem)),
        Column("best candidate", best_name),
        Column("status", status_cell),
        *([Column("run", run_cell)] if site else []),
        Column("vs eager [95% CI]", lambda p: speedup_cell(p.speedup if p.ranked else None, p.speedup_ci), num=True),
        Column("vs torch.compile [95% CI]", lambda p: speedup_cell(p.vs_compile if p.ranked else None,
                                                                   p.vs_compile_ci, source=p.compile_run),
               num=True, optional=True),
        Column("% peak", lambda p: peak_cell(p, p.ranked), num=True, optional=True),
        Column("flags", flags_cell, optional=True),
        Column("note", best_note, optional=True, cls="err"),
    ]
    return _table(columns, best_per_problem(pairs).values(), "leaderboard")


def _missing_notes(pairs: list[Pair], modes: list[str] | None) -> str:
    """Why a leaderboard column is absent: no torch.compile baseline, no roofline figures."""
    notes = []
    if not any(p.vs_compile is not None for p in pairs if p.ranked):
        off = modes == [] and "torch.compile baselines were off (--compile-modes none)"
        notes.append(f"vs torch.compile: not measured ({off or 'no ranked pair has a torch.compile baseline'}).")
    if not any(p.has_perf for p in pairs if p.ranked):
        notes.append("% peak: no roofline figures (GPU runs only).")
    return _note(" ".join(notes)) if notes else ""


def pairs_table(pairs: list[Pair], site: bool = False, table_id: str = "pairs") -> str:
    columns: list[Column[Pair]] = [
        Column("problem", lambda p: name_cell(p.problem)),
        Column("candidate", candidate_cell),
        Column("status", status_cell),
        *([Column("run", run_cell)] if site else []),
        Column("vs eager [95% CI]", lambda p: speedup_cell(p.speedup, p.speedup_ci, p.correct), num=True),
        Column("vs torch.compile [95% CI]",
               lambda p: speedup_cell(p.vs_compile, p.vs_compile_ci, p.correct, p.compile_run),
               num=True, optional=True),
        Column("geomean over sizes", lambda p: speedup_cell(p.sizes_geomean, None, False), num=True, optional=True),
        Column("flags", flags_cell, optional=True),
        Column("error", lambda p: error_cell(p.error), optional=True, cls="err"),
    ]
    return _table(columns, sorted(pairs, key=lambda p: (p.problem, p.control, p.candidate)), table_id)


def sizes_section(pairs: list[Pair], site: bool = False) -> str:
    """The pairs of problems that declare several input sizes, a row per size: what it sets and its inputs' shapes,
    its correctness trials, its speedup where it was timed (timing.sizes), and the pair's geometric mean over its
    timed sizes on the main size's row."""
    rows = [(p, size) for p in sorted(pairs, key=lambda p: (p.problem, p.control, p.candidate)) for size in p.sizes]
    if not rows:
        return ""
    columns: list[Column[tuple[Pair, SizeRow]]] = [
        Column("problem", lambda x: name_cell(x[0].problem)),
        Column("candidate", lambda x: candidate_cell(x[0])),
        *([Column("run", lambda x: run_cell(x[0]))] if site else []),
        Column("size", lambda x: Cell(_e(x[1].name) + (' <span class="note">(main)</span>' if x[1].main else ""))),
        Column("shape", lambda x: Cell(_breakable(x[1].shape)), cls="err"),
        Column("trials passed", _size_trials, num=True),
        Column("vs eager [95% CI]", lambda x: speedup_cell(x[1].speedup, x[1].speedup_ci, x[0].correct), num=True),
        Column("geomean over sizes", lambda x: speedup_cell(x[0].sizes_geomean, None, False) if x[1].main
               else Cell(), num=True, optional=True),
        Column("note", lambda x: error_cell(x[1].error), optional=True, cls="err"),
    ]
    text = ("Correctness runs at every size; a candidate wrong at any of them is incorrect. Speedups are shown for "
            "the sizes that were timed (timing.sizes: main, or all).")
    return _section("Input sizes", _note(text) + _table(columns, rows, "sizes"))


def _size_trials(x: tuple[Pair, SizeRow]) -> Cell:
    size = x[1]
    if size.trials is None or size.trials_passed is None:
        return Cell()
    return Cell(f"{size.trials_passed}/{size.trials}", "" if size.correct else "slower")


def controls_section(pairs: list[Pair], site: bool = False) -> str:
    """The controls (A/A candidates, calibrate runs): a good harness reads 1.0 with 1.0 inside the CI."""
    controls = [p for p in pairs if p.control]
    if not controls:
        return ""
    inside = sum(verdict(p.speedup, p.speedup_ci) == "same" for p in controls if p.correct)
    text = (f"Controls run the reference's own operations: never ranked; a sound measurement reads 1.0 with 1.0 "
            f"inside the CI ({inside} of {len(controls)} do).")
    return _section("Controls (never ranked)", _note(text) + pairs_table(controls, site, "controls"))


def summary_cards(pairs: list[Pair]) -> str:
    agg = tally(p.outcome for p in pairs if not p.control)
    geo = agg["geomean_speedup"]
    cards = [("pairs", str(agg["pairs"])), ("correct", f"{agg['correct']} ({agg['correctness_rate']:.0%})"),
             ("ranked", str(agg["ranked"])), ("geomean speedup (ranked)", "-" if geo is None else f"{geo:.2f}x")]
    cards += [(f"fast_{float(p):g}", f"{v:.0%}") for p, v in agg["fast_p"].items()]
    controls = sum(p.control for p in pairs)
    if controls:
        cards.append(("controls (not counted)", str(controls)))
    statuses = ", ".join(f"{k} {v}" for k, v in agg["by_status"].items())
    body = "".join(f'<div class="card"><div class="v">{_e(v)}</div><div class="k">{_e(k)}</div></div>'
                   for k, v in cards)
    return f'<div class="cards">{body}</div><p class="note">statuses (controls aside): {_e(statuses or "-")}</p>'


def _note(text: str) -> str:
    return f'<p class="note">{_e(text)}</p>'


def _figure(caption: str, svg_or_note: str, cls: str = "", legend: str = "") -> str:
    extra = f'<p class="legend">{_e(legend)}</p>' if legend else ""
    return f'<figure class="{cls}"><figcaption>{_e(caption)}</figcaption>{svg_or_note}{extra}</figure>'


def plots_section(pairs: list[Pair]) -> str:
    """The distribution, fast_p and roofline plots; nothing when no pair is ranked or has roofline figures (a
    calibrate run's page: three "nothing to plot" notes are no section)."""
    if not any(p.ranked or p.has_perf for p in pairs):
        return ""
    plots = (_figure("Speedup distribution (ranked pairs)", speedup_histogram(pairs))
             + _figure("fast_p over p", fast_p_curve(pairs))
             + _figure("Roofline: candidate time vs floor", roofline_scatter(pairs)))
    return _section("Plots", f'<div class="plots">{plots}</div>')


COLOUR_LEGEND = ("Speedups: green when the 95% CI lies entirely above 1.0 (faster than eager), red when entirely "
                 "below (slower), uncoloured when it contains 1.0 (no difference shown) or is unknown.")


def _board(pairs: list[Pair], modes: list[str] | None, site: bool) -> str:
    """Summary cards, the leaderboard (or a note when every pair is a control) and why a column is absent."""
    if not pairs:
        return ""
    if not any(not p.control for p in pairs):
        return _section("Leaderboard", _note("Every pair here is a control (an A/A run): nothing to rank."))
    title = "Leaderboard: best ranked candidate per problem"
    return (summary_cards(pairs) + f"<h2>{_e(title)}</h2>" + leaderboard_table(pairs, site)
            + _missing_notes(pairs, modes) + _note(COLOUR_LEGEND))


# ---------------------------------------------------------------- the run page

@dataclass(frozen=True)
class RunMeta:
    """The run header: the fields of run.json that a reader wants first."""
    run_id: str
    started_at: str
    kind: str
    device: str
    gpu: str
    torch: str
    git_sha: str
    seed: str
    compile: str

    @classmethod
    def from_json(cls, run_id: str, meta: dict[str, Any], pairs: list[Pair]) -> "RunMeta":
        gpus = meta.get("gpus") if isinstance(meta.get("gpus"), list) else []
        gpu = _dict(gpus[0]).get("name") if gpus else None
        gpu = gpu or next((p.gpu for p in pairs if p.gpu), "-")
        seed = _dict(meta.get("seed"))
        fixed = "fixed" if seed.get("fixed") else "random"
        modes = compile_modes(meta)
        return cls(run_id=str(meta.get("run_id") or run_id), started_at=_when(meta),
                   kind="calibrate (A/A)" if is_calibrate_run(meta) else "run",
                   device=str(meta.get("device") or "-"), gpu=str(gpu), torch=str(meta.get("torch") or "-"),
                   git_sha=str(_dict(meta.get("git")).get("sha") or "-")[:12],
                   seed="-" if seed.get("base") is None else f"{seed['base']} ({fixed})",
                   compile="-" if modes is None else ", ".join(modes) or "off")


def _when(meta: dict[str, Any]) -> str:
    return str(meta.get("started_at") or "-")[:19].replace("T", " ")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def meta_header(meta: RunMeta) -> str:
    items = [("run", meta.run_id), ("date", meta.started_at), ("kind", meta.kind), ("device", meta.device),
             *([("GPU", meta.gpu)] if meta.gpu != "-" else []), ("torch", meta.torch), ("git", meta.git_sha),
             ("seed", meta.seed), ("torch.compile baselines", meta.compile)]
    return _meta(items)


def _meta(items: list[tuple[str, str]]) -> str:
    return '<div class="meta">' + "".join(f"<span>{_e(k)} <b>{_e(v)}</b></span>" for k, v in items) + "</div>"


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>'
            f"<body><main>{body}</main></body></html>\n")


@dataclass(frozen=True)
class View:
    """What a page's sections are drawn from: the pairs shown (a run's, or the standings), the run's run.json (a
    run page) or every run (the site), and where the site lives."""
    pairs: list[Pair]
    site: bool
    meta: dict[str, Any] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    output_dir: Path | None = None

    @property
    def ranked(self) -> list[Pair]:
        return [p for p in self.pairs if not p.control]


Section = Callable[[View], str]

# The pages, section by section, in order: a new section is a function of a View and an entry here.
RUN_PAGE: list[Section] = [
    lambda v: _board(v.pairs, compile_modes(v.meta), site=False),
    lambda v: controls_section(v.pairs),
    lambda v: plots_section(v.ranked),
    lambda v: _section("All pairs", pairs_table(v.pairs)),
    lambda v: sizes_section(v.pairs),
]
SITE_PAGE: list[Section] = [
    lambda v: site_header(v.runs, v.pairs),
    lambda v: _board(v.pairs, None, site=True),
    lambda v: history_section(v.runs),
    lambda v: controls_section(v.pairs, site=True),
    lambda v: plots_section(v.ranked),
    lambda v: _section("All pairs (each pair at its newest reading)", pairs_table(v.pairs, site=True)),
    lambda v: sizes_section(v.pairs, site=True),
    lambda v: _section("Runs (newest first)", runs_table(v.output_dir, v.runs)),
]


def write_run_page(run_dir: Path, records: Iterable[Record], meta: dict) -> Path:
    """Write <run_dir>/index.html: the run's header, then RUN_PAGE's sections (summary and leaderboard, controls,
    plots, every pair)."""
    run_dir, meta = Path(run_dir), _dict(meta)
    pairs = pairs_of(records, str(meta.get("run_id") or run_dir.name), is_calibrate_run(meta))
    info = RunMeta.from_json(run_dir.name, meta, pairs)
    view = View(pairs, site=False, meta=meta)
    body = (f"<h1>Kernel leaderboard: run {_e(info.run_id)}</h1>{meta_header(info)}"
            + "".join(section(view) for section in RUN_PAGE))
    if not pairs:
        body += _note("This run has no records.")
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "index.html"
    write_text(path, _page(f"Leaderboard {info.run_id}", body))          # a link there is replaced, not followed
    return path


# ---------------------------------------------------------------- plots

def _axes(xlabel: str, ylabel: str, size: tuple[float, float] = (4.4, 3.1)):
    """A bare figure and its axes (matplotlib.figure.Figure: no pyplot, no display needed)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=size)
    ax = fig.subplots()
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def _svg(fig) -> str:
    """The figure as an inline <svg> element that scales to its container (no XML prolog, no metadata)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg[svg.index("<svg"):], flags=re.S)
    return re.sub(r'(<svg[^>]*?)\s+width="[^"]*"\s+height="[^"]*"', r"\1", svg, count=1)


def _log_ticks(axis, suffix: str, lo: float, hi: float) -> None:
    """Log-axis ticks as "0.5x", "2x" (not 5e-1); minor ticks labelled at 2, 3, 5 times a power of ten over a
    short range, at 2 and 5 over two decades, not at all over more."""
    from matplotlib.ticker import FuncFormatter
    leads = (2, 3, 5) if hi / lo < 10 else (2, 5) if hi / lo < 100 else ()

    def label(v: float, _: int, minor: bool) -> str:
        lead = round(v / 10 ** math.floor(math.log10(v)), 6) if v > 0 else 0
        return "" if minor and lead not in leads else f"{v:g}{suffix}"
    axis.set_major_formatter(FuncFormatter(lambda v, i: label(v, i, False)))
    axis.set_minor_formatter(FuncFormatter(lambda v, i: label(v, i, True)))


def speedup_histogram(pairs: list[Pair]) -> str:
    speedups = [p.speedup for p in pairs if p.ranked and p.speedup and p.speedup > 0]
    if not speedups:
        return _note("No ranked pair has a speedup.")
    lo, hi = min(speedups + [1.0]) / 1.25, max(speedups + [1.0]) * 1.25
    fig, ax = _axes("speedup vs eager (log)", "ranked pairs")
    ax.hist(speedups, bins=[lo * (hi / lo) ** (i / 20) for i in range(21)], color="#4c8bf5", edgecolor="white")
    ax.set_xscale("log")
    ax.axvline(1.0, color="#cf222e", linestyle="--", linewidth=1, label="1.0x (eager)")
    _log_ticks(ax.xaxis, "x", lo, hi)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.2)
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    return _svg(fig)


def fast_p_curve(pairs: list[Pair]) -> str:
    """fast_p for p from 0 to the largest speedup: the share of ALL pairs that are ranked (correct, not flagged off
    the ranking) and faster than p."""
    from matplotlib.ticker import PercentFormatter
    speedups = sorted(p.speedup for p in pairs if p.ranked and p.speedup is not None)
    if not speedups:
        return _note("No ranked pair: fast_p is 0 everywhere.")
    top = max(speedups[-1], 1.0) * 1.05
    ps = [top * i / 200 for i in range(201)]
    fig, ax = _axes("p (speedup threshold)", "pairs ranked with speedup > p")
    ax.step(ps, [sum(s > p for s in speedups) / len(pairs) for p in ps], where="post", color="#1a7f37")
    ax.axvline(1.0, color="#cf222e", linestyle="--", linewidth=1)
    ax.set(xlim=(0, top), ylim=(0, 1.02))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    return _svg(fig)


def roofline_scatter(pairs: list[Pair]) -> str:
    """Candidate median time against the roofline floor, log-log, with the floor and 2x / 10x guides."""
    points = [p for p in pairs if p.floor_ms and p.candidate_ms and p.floor_ms > 0 and p.candidate_ms > 0]
    if not points:
        return _note("No record has performance data (the roofline needs a GPU run).")
    fig, ax = _axes("roofline floor (ms, log)", "candidate median (ms, log)")
    xs, ys = [p.floor_ms for p in points], [p.candidate_ms for p in points]
    lo, hi = min(xs + ys) / 1.5, max(xs + ys) * 1.5
    for mult, style in ((1, "-"), (2, "--"), (10, ":")):
        ax.plot([lo, hi], [lo * mult, hi * mult], color="#8c959f", linestyle=style, linewidth=1,
                label="at the roofline" if mult == 1 else f"{mult}x the floor")
    ax.scatter(xs, ys, c=["#1a7f37" if p.correct else "#cf222e" for p in points], s=28, zorder=3,
               edgecolors="white", linewidths=0.5)
    ax.set(xscale="log", yscale="log")
    _log_ticks(ax.xaxis, "", lo, hi)
    _log_ticks(ax.yaxis, "", lo, hi * 3)
    ax.set(xlim=(lo, hi), ylim=(lo, hi * 3))
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    return _svg(fig)


def history_plot(runs: list[Run], best: dict[str, list[BestPoint]]) -> str:
    """Per problem, its best ranked speedup after each run (oldest left): filled where that run measured it, hollow
    where it was kept from an earlier run, with the 95% CI as a bar."""
    from matplotlib import colormaps
    fig, ax = _axes("run", "best ranked speedup (log)", size=(7.0, 3.4))
    cmap = colormaps["tab10" if len(best) <= 10 else "tab20"]
    index = {run.run_id: i for i, run in enumerate(runs)}
    values = [b.pair.speedup for points in best.values() for b in points if b.pair.speedup]
    for n, (problem, points) in enumerate(best.items()):
        colour = cmap(n % cmap.N)
        xs, ys = [index[b.run_id] for b in points], [b.pair.speedup for b in points]
        ax.plot(xs, ys, color=colour, linewidth=1.5, label=problem)
        for b, x, y in zip(points, xs, ys):
            bounds = interval(b.pair.speedup_ci) if b.measured else None
            if bounds:
                err = [[max(0.0, y - bounds[0])], [max(0.0, bounds[1] - y)]]
                ax.errorbar([x], [y], yerr=err, color=colour, capsize=3, linewidth=1)
            ax.plot([x], [y], marker="o", markersize=5, color=colour,
                    markerfacecolor=colour if b.measured else "white")
    ax.axhline(1.0, color="#cf222e", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    _log_ticks(ax.yaxis, "x", min(values + [1.0]), max(values + [1.0]))
    ax.set_xticks(list(index.values()), [_run_label(r) for r in index], fontsize=7,
                  rotation=40 if len(runs) > 6 else 0, ha="right" if len(runs) > 6 else "center")
    ax.set_xlim(-0.3, len(runs) - 0.7)
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _svg(fig)


def _run_label(run_id: str) -> str:
    """A run id on two lines, whole (run ids are unique; two runs in one minute differ in their seconds and tail)."""
    m = re.match(r"(\d{8})-(.+)", run_id)
    return f"{m[1]}\n{m[2]}" if m else run_id


# ---------------------------------------------------------------- the site page

def site_header(runs: list[Run], pairs: list[Pair]) -> str:
    """What the page covers: how many runs (calibrate runs among them), the dates they span, the devices, the
    problems and candidates in the standings. Not any one run's id or seed: each run has its own page."""
    dates = sorted(d for d in (_when(r.meta) for r in runs) if d != "-")
    calibrate = sum(r.calibrate for r in runs)
    devices = sorted({RunMeta.from_json(r.run_id, r.meta, r.pairs).device for r in runs} - {"-"})
    gpus = sorted({p.gpu for p in pairs if p.gpu})
    controls = sum(p.control for p in pairs)
    items = [("runs", f"{len(runs)}" + (f" ({calibrate} calibrate)" if calibrate else "")),
             ("from", dates[0] if dates else "-"), ("to", dates[-1] if dates else "-"),
             ("devices", ", ".join(devices) or "-"), *([("GPUs", ", ".join(gpus))] if gpus else []),
             ("problems", str(len({p.problem for p in pairs}))),
             ("candidates", f"{len(pairs) - controls}" + (f" (+{controls} controls)" if controls else ""))]
    return _meta(items)


def runs_table(output_dir: Path, runs: list[Run]) -> str:
    """Every run, newest first, each linked to its own page."""
    def link(run: Run) -> Cell:
        text = _breakable(run.run_id)
        page = output_dir / run.run_id / "index.html"
        return Cell(f'<a href="{_e(run.run_id)}/index.html">{text}</a>' if page.exists() else text)

    def info(run: Run) -> RunMeta:
        return RunMeta.from_json(run.run_id, run.meta, run.pairs)

    def agg(run: Run) -> dict[str, Any]:
        return tally(p.outcome for p in run.pairs if not p.control)

    columns: list[Column[Run]] = [
        Column("run", link),
        Column("date", lambda r: Cell(_e(info(r).started_at))),
        Column("kind", lambda r: Cell(_e(info(r).kind))),
        Column("device", lambda r: Cell(_e(info(r).device + ("" if info(r).gpu == "-" else f": {info(r).gpu}")))),
        Column("torch.compile", lambda r: Cell(_e(info(r).compile))),
        Column("pairs", lambda r: Cell(str(len(r.pairs))), num=True),
        Column("correct", lambda r: Cell(f'{agg(r)["correct"]}' if agg(r)["pairs"] else ""), num=True),
        Column("geomean (ranked)", lambda r: speedup_cell(agg(r)["geomean_speedup"], None, False), num=True),
        Column("fast_1", lambda r: Cell(f'{agg(r)["fast_p"].get("1.0", 0.0):.0%}' if agg(r)["pairs"] else ""),
               num=True),
    ]
    return _table(columns, reversed(runs), "runs")


def history_cell(pair: Pair | None) -> Cell:
    """One run's reading of a candidate: its speedup and CI (coloured by verdict when correct), its flags, or its
    status when it has no speedup; empty when the run did not have the pair."""
    if pair is None:
        return Cell()
    if not pair.correct or pair.speedup is None:
        return Cell(f'<span class="muted">{_breakable(pair.status)}</span>', title=clip(pair.error))
    cell = speedup_cell(pair.speedup, pair.speedup_ci, True)
    flags = "".join(f' <span class="src">{_breakable(f)}</span>' for f in pair.flags)
    return Cell(cell.html + flags, cell.cls, cell.title)


def candidate_history(runs: list[Run]) -> str:
    """Each candidate's reading in each run, newest run first (a narrow window shows the newest), headed by run id."""
    readings: dict[tuple[str, str], dict[str, Pair]] = {}
    for run in runs:
        for p in run.pairs:
            readings.setdefault(p.key, {})[run.run_id] = p
    keys = sorted(readings, key=lambda k: (k[0], next(iter(readings[k].values())).control, k[1]))
    columns: list[Column[tuple[str, str]]] = [
        Column("problem", lambda k: name_cell(k[0])),
        Column("candidate", lambda k: candidate_cell(next(iter(readings[k].values())))),
        *[Column(run.run_id, lambda k, rid=run.run_id: history_cell(readings[k].get(rid)), num=True)
          for run in reversed(runs)],
    ]
    return _table(columns, keys, "history", narrow=True)


def best_history_table(runs: list[Run], history: dict[str, list[BestPoint]]) -> str:
    """Each problem's best ranked speedup after each run, newest first, naming the candidate; "kept" where that run
    did not measure it (the best carried over from an earlier run, not a drop)."""
    def cell(problem: str, run_id: str) -> Cell:
        point = next((b for b in history.get(problem, []) if b.run_id == run_id), None)
        if point is None:
            return Cell()
        p = point.pair
        base = speedup_cell(p.speedup, p.speedup_ci)
        kept = "" if point.measured else " (kept)"
        return Cell(base.html + f' <span class="src">{_breakable(p.candidate)}{kept}</span>', base.cls, base.title)

    columns: list[Column[str]] = [
        Column("problem", name_cell),
        *[Column(run.run_id, lambda q, rid=run.run_id: cell(q, rid), num=True) for run in reversed(runs)],
    ]
    problems = sorted({p.problem for run in runs for p in run.pairs if not p.control})
    return _table(columns, problems, "history-best", narrow=True)


def history_section(runs: list[Run]) -> str:
    best = best_history(runs)
    plot = ""
    if len(runs) >= 2 and best:
        plot = _figure("Best ranked speedup per problem, run by run", history_plot(runs, best), "wide",
                       "Filled: measured in that run; hollow: kept from an earlier run that measured it (a run "
                       "that did not measure the best does not lower it). Bars: 95% CI.")
    best_table, every = best_history_table(runs, best), candidate_history(runs)
    body = (plot + (best_table and f"<h3>Best ranked speedup per problem (newest run first)</h3>{best_table}")
            + (every and f"<h3>Every candidate, run by run (newest first)</h3>{every}"))
    return _section("History", body)


def write_site(output_dir: Path, runs: list[tuple[str, dict, list[Record]]]) -> Path:
    """Write <output_dir>/index.html: what the runs there add up to, SITE_PAGE's sections over the standings (each
    pair's newest reading, each figure from the newest record that has it, its run named): summary, leaderboard,
    history, controls, plots, every pair; then every run, newest first."""
    output_dir = Path(output_dir)
    ordered = sorted((Run.of(str(rid), meta, recs) for rid, meta, recs in runs), key=lambda r: r.run_id)
    view = View(standings(ordered), site=True, runs=ordered, output_dir=output_dir)
    body = "<h1>Kernel leaderboard</h1>"
    if ordered:
        body += "".join(section(view) for section in SITE_PAGE)
    else:
        body += _note("No runs yet.")
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / "index.html"
    write_text(path, _page("Kernel leaderboard", body))
    return path
