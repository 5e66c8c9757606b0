"""MkDocs hook: serve KaTeX from the site itself, installed from the npm registry.

KaTeX is not committed. On the first build (``mkdocs build`` or ``mkdocs serve``) this
hook runs ``npm install --no-save --prefix <project>/.cache/katex katex@0.16``
(``.cache/`` is gitignored), then adds KaTeX's ``dist`` files (``katex.min.js``,
``katex.min.css`` and ``fonts/``) to the site as ``assets/katex/``. mkdocs.yml loads
them through ``extra_css``/``extra_javascript``; ``docs/javascripts/katex-init.js``
renders the math. No request leaves the site when a page is read.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files
from npm_install import npm_install

KATEX_SPEC = "katex@0.16"
_dist: Path | None = None


def katex_dist(project_root: Path) -> Path:
    """Return KaTeX's ``dist`` directory, installing the npm package when it is
    missing."""
    prefix = project_root / ".cache" / "katex"
    dist = prefix / "node_modules" / "katex" / "dist"
    if (dist / "katex.min.js").is_file() and (dist / "fonts").is_dir():
        return dist
    npm_install(
        prefix, [KATEX_SPEC], why="KaTeX is",
        installed=lambda: (dist / "katex.min.js").is_file(),
    )  # fmt: skip
    return dist


def on_config(config):
    global _dist
    _dist = katex_dist(Path(config.config_file_path).resolve().parent)
    return config


def on_files(files: Files, config) -> Files:
    """Add KaTeX's dist files to the site under ``assets/katex/``."""
    assert _dist is not None
    wanted = [
        _dist / "katex.min.js",
        _dist / "katex.min.css",
        *sorted((_dist / "fonts").iterdir()),
    ]
    for path in wanted:
        uri = "assets/katex/" + path.relative_to(_dist).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
