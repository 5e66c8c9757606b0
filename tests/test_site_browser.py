"""Open every page of the built site in headless Chromium, with the network cut off.

The site is the one CI built (``NT_SITE_DIR``, set by ``.ci/run`` after
``mkdocs build --strict``); without it, this module builds the site into a temporary
directory once per test session. Each page is served from 127.0.0.1; every request to
any other host is blocked and recorded. Per page the test asserts: no external request,
no console error, math rendered by KaTeX (no ``.katex-error``, no raw TeX left in the
page text outside code, navigation included), on concept pages (``learn/``,
``models/``, not a section's index) at least one code block whose lines come from the
package's own source, and a layout that fits: at 1280x800 and at 1600x900 (the same
loaded page, resized) no code block, table, display equation or image in the article
needs a horizontal scroll bar, and a code block whose lines are at most 88 columns (the
package's line length) fits without wrapping. At phone width (390x844) a few pages are
checked for a working navigation drawer and body text that wraps. Material's search
index, the same file on every page, is loaded whole by the home page; the other pages
get it cut to one entry (``small_search_index`` in tests/conftest.py), sparing a lunr
build per page.

Uses Debian's ``/usr/bin/chromium`` (``.ci/run`` installs it); never
``playwright install``.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from conftest import serving

try:
    from playwright.sync_api import TimeoutError as TIMEOUT
except ImportError:  # the browser fixture skips every test that would need it
    TIMEOUT = TimeoutError

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "named_transformer"
CONCEPT_DIRS = ("learn/", "models/")
# TeX that KaTeX never rendered, in the page text outside code: a delimiter (\( \) \[ \]
# from arithmatex, $$), a command (\mathsf, \frac, the site's \ndot, \nfun), or a $x$.
RAW_TEX = re.compile(
    r"\$\$|\\[()\[\]]|\\[A-Za-z]{2,}|\$[^\s$](?:[^$\n]{0,200}[^\s$])?\$"
)
# Window sizes at which nothing in the article may need a horizontal scroll bar.
DESKTOP = ((1280, 800), (1600, 900))
PHONE = (390, 844)
PHONE_PAGES = ("learn/basic-self-attention/", "workflows/training/")
SOURCE_COLUMNS = 88  # ruff's line length: such a line must fit a code block unwrapped
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def page_paths() -> list[str]:
    """Site-relative URL of every Markdown page (``learn/masks.md`` ->
    ``learn/masks/``)."""
    paths = []
    for source in sorted(DOCS.rglob("*.md")):
        relative = source.relative_to(DOCS)
        if relative.parts[0] in {"hooks", "scripts"}:
            continue
        if relative.name == "index.md":
            url = relative.parent.as_posix()
            paths.append("" if url == "." else url + "/")
        else:
            paths.append(relative.with_suffix("").as_posix() + "/")
    return paths


PAGES = page_paths()


@functools.cache
def package_lines() -> frozenset[str]:
    """Distinctive lines of the package source: what an included snippet must show."""
    lines = set()
    for source in PACKAGE.rglob("*.py"):
        for line in source.read_text().splitlines():
            line = line.strip()
            if len(line) >= 20 and not line.startswith("#"):
                lines.add(line)
    return frozenset(lines)


@pytest.fixture(scope="session")
def browser_context(browser) -> Iterator[object]:
    """The desktop context, a window of the first size in ``DESKTOP``: the render
    checks share one tab of it (``desktop_tab``), the other tests open their own."""
    width, height = DESKTOP[0]
    context = browser.new_context(
        service_workers="block", viewport={"width": width, "height": height}
    )
    yield context
    context.close()


@pytest.fixture(scope="session")
def phone_context(browser) -> Iterator[object]:
    """A phone: narrow viewport, touch, and the page's meta viewport honoured."""
    width, height = PHONE
    context = browser.new_context(
        service_workers="block",
        viewport={"width": width, "height": height},
        is_mobile=True,
        has_touch=True,
    )
    yield context
    context.close()


def open_page(context, external: list[str], errors: list[str]):
    """A new page whose requests off the loopback are recorded in ``external`` (and
    fail: Chromium's proxy, ``CHROMIUM_ARGS`` in tests/conftest.py), and whose
    console errors and uncaught exceptions go to ``errors``."""

    def request(request_) -> None:
        url = request_.url
        if (
            not url.startswith(("data:", "blob:"))
            and (urlparse(url).hostname or "") not in LOOPBACK
        ):
            external.append(url)

    page = context.new_page()
    page.on("request", request)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    return page


