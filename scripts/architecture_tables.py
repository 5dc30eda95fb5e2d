"""Write the generated tables of docs/architecture.md and README.md from the repository's tree.

Everything comes from the tree and its configuration, nothing from a list kept here:

- the layer chain, from the ``layers`` contract in ``.importlinter``;
- the rooms (every package of the ``postbox`` namespace) with their module counts, and every
  module with the first sentence of its docstring, from the folders ``[tool.postbox]
  namespace-folders`` in pyproject.toml maps under ``postbox`` (as setup.py installs them);
- README's table of the top-level folders, from each folder's ``__init__`` docstring (or, for a
  folder that is not a package, the first sentence of its ``README.md``).

Each table sits between a ``<!-- BEGIN name … -->`` and an ``<!-- END name -->`` comment; the text
outside them is left alone. tests/test_architecture_doc.py regenerates the tables in memory and
fails when the files differ. docs/development.md repeats the folder table for the site.

    python scripts/architecture_tables.py          # rewrite the files
    python scripts/architecture_tables.py --check  # exit 1 when a file is stale
"""

from __future__ import annotations

import ast
import configparser
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
ARCHITECTURE = Path("docs/architecture.md")
README = Path("README.md")
DEVELOPMENT = Path("docs/development.md")
SKIPPED = {"__pycache__"}
NOT_A_FOLDER_OF_THE_PROJECT = {"build", "dist"}
# What a top-level folder is, for the folders that say it neither in an ``__init__`` docstring
# nor in a README.md of their own.
FOLDER_NOTES = {
    "docs": "The manual: the pages of the documentation site (`make docs`, mkdocs.yml).",
    "scripts": "Tools for developers and CI: the namespace tree, these generated tables, the "
               "package census, the test services.",
    "tests": "The pytest suite, by package; `tests/support/` holds its fixtures and plugins.",
}
REGENERATE = "python scripts/architecture_tables.py"


@dataclass(frozen=True)
class Module:
    """One module or package of the namespace."""

    name: str  # dotted: postbox.storage_engine.store.commit_log
    path: Path  # relative to the repository: storage_engine/store/commit_log.py
    summary: str
    is_package: bool


def namespace_folders(root: Path = REPOSITORY) -> list[str]:
    """The folders the install maps under ``postbox`` (``[tool.postbox]`` in pyproject.toml)."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return list(config["tool"]["postbox"]["namespace-folders"])


def without_outside_citations(text: str) -> str:
    """``text`` without its citations of numbered sections of documents outside the repository
    ("(reference §14, stdlib only)" -> "(stdlib only)"): the docs stand on their own."""

    def keep(match: re.Match[str]) -> str:
        parts = [part for part in match[1].split(", ") if "§" not in part]
        return f" ({', '.join(parts)})" if parts else ""

    return re.sub(r"\s*§[\d.]+", "", re.sub(r"\s*\(([^()]*)\)", keep, text))


def summary(text: str | None) -> str:
    """The first sentence of a docstring's first paragraph, as Markdown for one table cell."""
    if not text:
        return ""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z`(])", paragraph, maxsplit=1)[0]
    return without_outside_citations(sentence).replace("``", "`").replace("|", "\\|")


def docstring(path: Path) -> str | None:
    """The module docstring of a Python file (parsed, not imported)."""
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))


def walk(source: Path, dotted: str, root: Path) -> list[Module]:
    """Every package and module under the package directory ``source``, named from ``dotted``."""
    found = [Module(dotted, (source / "__init__.py").relative_to(root),
                    summary(docstring(source / "__init__.py")), True)]
    for entry in sorted(source.iterdir()):
        if entry.name in SKIPPED:
            continue
        if entry.is_dir() and (entry / "__init__.py").exists():
            found += walk(entry, f"{dotted}.{entry.name}", root)
        elif entry.suffix == ".py" and entry.name != "__init__.py":
            found.append(Module(f"{dotted}.{entry.stem}", entry.relative_to(root),
                                summary(docstring(entry)), False))
    return found


def namespace(root: Path = REPOSITORY) -> dict[str, list[Module]]:
    """Top-level package (``postbox``, ``postbox.outbox``, …) -> its packages and modules.

    ``postbox`` itself holds the folder ``postbox/`` (the everyday names and the command line);
    the others are the mapped folders, in pyproject.toml's order.
    """
    tops = {"postbox": [m for m in walk(root / "postbox", "postbox", root)]}
    for folder in namespace_folders(root):
        tops[f"postbox.{folder}"] = walk(root / folder, f"postbox.{folder}", root)
    return tops


