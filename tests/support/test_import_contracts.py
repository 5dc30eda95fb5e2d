"""The ``allowed_imports`` contract type (``import_contracts``) on small hand-built graphs."""

from __future__ import annotations

import grimp
import pytest

from tests.support.import_contracts import AllowedImportsContract

IMPORTS = [  # (importer, imported)
    ("engine.store.log", "engine.store.segment"),  # inside the room: always allowed
    ("engine.store.log", "engine.formats.record"),
    ("engine.store.log", "os"),
    ("engine.broker.tables", "engine.store.log"),
    ("framework.app", "engine"),
    ("framework.app", "engine.formats.record"),
    ("framework.app", "celery"),
]


def graph_with(*extra: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for number, (importer, imported) in enumerate([*IMPORTS, *extra], start=1):
        for module in (importer, imported):
            graph.add_module(module, is_squashed=module in ("os", "celery", "grpc"))
        graph.add_import(importer=importer, imported=imported, line_number=number,
                         line_contents=f"import {imported}")
    for package in ("engine", "engine.store", "engine.broker", "engine.formats", "framework"):
        graph.add_module(package)
    return graph


def contract(**options) -> AllowedImportsContract:
    return AllowedImportsContract("rule", {"root_packages": ["engine", "framework"]}, options)


STORE_RULE = {"source_modules": ["engine.store"],
              "allowed_modules": ["engine.formats", "engine.formats.**"],
              "allow_standard_library": "true"}


def test_a_room_that_imports_only_what_it_may_is_kept():
    assert contract(**STORE_RULE).check(graph_with(), verbose=False).kept


def test_an_import_not_on_the_list_breaks_it_and_is_named_with_its_line():
    check = contract(**STORE_RULE).check(
        graph_with(("engine.store.segment", "engine.broker.tables")), verbose=False)
    assert not check.kept
    assert check.metadata["refused"] == [("engine.store.segment", "engine.broker.tables",
                                          [len(IMPORTS) + 1])]


def test_third_party_and_stdlib_need_the_list_or_the_flag():
    graph = graph_with(("engine.store.log", "grpc"))
    assert [refused[1] for refused in contract(**STORE_RULE).check(graph, False)
            .metadata["refused"]] == ["grpc"]
    no_stdlib = {**STORE_RULE, "allowed_modules": ["engine.formats.**", "grpc"],
                 "allow_standard_library": "false"}
    assert [refused[1] for refused in contract(**no_stdlib).check(graph, False)
            .metadata["refused"]] == ["os"]


def test_checked_modules_limit_the_rule_to_one_package():
    rule = {"source_modules": ["framework"], "checked_modules": ["engine", "engine.**"],
            "allowed_modules": ["engine", "engine.formats.**"]}
    assert contract(**rule).check(graph_with(), verbose=False).kept  # celery is not checked
    broken = contract(**rule).check(graph_with(("framework.app", "engine.store.log")), False)
    assert [refused[1] for refused in broken.metadata["refused"]] == ["engine.store.log"]


def test_a_rule_whose_sources_match_nothing_is_an_error():
    with pytest.raises(ValueError, match="nowhere"):
        contract(source_modules=["nowhere"]).check(graph_with(), verbose=False)