def load(page, url: str, has_math: bool) -> None:
    """Open ``url`` and wait until KaTeX has rendered the page and the network is
    idle."""
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, (
        f"{url}: HTTP {response and response.status}"
    )
    if has_math:
        page.wait_for_function(
            "document.documentElement.dataset.mathRendered === 'true'",
            # generous: a page's live widgets open their models on the same thread
            timeout=60_000,
        )
    page.wait_for_load_state("networkidle")  # requests made after load are recorded too


# Every code block, table, display equation and image of the article, with each of its
# ancestors inside the article that would scroll sideways (overflow-x auto or scroll:
# pre > code, Material's .md-typeset__scrollwrap around a table, the div.arithmatex
# around a display): any of them wider inside than outside needs a scroll bar. A code
# block whose lines all fit SOURCE_COLUMNS must also fit with wrapping switched off
# (extra.css wraps longer lines where 88 columns fit).
LAYOUT_JS = """(columns) => {
  const article = document.querySelector("article") ||
                  document.querySelector(".md-content");
  // Collapsed blocks (the API pages' "Source code in ...") are measured open.
  article.querySelectorAll("details").forEach((details) => { details.open = true; });
  const bounds = article.getBoundingClientRect();
  const found = [];
  const clip = (text) => (text || "").replace(/\\s+/g, " ").trim().slice(0, 70);
  const overflows = (box) => box.scrollWidth > box.clientWidth + 1;
  const scrollers = (element) => {
    const boxes = [];
    for (let e = element; e && e !== article; e = e.parentElement) {
      const overflow = getComputedStyle(e).overflowX;
      if (e === element || overflow === "auto" || overflow === "scroll") boxes.push(e);
    }
    return boxes;
  };
  const check = (kind, element, text) => {
    for (const box of scrollers(element)) {
      if (overflows(box)) {
        found.push({kind, text: clip(text), need: box.scrollWidth,
                    have: box.clientWidth});
        return;
      }
    }
  };
  const tex = (display) => {
    const annotation = display.querySelector("annotation");
    return annotation ? annotation.textContent : display.textContent;
  };
  const short = [];  // code blocks of lines within `columns`: measured unwrapped below
  article.querySelectorAll("pre").forEach((pre) => {
    const code = pre.querySelector("code") || pre;
    check("code block", code, code.textContent);
    const lines = code.textContent.split("\\n");
    if (Math.max(...lines.map((line) => line.length)) <= columns) short.push(code);
  });
  article.querySelectorAll("table").forEach((table) =>
    check("table", table, table.textContent));
  article.querySelectorAll(".katex-display").forEach((display) =>
    check("display equation", display, tex(display)));
  article.querySelectorAll("img").forEach((img) => {
    const box = img.getBoundingClientRect();
    if (box.width && (box.left < bounds.left - 1 || box.right > bounds.right + 1)) {
      found.push({kind: "image", text: img.getAttribute("src"),
                  need: Math.round(box.width), have: Math.round(bounds.width)});
    }
    check("image", img, img.getAttribute("src"));
  });
  // Unwrapped all at once and then measured: one layout of the page, where unwrapping
  // and measuring each block in turn laid it out twice per block (945 code blocks on
  // the API reference). A code block scrolls in its own box, so unwrapping one does not
  // change another's width.
  short.forEach((code) => { code.style.whiteSpace = "pre"; });
  short.forEach((code) => {
    if (overflows(code)) {
      found.push({kind: `code block of <= ${columns} columns, unwrapped`,
                  text: clip(code.textContent), need: code.scrollWidth,
                  have: code.clientWidth});
    }
  });
  short.forEach((code) => { code.style.whiteSpace = ""; });
  return found;
}"""


def layout_problems(page, path: str, size: tuple[int, int]) -> list[str]:
    """What in the page, at this window size, needs a horizontal scroll bar."""
    found = page.evaluate(LAYOUT_JS, SOURCE_COLUMNS)
    return [
        f"{path or 'home'} at {size[0]}x{size[1]}: {f['kind']} needs {f['need']} px, "
        f"has {f['have']} px: {f['text']!r}"
        for f in found
    ]


def test_every_built_page_is_tested(site_dir: Path) -> None:
    built = {
        "" if p.parent == site_dir else p.parent.relative_to(site_dir).as_posix() + "/"
        for p in site_dir.rglob("index.html")
    }
    assert built == set(PAGES), (
        f"built pages and docs/*.md differ: {built ^ set(PAGES)}"
    )


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            elif name == "href" and value and tag == "a":
                self.links.append(value)


