"""The KaTeX hook: installs from npm into .cache/katex, fails clearly without npm."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "docs" / "hooks" / "katex.py"


def load_hook(monkeypatch: pytest.MonkeyPatch):
    """The hook as MkDocs loads it, with its folder on sys.path (for npm_install)."""
    pytest.importorskip("mkdocs", reason="mkdocs is in the docs extra")
    monkeypatch.syspath_prepend(str(HOOK.parent))
    spec = importlib.util.spec_from_file_location("katex_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_missing_npm_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = load_hook(monkeypatch)
    import npm_install

    monkeypatch.setattr(npm_install.shutil, "which", lambda name: None)
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="npm"):
        hook.katex_dist(tmp_path)  # a fresh clone: no .cache/katex yet


def test_an_installed_copy_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = load_hook(monkeypatch)
    dist = tmp_path / ".cache" / "katex" / "node_modules" / "katex" / "dist"
    (dist / "fonts").mkdir(parents=True)
    (dist / "katex.min.js").write_text("/* katex */")
    import npm_install

    monkeypatch.setattr(
        npm_install.subprocess, "run", lambda *a, **k: pytest.fail("npm was run again")
    )
    assert hook.katex_dist(tmp_path) == dist


def test_katex_is_not_committed() -> None:
    gitignore = (ROOT / ".gitignore").read_text().split()
    assert ".cache/" in gitignore
    assert not (ROOT / "docs" / "assets" / "katex").exists()
