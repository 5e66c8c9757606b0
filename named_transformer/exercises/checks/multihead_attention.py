"""Checks of the page "Multi-head attention": ``project_heads``, ``merge_heads``,
``multihead`` (the pipeline: the weights in one ``AttentionWeights``, the positions
and the core in one ``AttentionVariant``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from named_transformer.exercises.checks._references import (
    _causal,
    _head_weights,
    _heads,
    _key_padding,
    _large_head_weights,
    _merge,
    _multihead,
    _rotary_weights,
)
from named_transformer.exercises.checks._support import (
    Check,
    _close,
    _randn,
    _rejects,
    _stable,
    _unpack,
    _zeros_and_zero_gradient,
)
from named_transformer.models.alibi import LinearBiases
from named_transformer.models.attention_weights import AttentionWeights
from named_transformer.models.cores import FUSED, Blockwise
from named_transformer.models.rotary import Rotary
from named_transformer.models.variants import AttentionVariant


def project_heads_matches_equation(impl: Check) -> None:
    """W ·layer X + b, one (layer, key) matrix per head."""
    inputs, weight = _randn(2, 5, 4, seed=34), _randn(3, 4, 6, seed=35)
    bias = _randn(3, 6, seed=36)
    _close(impl(inputs, weight), _heads(inputs, weight), "X·W_h for each head h",
           "without a bias")  # fmt: skip
    _close(impl(inputs, weight, bias), _heads(inputs, weight, bias),
           "X·W_h + b_h for each head h", "with a bias")  # fmt: skip


def project_heads_wrong_shape(impl: Check) -> None:
    """A weight reading another width is a shape error naming layer."""
    _rejects(lambda: impl(_randn(2, 5, 4), _randn(3, 7, 6)),
             "a weight reading 7 features from inputs 4 wide")  # fmt: skip


def merge_heads_matches_concatenation(impl: Check) -> None:
    """W^O ·heads,val Y equals concatenating the heads, then the linear map W^O."""
    heads_out, w_o = _randn(2, 3, 5, 4, seed=37), _randn(3, 4, 6, seed=38)
    b_o = _randn(6, seed=39)
    _close(impl(heads_out, w_o), _merge(heads_out, w_o),
           "concatenating the heads then W^O (heads-major, as Vaswani et al.)",
           "without a bias")  # fmt: skip
    _close(impl(heads_out, w_o, b_o), _merge(heads_out, w_o, b_o),
           "concatenating the heads then W^O + b^O", "with a bias")  # fmt: skip


def merge_heads_wrong_shape(impl: Check) -> None:
    """W^O with heads and val swapped is a shape error."""
    _rejects(lambda: impl(_randn(2, 3, 5, 4), _randn(4, 3, 6)),
             "W^O of shape (val, heads, layer)")  # fmt: skip


def _attention_weights(weights: Sequence[Tensor],
                       biases: Sequence[Tensor | None] = ()) -> AttentionWeights:
    """W^Q, W^K, W^V, W^O (and b^Q, b^K, b^V, b^O) in the pipeline's container."""
    return AttentionWeights(*weights, *biases)


def _same_pair(mine: Any, expected: tuple[Tensor, Tensor], where: str) -> None:
    output, weights = _unpack(mine, "output, weights")
    if weights is None:
        raise AssertionError("returns no attention weights (None) with the "
                             "materialising core")  # fmt: skip
    _close(output, expected[0], "the heads' attention merged by W^O", where)
    _close(weights, expected[1], "each head's softmax(Q·K/√|key|)",
           f"(the weights) {where}")  # fmt: skip


def multihead_self_attention_causal(impl: Check) -> None:
    """Self-attention with a causal mask: output and per-head weights."""
    inputs, weights = _randn(2, 4, 6, seed=44), _head_weights(6, 6, 40)
    mask = _causal(4, 4)
    _same_pair(impl(inputs, inputs, _attention_weights(weights), mask),
               _multihead(inputs, inputs, weights, mask),
               "in self-attention with a causal mask")  # fmt: skip


