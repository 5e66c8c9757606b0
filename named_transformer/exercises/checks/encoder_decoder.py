"""Checks of the page "The encoder-decoder Transformer": the ``forward`` of
``EncoderLayer`` and of ``DecoderLayer``, the learner's method in a subclass of the
library's class (the weights are the library's, copied from PyTorch's layers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from named_transformer.exercises.checks._references import _causal, _key_padding
from named_transformer.exercises.checks._support import (
    DTYPE,
    TOLERANCE,
    Check,
    _close,
    _randn,
    _rejects,
)
from named_transformer.interop.pytorch import from_torch
from named_transformer.recording import record

_WIDTH, _HEADS, _HIDDEN = 6, 2, 7  # heads of 3; every width different


def _torch_layer(kind: type[nn.Module], norm_first: bool, seed: int) -> nn.Module:
    """PyTorch's own layer, batch-first, no dropout, in eval mode, random LayerNorms."""
    torch.manual_seed(seed)
    options = {"dropout": 0.0, "batch_first": True, "norm_first": norm_first}
    theirs = kind(_WIDTH, _HEADS, _HIDDEN, dtype=DTYPE, **options).eval()
    with torch.no_grad():  # LayerNorm's gamma = 1, beta = 0 would hide a missing norm
        for name, parameter in theirs.named_parameters():
            if name.startswith("norm"):
                parameter.copy_(_randn(*parameter.shape, seed=seed + len(name)))
    return theirs


def _layer_like(impl: Check, theirs: nn.Module, **options: Any) -> nn.Module:
    """The learner's class, built at the small sizes, holding ``theirs``'s weights."""
    layer = impl(_WIDTH, _HEADS, _HIDDEN, dropout=0.0, norm_first=theirs.norm_first,
                 **options).to(DTYPE).eval()  # fmt: skip
    layer.load_state_dict(from_torch(theirs).state_dict())
    return layer


def _flat(padding: Tensor) -> Tensor:
    """A (batch, 1, seq) key padding mask as PyTorch's (batch, seq)."""
    return rearrange(padding, "b 1 seq -> b seq")


def _self_attention_weights(theirs: nn.Module, inputs: Tensor, mask: Tensor) -> Tensor:
    """PyTorch's post-norm layer's self-attention weights, per head."""
    return theirs.self_attn(inputs, inputs, inputs, attn_mask=~mask,
                            average_attn_weights=False)[1]  # fmt: skip


def _encoder_layer_matches_torch(impl: Check, norm_first: bool) -> None:
    theirs = _torch_layer(nn.TransformerEncoderLayer, norm_first, seed=66)
    mine = _layer_like(impl, theirs)
    inputs, mask = _randn(2, 4, _WIDTH, seed=67), _causal(4, 4)
    what = f"torch.nn.TransformerEncoderLayer(norm_first={norm_first})"
    with torch.no_grad():
        _close(mine(inputs), theirs(inputs), what, "without a mask")
        _close(mine(inputs, mask), theirs(inputs, src_mask=~mask), what,
               "with a causal mask (PyTorch's True means blocked)")  # fmt: skip


def encoder_layer_post_norm_matches_torch(impl: Check) -> None:
    """Post-norm: LayerNorm(X + SelfAtt(X)), then LayerNorm(T + FFN(T))."""
    _encoder_layer_matches_torch(impl, norm_first=False)


def encoder_layer_pre_norm_matches_torch(impl: Check) -> None:
    """Pre-norm: X + SelfAtt(LayerNorm(X)), then T + FFN(LayerNorm(T))."""
    _encoder_layer_matches_torch(impl, norm_first=True)


def encoder_layer_score_bias_matches_torch(impl: Check) -> None:
    """``score_bias`` is added to the attention scores: PyTorch's float src_mask."""
    theirs = _torch_layer(nn.TransformerEncoderLayer, False, seed=66)
    mine = _layer_like(impl, theirs)
    inputs, bias = _randn(2, 4, _WIDTH, seed=74), _randn(4, 4, seed=75)
    # outside no_grad: PyTorch's inference fast path gives NaN for a float64 float mask
    expected = theirs(inputs, src_mask=bias).detach()
    with torch.no_grad():
        _close(mine(inputs, score_bias=bias), expected,
               "torch.nn.TransformerEncoderLayer",
               "with a score bias (a float src_mask)")  # fmt: skip


