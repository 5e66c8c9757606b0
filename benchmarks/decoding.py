"""Benchmark 7: greedy decoding with and without the key/value cache (tokens/s)."""

from __future__ import annotations

import torch

import named_transformer as nt
from benchmarks.common import Timing, interleaved, table
from named_transformer.config import TransformerConfig
from named_transformer.decoding import IncrementalDecoder, greedy
from named_transformer.language_model import LanguageModel


def _timings(model, prompt, tokens: int, repeats: int) -> tuple[Timing, Timing, bool]:
    """Cached and recomputing decoding, interleaved; the medians of ``repeats`` runs each."""

    def decode(cache: bool):
        return lambda: greedy(IncrementalDecoder(model, cache=cache), prompt, tokens).tokens

    same = bool(torch.equal(decode(True)(), decode(False)()))  # also the warm-up
    cached, recomputed = interleaved({"cache": decode(True), "recompute": decode(False)}, repeats, warmup=0)
    return cached, recomputed, same


def kv_cache(quick: bool) -> str:
    """Greedy decoding of ``tokens`` new tokens from a 1-token prompt, checks off.

    Reported with one intra-op thread and with all cores: a cached step is a chain of
    tiny operations, which a second thread speeds up far less than the large products
    of recomputation.
    """
    tokens, repeats = (16, 1) if quick else (256, 7)
    config = TransformerConfig(decoder_layers=2 if quick else 4, layer=64 if quick else 256, heads=4 if quick else 8,
                               hidden=128 if quick else 1024, dropout=0.0)
    model = LanguageModel(100, config).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    rows, threads_before = [], torch.get_num_threads()
    with nt.shape_checks(False), torch.no_grad():
        for threads in sorted({1, threads_before}):
            torch.set_num_threads(threads)
            cached, recomputed, same = _timings(model, prompt, tokens, repeats)
            rows.append([threads, f"{tokens / cached.median:.0f}", cached.spread, f"{tokens / recomputed.median:.0f}",
                         recomputed.spread, f"{recomputed.median / cached.median:.1f}×", same])
    torch.set_num_threads(threads_before)
    sizes = f"{config.decoder_layers} layers, layer {config.layer}, heads {config.heads}, hidden {config.hidden}"
    header = ["threads", "with cache, tokens/s", "spread", "recompute the prefix, tokens/s", "spread", "speed-up",
              "same tokens"]
    return table(f"7. Greedy decoding of {tokens} tokens, batch 1 ({sizes})", header, rows)