def multihead_cross_attention_padding(impl: Check) -> None:
    """Cross-attention over a memory of another width, with a key padding mask."""
    inputs, memory = _randn(2, 3, 6, seed=45), _randn(2, 5, 7, seed=46)
    weights, mask = _head_weights(6, 7, 40), _key_padding([2, 5], 5)
    _same_pair(impl(inputs, memory, _attention_weights(weights), mask),
               _multihead(inputs, memory, weights, mask),
               "in cross-attention with a padding mask")  # fmt: skip


def multihead_attention_biases(impl: Check) -> None:
    """b^Q, b^K, b^V (one per head) are added to the projections, b^O to the
    output."""
    inputs, memory = _randn(2, 3, 6, seed=47), _randn(2, 5, 7, seed=48)
    weights = _head_weights(6, 7, 40)
    biases = (_randn(2, 3, seed=49), _randn(2, 3, seed=50), _randn(2, 5, seed=51),
              _randn(6, seed=52))  # fmt: skip
    _same_pair(impl(inputs, memory, _attention_weights(weights, biases)),
               _multihead(inputs, memory, [*weights, *biases]),
               "with the biases b^Q, b^K, b^V and b^O")  # fmt: skip


def multihead_attention_score_bias(impl: Check) -> None:
    """``score_bias`` B is added to every head's scaled scores."""
    inputs, weights = _randn(2, 4, 6, seed=57), _head_weights(6, 6, 40)
    bias = _randn(4, 4, seed=58)
    _same_pair(impl(inputs, inputs, _attention_weights(weights), score_bias=bias),
               _multihead(inputs, inputs, weights, score_bias=bias),
               "with a score bias, shared by all heads")  # fmt: skip


def multihead_attention_rotary(impl: Check) -> None:
    """A rotary part turns every head's queries and keys by their positions before
    the scores: R(Q)·R(K), pair i (channels i and i + |key|/2) by s·θ_i."""
    inputs, weights = _randn(2, 5, 6, seed=66), _rotary_weights(6, 6, 67)
    mask, variant = _causal(5, 5), AttentionVariant(Rotary(base=100.0))
    _same_pair(impl(inputs, inputs, _attention_weights(weights), mask,
                    variant=variant),
               _multihead(inputs, inputs, weights, mask, rotary=100.0),
               "with the rotary part Rotary(base=100.0): the queries and keys "
               "rotated, the values not")  # fmt: skip


def multihead_attention_linear_biases(impl: Check) -> None:
    """An ALiBi part adds its score term, -m_h·(j - i), one slope per head."""
    inputs, weights = _randn(2, 5, 6, seed=68), _head_weights(6, 6, 69)
    mask, variant = _causal(5, 5), AttentionVariant(LinearBiases(2))
    _same_pair(impl(inputs, inputs, _attention_weights(weights), mask,
                    variant=variant),
               _multihead(inputs, inputs, weights, mask, alibi=True),
               "with the ALiBi part LinearBiases(2): its score term added, "
               "one slope per head")  # fmt: skip


def multihead_attention_offset(impl: Check) -> None:
    """``offset`` is the first query's position: the last three queries at offset 2
    over all five keys are the last three rows of the whole self-attention, with
    rotary and with ALiBi positions."""
    inputs = _randn(2, 5, 6, seed=70)
    for part, name, reference in (
        (Rotary(base=100.0), "Rotary(base=100.0)", {"rotary": 100.0}),
        (LinearBiases(2), "LinearBiases(2)", {"alibi": True}),
    ):
        weights = _rotary_weights(6, 6, 71)
        whole = _multihead(inputs, inputs, weights, _causal(5, 5), **reference)
        _same_pair(impl(inputs[:, 2:], inputs, _attention_weights(weights),
                        _causal(3, 5, 2), variant=AttentionVariant(part), offset=2),
                   (whole[0][:, 2:], whole[1][..., 2:, :]),
                   f"for the queries at positions 2, 3, 4 (offset=2) with {name}: "
                   "the last rows of the whole self-attention")  # fmt: skip