def test_internal_links_and_anchors_resolve(site_dir: Path) -> None:
    """Links added after mkdocs' own validation (hooks, mkdocstrings) point somewhere
    real."""
    parsed: dict[Path, _Anchors] = {}

    def parse(page: Path) -> _Anchors:
        if page not in parsed:
            parsed[page] = _Anchors()
            parsed[page].feed(page.read_text())
        return parsed[page]

    broken = []
    for page in sorted(site_dir.rglob("index.html")):
        for link in parse(page).links:
            target = urlparse(link)
            if (
                target.scheme
                or target.netloc
                or link.startswith(("mailto:", "javascript:"))
            ):
                continue
            file = (
                (page.parent / unquote(target.path)).resolve() if target.path else page
            )
            if file.is_dir():
                file = file / "index.html"
            if not file.is_file():
                broken.append(f"{page.relative_to(site_dir)}: {link} (no such page)")
            elif target.fragment and file.suffix == ".html":
                if unquote(target.fragment) not in parse(file).ids:
                    broken.append(
                        f"{page.relative_to(site_dir)}: {link} (no such anchor)"
                    )
    assert not broken, "broken links:\n" + "\n".join(broken[:30])


@pytest.fixture(scope="module")
def whole_server(site_dir: Path) -> Iterator[str]:
    """The site with its whole search index, for the home page."""
    with serving(site_dir, whole_search=True) as url:
        yield url


@pytest.fixture(scope="module")
def desktop_tab(browser_context) -> Iterator[tuple[object, list[str], list[str]]]:
    """One tab that every page's render check navigates, with its record of requests
    off the loopback and of console errors: a tab per page started a renderer process
    per page."""
    external: list[str] = []
    errors: list[str] = []
    page = open_page(browser_context, external, errors)
    yield page, external, errors
    page.close()


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p or "home")
def test_page_renders_offline(
    path: str, server: str, whole_server: str, desktop_tab, site_dir: Path
) -> None:
    """Renders offline with its math, and fits at each size in ``DESKTOP``: the page is
    loaded once, at the first size, and resized (no reload) to the others."""
    page, external, errors = desktop_tab
    external.clear()  # what the page before left: its test has asserted on it
    errors.clear()
    misfits: list[str] = []
    try:
        has_math = 'class="arithmatex"' in (site_dir / path / "index.html").read_text()
        # the home page loads the search index whole; the others a cut one (same code)
        load(page, (whole_server if path == "" else server) + path, has_math)
        report = page.evaluate(
            """() => {
              const article = document.querySelector("article");
              // article, navigation and toc
              const clone = document.body.cloneNode(true);
              clone.querySelectorAll("pre, code, .katex, script, style")
                   .forEach(e => e.remove());
              return {
                text: clone.innerText,
                katex: article.querySelectorAll(".katex").length,
                arithmatex: article.querySelectorAll(".arithmatex").length,
                unrendered: article
                  .querySelectorAll(".arithmatex:not([data-katex=done])").length,
                katexErrors: Array.from(article.querySelectorAll(".katex-error"))
                                  .map(e => e.getAttribute("title") || e.textContent),
                code: Array.from(article.querySelectorAll("pre code"))
                           .map(e => e.innerText),
              };
            }"""
        )
        for width, height in DESKTOP:
            if (width, height) != DESKTOP[0]:
                page.set_viewport_size({"width": width, "height": height})
                page.wait_for_function(f"window.innerWidth === {width}")
            misfits += layout_problems(page, path, (width, height))
    finally:
        # leave the page now, so that what its unloading logs is charged to it, not to
        # the next; a tab that fails here fails the next page's test itself
        with contextlib.suppress(Exception):
            page.goto("about:blank")
            width, height = DESKTOP[0]
            page.set_viewport_size({"width": width, "height": height})

    assert not external, f"{path}: requests left the site: {external}"
    assert not errors, f"{path}: console errors: {errors}"
    assert not report["katexErrors"], f"{path}: KaTeX errors: {report['katexErrors']}"
    if has_math:
        assert report["katex"] > 0 and report["unrendered"] == 0, (
            f"{path}: math not rendered"
        )
    raw = [
        report["text"][max(0, m.start() - 50) : m.end() + 50]
        for m in RAW_TEX.finditer(report["text"])
    ]
    assert not raw, f"{path}: raw TeX in the page text: {raw[:5]}"
    if (
        path.startswith(CONCEPT_DIRS) and path not in CONCEPT_DIRS
    ):  # a section index is not
        source = package_lines()
        included = [
            block
            for block in report["code"]
            if any(line.strip() in source for line in block.splitlines())
        ]
        assert included, (
            f"{path}: a concept page shows no code included from named_transformer/"
        )
    assert not misfits, (
        "needs a horizontal scroll bar (break the equation, shorten the table, "
        "or see docs/stylesheets/extra.css):\n" + "\n".join(misfits)
    )


