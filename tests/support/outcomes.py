"""``outcome``: what a call gives, comparable between two implementations of one function (the
native engine's and the pure-Python reference's), errors included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def outcome(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple:
    """``("ok", value, types)`` or ``("error", exception type, message)``; ``types`` is the type
    of each item of a list value (so ``DispatchRecord`` and a plain tuple differ), else the
    value's type."""
    try:
        value = function(*args, **kwargs)
    except Exception as error:
        return "error", type(error), str(error)
    kinds = [type(item) for item in value] if isinstance(value, list) else type(value)
    return "ok", value, kinds
