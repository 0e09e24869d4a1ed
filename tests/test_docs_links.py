"""The README and every page under docs/ link only to files that exist (and to headings that exist), the README stays
within 2,000 words, and every docs page is reachable from the README through docs/index.md."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def pages():
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return [m.group(1) for m in LINK.finditer(text)]


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    out = set()
    for line in text.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_links_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: not checked offline
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def test_readme_is_short_and_maps_every_doc():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.split()) <= 2000
    assert "docs/index.md" in links(REPO / "README.md")
    indexed = {(REPO / "docs" / t.partition("#")[0]).resolve() for t in links(REPO / "docs" / "index.md")}
    missing = [p.name for p in (REPO / "docs").glob("*.md") if p.name != "index.md" and p.resolve() not in indexed]
    assert not missing, f"docs/index.md does not link {missing}"


def test_setup_block_holds_two_commands():
    """.ci/run reads exactly two commands from this block."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- setup:begin -->", 1)[1].split("<!-- setup:end -->", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("`")]
    assert len(commands) == 2 and commands[0].startswith("python3 -m venv .venv")
