r"""The variation points of one multi-head attention: positions and the core.

Every multi-head attention of the library is one pipeline
(:func:`~named_transformer.models.multihead.multihead`):

| step | equation | variation point |
| --- | --- | --- |
| project | $Q, K, V = W^{Q,K,V} \ndot{layer} X$ | key/value heads (grouped) |
| positions | $Q, K \leftarrow R(Q), R(K)$ | transform $R$ |
| scores | $Q \ndot{key} K / \sqrt{\lvert\mathsf{key}\rvert} + T + B$ | score term $T$ |
| core | $\nfun{seq}{softmax}(\cdot + M) \ndot{seq} V$ | the core |
| values | $+\,U(A)$ | value term $U$ |
| merge | $W^O \ndot{heads, val} Y$ | |

A **position scheme** is what a model's configuration names
(:class:`PositionScheme`: a kind and its parameters, such as
``Rotary(base=500000.0)``); for every self-attention it makes one small
:class:`Positions` part that fills in the steps it needs and leaves the others as
they are. Rotary positions transform the queries and keys
(:class:`~named_transformer.models.rotary.Rotary`), ALiBi adds a per-head score term
$T$ (:class:`~named_transformer.models.alibi.ALiBi`), Shaw et al.'s relative
positions add a score term and a value term through tables of their own
(:class:`~named_transformer.models.relative.Relative`). The attention owns its part:
``MultiHeadAttention(layer, heads, positions=Rotary())``. The **core** computes the
attention itself: materialising the weights, blockwise with an online softmax, or by
PyTorch's fused kernel, or chosen for each call by its sizes
(:mod:`~named_transformer.models.cores`). A part whose value term needs the weights
$A$ runs only on a core that materialises them (the materialising core, or the
automatic one, which then materialises); every other pair works, and the one that
does not is refused in one line (:func:`check_variant`).

A new scheme is one :class:`PositionScheme` subclass (with its part) in one file,
registered under its kind (:func:`register_scheme`): the configuration, the model
kinds, the checkpoints and ``--positions`` then know it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, NamedTuple

from torch import Tensor, nn

from named_transformer.models.cores import MATERIALISE, Core

__all__ = [
    "NO_POSITIONS",
    "NO_SCHEME",
    "PLAIN",
    "SCHEMES",
    "AttentionVariant",
    "PositionScheme",
    "Positions",
    "check_variant",
    "position_scheme",
    "register_scheme",
]


# --8<-- [start:Positions]
class Positions:
    r"""A position scheme: what it does to the queries and keys, the scores and the
    values. This base class does nothing at each step: attention without positions
    (the embeddings carry them, or none are needed).

    ``offset`` is the first query's position counted from the first key (the cache
    length when decoding step by step); it may be a one-element tensor under
    ``torch.compile``.
    """

    name = "none"
    #: True when :meth:`value_term` adds to the values through the weights $A$: only
    #: a core that materialises $A$ can run it.
    uses_weights = False
    #: True when the offset may be a tensor (a compiled decoding step passes one)
    takes_tensor_offset = True

    def rotate(self, heads: Tensor, offset: int | Tensor) -> Tensor:
        r"""$R_{\text{offset}}(X)$: queries or keys, the first at ``offset``
        (``*batch heads seq key``)."""
        del offset
        return heads

    def score_term(
        self, queries: Tensor, seq: int, offset: int | Tensor
    ) -> Tensor | None:
        r"""$T$, added to the scaled scores: ``heads seq_q seq`` or
        ``*batch heads seq_q seq``; None adds nothing."""
        del queries, seq, offset
        return None

    def value_term(self, weights: Tensor, offset: int | Tensor) -> Tensor:
        r"""$U(A)$, added to $A \ndot{seq} V$ (``... seq_q val``), when
        :attr:`uses_weights`."""
        raise NotImplementedError(f"{self.name} positions add nothing to the values")


NO_POSITIONS = Positions()


# --8<-- [end:Positions]


# --8<-- [start:AttentionVariant]
class AttentionVariant(NamedTuple):
    """The parts one attention plugs into the pipeline: its positions and its core."""

    positions: Positions = NO_POSITIONS
    core: Core = MATERIALISE


#: no positions, materialising core: the attention of the 2017 paper
PLAIN = AttentionVariant()


def check_variant(variant: AttentionVariant) -> AttentionVariant:
    """``variant`` if the pipeline can run it, else a ``ValueError`` naming the pair
    and why."""
    if variant.positions.uses_weights and not variant.core.takes_value_terms:
        raise ValueError(
            f"{variant.positions.name} positions with the {variant.core.name} core: "
            f"{variant.positions.name} positions add to the values through the "
            f"attention weights, which the {variant.core.name} core never "
            "materialises; use the materialising core"
        )
    return variant


# --8<-- [end:AttentionVariant]


# --8<-- [start:PositionScheme]
@dataclass(frozen=True)
class PositionScheme:
    r"""A model's positions as its configuration holds them: a kind and its
    parameters (``positions`` of
    :class:`~named_transformer.models.config.TransformerConfig`).

    A scheme adds positions to the embeddings (:meth:`embedding`: sinusoidal,
    learned), or plugs one :class:`Positions` part into every self-attention
    (:meth:`part`: rotary, ALiBi, relative). This base scheme, ``"none"``, does
    neither: the model sees no positions at all.
    """

    kind: ClassVar[str] = "none"

    def embedding(self, layer: int, dropout: float) -> nn.Module | None:
        """The module that adds positions to the embeddings; None adds nothing."""
        del layer, dropout
        return None

    def part(self, attention: Any) -> Positions:
        """The part one self-attention plugs in, sized by ``attention`` (its
        ``heads``, ``key`` and ``val``); a fresh module where it has parameters."""
        del attention
        return NO_POSITIONS

    def within(self, causal: bool) -> PositionScheme:
        """The scheme for a stack that attends causally (a decoder) or both ways
        (an encoder); most schemes are the same in both."""
        del causal
        return self

    def to_dict(self) -> dict[str, Any]:
        """The JSON-friendly form a checkpoint stores: ``{"kind": ..., **params}``."""
        params = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"kind": self.kind, **params}


#: kind -> scheme class: the values ``positions`` may name (``--positions``)
SCHEMES: dict[str, type[PositionScheme]] = {}


def register_scheme(scheme: type[PositionScheme]) -> type[PositionScheme]:
    """Make ``positions=KIND`` (config, CLI, checkpoints) mean ``scheme``."""
    SCHEMES[scheme.kind] = scheme
    return scheme


register_scheme(PositionScheme)
#: no positions at all (an attention's default: the embeddings carry them)
NO_SCHEME = PositionScheme()


def position_scheme(
    value: PositionScheme | str | Mapping[str, Any], **params: Any
) -> PositionScheme:
    """The scheme ``value`` names: a scheme, or a kind (its defaults), with those of
    ``params`` that the scheme has and that are not None (the others are ignored);
    or a stored ``{"kind": ..., ...}``, all of whose parameters the scheme must
    have."""
    if isinstance(value, PositionScheme):
        names = {f.name for f in fields(value)}
        given = {k: v for k, v in params.items() if k in names and v is not None}
        return replace(value, **given) if given else value
    if isinstance(value, Mapping):
        params, value = dict(value), value.get("kind")
        params.pop("kind", None)
        stored = True
    else:
        stored = False
    if value not in SCHEMES:
        raise ValueError(f"positions must be one of {sorted(SCHEMES)}, got {value!r}")
    scheme = SCHEMES[value]
    names = {f.name for f in fields(scheme)}
    unknown = sorted(set(params) - names)
    if stored and unknown:
        raise ValueError(f"{value} positions take no {unknown[0]!r}")
    return scheme(**{k: v for k, v in params.items() if k in names and v is not None})


# --8<-- [end:PositionScheme]
