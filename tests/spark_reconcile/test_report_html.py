"""The HTML report: charts, tables, banners, escaping, no network — and a real render.

Summaries are built by hand (no Spark). The page is read back with :mod:`html.parser`; the last
tests open it in headless Chromium, decode the screenshot in pure Python and read the DOM dump.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from html.parser import HTMLParser
from itertools import accumulate, repeat
from operator import and_
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.spark_reconcile.classes import ALL_CLASSES, MessageClass
from postbox.spark_reconcile.report_html import CLASS_COLOURS, LAG_COLOUR, render_report
from postbox.spark_reconcile.results import (
    ClassCount,
    GroupRetries,
    QueueLag,
    ReconcileSummary,
    Sample,
    StoreProblem,
    TopicResends,
)

AS_OF = datetime(2024, 5, 1, 12, 0)
CHARTS = ("status-breakdown", "lost-over-time", "lag-per-queue")
EVIL = "<script>alert(1)</script>"
LOST = str(MessageClass.LOST)
DEAD = str(MessageClass.DEAD_LETTERED)


# -- reading the page back ------------------------------------------------------------------


@dataclass
class Figure:
    """What one ``<figure data-chart=…>`` holds."""

    attrs: dict[str, str | None]
    elements: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    text: str = ""

    def rects(self, css_class: str) -> list[dict[str, str | None]]:
        return [a for tag, a in self.elements
                if tag == "rect" and css_class in (a.get("class") or "").split()]

    def count(self, tag: str) -> int:
        return sum(1 for name, _ in self.elements if name == tag)


class Page(HTMLParser):
    """Every start tag of a document, its words, and its chart figures."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.figures: dict[str, Figure] = {}
        self.text = ""
        self._figure: Figure | None = None
        self.feed(document)
        self.close()
        self.text = " ".join(self.text.split())
        for figure in self.figures.values():
            figure.text = " ".join(figure.text.split())

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        self.handle_data(" ")  # cells and list items read as separate words
        if tag == "figure":
            self._figure = Figure(attributes)
            self.figures[attributes.get("data-chart") or ""] = self._figure
        elif self._figure is not None:
            self._figure.elements.append((tag, attributes))

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._figure = None

    def handle_data(self, data: str) -> None:
        self.text += data
        if self._figure is not None:
            self._figure.text += data

    def by_id(self, element_id: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.tags if a.get("id") == element_id]


# -- summaries ------------------------------------------------------------------------------


def empty_summary(**changes: object) -> ReconcileSummary:
    return ReconcileSummary(as_of=AS_OF, grace_ms=300_000, **changes)  # type: ignore[arg-type]


def counts(**values: int) -> dict[str, int]:
    return {str(name): values.get(str(name), 0) for name in ALL_CLASSES}


def full_summary(**changes: object) -> ReconcileSummary:
    """Every part filled; ``orphan_log`` is the only class with a zero count."""
    values = dict(
        counts=counts(confirmed=6_000, in_flight=4_200, pending=3_100, lost=5_200,
                      dead_lettered=2_500, exhausted=3_900, dlq_without_stub=1_800),
        thresholds={LOST: 10_000, DEAD: 10_000},
        by_topic=[ClassCount(str(c), 100 + i, topic=f"orders.{i}")
                  for i in range(3) for c in ALL_CLASSES],
        by_group=[ClassCount(str(c), 50 + i, consumer_group=f"billing-{i}")
                  for i in range(2) for c in ALL_CLASSES],
        by_hour=[ClassCount(name, 10 + h, hour=AS_OF - timedelta(hours=h))
                 for h in range(30) for name in (LOST, DEAD, "confirmed")],
        lag=[QueueLag(f"orders.{i % 3}", f"billing-{i % 2}", i, 0, 1_000 * (i + 1))
             for i in range(24)],
        resends=[TopicResends("orders.0", 1_000, 12, 30, 5)],
        retries=[GroupRetries("billing-0", 40, 3)],
        samples=[Sample(LOST, "AC11000000000001", "orders.0", "billing-0", 3, 17,
                        "group past offset for 12 min")],
        inputs={"store": "/data/store", "database": "postgresql://postbox:s3cret@db/postbox",
                "stub_rows": 1_234_567},
        duration_s=42.5,
    )
    values.update(changes)
    return empty_summary(**values)


