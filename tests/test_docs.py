"""The README and the pages of docs/: the README stays a manual (under 300 lines), and every
relative link of them points to a file that exists and, with a #fragment, to one of its
headings (GitHub's anchors)."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set:
    """GitHub's anchors of a page's headings: lower case, punctuation but - and _ dropped,
    spaces as -."""
    out = set()
    for line in page.read_text().splitlines():
        m = re.match(r"#+ (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def test_the_readme_is_a_manual_of_under_300_lines():
    assert len((REPO / "README.md").read_text().splitlines()) < 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    bad = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(target)
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(target)
    assert not bad, f"{page}: links to nothing: {bad}"
