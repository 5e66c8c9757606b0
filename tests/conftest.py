"""Shared test settings: hypothesis without deadlines (torch on 2 cores misses 200
ms); the built site, its loopback server and Chromium, shared by the browser tests
(tests/test_site_browser.py, tests/test_live_browser.py)."""

import contextlib
import functools
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from hypothesis import settings

settings.register_profile("named", deadline=None, max_examples=25, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "named"))

# Tests use tiny tensors and pytest-xdist runs one worker per core: a second intra-op
# thread per worker only makes the workers wait on each other.
torch.set_num_threads(1)
# The same for the processes tests start (notebook kernels, the command line): with
# two threads each beside the other worker, the notebooks ran 1.6x slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _seed_and_checks_on():
    """Every test starts seeded and with shape checks on, whatever the last one did."""
    import named_transformer as nt

    torch.manual_seed(0)
    with nt.shape_checks(True):
        yield


# --- browser tests: the site CI built (NT_SITE_DIR) or one built per session ---------

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def live_models_script():
    """docs/scripts/live_models.py, imported once (a script, not a package module):
    the live models' PyTorch references for tests/test_onnx.py and
    tests/test_live_browser.py."""
    path = ROOT / "docs" / "scripts" / "live_models.py"
    spec = importlib.util.spec_from_file_location("live_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["live_models"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


CHROMIUM = Path("/usr/bin/chromium")
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
    # Every request off the loopback goes to a proxy that is not there, so it fails in
    # Chromium (the tests record it: open_page in tests/test_site_browser.py); the
    # loopback server is reached directly (Chromium never proxies it). Blocking here,
    # not with Playwright's routing, leaves Chromium's cache on: routing turns it off.
    "--proxy-server=http://127.0.0.1:9",
]


# Fixtures that read the built site: the tests using them run last (see below).
SITE_FIXTURES = {"site_dir", "server", "live_models"}
SITE_WAIT_SECONDS = 3600


def built_site() -> Path | None:
    """The site CI built (``NT_SITE_DIR``), or None where none is given.

    CI starts pytest while the docs build is still running, so that the tests which
    need no site use the cores the build leaves idle: it names a status file
    (``NT_SITE_STATUS``) that the build writes its exit code into when it ends, and
    this waits for it."""
    given = os.environ.get("NT_SITE_DIR")
    if not given:
        return None
    status = os.environ.get("NT_SITE_STATUS")
    if status:
        waited = 0.0
        while not Path(status).is_file():
            if waited > SITE_WAIT_SECONDS:
                pytest.fail(f"the docs build wrote no {status} in an hour")
            time.sleep(1.0)
            waited += 1.0
        code = Path(status).read_text().strip()
        if code != "0":
            pytest.fail(
                f"the docs build failed (exit {code}): CI prints its log after pytest"
            )
    site = Path(given)
    assert (site / "index.html").is_file(), f"NT_SITE_DIR={given} holds no built site"
    return site


# The longest site file (about four minutes of one worker) is handed out first of all;
# the second next after the files that need no site, then the other site files.
SITE_FILES_FIRST = ("test_live_browser.py", "test_site_browser.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with a test that reads the built site go last, whole, keeping the
    order of tests (pytest-xdist hands out whole files in this order:
    ``--no-loadscope-reorder`` in pyproject), but for the longest: it goes first.
    Under CI its worker waits for the docs build while the other runs the files that
    need no site (the build and that worker keep both cores busy), then runs it beside
    them, so it is not left running alone at the end; the other site files start when
    the build is done and no file that needs no site remains to hand out."""
    site_files = {
        item.path for item in items
        if SITE_FIXTURES & set(getattr(item, "fixturenames", ()))
    }  # fmt: skip

    def place(item: pytest.Item) -> int:
        if item.path not in site_files:
            return 1
        if item.path.name == SITE_FILES_FIRST[0]:
            return 0
        return 2 if item.path.name in SITE_FILES_FIRST else 3

    items.sort(key=place)  # stable: files and tests keep their order within a place


@pytest.fixture(scope="session")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = built_site()
    if site is not None:
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


SEARCH_INDEX = "search/search_index.json"


@functools.cache
def small_search_index(site: Path) -> bytes:
    """The site's search index cut to its first page: the same 1.6 MB file is fetched
    by every page, and Material's search worker builds a lunr index of it, seconds of
    CPU a page on two shared cores."""
    whole = json.loads((site / SEARCH_INDEX).read_text())
    return json.dumps({**whole, "docs": whole["docs"][:1]}).encode()


class _SiteHandler(SimpleHTTPRequestHandler):
    """Serves the site quietly, every file cacheable: Chromium's cache may then serve
    what a context already fetched (the theme's scripts and fonts, what its size limits
    let it keep) instead of fetching it again per page. Unless ``whole_search``, the
    search index is cut (``small_search_index``)."""

    whole_search = False

    def log_message(self, format: str, *args: object) -> None:
        pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "max-age=3600")
        super().end_headers()

    def copyfile(self, source, outputfile) -> None:
        try:
            super().copyfile(source, outputfile)
        except (BrokenPipeError, ConnectionResetError):
            pass  # a test closed the page while a file (a 90 MB model) was on its way

    def do_GET(self) -> None:
        if self.whole_search or self.path.split("?")[0] != "/" + SEARCH_INDEX:
            return super().do_GET()
        body = small_search_index(Path(self.directory))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _WholeSearchHandler(_SiteHandler):
    whole_search = True


@contextlib.contextmanager
def serving(site_dir: Path, whole_search: bool = False) -> Iterator[str]:
    """The built site at a loopback URL, its search index whole or cut."""
    handler = functools.partial(
        _WholeSearchHandler if whole_search else _SiteHandler, directory=str(site_dir)
    )
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="session")
def server(site_dir: Path) -> Iterator[str]:
    """The site, its search index cut to one page (``small_search_index``)."""
    with serving(site_dir) as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """One Chromium for the session."""
    if not CHROMIUM.is_file():
        pytest.skip(
            "Debian chromium is not installed at /usr/bin/chromium "
            "(.ci/run installs it)"
        )
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright (test extra) missing"
    )
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()