# -- structure ------------------------------------------------------------------------------


def test_every_chart_is_a_figure_holding_one_svg() -> None:
    page = Page(render_report(full_summary()))

    assert sorted(page.figures) == sorted(CHARTS)
    for chart, figure in page.figures.items():
        assert figure.attrs["id"] == chart
        assert figure.count("svg") == 1
        assert "no data" not in figure.text


def test_status_breakdown_has_one_bar_per_class_in_order_with_its_colour_and_count() -> None:
    summary = full_summary(counts=counts(confirmed=1_234_567, lost=89, orphan_log=1))
    figure = Page(render_report(summary)).figures["status-breakdown"]

    bars = figure.rects("bar")
    assert [bar["data-class"] for bar in bars] == [str(name) for name in ALL_CLASSES]
    assert [bar["fill"] for bar in bars] == [CLASS_COLOURS[name] for name in ALL_CLASSES]
    assert {"1,234,567", "89", "1", "0"} <= set(figure.text.split())
    assert float(bars[0]["height"] or 0) > float(bars[4]["height"] or 0) >= 2


def test_status_breakdown_scales_zero_and_ten_million() -> None:
    summary = empty_summary(counts=counts(lost=10_000_000, confirmed=1))
    document = render_report(summary)
    bars = {bar["data-class"]: bar for bar in Page(document).figures["status-breakdown"]
            .rects("bar")}

    heights = {name: float(bar["height"] or "nan") for name, bar in bars.items()}
    assert heights[LOST] == max(heights.values()) > 100
    assert heights["confirmed"] >= 2  # a non-zero count stays visible
    assert heights["pending"] == 0
    assert "10,000,000" in document
    assert not re.search(r"\b(nan|inf)\b", document)


def test_lost_over_time_marks_the_given_hours_of_lost_and_dead_lettered_only() -> None:
    hour = datetime(2024, 4, 30, 22)
    rows = [ClassCount(LOST, 5, hour=hour), ClassCount(LOST, 7, hour=hour + timedelta(hours=3)),
            ClassCount(DEAD, 2, hour=hour + timedelta(hours=3, minutes=20)),
            ClassCount("confirmed", 900, hour=hour + timedelta(hours=1))]
    figure = Page(render_report(empty_summary(by_hour=rows))).figures["lost-over-time"]

    marks = {(m["data-class"], m["data-hour"]) for m in figure.rects("mark")}
    assert marks == {(LOST, "2024-04-30T22:00"), (LOST, "2024-05-01T01:00"),
                     (DEAD, "2024-05-01T01:00")}
    assert {"04-30 22:00", "05-01 01:00"} <= set(re.findall(r"\d\d-\d\d \d\d:00", figure.text))
    fills = {m["data-class"]: m["fill"] for m in figure.rects("mark")}
    assert fills == {LOST: CLASS_COLOURS[LOST], DEAD: CLASS_COLOURS[DEAD]}


def test_lost_over_time_keeps_the_latest_168_hours() -> None:
    rows = [ClassCount(LOST, 1, hour=AS_OF - timedelta(hours=h)) for h in range(300)]
    figure = Page(render_report(empty_summary(by_hour=rows))).figures["lost-over-time"]

    hours = sorted(m["data-hour"] or "" for m in figure.rects("mark"))
    assert len(hours) == 168
    assert hours[-1] == "2024-05-01T12:00"
    assert hours[0] == (AS_OF - timedelta(hours=167)).isoformat(timespec="minutes")


def test_lag_bars_are_sorted_largest_first_and_capped_at_50() -> None:
    lags = [(i * 7_919) % 1_000 for i in range(80)]
    rows = [QueueLag("t", "g", i, 10, 10 + lag) for i, lag in enumerate(lags)]
    figure = Page(render_report(empty_summary(lag=rows))).figures["lag-per-queue"]

    bars = figure.rects("bar")
    expected = sorted(range(80), key=lambda i: (-lags[i], i))[:50]
    assert [bar["data-queue"] for bar in bars] == [f"t / g / q{i}" for i in expected]
    widths = [float(bar["width"] or 0) for bar in bars]
    assert widths == sorted(widths, reverse=True)
    assert {bar["fill"] for bar in bars} == {LAG_COLOUR}