def _recorded(
    layer: nn.Module, call: Callable[[], Tensor], *attentions: str
) -> tuple[Tensor, ...]:
    """``call()``'s output, then the weights recorded of each of ``attentions`` (the
    layer's modules by name) while it ran, else say that none were."""
    with record(layer) as found:
        output = call()
    weights = []
    for attention in attentions:
        name = f"{attention}.weights"
        if name not in found:
            raise AssertionError(
                f"nothing was recorded as {name!r}: call the module "
                f"self.{attention} (its forward, which the recording sees), not "
                "the functions it runs"
            )
        weights.append(found[name].tensor)
    return output, *weights


def encoder_layer_records_weights(impl: Check) -> None:
    """The self-attention runs as the module ``self.self_attention``: recording the
    layer (``nt.record``) gives its weights per head, PyTorch's."""
    theirs = _torch_layer(nn.TransformerEncoderLayer, False, seed=66)
    mine = _layer_like(impl, theirs)
    inputs, mask = _randn(2, 4, _WIDTH, seed=76), _causal(4, 4)
    with torch.no_grad():
        output, weights = _recorded(mine, lambda: mine(inputs, mask),
                                    "self_attention")  # fmt: skip
        _close(output, theirs(inputs, src_mask=~mask),
               "torch.nn.TransformerEncoderLayer", "while recorded")  # fmt: skip
        _close(weights, _self_attention_weights(theirs, inputs, mask),
               "the self-attention's weights, one table per head",
               "(recorded as self_attention.weights)")  # fmt: skip


def encoder_layer_wrong_shape(impl: Check) -> None:
    """A mask over 4 positions for 3 inputs is a shape error naming seq."""
    layer = impl(_WIDTH, _HEADS, _HIDDEN, dropout=0.0).to(DTYPE)
    _rejects(lambda: layer(_randn(2, 3, _WIDTH), _causal(4, 4)),
             "a mask over 4 positions for 3 inputs")  # fmt: skip


def _decoder_pair(impl: Check, norm_first: bool) -> tuple[nn.Module, nn.Module]:
    theirs = _torch_layer(nn.TransformerDecoderLayer, norm_first, seed=68)
    return _layer_like(impl, theirs), theirs


def decoder_layer_is_causal(impl: Check) -> None:
    """Under the causal mask, position j's output ignores the target tokens after j."""
    mine, _ = _decoder_pair(impl, norm_first=False)
    inputs, memory = _randn(2, 5, _WIDTH, seed=69), _randn(2, 3, _WIDTH, seed=70)
    changed = inputs.clone()
    changed[:, 3:] = _randn(2, 2, _WIDTH, seed=71)
    with torch.no_grad():
        before = mine(inputs, memory, _causal(5, 5))
        after = mine(changed, memory, _causal(5, 5))
    moved = (before[:, :3] - after[:, :3]).abs().max().item()
    if not moved <= TOLERANCE:
        raise AssertionError(
            f"the outputs at positions 0-2 change (by {moved:.3g}) when the target "
            "tokens at 3-4 change: the self-attention sees later positions (apply "
            "the causal mask)"
        )


def _decoder_layer_matches_torch(impl: Check, norm_first: bool) -> None:
    mine, theirs = _decoder_pair(impl, norm_first)
    inputs, memory = _randn(2, 4, _WIDTH, seed=72), _randn(2, 3, _WIDTH, seed=73)
    mask, padding = _causal(4, 4), _key_padding([2, 3], 3)
    what = f"torch.nn.TransformerDecoderLayer(norm_first={norm_first})"
    with torch.no_grad():
        expected = theirs(inputs, memory, tgt_mask=~mask,
                          memory_key_padding_mask=~_flat(padding))  # fmt: skip
        actual = mine(inputs, memory, mask, padding)
    _close(actual, expected, what,
           "with a causal target mask and a padded memory")  # fmt: skip


