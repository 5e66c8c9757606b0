r"""The attention core: how $\nfun{seq}{softmax}(S + B + M) \ndot{seq} V$ is computed.

One variation point of the multi-head pipeline
(:mod:`~named_transformer.models.variants`), three ways to compute the same function:

- :data:`MATERIALISE`: the named equations of
  :func:`~named_transformer.core.attention.attention_weights` and
  :func:`~named_transformer.core.attention.attend`; it returns the weights $A$, and
  only it can add a value term $U(A)$ (relative positions).
- :class:`Blockwise`: ``block`` keys at a time with an online softmax
  (:func:`~named_transformer.core.blockwise.blockwise_attention`), never holding $A$.
- :data:`FUSED`: PyTorch's ``scaled_dot_product_attention``
  (:func:`~named_transformer.core.attention.fused_attention`).
- :data:`AUTOMATIC`: one of the first two, chosen for each call by its sizes and mask
  (:func:`~named_transformer.core.blockwise.automatic_block`): the modules' default.

Each takes queries, keys and values with the same axes, keys and values possibly of
size 1 where the queries are larger (the grouped heads' ``group`` axis), and a mask
and a bias that broadcast against the scores. ``dropout`` is the probability of
dropping a weight, 0 outside training.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from named_transformer.core.attention import attend, attention_weights, fused_attention
from named_transformer.core.blockwise import (
    AUTOMATIC_RULE,
    blockwise_attention,
    check_block,
)
from named_transformer.core.dropout import dropout as drop

__all__ = [
    "AUTOMATIC",
    "FUSED",
    "MATERIALISE",
    "Automatic",
    "Blockwise",
    "Core",
    "Fused",
    "Materialise",
]

ValueTerm = Callable[[Tensor], Tensor]


# --8<-- [start:Core]
class Core:
    """How the attention is computed; returns (outputs, weights or None)."""

    name = "core"
    returns_weights = False
    #: True when it can add a value term $U(A)$, which reads the weights
    takes_value_terms = False
    #: True when it takes keys and values with fewer heads than the queries as they
    #: are; else the pipeline splits the query heads into groups for it
    groups_heads = False

    def __call__(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None,
        bias: Tensor | None,
        dropout: float,
        value_term: ValueTerm | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError


# --8<-- [end:Core]


# --8<-- [start:Materialise]
class Materialise(Core):
    r"""$A = \nfun{seq}{softmax}(S + B + M)$, then $\text{Dropout}(A) \ndot{seq} V$
    (+ $U(\text{Dropout}(A))$): the equations as the pages write them."""

    name = "materialising"
    returns_weights = True
    takes_value_terms = True

    def weights(self, queries, keys, mask, bias) -> Tensor:
        """$A = \nfun{seq}{softmax}(S + B + M)$."""
        return attention_weights(queries, keys, mask, score_bias=bias)

    def __call__(self, queries, keys, values, mask, bias, dropout, value_term=None):
        weights = self.weights(queries, keys, mask, bias)
        dropped = drop(weights, dropout, dropout > 0.0)
        outputs = attend(dropped, values)
        if value_term is not None:
            outputs = outputs + value_term(dropped)
        return outputs, weights


MATERIALISE = Materialise()
# --8<-- [end:Materialise]


# --8<-- [start:Blockwise]
@dataclass(frozen=True)
class Blockwise(Core):
    """``block`` queries and keys at a time, with an online softmax (None: the
    block size :func:`~named_transformer.core.blockwise.block_size` gives each
    call)."""

    block: int | None = None
    name = "blockwise"

    def __post_init__(self) -> None:
        check_block(self.block)

    def __call__(self, queries, keys, values, mask, bias, dropout, value_term=None):
        outputs = blockwise_attention(
            queries, keys, values, mask, self.block,
            score_bias=bias, dropout=dropout, training=dropout > 0.0,
        )  # fmt: skip
        return outputs, None


# --8<-- [end:Blockwise]


# --8<-- [start:Fused]
class Fused(Core):
    """PyTorch's fused ``scaled_dot_product_attention``; grouped heads go to the
    kernel as they are (``enable_gqa``)."""

    name = "fused"
    groups_heads = True

    def __call__(self, queries, keys, values, mask, bias, dropout, value_term=None):
        outputs = fused_attention(
            queries, keys, values, mask, dropout, dropout > 0.0, score_bias=bias
        )
        return outputs, None


FUSED = Fused()
# --8<-- [end:Fused]


# --8<-- [start:Automatic]
class Automatic(Core):
    """The core chosen for each call by its sizes and its mask: materialising for
    short sequences, :class:`Blockwise` for long ones
    (:data:`~named_transformer.core.blockwise.AUTOMATIC_RULE`, the one rule, which
    ``nt.attention`` asks too).
    With a value term, or under dropout, it materialises."""

    name = "automatic"
    takes_value_terms = True  # it materialises for one

    def choose(
        self,
        queries: Tensor,
        keys: Tensor,
        dropout: float,
        value_term: bool,
        mask: Tensor | None = None,
    ) -> Core:
        """The core this call runs on."""
        block = AUTOMATIC_RULE.block(
            queries, keys, mask, dropout=dropout, value_term=value_term
        )
        return MATERIALISE if block is None else Blockwise(block)

    def __call__(self, queries, keys, values, mask, bias, dropout, value_term=None):
        core = self.choose(queries, keys, dropout, value_term is not None, mask)
        return core(queries, keys, values, mask, bias, dropout, value_term)


AUTOMATIC = Automatic()
# --8<-- [end:Automatic]
