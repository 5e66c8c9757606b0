"""Benchmarks 1, 2, 8, 12, 13, 15, 16, 20, 21, 22 and 23: the attention core against
SDPA, the score zoo, peak memory; blockwise attention against SDPA, in time and in
memory; the crossover of the automatic core, and a plain call (with a score bias, with
no mask) against PyTorch's own; the block sizes."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

import named_transformer as nt
from benchmarks.common import interleaved, ms, table
from named_transformer.contraction import einsum
from named_transformer.core.blockwise import (
    AUTOMATIC_RULE,
    CROSSOVER,
    FULL_CROSSOVER,
    _key_blocks,
    _query_blocks,
    automatic_block,
    block_size,
    blockwise_attention,
)
from named_transformer.core.fast import fused_kernel_computes
from named_transformer.interop.pytorch import from_torch


def _materialised(queries, keys, values, mask):
    """The named equations with the weights materialised (``nt.attention`` before it
    chose its core by the length: what tables 1, 8 and 13 measure)."""
    return nt.attend(nt.attention_weights(queries, keys, mask), values)


def _attention_pair(batch: int, heads: int, seq: int, key: int, repeats: int):
    q, k, v = (torch.randn(batch, heads, seq, key) for _ in range(3))
    mask = nt.causal_mask(seq)
    return interleaved(
        {
            "named": lambda: _materialised(q, k, v, mask),
            "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        },
        repeats,
    )


def attention_vs_sdpa(quick: bool) -> str:
    """1. The materialising named equations against F.scaled_dot_product_attention,
    causal mask, seq 64..2048."""
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
from named_transformer.core.blockwise import blockwise_attention
kind, seq = sys.argv[1], int(sys.argv[2])
nt.shape_checks(False)
q, k, v = (torch.randn(1, 8, seq, 64) for _ in range(3))
mask = nt.causal_mask(seq)
run = {
    "named": lambda: nt.attend(nt.attention_weights(q, k, mask), v),  # materialising
    "default": lambda: nt.attention(q, k, v, mask),  # the core chosen for the call
    "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    "blockwise": lambda: blockwise_attention(q, k, v, causal=True),
    "sdpa-causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
}[kind]
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


def _peak_mib(kind: str, seq: int) -> float:
    """The rise of the RSS high-water mark over one call, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, kind, str(seq)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


# Quick mode starts one process a kind and length for the whole run (tables 8, 13 and
# 16 share those at 256 positions): each costs seconds of importing torch.
_quick_peak_mib = functools.cache(_peak_mib)


def _peak(quick: bool) -> Callable[[str, int], float]:
    return _quick_peak_mib if quick else _peak_mib


def peak_memory(quick: bool) -> str:
    """8. Peak resident memory (MiB) a forward call adds, each kind in a fresh process
    (Linux)."""
    lengths = [256] if quick else [256, 1024, 2048, 4096]
    rows = []
    for seq in lengths:
        cells = [seq, f"{8 * seq * seq * 4 / 2**20:.0f}"]
        for kind in ("named", "sdpa"):
            cells.append(f"{_peak(quick)(kind, seq):.0f}")
        rows.append(cells)
    header = ["seq", "one score tensor MiB", "named peak MiB", "SDPA peak MiB"]
    return table(
        "8. Peak memory of one attention call (batch 1, heads 8, key 64; "
        "rise of the RSS high-water mark)",
        header,
        rows,
    )


def _causal_pair(
    batch: int, heads: int, seq: int, key: int, block: int | None, repeats: int,
    compiled_block: int | None = None,
):  # fmt: skip
    """Forward, and forward + backward, of blockwise (causal blocks skipped) and SDPA
    (``is_causal=True``), interleaved; with ``compiled_block``, the forward of
    blockwise attention compiled (inductor, ``fullgraph=True``, that block size)
    beside them, and the seconds its compilation took."""
    q, k, v = (torch.randn(batch, heads, seq, key) for _ in range(3))
    inputs = [x.clone().requires_grad_() for x in (q, k, v)]
    grad = torch.randn(batch, heads, seq, key)

    def blockwise(q, k, v):
        return blockwise_attention(q, k, v, block=block, causal=True)

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def backward(attention):
        return lambda: torch.autograd.grad(attention(*inputs), inputs, grad)

    forwards = {"blockwise": lambda: blockwise(q, k, v), "sdpa": lambda: sdpa(q, k, v)}
    compile_seconds = None
    with torch.no_grad():
        if compiled_block is not None:
            torch._dynamo.reset()
            compiled = torch.compile(
                lambda q, k, v: blockwise_attention(
                    q, k, v, block=compiled_block, causal=True
                ),
                fullgraph=True,
            )
            start = time.perf_counter()
            compiled(q, k, v)
            compile_seconds = time.perf_counter() - start
            forwards["compiled"] = lambda: compiled(q, k, v)
            forwards.update(_compiled_references(q, k, v, compiled_block))
        forward = interleaved(forwards, repeats)
    both = interleaved(
        {"blockwise": backward(blockwise), "sdpa": backward(sdpa)}, repeats
    )
    return forward, both, compile_seconds


