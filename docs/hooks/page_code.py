"""MkDocs hook: the pages' executed code prints the same for less CPU.

markdown-exec runs every page's code in this one process:

- ``load_smollm2()`` (about 9 s of CPU: gguf parses the file's 49,152-token
  vocabulary, then every tensor is dequantised) returns the first call's
  ``ChatModel`` again ("A modern small LM" and "Look inside" both load it; neither
  changes its weights), and ``read_gguf`` of an unchanged file returns the
  checkpoint it read before (about 5 s). Each page's notebook loads its own.
- Tracr's compiler and its ``apply`` run JAX operations eagerly, one XLA compile per
  operation and shape: without XLA's optimisation passes
  (``jax_disable_most_optimizations``) those compiles take about a third less time
  and give the same values (tests/test_rasp_tracr.py runs the same way): the RASP
  page printed the same lines with them and without.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any


def _quick_jax() -> None:
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "true")  # read on import
    if "jax" in sys.modules:  # already imported: the environment is read
        sys.modules["jax"].config.update("jax_disable_most_optimizations", True)


def _share_smollm2() -> None:
    import named_transformer as nt
    import named_transformer.interop.gguf as gguf
    import named_transformer.pretrained as pretrained
    import named_transformer.pretrained.smollm2 as smollm2

    read = gguf.read_gguf
    read_cache: dict[tuple, Any] = {}

    @functools.wraps(read)
    def read_once(path: str | Path) -> Any:
        if not Path(path).is_file():
            return read(path)  # its own error
        stat = Path(path).stat()
        key = (Path(path).resolve(), stat.st_size, stat.st_mtime_ns)
        if key not in read_cache:
            read_cache[key] = read(path)
        return read_cache[key]

    # every name the pages and load_gguf call it by
    for module in (nt, pretrained, gguf, smollm2):
        module.read_gguf = read_once
    load_once = functools.cache(smollm2.load_smollm2)
    for module in (nt, pretrained, smollm2):
        module.load_smollm2 = load_once


def on_config(config: Any) -> Any:
    _quick_jax()
    _share_smollm2()
    return config
