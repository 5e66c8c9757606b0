r"""The pieces around attention: LayerNorm, the feed-forward network, the residual
sublayer.

Every sublayer $f$ of the Transformer (self-attention, cross-attention, feed-forward)
sits in a residual connection with a LayerNorm. The paper (and Chai, the NYU
notes and dataflowr) normalises *after* the sum, **post-norm**:

$$X' = \text{LayerNorm}(X + \text{Dropout}(f(X))).$$

The Annotated Transformer, GPT-2 and most models since normalise *before* the sublayer,
**pre-norm**, leaving an identity path from input to output:

$$X' = X + \text{Dropout}(f(\text{LayerNorm}(X))).$$

The two are not the same function. Post-norm is what the paper trained (with
learning-rate warm-up); pre-norm trains deep stacks more stably without warm-up (Xiong
et al. 2020, "On Layer Normalization in the Transformer Architecture") but its output
grows with depth, so pre-norm stacks add a final LayerNorm (PyTorch's
``nn.Transformer`` always has one). Post-norm is the default here; ``norm_first=True``
selects pre-norm, PyTorch's name.

Two variation points of the block are modern options: the normalisation (``norm``:
``"layer"``, or ``"rms"`` for :class:`RMSNorm`) and the feed-forward (``"plain"``, or
``"gated"`` for :class:`GatedFeedForward`, SwiGLU with SiLU). Llama, Qwen and Mistral
blocks are pre-norm with both. Either may be ``None``: no norm makes a sublayer
$X + \text{Dropout}(f(X))$, and no feed-forward leaves the block its attention alone
(the attention-only Transformer of Elhage et al. 2021).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from jaxtyping import Float
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.dropout import dropout
from named_transformer.core.feedforward import (
    ACTIVATIONS,
    Activation,
    feed_forward,
    gated_feed_forward,
)
from named_transformer.core.norm import layer_norm, rms_norm
from named_transformer.recording import tap

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "FeedForward",
    "FeedForwardKind",
    "GatedFeedForward",
    "LayerNorm",
    "NormKind",
    "RMSNorm",
    "Residual",
    "build_feed_forward",
    "build_norm",
]


# --8<-- [start:LayerNorm]
class LayerNorm(nn.Module):
    r"""$\nfun{layer}{standardize}(X) \odot \gamma + \beta$ with learned
    $\gamma, \beta$ (no $\beta$ with ``bias=False``).

    ``eps`` is the model's: $10^{-5}$ in PyTorch and GPT-2, $10^{-12}$ in BERT.
    """

    def __init__(self, layer: int, eps: float = 1e-5, *, bias: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(layer))
        self.beta = nn.Parameter(torch.zeros(layer)) if bias else None

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch layer"]
    ) -> Float[Tensor, "*batch layer"]:
        normalised = layer_norm(inputs, self.gamma, self.beta, self.eps)
        return tap("normalised", normalised, "*batch layer")


# --8<-- [end:LayerNorm]


# --8<-- [start:RMSNorm]
class RMSNorm(nn.Module):
    r"""$\dfrac{X}{\sqrt{\nfun{layer}{mean}(X^2) + \epsilon}} \odot g$ with a learned
    gain $g$ (named ``gamma``, as LayerNorm's) and no shift.

    ``eps`` is the model's: $10^{-6}$ in Llama 2, Qwen2 and Mistral, $10^{-5}$ in
    SmolLM2. ``torch.nn.RMSNorm`` and Llama's ``LlamaRMSNorm`` compute the same.
    """

    def __init__(self, layer: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(layer))

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch layer"]
    ) -> Float[Tensor, "*batch layer"]:
        return tap("normalised", rms_norm(inputs, self.gamma, self.eps), "*batch layer")


NormKind = Literal["layer", "rms", None]  # allow-raw: a Literal choice, not indexing


def build_norm(
    kind: NormKind, layer: int, eps: float = 1e-5, *, bias: bool = True
) -> LayerNorm | RMSNorm | None:
    r"""The normalisation ``kind`` names: ``"layer"`` (:class:`LayerNorm`, $\beta$
    unless ``bias=False``), ``"rms"`` (:class:`RMSNorm`, never a shift) or ``None``
    (none)."""
    if kind is None:
        return None
    if kind == "layer":
        return LayerNorm(layer, eps, bias=bias)
    if kind == "rms":
        return RMSNorm(layer, eps)
    raise ValueError(f"norm must be 'layer', 'rms' or None, got {kind!r}")


# --8<-- [end:RMSNorm]


def _linear_init(fan_in: int, *shape: int) -> nn.Parameter:
    """A weight or bias of ``shape`` drawn as ``nn.Linear`` draws it:
    U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = fan_in**-0.5
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


class _Activated(nn.Module):
    """What both feed-forward networks share: a named activation, then dropout on
    the hidden units (after the gate's product in the gated one)."""

    def __init__(self, activation: Activation, dropout: float) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}"
            )
        self.activation, self.dropout = activation, dropout

    def _activate(self, hidden: Tensor) -> Tensor:
        hidden = ACTIVATIONS[self.activation](hidden)
        return dropout(hidden, self.dropout, self.training)


