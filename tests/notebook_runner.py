"""Runs notebooks' code, each in a fresh process, for tests/test_notebooks.py.

A fresh Jupyter kernel spends about 4 s of CPU starting and importing torch and
named_transformer, the first thing every notebook does; its page's code, most pages,
under 1 s. This process imports them once, then for each job (one JSON line on stdin:
the notebook's code cells, an empty folder to start in, a folder for temporary files
and a file for the result) forks a child that runs the cells as a kernel would: one
``__main__`` module for all of them, from the empty folder, each cell's printed text
(``sys.stdout``) kept apart. The child writes the texts, or the first error, to the
result file; this process then answers one line, ``done <result file>``.

The child starts with what a fresh process that imported those modules has: no name,
the random state torch had when the package was imported (the later imports here
are checked to draw no number), the empty folder. Three
pages (checkpoints, pretrained, sublayers) import ``transformers``' GPT-2, BERT and
Llama models, about 4 s of CPU each time: their modules are imported here once too, as
a module cache, not names (a cell still runs its own ``import``, which finds them in
``sys.modules`` as a second import in a kernel would).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time
import traceback
import types

import torch  # imported once, before the forks

import named_transformer  # noqa: F401

_first_state = torch.get_rng_state()
try:  # imported once for the pages that compare with transformers (module docstring)
    import transformers.models.bert.modeling_bert  # noqa: F401
    import transformers.models.gpt2.modeling_gpt2  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401
except ImportError:  # a page that needs it fails in its own cell, naming it
    pass
# the random state the package's import left, as a fresh process has it: the imports
# above drew nothing
assert torch.equal(torch.get_rng_state(), _first_state), "an import drew a number"

LIMIT_S = 600  # a child still running after this is killed and reported


def run(job: dict) -> dict:
    """The cells of ``job`` run in order in one ``__main__``; what each printed."""
    os.chdir(job["folder"])
    tempfile.tempdir = job["temporary"]  # the files cell's folder, a page's mkdtemp()
    main = types.ModuleType("__main__")  # as in Jupyter: classes pickle by __main__
    sys.modules["__main__"] = main
    printed: list[str] = []
    for number, source in enumerate(job["cells"], 1):
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stdout(buffer):
                code = compile(source, f"<cell {number}>", "exec")
                exec(code, main.__dict__)  # noqa: S102 - the notebook's own cell
        except BaseException:  # SystemExit too: a cell that stops the kernel
            return answer(printed, f"cell {number}: {traceback.format_exc()}")
        printed.append(buffer.getvalue())
    return answer(printed)


def answer(printed: list[str], error: str | None = None) -> dict:
    return {"printed": printed, "error": error}


def child(job: dict) -> None:
    # Text written below Python's sys.stdout (C code) goes to a file, not to the
    # answers on this process's stdout.
    with open(job["result"] + ".fd1", "wb") as fd1:
        os.dup2(fd1.fileno(), 1)
    try:
        result = run(job)
    except BaseException:
        result = answer([], traceback.format_exc())
    with open(job["result"], "w") as file:
        json.dump(result, file)
    os._exit(0)


def main() -> None:
    sys.path[0] = ""  # as in a kernel: the working folder, not this script's
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(job)
        start = time.monotonic()
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() - start > LIMIT_S:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                with open(job["result"], "w") as file:
                    json.dump(answer([], f"killed after {LIMIT_S} s"), file)
                break
            time.sleep(0.02)
        print("done", job["result"], flush=True)


if __name__ == "__main__":
    main()
