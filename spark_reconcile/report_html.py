"""The self-contained HTML report of a reconciliation: one page that needs no network.

:func:`render_report` turns a :class:`~spark_reconcile.results.ReconcileSummary` into one HTML
document with inline CSS and inline SVG charts — no scripts, web fonts, images or links to
anything outside the file — so the report can be mailed, archived and opened offline. It is
pure (no I/O, no clock): the same summary always gives the same page.

Invariants:

- every string that came from the data (topics, groups, message ids, details, file names,
  reasons, inputs) passes through :func:`html.escape` before it reaches the page; passwords in
  ``scheme://user:password@host`` inputs are masked;
- the document itself contains no ``http://`` or ``https://`` (inline SVG needs no ``xmlns``);
- each chart is a ``<figure id=… data-chart=…>`` holding one ``<svg>``; a chart without data
  still renders, with a visible "no data" text; axes start at 0 and their top is at least 1;
- long lists are capped (the ``*_LIMIT`` constants) with a "…and N more" line.

Thread-safe: it keeps no state.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

from .classes import ALL_CLASSES, STUB_CLASSES, MessageClass
from .results import ClassCount, QueueLag, ReconcileSummary

CLASS_COLOURS: dict[str, str] = {
    MessageClass.CONFIRMED: "#2e7d32",
    MessageClass.IN_FLIGHT: "#1565c0",
    MessageClass.PENDING: "#90a4ae",
    MessageClass.LOST: "#d32f2f",
    MessageClass.DEAD_LETTERED: "#7b1fa2",
    MessageClass.EXHAUSTED: "#ef6c00",
    MessageClass.ORPHAN_LOG: "#795548",
    MessageClass.DLQ_WITHOUT_STUB: "#ec407a",
}
"""Class → the solid fill of its bars, swatches and series (the same in every chart)."""

LAG_COLOUR = "#00838f"
"""The fill of the consumer-lag bars (no class has it)."""

HOURS_LIMIT = 168
"""The lost-over-time chart shows at most the latest week of hours."""
LAG_BARS_LIMIT = 50
"""Queues in the lag chart (the largest lags)."""
TABLE_ROWS_LIMIT = 500
"""Rows in any one table; the rest are counted in a "…and N more" line."""

_HourlyCounts = dict[tuple[str, datetime], int]
"""(class, start of the hour) → count."""
_LOSS_CLASSES = (MessageClass.LOST, MessageClass.DEAD_LETTERED)
_CHART_WIDTH = 960
_HOUR = timedelta(hours=1)
_CREDENTIALS = re.compile(r"(://[^/\s:@]*:)[^/\s@]*@")
_FONTS = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif'

_CSS = f"""
:root {{ color-scheme: light; }}
body {{ margin: 0; background: #fff; color: #212121; font: 14px/1.45 {_FONTS}; }}
main {{ max-width: 1100px; margin: 0 auto; padding: 24px; }}
h1 {{ font-size: 26px; margin: 0 0 12px; }}
h2 {{ font-size: 18px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #e0e0e0; }}
.facts {{ display: flex; flex-wrap: wrap; gap: 8px 36px; margin: 0 0 12px; }}
.facts dt {{ font-size: 12px; color: #616161; text-transform: uppercase; letter-spacing: .04em; }}
.facts dd {{ margin: 0; font-weight: 600; }}
.banner {{ border: 2px solid; border-radius: 6px; padding: 10px 16px; margin: 16px 0; }}
.banner h2 {{ border: 0; margin: 0 0 4px; padding: 0; }} .banner ul {{ margin: 4px 0; }}
#incomplete-banner {{ background: #fff3e0; border-color: #e65100; }}
#threshold-banner {{ background: #ffebee; border-color: #b71c1c; }}
#ok-banner {{ background: #e8f5e9; border-color: #a5d6a7; }}
figure {{ margin: 20px 0; break-inside: avoid; page-break-inside: avoid; }}
figcaption {{ font-weight: 600; margin-bottom: 6px; }}
svg {{ display: block; max-width: 100%; height: auto; }}
svg text {{ font: 11px {_FONTS}; fill: #424242; }}
svg .grid {{ stroke: #e0e0e0; }} svg .axis {{ stroke: #757575; }}
svg .no-data {{ font-size: 18px; fill: #757575; }} svg .frame {{ fill: none; stroke: #e0e0e0; }}
table {{ border-collapse: collapse; margin: 8px 0; font-size: 13px; }}
th, td {{ padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; }}
td {{ vertical-align: top; }} th {{ background: #fafafa; font-weight: 600; }}
.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
.mono {{ font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }}
.detail {{ display: inline-block; max-width: 420px; overflow-wrap: anywhere; }}
.zero {{ color: #bdbdbd; }} .exceeded {{ color: #b71c1c; font-weight: 600; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; margin-right: 6px; }}
.more, .empty {{ color: #616161; font-style: italic; }}
@media print {{
  main {{ max-width: none; padding: 0; }} body {{ font-size: 11px; }} tr {{ break-inside: avoid; }}
  .banner, .swatch, svg {{ -webkit-print-color-adjust: exact; print-color-adjust: exact; }}
}}
"""


def render_report(summary: ReconcileSummary) -> str:
    """The whole report of ``summary`` as one self-contained HTML document."""
    body = "\n".join([
        _header(summary),
        _banners(summary),
        _section("charts", "Charts", "\n".join([
            _status_chart(summary), _loss_chart(summary), _lag_chart(summary),
        ])),
        _tables(summary),
    ])
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>Postbox reconciliation {_esc(_utc_text(summary.as_of))}</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


# -- text helpers ---------------------------------------------------------------------------


def _esc(value: object) -> str:
    """``value`` as text safe in element content and in quoted attributes (None → empty)."""
    return "" if value is None else escape(str(value), quote=True)


def _num(value: int) -> str:
    """An integer with thousands separators."""
    return f"{int(value):,}"


def _utc_text(moment: datetime) -> str:
    """``moment`` (naive UTC, or aware) as ``YYYY-MM-DD HH:MM:SS UTC``."""
    return f"{_as_naive_utc(moment):%Y-%m-%d %H:%M:%S} UTC"


def _as_naive_utc(moment: datetime) -> datetime:
    """``moment`` in naive UTC (the summary's convention); aware values are converted."""
    if moment.tzinfo is not None:
        return moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def _grace_text(grace_ms: int) -> str:
    """A grace period in its largest whole unit, with the exact milliseconds."""
    for unit_ms, unit in ((3_600_000, "h"), (60_000, "min"), (1_000, "s")):
        if grace_ms and grace_ms % unit_ms == 0:
            return f"{grace_ms // unit_ms:,} {unit} ({grace_ms:,} ms)"
    return f"{grace_ms:,} ms"


def _input_text(value: Any) -> str:
    """One ``inputs`` value as display text, with any URL password masked."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = _num(value)
    elif isinstance(value, dict | list | tuple):
        text = json.dumps(value, default=str, sort_keys=True)
    else:
        text = str(value)
    return _CREDENTIALS.sub(r"\1***@", text)


# -- page parts -----------------------------------------------------------------------------


def _header(summary: ReconcileSummary) -> str:
    """Title, the run's key facts and the inputs table."""
    facts = [
        ("As of", _utc_text(summary.as_of)),
        ("Grace period", _grace_text(summary.grace_ms)),
        ("Stubs", _num(summary.stubs)),
        ("Duration", f"{summary.duration_s:,.1f} s"),
    ]
    items = "".join(f"<div><dt>{name}</dt><dd>{_esc(value)}</dd></div>" for name, value in facts)
    inputs = _table([_Column("Input", _text(lambda item: item[0])),
                     _Column("Value", _text(lambda item: _input_text(item[1]), "mono"))],
                    list(summary.inputs.items()), "No inputs recorded.")
    return (f'<header>\n<h1>Postbox reconciliation</h1>\n<dl class="facts">{items}</dl>\n'
            f"{inputs}\n</header>")


def _banners(summary: ReconcileSummary) -> str:
    """The status: incomplete store and/or exceeded thresholds, else an all-clear note."""
    parts = []
    if not summary.complete:
        problems = "".join(
            f'<li><span class="mono">{_esc(p.file)}</span>'
            f"{'' if p.position is None else f' at position {_num(p.position)}'}: "
            f"{_esc(p.reason)}</li>" for p in summary.problems)
        parts.append(
            '<div class="banner" id="incomplete-banner" role="alert">'
            "<h2>INCOMPLETE</h2><p>Some store files could not be read completely. "
            "Every count below misses what these files held:</p>"
            f"<ul>{problems or '<li>(no file named)</li>'}</ul></div>")
    if summary.exceeded:
        items = "".join(_exceeded_item(summary, name) for name in summary.exceeded)
        parts.append('<div class="banner" id="threshold-banner" role="alert">'
                     f"<h2>Thresholds exceeded</h2><ul>{items}</ul></div>")
    else:
        scope = "" if summary.complete else " (in the files that could be read)"
        parts.append(f'<div class="banner" id="ok-banner"><p>All classes within '
                     f"thresholds{scope}.</p></div>")
    return "\n".join(parts)


def _exceeded_item(summary: ReconcileSummary, name: str) -> str:
    """One exceeded class: its count against its threshold."""
    threshold = summary.thresholds.get(name)
    limit = "no threshold recorded" if threshold is None else f"threshold {_num(threshold)}"
    return (f'<li><span class="exceeded">{_esc(name)}</span>: '
            f"{_num(summary.counts.get(name, 0))} ({limit})</li>")


def _section(section_id: str, title: str, content: str) -> str:
    """A titled section of the page."""
    return f'<section id="{section_id}">\n<h2>{title}</h2>\n{content}\n</section>'


# -- charts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plot:
    """The rectangle of a chart that the data is drawn in, in SVG pixels."""

    left: float
    top: float
    width: float
    height: float

    @property
    def right(self) -> float:
        return self.left + self.width

    @property
    def bottom(self) -> float:
        return self.top + self.height


@dataclass(frozen=True)
class _Scale:
    """A linear axis from 0 to ``top`` with gridlines every ``step`` (integers, both ≥ 1)."""

    top: int
    step: int

    def length(self, value: int, span: float) -> float:
        """Pixels for ``value`` on an axis ``span`` pixels long; a non-zero value gets ≥ 2."""
        pixels = span * min(max(value, 0), self.top) / self.top
        return max(pixels, 2.0) if value > 0 else pixels


def _scale(maximum: int, ticks: int = 4) -> _Scale:
    """The axis for values up to ``maximum``: a 1-2-5 step giving at most about ``ticks``."""
    raw = max(int(maximum), 1) / ticks
    magnitude = 1
    while magnitude * 10 <= raw:
        magnitude *= 10
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return _Scale(top=max(-(-int(maximum) // step), 1) * step, step=step)


def _figure(chart_id: str, caption: str, svg: str) -> str:
    """A chart: a figure named by ``id`` and ``data-chart``, with its caption and svg."""
    return (f'<figure id="{chart_id}" data-chart="{chart_id}">\n'
            f"<figcaption>{_esc(caption)}</figcaption>\n{svg}\n</figure>")


def _svg(height: float, label: str, parts: Iterable[str]) -> str:
    """An inline SVG as wide as every chart (no ``xmlns``: HTML5 does not need it)."""
    return (f'<svg width="{_CHART_WIDTH}" height="{height:.0f}" '
            f'viewBox="0 0 {_CHART_WIDTH} {height:.0f}" role="img" aria-label="{_esc(label)}">'
            + "".join(parts) + "</svg>")


def _no_data(label: str, detail: str) -> str:
    """The svg of a chart without data: a framed, visible "no data" text."""
    return _svg(120, label, [
        f'<rect class="frame" x="0.5" y="0.5" width="{_CHART_WIDTH - 1}" height="119"/>',
        f'<text class="no-data" x="{_CHART_WIDTH / 2:.0f}" y="58" text-anchor="middle">'
        f"no data</text>",
        f'<text x="{_CHART_WIDTH / 2:.0f}" y="82" text-anchor="middle">{_esc(detail)}</text>',
    ])


def _y_grid(scale: _Scale, plot: _Plot) -> str:
    """Horizontal gridlines with their values on the left, and the x axis."""
    parts = []
    for tick in range(0, scale.top + 1, scale.step):
        y = plot.bottom - plot.height * tick / scale.top
        parts.append(f'<line class="grid" x1="{plot.left}" x2="{plot.right}" '
                     f'y1="{y:.1f}" y2="{y:.1f}"/><text class="tick" x="{plot.left - 6}" '
                     f'y="{y + 4:.1f}" text-anchor="end">{_num(tick)}</text>')
    parts.append(f'<line class="axis" x1="{plot.left}" x2="{plot.right}" '
                 f'y1="{plot.bottom}" y2="{plot.bottom}"/>')
    return "".join(parts)


def _x_grid(scale: _Scale, plot: _Plot) -> str:
    """Vertical gridlines with their values above the plot, and the y axis."""
    parts = []
    for tick in range(0, scale.top + 1, scale.step):
        x = plot.left + plot.width * tick / scale.top
        parts.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{plot.top}" '
                     f'y2="{plot.bottom}"/><text class="tick" x="{x:.1f}" y="{plot.top - 8}" '
                     f'text-anchor="middle">{_num(tick)}</text>')
    parts.append(f'<line class="axis" x1="{plot.left}" x2="{plot.left}" '
                 f'y1="{plot.top}" y2="{plot.bottom}"/>')
    return "".join(parts)


def _status_chart(summary: ReconcileSummary) -> str:
    """One vertical bar per class, in ``ALL_CLASSES`` order, labelled with its count."""
    caption = "Rows per class"
    counts = [(str(name), int(summary.counts.get(name, 0))) for name in ALL_CLASSES]
    if not any(count for _, count in counts):
        return _figure("status-breakdown", caption, _no_data(caption, "nothing was classified"))
    plot = _Plot(left=80, top=30, width=_CHART_WIDTH - 100, height=250)
    scale = _scale(max(count for _, count in counts))
    slot = plot.width / len(counts)
    parts = [_y_grid(scale, plot)]
    for index, (name, count) in enumerate(counts):
        x = plot.left + slot * index + slot * 0.2
        height = scale.length(count, plot.height)
        y = plot.bottom - height
        centre = x + slot * 0.3
        parts.append(
            f'<rect class="bar" data-class="{_esc(name)}" x="{x:.1f}" y="{y:.1f}" '
            f'width="{slot * 0.6:.1f}" height="{height:.1f}" fill="{CLASS_COLOURS[name]}">'
            f"<title>{_esc(name)}: {_num(count)}</title></rect>"
            f'<text class="value" x="{centre:.1f}" y="{y - 6:.1f}" text-anchor="middle">'
            f"{_num(count)}</text>"
            f'<text class="label" x="{centre:.1f}" y="{plot.bottom + 18}" '
            f'text-anchor="middle">{_esc(name)}</text>')
    return _figure("status-breakdown", caption, _svg(plot.bottom + 30, caption, parts))


def _hour_start(moment: datetime) -> datetime:
    """The start of the UTC hour ``moment`` falls in (naive)."""
    return _as_naive_utc(moment).replace(minute=0, second=0, microsecond=0)


def _hourly_losses(summary: ReconcileSummary) -> tuple[list[datetime], _HourlyCounts]:
    """The hours to show (consecutive, the latest ``HOURS_LIMIT``) and (class, hour) → count."""
    totals: dict[tuple[str, datetime], int] = {}
    for row in summary.by_hour:
        if row.hour is None or row.classification not in _LOSS_CLASSES or row.count <= 0:
            continue
        key = (str(row.classification), _hour_start(row.hour))
        totals[key] = totals.get(key, 0) + row.count
    if not totals:
        return [], {}
    last = max(hour for _, hour in totals)
    first = max(min(hour for _, hour in totals), last - _HOUR * (HOURS_LIMIT - 1))
    hours = [first + _HOUR * index for index in range((last - first) // _HOUR + 1)]
    return hours, {key: count for key, count in totals.items() if key[1] >= first}


def _loss_chart(summary: ReconcileSummary) -> str:
    """Lost and dead-lettered per hour: two bars per hour, on a continuous hour axis."""
    caption = f"Lost and dead-lettered per hour (UTC, latest {HOURS_LIMIT} h at most)"
    hours, totals = _hourly_losses(summary)
    if not hours:
        return _figure("lost-over-time", caption,
                       _no_data(caption, "no lost or dead-lettered rows with an hour"))
    plot = _Plot(left=80, top=34, width=_CHART_WIDTH - 100, height=220)
    scale = _scale(max(totals.values()))
    slot = plot.width / len(hours)
    bar_width = min(slot * 0.42, 24.0)
    parts = [_y_grid(scale, plot), _legend(plot)]
    for index, hour in enumerate(hours):
        centre = plot.left + slot * (index + 0.5)
        for offset, name in ((-1, str(MessageClass.LOST)), (0, str(MessageClass.DEAD_LETTERED))):
            count = totals.get((name, hour), 0)
            if count:
                height = scale.length(count, plot.height)
                parts.append(
                    f'<rect class="mark" data-class="{name}" '
                    f'data-hour="{hour.isoformat(timespec="minutes")}" '
                    f'x="{centre + offset * bar_width:.2f}" y="{plot.bottom - height:.1f}" '
                    f'width="{bar_width:.2f}" height="{height:.1f}" fill="{CLASS_COLOURS[name]}">'
                    f"<title>{hour:%Y-%m-%d %H}:00 {name}: {_num(count)}</title></rect>")
    parts.append(_hour_labels(hours, plot, slot))
    return _figure("lost-over-time", caption, _svg(plot.bottom + 40, caption, parts))


def _legend(plot: _Plot) -> str:
    """The two series' swatches, above the plot's top right corner."""
    parts = []
    for index, name in enumerate((str(MessageClass.LOST), str(MessageClass.DEAD_LETTERED))):
        x = plot.right - 220 + index * 100
        parts.append(f'<rect class="legend" x="{x}" y="{plot.top - 26}" width="10" height="10" '
                     f'fill="{CLASS_COLOURS[name]}"/><text x="{x + 14}" y="{plot.top - 17}">'
                     f"{name}</text>")
    return "".join(parts)


def _hour_labels(hours: Sequence[datetime], plot: _Plot, slot: float) -> str:
    """Ticks and ``MM-DD HH:00`` labels on at most about 8 hours, at round hours."""
    every = next((step for step in (1, 2, 3, 6, 12) if -(-len(hours) // step) <= 8), 24)
    parts = []
    for index, hour in enumerate(hours):
        if hour.hour % every:
            continue
        x = plot.left + slot * (index + 0.5)
        parts.append(f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{plot.bottom}" '
                     f'y2="{plot.bottom + 4}"/><text class="hour" x="{x:.1f}" '
                     f'y="{plot.bottom + 17}" text-anchor="middle">{hour:%m-%d %H}:00</text>')
    parts.append(f'<text x="{plot.left + plot.width / 2:.0f}" y="{plot.bottom + 34}" '
                 'text-anchor="middle">hour (UTC)</text>')
    return "".join(parts)


def _queue_label(lag: QueueLag) -> str:
    """``topic / group / q<id>``: how a queue is named in the chart and the table."""
    return f"{lag.topic} / {lag.consumer_group} / q{lag.queue_id}"


def _sorted_lag(rows: Iterable[QueueLag]) -> list[QueueLag]:
    """Largest lag first; ties by topic, group, queue so the order is stable."""
    return sorted(rows, key=lambda q: (-q.lag, str(q.topic), str(q.consumer_group), q.queue_id))


def _shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (escape after, never before)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _lag_chart(summary: ReconcileSummary) -> str:
    """Horizontal bars of the largest consumer lags, largest first."""
    caption = f"Consumer lag per queue (largest {LAG_BARS_LIMIT})"
    rows = _sorted_lag(summary.lag)[:LAG_BARS_LIMIT]
    if not rows:
        return _figure("lag-per-queue", caption, _no_data(caption, "no consumer offsets"))
    row_height = 20
    plot = _Plot(left=320, top=30, width=_CHART_WIDTH - 410, height=row_height * len(rows))
    scale = _scale(rows[0].lag)
    parts = [_x_grid(scale, plot)]
    for index, row in enumerate(rows):
        label = _queue_label(row)
        y = plot.top + row_height * index + 3
        width = scale.length(row.lag, plot.width)
        parts.append(
            f'<text class="label" x="{plot.left - 8}" y="{y + 11}" text-anchor="end">'
            f"{_esc(_shorten(label, 48))}</text>"
            f'<rect class="bar" data-queue="{_esc(label)}" x="{plot.left}" y="{y}" '
            f'width="{width:.1f}" height="{row_height - 6}" fill="{LAG_COLOUR}">'
            f"<title>{_esc(label)}: {_num(row.lag)}</title></rect>"
            f'<text class="value" x="{plot.left + width + 6:.1f}" y="{y + 11}">'
            f"{_num(row.lag)}</text>")
    return _figure("lag-per-queue", caption, _svg(plot.bottom + 16, caption, parts))


# -- tables ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Column:
    """A table column: its title, whether it is right-aligned, and its cell's HTML for a row."""

    title: str
    cell: Callable[[Any], str]
    numeric: bool = False


def _text(get: Callable[[Any], object], css: str = "") -> Callable[[Any], str]:
    """A cell of escaped text (in a ``span`` of class ``css`` when given)."""
    if css:
        return lambda row: f'<span class="{css}">{_esc(get(row))}</span>'
    return lambda row: _esc(get(row))


def _number(title: str, get: Callable[[Any], int | None], dim_zero: bool = False) -> _Column:
    """A right-aligned column of integers (empty when unknown)."""
    def cell(row: Any) -> str:
        value = get(row)
        if value is None:
            return ""
        return '<span class="zero">0</span>' if dim_zero and not value else _num(value)
    return _Column(title, cell, numeric=True)


def _table(columns: Sequence[_Column], rows: Sequence[Any], empty: str = "None.") -> str:
    """``rows`` as a table (at most ``TABLE_ROWS_LIMIT``, then a "…and N more" line)."""
    if not rows:
        return f'<p class="empty">{_esc(empty)}</p>'
    align = [' class="num"' if column.numeric else "" for column in columns]
    head = "".join(f"<th{a}>{_esc(c.title)}</th>" for a, c in zip(align, columns, strict=True))
    body = "\n".join(
        "<tr>" + "".join(f"<td{a}>{c.cell(row)}</td>" for a, c in zip(align, columns, strict=True))
        + "</tr>" for row in rows[:TABLE_ROWS_LIMIT])
    more = len(rows) - TABLE_ROWS_LIMIT
    return (f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"
            + (f'<p class="more">…and {_num(more)} more</p>' if more > 0 else ""))


def _class_name(name: object) -> str:
    """A class name with its colour swatch."""
    colour = CLASS_COLOURS.get(str(name), "#000")
    return f'<span class="swatch" style="background:{colour}"></span>{_esc(name)}'


def _counts_table(summary: ReconcileSummary) -> str:
    """Each class's count, its share of the stubs, and its threshold."""
    stubs = summary.stubs

    def share(name: str) -> str:
        count = summary.counts.get(name, 0)
        return f"{100 * count / stubs:.1f} %" if stubs and name in STUB_CLASSES else "—"

    return _table([
        _Column("Class", _class_name),
        _number("Count", lambda name: summary.counts.get(name, 0)),
        _Column("% of stubs", share, numeric=True),
        _number("Threshold", summary.thresholds.get),
        _Column("", lambda name: '<span class="exceeded">exceeded</span>'
                if name in summary.exceeded else ""),
    ], [str(name) for name in ALL_CLASSES])


def _class_cell(name: str) -> Callable[[Any], int]:
    """The count of class ``name`` in a pivot row."""
    return lambda item: item[1].get(name, 0)


def _pivot(rows: Iterable[ClassCount], key: Callable[[ClassCount], str | None],
           title: str) -> str:
    """``key`` rows × class columns, with a total; largest totals first."""
    cells: dict[str, dict[str, int]] = {}
    for row in rows:
        name = key(row)
        per_class = cells.setdefault("(none)" if name is None else str(name), {})
        per_class[str(row.classification)] = per_class.get(str(row.classification), 0) + row.count
    ordered = sorted(cells.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    return _table([
        _Column(title, _text(lambda item: item[0])),
        *(_number(str(name), _class_cell(str(name)), dim_zero=True) for name in ALL_CLASSES),
        _number("total", lambda item: sum(item[1].values())),
    ], ordered)


def _tables(summary: ReconcileSummary) -> str:
    """Every table of the report, each in its own section."""
    resends = sorted(summary.resends, key=lambda r: (-r.resends, str(r.topic)))
    retries = sorted(summary.retries,
                     key=lambda r: (-r.dead_letters, -r.retry_messages, str(r.consumer_group)))
    topic, group = _text(lambda r: r.topic), _text(lambda r: r.consumer_group)
    return "\n".join([
        _section("counts", "Counts per class", _counts_table(summary)),
        _section("by-topic", "By topic", _pivot(summary.by_topic, lambda r: r.topic, "Topic")),
        _section("by-group", "By consumer group",
                 _pivot(summary.by_group, lambda r: r.consumer_group, "Consumer group")),
        _section("resends", "Resends per topic", _table([
            _Column("Topic", topic), _number("Stubs", lambda r: r.stubs),
            _number("Resent stubs", lambda r: r.resent_stubs),
            _number("Resends", lambda r: r.resends),
            _number("Most sends", lambda r: r.send_count_max)], resends)),
        _section("retries", "Retries and dead letters per consumer group", _table([
            _Column("Consumer group", group),
            _number("%RETRY% messages", lambda r: r.retry_messages),
            _number("%DLQ% messages", lambda r: r.dead_letters)], retries)),
        _section("lag", "Consumer lag per queue", _table([
            _Column("Topic", topic), _Column("Consumer group", group),
            _number("Queue", lambda q: q.queue_id),
            _number("Committed offset", lambda q: q.committed_offset),
            _number("Max offset", lambda q: q.max_offset),
            _number("Lag", lambda q: q.lag)], _sorted_lag(summary.lag))),
        _section("samples", "Samples", _table([
            _Column("Class", lambda s: _class_name(s.classification)),
            _Column("Message id", _text(lambda s: s.message_id, "mono")),
            _Column("Topic", topic), _Column("Consumer group", group),
            _number("Queue", lambda s: s.queue_id),
            _number("Offset", lambda s: s.queue_offset),
            _Column("Detail", _text(lambda s: s.detail, "detail"))], summary.samples)),
        _section("problems", "Store problems", _table([
            _Column("File", _text(lambda p: p.file, "mono")),
            _number("Position", lambda p: p.position),
            _Column("Reason", _text(lambda p: p.reason))], summary.problems,
            "None: every store file was read completely.")),
    ])


__all__ = ["CLASS_COLOURS", "HOURS_LIMIT", "LAG_BARS_LIMIT", "LAG_COLOUR", "TABLE_ROWS_LIMIT",
           "render_report"]
