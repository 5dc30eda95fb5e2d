"""Count Postbox's packages, rooms and import arrows from its import graph.

Builds the import graph with grimp over the namespace tree that scripts/namespace_tree.py lays
out (``build/namespace``, as ``make lint`` does), and prints, as Markdown tables:

- every package (the top-level units of the layers: ``postbox.storage_engine``, ``postbox.cli``,
  ``examples``, …) and its rooms (its direct subpackages; the modules directly in the package
  are its ``(top)`` room) with their module counts;
- the number of direct import arrows (module -> module) between rooms, and between packages;
- the arrows that run upward against the ``layers`` contract of ``.importlinter`` (an importer in
  a lower layer than the module it imports, or between two independent layers ``a | b``):
  there must be none.

Everything comes from the tree, ``[tool.postbox] namespace-folders`` and ``.importlinter``.

    python scripts/package_census.py [--tree build/namespace]
"""

from __future__ import annotations

import argparse
import configparser
import sys
from collections import Counter
from pathlib import Path

import grimp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import namespace_tree  # the sibling script, found through the line above

REPOSITORY = namespace_tree.REPOSITORY


def layer_units(root: Path = REPOSITORY) -> list[list[str]]:
    """The layers contract of ``.importlinter``: top layer first, each a list of its packages."""
    parser = configparser.ConfigParser()
    parser.read(root / ".importlinter", encoding="utf-8")
    for section in parser.sections():
        if parser.get(section, "type", fallback=None) == "layers":
            return [[name.strip() for name in line.split("|")]
                    for line in parser.get(section, "layers").splitlines() if line.strip()]
    raise SystemExit(".importlinter has no layers contract")


def packages(tree: Path) -> list[str]:
    """The package units: each namespace folder, each subpackage of the ``postbox/`` folder,
    ``postbox`` itself (its own modules) and ``examples``."""
    own = sorted(f"postbox.{entry.name}" for entry in (tree / "postbox").iterdir()
                 if (entry / "__init__.py").exists())
    return ["postbox", *own, "examples"]


def package_of(module: str, units: list[str]) -> str | None:
    """The longest unit ``module`` belongs to."""
    found = [unit for unit in units if module == unit or module.startswith(unit + ".")]
    return max(found, key=len) if found else None


def room_of(module: str, package: str, graph: grimp.ImportGraph) -> str:
    """``package.sub`` when the module lies in the subpackage ``sub``, else ``package (top)``."""
    rest = module.removeprefix(package).lstrip(".").split(".")
    if rest[0] and len(rest) > 1:
        return f"{package}.{rest[0]}"
    candidate = f"{package}.{rest[0]}"
    if rest[0] and graph.find_children(candidate):
        return candidate  # the subpackage's own __init__
    return f"{package} (top)"


def census(tree: Path) -> str:
    """The census as Markdown tables."""
    sys.path.insert(0, str(tree))
    graph = grimp.build_graph("postbox", "examples", cache_dir=None)
    units = packages(tree)
    modules = {module: package_of(module, units) for module in graph.modules}
    rooms = {module: room_of(module, package, graph)
             for module, package in modules.items() if package is not None}
    layer_of = {name: index for index, layer in enumerate(layer_units()) for name in layer}

    room_counts = Counter(rooms.values())
    package_of_room = {room: modules[module] for module, room in rooms.items()}
    lines = ["| package | modules | rooms (modules) |", "|---|---:|---|"]
    listed_packages = 0
    for package in units:
        own = sorted((room, count) for room, count in room_counts.items()
                     if package_of_room[room] == package)
        if own:
            listed_packages += 1
            listed = ", ".join(f"`{room[len(package) + 1:]}` {count}" for room, count in own)
            lines.append(f"| `{package}` | {sum(count for _, count in own)} | {listed} |")

    arrows = [(importer, imported) for importer in rooms
              for imported in graph.find_modules_directly_imported_by(importer)
              if imported in rooms]
    between_rooms = [(a, b) for a, b in arrows if rooms[a] != rooms[b]]
    between_packages = [(a, b) for a, b in arrows if modules[a] != modules[b]]
    room_pairs = {(rooms[a], rooms[b]) for a, b in between_rooms}
    upward = []
    for importer, imported in between_packages:
        high = layer_of.get(str(package_of(importer, list(layer_of))))
        low = layer_of.get(str(package_of(imported, list(layer_of))))
        if high is not None and low is not None and high >= low:
            upward.append(f"{importer} -> {imported}")

    lines += ["", "| count | |", "|---|---:|",
              f"| packages | {listed_packages} |",
              f"| rooms | {len(room_counts)} |",
              f"| modules | {len(rooms)} |",
              f"| import arrows (module to module) | {len(arrows)} |",
              f"| of which between rooms | {len(between_rooms)} |",
              f"| of which between packages | {len(between_packages)} |",
              f"| room pairs joined by an arrow | {len(room_pairs)} |",
              f"| arrows upward against the layers (.importlinter) | {len(upward)} |"]
    lines += [f"    {arrow}" for arrow in sorted(upward)]
    return "\n".join(lines)


def main() -> int:
    """Lay the namespace tree out, print the census; exit 1 when an arrow runs upward."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--tree", type=Path, default=REPOSITORY / "build" / "namespace")
    tree = parser.parse_args().tree.resolve()
    namespace_tree.build(tree)
    text = census(tree)
    print(text)  # noqa: T201 - the script's output
    return 1 if "\n    " in text else 0


if __name__ == "__main__":
    sys.exit(main())