def multihead_attention_other_cores(impl: Check) -> None:
    """With the fused or the blockwise core, the same output and None for the
    weights."""
    inputs, weights = _randn(2, 4, 6, seed=59), _head_weights(6, 6, 40)
    mask = _causal(4, 4)
    expected = _multihead(inputs, inputs, weights, mask)[0]
    for how, core in (("the fused core", FUSED), ("the blockwise core", Blockwise(2))):
        output, returned = _unpack(
            impl(inputs, inputs, _attention_weights(weights), mask,
                 variant=AttentionVariant(core=core)),
            "output, weights",
        )  # fmt: skip
        _close(output, expected, "the heads' attention merged by W^O", f"with {how}")
        if returned is not None:
            raise AssertionError(
                f"returns attention weights with {how}; they are None there (the "
                "fused kernel and the blockwise loop never form the whole table)"
            )


def multihead_attention_fully_masked_query(impl: Check) -> None:
    """A query with no allowed key gets zero weights and a zero output (no b^O),
    never NaN, with zero gradient; the other queries are unchanged."""
    inputs, memory = _randn(2, 3, 6, seed=61), _randn(2, 5, 7, seed=62)
    weights = _head_weights(6, 7, 63)
    mask = _key_padding([2, 5], 5).repeat(1, 3, 1)
    mask[0, 1] = False  # query 1 of sequence 0 may attend no key
    for index, what in ((0, "output"), (1, "weights")):
        found = _zeros_and_zero_gradient(
            lambda x, m, index=index: _unpack(
                impl(x, m, _attention_weights(weights), mask),
                "output, weights")[index],
            {"inputs": inputs, "memory": memory},
            (0, 1) if index == 0 else (0, slice(None), 1),
            f"a query with no allowed key ({what})",
        )  # fmt: skip
        _close(found, _multihead(inputs, memory, weights, mask)[index],
               "the heads' attention merged by W^O" if index == 0
               else "each head's softmax(Q·K/√|key| + M)",
               f"({what}) for the other queries, one query fully masked")  # fmt: skip


def multihead_attention_stable_at_large_scores(impl: Check) -> None:
    """Head 0's scores about +2e4, head 1's about -2e4, in float32: no overflow."""
    inputs, weights = _large_head_weights(seed=60)
    mask = _causal(4, 4)
    output, returned = _unpack(impl(inputs, inputs, _attention_weights(weights), mask),
                               "output, weights")  # fmt: skip
    in_float64 = [w.double() for w in weights]
    expected = _multihead(inputs.double(), inputs.double(), in_float64, mask)
    _stable(returned, expected[1], "each head's softmax(Q·K/√|key| + M)")
    _stable(output, expected[0], "the heads' attention merged by W^O")


def multihead_attention_wrong_shape(impl: Check) -> None:
    """A mask over 4 keys for a memory of 5 is a shape error naming seq."""
    inputs, memory = _randn(2, 3, 6), _randn(2, 5, 7)
    weights = _attention_weights(_head_weights(6, 7, 40))
    _rejects(lambda: impl(inputs, memory, weights, _causal(3, 4)),
             "a mask over 4 keys for a memory of 5")  # fmt: skip


CHECKS: dict[str, tuple[Check, ...]] = {
    "project_heads": (project_heads_matches_equation, project_heads_wrong_shape),
    "merge_heads": (merge_heads_matches_concatenation, merge_heads_wrong_shape),
    "multihead": (multihead_self_attention_causal, multihead_cross_attention_padding,
                  multihead_attention_biases, multihead_attention_score_bias,
                  multihead_attention_rotary, multihead_attention_linear_biases,
                  multihead_attention_offset, multihead_attention_other_cores,
                  multihead_attention_fully_masked_query,
                  multihead_attention_stable_at_large_scores,
                  multihead_attention_wrong_shape),
}  # fmt: skip
