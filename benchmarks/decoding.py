"""Benchmark 7: greedy decoding with and without the key/value cache (tokens/s)."""

from __future__ import annotations

import time

import torch

import named_transformer as nt
from benchmarks.common import table
from named_transformer.config import TransformerConfig
from named_transformer.decoding import IncrementalDecoder, greedy
from named_transformer.language_model import LanguageModel


def _rates(model, prompt, tokens: int, repeats: int) -> tuple[dict[bool, float], bool]:
    rates, outputs = {}, {}
    for _ in range(repeats):  # interleaved; the best of the repeats (decoding is long)
        for cache in (True, False):
            start = time.perf_counter()
            outputs[cache] = greedy(IncrementalDecoder(model, cache=cache), prompt, tokens).tokens
            rates[cache] = max(rates.get(cache, 0.0), tokens / (time.perf_counter() - start))
    return rates, bool(torch.equal(outputs[True], outputs[False]))


def kv_cache(quick: bool) -> str:
    """Greedy decoding of ``tokens`` new tokens from a 1-token prompt, checks off.

    Reported with one intra-op thread and with all cores: a cached step is a chain of
    tiny operations, where a second thread costs more in synchronisation than it gains.
    """
    tokens, repeats = (16, 1) if quick else (256, 5)
    config = TransformerConfig(decoder_layers=2 if quick else 4, layer=64 if quick else 256, heads=4 if quick else 8,
                               hidden=128 if quick else 1024, dropout=0.0)
    model = LanguageModel(100, config).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    rows, threads_before = [], torch.get_num_threads()
    with nt.shape_checks(False), torch.no_grad():
        for threads in sorted({1, threads_before}):
            torch.set_num_threads(threads)
            rates, same = _rates(model, prompt, tokens, repeats)
            rows.append([threads, f"{rates[True]:.0f}", f"{rates[False]:.0f}", f"{rates[True] / rates[False]:.1f}×", same])
    torch.set_num_threads(threads_before)
    sizes = f"{config.decoder_layers} layers, layer {config.layer}, heads {config.heads}, hidden {config.hidden}"
    header = ["threads", "with cache, tokens/s", "recompute the prefix, tokens/s", "speed-up", "same tokens"]
    return table(f"7. Greedy decoding of {tokens} tokens, batch 1 ({sizes})", header, rows)
