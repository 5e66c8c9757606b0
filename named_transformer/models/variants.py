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

A **position scheme** is one small :class:`Positions` part that fills in the steps it
needs and leaves the others as they are: rotary positions transform the queries and
keys (:class:`~named_transformer.models.rotary.Rotary`), ALiBi adds a per-head score
term $T$ (:class:`~named_transformer.models.alibi.ALiBi`), Shaw et al.'s relative
positions add a score term and a value term
(:class:`~named_transformer.models.relative.Relative`). The **core** computes the
attention itself: materialising the weights, blockwise with an online softmax, or by
PyTorch's fused kernel, or chosen for each call by its sizes
(:mod:`~named_transformer.models.cores`). A scheme whose value term needs the
weights $A$ runs only on a core that materialises them (the materialising core, or
the automatic one, which then materialises); every other pair works, and the one
that does not is refused in one line (:func:`check_variant`).

A new scheme is one :class:`Positions` subclass and one line that registers the
attention module carrying it under a name (:func:`register_positions`): the model
kinds build it from that name (``--positions``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from torch import Tensor

from named_transformer.models.cores import MATERIALISE, Core

__all__ = [
    "NO_POSITIONS",
    "PLAIN",
    "POSITION_SCHEMES",
    "AttentionVariant",
    "Positions",
    "SchemeRequest",
    "check_variant",
    "register_positions",
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


# --8<-- [start:register_positions]
class SchemeRequest(NamedTuple):
    """What a model kind knows when it builds one self-attention of a scheme."""

    layer: int
    heads: int
    #: :class:`~named_transformer.models.multihead.MultiHeadAttention`'s keyword
    #: options (dropout, fused, kv_heads, block)
    options: dict[str, Any]
    causal: bool  # a decoder's self-attention; False: an encoder's, both ways
    max_distance: int | None = None  # relative positions' clipping distance k
    rotary_base: float = 10000.0  # rotary positions' base theta


#: name -> builds the self-attention module of that scheme from a
#: :class:`SchemeRequest` (the model kinds' ``positions``)
POSITION_SCHEMES: dict[str, Callable[[SchemeRequest], Any]] = {}


def register_positions(name: str, build: Callable[[SchemeRequest], Any]) -> None:
    """Make ``--positions NAME`` build its self-attention modules with ``build``."""
    POSITION_SCHEMES[name] = build


# --8<-- [end:register_positions]