def test_lag_table_lists_500_queues_and_counts_the_rest() -> None:
    rows = [QueueLag("t", "g", i, 0, i) for i in range(503)]
    page = Page(render_report(empty_summary(lag=rows)))

    assert "…and 3 more" in page.text
    assert len(page.figures["lag-per-queue"].rects("bar")) == 50


def test_empty_summary_renders_no_data_in_every_chart() -> None:
    page = Page(render_report(empty_summary()))

    assert sorted(page.figures) == sorted(CHARTS)
    for figure in page.figures.values():
        assert figure.count("svg") == 1
        assert "no data" in figure.text
        assert figure.rects("bar") == figure.rects("mark") == []


# -- safety ---------------------------------------------------------------------------------


def test_strings_from_the_data_are_escaped() -> None:
    summary = full_summary(
        by_topic=[ClassCount(LOST, 3, topic=EVIL)],
        by_group=[ClassCount(LOST, 3, consumer_group='g"><img src=x onerror=alert(2)>')],
        lag=[QueueLag(EVIL, "g&co", 1, 0, 9)],
        resends=[TopicResends(EVIL, 1, 1, 1, 2)],
        retries=[GroupRetries(EVIL, 1, 1)],
        samples=[Sample(LOST, EVIL, EVIL, EVIL, None, None, EVIL)],
        problems=[StoreProblem(EVIL, EVIL, 1)], complete=False,
        exceeded=[EVIL], inputs={EVIL: EVIL},
    )
    document = render_report(summary)
    page = Page(document)

    assert EVIL not in document
    assert "<img" not in document
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in document
    assert not [tag for tag, _ in page.tags if tag in ("script", "img")]
    bar = page.figures["lag-per-queue"].rects("bar")[0]
    assert bar["data-queue"] == f"{EVIL} / g&co / q1"


@settings(max_examples=40, deadline=None)
@given(topic=st.text(max_size=30), group=st.text(max_size=10))
def test_any_topic_round_trips_through_the_page(topic: str, group: str) -> None:
    summary = empty_summary(lag=[QueueLag(topic, group, 0, 0, 1)],
                            by_topic=[ClassCount(LOST, 1, topic=topic)])
    page = Page(render_report(summary))
    plain = Page(render_report(empty_summary(lag=[QueueLag("t", "g", 0, 0, 1)],
                                             by_topic=[ClassCount(LOST, 1, topic="t")])))

    assert page.figures["lag-per-queue"].rects("bar")[0]["data-queue"] == f"{topic} / {group} / q0"
    assert [tag for tag, _ in page.tags] == [tag for tag, _ in plain.tags]


def test_document_has_no_external_url_or_resource() -> None:
    document = render_report(full_summary(complete=False, exceeded=[LOST],
                                          problems=[StoreProblem("cq/0", "short read", 8)]))

    assert re.search(r"https?://", document) is None
    assert re.search(r"<(script|link|img|iframe)\b|@import|url\(|\bsrc=", document) is None
    assert "xmlns" not in document


# -- banners --------------------------------------------------------------------------------


@pytest.mark.parametrize("complete", [True, False])
def test_incomplete_banner_iff_some_file_was_not_read(complete: bool) -> None:
    problems = [] if complete else [StoreProblem("commitlog/00000000001073741824", "torn", 4_096)]
    page = Page(render_report(full_summary(complete=complete, problems=problems)))

    assert len(page.by_id("incomplete-banner")) == (0 if complete else 1)
    if not complete:
        assert "INCOMPLETE" in page.text
        assert "commitlog/00000000001073741824 at position 4,096: torn" in page.text
        assert "misses what these files held" in page.text


