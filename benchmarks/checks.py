"""19. What the shape checks cost a plain call.

Checks are on by default (:func:`named_transformer.shape_checks`), and every other
table turns them off. This one times the same calls three ways, interleaved: with the
checks off, with the quick check (the default since 0.7.0), and with every call sent
through jaxtyping's and beartype's full check (the default before it), beside
PyTorch's own call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

import named_transformer as nt
from benchmarks.common import interleaved, ms, table
from benchmarks.decoding import _PyTorchCachedStep
from named_transformer import axes
from named_transformer.decoding.incremental import IncrementalDecoder
from named_transformer.decoding.search import greedy
from named_transformer.interop.pytorch import from_torch
from named_transformer.models.config import TransformerConfig
from named_transformer.models.language_model import LanguageModel


@contextlib.contextmanager
def _full_checks() -> Iterator[None]:
    """Every checked call through jaxtyping and beartype: the quick check declines."""
    original = axes._QuickCheck.run
    axes._QuickCheck.run = lambda self, fn, args, kwargs: axes._REJECTED
    try:
        yield
    finally:
        axes._QuickCheck.run = original


def _three_ways(call: Callable[[], object]) -> dict[str, Callable[[], object]]:
    def off():
        with nt.shape_checks(False):
            call()

    def full():
        with _full_checks():
            call()

    return {"off": off, "quick": call, "full": full}


def _row(
    label: str, size: str, call, reference, calls: int, repeats: int, units: int = 1
) -> list:
    """``calls`` calls a sample, ``repeats`` samples of each, interleaved; the times
    of one of ``units`` parts of a call (a token of a decoding)."""

    def times(run):
        return lambda: [run() for _ in range(calls)]

    candidates = {k: times(v) for k, v in _three_ways(call).items()}
    candidates["torch"] = times(reference)
    off, quick, full, torch_ = (
        t.median / calls / units for t in interleaved(candidates, repeats)
    )
    return [
        label, size, ms(off), ms(quick), ms(full), ms(torch_),
        f"{quick / torch_:.2f}", f"{full / torch_:.2f}",
    ]  # fmt: skip


def _attention_row(seq: int, calls: int, repeats: int) -> list:
    q, k, v = (torch.randn(2, 8, seq, 64) for _ in range(3))
    mask = nt.causal_mask(seq)
    return _row(
        "nt.attention", f"seq {seq}",
        lambda: nt.attention(q, k, v, mask),
        lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        calls, repeats,
    )  # fmt: skip


def _module_row(ours, theirs, seq: int, calls: int, repeats: int) -> list:
    x, mask = torch.randn(1, seq, 512), nt.causal_mask(seq)
    return _row(
        "MultiHeadAttention", f"seq {seq}",
        lambda: ours(x, mask=mask),
        lambda: theirs(x, x, x, attn_mask=~mask, need_weights=False),
        calls, repeats,
    )  # fmt: skip


def _decoding_row(quick: bool, repeats: int) -> list:
    """Table 17's model and greedy decoding, one decoding a sample: ms a token."""
    tokens = 8 if quick else 64
    config = TransformerConfig(
        decoder_layers=2 if quick else 4, layer=64 if quick else 256,
        heads=4 if quick else 8, hidden=128 if quick else 1024, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LanguageModel(100, config).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    return _row(
        "cached decoding step", f"{tokens} tokens",
        lambda: greedy(IncrementalDecoder(model), prompt, tokens),
        lambda: greedy(_PyTorchCachedStep(model, tokens), prompt, tokens),
        1, repeats, units=tokens,
    )  # fmt: skip


def check_cost(quick: bool) -> str:
    """19. A plain call with checks off, with the quick check, with the full check,
    and PyTorch's own: ``nt.attention`` against SDPA (batch 2, heads 8, key 64,
    boolean causal mask), ``MultiHeadAttention`` against ``nn.MultiheadAttention``
    (batch 1, layer 512, heads 8, causal), and a cached greedy step of table 17's
    model against the same step in PyTorch primitives (ms a token)."""
    lengths = [16] if quick else [64, 256]
    repeats, calls = (3, 2) if quick else (15, 10)
    with torch.no_grad():
        rows = [_attention_row(seq, calls, repeats) for seq in lengths]
        theirs = nn.MultiheadAttention(512, 8, batch_first=True).eval()
        ours = from_torch(theirs).eval()
        rows += [_module_row(ours, theirs, seq, calls, repeats) for seq in lengths]
        rows.append(_decoding_row(quick, max(3, repeats // 3)))
    header = ["call", "size", "checks off ms", "quick check ms", "full check ms",
              "PyTorch ms", "quick / PyTorch", "full / PyTorch"]  # fmt: skip
    return table(
        "19. What the shape checks cost a plain call: off, the quick check (the "
        "default), jaxtyping's and beartype's full check (the default before 0.7.0); "
        "forward, no gradient; PyTorch: SDPA, nn.MultiheadAttention, the "
        "PyTorch-primitives step (ms a token)",
        header,
        rows,
    )