def _compiled_references(q, k, v, block: int) -> dict:
    """Table 20's candidates: PyTorch's own compiled blockwise attention
    (FlexAttention, a causal block mask, inductor's CPU template), and the two
    products of each tile that causal blockwise attention visits, alone (no softmax,
    eager: the matrix products no compiled blockwise attention can avoid)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    seq = q.shape[-2]
    try:
        causal = create_block_mask(
            lambda b, h, query, key: query >= key, None, None, seq, seq, device="cpu"
        )
        flex = torch.compile(flex_attention)
        flex(q, k, v, block_mask=causal)  # compiled here, outside the timing
    except Exception as error:  # a torch whose FlexAttention cannot run here
        print(f"FlexAttention did not run: {error}", file=sys.stderr)
        flex = None

    def products():  # the tiles blockwise attention visits, by its own iteration
        for rows in _query_blocks(seq, block):
            for columns, _ in _key_blocks(rows, seq, block, None, True, 0, q.device):
                scores = einsum(
                    q[..., rows, :], k[..., columns, :],
                    "... seq_q key, ... seq key -> ... seq_q seq",
                )  # fmt: skip
                einsum(
                    scores, v[..., columns, :],
                    "... seq_q seq, ... seq val -> ... seq_q val",
                )  # fmt: skip

    if flex is None:
        return {"products": products}
    return {"flex": lambda: flex(q, k, v, block_mask=causal), "products": products}


def blockwise_vs_sdpa(quick: bool) -> str:
    """12. Blockwise named attention (causal blocks skipped) against SDPA with
    ``is_causal=True``: forward (target <= 1.5x), and forward + backward, the plain
    call (blocks of ``block_size``'s); in a full run, the forward compiled too
    (target <= 1.0x), in blocks of 256: at 2,048 positions, blocks of 128 took three
    times as long to compile and ran no faster, blocks of 512 ran slower."""
    lengths = [64, 128] if quick else [1024, 2048, 4096]
    batch, heads, key = 2, 8, 64
    block = 32 if quick else None  # None: the plain call's, block_size
    compiled_block = None if quick else 256
    rows, references = [], []
    for seq in lengths:
        repeats = 3 if quick else max(5, 20 * 1024 // seq)
        (named, sdpa, *compiled), (named_both, sdpa_both), seconds = _causal_pair(
            batch, heads, seq, key, block, repeats,
            compiled_block if seq >= 2048 else None,
        )  # fmt: skip
        if compiled:
            by_name = {t.name: t for t in compiled}
            references.append(
                [seq, ms(sdpa.median)]
                + [
                    f"{ms(t.median)} ({t.median / sdpa.median:.2f})" if t else "failed"
                    for t in map(by_name.get, ("compiled", "flex", "products"))
                ]
            )
            compiled_cells = [
                ms(compiled[0].median),
                f"{compiled[0].median / sdpa.median:.2f}",
                f"{seconds:.0f}",
            ]
        else:
            compiled_cells = ["not run"] * 3
        rows.append(
            [
                seq,
                block if block is not None else block_size(),
                ms(named.median),
                ms(sdpa.median),
                f"{named.median / sdpa.median:.2f}",
                *compiled_cells,
                ms(named_both.median),
                ms(sdpa_both.median),
                f"{named_both.median / sdpa_both.median:.2f}",
            ]
        )
    header = [
        "seq",
        "block",
        "named ms",
        "SDPA ms",
        "named / SDPA",
        "compiled ms",
        "compiled / SDPA",
        "compile s",
        "fwd+bwd named ms",
        "fwd+bwd SDPA ms",
        "fwd+bwd ratio",
    ]
    twelve = table(
        f"12. Blockwise named attention vs SDPA, forward (batch {batch} × heads "
        f"{heads} × key {key}, causal; "
        + (f"block {block}" if block else "no block given: block_size's")
        + f"; compiled: block {compiled_block or 'none'})",
        header,
        rows,
    )
    if not references:
        return twelve
    return twelve + table(
        "20. Compiled blockwise attention and its references, forward, measured with "
        f"table 12's (ms, and / SDPA): PyTorch's compiled FlexAttention (causal block "
        f"mask), and the tiles' two products alone (blocks of {compiled_block}, the "
        "tiles causal attention visits, no softmax)",
        ["seq", "SDPA ms", "compiled blockwise", "compiled FlexAttention",
         "tile products alone"],  # fmt: skip
        references,
    )


def blockwise_memory(quick: bool) -> str:
    """13. Peak resident memory of one causal forward call: blockwise, SDPA
    (``is_causal=True``) and the materialising path (up to 4,096 positions), each in a
    fresh process (Linux)."""
    lengths = [256] if quick else [1024, 2048, 4096, 8192, 16384]
    rows, peak = [], _peak(quick)
    for seq in lengths:
        blockwise, sdpa = peak("blockwise", seq), peak("sdpa-causal", seq)
        named = f"{peak('named', seq):.0f}" if seq <= 4096 else "skipped"
        rows.append(
            [seq, f"{blockwise:.0f}", f"{sdpa:.0f}", named,
             f"{blockwise / max(sdpa, 1.0):.1f}"]
        )  # fmt: skip
    header = [
        "seq",
        "blockwise peak MiB",
        "SDPA peak MiB",
        "materialising peak MiB",
        "blockwise / SDPA",
    ]
    return table(
        "13. Peak memory of one causal attention call (batch 1, heads 8, key 64; "
        "rise of the RSS high-water mark)",
        header,
        rows,
    )


def _crossover_row(
    batch: int, heads: int, seq: int, key: int, repeats: int, causal: bool
) -> list:
    """Materialising and blockwise attention at one length, with a boolean causal
    mask or none, forward and forward + backward, interleaved."""
    q, k, v = (torch.randn(batch, heads, seq, key) for _ in range(3))
    mask = nt.causal_mask(seq) if causal else None

    def materialised(q, k, v):
        return _materialised(q, k, v, mask)

    def blocked(q, k, v):
        return blockwise_attention(q, k, v, mask)  # blocks of block_size's

    with torch.no_grad():
        forward = interleaved(
            {"materialise": lambda: materialised(q, k, v),
             "blockwise": lambda: blocked(q, k, v)},
            repeats,
        )  # fmt: skip
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    grad = torch.randn(batch, heads, seq, key)

    def backward(attention):
        return lambda: torch.autograd.grad(attention(*leaves), leaves, grad)

    both = interleaved(
        {"materialise": backward(materialised), "blockwise": backward(blocked)},
        repeats,
    )
    return [
        "causal" if causal else "none", seq,
        ms(forward[0].median), ms(forward[1].median),
        f"{forward[1].median / forward[0].median:.2f}",
        ms(both[0].median), ms(both[1].median),
        f"{both[1].median / both[0].median:.2f}",
        _core_name(automatic_block(seq, seq, all_tiles=not causal)),
    ]  # fmt: skip


def _core_name(block: int | None) -> str:
    return "materialise" if block is None else f"blockwise ({block})"


def _plain_core(queries, keys, values, mask=None) -> str:
    """What a plain ``nt.attention`` call runs: PyTorch's fused kernel where it
    stands in (``fast.fused_kernel_computes``), else the core the rule picks."""
    if fused_kernel_computes(queries, keys, values, mask):
        return "fused kernel"
    return _core_name(AUTOMATIC_RULE.block(queries, keys, mask))


def crossover(quick: bool) -> str:
    """15. Where blockwise attention starts to beat the materialising path: both with
    a boolean causal mask (blockwise skips the tiles it hides) and with none (every
    tile computed), forward and forward + backward, and the core that
    ``automatic_block`` picks at each length."""
    lengths = {
        True: [32, 64] if quick else [64, 128, 192, 256, 384, 512],
        False: [32, 64] if quick else [256, 384, 512, 640, 768, 1024],
    }
    batch, heads, key = 2, 8, 64
    rows = [
        _crossover_row(
            batch, heads, seq, key, 3 if quick else max(7, 40 * 64 // seq), causal
        )
        for causal in (True, False)
        for seq in lengths[causal]
    ]
    header = [
        "mask",
        "seq",
        "materialise ms",
        "blockwise ms",
        "blockwise / materialise",
        "fwd+bwd materialise ms",
        "fwd+bwd blockwise ms",
        "fwd+bwd ratio",
        "automatic choice",
    ]
    return table(
        f"15. The crossover: blockwise vs materialising attention (batch {batch}, "
        f"heads {heads}, key {key}; crossover {CROSSOVER} with a boolean causal "
        f"mask, {FULL_CROSSOVER} with none)",
        header,
        rows,
    )


def _plain_calls(seq: int, repeats: int, peak: Callable[[str, int], float]) -> list:
    """One row of table 16: ``nt.attention`` and SDPA, the default module and
    ``nn.MultiheadAttention`` (the same weights), forward, interleaved; the peak memory
    of one attention call (measured by ``peak``)."""
    q, k, v = (torch.randn(2, 8, seq, 64) for _ in range(3))
    mask = nt.causal_mask(seq)
    theirs = nn.MultiheadAttention(512, 8, batch_first=True).eval()
    ours = from_torch(theirs).eval()
    x = torch.randn(1, seq, 512)
    with torch.no_grad():
        named, sdpa = interleaved(
            {"named": lambda: nt.attention(q, k, v, mask),
             "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)},
            repeats,
        )  # fmt: skip
        module, reference = interleaved(
            {"named": lambda: ours(x, mask=mask),
             "torch": lambda: theirs(x, x, x, attn_mask=~mask, need_weights=False)},
            repeats,
        )  # fmt: skip
    memory = peak("default", seq), peak("sdpa", seq)
    return [
        seq, _plain_core(q, k, v, mask),
        ms(named.median), ms(sdpa.median), f"{named.median / sdpa.median:.2f}",
        f"{memory[0]:.0f}", f"{memory[1]:.0f}",
        f"{memory[0] / max(memory[1], 1.0):.1f}",
        ms(module.median), ms(reference.median),
        f"{module.median / reference.median:.2f}",
    ]  # fmt: skip


def default_vs_pytorch(quick: bool) -> str:
    """16. A plain call, no option: ``nt.attention`` against SDPA (both with a boolean
    causal mask; batch 2, heads 8, key 64) and ``MultiHeadAttention`` against
    ``nn.MultiheadAttention`` (batch 1, layer 512, heads 8, causal), forward, with the
    peak memory of one ``nt.attention`` call beside SDPA's (table 8's method: batch 1,
    heads 8, key 64)."""
    # quick: one length, as each length starts processes for the memory
    lengths = [256] if quick else [64, 256, 1024, 2048, 4096]
    rows = [
        _plain_calls(seq, 3 if quick else max(5, 20 * 256 // seq), _peak(quick))
        for seq in lengths
    ]
    header = [
        "seq",
        "core",
        "named ms",
        "SDPA ms",
        "nt.attention / SDPA",
        "named MiB",
        "SDPA MiB",
        "memory ratio",
        "module ms",
        "torch ms",
        "module / torch",
    ]
    return table(
        "16. A plain call against PyTorch's own, forward, no option given "
        "(attention: batch 2, heads 8, key 64; modules: batch 1, layer 512, heads 8; "
        "causal mask)",
        header,
        rows,
    )


def _biased_call(seq: int, repeats: int) -> list:
    """One row of table 21: ``nt.attention`` with a score bias and SDPA given the
    same bias with -inf where the mask blocks (made before the timing)."""
    q, k, v = (torch.randn(2, 8, seq, 64) for _ in range(3))
    bias, mask = torch.randn(8, seq, seq), nt.causal_mask(seq)
    float_mask = bias.masked_fill(~mask, -torch.inf)
    with torch.no_grad():
        named, sdpa = interleaved(
            {"named": lambda: nt.attention(q, k, v, mask, score_bias=bias),
             "sdpa": lambda: F.scaled_dot_product_attention(
                 q, k, v, attn_mask=float_mask)},
            repeats,
        )  # fmt: skip
    return [seq, _core_name(automatic_block(seq, seq)), ms(named.median),
            ms(sdpa.median), f"{named.median / sdpa.median:.2f}"]  # fmt: skip


def biased_vs_pytorch(quick: bool) -> str:
    """21. A plain call with a score bias $B$ (one per head, ALiBi's kind) and a
    boolean causal mask (batch 2, heads 8, key 64), against SDPA, forward."""
    lengths = [64, 256] if quick else [64, 256, 1024, 2048]
    rows = [
        _biased_call(seq, 3 if quick else max(5, 20 * 256 // seq)) for seq in lengths
    ]
    return table(
        "21. A plain call with a score bias, forward (batch 2, heads 8, key 64; a bias "
        "per head and a causal mask; SDPA: the bias with -inf where the mask blocks)",
        ["seq", "core", "named ms", "SDPA ms", "nt.attention / SDPA"],
        rows,
    )


def _both_passes(calls: dict, seq: int, repeats: int) -> tuple[list, list]:
    """The forward, and the forward and backward, of each ``call(q, k, v)`` on the same
    random inputs (batch 2, heads 8, key 64), interleaved."""
    q, k, v = (torch.randn(2, 8, seq, 64) for _ in range(3))
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    grad = torch.randn(2, 8, seq, 64)
    with torch.no_grad():
        forward = interleaved(
            {name: lambda call=call: call(q, k, v) for name, call in calls.items()},
            repeats,
        )
    both = interleaved(
        {name: lambda call=call: torch.autograd.grad(call(*leaves), leaves, grad)
         for name, call in calls.items()},
        repeats,
    )  # fmt: skip
    return forward, both


def _block_size_row(seq: int, blocks: list[int], repeats: int, causal: bool) -> list:
    """One row of table 22: blockwise attention, causal or with no mask, in each block
    size, forward and forward + backward, as shares of SDPA's time (the same mask),
    interleaved."""
    calls = {"sdpa": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=causal)}  # fmt: skip
    for block in blocks:
        calls[str(block)] = lambda q, k, v, block=block: blockwise_attention(
            q, k, v, block=block, causal=causal
        )
    cells = []
    for timings in _both_passes(calls, seq, repeats):
        sdpa, *named = timings
        ratios = [t.median / sdpa.median for t in named]
        cells += [f"{r:.2f}" for r in ratios]
        cells.append(named[ratios.index(min(ratios))].name)
    return ["causal" if causal else "none", seq, *cells, block_size()]


def block_sizes(quick: bool) -> str:
    """22. What the block size costs: blockwise attention in blocks of 128, 256 and
    512 against SDPA, causal (``is_causal=True``) and with no mask, forward and
    forward + backward; the block ``block_size`` gives a call that names none, beside
    the fastest."""
    lengths = {
        True: [64, 128] if quick else [1024, 2048, 4096],
        False: [64] if quick else [1024, 2048],
    }
    blocks = [16, 32] if quick else [128, 256, 512]
    rows = [
        _block_size_row(seq, blocks, 3 if quick else max(5, 20 * 1024 // seq), causal)
        for causal in (True, False)
        for seq in lengths[causal]
    ]
    header = ["mask", "seq"]
    for pass_ in ("forward", "fwd+bwd"):
        header += [f"{pass_} block {block} / SDPA" for block in blocks]
        header.append(f"{pass_} fastest block")
    header.append("block_size")
    return table(
        "22. Block sizes: blockwise attention vs SDPA, causal and with no mask (batch "
        "2, heads 8, key 64; as a share of SDPA's time)",
        header,
        rows,
    )


def _unmasked_call(seq: int, repeats: int) -> list:
    """One row of table 23: ``nt.attention`` and SDPA with no mask, forward and
    forward + backward, interleaved."""
    calls = {"named": nt.attention, "sdpa": F.scaled_dot_product_attention}
    core = _plain_core(*(torch.empty(2, 8, seq, 64) for _ in range(3)))
    return [seq, core] + [
        cell
        for named, sdpa in _both_passes(calls, seq, repeats)
        for cell in (ms(named.median), ms(sdpa.median),
                     f"{named.median / sdpa.median:.2f}")  # fmt: skip
    ]


def unmasked_vs_pytorch(quick: bool) -> str:
    """23. A plain call with no mask (every tile computed), against SDPA with none,
    forward and forward + backward."""
    lengths = [64, 256] if quick else [64, 256, 512, 1024, 2048, 4096]
    rows = [
        _unmasked_call(seq, 3 if quick else max(5, 20 * 256 // seq))
        for seq in lengths
    ]
    return table(
        "23. A plain call with no mask, forward and forward + backward (batch 2, "
        "heads 8, key 64)",
        ["seq", "core", "named ms", "SDPA ms", "nt.attention / SDPA",
         "fwd+bwd named ms", "fwd+bwd SDPA ms", "fwd+bwd ratio"],
        rows,
    )  # fmt: skip