@pytest.mark.parametrize("exceeded", [[], [LOST, DEAD]])
def test_threshold_banner_iff_a_class_is_over_its_threshold(exceeded: list[str]) -> None:
    thresholds = {LOST: 0, DEAD: 100} if exceeded else {LOST: 10_000}
    page = Page(render_report(full_summary(thresholds=thresholds, exceeded=exceeded)))

    assert len(page.by_id("threshold-banner")) == (1 if exceeded else 0)
    assert len(page.by_id("ok-banner")) == (0 if exceeded else 1)
    if exceeded:
        assert "lost: 5,200 (threshold 0)" in page.text
        assert "dead_lettered: 2,500 (threshold 100)" in page.text
    else:
        assert "All classes within thresholds" in page.text


# -- header and tables ----------------------------------------------------------------------


def test_header_shows_the_run_and_its_inputs_without_passwords() -> None:
    page = Page(render_report(full_summary()))

    assert "Postbox reconciliation" in page.text
    for fact in ("2024-05-01 12:00:00 UTC", "5 min (300,000 ms)", "24,900", "42.5 s",
                 "postgresql://postbox:***@db/postbox", "1,234,567"):
        assert fact in page.text
    assert "s3cret" not in page.text


def test_tables_show_shares_pivots_and_every_list() -> None:
    page = Page(render_report(full_summary()))
    text = page.text

    assert "confirmed 6,000 24.1 % dead_lettered 2,500 10.0 % 10,000" in text
    assert "lost 5,200 20.9 % 10,000 pending" in text
    assert "orphan_log 0 — dlq_without_stub 1,800 —" in text
    assert "orders.2 102 102 102 102 102 102 102 102 816" in text
    assert "billing-1 51 51 51 51 51 51 51 51 408" in text
    assert "orders.0 1,000 12 30 5" in text
    assert "billing-0 40 3" in text
    assert "AC11000000000001 orders.0 billing-0 3 17 group past offset for 12 min" in text
    assert "every store file was read completely" in text


# -- a real browser -------------------------------------------------------------------------


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


