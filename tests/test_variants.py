"""One multi-head attention, its variants as parts: every combination of position
scheme × key/value heads × core, in a full forward pass and in cached decoding, equals
a reference or is refused in one line.

The reference is written here with torch primitives, independently of the library:
keys and values repeated per query head (``repeat_interleave``), rotary positions by
``rotate_half``, ALiBi and relative terms from their definitions, the materialised
softmax. The cached cells compare the key/value-cached decoder with the same model
recomputing the whole prefix (itself checked against the reference by the full cells).
"""

from __future__ import annotations

import math

import pytest
import torch

import named_transformer as nt
from named_transformer.decoding import IncrementalDecoder
from named_transformer.models.variants import (
    NO_POSITIONS,
    SCHEMES,
    AttentionVariant,
    PositionScheme,
    check_variant,
)
from named_transformer.workflows.runner import build_model, make_spec, position_choices

LAYER, HEADS, SEQ, BATCH, BASE, DISTANCE = 24, 4, 7, 2, 100.0, 2
POSITIONS = ["none", "rotary", "alibi", "relative"]
KV_HEADS = {"all": HEADS, "group": 2, "one": 1}
CORES = {"materialising": {}, "blockwise": {"block": 3}, "fused": {"fused": True}}
D = torch.float64


def attention(positions: str, kv_heads: int, core: str) -> nt.MultiHeadAttention:
    """The module of one cell, in float64, with random biases."""
    options = {"kv_heads": kv_heads, "dropout": 0.0, **CORES[core]}
    scheme = {
        "none": PositionScheme(), "rotary": nt.Rotary(BASE), "alibi": nt.ALiBi(),
        "relative": nt.Relative(DISTANCE),
    }[positions]  # fmt: skip
    module = nt.MultiHeadAttention(LAYER, HEADS, positions=scheme, **options).to(D)
    with torch.no_grad():
        for name in ("b_q", "b_k", "b_v", "b_o"):
            getattr(module, name).normal_()
    return module


