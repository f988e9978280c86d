"""Self-contained HTML pages of a task stream and of a performance report: inline CSS
and SVG, no script, nothing fetched, so a file opens anywhere, offline
(docs/runtime.md#task-stream)."""

from __future__ import annotations

import html
import time
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from dask.utils import format_bytes, format_time

Record = dict[str, Any]
#: (epoch seconds, {worker address: (process memory, managed bytes)}).
MemorySample = tuple[float, dict[str, tuple[int, int]]]

#: At most this many task rectangles are drawn (an even sample beyond: the page stays light).
MAX_DRAWN = 20_000
WIDTH = 960
LEFT = 220  # room for the row labels
ROW = 12

_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: right; }
th { border-bottom: 1px solid #888; } td:first-child, th:first-child { text-align: left; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
.note { color: #666; }
pre { background: #f4f4f4; padding: 0.8em; overflow-x: auto; font-size: 12px; }
"""


def color_of(prefix: str) -> str:
    """A colour per task prefix, the same in every page."""
    return f"hsl({zlib.crc32(prefix.encode()) % 360}, 65%, 55%)"


def task_stream_page(records: Sequence[Record], title: str = "Task stream") -> str:
    """A page with the task stream of ``records``."""
    return _page(title, [f"<h1>{html.escape(title)}</h1>", task_stream_svg(records)])


def report_page(
    records: Sequence[Record],
    memory: Sequence[MemorySample],
    start: float,
    stop: float,
    sampled: float = 1.0,
    code: str = "",
) -> str:
    """The performance report of a block that ran from ``start`` to ``stop``: its task
    stream, a summary per task prefix, the workers' memory over time and ``code``, the
    source that ran it."""
    ran = f"{format_time(stop - start)} from {_clock(start)}"
    parts = [
        "<h1>Performance report</h1>",
        f"<p>{len(records)} task records, {ran}.</p>",
    ]
    if sampled < 1.0:
        parts.append(
            f'<p class="note">At this rate workers reported a sample of their tasks: '
            f"about {sampled:.0%} of them have a record.</p>"
        )
    # One time axis for both charts: the block, and any task that ran beyond it.
    t0 = min([start, *(r["startstops"][0]["start"] for r in records)])
    t1 = max([stop, *(r["startstops"][-1]["stop"] for r in records)])
    parts += [
        "<h2>Task stream</h2>",
        task_stream_svg(records, (t0, t1)),
        "<h2>Tasks per prefix</h2>",
        prefix_table(records),
        "<h2>Worker memory</h2>",
        memory_svg(memory, (t0, t1)),
    ]
    if code:
        parts += ["<h2>Calling code</h2>", f"<pre>{html.escape(code)}</pre>"]
    return _page("Performance report", parts)


def task_stream_svg(records: Sequence[Record], between: tuple[float, float] | None = None) -> str:
    """One row per worker thread, one rectangle per task, coloured by prefix (black:
    erred); hovering shows the key and its duration. The time axis spans ``between``
    (epoch seconds), by default the tasks'."""
    if not records:
        return '<p class="note">No task ran.</p>'
    t0, t1 = between or (
        min(r["startstops"][0]["start"] for r in records),
        max(r["startstops"][-1]["stop"] for r in records),
    )
    span = max(t1 - t0, 1e-6)
    rows = sorted({(r["worker"], r["thread"]) for r in records})
    row_of = {wt: i for i, wt in enumerate(rows)}
    drawn = _evenly(records, MAX_DRAWN)
    scale = (WIDTH - LEFT) / span
    out = [_svg_open(WIDTH, ROW * len(rows) + 30)]
    for (worker, thread), i in row_of.items():
        out.append(f'<text x="0" y="{i * ROW + 10}">{html.escape(worker)} #{thread}</text>')
    for r in drawn:
        y = row_of[(r["worker"], r["thread"])] * ROW
        fill = color_of(r["prefix"]) if r["status"] == "OK" else "black"
        for ss in r["startstops"]:
            x, w = LEFT + (ss["start"] - t0) * scale, max((ss["stop"] - ss["start"]) * scale, 0.5)
            tip = f"{r['key']!s} ({format_time(ss['stop'] - ss['start'])}, {r['status']})"
            out.append(
                f'<rect x="{x:.2f}" y="{y + 1}" width="{w:.2f}" height="{ROW - 2}" '
                f'fill="{fill}"><title>{html.escape(tip)}</title></rect>'
            )
    out += _time_axis(ROW * len(rows) + 4, span)
    out.append("</svg>")
    if len(drawn) < len(records):
        out.append(f'<p class="note">{len(drawn)} of {len(records)} records drawn.</p>')
    return "".join(out)


def prefix_table(records: Iterable[Record]) -> str:
    """Per prefix: tasks, erred ones, total and mean duration."""
    count: defaultdict[str, int] = defaultdict(int)
    erred: defaultdict[str, int] = defaultdict(int)
    total: defaultdict[str, float] = defaultdict(float)
    for r in records:
        p = r["prefix"]
        count[p] += 1
        erred[p] += r["status"] != "OK"
        total[p] += sum(ss["stop"] - ss["start"] for ss in r["startstops"])
    rows = [
        f'<tr><td><span style="color:{color_of(p)}">&#9632;</span> {html.escape(p)}</td>'
        f"<td>{count[p]}</td><td>{erred[p]}</td><td>{format_time(total[p])}</td>"
        f"<td>{format_time(total[p] / count[p])}</td></tr>"
        for p in sorted(count, key=lambda p: -total[p])
    ]
    head = "<tr><th>prefix</th><th>tasks</th><th>erred</th><th>total</th><th>mean</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def memory_svg(samples: Sequence[MemorySample], between: tuple[float, float]) -> str:
    """Each worker's process memory (solid) and managed bytes (dashed) over the time
    ``between`` (epoch seconds)."""
    points: defaultdict[str, list[tuple[float, int, int]]] = defaultdict(list)
    for t, workers in samples:
        for address, (process, managed) in workers.items():
            points[address].append((t - between[0], process, managed))
    if not points:
        return '<p class="note">No memory sample.</p>'
    span = max(between[1] - between[0], 1e-6)
    top = max(max(p for _, p, _ in ps) for ps in points.values()) or 1
    height = 200
    out = [_svg_open(WIDTH, height + 36 + 14 * len(points))]
    out.append(f'<text x="0" y="12">{html.escape(format_bytes(top))}</text>')
    out.append(f'<text x="0" y="{height}">0</text>')
    for i, (address, ps) in enumerate(sorted(points.items())):
        color = color_of(address)
        for which, dash in ((1, ""), (2, ' stroke-dasharray="4 3"')):
            line = " ".join(
                f"{LEFT + v[0] / span * (WIDTH - LEFT):.1f},{height - v[which] / top * height:.1f}"
                for v in ps
            )
            out.append(
                f'<polyline points="{line}" fill="none" stroke="{color}" '
                f'stroke-width="1.5"{dash}/>'
            )
        out.append(
            f'<text x="0" y="{height + 34 + 14 * i}" style="fill:{color}">'
            f"{html.escape(address)}: up to {format_bytes(max(p for _, p, _ in ps))}</text>"
        )
    out += _time_axis(height + 4, span)
    out.append("</svg>")
    out.append('<p class="note">Solid: the process\'s memory; dashed: results it held.</p>')
    return "".join(out)


def _time_axis(y: float, span: float) -> list[str]:
    ticks = []
    for i in range(6):
        x = LEFT + i / 5 * (WIDTH - LEFT)
        anchor = "end" if i == 5 else "middle" if i else "start"
        ticks.append(
            f'<text x="{x:.1f}" y="{y + 12}" text-anchor="{anchor}">'
            f"{format_time(span * i / 5) if i else '0 s'}</text>"
        )
    return ticks


def _svg_open(width: int, height: int) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">'
    )


def _evenly(records: Sequence[Record], n: int) -> Sequence[Record]:
    if len(records) <= n:
        return records
    step = len(records) / n
    return [records[int(i * step)] for i in range(n)]


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _page(title: str, parts: Iterable[str]) -> str:
    body = "\n".join(parts)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>\n{body}\n</body></html>\n"
    )