@dataclass(frozen=True)
class Rendered:
    png: Path
    dom: str


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    """The full summary's page screenshotted and DOM-dumped by headless Chromium (in parallel)."""
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium: none of chromium, chromium-browser, google-chrome on PATH")
    tmp = tmp_path_factory.mktemp("report")
    page = tmp / "report.html"
    page.write_text(render_report(full_summary()), encoding="utf-8")
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    shot = subprocess.Popen(
        [*common, "--window-size=1280,2200", f"--screenshot={tmp / 'report.png'}",
         f"--user-data-dir={tmp / 'profile'}", page.as_uri()],
        cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dump = subprocess.Popen(
        [*common, f"--user-data-dir={tmp / 'profile-dom'}", "--dump-dom", page.as_uri()],
        cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        dom, dump_err = dump.communicate(timeout=60)
        _, shot_err = shot.communicate(timeout=60)
    finally:
        for process in (shot, dump):
            process.kill()
    assert dump.returncode == 0, dump_err.decode(errors="replace")[-2000:]
    assert shot.returncode == 0, shot_err.decode(errors="replace")[-2000:]
    return Rendered(tmp / "report.png", dom.decode("utf-8"))


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit RGB or RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    position, chunks, compressed = 8, {}, bytearray()
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        (crc,) = struct.unpack(">I", data[position + 8 + length:position + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        if kind == b"IDAT":
            compressed += body
        chunks.setdefault(kind, body)
        position += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, interlace) == (8, 0) and colour in (2, 6) and b"IEND" in chunks
    pixel = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(bytes(compressed)), width * pixel
    assert len(raw) == height * (stride + 1)
    rows, prior = [], bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        line = unfilter(raw[start], raw[start + 1:start + 1 + stride], prior, pixel)
        prior = line
        rows.append(line if pixel == 3 else drop_alpha(line))
    return width, height, rows


def drop_alpha(line: bytes) -> bytes:
    out = bytearray(len(line) // 4 * 3)
    for channel in range(3):
        out[channel::3] = line[channel::4]
    return bytes(out)


def unfilter(kind: int, line: bytes, prior: bytes, pixel: int) -> bytes:
    """One scanline with its PNG filter (0 none, 1 sub, 2 up, 3 average, 4 Paeth) undone."""
    if kind == 0:
        return line
    if kind == 1:
        out = bytearray(len(line))
        for channel in range(pixel):
            out[channel::pixel] = bytes(map(and_, accumulate(line[channel::pixel]), repeat(255)))
        return bytes(out)
    if kind == 2:  # bytewise add without carries between bytes, on whole rows at once
        a, b = int.from_bytes(line, "big"), int.from_bytes(prior, "big")
        low = int.from_bytes(b"\x7f" * len(line), "big")
        return (((a & low) + (b & low)) ^ ((a ^ b) & ~low)).to_bytes(len(line), "big")
    out = bytearray(line)
    for i in range(len(out)):
        left = out[i - pixel] if i >= pixel else 0
        up, corner = prior[i], (prior[i - pixel] if i >= pixel else 0)
        if kind == 3:
            out[i] = (out[i] + (left + up) // 2) & 0xFF
            continue
        to_left, to_up = abs(up - corner), abs(left - corner)
        to_corner = abs(left + up - 2 * corner)
        if to_left <= to_up and to_left <= to_corner:
            predicted = left
        else:
            predicted = up if to_up <= to_corner else corner
        out[i] = (out[i] + predicted) & 0xFF
    return bytes(out)


def rgb(colour: str) -> tuple[int, int, int]:
    value = int(colour.lstrip("#"), 16)
    return value >> 16, (value >> 8) & 0xFF, value & 0xFF


def pixels_near(histogram: Counter[tuple[int, int, int]], colour: str, tolerance: int = 3) -> int:
    target = rgb(colour)
    return sum(n for pixel, n in histogram.items()
               if all(abs(p - t) <= tolerance for p, t in zip(pixel, target, strict=True)))


def test_unfilter_undoes_every_png_filter() -> None:
    assert unfilter(0, b"\x01\x02", b"\x09\x09", 1) == b"\x01\x02"
    assert unfilter(1, bytes([1, 2, 255]), bytes(3), 1) == bytes([1, 3, 2])
    assert unfilter(2, bytes([200, 1]), bytes([100, 2]), 1) == bytes([44, 3])
    assert unfilter(3, bytes([1, 2]), bytes([10, 20]), 1) == bytes([6, 15])
    assert unfilter(4, bytes([5, 3]), bytes([10, 20]), 1) == bytes([15, 23])  # up, up
    assert unfilter(4, bytes([7, 1]), bytes([0, 0]), 1) == bytes([7, 8])  # left
    assert unfilter(4, bytes([251, 1]), bytes([15, 20]), 1) == bytes([10, 16])  # up, corner
    line, prior = bytes(range(7, 256, 8)), bytes(range(255, 0, -8))
    assert unfilter(1, line, prior, 4) == bytes(sum(line[i::-4]) & 0xFF for i in range(len(line)))
    added = bytes((a + b) & 0xFF for a, b in zip(line, prior, strict=True))
    assert unfilter(2, line, prior, 4) == added


def test_screenshot_is_a_png_that_shows_the_class_colours(rendered: Rendered) -> None:
    width, height, rows = decode_png(rendered.png.read_bytes())
    histogram: Counter[tuple[int, int, int]] = Counter()
    for row in rows:
        histogram.update(zip(row[0::3], row[1::3], row[2::3], strict=True))

    assert (width, height) == (1280, 2200)
    white = sum(n for pixel, n in histogram.items() if min(pixel) >= 245)
    assert 1 - white / (width * height) > 0.05, "the screenshot is (nearly) blank"
    summary = full_summary()
    for name in ALL_CLASSES:
        found = pixels_near(histogram, CLASS_COLOURS[name])
        if summary.counts[name]:
            assert found > 500, f"{name} bar ({CLASS_COLOURS[name]}) not in the screenshot"
    assert pixels_near(histogram, LAG_COLOUR) > 500


def test_rendered_dom_has_every_chart_and_its_bars(rendered: Rendered) -> None:
    page = Page(rendered.dom)

    assert sorted(page.figures) == sorted(CHARTS)
    bars = page.figures["status-breakdown"].rects("bar")
    assert [bar["data-class"] for bar in bars] == [str(name) for name in ALL_CLASSES]
    assert len(page.figures["lost-over-time"].rects("mark")) == 60
    assert len(page.figures["lag-per-queue"].rects("bar")) == 24
    assert page.by_id("ok-banner")
