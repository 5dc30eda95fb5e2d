"""The dependencies ``pyproject.toml`` declares cover what Postbox's own code paths import.

A fresh ``pip install postbox`` must run the Celery worker and beat: Celery talks to Redis through
kombu's Redis transport, which imports packages (``packaging``, ``redis``) that only kombu's
``redis`` extra pulls in — ``celery`` alone does not, and the ``dev`` extra hid it. Building a
fresh virtual environment per test run would need the package index and minutes; instead this
resolves, from the distributions' own metadata (``importlib.metadata``), the closure of what the
project's base dependencies require (with their extras and markers), and checks that every
third-party module those transports import at module level belongs to a distribution in it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
CELERY_REDIS_MODULES = ("kombu.transport.redis", "celery.backends.redis")
"""Modules a Celery worker and beat with a ``redis://`` broker import."""


def base_closure() -> set[str]:
    """Canonical names of every distribution a plain install of the project pulls in."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pending = [Requirement(text) for text in declared]
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        names.add(name)
        for text in importlib.metadata.requires(name) or []:
            child = Requirement(text)
            if child.marker is None or any(child.marker.evaluate({"extra": extra})
                                           for extra in ("", *requirement.extras)):
                pending.append(child)
    return names


def module_level_imports(module: str) -> set[str]:
    """Top-level names of the third-party modules ``module`` imports unconditionally (outside
    functions and ``try`` blocks)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    tree = ast.parse(Path(spec.origin).read_text())
    found: set[str] = set()
    for node in tree.body:  # module level only: not in functions, not under try/except
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return {name for name in found
            if name not in sys.stdlib_module_names and name != "__future__"}


@pytest.mark.parametrize("module", CELERY_REDIS_MODULES)
def test_a_plain_install_has_what_celerys_redis_transport_imports(module):
    closure = base_closure()
    providers = importlib.metadata.packages_distributions()
    missing = {}
    for name in module_level_imports(module):
        distributions = {canonicalize_name(dist) for dist in providers.get(name, [])}
        assert distributions, f"{module} imports {name}, which no installed distribution has"
        if not distributions & closure:
            missing[name] = sorted(distributions)
    assert missing == {}, (f"{module} imports modules no base dependency provides: {missing} "
                           "(declare celery[redis])")


def test_celery_is_declared_with_its_redis_extra():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    celery = [Requirement(text) for text in declared if Requirement(text).name == "celery"]
    assert len(celery) == 1 and "redis" in celery[0].extras
