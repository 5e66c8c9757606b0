"""Benchmarks 24 and 25: on a busy machine. Plain ``nt.attention``,
``MultiHeadAttention``, a training step and the cached decoding step, each against
PyTorch's own, idle and with one competing process busy on one core; and the training
recipe of ``train copy``, idle and busy.

    python -m benchmarks.busy [--quick]

The competing process is a Python loop (``while True: pass``) that the benchmark starts
before the busy timings and stops after them (``--quick``: one that sleeps, the same
steps without the load; its numbers mean nothing anyway). Idle and busy alternate,
round after round, so that drift hits both alike; inside a round the named code and its
reference run interleaved. Every cell is the ratio of the medians over all rounds. Each
pair runs with one intra-op thread and with torch's default (all cores): the collapse
that the busy column shows for many small operations on two threads is why the
workflows pick their thread count (:mod:`named_transformer.workflows.threads`).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

import named_transformer as nt
from benchmarks.common import interleaved, table
from benchmarks.decoding import _PyTorchCachedStep, decoding_config
from benchmarks.modules import _attention_pair, _transformer_pair
from named_transformer.models.language_model import LanguageModel

# the competing process, by quick
_COMPETING = {False: "spinning on a core", True: "sleeping (quick: no load)"}


@contextlib.contextmanager
def competing(busy: bool, spin: bool = True) -> Iterator[None]:
    """With ``busy``, one other process spinning on a core for the block (not
    ``spin``: one sleeping, which loads no core)."""
    if not busy:
        yield
        return
    code = "while True: pass" if spin else "import signal; signal.pause()"
    spinner = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(0.2)  # started and spinning
    try:
        yield
    finally:
        spinner.terminate()
        spinner.wait()


def _attention(seq: int):
    q, k, v = (torch.randn(2, 8, seq, 64) for _ in range(3))
    mask = nt.causal_mask(seq)

    def named():
        with torch.no_grad():
            nt.attention(q, k, v, mask)

    def sdpa():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    return named, sdpa


def _cached(quick: bool):
    tokens = 16 if quick else 128
    model = LanguageModel(100, decoding_config(quick)).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)

    def named():
        with torch.no_grad():
            nt.greedy(nt.IncrementalDecoder(model), prompt, tokens)

    def primitives():
        with torch.no_grad():
            nt.greedy(_PyTorchCachedStep(model, tokens), prompt, tokens)

    return named, primitives, tokens


def _pairs(quick: bool) -> dict[str, tuple[Callable, Callable]]:
    """Work -> (named, PyTorch's own), by the row name of the table."""
    seq = 128 if quick else 1536
    mha = (4, 16, 64, 4) if quick else (32, 64, 256, 8)
    _, _, named_step, torch_step, sizes = _transformer_pair(quick, 0.0)
    named, primitives, tokens = _cached(quick)
    return {
        f"nt.attention / SDPA, causal mask, seq {seq} (batch 2, heads 8, key 64)":
            _attention(seq),
        f"MultiHeadAttention / nn.MultiheadAttention, fwd+bwd (batch {mha[0]}, "
        f"seq {mha[1]}, layer {mha[2]}, heads {mha[3]})": _attention_pair(*mha),
        f"training step / nn.Transformer, dropout 0.0 ({sizes})":
            (named_step, torch_step),
        f"cached greedy decoding / PyTorch primitives ({tokens} tokens)":
            (named, primitives),
    }  # fmt: skip


def _rounds(runs: dict[str, Callable], rounds: int, repeats: int, spin: bool) -> dict:
    """(busy, name) -> seconds of every repeat, idle and busy alternating by round."""
    seconds: dict[tuple[bool, str], list[float]] = {}
    for round_ in range(rounds):
        for busy in (False, True) if round_ % 2 == 0 else (True, False):
            with competing(busy, spin):
                for timing in interleaved(runs, repeats, warmup=1):
                    seconds.setdefault((busy, timing.name), []).extend(timing.seconds)
    return seconds


def contention(quick: bool) -> str:
    """24. Each pair's named / PyTorch ratio idle and with one busy process, at one
    thread and at torch's default."""
    pairs = _pairs(quick)
    rounds, repeats = (1, 1) if quick else (3, 3)
    default = torch.get_num_threads()
    rows = []
    with nt.shape_checks(False):
        for threads in sorted({1, default}):
            torch.set_num_threads(threads)
            for work, (named, reference) in pairs.items():
                seconds = _rounds(
                    {"named": named, "torch": reference}, rounds, repeats, not quick
                )
                median = {key: statistics.median(s) for key, s in seconds.items()}
                ratio = {busy: median[busy, "named"] / median[busy, "torch"]
                         for busy in (False, True)}  # fmt: skip
                rows.append([
                    work, threads, f"{median[False, 'named'] * 1e3:.1f}",
                    f"{ratio[False]:.2f}", f"{median[True, 'named'] * 1e3:.1f}",
                    f"{ratio[True]:.2f}",
                    f"{median[True, 'named'] / median[False, 'named']:.2f}",
                    f"{median[True, 'torch'] / median[False, 'torch']:.2f}",
                ])  # fmt: skip
    torch.set_num_threads(default)
    header = ["work", "threads", "idle: named ms", "idle: named / torch",
              "busy: named ms", "busy: named / torch", "named busy / idle",
              "torch busy / idle"]  # fmt: skip
    return table(
        f"24. A busy machine: one other process {_COMPETING[quick]} ({os.cpu_count()} "
        f"cores; {rounds} rounds of {repeats} repeats, idle and busy alternating; "
        "checks off)",
        header,
        rows,
    )


def _recipe_seconds(steps: int, quick: bool) -> float:
    """Seconds per step of ``train copy``'s recipe (the function the command calls),
    without its evaluations: ``steps`` steps, the model built fresh."""
    from named_transformer.workflows.runner import RunSettings, train_task

    settings = RunSettings.recipe(
        "copy", steps=steps, eval_every=0, eval_size=8, test_size=8, target=None,
        train_size=64 if quick else 2000,
    )  # fmt: skip
    started = time.perf_counter()
    train_task("copy", settings=settings, progress=False)
    return (time.perf_counter() - started) / steps


def tiny_recipe(quick: bool) -> str:
    """25. ``train copy``'s recipe (the tiny model) idle and with one busy process:
    seconds per step, including building the data and the model and the final score
    on 8 items; at the thread count the workflow picks
    (:func:`~named_transformer.workflows.threads.suited_threads`) and at torch's
    default (what the workflow took in 0.9.0, here forced by ``OMP_NUM_THREADS``,
    which the workflow honours)."""
    steps, rounds = (5, 1) if quick else (150, 3)
    default = torch.get_num_threads()
    choices = {"the workflow's choice": None, f"torch's default ({default})": default}
    seconds: dict[tuple[str, bool], list[float]] = {}
    for round_ in range(rounds):
        for busy in (False, True) if round_ % 2 == 0 else (True, False):
            with competing(busy, spin=not quick):
                for choice, forced in choices.items():
                    with _environment("OMP_NUM_THREADS", forced):
                        seconds.setdefault((choice, busy), []).append(
                            _recipe_seconds(steps, quick)
                        )
    rows = []
    for choice in choices:
        idle, busy = (statistics.median(seconds[choice, b]) for b in (False, True))
        rows.append([choice, f"{idle * 1e3:.1f}", f"{busy * 1e3:.1f}",
                     f"{busy / idle:.2f}"])  # fmt: skip
    return table(
        f"25. `train copy`'s recipe, idle and busy ({steps} steps, no evaluation; "
        f"{rounds} rounds, alternating"
        + ("; the other process sleeping, quick: no load)" if quick else ")"),
        ["threads", "idle ms / step", "busy ms / step", "busy / idle"],
        rows,
    )


@contextlib.contextmanager
def _environment(name: str, value: object) -> Iterator[None]:
    """The environment variable ``name`` set to ``value`` for the block (None: left
    as it is)."""
    before = os.environ.get(name)
    if value is not None:
        os.environ[name] = str(value)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    print(contention(quick))
    print(tiny_recipe(quick))
