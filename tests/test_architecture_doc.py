"""The generated tables of docs/architecture.md and README.md match the tree.

``scripts/architecture_tables.py`` writes them (the layer chain from ``.importlinter``, every
package and module of the ``postbox`` namespace with its docstring's first sentence, the
top-level folders); this regenerates them in memory, so a moved, added or removed module, or a
changed docstring, fails here until the script is run again. The API reference's page of
``postbox`` lists the everyday names ``postbox.EVERYDAY_NAMES`` loads.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import postbox
from tests.support.paths import REPO_ROOT


def tables_script() -> ModuleType:
    """scripts/architecture_tables.py, loaded from its file (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "architecture_tables", REPO_ROOT / "scripts" / "architecture_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def test_generated_tables_are_fresh() -> None:
    script = tables_script()
    stale = [str(path) for path, (now, new) in script.rendered(REPO_ROOT).items() if now != new]
    assert stale == [], f"{', '.join(stale)} stale: run python scripts/architecture_tables.py"


def test_every_namespace_module_is_listed() -> None:
    script = tables_script()
    text = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    modules = [module for modules in script.namespace(REPO_ROOT).values() for module in modules]
    assert len(modules) > 100
    for folder in script.namespace_folders(REPO_ROOT):
        assert f"| `postbox.{folder}` |" in text
    assert all(module.summary for module in modules), [m.name for m in modules if not m.summary]


def test_summaries_cite_nothing_outside_the_repository() -> None:
    script = tables_script()
    assert script.summary("Replication (reference §14, stdlib only). More.") == (
        "Replication (stdlib only).")
    assert script.summary("Checkpoint page (§5.1): a ``page``.\n\nDetails") == (
        "Checkpoint page: a `page`.")
    assert script.summary("a | b") == "a \\| b"


def test_the_api_reference_lists_every_everyday_name() -> None:
    page = (REPO_ROOT / "docs" / "reference" / "postbox.md").read_text(encoding="utf-8")
    listed = {line.split("`")[1] for line in page.splitlines() if line.startswith("| [`")}
    assert listed == set(postbox.EVERYDAY_NAMES)
    for name, package in postbox.EVERYDAY_NAMES.items():
        assert f"[`{name}`][postbox.{package}.{name}]" in page
