r"""The encoder: N identical layers of self-attention and feed-forward (paper A.1).

Each layer is two residual sublayers (post-norm shown; see
:mod:`named_transformer.models.sublayers`):

$$T = \text{LayerNorm}(\text{SelfAtt}(X) + X), \qquad
  X' = \text{LayerNorm}(\text{FFN}(T) + T).$$

Self-attention lets every position attend every (unmasked) position of the same
sequence: queries, keys and values all come from $X$. The stack may end with a final
LayerNorm, as PyTorch's ``nn.Transformer`` does (needed with pre-norm).

With a causal mask the same layer is the block of a decoder-only language model (GPT): a
"decoder layer" without cross-attention.
"""

from __future__ import annotations

from typing import Any

from jaxtyping import Bool, Float
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.models.config import TransformerConfig
from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.parameters import CountsParameters
from named_transformer.models.sublayers import (
    LayerNorm,
    Residual,
    RMSNorm,
    build_feed_forward,
    build_norm,
)

__all__ = ["Encoder", "EncoderLayer"]


def _biased(**biases: Tensor | None) -> dict[str, Tensor]:
    """The score biases that were given, as keyword arguments.

    Only those: an attention module that takes no bias (relative positions) still
    serves a layer called without one.
    """
    return {name: bias for name, bias in biases.items() if bias is not None}


def layer_config(
    layer: int | TransformerConfig, heads: int, hidden: int, options: dict[str, Any]
) -> TransformerConfig:
    """The configuration of one layer: ``layer`` itself when it is one, else built
    from the sizes and the options named as the configuration's fields (so an
    unknown option is refused, and every option is validated, in one line)."""
    if isinstance(layer, TransformerConfig):
        if options:
            raise TypeError(
                f"a layer built from a TransformerConfig takes no other options, got "
                f"{', '.join(sorted(options))}: put them in the configuration"
            )
        return layer
    return TransformerConfig(layer=layer, heads=heads, hidden=hidden, **options)


# --8<-- [start:EncoderLayer]
class EncoderLayer(CountsParameters, nn.Module):
    r"""Self-attention then feed-forward, each in a residual sublayer.

    Built from a :class:`~named_transformer.models.config.TransformerConfig`
    (``EncoderLayer(config)``), or from the sizes and the configuration's options by
    name (``EncoderLayer(512, 8, 2048, dropout=0.1, ...)``; defaults are the paper's
    base layer: 512 wide, 8 heads, hidden 2048, dropout 0.1, ReLU, post-norm).
    ``bias=False`` builds it with no additive parameters: no attention or
    feed-forward biases, no LayerNorm $\beta$ (PyTorch's ``bias=False``).
    ``kv_heads`` makes the self-attention grouped-query (multi-query when 1).
    ``attention_block`` makes it blockwise (``MultiHeadAttention``'s ``block``).
    ``norm="rms"`` and ``feed_forward="gated"`` make it Llama's block (with
    ``norm_first=True``, ``bias=False``); ``qkv_bias`` keeps $b^Q, b^K, b^V$ alone
    (Qwen2). ``positions`` is the self-attention's position scheme; ``causal`` says
    whether the layer attends causally (a decoder-only model's block: ALiBi's
    one-sided form) or both ways. ``feed_forward=None`` builds the self-attention
    sublayer alone (with ``norm=None``, an attention-only block:
    $X + \text{SelfAtt}(X)$).
    """

    def __init__(
        self,
        layer: int | TransformerConfig = 512,
        heads: int = 8,
        hidden: int = 2048,
        *,
        causal: bool = False,
        **options: Any,
    ) -> None:
        super().__init__()
        c = layer_config(layer, heads, hidden, options)
        self.self_attention = MultiHeadAttention.of(c, causal=causal)
        self.feed_forward = build_feed_forward(
            c.feed_forward, c.layer, c.hidden, activation=c.activation,
            dropout=c.dropout, bias=c.bias,
        )  # fmt: skip
        self.attention_residual = Residual.of(c)
        self.feed_forward_residual = None if self.feed_forward is None else (
            Residual.of(c)
        )

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq layer"],
        mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
        *,
        score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    ) -> Float[Tensor, "*batch seq layer"]:
        """``mask``: True where query position (row) may attend key position
        (column). ``score_bias``: an additive bias on the attention scores."""

        def self_attend(x: Tensor) -> Tensor:
            return self.self_attention(x, mask=mask, **_biased(score_bias=score_bias))

        outputs = self.attention_residual(inputs, self_attend)
        if self.feed_forward is not None:  # None: an attention-only block
            outputs = self.feed_forward_residual(outputs, self.feed_forward)
        return outputs


# --8<-- [end:EncoderLayer]


class _Stack(CountsParameters, nn.Module):
    """N layers of one kind, optionally followed by a final LayerNorm (shared by both
    stacks)."""

    layer_type: type[nn.Module]

    def __init__(
        self,
        layers: list[nn.Module] | nn.ModuleList,
        norm: LayerNorm | RMSNorm | None = None,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm

    @classmethod
    def of(
        cls,
        config: TransformerConfig,
        num_layers: int,
        **layer_options: Any,
    ) -> _Stack:
        """``num_layers`` fresh layers of ``config``, ending in its final norm if it
        has one (``layer_options``: an encoder layer's ``causal``, a decoder layer's
        ``memory``)."""
        if num_layers < 1:
            raise ValueError(
                f"{cls.__name__} needs at least one layer, got num_layers={num_layers}"
            )
        layers = [
            cls.layer_type(config, **layer_options) for _ in range(num_layers)
        ]
        final = None
        if config.has_final_norm:
            final = build_norm(config.norm, config.layer, config.eps, bias=config.bias)
        return cls(layers, final)

    @classmethod
    def build(
        cls,
        num_layers: int = 6,
        layer: int = 512,
        heads: int = 8,
        hidden: int = 2048,
        *,
        final_norm: bool = False,
        **options: Any,
    ) -> _Stack:
        """``num_layers`` fresh layers from the sizes and the configuration's options
        by name (:meth:`of` with that configuration; ``causal`` and ``memory`` go to
        the layers)."""
        extra = {k: options.pop(k) for k in ("causal", "memory") if k in options}
        config = TransformerConfig(
            layer=layer, heads=heads, hidden=hidden, final_norm=final_norm, **options
        )
        return cls.of(config, num_layers, **extra)


# --8<-- [start:Encoder]
class Encoder(_Stack):
    r"""A stack of encoder layers, optionally followed by a final LayerNorm."""

    layer_type = EncoderLayer

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq layer"],
        mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
        *,
        score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    ) -> Float[Tensor, "*batch seq layer"]:
        """``score_bias`` reaches every layer's attention. Each layer's weights are
        recorded (``layers.{}.self_attention.weights``), not returned."""
        hidden = inputs
        for encoder_layer in self.layers:
            hidden = encoder_layer(hidden, mask, **_biased(score_bias=score_bias))
        return hidden if self.norm is None else self.norm(hidden)


# --8<-- [end:Encoder]