@pytest.mark.parametrize("path", PHONE_PAGES)
def test_phone_width(path: str, server: str, phone_context, site_dir: Path) -> None:
    """At 390x844 the hamburger opens the navigation drawer, and the page itself never
    scrolls sideways: body text wraps (a code block or an equation may scroll in its
    own box)."""
    external: list[str] = []
    errors: list[str] = []
    page = open_page(phone_context, external, errors)
    try:
        has_math = 'class="arithmatex"' in (site_dir / path / "index.html").read_text()
        load(page, server + path, has_math)
        widths = page.evaluate(
            """() => {
              const root = document.documentElement;
              const wide = Array.from(
                document.querySelectorAll("article p, article li, article h1, "
                                          + "article h2, article h3"))
                .filter(e => e.getBoundingClientRect().right > root.clientWidth + 1)
                .map(e => e.textContent.replace(/\\s+/g, " ").trim().slice(0, 70));
              return {scroll: root.scrollWidth, body: document.body.scrollWidth,
                      client: root.clientWidth, wide};
            }"""
        )
        drawer = page.locator(".md-sidebar--primary")
        link = page.locator(".md-sidebar--primary .md-nav__link").first
        closed = drawer.bounding_box()
        page.locator('.md-header label[for="__drawer"]').click()
        try:  # Material slides the drawer in over 250 ms
            page.wait_for_function(
                """() => {
                  const box = document.querySelector(".md-sidebar--primary")
                                      .getBoundingClientRect();
                  return document.getElementById("__drawer").checked
                         && box.left >= -1 && box.right <= window.innerWidth + 1;
                }""",
                timeout=5_000,
            )
            opened = True
        except TIMEOUT:
            opened = False
        link_visible = link.is_visible()
        link_box = link.bounding_box()
    finally:
        page.close()

    assert not external, f"{path}: requests left the site: {external}"
    assert not errors, f"{path}: console errors: {errors}"
    assert widths["client"] == PHONE[0], widths
    assert max(widths["scroll"], widths["body"]) <= widths["client"] + 1, (
        f"{path} at {PHONE[0]}x{PHONE[1]}: the page scrolls sideways: {widths}"
    )
    assert not widths["wide"], (
        f"{path} at {PHONE[0]}x{PHONE[1]}: text wider than the screen: {widths['wide']}"
    )
    assert closed is None or closed["x"] + closed["width"] <= 1, (
        f"{path}: the navigation drawer is open before the hamburger is clicked"
    )
    assert opened, f"{path}: the hamburger did not slide the navigation drawer in"
    assert link_visible and link_box is not None, f"{path}: drawer opened empty"
    # the same 1 px tolerance as the wait above: the drawer may still be settling
    assert -1 <= link_box["x"] and link_box["x"] + link_box["width"] <= PHONE[0] + 1, (
        f"{path}: the drawer's first link is off screen: {link_box}"
    )


@pytest.mark.parametrize("path", ["learn/notation/", "workflows/index/"])
def test_the_notebook_link_downloads_a_valid_notebook(
    path: str, server: str, browser_context
) -> None:
    """"Run this page as a notebook" downloads the page's notebook: valid nbformat 4,
    the install cell first, the page's executed code after it (docs/hooks/notebooks.py;
    tests/test_notebooks.py checks every one against its page and runs all but the
    heaviest, whose code the strict docs build runs)."""
    nbformat = pytest.importorskip("nbformat", reason="nbformat (test extra) missing")
    external: list[str] = []
    errors: list[str] = []
    page = open_page(browser_context, external, errors)
    try:
        page.goto(server + path.removesuffix("index/"))
        link = page.get_by_role("link", name="Run this page as a notebook")
        with page.expect_download() as download:
            link.click()
        name = download.value.suggested_filename
        book = nbformat.read(download.value.path(), as_version=4)
    finally:
        page.close()
    nbformat.validate(book)
    assert name == Path(path.rstrip("/")).name + ".ipynb"
    # the install cell: it runs wherever the package is installed, else says how
    assert "pip install -e '.[docs]'" in book.cells[1].source
    code = [cell.source for cell in book.cells[2:] if cell.cell_type == "code"]
    assert code and "import named_transformer as nt" in "\n".join(code)
    assert not external and not errors, (external, errors)
