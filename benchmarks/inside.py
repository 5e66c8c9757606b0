"""What looking inside costs: a forward pass with nothing recorded, against one whose
taps cost nothing at all, and against recording everything.

A tap with nothing recorded is one call that reads one global list and returns its
argument. The forward pass "without the feature" is bounded from below by taking the
taps away: the table counts the taps one forward pass runs, times one tap call alone,
and reports ``1 + taps × (one tap) / forward`` as the cost ratio of the feature.
"""

from __future__ import annotations

import sys
import timeit

import torch

import named_transformer as nt
from benchmarks.common import interleaved, ms, table
from named_transformer import recording


def _count_taps(model, tokens) -> int:
    """How many times one forward pass calls ``tap`` or ``tapping``."""
    calls = [0]
    originals = {}

    def counted(function):
        def wrapper(*args, **kwargs):
            calls[0] += 1
            return function(*args, **kwargs)

        return wrapper

    targets = (recording.tap, recording.tapping)
    for module in list(sys.modules.values()):
        for name in ("tap", "tapping"):
            function = getattr(module, name, None)
            if function is not None and function in targets:
                originals[(module, name)] = function
                setattr(module, name, counted(function))
    try:
        model(tokens)
    finally:
        for (module, name), function in originals.items():
            setattr(module, name, function)
    return calls[0]


def taps(quick: bool) -> str:
    """The forward pass of a GPT-2-layout language model, checks off, no gradient."""
    sizes = [(2, 64, 4, 16)] if quick else [(2, 64, 4, 16), (4, 256, 8, 64)]
    repeats = 3 if quick else 30
    one = torch.zeros(3)
    per_tap = min(timeit.repeat(lambda: recording.tap("x", one, "a"), number=10_000,
                                repeat=5)) / 10_000  # fmt: skip
    rows = []
    for layers, layer, heads, seq in sizes:
        torch.manual_seed(0)
        config = nt.TransformerConfig(
            decoder_layers=layers, layer=layer, heads=heads, hidden=4 * layer,
            norm_first=True, activation="gelu_tanh", dropout=0.0,
        )  # fmt: skip
        model = nt.LanguageModel(1000, config, positions="learned",
                                 scale_embeddings=False).eval()  # fmt: skip
        tokens = torch.randint(0, 1000, (8, seq))

        def everything(model=model, tokens=tokens):
            with nt.record(model):
                model(tokens)

        with torch.no_grad(), nt.shape_checks(False):
            count = _count_taps(model, tokens)
            plain, recorded = interleaved(
                {"nothing recorded": lambda m=model, t=tokens: m(t),
                 "everything recorded": everything}, repeats,
            )  # fmt: skip
        bound = 1 + count * per_tap / plain.median
        rows.append([
            f"{layers} layers, layer {layer}, seq {seq}", ms(plain.median),
            plain.spread, count, f"{per_tap * 1e9:.0f}", f"{bound:.4f}×",
            f"{recorded.median / plain.median:.2f}×",
        ])  # fmt: skip
    return table(
        "14. Look inside: a forward with nothing recorded (GPT-2 layout, batch 8, "
        "checks off, no gradient; target ≤ 1.02×)",
        ["model", "forward ms", "spread", "taps per forward", "one tap ns",
         "cost of the taps (vs none)", "recording everything"],
        rows,
    )  # fmt: skip
