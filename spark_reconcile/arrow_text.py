"""Text of whole Arrow columns, as a row-at-a-time function would write one value: a rule's
detail (``rules.spark_text`` of each value, the template filled column-wise) and a field of
``classification.csv`` as Spark's CSV writer writes it (``escape='"'``). Used by the Python
engine, which classifies columns, not rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from .rules import DEFAULT_TEXT

Column: TypeAlias = pa.Array | pa.ChunkedArray

_TEMPLATE_TOKEN = re.compile(r"(%%|%s)")
_CSV_SPECIAL = r'[,"\n\r]'


def spark_text(column: Column, default: str | None = None) -> Column:
    """Every value of ``column`` as ``rules.spark_text`` writes one: times
    ``YYYY-MM-DD HH:MM:SS[.ffffff]`` without trailing zeros, numbers in decimal, a null as
    ``default`` (``null`` without one)."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        # "…:05.123400" -> "…:05.1234", "…:10.000000" -> "…:10" (the dot stops the zeros)
        text = pc.ascii_rtrim(pc.ascii_rtrim(_iso_micros(column), characters="0"),
                              characters=".")
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = column
    else:
        text = column.cast(pa.string())
    return pc.fill_null(text, "null" if default is None else default)


def fill_template(template: str, names: tuple[str, ...], values: Mapping[str, Column],
                  length: int) -> Column:
    """``template % values`` for every row: ``%s`` takes the next name's text (with its
    ``DEFAULT_TEXT``), ``%%`` is a literal ``%``."""
    parts: list[Column | str] = []
    pending = iter(names)
    for token in _TEMPLATE_TOKEN.split(template):
        if token == "%s":
            name = next(pending)
            parts.append(spark_text(values[name], DEFAULT_TEXT.get(name)))
        elif token:
            parts.append("%" if token == "%%" else token)
    if not any(isinstance(part, pa.Array | pa.ChunkedArray) for part in parts):
        return pa.array(["".join(parts)] * length, pa.string())
    return pc.binary_join_element_wise(*parts, "")


def csv_text(column: Column) -> Column:
    """Every value of ``column`` as a field of Spark's CSV: times
    ``YYYY-MM-DDTHH:MM:SS.mmm``, text quoted when empty or holding ``,`` ``"`` or a line
    break (quotes doubled), a null as nothing."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        text = pc.utf8_replace_slice(pc.utf8_slice_codeunits(_iso_micros(column), 0, 23),
                                     start=10, stop=11, replacement="T")
    elif pa.types.is_string(kind):
        quoted = pc.binary_join_element_wise(
            '"', pc.replace_substring(column, pattern='"', replacement='""'), '"', "")
        needs = pc.or_(pc.equal(column, ""), pc.match_substring_regex(column, _CSV_SPECIAL))
        text = pc.if_else(needs, quoted, column)
    else:
        text = column.cast(pa.string())
    return pc.fill_null(text, "")


def as_array(column: Column) -> pa.Array:
    """``column`` as one array (a chunked one's chunks joined)."""
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _iso_micros(column: Column) -> Column:
    """``YYYY-MM-DD HH:MM:SS.ffffff`` (Arrow's cast: far faster than ``strftime``)."""
    return column.cast(pa.timestamp("us")).cast(pa.string())


__all__ = ["Column", "as_array", "csv_text", "fill_template", "spark_text"]
