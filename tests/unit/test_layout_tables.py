"""The layout tables (README.md and docs/architecture.md, under "## Layout") name every
folder the product is built from, and every folder they name exists: a room added or
moved without its row fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.parts import ROOT, product_folders

# Folders the tables describe besides the product's own.
OTHER_FOLDERS = {"tests", "bench", "docs"}
FOLDER_CELL = re.compile(r"^\|\s*\[`([^`]+)/`\]")


def layout_rows(page: Path) -> list[str]:
    """The folders named in the first column of the page's "## Layout" table."""
    text = page.read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for line in section.splitlines() if (m := FOLDER_CELL.match(line))]


@pytest.mark.parametrize("page", ["README.md", "docs/architecture.md"])
def test_the_layout_table_matches_the_tree(page: str) -> None:
    rows = layout_rows(ROOT / page)
    assert len(rows) == len(set(rows)), f"{page}: a folder has two rows"
    missing = sorted(set(product_folders()) - set(rows))
    assert missing == [], f"{page}'s layout table has no row for {missing}"
    for folder in rows:
        assert (ROOT / folder).is_dir(), f"{page} names {folder}/, which does not exist"
        assert folder in set(product_folders()) | OTHER_FOLDERS, (
            f"{page} names {folder}/, which is neither a product folder nor one of"
            f" {sorted(OTHER_FOLDERS)}")


def test_a_missing_row_is_found(tmp_path: Path) -> None:
    page = tmp_path / "x.md"
    page.write_text("# x\n\n## Layout\n\n| folder | role |\n|---|---|\n"
                    "| [`schema/`](schema/) | the contract |\n\n## Next\n"
                    "| [`ingest/`](ingest/) | not in the layout section |\n")
    assert layout_rows(page) == ["schema"]
