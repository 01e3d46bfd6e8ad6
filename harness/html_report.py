"""HTML leaderboard: a self-contained page per run (`write_run_page`) and a site page across runs (`write_site`).

Pages open from disk with no network: CSS is inline and plots are inline SVG drawn by matplotlib through
`matplotlib.figure.Figure` (no pyplot, so no GUI backend and no global figure state). Every text that comes from a
record is HTML-escaped (records come from untrusted candidates), and any field may be missing or null (schema 1
records have no CI, CPU records have no `performance`). Records are `Record`s or their JSON objects; a JSON object
that does not read as a Record (a caller may hand in anything) is still shown, as far as it can be read.
"""
from __future__ import annotations

import html
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from harness import flags as flag_table
from harness.records import Record, RecordError
from harness.report import Outcome, abbreviate, fmt_speedup, tally
from harness.untrusted import write_text

# Best attempt for a problem with no correct candidate: the status nearest to correct wins.
STATUS_RANK = ("ok", "invalid", "incorrect", "runtime_error", "timeout", "oom", "load_error", "compile_error",
               "crashed", "skipped")
ERROR_LIMIT = 120

CSS = """
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--zebra:#f6f8fa;--good:#1a7f37;--bad:#cf222e;--warn:#9a6700}
*{box-sizing:border-box}body{margin:0;color:var(--fg);font:14px/1.45 system-ui,"Segoe UI",Roboto,sans-serif}
main{max-width:1240px;margin:0 auto;padding:24px 28px 64px}h1{font-size:24px;margin:0 0 6px}.muted{color:var(--muted)}
h2{font-size:17px;margin:32px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}
.meta{color:var(--muted);display:flex;flex-wrap:wrap;gap:4px 18px;margin-bottom:18px}.meta b{color:var(--fg)}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid var(--line);border-radius:8px;padding:8px 14px}
.card{min-width:110px}.card .v{font-size:20px;font-weight:600}.card .k{color:var(--muted);font-size:12px}
table{border-collapse:collapse;width:100%;font-size:13px}.scroll{overflow-x:auto}table#history{width:auto;min-width:50%}
th{text-align:left;background:#eaeef2;padding:6px 8px;vertical-align:bottom}.bad{color:var(--bad);font-weight:600}
tbody tr:nth-child(even){background:var(--zebra)}td{padding:5px 8px;border-top:1px solid var(--line);vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.good{color:var(--good);font-weight:600}
td.err{min-width:24em;color:var(--muted);font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;word-break:break-word}
.st{border-radius:10px;padding:1px 8px;font-size:12px;font-weight:600;white-space:nowrap;background:#eee;color:#656d76}
.st-ok{background:#dafbe1;color:var(--good)}.st-incorrect{background:#ffebe9;color:var(--bad)}.note{color:var(--muted)}
.st-invalid,.flag{background:#fff8c5;color:var(--warn)}
.flag{border-radius:4px;padding:0 5px;margin-right:3px;font-size:12px}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:16px}.note{font-style:italic}
figure{margin:0;border:1px solid var(--line);border-radius:8px;padding:10px}figure.wide{max-width:820px;margin-top:16px}
figcaption{font-weight:600;margin-bottom:4px}figure svg{width:100%;height:auto;display:block}
"""


