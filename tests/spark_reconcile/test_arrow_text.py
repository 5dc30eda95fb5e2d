"""Column-wise text (``arrow_text``) against the value-at-a-time definitions it replaces: a
detail's values as ``rules.spark_text`` writes them, templates as ``%`` fills them, and CSV
fields as Spark's CSV writer writes them."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.spark_reconcile.arrow_text import csv_text, fill_template, spark_text
from postbox.spark_reconcile.rules import DEFAULT_TEXT, GROUP_DETAILS, STUB_DETAILS
from postbox.spark_reconcile.rules import spark_text as spark_text_of_one

TIMES = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1))
TEXTS = st.text(alphabet=st.sampled_from('ab,"\n\r x%é'), max_size=8)


def spark_csv_field(value: object) -> str:
    """One field of Spark's CSV (``escape='"'``), the definition ``csv_text`` follows."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    text = str(value)
    if text == "" or any(mark in text for mark in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | TIMES), st.lists(st.none() | TEXTS),
       st.lists(st.none() | st.integers(-2**40, 2**40)))
def test_values_are_written_as_one_at_a_time(times, texts, numbers) -> None:
    for values, kind in ((times, pa.timestamp("us")), (texts, pa.string()),
                         (numbers, pa.int64())):
        column = pa.array(values, kind)
        assert spark_text(column).to_pylist() == [spark_text_of_one(v) for v in values]
        assert spark_text(column, "none").to_pylist() == [
            spark_text_of_one(v, "none") for v in values]
        assert csv_text(column).to_pylist() == [spark_csv_field(v) for v in values]


def test_whole_seconds_and_trailing_zeros_are_cut_like_isoformat() -> None:
    values = [datetime(2026, 1, 2, 3, 4, 10), datetime(2026, 1, 2, 3, 4, 0, 100_000),
              datetime(2026, 1, 2, 3, 4, 5, 123_400), datetime(2026, 1, 2, 3, 4, 5, 1)]
    assert spark_text(pa.array(values, pa.timestamp("us"))).to_pylist() == [
        "2026-01-02 03:04:10", "2026-01-02 03:04:00.1", "2026-01-02 03:04:05.1234",
        "2026-01-02 03:04:05.000001"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.none() | TEXTS, st.none() | st.integers(0, 99), st.none() | TIMES),
                min_size=1, max_size=5))
def test_every_detail_template_fills_like_the_percent_operator(rows) -> None:
    for detail in STUB_DETAILS + GROUP_DETAILS:
        kinds = {name: (pa.int64() if name in ("send_count", "queue_offset", "delay_level",
                                               "committed_offset", "past_committed")
                        else pa.timestamp("us") if name in ("since", "confirmed_at")
                        else pa.string()) for name in detail.values}
        pick = {pa.int64(): 1, pa.timestamp("us"): 2, pa.string(): 0}
        columns = {name: pa.array([row[pick[kind]] for row in rows], kind)
                   for name, kind in kinds.items()}
        expected = [detail.template % tuple(
            spark_text_of_one(row[pick[kinds[name]]], DEFAULT_TEXT.get(name))
            for name in detail.values) for row in rows]
        found = fill_template(detail.template, detail.values, columns, len(rows))
        assert found.to_pylist() == expected, detail.template
