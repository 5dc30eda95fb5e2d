"""The README and the manual (``docs/``) stand on their own: they cite nothing outside the
repository — no design-brief sections ("DESIGN §3"), no issue numbers ("issue 21"), no machine
paths (``/work/…``, ``../shared/…``) — and every relative link in them leads to a file that
exists. The docs of a repository are read where the repository is, without its authors'
working notes."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO_ROOT

OUTSIDE_CITATIONS = {
    "the design brief": re.compile(r"\bDESIGN\b"),
    "a numbered section of some outside document": re.compile(r"§"),
    "an issue number": re.compile(r"\b[Ii]ssues?\s+#?\d+"),
    "a machine path": re.compile(r"/work/|\.\./shared\b|\bshared/(?:reference|vectors)\b"),
}
LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?:#[^)]*)?\)")


def manual_files() -> list[Path]:
    """README.md, and every Markdown and YAML file under docs/."""
    docs = REPO_ROOT / "docs"
    return [REPO_ROOT / "README.md", *sorted(docs.rglob("*.md")), *sorted(docs.rglob("*.yml"))]


def test_docs_cite_nothing_outside_the_repository() -> None:
    found = []
    for path in manual_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(REPO_ROOT)}:{number}: {what}: {line.strip()}"
                      for what, pattern in OUTSIDE_CITATIONS.items() if pattern.search(line)]
    assert found == []


def test_relative_links_lead_to_files_that_exist() -> None:
    broken = []
    for path in manual_files():
        for match in LINK.finditer(path.read_text(encoding="utf-8")):
            target = match["target"]
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(REPO_ROOT)}: {target}")
    assert broken == []


def test_the_checks_see_what_they_are_for() -> None:
    samples = ["as DESIGN §4 says", "see issue 21", "in /work/shared/reference/x.md",
               "read ../shared/vectors/ in place"]
    assert all(any(pattern.search(sample) for pattern in OUTSIDE_CITATIONS.values())
               for sample in samples)
    assert not any(pattern.search("the designer's issue of 2026 with /workers/")
                   for pattern in OUTSIDE_CITATIONS.values())
