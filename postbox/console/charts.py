"""Server-side SVG charts: a line chart of a few series, and a horizontal gauge. No script."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH = 640
HEIGHT = 180
MARGIN = 30
PALETTE = ("#2b6cb0", "#c53030", "#2f855a", "#b7791f", "#6b46c1", "#4a5568")


def line_chart(labels: Sequence[str], series: dict[str, Sequence[float]],
               title: str) -> str:
    """Lines over the ``labels`` (x), one per series, with a legend; an empty chart says so."""
    points = max((len(values) for values in series.values()), default=0)
    top = max((max(values, default=0) for values in series.values()), default=0) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">',
             f'<title>{escape(title)}</title>',
             f'<text x="{MARGIN}" y="14" font-size="12">{escape(title)} (max {top:g})</text>',
             f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - 10}" '
             f'y2="{HEIGHT - MARGIN}" stroke="#999"/>']
    if points == 0:
        parts.append(f'<text x="{MARGIN}" y="{HEIGHT // 2}" font-size="12">no data</text>')
    step = (WIDTH - MARGIN - 20) / max(points - 1, 1)
    for index, (name, values) in enumerate(series.items()):
        color = PALETTE[index % len(PALETTE)]
        xy = [(MARGIN + i * step, HEIGHT - MARGIN - (value / top) * (HEIGHT - MARGIN - 24))
              for i, value in enumerate(values)]
        if xy:
            coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                         f'points="{coords}"/>')
            parts.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>'
                         for x, y in xy[-40:])
        parts.append(f'<text x="{MARGIN + index * 110}" y="{HEIGHT - 8}" font-size="11" '
                     f'fill="{color}">{escape(name)}</text>')
    if labels:
        parts.append(f'<text x="{WIDTH - 10}" y="{HEIGHT - MARGIN + 12}" font-size="10" '
                     f'text-anchor="end">{escape(labels[-1])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def gauge(used_ratio: float, marks: dict[str, float], title: str) -> str:
    """A bar filled to ``used_ratio`` (0–1) with a tick per watermark (name → ratio)."""
    width = WIDTH - 2 * MARGIN
    fill = max(min(used_ratio, 1.0), 0.0)
    alarm = any(fill >= ratio for ratio in marks.values())
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="gauge" role="img" '
             f'viewBox="0 0 {WIDTH} 60" width="{WIDTH}" height="60">',
             f'<title>{escape(title)}</title>',
             f'<rect x="{MARGIN}" y="18" width="{width}" height="14" fill="#edf2f7"/>',
             f'<rect x="{MARGIN}" y="18" width="{width * fill:.1f}" height="14" '
             f'fill="{"#c53030" if alarm else "#2f855a"}"/>',
             f'<text x="{MARGIN}" y="12" font-size="12">{escape(title)}: '
             f'{fill * 100:.1f}% used</text>']
    for name, ratio in marks.items():
        x = MARGIN + width * ratio
        parts.append(f'<line x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="36" stroke="#333"/>'
                     f'<text x="{x:.1f}" y="{46 + 9 * (len(parts) % 2)}" font-size="10" '
                     f'text-anchor="middle">{escape(name)} {ratio * 100:.0f}%</text>')
    parts.append("</svg>")
    return "".join(parts)
