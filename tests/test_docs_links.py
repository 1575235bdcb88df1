"""The documentation's relative links lead somewhere, and the page that helps an admin choose a
mode (docs/choosing.md) is reachable from README.md and docs/install.md."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_relative_links_resolve() -> None:
    broken = [
        f"{page.relative_to(REPO)}: {target}"
        for page in _pages()
        for target in LINK.findall(page.read_text())
        if "://" not in target
        and not target.startswith("mailto:")
        and not (page.parent / target).exists()
    ]
    assert not broken, broken


def test_choosing_is_linked_from_readme_and_install() -> None:
    assert "(docs/choosing.md)" in (REPO / "README.md").read_text()
    assert "(choosing.md)" in (REPO / "docs" / "install.md").read_text()
    text = (REPO / "docs" / "choosing.md").read_text()
    for section in ("## By Kubernetes version", "## By need", "## By hardware", "## Migration"):
        assert section in text
