"""Size fences: no function longer than 70 lines, no module longer than 600.

STYLE.md asks for functions under ~50 lines and modules under ~500; these are the hard limits a
machine checks, with room above the soft ones. They hold for every ``.py`` file of the packages
the install ships (``postbox`` and the folders ``[tool.postbox] namespace-folders`` maps under
it), the examples, the benchmarks
(``bench``) and the tests themselves (``tests``), with the same limits: a long test reads no
better than long code. A function counts from its ``def`` line to its last line, nested
functions and methods each on their own as well as inside the one that holds them; a module
counts every line of its file.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from tests.support.paths import REPO_ROOT

FUNCTION_LINES_MAX = 70
MODULE_LINES_MAX = 600
EXTRA_ROOTS = ("examples", "bench", "tests", "scripts")


def checked_roots() -> list[Path]:
    """The shipped packages (from pyproject.toml), then examples, benchmarks, tests, scripts."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    names = ["postbox", *sorted(project["tool"]["postbox"]["namespace-folders"])]
    return [REPO_ROOT / name for name in [*names, *EXTRA_ROOTS]]


def python_files(roots: list[Path]) -> list[Path]:
    return sorted(path for root in roots for path in root.rglob("*.py")
                  if "__pycache__" not in path.parts)


def offenders(path: Path, base: Path = REPO_ROOT) -> list[str]:
    """One line per function or module of ``path`` over its limit (paths below ``base``)."""
    source = path.read_text(encoding="utf-8")
    where = path.relative_to(base)
    found = []
    module_lines = len(source.splitlines())
    if module_lines > MODULE_LINES_MAX:
        found.append(f"{where}: module of {module_lines} lines")
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1
            if lines > FUNCTION_LINES_MAX:
                found.append(f"{where}:{node.lineno}: function {node.name} of {lines} lines")
    return found


def test_the_checked_roots_exist_and_hold_code():
    roots = checked_roots()
    assert {"storage_engine", "framework", "outbox", "tests"} <= {root.name for root in roots}
    for root in roots:
        assert root.is_dir() and any(root.rglob("*.py")), f"{root} holds no Python code"


def test_no_function_or_module_passes_its_limit():
    found = [line for path in python_files(checked_roots()) for line in offenders(path)]
    assert not found, (
        f"over the limits (functions {FUNCTION_LINES_MAX} lines, modules {MODULE_LINES_MAX}): "
        "split them\n" + "\n".join(found))


def _function(name: str, lines: int, indent: str = "") -> str:
    body = "".join(f"{indent}    x{n} = {n}\n" for n in range(lines - 1))
    return f"{indent}def {name}():\n{body}"


def test_the_fence_names_each_long_function_and_long_module(tmp_path):
    fits = tmp_path / "fits.py"
    fits.write_text(_function("at_the_limit", FUNCTION_LINES_MAX)
                    + "\n" * (MODULE_LINES_MAX - FUNCTION_LINES_MAX), encoding="utf-8")
    over = tmp_path / "over.py"
    over.write_text("class Holder:\n    def method(self):\n"
                    + _function("inner", FUNCTION_LINES_MAX + 1, indent="        ")
                    + "\n" * MODULE_LINES_MAX, encoding="utf-8")
    assert offenders(fits, tmp_path) == []
    assert offenders(over, tmp_path) == [
        f"over.py: module of {MODULE_LINES_MAX + FUNCTION_LINES_MAX + 3} lines",
        f"over.py:2: function method of {FUNCTION_LINES_MAX + 2} lines",
        f"over.py:3: function inner of {FUNCTION_LINES_MAX + 1} lines",
    ]
