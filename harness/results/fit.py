"""Tables that fit the console's width (issue 47): at 80 columns a table drops its least needed columns and cuts
ids in their middle, where a terminal would otherwise fold every cell into two-character slivers. Each column says
how much it is needed (`keep`: 0 is never dropped; a larger number is dropped sooner) and whether its cells may be
cut (`cut`: "middle" for ids, whose start and end tell them apart; "end" for free text; None: whole or dropped).
A header is never cut. The table's caption names the columns left out (`--json` has them all)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

GAP = 2                     # rich's SIMPLE_HEAD box with collapsed padding: a space and a rule between columns
ELLIPSIS = "\u2026"


@dataclass(frozen=True)
class Col:
    name: str
    keep: int = 0
    justify: str = "left"
    cut: str | None = None
    least: int = 8          # the narrowest a cut column gets (never under its header)


def elide_middle(text: str, limit: int) -> str:
    """`text` within `limit` characters, its middle replaced by an ellipsis: `level1/001_relu_scale_fused` at 16
    is `level1/…e_fused`, never `level1/001_r…`. A problem id keeps its number where there is room."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return text[:limit]
    level, sep, stem = text.rpartition("/")
    if sep and len(stem) <= limit:                  # the level is what the rows share: the stem alone
        return stem
    number, under, rest = stem.partition("_")
    if sep and under and number.isdigit():          # <level>/<NNN>_<name>: the number, then the name's end
        head = f"{level}/{number}_" if limit - len(level) - len(number) - 2 >= 6 else f"{number}_"
        if limit - len(head) - 1 >= 4:
            return head + ELLIPSIS + rest[len(rest) - (limit - len(head) - 1):]
    first = text.split("_", 1)[0] + "_"               # a short first word (c07_, gpt_) tells ids apart too
    head = len(first) if "_" in text and len(first) <= 5 and limit - len(first) - 1 >= 4 else max(1, (limit - 1) // 4)
    return text[:head] + ELLIPSIS + text[len(text) - (limit - 1 - head):]


def cut_end(text: str, limit: int) -> str:
    return text if len(text) <= limit else (text[: max(0, limit - 1)] + ELLIPSIS if limit > 0 else "")


def widths(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> dict[int, int]:
    """Column index -> width for the columns kept within `width`: the droppable columns go, most droppable (then
    rightmost) first, until what is left fits at its narrowest; then cut columns give up room, widest first."""
    natural = [max([len(c.name), *(len(r[i]) for r in rows)]) for i, c in enumerate(cols)]
    narrowest = [min(natural[i], max(c.least, len(c.name))) if c.cut else natural[i] for i, c in enumerate(cols)]
    kept = list(range(len(cols)))

    def need(ws: dict[int, int]) -> int:
        return sum(ws.values()) + GAP * (len(ws) - 1)

    while need({i: narrowest[i] for i in kept}) > width:
        droppable = [i for i in kept if cols[i].keep > 0]
        if not droppable:
            break
        kept.remove(max(droppable, key=lambda i: (cols[i].keep, i)))
    out = {i: natural[i] for i in kept}
    while need(out) > width:
        shrinkable = [i for i in kept if out[i] > narrowest[i]]
        if not shrinkable:
            break
        i = max(shrinkable, key=lambda i: out[i])
        out[i] = max(narrowest[i], out[i] - (need(out) - width))
    return out


Style = Callable[[int, int], str | None]


def table(cols: Sequence[Col], rows: Sequence[Sequence[str]], title: str, width: int | None,
          style: Style | None = None):
    """A rich Table of `rows` (text cells, shown escaped). `width` None: every column, cells folded as needed;
    else one line per row within `width` (widths), dropped columns named in the caption."""
    from rich import box
    from rich.table import Table
    from rich.text import Text
    from harness.core.untrusted import show_name
    style = style or (lambda row, col: None)
    if width is None:
        t = Table(title=title, title_justify="left")
        for c in cols:
            t.add_column(c.name, justify=c.justify, overflow="fold")
        for r, row in enumerate(rows):
            t.add_row(*(Text(show_name(cell), style=style(r, i) or "") for i, cell in enumerate(row)))
        return t
    ws = widths(cols, rows, width)
    left_out = [c.name for i, c in enumerate(cols) if i not in ws]
    caption = f"left out at {width} columns: {', '.join(left_out)}" if left_out else None
    t = Table(title=title, title_justify="left", caption=caption, caption_justify="left", box=box.SIMPLE_HEAD,
              show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for i, w in ws.items():
        t.add_column(cols[i].name, justify=cols[i].justify, width=w, no_wrap=True, overflow="ellipsis")
    for r, row in enumerate(rows):
        cells = []
        for i, w in ws.items():
            text = row[i]
            if len(text) > w:
                text = elide_middle(text, w) if cols[i].cut == "middle" else cut_end(text, w)
            cells.append(Text(show_name(text), style=style(r, i) or ""))
        t.add_row(*cells)
    return t
