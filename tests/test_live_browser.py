"""The live attention widgets, in headless Chromium, against the PyTorch models.

For each live model (``docs/scripts/live_models.py``: ``LIVE``) the test opens the page
of the built site that shows its widget (a ``<div class="nt-live" data-model=...>``;
when no page shows one yet, the widget is added to the home page), types inputs it
chooses into the widget's text box and waits for ``data-runs`` to go up, then reads
``element.ntLive`` and compares with Python on the same text:

- the ids with Python's tokenization (cut to the sidecar's ``max_length``),
- every attention map with the PyTorch module's on the page's own ids, to 1e-4,
- the output with Python's greedy decoding or label (MiniLM: the embedding, to 1e-4).

Inputs: the sidecar's example, the longest allowed, one beyond it (cut, with a note),
a non-ASCII one and an invalid one (a sentence naming what is wrong, no maps). No
request may leave the loopback server, and the widget may not make the page scroll
sideways at 390, 1280 or 1600 px. A model trained on a range of lengths (the sidecar's
``trained_lengths``) warns, in the command line's words, about a length outside it; the
caption follows the reader's input; empty, very long and non-ASCII input is read
without an error at 390 and 1280 px. With ``NT_SCREENSHOTS`` set, a screenshot of each
state goes to that folder (their paths are printed); without it none is taken.

Each page with widgets is loaded once per window width for the whole module (fixture
``widgets``): a widget's tests drive it in turn on the page the earlier ones left,
each test setting the input it needs.

Site, server and Chromium: the fixtures of tests/conftest.py (``NT_SITE_DIR`` or a build
per session).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import functools
import io
import json
import math
import os
import random
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import live_models_script
from test_site_browser import open_page

import named_transformer as nt
from named_transformer.workflows.cli import read_input
from named_transformer.workflows.runner import load_run
from named_transformer.workflows.tasks import TASKS, date_formats

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("copy", "reverse", "sort", "dates", "sentiment", "basic", "minilm",
          "induction")  # fmt: skip
WIDTHS = ((390, 844), (1280, 800), (1600, 900))
TOLERANCE = 1e-4
LOAD_MS = 120_000  # MiniLM's graph is 90 MB, read and compiled on two shared cores
RUN_MS = 60_000


@functools.cache
def reference(name: str):
    return live_models_script().reference(name)


def sidecar(site: Path, name: str) -> dict[str, Any]:
    path = site / "assets" / "live" / "models" / f"{name}.json"
    assert path.is_file(), f"the built site has no {path.relative_to(site)}"
    return json.loads(path.read_text())


@pytest.fixture(scope="session")
def shots() -> Path | None:
    """Where the screenshots go: ``NT_SCREENSHOTS``, or nowhere. They are for a person
    to look at and nothing asserts on them; at nearly a second each, the 170 states
    cost CI more than two minutes when taken by default."""
    folder = os.environ.get("NT_SCREENSHOTS")
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def widget_pages(site_dir: Path) -> dict[str, str]:
    """Model name -> the first page (site-relative URL) whose markup shows its
    widget."""
    found: dict[str, str] = {}
    for page in sorted(site_dir.rglob("index.html")):
        for name in re.findall(r'class="nt-live"[^>]*data-model="([^"]+)"',
                               page.read_text()):  # fmt: skip
            url = page.parent.relative_to(site_dir).as_posix()
            found.setdefault(name, "" if url == "." else url + "/")
    return found


# ntLive without the weights, as a plain object
LIVE_JS = """(e) => { const out = {};
                     for (const k of Object.keys(e.ntLive))
                       if (k !== "weights") out[k] = e.ntLive[k];
                     return out; }"""
# Resolves with ntLive (no weights) once data-runs exceeds n or the widget fails;
# rejects after ms.
WAIT_JS = f"""(e, [n, ms]) => new Promise((done, fail) => {{
  const ready = () => Number(e.dataset.runs || 0) > n || e.dataset.state === "error";
  if (ready()) return done(({LIVE_JS})(e));
  const watch = new MutationObserver(() => {{
    if (!ready()) return;
    watch.disconnect();
    clearTimeout(timer);
    done(({LIVE_JS})(e));
  }});
  const timer = setTimeout(() => {{
    watch.disconnect();
    fail(new Error(`the widget did not recompute in ${{ms}} ms`));
  }}, ms);
  watch.observe(e, {{attributes: true, attributeFilter: ["data-runs", "data-state"]}});
}})"""


class Widget:
    """A page showing the widget of one model, and how to drive it."""

    def __init__(self, page, name: str, external: list[str], errors: list[str]):
        self.page, self.name = page, name
        self.external, self.errors = external, errors
        self.root = page.locator(f'.nt-live[data-model="{name}"]').first
        self.first_text = ""  # what the widget read when the page loaded

    def wait_ready(self) -> None:
        self.root.scroll_into_view_if_needed()
        self.root.evaluate(
            """(e, ms) => new Promise((done, fail) => {
                 const t0 = Date.now();
                 (function poll() {
                   if (e.dataset.state === "error" || Number(e.dataset.runs || 0) >= 1)
                     done();
                   else if (Date.now() - t0 > ms) fail(new Error("widget never ran"));
                   else setTimeout(poll, 50);
                 })();
               })""",
            LOAD_MS,
        )
        live = self.live()
        assert live["state"] == "ready", f"{self.name}: {live['message']}"

    def live(self) -> dict[str, Any]:
        """ntLive without the weights (read apart: MiniLM's are large)."""
        return self.root.evaluate(f"e => ({LIVE_JS})(e)")

    def view(self) -> dict[str, Any]:
        """What the reader sees, in one call: the message line (``message``: its text,
        whether it is shown, its kind), the caption, the input's token chips, the
        first map's grid (None without a map) and the widths of ``FITS_JS``."""
        return self.root.evaluate(VIEW_JS)

    def weights(self) -> dict[str, np.ndarray]:
        """Every attention map on the page, as float32 arrays (sent as base64, which
        the browser's FileReader writes: MiniLM's 256-token maps are 19 MB)."""
        sent = self.root.evaluate(
            """async (e) => { const out = {};
                for (const [name, w] of Object.entries(e.ntLive.weights)) {
                  if (!(w.data instanceof Float32Array))
                    throw new Error(`${name}: weights are no Float32Array`);
                  const blob = new Blob([w.data]);
                  const url = await new Promise((done, fail) => {
                    const reader = new FileReader();
                    reader.onload = () => done(reader.result);
                    reader.onerror = () => fail(reader.error);
                    reader.readAsDataURL(blob);
                  });
                  out[name] = {dims: w.dims, data: url.slice(url.indexOf(",") + 1)};
                }
                return out; }"""
        )
        return {
            name: np.frombuffer(base64.b64decode(w["data"]), np.float32).reshape(
                w["dims"]
            )
            for name, w in sent.items()
        }

    def type(self, text: str) -> dict[str, Any]:
        """Put ``text`` in the box (an input event, as typing makes) and wait for the
        widget to recompute; when the box holds ``text`` and the widget has read it
        (an earlier test left it so), what it computed then."""
        now = self.root.evaluate(
            f"""e => ({{runs: Number(e.dataset.runs || 0), live: ({LIVE_JS})(e),
                       box: e.querySelector("input.nt-live__input").value}})"""
        )
        before = now["runs"]
        box = self.root.locator("input.nt-live__input")
        if now["box"] == text:
            if now["live"]["text"] == text:
                return now["live"]
            box.fill(text + " ")  # the same text fires no event: change it twice
            self._wait(before)
            before += 1
        box.fill(text)
        return self._wait(before)

    def toggle_causal(self) -> dict[str, Any]:
        before = int(self.root.get_attribute("data-runs") or 0)
        self.root.locator("input[name=causal]").click()
        return self._wait(before)

    def _wait(self, before: int) -> dict[str, Any]:
        """Wait until the widget has run more than ``before`` times (or failed), then
        what it computed: one call, woken by the change of ``data-runs`` (no polling,
        which drew a frame of the page at every step)."""
        return self.root.evaluate(WAIT_JS, [before, RUN_MS])

    def shot(self, folder: Path | None, state: str, width: int) -> Path | None:
        if folder is None:  # NT_SCREENSHOTS unset
            return None
        path = folder / f"{self.name}-{state}-{width}.png"
        self.root.screenshot(path=str(path))
        print(f"screenshot: {path}")
        return path


class Widgets:
    """The module's open pages, one per window width and URL, each loaded once: every
    test of a widget drives it on the page the earlier tests left open. The try-it page
    shows seven widgets, MiniLM's 90 MB graph among them, so a page per test (as
    before) loaded all seven some forty times. A page's console errors and requests off
    the loopback are kept for the whole module: each test asserts there were none."""

    def __init__(self, contexts, server: str, pages: dict[str, str]):
        self.contexts, self.server, self.pages = contexts, server, pages
        self.open: dict[tuple[int, str], tuple[Any, list[str], list[str]]] = {}
        self.ready: dict[tuple[int, str], Widget] = {}

    def _page(self, width: int, url: str):
        if (width, url) not in self.open:
            external: list[str] = []
            errors: list[str] = []
            page = open_page(self.contexts[width], external, errors)
            # a generous limit: two shared cores may be busy with a docs build
            page.goto(self.server + url, wait_until="load", timeout=LOAD_MS)
            # Material's header and back-to-top button float over the widget's shots
            page.add_style_tag(content=".md-header, .md-top { visibility: hidden; }")
            self.open[width, url] = (page, external, errors)
        return self.open[width, url]

    def get(self, width: int, name: str, text: str | None = None) -> Widget:
        """``name``'s widget at ``width`` px (on the home page, added, when no page
        shows it yet), computed at least once, its causal box unticked (as every
        page's markup leaves it) and, given ``text``, reading it."""
        if (width, name) not in self.ready:
            page, external, errors = self._page(width, self.pages.get(name, ""))
            if name not in self.pages:
                page.evaluate(
                    """([name, text]) => {
                         const div = document.createElement("div");
                         div.className = "nt-live";
                         div.dataset.model = name;
                         if (text !== null) div.dataset.text = text;
                         document.querySelector("article").prepend(div);
                         const url = new URL("/javascripts/live/widget.js",
                                             location.href);
                         return import(url.href)
                           .then((m) => { m.mount(div); });
                       }""",
                    [name, text],
                )
            widget = Widget(page, name, external, errors)
            widget.wait_ready()
            widget.first_text = widget.live()["text"]
            self.ready[width, name] = widget
        widget = self.ready[width, name]
        widget.root.scroll_into_view_if_needed()
        now = widget.root.evaluate(
            """e => ({causal: e.querySelector("input[name=causal]")?.checked ?? false,
                      text: e.ntLive.text})"""
        )
        if now["causal"]:
            now["text"] = widget.toggle_causal()["text"]
        if text is not None and now["text"] != text:
            widget.type(text)
        return widget

    def close(self) -> None:
        for page, _, _ in self.open.values():
            page.close()


# --- what Python says ---------------------------------------------------------------


def cut_ids(ids: dict[str, list[int]], spec: dict[str, Any]) -> dict[str, list[int]]:
    """Python's ids cut the way the widget cuts them: the source to ``max_length``
    (WordPiece keeps its final [SEP]; a decoder-only model's ``<bos>`` follows)."""
    most, reads = spec.get("max_length"), spec["tokenizer"]["reads"]
    name = "source" if spec["kind"] == "encoder-decoder" else "tokens"
    source = list(ids[name])
    tail = [source.pop()] if spec["kind"] == "decoder-only" else []
    if most and len(source) > most:
        source = (
            [*source[: most - 1], source[-1]]
            if reads == "wordpiece"
            else (source[:most])
        )
    return {name: source + tail}


def python_outputs(name: str, spec: dict[str, Any], ids: dict[str, list[int]],
                   causal: bool) -> dict[str, np.ndarray]:  # fmt: skip
    """The PyTorch module's outputs, by the graph's output names, on the page's ids."""
    inputs = []
    for entry in spec["inputs"]:
        if entry["axes"]:
            inputs.append(torch.tensor([ids[entry["name"]]], dtype=torch.long))
        else:
            inputs.append(torch.tensor(causal))
    with torch.no_grad():
        outputs = reference(name).module(*inputs)
    names = [o["name"] for o in spec["outputs"]]
    return {n: o.float().numpy() for n, o in zip(names, outputs, strict=True)}


def cut_text(text: str, spec: dict[str, Any]) -> str:
    """The text the widget actually reads when ``text`` is too long, for Python's
    ``predict`` (which does not cut)."""
    most, tokenizer = spec.get("max_length"), spec["tokenizer"]
    reads, sep = tokenizer["reads"], tokenizer.get("sep", "")
    if reads == "digits":
        return "".join([c for c in text if c.isdigit()][:most])
    if reads == "characters":
        return text.strip()[:most]
    if reads == "words":
        return sep.join(re.findall(tokenizer["pattern"], text.lower())[:most])
    return text


def compare(widget: Widget, live: dict, name: str, spec: dict, text: str,
            causal: bool = False) -> float:  # fmt: skip
    """Assert the page agrees with Python on ``text``; return the largest difference
    of an attention weight."""
    ref = reference(name)
    assert live["message"] == "", f"{name}: {text!r}: {live['message']}"
    expected = cut_ids(ref.tokenize(text), spec)
    for input_name, ids in expected.items():
        got = live["ids"][input_name]
        assert got[: len(ids)] == ids, f"{name}: {text!r}: ids {got} != {ids}"
        if spec["kind"] != "decoder-only":
            assert len(got) == len(ids), f"{name}: {text!r}: ids {got} != {ids}"
    outputs = python_outputs(name, spec, live["ids"], causal)
    weights = widget.weights()
    assert set(weights) == {a["output"] for a in spec["attention"]}
    worst = 0.0
    for entry in spec["attention"]:
        page, torch_ = weights[entry["output"]], outputs[entry["output"]]
        assert page.shape == torch_.shape, (entry["output"], page.shape, torch_.shape)
        worst = max(worst, float(np.abs(page - torch_).max()))
        queries, keys = live["queries"][entry["output"]], live["keys"][entry["output"]]
        assert (len(queries), len(keys)) == page.shape[-2:], entry["output"]
    assert worst <= TOLERANCE, f"{name}: {text!r}: weights differ by {worst:.2e}"
    output = spec["outputs"][0]["name"]
    if spec.get("output") == "embedding":
        vector = np.asarray(live["vector"], np.float32)
        difference = float(np.abs(vector - outputs[output][0]).max())
        assert difference <= TOLERANCE, f"{name}: embedding differs by {difference}"
    elif spec.get("output") == "label":
        answer = ref.predict(cut_text(text, spec) if live["note"] else text)
        assert live["output"] == answer, (
            f"{name}: {text!r}: {live['output']!r} != {answer!r}"
        )
    elif spec.get("output") == "next":  # the argmax after every token
        vocabulary = spec["tokenizer"]["vocabulary"]
        best = outputs[output][0].argmax(-1)
        answer = "".join(vocabulary[i] for i in best)
        assert live["output"] == answer, f"{name}: {live['output']!r} != {answer!r}"
    elif spec.get("output") == "tokens":
        # Python decodes up to len(source) + 12 tokens, the page up to the sidecar's
        # max_steps: where the model never says <eos>, only that many can agree.
        answer = ref.predict(cut_text(text, spec) if live["note"] else text)
        steps, sep = spec["max_steps"], spec["tokenizer"].get("sep", "")
        tokens = answer.split(sep) if sep else list(answer)
        source = next(iter(expected.values()))
        limit = len(source) - (spec["kind"] == "decoder-only") + 12  # Python's
        if len(tokens) >= limit:  # Python stopped at its limit, not at <eos>
            got = live["output"].split(sep) if sep else list(live["output"])
            both = min(limit, steps)
            assert got[:both] == tokens[:both], (
                f"{name}: {text!r}: {live['output']!r} != {answer!r}"
            )
        else:
            if len(tokens) > steps:
                answer = sep.join(tokens[:steps])
            assert live["output"] == answer, (
                f"{name}: {text!r}: {live['output']!r} != {answer!r}"
            )
    if spec.get("output") == "label":
        log_probs = outputs[output][0]
        assert math.isclose(
            live["probability"], math.exp(log_probs.max()), abs_tol=1e-4
        )
    return worst


# --- inputs the test chooses ---------------------------------------------------------


def inputs_for(spec: dict[str, Any]) -> dict[str, str]:
    """state -> text: the example, the longest allowed, one beyond it, non-ASCII and
    invalid text."""
    tokenizer, most = spec["tokenizer"], spec["max_length"]
    reads = tokenizer["reads"]
    example = spec.get("example") or "the cat sat on the mat"
    if reads == "digits":
        digits = "".join(str((7 * i + 3) % 10) for i in range(most + 3))
        return {"example": example, "longest": " ".join(digits[:most]),
                "beyond": digits, "non-ascii": "12٣4", "invalid": "12x4?"}  # fmt: skip
    if reads == "characters":  # dates: the longest way the task writes a date
        vocabulary = set(tokenizer["vocabulary"])
        longest = max((f(datetime.date(2021, 9, 22)) for f in date_formats().values()),
                      key=len)[:most]  # fmt: skip
        bad = next(c for c in "#@!?%&*" if c not in vocabulary)
        umlaut = next(c for c in "äéøñü" if c not in vocabulary)
        return {"example": example, "longest": longest,
                "beyond": longest + " 2021" * (most // 5 + 1),
                "non-ascii": f"12 M{umlaut}rz 2021",
                "invalid": f"12{bad}03"}  # fmt: skip
    if reads == "words":
        specials = {tokenizer[k] for k in ("pad", "bos", "eos", "unk")}
        known = [w for i, w in enumerate(tokenizer["vocabulary"]) if i not in specials
                 and re.fullmatch(tokenizer["pattern"], w)]  # fmt: skip
        words = [known[i % len(known)] for i in range(most + 4)]
        return {"example": example, "longest": " ".join(words[:most]),
                "beyond": " ".join(words), "non-ascii": "the acting was géniale",
                "invalid": "the acting was xyzzy"}  # fmt: skip
    if reads == "alphabet":  # every character is read: only blank text is refused
        sentence = "the cat sat. " * (most // 13 + 2)
        return {"example": example, "longest": sentence[:most],
                "beyond": sentence[: most + 9], "invalid": "   ",
                "non-ascii": "Naïve café, Zoë! 日本"}  # fmt: skip
    # WordPiece: "good" is one piece; [CLS] and [SEP] make two more
    return {"example": example, "longest": " ".join(["good"] * (most - 2)),
            "beyond": " ".join(["good"] * (most + 8)),
            "non-ascii": "Zürich café — 東京の猫",
            "invalid": "   "}  # fmt: skip


def expect_problem(live: dict, state: str, text: str, spec: dict) -> None:
    """Invalid input: a sentence naming what is wrong, and no maps."""
    assert live["message"], f"{spec['name']}: {text!r} ({state}) gave no message"
    assert live["ids"] == {} and live["output"] == "", live
    reads = spec["tokenizer"]["reads"]
    if reads == "digits":
        bad = {c for c in text if not c.isspace() and c not in "0123456789"}
        assert all(f"“{c}”" in live["message"] for c in bad), live["message"]
        assert "digits" in live["message"]
    elif reads == "characters":
        vocabulary = set(spec["tokenizer"]["vocabulary"])
        bad = {c for c in text.strip() if c not in vocabulary}
        named = all(f"“{c}”" in live["message"] for c in bad)
        assert bad and named, live["message"]
    elif reads == "words":
        assert "not" in live["message"] and "words" in live["message"], live["message"]
    else:
        assert live["message"].startswith("Type"), live["message"]


# --- the tests -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def contexts(browser):
    """Desktop (1280 px) and phone (390 px) contexts; downloads allowed (the save
    buttons). 1600 px is the desktop page, resized."""
    made = {}
    for width, height in WIDTHS[:2]:
        phone = width < 500
        made[width] = browser.new_context(
            service_workers="block", viewport={"width": width, "height": height},
            is_mobile=phone, has_touch=phone, accept_downloads=True,
        )  # fmt: skip
    yield made
    for context in made.values():
        context.close()


@pytest.fixture(scope="module")
def widgets(contexts, server, widget_pages) -> Iterator[Widgets]:
    """Each page with widgets, loaded once per window width for the whole module."""
    shared = Widgets(contexts, server, widget_pages)
    yield shared
    shared.close()


@pytest.mark.parametrize("name", MODELS)
def test_widget_agrees_with_python(name, site_dir, widgets, shots) -> None:
    spec = sidecar(site_dir, name)
    texts = inputs_for(spec)
    widget = widgets.get(1280, name, texts["example"])
    report = []
    for state, text in texts.items():
        live = widget.type(text)
        problem = live["message"] != ""
        if state in ("invalid",) or (problem and state == "non-ascii"):
            expect_problem(live, state, text, spec)
            report.append(f"{state}: message {live['message']!r}")
        else:
            worst = compare(widget, live, name, spec, text)
            longest = len(live["ids"].get("source", live["ids"].get("tokens", [])))
            report.append(f"{state}: {longest} ids, max |Δweight| {worst:.1e}, "
                          f"{live['computeMs']:.0f} ms")  # fmt: skip
            if state == "beyond":
                assert live["note"] and str(spec["max_length"]) in live["note"]
            else:
                assert live["note"] == "", live["note"]
        widget.shot(shots, state, 1280)
    if spec.get("causal"):
        widget.type(texts["example"])
        live = widget.toggle_causal()
        worst = compare(widget, live, name, spec, texts["example"], causal=True)
        for weights in widget.weights().values():
            upper = np.triu(np.ones(weights.shape[-2:], bool), k=1)
            assert np.all(weights[..., upper] == 0), "causal maps see the future"
        report.append(f"causal: max |Δweight| {worst:.1e}")
        widget.shot(shots, "causal", 1280)
        widget.toggle_causal()  # back as the page's markup left it
    print(f"{name}: " + "; ".join(report))
    assert not widget.external, f"requests left the site: {widget.external}"
    assert not widget.errors, f"console errors: {widget.errors}"


FITS_JS = """(e) => {
  const root = document.documentElement;
  const article = (document.querySelector("article") || document.body)
    .getBoundingClientRect();
  const box = e.getBoundingClientRect();
  return {page: root.scrollWidth, client: root.clientWidth, widget: e.scrollWidth,
          widgetClient: e.clientWidth, left: box.left, right: box.right,
          articleLeft: article.left, articleRight: article.right,
          canvas: e.querySelector("canvas") !== null};
}"""


VIEW_JS = f"""(e) => {{
  const m = e.querySelector(".nt-live__message");
  const canvas = e.querySelector("canvas");
  return {{
    message: {{text: m.textContent, shown: !m.hidden && m.offsetHeight > 0,
              problem: m.classList.contains("nt-live__message--problem"),
              warning: m.classList.contains("nt-live__message--warning")}},
    caption: e.querySelector(".nt-live__title").innerText,
    chips: e.querySelectorAll(".nt-live__tokens .nt-live__token").length,
    grid: canvas ? JSON.parse(canvas.dataset.grid) : null,
    fit: ({FITS_JS})(e),
  }};
}}"""


def resize(page, width: int, height: int) -> None:
    """Resize the window and wait until the page has laid itself out and drawn a frame
    at the new size (the widget redraws from a ResizeObserver, which runs before it)."""
    page.set_viewport_size({"width": width, "height": height})
    page.wait_for_function(f"window.innerWidth === {width}", timeout=RUN_MS)
    page.evaluate(
        "() => new Promise((done) => requestAnimationFrame("
        "() => requestAnimationFrame(done)))"
    )


def fits_and_reads_a_cell(widget: Widget, text: str, width: int, shots) -> None:
    """At the page's present width: no horizontal overflow, and hovering (desktop) or
    tapping (phone) the middle cell of the first map reads its weight and tokens."""
    name = widget.name
    message = widget.live()["message"]
    assert message == "", f"{name}: the example {text!r} gives {message!r}"
    fit = widget.root.evaluate(FITS_JS)
    canvas = widget.root.locator("canvas").first
    assert canvas.bounding_box() is not None, f"{name} at {width} px: no map"
    # the middle cell of the first map (data-grid: where its cells are)
    grid = json.loads(canvas.get_attribute("data-grid"))
    x = grid["x"] + grid["cell"] * (grid["cols"] // 2 + 0.5)
    spot = {"x": x, "y": grid["y"] + grid["cell"] * (grid["rows"] // 2 + 0.5)}
    readout = widget.root.locator(".nt-live__readout")
    readout.evaluate("r => { r.textContent = ''; }")  # what this hover says
    if width < 500:
        canvas.tap(position=spot)
    else:
        canvas.hover(position=spot)
    said = readout.inner_text()
    widget.shot(shots, "example", width)
    assert fit["page"] <= fit["client"] + 1, f"{name} at {width} px: page {fit}"
    assert fit["widget"] <= fit["widgetClient"] + 1, f"{name} at {width} px: {fit}"
    assert fit["left"] >= fit["articleLeft"] - 1, f"{name} at {width} px: {fit}"
    assert fit["right"] <= fit["articleRight"] + 1, f"{name} at {width} px: {fit}"
    assert re.search(
        r"query “.*” \(seq_q \d+\) → key “.*” \(seq \d+\): weight "
        r"[01]\.\d{4}",
        said,
    ), f"{name} at {width} px: {said!r}"
    assert not widget.external, f"requests left the site: {widget.external}"
    assert not widget.errors, f"console errors: {widget.errors}"


def test_widgets_fit_and_read_a_cell(site_dir, widgets, shots) -> None:
    """Every model's widget, showing its example: no horizontal overflow at 390, 1280
    and 1600 px, and hovering (desktop) or tapping (phone) a cell reads its weight and
    tokens. 1600 px is the 1280 px page resized, as a reader widens the window (the
    widgets redraw), once per page for all of its widgets."""
    texts = {name: inputs_for(sidecar(site_dir, name))["example"] for name in MODELS}
    for width in (390, 1280):
        for name in MODELS:
            widget = widgets.get(width, name, texts[name])
            fits_and_reads_a_cell(widget, texts[name], width, shots)
    width, height = WIDTHS[2]
    by_page: dict[str, list[str]] = {}
    for name in MODELS:
        by_page.setdefault(widgets.pages.get(name, ""), []).append(name)
    for names in by_page.values():
        page = widgets.get(1280, names[0]).page
        resize(page, width, height)
        try:
            for name in names:
                widget = widgets.get(1280, name)  # the text the 1280 px check set
                fits_and_reads_a_cell(widget, texts[name], width, shots)
        finally:
            resize(page, *WIDTHS[1])


def test_save_buttons_write_png_and_svg(site_dir, widgets):
    name = "dates"
    spec = sidecar(site_dir, name)
    widget = widgets.get(1280, name, spec["example"])
    saved = {}
    for kind in ("PNG", "SVG"):
        with widget.page.expect_download() as download:
            widget.root.get_by_role("button", name=f"Save as {kind}").click()
        saved[kind] = (download.value.suggested_filename,
                       Path(download.value.path()).read_bytes())  # fmt: skip
    canvas = widget.root.locator("canvas").first
    grid = json.loads(canvas.get_attribute("data-grid"))
    assert saved["PNG"][0].endswith(".png") and saved["PNG"][1][:4] == b"\x89PNG"
    svg = ET.fromstring(saved["SVG"][1])
    cells = svg.findall(
        "{http://www.w3.org/2000/svg}rect/{http://www.w3.org/2000/svg}title"
    )
    # one titled rect per weight of each map on show (one, or one per head)
    maps = len(cells) // (grid["rows"] * grid["cols"])
    assert maps >= 1 and len(cells) == maps * grid["rows"] * grid["cols"], grid
    assert all(0 <= float(c.text) <= 1 for c in cells)


def test_a_missing_model_says_which_file(server, contexts) -> None:
    """A widget whose model is not on the site says so, naming the file."""
    external: list[str] = []
    errors: list[str] = []
    page = open_page(contexts[1280], external, errors)
    try:
        page.goto(server, wait_until="load")
        live = page.evaluate(
            """() => {
                 const div = document.createElement("div");
                 div.className = "nt-live";
                 div.dataset.model = "no-such-model";
                 document.querySelector("article").prepend(div);
                 const url = new URL("/javascripts/live/widget.js", location.href);
                 return import(url.href)
                   .then((m) => m.mount(div)).then(() => ({
                     state: div.dataset.state, message: div.ntLive.message,
                     shown: div.textContent}));
               }"""
        )
    finally:
        page.close()
    assert live["state"] == "error", live
    assert "no-such-model.json" in live["message"] and "404" in live["message"], live
    assert live["message"] in live["shown"]
    assert not external


# --- lengths outside training, the caption, and odd input -----------------------------


def trained_run(name: str) -> dict[str, Any] | None:
    """The workflow run behind live model ``name`` (None for basic and MiniLM)."""
    script = live_models_script()
    if name not in script.TRAINED:
        return None
    return load_run(script.CHECKPOINTS / f"{name}.pt")


def cli_warning(name: str, text: str) -> str:
    """What ``python -m named_transformer decode`` prints on stderr about ``text``."""
    run = trained_run(name)
    assert run is not None
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        read_input(run["spec"].task, text, run["vocabulary"], run["data"])
    return stderr.getvalue().strip()


RANGED = ("copy", "reverse", "sort")  # trained on 10 to 20 digits


def test_sidecars_carry_the_trained_lengths(site_dir) -> None:
    """Each sidecar of a model trained on a range of lengths says which, as its
    checkpoint's task settings do; the others say nothing of a range."""
    for name in MODELS:
        spec, run = sidecar(site_dir, name), trained_run(name)
        ranged = run is not None and TASKS[run["spec"].task].lengths
        assert ranged == (name in RANGED), name
        if name in RANGED:
            assert run is not None
            expected = {"min": run["data"]["min_len"], "max": run["data"]["max_len"]}
            assert spec["trained_lengths"] == expected, (name, spec["trained_lengths"])
        else:
            assert "trained_lengths" not in spec, name


@pytest.mark.parametrize("name", RANGED)
def test_widget_warns_outside_the_trained_lengths(name, site_dir, widgets,
                                                  shots) -> None:  # fmt: skip
    """Shorter or longer than training: the command line's warning, the maps still
    drawn and right; within the range: no note. The caption shows the input read and
    the model's answer, never the sidecar's training example."""
    spec = sidecar(site_dir, name)
    low, high = spec["trained_lengths"]["min"], spec["trained_lengths"]["max"]
    digits = "".join(str((3 * i + 1) % 10) for i in range(high + 5))
    widget = widgets.get(1280, name, spec["example"])
    report = []
    for n in (low - 5, 1, low, high, high + 5):
        text = digits[:n]
        live = widget.type(text)
        compare(widget, live, name, spec, text)  # the maps and the answer
        view = widget.view()
        shown = view["message"]
        if low <= n <= high:
            assert live["note"] == "" and not live["warning"], live["note"]
            assert not shown["shown"], shown
        elif n < low:
            assert live["warning"] and shown["warning"] and shown["shown"], shown
            assert shown["text"] == live["note"]
            if n > 1:  # the CLI says "1 tokens"; the widget "1 token"
                cli = cli_warning(name, text)
                assert cli.startswith("warning: "), cli
                assert live["note"] == f"W{cli[1:]}.", (live["note"], cli)
            assert live["note"] == (
                f"Warning: the input has {n} token{'s' if n > 1 else ''} but the "
                f"model was trained on {low} to {high}; expect mistakes outside "
                "that range."
            ), live["note"]
        else:
            # cut to the longest seen in training, which the warning says
            assert cli_warning(name, text).startswith(
                f"warning: the input has {n} tokens but the model was trained on "
                f"{low} to {high}"
            )
            most = spec["max_length"]
            assert live["note"] == (
                f"Warning: the input has {n} tokens but the model was trained on "
                f"{low} to {high}; only the first {most} are used."
            ), live["note"]
            assert live["warning"] and shown["warning"] and shown["shown"], shown
            text = text[:most]
        assert view["caption"] == f"{name}: “{text}” → “{live['output']}”"
        assert spec["example"] not in view["caption"] or spec["example"] in text
        report.append(f"{n} digits: {live['note'] or 'no note'}")
        widget.shot(shots, f"length-{n}", 1280)
    print(f"{name}: " + "; ".join(report))
    assert not widget.external, f"requests left the site: {widget.external}"
    assert not widget.errors, f"console errors: {widget.errors}"


NON_ASCII = "naïve café 日本 🙂"


def long_input(spec: dict[str, Any]) -> str:
    """At least 500 characters of what the model reads, more tokens than its
    ``max_length``."""
    tokenizer, most = spec["tokenizer"], spec["max_length"]
    reads = tokenizer["reads"]
    if reads == "digits":
        return "".join(str((7 * i + 3) % 10) for i in range(max(500, most + 1)))
    if reads in ("characters", "alphabet"):
        piece = spec["example"] + " "
    elif reads == "words":
        specials = {tokenizer[k] for k in ("pad", "bos", "eos", "unk")}
        known = [w for i, w in enumerate(tokenizer["vocabulary"]) if i not in specials
                 and re.fullmatch(tokenizer["pattern"], w)]  # fmt: skip
        piece = " ".join(known[:40]) + " "
    else:  # WordPiece: "good" and "." are one piece each
        piece = "good. "
    text = piece
    while len(text) < 500 or len(text.split()) <= most:
        text += piece
    return text.strip()


# state -> text; whether the model can read it depends on its vocabulary
def odd_inputs(spec: dict[str, Any]) -> dict[str, str]:
    return {"empty": "", "spaces": "   ", "long": long_input(spec),
            "long prose": ("The quick brown fox jumps over the lazy dog; "
                           "Zoë's café served crème brûlée. ") * 7,
            "non-ascii": NON_ASCII}  # fmt: skip


def readable(sentence: str) -> bool:
    """A sentence: a capital letter or an opening quote first, a full stop last."""
    return bool(re.fullmatch(r"[A-Z“].*\.", sentence, re.S)) and len(sentence) < 600


@pytest.mark.parametrize("name", MODELS)
def test_widget_reads_odd_input(name, site_dir, widgets, shots) -> None:
    """Empty, blank, very long (500+ characters) and non-ASCII input at 1280 and 390 px:
    no console error or uncaught exception, no sideways scrolling, a readable sentence
    where the input cannot be used (and no maps), the maps drawn where it can (right,
    at 1280 px), and a caption that follows the input."""
    spec = sidecar(site_dir, name)
    follows = spec.get("output") in ("tokens", "label")
    report = []
    for width in (1280, 390):
        widget = widgets.get(width, name)
        for state, text in odd_inputs(spec).items():
            live = widget.type(text)
            view = widget.view()
            shown, fit, shown_caption = view["message"], view["fit"], view["caption"]
            where = f"{name} at {width} px, {state}"
            assert fit["page"] <= fit["client"] + 1, f"{where}: page {fit}"
            assert fit["widget"] <= fit["widgetClient"] + 1, f"{where}: {fit}"
            assert fit["right"] <= fit["articleRight"] + 1, f"{where}: {fit}"
            assert live["state"] == "ready", f"{where}: {live['message']}"
            chips = view["chips"]
            if live["message"]:  # the input cannot be used
                assert readable(live["message"]), f"{where}: {live['message']!r}"
                assert shown["shown"] and shown["problem"], f"{where}: {shown}"
                assert shown["text"] == live["message"]
                assert live["ids"] == {} and not fit["canvas"] and chips == 0, where
                if follows:
                    assert shown_caption == spec["name"], where
                if state in ("empty", "spaces"):
                    assert live["message"].startswith("Type"), live["message"]
                report.append(f"{width} {state}: {live['message']}")
            else:
                assert state not in ("empty", "spaces"), f"{where}: no message"
                if state == "long":
                    assert spec.get("max_length"), where
                if width == 1280:
                    compare(widget, live, name, spec, text)
                for entry in spec["attention"]:  # every map has its tokens
                    queries = live["queries"][entry["output"]]
                    assert queries and live["keys"][entry["output"]], where
                assert fit["canvas"], f"{where}: no map drawn"
                grid = view["grid"]
                assert grid["rows"] >= 1 and grid["cols"] >= 1 and grid["cell"] > 0
                used = chips
                if live["note"]:
                    most = spec["max_length"]
                    assert readable(live["note"]), f"{where}: {live['note']!r}"
                    assert shown["shown"] and shown["text"] == live["note"], where
                    assert f"only the first {most} are used" in live["note"], where
                    assert used == most, f"{where}: {used} tokens shown"
                else:
                    assert state != "long", f"{where}: cut without a note"
                    assert not shown["shown"], f"{where}: {shown}"
                if follows:  # input and output shown up to 48 characters
                    shown_output = live["output"]
                    if len(shown_output) > 48:
                        shown_output = shown_output[:47] + "…"
                    assert shown_caption.startswith(f"{spec['name']}: “"), where
                    ending = f" → “{shown_output}”"
                    assert shown_caption.endswith(ending), where
                    assert len(shown_caption) <= len(spec["name"]) + 2 * 48 + 9
                else:
                    assert shown_caption == spec["title"], where
                report.append(f"{width} {state}: {used} tokens, "
                              f"note {live['note']!r}")  # fmt: skip
            widget.shot(shots, f"odd-{state.replace(' ', '-')}", width)
        assert not widget.external, f"requests left the site: {widget.external}"
        assert not widget.errors, f"{name} at {width} px: console: {widget.errors}"
    print(f"{name}: " + "; ".join(report))


# --- the induction model: the circuit, on the page -----------------------------------


def strongest(found, tokens) -> dict[str, list[int]]:
    """The best previous-token head of layer 0 and induction head of the last layer,
    ``[layer, head]``, by the library's scores."""
    induction = nt.inside.induction_scores(found, tokens).tensor
    previous = nt.inside.previous_token_scores(found).tensor
    last = len(induction) - 1
    return {"previous-token": [0, int(previous[0].argmax())],
            "induction": [last, int(induction[last].argmax())]}  # fmt: skip


def on_the_repeat(weights: np.ndarray, period: int) -> tuple[float, float]:
    """For the queries of the second copy (``period`` … ``2 period - 1``) of a map
    ``seq_q seq``: the share whose largest weight is on the token after the earlier
    occurrence (key ``q - period + 1``), and their mean weight there."""
    queries = np.arange(period, 2 * period)
    targets = queries - period + 1
    hits = float(np.mean(weights[queries].argmax(-1) == targets))
    return hits, float(weights[queries, targets].mean())


def test_induction_widget_shows_the_circuit(site_dir, widget_pages, widgets,
                                            shots) -> None:  # fmt: skip
    """The page "Watch a circuit form" shows the trained two-layer model. Its sidecar
    names the previous-token and induction heads that the library's scores pick in
    Python; the widget draws every head of both layers, named layer.head. Typed a
    random run of distinct letters and its repeat, the page's weights equal
    PyTorch's, and on the repeat the induction head (as the page computed it) attends
    to the token after the earlier occurrence, where an untrained model of the same
    sizes does not; the previous-token head attends to the token before; the
    predicted next characters agree with the text on the repeat, not before it."""
    name = "induction"
    assert name in widget_pages, "no page shows the induction widget"
    assert widget_pages[name].startswith("models/induction-heads"), widget_pages[name]
    spec, ref = sidecar(site_dir, name), reference(name)
    model, vocabulary = ref.module.model, spec["tokenizer"]["vocabulary"]
    tokens = nt.inside.repeated_tokens(len(vocabulary), 7, 16, seed=3)
    with torch.no_grad(), nt.inside.record(model, "*.weights") as found:
        model(tokens)
    roles = strongest(found, tokens)
    assert spec["roles"] == roles, (spec["roles"], roles)
    (layer_p, head_p), (layer_i, head_i) = roles["previous-token"], roles["induction"]

    period = min(12, spec["max_length"] // 2)
    letters = [c for c in vocabulary if c.isalpha()]
    segment = "".join(random.Random(0).sample(letters, period))
    text = segment + segment
    widget = widgets.get(1280, name)
    assert widget.first_text == spec["example"]  # the page's default input
    live = widget.type(text)
    worst = compare(widget, live, name, spec, text)
    weights = widget.weights()
    drawn = json.loads(widget.root.locator("canvas").first.get_attribute("data-maps"))
    chips = widget.root.locator(".nt-live__output .nt-live__token")
    hit = chips.evaluate_all("cs => cs.map(c => c.classList.contains('nt-live__hit'))")
    note = widget.root.locator(".nt-live__caption").inner_text()
    widget.shot(shots, "repeat", 1280)
    assert not widget.external, f"requests left the site: {widget.external}"
    assert not widget.errors, f"console errors: {widget.errors}"

    # every head of every layer drawn, named layer.head, the two found ones marked
    entries = {e["layer"]: e for e in spec["attention"]}
    every = [(e["layer"], h) for e in spec["attention"] for h in range(e["heads"])]
    assert [(m["layer"], m["head"]) for m in drawn] == every, drawn
    for m in drawn:
        assert m["title"].startswith(f"head {m['layer']}.{m['head']}"), m
    marked = {(m["layer"], m["head"]): m["title"] for m in drawn if ": " in m["title"]}
    assert marked == {
        (layer_p, head_p): f"head {layer_p}.{head_p}: previous-token head",
        (layer_i, head_i): f"head {layer_i}.{head_i}: induction head",
    }, marked
    assert f"head {layer_i}.{head_i} the induction head" in note, note
    assert f"head {layer_p}.{head_p} is the previous-token head" in note, note

    induction = weights[entries[layer_i]["output"]][0, head_i]
    hits, mass = on_the_repeat(induction, period)
    previous = weights[entries[layer_p]["output"]][0, head_p]
    queries = np.arange(1, 2 * period)
    before = float(np.mean(previous[queries].argmax(-1) == queries - 1))
    torch.manual_seed(0)
    untrained = nt.LanguageModel(len(vocabulary), nt.TransformerConfig.attention_only(
        decoder_layers=len(entries), layer=model.embedding.table.shape[-1],
        heads=entries[0]["heads"],
    ))  # fmt: skip
    layers = "blocks.layers.{}.self_attention.weights"
    with torch.no_grad(), nt.record(untrained, layers) as recorded:
        untrained(torch.tensor([live["ids"]["tokens"]]))
    fresh = [w.tensor for w in recorded.each(layers)]
    fresh_mass = max(on_the_repeat(w[0, h].numpy(), period)[1]
                     for w in fresh[1:] for h in range(w.shape[1]))  # fmt: skip
    agree_before, agree_on = sum(hit[: period - 1]), sum(hit[period - 1 : -1])
    print(f"induction: {text!r}: page = PyTorch within {worst:.1e}; head "
          f"{layer_i}.{head_i}: {hits:.0%} of the repeat's queries on the token after "
          f"the earlier copy, mean weight {mass:.2f} (untrained: {fresh_mass:.2f}); "
          f"head {layer_p}.{head_p}: {before:.0%} on the token before; next character "
          f"right {agree_before}/{period - 1} before the repeat, "
          f"{agree_on}/{period} on it")  # fmt: skip
    assert hits >= 0.75 and mass >= 0.5 > fresh_mass, (hits, mass, fresh_mass)
    assert before >= 0.75, before
    assert agree_on >= agree_before + period // 2, (agree_before, agree_on)