@dataclass(frozen=True)
class Pair:
    """One record, flattened to what the pages show; a missing or malformed field becomes None / empty."""
    problem: str
    candidate: str
    status: str
    speedup: float | None
    speedup_ci: Any
    vs_compile: float | None
    vs_compile_ci: Any
    pct_bandwidth: float | None
    pct_flops: float | None
    floor_ms: float | None
    candidate_ms: float | None
    flags: tuple[str, ...]
    error: str
    gpu: str | None

    @property
    def correct(self) -> bool:
        return self.status == "ok"

    @property
    def ranked(self) -> bool:
        """Correct, and no flag keeps it off a problem's best, the geomean and fast_p (harness.flags)."""
        return self.correct and flag_table.ranks(self.flags)

    @property
    def outcome(self) -> Outcome:
        """What report.tally counts."""
        return Outcome(self.status, self.correct, self.ranked, self.speedup)

    @classmethod
    def from_record(cls, r: Record) -> "Pair":
        perf, timing = r.performance or {}, r.timing or {}
        return cls(problem=r.problem, candidate=r.candidate, status=r.status.value, speedup=r.speedup,
                   speedup_ci=r.speedup_ci, vs_compile=r.speedup_vs_compile, vs_compile_ci=r.speedup_vs_compile_ci,
                   pct_bandwidth=_num(perf.get("pct_of_peak_bandwidth")),
                   pct_flops=_num(perf.get("pct_of_peak_flops")), floor_ms=_num(perf.get("floor_ms")),
                   candidate_ms=_num(_dict(timing.get("candidate")).get("median_ms")), flags=r.flags,
                   error=" ".join((r.error or "").split()), gpu=_gpu_name(r.gpu))

    @classmethod
    def from_malformed(cls, r: dict[str, Any]) -> "Pair":
        """What can be read of a JSON object that is not a well-formed record: any field missing or of any type."""
        perf, timing = _dict(r.get("performance")), _dict(r.get("timing"))
        solution = str(r.get("solution") or "?")
        flags = r.get("flags") if isinstance(r.get("flags"), list) else []
        return cls(problem=str(r.get("problem") or solution.rsplit("/", 1)[0]),
                   candidate=solution.rsplit("/", 1)[-1], status=str(r.get("status") or "unknown"),
                   speedup=_num(r.get("speedup")), speedup_ci=r.get("speedup_ci"),
                   vs_compile=_num(r.get("speedup_vs_compile")), vs_compile_ci=r.get("speedup_vs_compile_ci"),
                   pct_bandwidth=_num(perf.get("pct_of_peak_bandwidth")),
                   pct_flops=_num(perf.get("pct_of_peak_flops")), floor_ms=_num(perf.get("floor_ms")),
                   candidate_ms=_num(_dict(timing.get("candidate")).get("median_ms")),
                   flags=tuple(str(f) for f in flags), error=" ".join(str(r.get("error") or "").split()),
                   gpu=_gpu_name(r.get("gpu")))


def pairs_of(records: Any) -> list[Pair]:
    """A Pair per record (Record or JSON object); anything else in the list is left out."""
    return [_pair(r) for r in (records or []) if isinstance(r, (Record, dict))]


def _pair(item: Record | dict[str, Any]) -> Pair:
    try:
        return Pair.from_record(Record.of(item))
    except RecordError:
        return Pair.from_malformed(item)


@dataclass(frozen=True)
class RunMeta:
    """The run header: the fields of run.json that a reader wants first."""
    run_id: str
    started_at: str
    device: str
    gpu: str
    torch: str
    git_sha: str
    seed: str

    @classmethod
    def from_json(cls, run_id: str, meta: dict[str, Any], pairs: list[Pair]) -> "RunMeta":
        gpus = meta.get("gpus") if isinstance(meta.get("gpus"), list) else []
        gpu = _dict(gpus[0]).get("name") if gpus else None
        gpu = gpu or next((p.gpu for p in pairs if p.gpu), "-")
        seed = _dict(meta.get("seed"))
        fixed = "fixed" if seed.get("fixed") else "random"
        return cls(run_id=str(meta.get("run_id") or run_id),
                   started_at=str(meta.get("started_at") or "-")[:19].replace("T", " "),
                   device=str(meta.get("device") or "-"), gpu=str(gpu), torch=str(meta.get("torch") or "-"),
                   git_sha=str(_dict(meta.get("git")).get("sha") or "-")[:12],
                   seed="-" if seed.get("base") is None else f"{seed['base']} ({fixed})")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _gpu_name(gpu: Any) -> str | None:
    """The name in a record's `gpu` ({index, name}), or None."""
    name = _dict(gpu).get("name")
    return str(name) if name else None


