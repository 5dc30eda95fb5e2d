"""import-linter contract type ``allowed_imports``: what a set of modules MAY import.

import-linter's own types name what must not be imported (``forbidden``) or who may import a
module (``protected``). A room's rule in docs/architecture.md is a list of what the room may
use, so a new module, package or dependency is refused until someone adds it to the list, rather
than allowed until someone thinks of forbidding it. Registered in ``.importlinter``
(``contract_types = allowed_imports: tests.support.import_contracts.AllowedImportsContract``).

Options:
    source_modules: the modules the rule is for, each with its descendants.
    allowed_modules: module expressions (``*``/``**`` wildcards) the sources may import directly.
        A third-party package appears in the graph under its top-level name (``grpc``,
        ``google``).
    checked_modules: optional module expressions; when given, only imports of these are checked
        (the framework's imports of ``storage_engine``, say), otherwise every import is.
    allow_standard_library: ``true``: any module of the standard library may be imported too.

An import from one source module to another is always allowed (a room uses itself). Only direct
imports are checked: what an allowed module imports is its own contract's business.

Pure: reads the import graph, changes nothing.
"""

from __future__ import annotations

import sys
from typing import Any

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain.helpers import module_expressions_to_modules

__all__ = ["AllowedImportsContract", "disallowed_imports"]


def _names(graph: ImportGraph, expressions: Any, *, as_packages: bool = False,
           required: bool = False) -> set[str]:
    return {module.name for module in module_expressions_to_modules(
        graph, expressions, as_packages=as_packages, raise_if_unmatched=required)}


def disallowed_imports(graph: ImportGraph, sources: set[str], allowed: set[str],
                       checked: set[str] | None,
                       allow_standard_library: bool) -> list[tuple[str, str, list[int]]]:
    """(importer, imported, line numbers) of every direct import the rule does not allow."""
    stdlib = sys.stdlib_module_names if allow_standard_library else frozenset()
    refused = []
    for importer in sorted(sources):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported in sources or imported in allowed:
                continue
            if checked is not None and imported not in checked:
                continue
            if imported.partition(".")[0] in stdlib:
                continue
            lines = sorted(detail["line_number"] for detail in graph.get_import_details(
                importer=importer, imported=imported))
            refused.append((importer, imported, lines))
    return refused


class AllowedImportsContract(Contract):
    """Every direct import of ``source_modules`` is in ``allowed_modules`` (or the stdlib)."""

    type_name = "allowed_imports"

    source_modules = fields.ListField(subfield=fields.ModuleExpressionField())
    allowed_modules = fields.ListField(subfield=fields.ModuleExpressionField(), required=False)
    checked_modules = fields.ListField(subfield=fields.ModuleExpressionField(), required=False)
    allow_standard_library = fields.BooleanField(required=False, default=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        sources = _names(graph, self.source_modules, as_packages=True, required=True)
        allowed = _names(graph, self.allowed_modules or [])
        checked = _names(graph, self.checked_modules) if self.checked_modules else None
        refused = disallowed_imports(graph, sources, allowed, checked,
                                     str(self.allow_standard_library).lower() == "true")
        return ContractCheck(kept=not refused, metadata={"refused": refused})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, lines in check.metadata["refused"]:
            where = ", ".join(f"l.{line}" for line in lines)
            output.print_error(f"{importer} imports {imported} ({where}), which is not in the "
                               "contract's allowed_modules", bold=False)
            output.new_line()
