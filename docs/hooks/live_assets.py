"""MkDocs hook: serve the live widgets' runtime from the site, installed from npm.

The live attention widgets (``docs/javascripts/live/``) run the library's exported
ONNX graphs in the reader's browser with ``onnxruntime-web`` (its WebAssembly build,
single-threaded) and tokenize MiniLM's input with ``@huggingface/tokenizers``. Neither
is committed. On the first build this hook runs ``npm install --no-save --prefix
<project>/.cache/live-npm onnxruntime-web@<pinned> @huggingface/tokenizers@<pinned>``
(``.cache/`` is gitignored), then adds only the browser files the widgets load to the
site under ``assets/live/vendor/`` (about 15 MB, the ``.wasm`` nearly all of it).
Nothing is fetched from another host when a page runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from mkdocs.structure.files import File, Files
from npm_install import npm_install

# Exact versions: the widgets call these APIs, and a new onnxruntime-web may rename
# its WebAssembly files.
PACKAGES = {"onnxruntime-web": "1.30.0", "@huggingface/tokenizers": "0.2.0"}
# package -> (its folder under assets/live/vendor/, the files taken from it)
WANTED = {
    "onnxruntime-web": (
        "onnxruntime-web",
        # the WebAssembly-only ES module, the Emscripten glue it imports, the binary
        [
            "dist/ort.wasm.min.mjs",
            "dist/ort-wasm-simd-threaded.mjs",
            "dist/ort-wasm-simd-threaded.wasm",
        ],
    ),
    "@huggingface/tokenizers": ("tokenizers", ["dist/tokenizers.min.mjs", "LICENSE"]),
}
_modules: Path | None = None


def _installed(modules: Path) -> bool:
    """Every wanted file is there, from the pinned version."""
    for package, version in PACKAGES.items():
        manifest = modules / package / "package.json"
        if not manifest.is_file():
            return False
        if json.loads(manifest.read_text()).get("version") != version:
            return False
        if not all((modules / package / src).is_file() for src in WANTED[package][1]):
            return False
    return True


def live_modules(project_root: Path) -> Path:
    """Return the ``node_modules`` holding the pinned packages, installing them when
    they are missing or of another version."""
    prefix = project_root / ".cache" / "live-npm"
    modules = prefix / "node_modules"
    if _installed(modules):
        return modules
    npm_install(
        prefix, [f"{name}@{version}" for name, version in PACKAGES.items()],
        why="The live attention widgets need onnxruntime-web and "
        "@huggingface/tokenizers,",
        installed=lambda: _installed(modules),
        ignore_scripts=True,  # only files are copied; no package needs to build
    )  # fmt: skip
    return modules


def on_config(config):
    global _modules
    _modules = live_modules(Path(config.config_file_path).resolve().parent)
    return config


def on_files(files: Files, config) -> Files:
    """Add the runtime's browser files to the site under ``assets/live/vendor/``."""
    assert _modules is not None
    for package, (folder, sources) in WANTED.items():
        for src in sources:
            uri = f"assets/live/vendor/{folder}/{Path(src).name}"
            path = _modules / package / src
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
