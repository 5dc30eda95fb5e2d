"""Lay the installed ``postbox`` namespace out as a directory tree, for tools that read files.

The install maps the repository's top-level folders under ``postbox`` (setup.py); at run time
the editable install's import hook resolves ``postbox.storage_engine`` to ``storage_engine/``.
The type checker and the import linter walk directories instead, so this script builds
``build/namespace/`` with the layout an installed wheel has (``postbox/storage_engine/…``):
real directories holding links to the repository's files, so an edit is seen at once and an
error names a path that leads back to the source. ``examples/`` is laid beside ``postbox/``.

    python scripts/namespace_tree.py [TARGET]      # prints TARGET
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
SKIPPED = {"__pycache__"}


def namespace_folders() -> list[str]:
    """The folders the install maps under ``postbox`` (``[tool.postbox]`` in pyproject.toml)."""
    config = tomllib.loads((REPOSITORY / "pyproject.toml").read_text(encoding="utf-8"))
    return list(config["tool"]["postbox"]["namespace-folders"])


def layout() -> dict[Path, Path]:
    """Target directory (relative) -> source directory, for every mapped tree."""
    trees = {Path("postbox"): REPOSITORY / "postbox", Path("examples"): REPOSITORY / "examples"}
    for folder in namespace_folders():
        trees[Path("postbox", folder)] = REPOSITORY / folder
    return trees


def build(target: Path) -> None:
    """Replace ``target`` with the namespace's directories and links to the source files."""
    if target.exists():
        shutil.rmtree(target)  # stale links (a moved module) must not survive
    for relative, source in layout().items():
        for directory, subdirectories, files in os.walk(source):
            subdirectories[:] = sorted(name for name in subdirectories if name not in SKIPPED)
            here = target / relative / Path(directory).relative_to(source)
            here.mkdir(parents=True, exist_ok=True)
            for name in files:
                if name.endswith((".py", ".pyi", ".typed")):
                    (here / name).symlink_to(Path(directory, name))


def main() -> None:
    """Build the tree at the path given (default ``build/namespace``) and print it."""
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else REPOSITORY / "build" / "namespace"
    build(target.resolve())
    print(target)  # noqa: T201 - the script's output


if __name__ == "__main__":
    main()
