"""The docs hooks' one way to install npm packages into a gitignored cache folder.

MkDocs puts a hook's own folder on ``sys.path`` while it loads the hook, so the hooks
beside this file import it by name.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from mkdocs.exceptions import PluginError

log = logging.getLogger("mkdocs.hooks.npm_install")


def npm_install(
    prefix: Path,
    specs: Sequence[str],
    *,
    why: str,
    installed: Callable[[], bool],
    ignore_scripts: bool = False,
) -> None:
    """``npm install --no-save --prefix PREFIX SPECS``, then ``installed()`` must hold;
    a PluginError saying what failed otherwise. ``why``: what the packages are for."""
    npm = shutil.which("npm")
    if npm is None:
        raise PluginError(
            f"{why} installed at build time from the npm registry, but `npm` is not "
            "on PATH. Install Node.js and npm (Debian: `apt-get install nodejs npm`), "
            "then build again."
        )
    log.info("Installing %s into %s", " ".join(specs), prefix)
    prefix.mkdir(parents=True, exist_ok=True)
    command = [npm, "install", "--no-save", "--no-audit", "--no-fund",
               *(["--ignore-scripts"] if ignore_scripts else []),
               "--prefix", str(prefix), *specs]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not installed():
        raise PluginError(
            f"`{' '.join(command)}` failed (exit {done.returncode}) or did not "
            f"install what is needed:\n{done.stdout}\n{done.stderr}"
        )