def decoder_layer_post_norm_matches_torch(impl: Check) -> None:
    """Post-norm: masked self-attention, cross-attention, feed-forward, each
    LayerNorm(X + f(X))."""
    _decoder_layer_matches_torch(impl, norm_first=False)


def decoder_layer_pre_norm_matches_torch(impl: Check) -> None:
    """Pre-norm: each sublayer X + f(LayerNorm(X))."""
    _decoder_layer_matches_torch(impl, norm_first=True)


def decoder_layer_wrong_shape(impl: Check) -> None:
    """A memory with another batch is a shape error naming batch."""
    layer = impl(_WIDTH, _HEADS, _HIDDEN, dropout=0.0).to(DTYPE)
    _rejects(lambda: layer(_randn(2, 4, _WIDTH), _randn(3, 3, _WIDTH)),
             "a memory of batch 3 for targets of batch 2")  # fmt: skip


def decoder_layer_score_biases_match_torch(impl: Check) -> None:
    """``score_bias`` and ``memory_score_bias`` are added to the self- and the
    cross-attention scores: PyTorch's float tgt_mask and memory_mask."""
    mine, theirs = _decoder_pair(impl, norm_first=False)
    inputs, memory = _randn(2, 4, _WIDTH, seed=77), _randn(2, 3, _WIDTH, seed=78)
    bias, memory_bias = _randn(4, 4, seed=79), _randn(4, 3, seed=80)
    with torch.no_grad():
        _close(mine(inputs, memory, score_bias=bias, memory_score_bias=memory_bias),
               theirs(inputs, memory, tgt_mask=bias, memory_mask=memory_bias),
               "torch.nn.TransformerDecoderLayer",
               "with a score bias and a memory score bias")  # fmt: skip


def decoder_layer_records_weights(impl: Check) -> None:
    """Both attentions run as the modules ``self.self_attention`` and
    ``self.cross_attention``: recording the layer gives their weights per head,
    PyTorch's."""
    mine, theirs = _decoder_pair(impl, norm_first=False)
    inputs, memory = _randn(2, 4, _WIDTH, seed=81), _randn(2, 3, _WIDTH, seed=82)
    mask, padding = _causal(4, 4), _key_padding([2, 3], 3)
    with torch.no_grad():
        output, own, cross = _recorded(
            mine, lambda: mine(inputs, memory, mask, padding), "self_attention",
            "cross_attention",
        )  # fmt: skip
        expected = theirs(inputs, memory, tgt_mask=~mask,
                          memory_key_padding_mask=~_flat(padding))  # fmt: skip
        _close(output, expected, "torch.nn.TransformerDecoderLayer",
               "while recorded")  # fmt: skip
        _close(own, _self_attention_weights(theirs, inputs, mask),
               "the self-attention's weights, one table per head",
               "(recorded as self_attention.weights)")  # fmt: skip
        attended = inputs + theirs.self_attn(inputs, inputs, inputs,
                                             attn_mask=~mask)[0]  # fmt: skip
        expected = theirs.multihead_attn(
            theirs.norm1(attended), memory, memory,
            key_padding_mask=~_flat(padding), average_attn_weights=False,
        )[1]  # fmt: skip
        _close(cross, expected, "the cross-attention's weights, one table per head",
               "(recorded as cross_attention.weights)")  # fmt: skip


CHECKS: dict[str, tuple[Check, ...]] = {
    "EncoderLayer": (encoder_layer_post_norm_matches_torch,
                     encoder_layer_pre_norm_matches_torch,
                     encoder_layer_score_bias_matches_torch,
                     encoder_layer_records_weights,
                     encoder_layer_wrong_shape),
    "DecoderLayer": (decoder_layer_is_causal, decoder_layer_post_norm_matches_torch,
                     decoder_layer_pre_norm_matches_torch,
                     decoder_layer_score_biases_match_torch,
                     decoder_layer_records_weights,
                     decoder_layer_wrong_shape),
}  # fmt: skip
