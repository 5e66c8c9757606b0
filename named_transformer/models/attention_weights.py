r"""The weights of one multi-head attention, as one named container.

$$\begin{aligned}
  W^Q &\in \mathbb R^{\mathsf{heads} \times \mathsf{layer} \times \mathsf{key}}, &
  W^K &\in \mathbb R^{\mathsf{kv\_heads} \times \mathsf{memory} \times \mathsf{key}},
  \\
  W^V &\in \mathbb R^{\mathsf{kv\_heads} \times \mathsf{memory_v} \times \mathsf{val}},
  &
  W^O &\in \mathbb R^{\mathsf{heads} \times \mathsf{val} \times \mathsf{layer}}
  \end{aligned}$$

and the optional biases $b^Q, b^K, b^V, b^O$. They travel together: the functional
pipeline (:func:`~named_transformer.models.multihead.multihead`) takes them as one
argument, and a module hands its parameters over with
:meth:`~named_transformer.models.multihead.MultiHeadAttention.named_weights`. Each
field carries its axes; the functions they are passed to check them against the
inputs. $\mathsf{kv\_heads} = \mathsf{heads}$ is multi-head attention, fewer is
grouped-query attention; $\mathsf{memory} = \mathsf{layer}$ is self-attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked

__all__ = ["AttentionWeights"]


# --8<-- [start:AttentionWeights]
class AttentionWeights(NamedTuple):
    r"""$W^Q, W^K, W^V, W^O$ and their biases (None: no bias)."""

    w_q: Float[Tensor, "heads layer key"]
    w_k: Float[Tensor, "kv_heads memory key"]
    w_v: Float[Tensor, "kv_heads value_memory val"]
    w_o: Float[Tensor, "heads val layer"]
    b_q: Float[Tensor, "heads key"] | None = None
    b_k: Float[Tensor, "kv_heads key"] | None = None
    b_v: Float[Tensor, "kv_heads val"] | None = None
    b_o: Float[Tensor, " layer"] | None = None

    @classmethod
    def of(cls, named: Mapping[str, Any] | Any) -> AttentionWeights:
        """The weights among ``named`` (an object's attributes or a mapping), by
        field name."""
        if isinstance(named, Mapping):
            return cls(*(named.get(field) for field in cls._fields))
        return cls(*(getattr(named, field) for field in cls._fields))

    @property
    def stackable(self) -> bool:
        r"""Whether one stacked $W_{qkv}$ can replace the three projections of
        self-attention: $|\mathsf{val}| = |\mathsf{key}|$, all read from
        $\mathsf{layer}$ (any number of key/value heads), and all biases or none."""
        biases = (self.b_q, self.b_k, self.b_v)
        keys_like_values = self.w_k.shape == self.w_v.shape
        queries_like_keys = self.w_q.shape[1:] == self.w_k.shape[1:]  # any heads
        return keys_like_values and queries_like_keys and (
            all(b is None for b in biases) or all(b is not None for b in biases)
        )

    def check(
        self, inputs: Tensor, memory: Tensor, values_from: Tensor | None = None
    ) -> None:
        """Bind every weight's axes to the inputs' in one shape check, so that a
        wrong size names the field (``w_q``, ``b_v``, …) where it entered."""
        _bind_axes(inputs, memory, values_from, *self)


@checked
def _bind_axes(  # every field by name: the one place they meet the inputs
    inputs: Float[Tensor, "*batch seq_q layer"],
    memory: Float[Tensor, "*batch seq memory"],
    values_from: Float[Tensor, "*batch seq value_memory"] | None,
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "kv_heads memory key"],
    w_v: Float[Tensor, "kv_heads value_memory val"],
    w_o: Float[Tensor, "heads val layer"],
    b_q: Float[Tensor, "heads key"] | None,
    b_k: Float[Tensor, "kv_heads key"] | None,
    b_v: Float[Tensor, "kv_heads val"] | None,
    b_o: Float[Tensor, " layer"] | None,
) -> None:
    del inputs, memory, values_from, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o


# --8<-- [end:AttentionWeights]
