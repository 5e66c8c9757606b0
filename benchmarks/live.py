"""Benchmark: the live attention widgets in headless Chromium, keystroke to new maps.

    python -m benchmarks.live SITE_DIR [--keystrokes 10] [--models copy,dates]

For each live model the widget is added to the built site's home page (served from
127.0.0.1, nothing else reachable), loaded once, then sent ``--keystrokes`` input
events, each with the next longer prefix of a text (its example, cut to the model's
longest input), waiting for each to be answered before the next. The widget reports
``ntLive.latencyMs``: from the input event to the maps redrawn, which holds the 150 ms
debounce, and ``computeMs``: tokenize, run (every greedy decoding step), draw. The
table gives the medians over the keystrokes, the tokens of the longest prefix and the
size of the model's ``.onnx`` file. Onnxruntime-web runs single-threaded WebAssembly
(the site is not cross-origin isolated), so the numbers are one core's.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODELS = ("copy", "reverse", "sort", "dates", "sentiment", "basic", "minilm")
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--no-first-run"]  # fmt: skip
LOAD_MS = 180_000

MOUNT_JS = """([name, text]) => {
  const div = document.createElement("div");
  div.className = "nt-live";
  div.dataset.model = name;
  div.dataset.text = text;
  (document.querySelector("article") || document.body).prepend(div);
  const url = new URL("/javascripts/live/widget.js", location.href);
  return import(url.href).then((m) => m.mount(div)).then(() => div.ntLive.state);
}"""

KEYSTROKE_JS = """([name, text, timeout]) => new Promise((done, fail) => {
  const div = document.querySelector(`.nt-live[data-model="${name}"]`);
  const box = div.querySelector("input.nt-live__input");
  const before = div.ntLive.runs;
  box.value = text;
  box.dispatchEvent(new InputEvent("input", {bubbles: true}));
  const t0 = Date.now();
  (function poll() {
    if (div.ntLive.runs > before) {
      done({latency: div.ntLive.latencyMs, compute: div.ntLive.computeMs,
            tokens: Object.values(div.ntLive.ids).map((ids) => ids.length),
            message: div.ntLive.message});
    } else if (Date.now() - t0 > timeout) {
      fail(new Error("no answer"));
    } else {
      setTimeout(poll, 5);
    }
  })();
})"""


def prefixes(text: str, count: int, whole_words: bool = False) -> list[str]:
    """``count`` prefixes of ``text``, the longest last; with ``whole_words``, each
    ends on a whole word (a model that reads words refuses a word cut short)."""
    units = text.split() if whole_words else list(text)
    cuts = sorted({max(1, round(len(units) * (i + 1) / count)) for i in range(count)})
    join = " ".join if whole_words else "".join
    texts = [join(units[:n]).rstrip() or join(units[:n]) for n in cuts]
    while len(texts) < count:
        texts.append(texts[-1] + " ")  # a short text: the same, one more event
    return texts


def serve(site: Path) -> tuple[ThreadingHTTPServer, str]:
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site))
    )
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/"


def measure(context, url: str, name: str, sidecar: dict, keystrokes: int) -> dict:
    page = context.new_page()
    page.route(
        "**/*",
        lambda r: r.continue_() if r.request.url.startswith(url) else r.abort(),
    )
    try:
        page.goto(url, wait_until="load")
        example = sidecar.get("example") or "The cat sat on the mat."
        page.evaluate(MOUNT_JS, [name, example])
        page.wait_for_function(
            f"document.querySelector('.nt-live[data-model=\"{name}\"]')"
            ".ntLive.runs >= 1",
            timeout=LOAD_MS,
        )
        words = sidecar["tokenizer"]["reads"] == "words"
        texts = prefixes(example, keystrokes, whole_words=words)
        answers = [page.evaluate(KEYSTROKE_JS, [name, t, LOAD_MS]) for t in texts]
    finally:
        page.close()
    return {
        "latency": statistics.median(a["latency"] for a in answers),
        "compute": statistics.median(a["compute"] for a in answers),
        "tokens": max(max(a["tokens"], default=0) for a in answers),
        "problems": [a["message"] for a in answers if a["message"]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="a site built by mkdocs build")
    parser.add_argument("--keystrokes", type=int, default=10)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    models = args.site / "assets" / "live" / "models"
    httpd, url = serve(args.site)
    rows = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=ARGS
            )
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            for name in args.models.split(","):
                sidecar = json.loads((models / f"{name}.json").read_text())
                result = measure(context, url, name, sidecar, args.keystrokes)
                size = (models / f"{name}.onnx").stat().st_size / 1e6
                rows.append(
                    f"| {name} | {sidecar['kind']} | {result['tokens']} | "
                    f"{result['latency']:.0f} | {result['compute']:.0f} | "
                    f"{size:.3g} |"
                )
                for problem in result["problems"]:
                    print(f"{name}: {problem}", file=sys.stderr)
            browser.close()
    finally:
        httpd.shutdown()
    print("| model | kind | tokens (longest) | median keystroke → maps (ms) | "
          "median compute + draw (ms) | .onnx (MB) |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