def layers(root: Path = REPOSITORY) -> list[str]:
    """The layers contract of ``.importlinter``, top layer first (``a | b``: one layer)."""
    parser = configparser.ConfigParser()
    parser.read(root / ".importlinter", encoding="utf-8")
    for section in parser.sections():
        if parser.get(section, "type", fallback=None) == "layers":
            return [line.strip() for line in parser.get(section, "layers").splitlines()
                    if line.strip()]
    raise SystemExit(".importlinter has no layers contract")


def layer_chain(root: Path = REPOSITORY) -> str:
    """The layers as one line, the top importing downwards."""
    return "```\n" + " ─► ".join(layers(root)) + "\n```"


def rooms_table(tops: dict[str, list[Module]]) -> str:
    """Every package of the namespace with its module count (its own files, not its rooms')."""
    rows = ["| package | modules | what it is |", "|---|---:|---|"]
    for modules in tops.values():
        for package in (m for m in modules if m.is_package):
            count = sum(1 for m in modules if m.path.parent == package.path.parent)
            rows.append(f"| `{package.name}` | {count} | {package.summary} |")
    return "\n".join(rows)


def module_tables(tops: dict[str, list[Module]]) -> str:
    """One table per top-level package: every module, where it lives, its docstring's summary."""
    parts = []
    for top, modules in tops.items():
        folder = modules[0].path.parent
        parts.append(f"### `{top}` (`{folder}/`)\n\n| module | what it is |\n|---|---|")
        parts[-1] += "".join(f"\n| `{m.name.removeprefix(top + '.') if m.name != top else top}` "
                             f"| {m.summary} |" for m in modules)
    return "\n\n".join(parts)


def folder_table(root: Path = REPOSITORY) -> str:
    """The repository's top-level folders: installed as ``postbox.…`` or not, and what each is."""
    mapped = set(namespace_folders(root))
    rows = ["| folder | imported as | what it is |", "|---|---|---|"]
    for entry in sorted(root.iterdir()):
        if (not entry.is_dir() or entry.name.startswith(".") or entry.name in SKIPPED
                or entry.name in NOT_A_FOLDER_OF_THE_PROJECT or entry.suffix == ".egg-info"):
            continue
        text = ""
        if (entry / "__init__.py").exists():
            text = summary(docstring(entry / "__init__.py"))
        if not text and (entry / "README.md").exists():
            text = summary(re.sub(r"^#.*\n+", "", (entry / "README.md").read_text("utf-8")))
        text = text or FOLDER_NOTES.get(entry.name, "")
        if entry.name == "postbox":
            imported = "`postbox`"
        elif entry.name in mapped:
            imported = f"`postbox.{entry.name}`"
        else:
            imported = "not installed"
        rows.append(f"| `{entry.name}/` | {imported} | {text} |")
    return "\n".join(rows)


def generated(root: Path = REPOSITORY) -> dict[Path, dict[str, str]]:
    """File -> marker name -> the text between its markers."""
    tops = namespace(root)
    return {
        ARCHITECTURE: {"layer chain": layer_chain(root), "room table": rooms_table(tops),
                       "module tables": module_tables(tops)},
        README: {"folder table": folder_table(root)},
        DEVELOPMENT: {"folder table": folder_table(root)},
    }


def fill(text: str, name: str, body: str) -> str:
    """``text`` with the block between the markers named ``name`` replaced by ``body``."""
    pattern = re.compile(rf"(<!-- BEGIN {re.escape(name)}\b[^\n]*-->\n)(.*?)(<!-- END "
                         rf"{re.escape(name)} -->)", re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"no '<!-- BEGIN {name} …-->' … '<!-- END {name} -->' markers")
    return pattern.sub(lambda match: match[1] + body + "\n" + match[3], text, count=1)


def rendered(root: Path = REPOSITORY) -> dict[Path, tuple[str, str]]:
    """File (relative) -> (its text now, its text with the tables regenerated)."""
    result = {}
    for relative, blocks in generated(root).items():
        now = (root / relative).read_text(encoding="utf-8")
        new = now
        for name, body in blocks.items():
            new = fill(new, name, body)
        result[relative] = (now, new)
    return result


def main() -> int:
    """Rewrite the stale files (or with ``--check``, name them and return 1)."""
    stale = [path for path, (now, new) in rendered().items() if now != new]
    if "--check" in sys.argv[1:]:
        for path in stale:
            print(f"{path} is stale: run {REGENERATE}")  # noqa: T201 - the script's output
        return 1 if stale else 0
    for path, (_, new) in rendered().items():
        if path in stale:
            (REPOSITORY / path).write_text(new, encoding="utf-8")
            print(f"wrote {path}")  # noqa: T201 - the script's output
    return 0


if __name__ == "__main__":
    sys.exit(main())
