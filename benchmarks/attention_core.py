"""Benchmarks 1, 2 and 8: the attention core against SDPA, the score zoo, peak
memory."""

from __future__ import annotations

import json
import subprocess
import sys

import torch
import torch.nn.functional as F

import named_transformer as nt
from benchmarks.common import interleaved, ms, table


def _attention_pair(batch: int, heads: int, seq: int, key: int, repeats: int):
    q, k, v = (torch.randn(batch, heads, seq, key) for _ in range(3))
    mask = nt.causal_mask(seq)
    return interleaved(
        {
            "named": lambda: nt.attention(q, k, v, mask),
            "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        },
        repeats,
    )


def attention_vs_sdpa(quick: bool) -> str:
    """1. nt.attention against F.scaled_dot_product_attention, causal mask, seq
    64..2048."""
    lengths = [64, 256] if quick else [64, 256, 1024, 2048]
    batch, heads, key = 2, 8, 64
    rows = []
    for seq in lengths:
        repeats = 3 if quick else max(5, 40 * 64 // seq)
        named, sdpa = _attention_pair(batch, heads, seq, key, repeats)
        rows.append(
            [
                seq,
                ms(named.median),
                named.spread,
                ms(sdpa.median),
                sdpa.spread,
                f"{named.median / sdpa.median:.2f}",
            ]
        )
    header = ["seq", "named ms", "spread", "SDPA ms", "spread", "named / SDPA"]
    return table(
        f"1. Attention core vs SDPA (batch {batch}, heads {heads}, key {key}, "
        "causal mask)",
        header,
        rows,
    )


def score_zoo(quick: bool) -> str:
    """2. Dot vs scaled dot vs general vs additive scores at equal sizes (Chai)."""
    batch, seq, key, hidden = (2, 64, 32, 32) if quick else (8, 256, 64, 64)
    q, k = torch.randn(batch, seq, key), torch.randn(batch, seq, key)
    w, w1, w2, v = (
        torch.randn(key, key),
        torch.randn(hidden, key),
        torch.randn(hidden, key),
        torch.randn(hidden),
    )
    timings = interleaved(
        {
            "dot": lambda: nt.dot_score(q, k),
            "scaled dot": lambda: nt.scaled_dot_score(q, k),
            "general": lambda: nt.general_score(q, k, w),
            "additive": lambda: nt.additive_score(q, k, w1, w2, v),
        },
        3 if quick else 30,
    )
    dot = timings[0].median
    rows = [[t.name, ms(t.median), t.spread, f"{t.median / dot:.1f}"] for t in timings]
    title = (
        f"2. Score zoo (batch {batch}, seq_q = seq = {seq}, key {key}, hidden {hidden})"
    )
    return table(title, ["score", "ms", "spread", "× dot"], rows)


_MEMORY_CHILD = """
import json, sys, torch, torch.nn.functional as F
import named_transformer as nt
kind, seq = sys.argv[1], int(sys.argv[2])
nt.shape_checks(False)
q, k, v = (torch.randn(1, 8, seq, 64) for _ in range(3))
mask = nt.causal_mask(seq)
run = (lambda: nt.attention(q, k, v, mask)) if kind == "named" else (
    lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
def status(key):
    return next(int(l.split()[1]) for l in open("/proc/self/status")
                if l.startswith(key)) / 1024
# warm up, then reset the high-water mark (Linux: clear_refs 5) and measure one call
run()
open("/proc/self/clear_refs", "w").write("5")
before = status("VmRSS")
run()
print(json.dumps(status("VmHWM") - before))
"""


def peak_memory(quick: bool) -> str:
    """8. Peak resident memory (MiB) a forward call adds, each kind in a fresh process
    (Linux)."""
    lengths = [256, 1024] if quick else [256, 1024, 2048, 4096]
    rows = []
    for seq in lengths:
        cells = [seq, f"{8 * seq * seq * 4 / 2**20:.0f}"]
        for kind in ("named", "sdpa"):
            out = subprocess.run(
                [sys.executable, "-c", _MEMORY_CHILD, kind, str(seq)],
                capture_output=True,
                text=True,
                check=True,
            )
            cells.append(f"{json.loads(out.stdout):.0f}")
        rows.append(cells)
    header = ["seq", "one score tensor MiB", "named peak MiB", "SDPA peak MiB"]
    return table(
        "8. Peak memory of one attention call (batch 1, heads 8, key 64; "
        "rise of the RSS high-water mark)",
        header,
        rows,
    )
