r"""The Transformer's hyperparameters, with the paper's base model as the named
default.

Vaswani et al. (2017), Table 3, "base": $N = 6$ encoder and 6 decoder layers,
$d_{\text{model}} = |\mathsf{layer}| = 512$, $h = |\mathsf{heads}| = 8$,
$d_{ff} = |\mathsf{hidden}| = 2048$, $P_{drop} = 0.1$, so
$|\mathsf{key}| = |\mathsf{val}| = 64$. "big": 1024 wide, 16 heads, hidden 4096,
dropout 0.3.

The modern block (Llama, Qwen2, Mistral) is the same configuration with other choices:
``norm="rms"``, ``feed_forward="gated"`` with ``activation="silu"``, ``bias=False``,
``norm_first=True``, ``kv_heads`` and rotary positions
(:meth:`TransformerConfig.llama`). The attention-only block of Elhage et al. (2021)
is ``feed_forward=None`` and ``norm=None`` (:meth:`TransformerConfig.attention_only`).

The configuration is the one way a model is built: every model, the model kinds of
the command line, and the Hugging Face and GGUF importers make their layers from it,
so an option reaches every module it names (or is refused in one line).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

# the schemes register their kinds on import: every kind is known wherever a
# configuration is
import named_transformer.models.alibi  # noqa: F401
import named_transformer.models.relative  # noqa: F401
import named_transformer.models.rotary  # noqa: F401
from named_transformer.core.attention import check_groups
from named_transformer.models.embedding import Sinusoidal
from named_transformer.models.sublayers import (
    ACTIVATIONS,
    Activation,
    FeedForwardKind,
    NormKind,
)
from named_transformer.models.variants import PositionScheme, position_scheme

__all__ = ["TransformerConfig"]


# --8<-- [start:TransformerConfig]
@dataclass(frozen=True)
class TransformerConfig:
    """Sizes and choices of a Transformer; validated on construction (ValueError)."""

    encoder_layers: int = 6
    decoder_layers: int = 6
    layer: int = 512
    heads: int = 8
    hidden: int = 2048
    dropout: float = 0.1
    activation: Activation = "relu"
    norm_first: bool = False  # post-norm, as the paper; True = pre-norm
    # a LayerNorm after each stack; None = same as norm_first
    final_norm: bool | None = None
    eps: float = 1e-5
    # True: PyTorch's fused kernel wherever no weights are recorded
    fused_attention: bool = False
    # blockwise attention (online softmax), this many positions a block, wherever no
    # weights are recorded; None = the materialising named path
    attention_block: int | None = None
    # key/value heads of every self-attention (grouped-query attention; 1 =
    # multi-query); None = heads
    kv_heads: int | None = None
    # causal self-attention sees only the last `window` positions, itself included
    # (sliding_window_mask; decoder-only blocks and the decoder); None = all
    window: int | None = None
    # the positions: added to the embeddings (Sinusoidal(), the paper; Learned(n))
    # or a part of every self-attention (Rotary(base), ALiBi(), Relative(k)); a kind's
    # name ("rotary") stands for its scheme with the default parameters
    positions: PositionScheme = Sinusoidal()
    # every normalisation: "layer" (LayerNorm, the paper), "rms" (RMSNorm, Llama) or
    # None (none: attention-only blocks)
    norm: NormKind = "layer"
    # "plain" (W^2 . act(W^1 . X)), "gated" (SwiGLU with activation="silu", Llama)
    # or None (none: attention-only blocks; `hidden` is then unused)
    feed_forward: FeedForwardKind = "plain"
    # every additive parameter (attention and feed-forward biases, LayerNorm's beta);
    # False: none (Llama, Mistral)
    bias: bool = True
    # the query, key and value projections' biases alone; None = same as bias
    # (Qwen2: bias=False, qkv_bias=True)
    qkv_bias: bool | None = None

    @classmethod
    def base(cls) -> TransformerConfig:
        """The paper's base model (the defaults)."""
        return cls()

    @classmethod
    def big(cls) -> TransformerConfig:
        """The paper's big model."""
        return cls(layer=1024, heads=16, hidden=4096, dropout=0.3)

    # --8<-- [end:TransformerConfig]

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", position_scheme(self.positions))
        for name in ("encoder_layers", "decoder_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("layer", "heads", "hidden"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.layer % self.heads != 0:
            raise ValueError(
                f"layer={self.layer} is not divisible by heads={self.heads} "
                "(each head is layer/heads wide)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, "
                f"got {self.activation!r}"
            )
        if self.eps <= 0:
            raise ValueError(f"eps must be positive, got {self.eps}")
        if self.attention_block is not None and self.attention_block < 1:
            raise ValueError(
                f"attention_block must be positive, got {self.attention_block}"
            )
        if self.kv_heads is not None:
            check_groups(self.heads, self.kv_heads)
        if self.norm not in ("layer", "rms", None):
            raise ValueError(
                f"norm must be 'layer', 'rms' or None, got {self.norm!r}"
            )
        if self.feed_forward not in ("plain", "gated", None):
            raise ValueError(
                "feed_forward must be 'plain', 'gated' or None, got "
                f"{self.feed_forward!r}"
            )
        self._refuse_options_of_absent_parts()
        if self.window is not None and self.window < 1:
            raise ValueError(
                f"window must be at least 1 (the query itself), got {self.window}"
            )

    def _refuse_options_of_absent_parts(self) -> None:
        """An option of the norm or of the feed-forward moved off its default where
        there is none is refused: it would reach no module."""
        default = type(self)  # a dataclass keeps the fields' defaults on the class
        if self.feed_forward is None and self.activation != default.activation:
            raise ValueError(
                f"activation={self.activation!r} is the feed-forward's, and "
                "feed_forward=None builds none"
            )
        if self.norm is None:
            for name, moved in (("norm_first", self.norm_first),
                                ("final_norm", self.final_norm),
                                ("eps", self.eps != default.eps)):  # fmt: skip
                if moved:
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} is an option of the "
                        "LayerNorm or RMSNorm, and norm=None builds none"
                    )

    @classmethod
    def llama(cls, **sizes) -> TransformerConfig:
        r"""The Llama block's choices (pre-norm with RMSNorm and a final one, SwiGLU,
        no biases, no dropout, RMSNorm's $\epsilon = 10^{-6}$); ``sizes`` (layer,
        heads, kv_heads, hidden, decoder_layers, positions, window, ...) override
        any of them. The positions are rotary (``positions=Rotary(500000.0)`` for
        Llama 3's base); build the model with
        ``LanguageModel(vocab, config, scale_embeddings=False)``.
        """
        choices = dict(
            norm_first=True, final_norm=True, norm="rms", feed_forward="gated",
            activation="silu", bias=False, dropout=0.0, eps=1e-6, encoder_layers=1,
            positions="rotary",
        )  # fmt: skip
        return cls(**{**choices, **sizes})

    # --8<-- [start:attention_only]
    @classmethod
    def attention_only(cls, **sizes) -> TransformerConfig:
        r"""The attention-only block (Elhage et al. 2021): no feed-forward, no norms,
        no biases, no dropout, so that a block is
        $X^l = X^{l-1} + \text{MultiHead}^l(X^{l-1}, M)$; ``sizes`` (decoder_layers,
        layer, heads, positions, ...) override any of them. Build the model with
        ``LanguageModel(vocab, config)``: the paper's sinusoidal positions, the
        scaled embedding and the generator tied to it, without a bias.
        """
        choices = dict(feed_forward=None, norm=None, bias=False, dropout=0.0)
        return cls(**{**choices, **sizes})

    # --8<-- [end:attention_only]

    @property
    def key(self) -> int:
        """Width of one head, |layer| / |heads|."""
        return self.layer // self.heads

    @property
    def has_final_norm(self) -> bool:
        return self.norm_first if self.final_norm is None else self.final_norm

    def attention_options(self, causal: bool) -> dict[str, Any]:
        """:class:`~named_transformer.models.multihead.MultiHeadAttention`'s options
        for one self-attention of a stack that attends causally or both ways."""
        return {
            "dropout": self.dropout, "fused": self.fused_attention,
            "block": self.attention_block, "kv_heads": self.kv_heads,
            "bias": self.bias, "qkv_bias": self.qkv_bias,
            "positions": self.positions.within(causal),
        }  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The JSON-friendly form a checkpoint stores (:meth:`from_dict` reads it)."""
        stored = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**stored, "positions": self.positions.to_dict()}

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> TransformerConfig:
        """The configuration :meth:`to_dict` wrote (a checkpoint's before 0.9 is
        read by :func:`~named_transformer.workflows.spec.config_of`)."""
        return cls(**stored)
