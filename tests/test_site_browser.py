"""Open every page of the built site in headless Chromium, with the network cut off.

The site is the one CI built (``NT_SITE_DIR``, set by ``.ci/run`` after
``mkdocs build --strict``); without it, this module builds the site into a temporary
directory once per test session. Each page is served from 127.0.0.1; every request to
any other host is blocked and recorded. Per page the test asserts: no external request,
no console error, math rendered by KaTeX (no ``.katex-error``, no raw TeX left in the
page text outside code, navigation included), and on concept pages (``learn/``,
``models/``, not a section's index) at least one code block whose lines come from the
package's own source.

Uses Debian's ``/usr/bin/chromium`` (``.ci/run`` installs it); never
``playwright install``.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "named_transformer"
CHROMIUM = Path("/usr/bin/chromium")
CONCEPT_DIRS = ("learn/", "models/")
RAW_TEX = ("$$", "\\(", "\\[", "\\ndot", "\\nfun", "\\mathsf", "\\frac")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-quic",
    "--metrics-recording-only",
    "--dns-prefetch-disable",
]


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
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("NT_SITE_DIR")
    if given:
        site = Path(given)
        assert (site / "index.html").is_file(), (
            f"NT_SITE_DIR={given} holds no built site"
        )
        return site
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, (
        f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    )
    return site


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def server(site_dir: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def browser_context() -> Iterator[object]:
    """One Chromium and one browser context for the session; each test opens its own
    page."""
    if not CHROMIUM.is_file():
        pytest.skip(
            "Debian chromium is not installed at /usr/bin/chromium "
            "(.ci/run installs it)"
        )
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright (test extra) missing"
    )
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        context = browser.new_context(service_workers="block")
        yield context
        context.close()
        browser.close()


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


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p or "home")
def test_page_renders_offline(
    path: str, server: str, browser_context, site_dir: Path
) -> None:
    external: list[str] = []
    errors: list[str] = []

    def route(route_) -> None:
        host = urlparse(route_.request.url).hostname or ""
        if route_.request.url.startswith(("data:", "blob:")) or host in LOOPBACK:
            route_.continue_()
        else:
            external.append(route_.request.url)
            route_.abort()

    page = browser_context.new_page()
    page.route("**/*", route)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    try:
        response = page.goto(server + path, wait_until="load")
        assert response is not None and response.ok, (
            f"{path}: HTTP {response and response.status}"
        )
        html = (site_dir / path / "index.html").read_text()
        has_math = 'class="arithmatex"' in html
        if has_math:
            page.wait_for_function(
                "document.documentElement.dataset.mathRendered === 'true'",
                timeout=10_000,
            )
        page.wait_for_load_state(
            "networkidle"
        )  # requests made after load are recorded too
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
    finally:
        page.close()

    assert not external, f"{path}: requests left the site: {external}"
    assert not errors, f"{path}: console errors: {errors}"
    assert not report["katexErrors"], f"{path}: KaTeX errors: {report['katexErrors']}"
    if has_math:
        assert report["katex"] > 0 and report["unrendered"] == 0, (
            f"{path}: math not rendered"
        )
    raw = [token for token in RAW_TEX if token in report["text"]]
    context_of = {
        t: report["text"][max(0, report["text"].find(t) - 60) :][:120] for t in raw
    }
    assert not raw, f"{path}: raw TeX in the page text: {context_of}"
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