# --8<-- [start:FeedForward]
class FeedForward(_Activated):
    r"""$W^2 \ndot{hidden} \operatorname{relu}(W^1 \ndot{layer} X + b^1) + b^2$ at every
    position.

    ``activation`` names one of :data:`ACTIVATIONS` (the paper's is ``"relu"``).
    ``dropout`` drops hidden units after the activation, where PyTorch's
    ``TransformerEncoderLayer`` does. ``bias=False`` leaves out $b^1$ and $b^2$.
    """

    def __init__(
        self,
        layer: int,
        hidden: int,
        *,
        activation: Activation = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__(activation, dropout)
        self.w1 = _linear_init(layer, hidden, layer)
        # registered in the order w1, b1, w2, b2 that saved optimizer states expect
        self.b1 = _linear_init(layer, hidden)
        self.w2 = _linear_init(hidden, layer, hidden)
        self.b2 = _linear_init(hidden, layer)
        if not bias:
            self.b1 = self.b2 = None

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch layer"]
    ) -> Float[Tensor, "*batch layer"]:
        return feed_forward(inputs, self.w1, self.b1, self.w2, self.b2, self._activate)


# --8<-- [end:FeedForward]


# --8<-- [start:GatedFeedForward]
class GatedFeedForward(_Activated):
    r"""$\big(\operatorname{silu}(X \ndot{layer} W^{gate})
    \circ (X \ndot{layer} W^{up})\big) \ndot{hidden} W^{down}$ at every position
    (SwiGLU; Shazeer 2020).

    ``activation`` names one of :data:`ACTIVATIONS` (Llama's is ``"silu"``; ``"gelu"``
    gives GEGLU). ``dropout`` drops hidden units after the product. ``bias=True`` adds
    $b^{gate}, b^{up}, b^{down}$ (Llama's ``mlp_bias``); Llama, Qwen and Mistral have
    none, the default.
    """

    def __init__(
        self,
        layer: int,
        hidden: int,
        *,
        activation: Activation = "silu",
        dropout: float = 0.0,
        bias: bool = False,
    ) -> None:
        super().__init__(activation, dropout)
        self.w_gate = _linear_init(layer, hidden, layer)
        self.w_up = _linear_init(layer, hidden, layer)
        self.w_down = _linear_init(hidden, layer, hidden)
        self.b_gate = self.b_up = self.b_down = None
        if bias:
            self.b_gate = _linear_init(layer, hidden)
            self.b_up = _linear_init(layer, hidden)
            self.b_down = _linear_init(hidden, layer)

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch layer"]
    ) -> Float[Tensor, "*batch layer"]:
        return gated_feed_forward(
            inputs, self.w_gate, self.w_up, self.w_down,
            self.b_gate, self.b_up, self.b_down, self._activate,
        )  # fmt: skip


FeedForwardKind = Literal["plain", "gated", None]  # allow-raw: a Literal choice


def build_feed_forward(
    kind: FeedForwardKind,
    layer: int,
    hidden: int,
    *,
    activation: Activation = "relu",
    dropout: float = 0.0,
    bias: bool = True,
) -> FeedForward | GatedFeedForward | None:
    """The feed-forward ``kind`` names: ``"plain"`` (:class:`FeedForward`),
    ``"gated"`` (:class:`GatedFeedForward`) or ``None`` (none: attention only)."""
    if kind is None:
        return None
    if kind == "plain":
        cls = FeedForward
    elif kind == "gated":
        cls = GatedFeedForward
    else:
        raise ValueError(
            f"feed_forward must be 'plain', 'gated' or None, got {kind!r}"
        )
    return cls(layer, hidden, activation=activation, dropout=dropout, bias=bias)


# --8<-- [end:GatedFeedForward]


# --8<-- [start:Residual]
class Residual(nn.Module):
    r"""A residual sublayer connection with its LayerNorm, post-norm or pre-norm.

    Post-norm (default, the paper): $\text{LayerNorm}(X + \text{Dropout}(f(X)))$.
    Pre-norm (``norm_first=True``): $X + \text{Dropout}(f(\text{LayerNorm}(X)))$.
    ``bias=False`` leaves out the LayerNorm's $\beta$; ``norm="rms"`` normalises with
    :class:`RMSNorm` instead (Llama's blocks: pre-norm with RMSNorm); ``norm=None``
    with neither: $X + \text{Dropout}(f(X))$ (attention-only blocks).
    """

    def __init__(
        self,
        layer: int,
        *,
        dropout: float = 0.0,
        norm_first: bool = False,
        eps: float = 1e-5,
        bias: bool = True,
        norm: NormKind = "layer",
    ) -> None:
        super().__init__()
        self.norm = build_norm(norm, layer, eps, bias=bias)
        self.dropout, self.norm_first = dropout, norm_first

    @classmethod
    def of(cls, config: Any) -> Residual:
        """The residual sublayer of a layer built from ``config`` (a
        :class:`~named_transformer.models.config.TransformerConfig`)."""
        return cls(
            config.layer, dropout=config.dropout, norm_first=config.norm_first,
            eps=config.eps, bias=config.bias, norm=config.norm,
        )  # fmt: skip

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq layer"],
        sublayer: Callable[[Tensor], Tensor],
    ) -> Float[Tensor, "*batch seq layer"]:
        stream = "*batch seq layer"  # the residual stream, tapped on both sides
        inputs = tap("inputs", inputs, stream)
        if self.norm is None or self.norm_first:  # no norm: X + f(X) either way
            outputs = tap("sublayer", sublayer(self._normalise(inputs)), stream)
            return tap("outputs", inputs + self._drop(outputs), stream)
        outputs = tap("sublayer", sublayer(inputs), stream)
        return tap("outputs", self.norm(inputs + self._drop(outputs)), stream)

    def _normalise(self, inputs: Tensor) -> Tensor:
        return inputs if self.norm is None else self.norm(inputs)

    def _drop(self, outputs: Tensor) -> Tensor:
        return dropout(outputs, self.dropout, self.training)


# --8<-- [end:Residual]
