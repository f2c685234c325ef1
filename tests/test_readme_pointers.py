"""What the tool and the docs point a reader at exists: every README section the code names in
what it prints, every link to a README section, every repository file the README and docs/ name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "scenarios/studies/README.md", *(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]
TOP = ("sim", "docs", "tests", "scenarios", "benchmarks", "engine", "kernels", "calibration", "endpoint")


def _headings(text: str) -> set[str]:
    return {m.strip() for m in re.findall(r"^#{2,4} (.+)$", text, re.M)}


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_printed_readme_pointers_name_sections_that_exist():
    sections = _headings((REPO / "README.md").read_text())
    named = set()
    for pkg in ("sim", "endpoint", "calibration", "engine"):
        for path in (REPO / pkg).rglob("*.py"):
            named |= {(path.relative_to(REPO), s) for s in re.findall(r'README, \\?"([^"\\]+)\\?"', path.read_text())}
    assert named, "no pointer found: the pattern no longer matches how the code cites the README"
    missing = [f"{p}: {s!r}" for p, s in sorted(named) if s not in sections]
    assert not missing, missing


@pytest.mark.parametrize("doc", DOCS)
def test_links_to_sections_and_files_resolve(doc):
    text = (REPO / doc).read_text()
    anchors = {_slug(h) for h in _headings(text)} | {_slug(h) for h in re.findall(r"^# (.+)$", text, re.M)}
    bad = [a for a in re.findall(r"\]\(#([^)]+)\)", text) if a not in anchors]
    for ref in re.findall(r"`((?:" + "|".join(TOP) + r")/[^`\s]*)`", text):
        path = ref.split(":")[0].rstrip(".,")
        if any(c in path for c in "<*{…") or "..." in path:
            continue  # a pattern, not a file
        here = [REPO / path, (REPO / doc).parent / path, REPO / (path.rsplit(".", 1)[0] + ".py")]
        if not any(p.exists() for p in here):
            bad.append(ref)
    for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        if not ((REPO / doc).parent / link).exists():
            bad.append(link)
    assert not bad, bad
