"""The shared classification rules (``rules``) as Spark columns."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from .classes import MessageClass
from .rules import ALWAYS, DEFAULT_TEXT, Detail


def rule_column(rules: tuple[tuple[MessageClass, str], ...], holds: dict[str, Column]
                ) -> Column:
    """The class of the first rule (``rules``) whose condition (``holds``) is true."""
    chain = None
    for classification, condition in rules:
        if condition == ALWAYS:
            assert chain is not None
            return chain.otherwise(classification.value)
        chain = (F.when(holds[condition], classification.value) if chain is None
                 else chain.when(holds[condition], classification.value))
    raise AssertionError("a rule set ends with ALWAYS")


def detail_column(details: tuple[Detail, ...], holds: dict[str, Column],
                  values: dict[str, Column]) -> Column:
    """The first matching detail (``details``) of each row's class, as Spark text."""
    kind = F.col("classification")
    chain = None
    for detail in details:
        when = kind == detail.classification.value
        if detail.condition != ALWAYS:
            when = when & holds[detail.condition]
        text = (F.format_string(detail.template, *(text_column(values[name], name)
                                                   for name in detail.values))
                if detail.values else F.lit(detail.template))
        chain = F.when(when, text) if chain is None else chain.when(when, text)
    assert chain is not None
    return chain


def text_column(value: Column, name: str) -> Column:
    """``value`` as text for a detail: ``DEFAULT_TEXT[name]`` when missing, if it has one."""
    text = value.cast("string")
    default = DEFAULT_TEXT.get(name)
    return text if default is None else F.coalesce(text, F.lit(default))


__all__ = ["detail_column", "rule_column", "text_column"]