def _num(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def best_per_problem(pairs: list[Pair]) -> dict[str, Pair]:
    """Per problem, sorted: the ranked pair with the highest speedup, else the best attempt (a correct pair flagged
    off the ranking, else the status nearest ok). Only a ranked pair is a problem's best (`Pair.ranked`)."""
    def key(p: Pair) -> tuple[int, int, float]:
        rank = STATUS_RANK.index(p.status) if p.status in STATUS_RANK else len(STATUS_RANK)
        return (0 if p.ranked else 1 if p.correct else 2, rank, -(p.speedup or 0.0))
    best: dict[str, Pair] = {}
    for p in pairs:
        if p.problem not in best or key(p) < key(best[p.problem]):
            best[p.problem] = p
    return dict(sorted(best.items()))


def _speedup_cell(value: float | None, ci: Any, trusted: bool = True) -> str:
    """Green when faster, red when slower, as displayed (0.998 is "1.00x"); no colour for an untrusted value."""
    shown = round(value, 2) if value is not None and trusted else None
    cls = "" if shown is None else "good" if shown > 1.0 else "bad" if shown < 1.0 else ""
    return f'<td class="num {cls}">{_e(fmt_speedup(value, ci))}</td>'


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%" if value < 10 else f"{value:.0f}%"


def _status(status: str) -> str:
    known = status if status in ("ok", "incorrect", "invalid") else "other"
    return f'<span class="st st-{known}">{_e(status)}</span>'


def _flags(flags: tuple[str, ...]) -> str:
    return "".join(f'<span class="flag">{_e(f)}</span>' for f in flags)


def _table(head: list[str], rows: list[str], table_id: str) -> str:
    """A table; a heading written ">name" is a right-aligned numeric column."""
    ths = "".join(f'<th class="num">{_e(h[1:])}</th>' if h.startswith(">") else f"<th>{_e(h)}</th>" for h in head)
    return (f'<div class="scroll"><table id="{table_id}"><thead><tr>{ths}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def leaderboard_table(pairs: list[Pair]) -> str:
    rows = []
    for problem, p in best_per_problem(pairs).items():
        rows.append(f"<tr><td>{_e(problem)}</td><td>{_best_name(p)}</td><td>{_status(p.status)}</td>"
                    f"{_speedup_cell(p.speedup if p.ranked else None, p.speedup_ci)}"
                    f"{_speedup_cell(p.vs_compile if p.ranked else None, p.vs_compile_ci)}"
                    f'<td class="num">{_pct(p.pct_bandwidth if p.ranked else None)}</td>'
                    f'<td class="num">{_pct(p.pct_flops if p.ranked else None)}</td>'
                    f"<td>{_flags(p.flags)}</td>{_error_cell(_best_note(p))}</tr>")
    return _table(["problem", "best candidate", "status", ">vs eager [95% CI]", ">vs torch.compile [95% CI]",
                   ">% peak BW", ">% peak FLOPs", "flags", "error (best attempt)"], rows, "leaderboard")


def _best_name(p: Pair) -> str:
    """The best candidate's name; a problem without a ranked pair says so, naming its best attempt."""
    if p.ranked:
        return _e(p.candidate)
    none = "none ranked" if p.correct else "none correct"
    return f'<i>{none}</i> <span class="muted">({_e(p.candidate)})</span>'


def _best_note(p: Pair) -> str:
    """What the leaderboard's last cell says: nothing for a ranked pair, why a correct one is not ranked, else the
    best attempt's error."""
    if p.ranked:
        return ""
    if p.correct:
        return f"not ranked: flagged {', '.join(flag_table.unranked(p.flags))}"
    return p.error


def _error_cell(error: str) -> str:
    """An error, abbreviated (the whole of it in the cell's tooltip): a long one squeezed into a narrow column
    made a row hundreds of pixels tall (seen on a real H200 run's leaderboard)."""
    return f'<td class="err" title="{_e(error)}">{_e(abbreviate(error, ERROR_LIMIT))}</td>'


def pairs_table(pairs: list[Pair]) -> str:
    rows = [f"<tr><td>{_e(p.problem)}</td><td>{_e(p.candidate)}</td><td>{_status(p.status)}</td>"
            f"{_speedup_cell(p.speedup, p.speedup_ci, p.correct)}<td>{_flags(p.flags)}</td>"
            f"{_error_cell(p.error)}</tr>"
            for p in sorted(pairs, key=lambda p: (p.problem, p.candidate))]
    return _table(["problem", "candidate", "status", ">speedup [95% CI]", "flags", "error"], rows, "pairs")


def summary_cards(pairs: list[Pair]) -> str:
    agg = tally(p.outcome for p in pairs)
    geo = agg["geomean_speedup"]
    cards = [("pairs", str(agg["pairs"])), ("correct", f"{agg['correct']} ({agg['correctness_rate']:.0%})"),
             ("ranked", str(agg["ranked"])), ("geomean speedup (ranked)", "-" if geo is None else f"{geo:.2f}x")]
    cards += [(f"fast_{float(p):g}", f"{v:.0%}") for p, v in agg["fast_p"].items()]
    statuses = ", ".join(f"{k} {v}" for k, v in agg["by_status"].items())
    body = "".join(f'<div class="card"><div class="v">{_e(v)}</div><div class="k">{_e(k)}</div></div>'
                   for k, v in cards)
    return f'<div class="cards">{body}</div><p class="note">statuses: {_e(statuses or "-")}</p>'


def meta_header(meta: RunMeta) -> str:
    items = [("run", meta.run_id), ("date", meta.started_at), ("device", meta.device), ("GPU", meta.gpu),
             ("torch", meta.torch), ("git", meta.git_sha), ("seed", meta.seed)]
    return '<div class="meta">' + "".join(f"<span>{_e(k)} <b>{_e(v)}</b></span>" for k, v in items) + "</div>"


def _figure(caption: str, svg_or_note: str, cls: str = "") -> str:
    return f'<figure class="{cls}"><figcaption>{_e(caption)}</figcaption>{svg_or_note}</figure>'


def _note(text: str) -> str:
    return f'<p class="note">{_e(text)}</p>'


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>'
            f"<body><main>{body}</main></body></html>\n")


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


def history_plot(problems: list[str], run_ids: list[str], best: dict[tuple[str, str], float]) -> str:
    from matplotlib import colormaps
    fig, ax = _axes("run", "best ranked speedup (log)", size=(7.0, 3.4))
    cmap = colormaps["tab10" if len(problems) <= 10 else "tab20"]
    ax.set_prop_cycle(color=[cmap(i % cmap.N) for i in range(len(problems))])
    xs, values = list(range(len(run_ids))), list(best.values())
    for problem in problems:
        ys = [best.get((problem, run), math.nan) for run in run_ids]
        if not all(math.isnan(y) for y in ys):
            ax.plot(xs, ys, marker="o", markersize=4, linewidth=1.5, label=problem)
    ax.axhline(1.0, color="#cf222e", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    _log_ticks(ax.yaxis, "x", min(values + [1.0]), max(values + [1.0]))
    ax.set_xticks(xs, [_short_run(r) for r in run_ids], rotation=30 if len(run_ids) > 4 else 0, fontsize=8)
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _svg(fig)


def _short_run(run_id: str) -> str:
    m = re.match(r"(\d{4})(\d\d)(\d\d)-(\d\d)(\d\d)", run_id)
    return f"{m[1]}-{m[2]}-{m[3]} {m[4]}:{m[5]}" if m else run_id[:16]


def _run_sections(pairs: list[Pair]) -> str:
    plots = (_figure("Speedup distribution (ranked pairs)", speedup_histogram(pairs))
             + _figure("fast_p over p", fast_p_curve(pairs))
             + _figure("Roofline: candidate time vs floor", roofline_scatter(pairs)))
    return (f"<h2>Summary</h2>{summary_cards(pairs)}<h2>Leaderboard: best ranked candidate per problem</h2>"
            f'{leaderboard_table(pairs)}<h2>Plots</h2><div class="plots">{plots}</div>'
            f"<h2>All pairs</h2>{pairs_table(pairs)}")


def write_run_page(run_dir: Path, records: Iterable[Record | dict[str, Any]], meta: dict) -> Path:
    """Write <run_dir>/index.html: the run's header, summary, leaderboard, plots and every pair."""
    run_dir, pairs = Path(run_dir), pairs_of(records)
    info = RunMeta.from_json(run_dir.name, _dict(meta), pairs)
    body = f"<h1>Kernel leaderboard</h1>{meta_header(info)}{_run_sections(pairs)}"
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "index.html"
    write_text(path, _page(f"Leaderboard {info.run_id}", body))          # a link there is replaced, not followed
    return path


@dataclass(frozen=True)
class Run:
    run_id: str
    meta: dict[str, Any]
    pairs: list[Pair]


def _runs_table(output_dir: Path, runs: list[Run]) -> str:
    rows = []
    for run in runs:
        info, agg = RunMeta.from_json(run.run_id, run.meta, run.pairs), tally(p.outcome for p in run.pairs)
        rid = _e(run.run_id)
        link = f'<a href="{rid}/index.html">{rid}</a>' if (output_dir / run.run_id / "index.html").exists() else rid
        rows.append(f"<tr><td>{link}</td><td>{_e(info.started_at)}</td><td>{_e(info.device)}</td>"
                    f'<td>{_e(info.gpu)}</td><td class="num">{agg["pairs"]}</td>'
                    f'<td class="num">{agg["correct"]} ({agg["correctness_rate"]:.0%})</td>'
                    f'{_speedup_cell(agg["geomean_speedup"], None)}'
                    f'<td class="num">{agg["fast_p"].get("1.0", 0.0):.0%}</td></tr>')
    return _table(["run", "date", "device", "GPU", ">pairs", ">correct", ">geomean", ">fast_1"], rows, "runs")


def _history(runs: list[Run]) -> str:
    """Per problem, each run's best ranked speedup: a table, and a line plot from two runs on."""
    best: dict[tuple[str, str], float] = {}
    for run in runs:
        for problem, p in best_per_problem(run.pairs).items():
            if p.ranked and p.speedup is not None:
                best[(problem, run.run_id)] = p.speedup
    run_ids = [run.run_id for run in runs]
    problems = sorted({p.problem for run in runs for p in run.pairs})
    rows = [f"<tr><td>{_e(problem)}</td>{''.join(_speedup_cell(best.get((problem, rid)), None) for rid in run_ids)}"
            "</tr>" for problem in problems]
    out = _table(["problem", *[">" + _short_run(r) for r in run_ids]], rows, "history")
    if len(runs) >= 2 and best:
        out += _figure("Best ranked speedup per run", history_plot(problems, run_ids, best), "wide")
    return out


def standings(runs: list[Run]) -> list[Pair]:
    """Each (problem, candidate)'s record from the newest run that has it (`runs` oldest first): what the suite
    reads now when runs cover parts of it (a level at a time, a CI job, a resumed run)."""
    newest: dict[tuple[str, str], Pair] = {}
    for run in runs:
        for pair in run.pairs:
            newest[(pair.problem, pair.candidate)] = pair
    return [newest[key] for key in sorted(newest)]


def write_site(output_dir: Path, runs: list[tuple[str, dict, list[Record | dict[str, Any]]]]) -> Path:
    """Write <output_dir>/index.html: every run (oldest first), per-problem history, and the standings (each
    pair's newest record) in full: summary, leaderboard, plots, every pair."""
    output_dir = Path(output_dir)
    ordered = sorted((Run(str(rid), _dict(meta), pairs_of(recs)) for rid, meta, recs in runs), key=lambda r: r.run_id)
    body = f"<h1>Kernel leaderboard: {len(ordered)} run{'' if len(ordered) == 1 else 's'}</h1>"
    if ordered:
        latest = ordered[-1]
        body += (f"{meta_header(RunMeta.from_json(latest.run_id, latest.meta, latest.pairs))}"
                 f"<h2>Runs</h2>{_runs_table(output_dir, ordered)}"
                 f"<h2>History: best ranked speedup per problem</h2>{_history(ordered)}"
                 f"<h2>Standings: each pair's newest record across the runs</h2>{_run_sections(standings(ordered))}")
    else:
        body += _note("No runs yet.")
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / "index.html"
    write_text(path, _page("Kernel leaderboard", body))
    return path
