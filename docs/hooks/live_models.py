"""MkDocs hook: export the live models to ONNX and serve them from the site.

On the first build this hook runs ``export_all`` of ``docs/scripts/live_models.py``
(about 40 s on two cores, the induction model up to 35 s more): the workflow
checkpoints in ``docs/scripts/live_checkpoints``, a parameter-free basic
self-attention, the packaged all-MiniLM-L6-v2 and the induction model of "Watch a
circuit form" (``docs/figures/induction/model.pt``), each written by
``named_transformer.export_onnx`` with its JSON sidecar (``_export_onnx_each``: copy
and reverse, one architecture, are traced once). The files are kept in
``.cache/live-models/<key>/`` (gitignored), where the key hashes the checkpoints and
the code that exports them, so a later build reuses them; they are added to the site
as ``assets/live/models/``. The widgets (``docs/javascripts/live/``) load them there.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import shutil
import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.live_models")
_models: Path | None = None


def _key(root: Path) -> str:
    """A hash of everything an export depends on."""
    package = root / "named_transformer"
    inputs = [
        *sorted((root / "docs" / "scripts" / "live_checkpoints").glob("*.pt")),
        *sorted((root / "docs" / "figures" / "induction").glob("*.pt")),
        *sorted((root / "docs" / "figures" / "induction").glob("*.json")),
        root / "docs" / "scripts" / "live_models.py",
        *sorted(package.rglob("*.py")),
    ]
    digest = hashlib.sha256(importlib.metadata.version("torch").encode())
    for path in inputs:
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def export_models(root: Path) -> Path:
    """The folder of exported live models, exporting them when it is missing."""
    folder = root / ".cache" / "live-models" / _key(root)
    if (folder / "done").is_file():
        return folder
    script = root / "docs" / "scripts" / "live_models.py"
    spec = importlib.util.spec_from_file_location("live_models", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    log.info("Exporting the live models to %s", folder)
    shutil.rmtree(folder.parent, ignore_errors=True)  # older exports: not needed
    module.export_all(folder)
    (folder / "done").touch()
    return folder


def on_config(config):
    global _models
    _models = export_models(Path(config.config_file_path).resolve().parent)
    return config


def on_files(files: Files, config) -> Files:
    """Add the exported models to the site under ``assets/live/models/``."""
    assert _models is not None
    for path in sorted(_models.iterdir()):
        if path.suffix == ".json" or path.suffix == ".onnx":
            uri = f"assets/live/models/{path.name}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
