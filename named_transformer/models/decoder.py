r"""The decoder: masked self-attention, cross-attention over the memory, feed-forward.

Each decoder layer has three residual sublayers (post-norm shown):

$$\begin{aligned}
  T_1 &= \text{LayerNorm}(\text{SelfAtt}(Y, M_{\text{causal}}) + Y), \\
  T_2 &= \text{LayerNorm}(\text{CrossAtt}(T_1, H) + T_1), \\
  Y' &= \text{LayerNorm}(\text{FFN}(T_2) + T_2).
\end{aligned}$$

*Self*-attention takes queries, keys and values from the target sequence $Y$ itself,
under the causal mask (query position $j$ may attend key position $i$ iff $i \le j$), so
a prediction never sees later target tokens. *Cross*-attention takes its queries from
the decoder and its keys and values from the memory $H$, the encoder output: every
target position may look at every (non-padded) source position.
"""

from __future__ import annotations

from typing import Any

from jaxtyping import Bool, Float
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.models.config import TransformerConfig
from named_transformer.models.encoder import _biased, _Stack, layer_config
from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.parameters import CountsParameters
from named_transformer.models.sublayers import Residual, build_feed_forward
from named_transformer.models.variants import NO_SCHEME

__all__ = ["Decoder", "DecoderLayer"]


# --8<-- [start:DecoderLayer]
class DecoderLayer(CountsParameters, nn.Module):
    r"""Masked self-attention, cross-attention over the memory, feed-forward.

    Built from a :class:`~named_transformer.models.config.TransformerConfig` or from
    the sizes and the configuration's options by name, as
    :class:`~named_transformer.models.encoder.EncoderLayer`. ``memory`` is the width
    of the encoder output (default ``layer``). ``kv_heads`` and ``positions`` shape
    the self-attention (the one whose keys and values a decoder caches); the
    cross-attention keeps ``heads`` and no positions of its own (its queries and its
    keys, the encoder output, already carry theirs). Every other option
    (``attention_block``, ``fused_attention``, ``bias``, ``qkv_bias``, dropout)
    reaches both attentions.
    """

    def __init__(
        self,
        layer: int | TransformerConfig = 512,
        heads: int = 8,
        hidden: int = 2048,
        *,
        memory: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        c = layer_config(layer, heads, hidden, options)
        self.self_attention = MultiHeadAttention.of(c, causal=True)
        self.cross_attention = MultiHeadAttention.of(
            c, causal=True, memory=memory, kv_heads=None, positions=NO_SCHEME
        )
        self.feed_forward = build_feed_forward(
            c.feed_forward, c.layer, c.hidden, activation=c.activation,
            dropout=c.dropout, bias=c.bias,
        )  # fmt: skip
        self.self_attention_residual = Residual.of(c)
        self.cross_attention_residual = Residual.of(c)
        self.feed_forward_residual = None if self.feed_forward is None else (
            Residual.of(c)
        )

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq_q layer"],
        memory: Float[Tensor, "*batch seq memory"],
        mask: Bool[Tensor, "*#batch #seq_q #seq_q"] | None = None,
        memory_mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
        *,
        score_bias: Float[Tensor, "*#batch #seq_q #seq_q"] | None = None,
        memory_score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    ) -> Float[Tensor, "*batch seq_q layer"]:
        """``mask`` over target positions (pass a causal mask), ``memory_mask`` over
        source; ``score_bias`` and ``memory_score_bias``: additive biases on the
        self- and cross-attention scores. The weights are recorded
        (``self_attention.weights``, ``cross_attention.weights``), not returned.
        """

        def self_attend(x: Tensor) -> Tensor:
            return self.self_attention(x, mask=mask, **_biased(score_bias=score_bias))

        def cross_attend(x: Tensor) -> Tensor:
            return self.cross_attention(
                x, memory, memory_mask, **_biased(score_bias=memory_score_bias)
            )

        hidden = self.self_attention_residual(inputs, self_attend)
        outputs = self.cross_attention_residual(hidden, cross_attend)
        if self.feed_forward is not None:  # None: no feed-forward sublayer
            outputs = self.feed_forward_residual(outputs, self.feed_forward)
        return outputs


# --8<-- [end:DecoderLayer]


# --8<-- [start:Decoder]
class Decoder(_Stack):
    r"""A stack of decoder layers sharing one memory, optionally with a final
    LayerNorm."""

    layer_type = DecoderLayer

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq_q layer"],
        memory: Float[Tensor, "*batch seq memory"],
        mask: Bool[Tensor, "*#batch #seq_q #seq_q"] | None = None,
        memory_mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
        *,
        score_bias: Float[Tensor, "*#batch #seq_q #seq_q"] | None = None,
        memory_score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    ) -> Float[Tensor, "*batch seq_q layer"]:
        """The score biases reach every layer."""
        biases = _biased(score_bias=score_bias, memory_score_bias=memory_score_bias)
        hidden = inputs
        for decoder_layer in self.layers:
            hidden = decoder_layer(hidden, memory, mask, memory_mask, **biases)
        return hidden if self.norm is None else self.norm(hidden)


# --8<-- [end:Decoder]
