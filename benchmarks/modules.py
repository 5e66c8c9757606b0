"""Benchmarks 3-6: multi-head attention and a full training step against PyTorch's
modules.

Both sides hold the same weights (``interop.from_torch``), run forward and backward on
the same inputs, interleaved in one process. FLOPs are counted with
``torch.utils.flop_counter``; GFLOP/s = FLOPs of one step / median step time.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import named_transformer as nt
from benchmarks.common import interleaved, ms, table
from named_transformer.interop.pytorch import from_torch
from named_transformer.models.multihead import MultiHeadAttention


def _flops(step) -> int:
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def _row(label: str, named, reference, flops: int | None = None) -> list[object]:
    row = [
        label,
        ms(named.median),
        named.spread,
        ms(reference.median),
        reference.spread,
        f"{named.median / reference.median:.3f}",
    ]
    if flops is not None:
        row += [
            f"{flops / named.median / 1e9:.1f}",
            f"{flops / reference.median / 1e9:.1f}",
        ]
    return row


def _attention_pair(
    batch: int, seq: int, layer: int, heads: int, fused: bool = False, *,
    device: torch.device | str | None = None, dtype: torch.dtype | None = None,
):  # fmt: skip
    """Causal fwd+bwd steps of nn.MultiheadAttention and of the named module holding
    its weights (on ``device``, in ``dtype``: torch's defaults if None)."""
    theirs = nn.MultiheadAttention(
        layer, heads, batch_first=True, device=device, dtype=dtype
    )
    ours = from_torch(theirs)
    if fused:
        _fuse(ours)
    x = torch.randn(batch, seq, layer, device=device, dtype=dtype, requires_grad=True)
    causal = nt.causal_mask(seq, device=device)

    def named_step():
        ours(x, mask=causal).sum().backward()

    def torch_step():
        theirs(x, x, x, attn_mask=~causal, need_weights=False)[0].sum().backward()

    return named_step, torch_step


def multihead(quick: bool) -> str:
    """3 and 5: MultiHeadAttention forward+backward vs nn.MultiheadAttention, checks
    off and on."""
    batch, seq, layer, heads = (4, 16, 64, 4) if quick else (32, 64, 256, 8)
    named_step, torch_step = _attention_pair(batch, seq, layer, heads)
    repeats = 3 if quick else 40
    rows = []
    with nt.shape_checks(False):
        named, reference = interleaved(
            {"named": named_step, "torch": torch_step}, repeats
        )
    rows.append(_row("checks off", named, reference))
    named_on, reference_on = interleaved(
        {"named": named_step, "torch": torch_step}, repeats
    )
    rows.append(_row("checks on", named_on, reference_on))
    rows.append(
        [
            "checks on / off (named)",
            "",
            "",
            "",
            "",
            f"{named_on.median / named.median:.3f}",
        ]
    )
    header = [
        "shape checks",
        "named ms",
        "spread",
        "nn.MultiheadAttention ms",
        "spread",
        "named / torch",
    ]
    title = (
        f"3, 5. MultiHeadAttention forward+backward (batch {batch}, seq {seq}, "
        f"layer {layer}, heads {heads}, causal)"
    )
    return table(title, header, rows)


def _fuse(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.fused = True


def _ratios(timings) -> list[str]:
    named, fused, reference = timings
    return [
        ms(named.median),
        ms(fused.median),
        ms(reference.median),
        f"{named.median / reference.median:.3f}",
        f"{fused.median / reference.median:.3f}",
    ]


def fused_option(quick: bool) -> str:
    """9. The explicit fused-attention option (SDPA inside the named modules), checks
    off.

    Reported apart: the targets hold for the default named path, which this is not.
    """
    rows, repeats = [], 3 if quick else 20
    sizes = (
        [(4, 16, 64, 4), (2, 64, 64, 4)]
        if quick
        else [(32, 64, 256, 8), (2, 1024, 256, 8)]
    )
    with nt.shape_checks(False):
        for batch, seq, layer, heads in sizes:
            named_step, torch_step = _attention_pair(batch, seq, layer, heads)
            fused_step, _ = _attention_pair(batch, seq, layer, heads, fused=True)
            timings = interleaved(
                {"named": named_step, "fused": fused_step, "torch": torch_step}, repeats
            )
            rows.append(
                [
                    f"MultiHeadAttention fwd+bwd, batch {batch} × seq {seq}",
                    *_ratios(timings),
                ]
            )
        _, _, named_step, torch_step, sizes = _transformer_pair(quick, 0.0)
        fused_step = _transformer_pair(quick, 0.0, fused=True)[2]
        timings = interleaved(
            {"named": named_step, "fused": fused_step, "torch": torch_step}, repeats
        )
        rows.append(
            [
                f"training step vs nn.Transformer, dropout 0.0 ({sizes})",
                *_ratios(timings),
            ]
        )
    header = [
        "work",
        "named ms",
        "named fused ms",
        "PyTorch ms",
        "named / torch",
        "named fused / torch",
    ]
    return table(
        "9. The fused-attention option (explicit, not the default), checks off",
        header,
        rows,
    )


def _transformer_pair(quick: bool, dropout: float, fused: bool = False):
    layer, heads, layers, hidden, batch, seq = (
        (32, 4, 1, 64, 4, 8) if quick else (256, 8, 3, 1024, 32, 64)
    )
    theirs = nn.Transformer(
        layer, heads, layers, layers, hidden, dropout, batch_first=True
    )
    ours = from_torch(theirs)
    if fused:
        _fuse(ours)
    source, target = torch.randn(batch, seq, layer), torch.randn(batch, seq, layer)
    causal = nt.causal_mask(seq)
    optimisers = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in (ours, theirs)]

    def named_step():
        optimisers[0].zero_grad()
        ours(source, target, target_mask=causal).square().mean().backward()
        optimisers[0].step()

    def torch_step():
        optimisers[1].zero_grad()
        theirs(
            source, target, tgt_mask=~causal, tgt_is_causal=True
        ).square().mean().backward()
        optimisers[1].step()

    sizes = (
        f"layer {layer}, heads {heads}, {layers}+{layers} layers, hidden {hidden}, "
        f"batch {batch} × seq {seq}"
    )
    return ours, (source, target, causal), named_step, torch_step, sizes


def training_step(quick: bool, peak_gflops: float) -> str:
    """4 and 5: one encoder-decoder training step (AdamW) vs nn.Transformer, GFLOP/s."""
    rows = []
    repeats = 3 if quick else 20
    for dropout in (0.1, 0.0):
        _, _, named_step, torch_step, sizes = _transformer_pair(quick, dropout)
        flops = _flops(torch_step)
        with nt.shape_checks(False):
            named, reference = interleaved(
                {"named": named_step, "torch": torch_step}, repeats
            )
        rows.append(_row(f"dropout {dropout}, checks off", named, reference, flops))
        if dropout == 0.1:
            named_on, reference_on = interleaved(
                {"named": named_step, "torch": torch_step}, repeats
            )
            rows.append(
                _row(f"dropout {dropout}, checks on", named_on, reference_on, flops)
            )
            rows.append(
                [
                    "checks on / off (named)",
                    "",
                    "",
                    "",
                    "",
                    f"{named_on.median / named.median:.3f}",
                    "",
                    "",
                ]
            )
    header = [
        "configuration",
        "named ms",
        "spread",
        "nn.Transformer ms",
        "spread",
        "named / torch",
        "named GFLOP/s",
        "torch GFLOP/s",
    ]
    title = (
        f"4, 5. Training step vs nn.Transformer ({sizes}); "
        f"matmul peak {peak_gflops:.0f} GFLOP/s"
    )
    return table(title, header, rows)


def _compiled_rows(quick: bool, dropout: float) -> tuple[list[list[str]], str]:
    """Graph count and eager / compiled / nn.Transformer step times at one dropout
    rate."""
    ours, (source, target, causal), named_step, torch_step, sizes = _transformer_pair(
        quick, dropout
    )
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(ours)(source, target, target_mask=causal)
    torch._dynamo.reset()
    # quick mode proves fullgraph capture cheaply; a full run compiles with inductor
    compiled_model = torch.compile(
        ours, fullgraph=True, backend="eager" if quick else "inductor"
    )
    optimiser = torch.optim.AdamW(ours.parameters(), lr=1e-4)

    def compiled_step():
        optimiser.zero_grad()
        compiled_model(source, target, target_mask=causal).square().mean().backward()
        optimiser.step()

    compiled_step()  # compile outside the timing
    eager, fast, reference = interleaved(
        {
            "named eager": named_step,
            "named compiled": compiled_step,
            "nn.Transformer eager": torch_step,
        },
        3 if quick else 20,
    )
    graphs = f"{explanation.graph_count} / {explanation.graph_break_count}"
    rows = [[f"dropout {dropout}: graphs / graph breaks", graphs, ""]]
    rows += [
        [
            f"dropout {dropout}: {t.name}",
            ms(t.median),
            f"{t.median / reference.median:.3f}",
        ]
        for t in (eager, fast, reference)
    ]
    return rows, sizes


def compiled(quick: bool) -> str:
    """6. Eager vs torch.compile with checks off: fullgraph, graph breaks, speed
    (dropout 0.0 and 0.1; quick: 0.1 alone, its graph holds the dropouts too, and each
    rate is traced twice)."""
    rows = []
    with nt.shape_checks(False):
        for dropout in (0.1,) if quick else (0.0, 0.1):
            more, sizes = _compiled_rows(quick, dropout)
            rows += more
    return table(
        f"6. torch.compile(fullgraph=True), checks off ({sizes})",
        ["", "ms", "/ nn.Transformer eager"],
        rows,
    )