def rotate_half(x: torch.Tensor, first: int) -> torch.Tensor:
    """RoPE as Hugging Face's Llama writes it: x cos + rotate_half(x) sin."""
    key = x.shape[-1]
    frequencies = BASE ** (-torch.arange(0, key, 2, dtype=D) / key)
    angles = torch.outer(torch.arange(first, first + x.shape[-2], dtype=D), frequencies)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    half = torch.cat([-x[..., key // 2 :], x[..., : key // 2]], -1)
    return x * cos + half * sin


def reference(module, x, mask, positions: str, offset: int = 0) -> torch.Tensor:
    """Multi-head attention of ``x`` over itself from the module's weights, with
    torch primitives, keys and values repeated per head."""
    q = torch.einsum("bsl,hlk->bhsk", x, module.w_q) + module.b_q[:, None]
    k = torch.einsum("bsl,hlk->bhsk", x, module.w_k) + module.b_k[:, None]
    v = torch.einsum("bsl,hlk->bhsk", x, module.w_v) + module.b_v[:, None]
    group = HEADS // module.w_k.shape[0]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    if positions == "rotary":
        q, k = rotate_half(q, offset), rotate_half(k, 0)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    query_at = torch.arange(offset, offset + x.shape[-2])[:, None]
    distance = torch.arange(x.shape[-2])[None, :] - query_at  # key i - query j
    if positions == "alibi":
        slopes = module.positions.slopes
        scores = scores - slopes[:, None, None] * (-distance)
    if positions == "relative":
        index = distance.clamp(-DISTANCE, DISTANCE) + DISTANCE
        scores = scores + torch.einsum(
            "bhjk,jik->bhji", q, module.positions.a_k[index]
        ) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(~mask, -torch.inf), -1)
    out = weights @ v
    if positions == "relative":
        tables = module.positions.a_v[index]
        out = out + torch.einsum("bhji,jiv->bhjv", weights, tables)
    return torch.einsum("bhsv,hvl->bsl", out, module.w_o) + module.b_o


def refused(positions: str, core: str) -> bool:
    return positions == "relative" and core != "materialising"


CELLS = [
    (positions, kv, core)
    for positions in POSITIONS
    for kv in KV_HEADS
    for core in CORES
]


@pytest.mark.parametrize(("positions", "kv", "core"), CELLS)
def test_full_forward_equals_the_reference_or_is_refused(positions, kv, core):
    torch.manual_seed(0)
    if refused(positions, core):
        with pytest.raises(ValueError, match=f"relative positions with the {core}"):
            attention(positions, KV_HEADS[kv], core)
        return
    module = attention(positions, KV_HEADS[kv], core)
    x = torch.randn(BATCH, SEQ, LAYER, dtype=D, requires_grad=True)
    mask = nt.causal_mask(SEQ)
    offset = 0 if positions == "none" else 2  # queries from position 2, keys from 0
    outputs = module(x, mask=mask, offset=offset)
    expected = reference(module, x, mask, positions, offset)
    torch.testing.assert_close(outputs, expected)
    # and the gradients with respect to the inputs
    (gradient,) = torch.autograd.grad(outputs.sum(), x)
    (expected_gradient,) = torch.autograd.grad(expected.sum(), x)
    torch.testing.assert_close(gradient, expected_gradient)


def language_model(positions: str, kv: str, core: str) -> nt.LanguageModel:
    config = nt.TransformerConfig(
        decoder_layers=2, layer=LAYER, heads=HEADS, hidden=32, dropout=0.0
    )
    model = nt.LanguageModel(11, config).to(D).eval()
    for block in model.blocks.layers:
        block.self_attention = attention(positions, KV_HEADS[kv], core)
    return model


@pytest.mark.parametrize(("positions", "kv", "core"), CELLS)
def test_cached_decoding_equals_recomputing_or_is_refused(positions, kv, core):
    torch.manual_seed(1)
    if refused(positions, core):
        with pytest.raises(ValueError, match="never materialises"):
            language_model(positions, kv, core)
        return
    model = language_model(positions, kv, core)
    tokens = torch.randint(0, 11, (BATCH, SEQ))
    cached = IncrementalDecoder(model, cache=True)
    prompt = 3  # a prompt of three tokens at once, then one token a step
    steps = [cached(tokens[:, :prompt])]
    steps += [cached(tokens[:, : end + 1]) for end in range(prompt, SEQ)]
    with torch.no_grad():
        recomputed = [model(tokens[:, :end])[:, -1] for end in range(prompt, SEQ + 1)]
    torch.testing.assert_close(torch.stack(steps), torch.stack(recomputed))


def test_a_refusal_is_one_line_naming_the_pair_and_why():
    relative = nt.RelativeTables(2, 4, 4)
    for core in (nt.Blockwise(4), nt.Fused()):
        with pytest.raises(ValueError) as error:
            check_variant(AttentionVariant(relative, core))
        message = str(error.value)
        assert "\n" not in message
        assert f"relative positions with the {core.name} core" in message
        assert "weights" in message  # why: the value term reads them
    assert check_variant(AttentionVariant(NO_POSITIONS, nt.Fused()))


def test_a_new_scheme_is_one_part_and_one_registration():
    """A scheme written here: a per-head constant on the diagonal (a toy), one
    scheme that is its own part, registered, built by name through the
    configuration, the model kinds and the command line's choices."""
    from dataclasses import dataclass
    from typing import ClassVar

    @nt.register_scheme
    @dataclass(frozen=True)
    class Diagonal(PositionScheme, nt.Positions):
        weight: float = 5.0
        kind: ClassVar[str] = "diagonal"
        name: ClassVar[str] = "diagonal"

        def part(self, attention):
            return self

        def score_term(self, queries, seq, offset):
            eye = torch.eye(queries.shape[-2], seq, dtype=queries.dtype)
            return eye[None] * self.weight

    try:
        module = nt.MultiHeadAttention(LAYER, HEADS, positions=Diagonal()).to(D)
        x = torch.randn(BATCH, SEQ, LAYER, dtype=D)
        bias = torch.eye(SEQ, dtype=D) * 5.0
        plain = nt.MultiHeadAttention(LAYER, HEADS).to(D)
        plain.load_state_dict(module.state_dict())
        torch.testing.assert_close(module(x), plain(x, score_bias=bias))
        # the configuration, the model kinds and the command line know it by name
        assert "diagonal" in position_choices()
        assert nt.TransformerConfig(positions="diagonal").positions == Diagonal()
        spec = make_spec("copy", "decoder-only", "tiny", vocab=14, positions="diagonal")
        model = build_model(spec)
        assert all(
            block.self_attention.positions == Diagonal()
            for block in model.blocks.layers
        )
    finally:
        del SCHEMES["diagonal"]
