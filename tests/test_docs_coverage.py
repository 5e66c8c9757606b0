"""Every public name of the package has its real source on a docs page.

Generic by construction: the Markdown under docs/ is parsed for snippet includes
(``--8<-- "named_transformer/x.py:section"``, a whole file without ``:section``) and
mkdocstrings directives (``::: named_transformer.x`` or
``::: named_transformer.x.name``), and each is mapped to the top-level names it shows by
reading the package's AST. A new module only needs a page; a public name that no page
shows fails here.

Also: every Python fence on a page is either executed (markdown-exec) or an include of
package source, and an exception inside an executed block fails
``mkdocs build --strict``.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

import named_transformer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "named_transformer"
SNIPPET = re.compile(r'^\s*-{1,2}8<-{1,2}\s+"(?P<target>[^"]+)"', re.MULTILINE)
DIRECTIVE = re.compile(r"^\s*:::\s+(?P<target>[\w.]+)", re.MULTILINE)
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=indent)```",
    re.MULTILINE | re.DOTALL,
)
START = re.compile(r"#\s*-{1,2}8<-{1,2}\s*\[start:(?P<name>[\w-]+)\]")
END = re.compile(r"#\s*-{1,2}8<-{1,2}\s*\[end:(?P<name>[\w-]+)\]")


def pages() -> list[Path]:
    return sorted(
        p
        for p in DOCS.rglob("*.md")
        if p.relative_to(DOCS).parts[0] not in {"hooks", "scripts"}
    )


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


@cache
def defined(path: Path) -> dict[str, tuple[int, int]]:
    """Top-level names a module defines (not imports), with their line span."""
    tree = ast.parse(path.read_text())
    names: dict[str, tuple[int, int]] = {}
    for node in tree.body:
        first = min(
            [node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]
        )
        span = (first, node.end_lineno or node.lineno)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = span
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = span
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = span
    return names


@cache
def sections(path: Path) -> dict[str, tuple[int, int]]:
    """Snippet sections of a file: name -> (first line, last line), 1-based."""
    opened: dict[str, int] = {}
    found: dict[str, tuple[int, int]] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if match := START.search(line):
            opened[match["name"]] = number
        elif (match := END.search(line)) and match["name"] in opened:
            found[match["name"]] = (opened.pop(match["name"]), number)
    return found


def names_in_snippet(target: str) -> set[tuple[str, str]]:
    """(module, name) pairs whose definitions a snippet include shows."""
    file, _, rest = target.partition(":")
    path = ROOT / file
    if path.suffix != ".py" or not path.is_relative_to(PACKAGE) or not path.is_file():
        return set()
    if not rest:
        lines = (1, 10**9)
    elif rest.split(":")[0].isdigit():
        bounds = [int(b) for b in rest.split(":") if b.isdigit()]
        lines = (bounds[0], bounds[-1] if len(bounds) > 1 else 10**9)
    else:
        assert rest in sections(path), f"snippet section {target!r} does not exist"
        lines = sections(path)[rest]
    return {
        (module_name(path), name)
        for name, (first, last) in defined(path).items()
        if lines[0] <= first and last <= lines[1]
    }


def names_in_directive(target: str) -> set[tuple[str, str]]:
    """(module, name) pairs a mkdocstrings ``:::`` entry documents (with source)."""
    parts = target.split(".")
    for split in range(len(parts), 0, -1):
        path = ROOT.joinpath(*parts[:split]).with_suffix(".py")
        if path.is_file() and path.is_relative_to(PACKAGE):
            rest = parts[split:]
            module = module_name(path)
            if rest:
                return {(module, rest[0])}
            public = getattr(__import__(module, fromlist=["*"]), "__all__", None)
            return {
                (module, n)
                for n in defined(path)
                if (n in public if public else n[0] != "_")
            }
    return set()


def coverage() -> dict[tuple[str, str], list[str]]:
    shown: dict[tuple[str, str], list[str]] = defaultdict(list)
    for page in pages():
        text = page.read_text()
        page_id = page.relative_to(DOCS).as_posix()
        for match in SNIPPET.finditer(text):
            for key in names_in_snippet(match["target"]):
                shown[key].append(page_id)
        for match in DIRECTIVE.finditer(text):
            for key in names_in_directive(match["target"]):
                shown[key].append(page_id)
    return shown


def home_module(name: str) -> str:
    """The module that defines a public name of the package."""
    obj = getattr(named_transformer, name)
    homes = [
        module_name(path)
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
        and name in defined(path)
        and getattr(__import__(module_name(path), fromlist=["*"]), name, None) is obj
    ]
    assert len(homes) == 1, f"{name}: defined in {homes or 'no module'}"
    return homes[0]


def uncovered(names: list[str], shown: dict[tuple[str, str], list[str]]) -> list[str]:
    return [name for name in names if (home_module(name), name) not in shown]


def test_every_public_name_has_its_source_on_a_page() -> None:
    missing = uncovered(list(named_transformer.__all__), coverage())
    assert not missing, (
        f"public names with no page showing their source: {missing}. "
        "Include the section "
        '(--8<-- "named_transformer/<module>.py:<section>") on a page, or add '
        "'::: named_transformer.<module>' to docs/reference/api.md."
    )


def test_an_unmapped_name_is_reported() -> None:
    shown = coverage()
    shown_without_attention = {k: v for k, v in shown.items() if k[1] != "attention"}
    assert uncovered(["attention", "softmax"], shown_without_attention) == ["attention"]


def test_mkdocstrings_shows_source() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^\s*show_source:\s*true\s*$", config, re.MULTILINE)
    for page in pages():
        assert "show_source: false" not in page.read_text(), f"{page}: hides the source"


def test_snippet_targets_exist() -> None:
    for page in pages():
        for match in SNIPPET.finditer(page.read_text()):
            file, _, section = match["target"].partition(":")
            assert (ROOT / file).is_file(), f"{page.name}: {file} does not exist"
            if section and not section.split(":")[0].isdigit():
                assert section in sections(ROOT / file), (
                    f"{page.name}: no section {match['target']}"
                )


def test_every_python_fence_is_executed_or_included() -> None:
    """No hand-written output and no pasted library code: Python fences run or
    include."""
    offenders = []
    for page in pages():
        for fence in FENCE.finditer(page.read_text()):
            language = fence["info"].strip().split(" ")[0].lower()
            if language not in {"python", "py", "pycon"}:
                continue
            executed = 'exec="true"' in fence["info"] or "exec=true" in fence["info"]
            included = bool(SNIPPET.fullmatch(fence["body"].strip()))
            if not (executed or included):
                offenders.append(
                    f"{page.relative_to(DOCS)}: {fence['body'].strip()[:60]!r}"
                )
    assert not offenders, f"python fences neither executed nor included: {offenders}"


def test_an_exception_in_an_executed_block_fails_the_strict_build(
    tmp_path: Path,
) -> None:
    """markdown-exec reports an exception as a warning; --strict turns it into a
    failure."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: probe\nplugins:\n  - markdown-exec\n"
        "markdown_extensions:\n  - pymdownx.superfences\n"
    )
    page = tmp_path / "docs" / "index.md"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        str(tmp_path / "site"),
    ]

    def run(body: str) -> subprocess.CompletedProcess[str]:
        page.write_text(f'# probe\n\n```python exec="true"\n{body}\n```\n')
        return subprocess.run(
            build, cwd=tmp_path, env=env, capture_output=True, text=True, check=False
        )

    ok = run("print(6 * 7)")
    assert ok.returncode == 0, ok.stderr
    assert "<p>42</p>" in (tmp_path / "site" / "index.html").read_text()
    raises = run("print(1 / 0)")
    assert raises.returncode != 0
    assert "ZeroDivisionError" in raises.stderr + raises.stdout
