"""Lint the site's JavaScript (``docs/javascripts/``) with ESLint.

ESLint is installed from the npm registry into ``.cache/eslint`` (gitignored) on the
first run, pinned, the way the docs build installs KaTeX; the flat config is
``docs/javascripts/eslint.config.mjs`` (``@eslint/js`` recommended rules and the
browser's globals). The test fails with ESLint's messages.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "docs" / "javascripts"
PREFIX = ROOT / ".cache" / "eslint"
PACKAGES = {"eslint": "10.15.0", "@eslint/js": "10.0.1", "globals": "17.14.0"}
ESLINT = PREFIX / "node_modules" / "eslint" / "bin" / "eslint.js"


def _installed() -> bool:
    for name, version in PACKAGES.items():
        manifest = PREFIX / "node_modules" / name / "package.json"
        if not manifest.is_file():
            return False
        if json.loads(manifest.read_text()).get("version") != version:
            return False
    return True


@pytest.fixture(scope="module")
def eslint() -> list[str]:
    """The command that runs the pinned ESLint, installing it when needed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js and npm are not on PATH (Debian: apt-get install npm)")
    if not _installed():
        PREFIX.mkdir(parents=True, exist_ok=True)
        command = [
            npm, "install", "--no-save", "--no-audit", "--no-fund",
            "--ignore-scripts", "--prefix", str(PREFIX),
            *(f"{name}@{version}" for name, version in PACKAGES.items()),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert done.returncode == 0 and _installed(), (
            f"`{' '.join(command)}` failed (exit {done.returncode}):\n"
            f"{done.stdout}\n{done.stderr}"
        )
    return [node, str(ESLINT)]


def test_site_javascript_passes_eslint_which_catches_a_mistake(
    eslint: list[str], tmp_path: Path
) -> None:
    """One ESLint run (its start is most of its cost) over a copy of
    docs/javascripts/ with one more widget module, ``live/bad.js``, that reads an
    undefined name: every site file is linted with no message, and the configuration
    does lint: bad.js fails with no-undef, its only message."""
    scripts = sorted(SCRIPTS.rglob("*.js"))
    assert any(p.parent.name == "live" for p in scripts), "no widget modules found"
    copy = tmp_path / "javascripts"
    shutil.copytree(SCRIPTS, copy)
    (copy / "live" / "bad.js").write_text("export const x = undefinedName + 1;\n")
    done = subprocess.run(
        [*eslint, "--config", "eslint.config.mjs", "--format", "json", "."],
        cwd=copy,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, f"ESLint:\n{done.stdout}\n{done.stderr}"
    report = {
        Path(result["filePath"]).relative_to(copy).as_posix(): result["messages"]
        for result in json.loads(done.stdout)
    }
    linted = {p.relative_to(SCRIPTS).as_posix() for p in scripts}
    missing = (linted | {"live/bad.js"}) - set(report)
    assert not missing, f"ESLint did not lint {missing}"
    bad = report.pop("live/bad.js")
    assert [m["ruleId"] for m in bad] == ["no-undef"], bad
    assert not any(report.values()), {f: m for f, m in report.items() if m}
