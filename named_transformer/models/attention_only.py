r"""The circuits of an attention-only Transformer: the blocks keep their
self-attention and lose their feed-forward and norms (Elhage et al. 2021, "A
Mathematical Framework for Transformer Circuits").

$$X^0 = (E \ndot{vocab} I)\sqrt{|\mathsf{layer}|} + P, \qquad
  X^{l} = X^{l-1} + \text{MultiHead}^{l}(X^{l-1}, M_{\text{causal}}), \qquad
  \log p = \nfun{vocab}{log\,softmax}(E \ndot{layer} X^L).$$

The model is a :class:`~named_transformer.models.language_model.LanguageModel` of
:meth:`TransformerConfig.attention_only
<named_transformer.models.config.TransformerConfig.attention_only>`
(``feed_forward=None``, ``norm=None``, no biases): the scaled token embedding (the
paper's $\sqrt{|\mathsf{layer}|}$: unscaled, the rows are $\sqrt{|\mathsf{layer}|}$
times smaller than the positions, and a plain PyTorch copy of this model formed no
induction head in 16,000 steps of the induction recipe), the fixed sinusoidal
positions, one :class:`~named_transformer.models.multihead.MultiHeadAttention` per
layer and a generator tied to the embedding.

With nothing between the heads but sums, every path from a token to a logit is a
product of weight matrices, which is what lets the paper read circuits off the
weights. Each head $h$ reads the stream through two circuits: its **QK circuit**
$W^{QK}_h = W^Q_{h,\mathsf{layer}\to\mathsf{layer_q}} \ndot{key} W^K_h$ decides where
it attends, its **OV circuit**
$W^{OV}_h = W^V_h \ndot{val} W^O_{h,\mathsf{layer}\to\mathsf{layer'}}$ what it writes
there. A head of layer 1 whose
keys read what a head of layer 0 wrote *composes* with it (K-composition,
:func:`composition_score`); one layer alone cannot, so an induction head needs two.
"""

from __future__ import annotations

from einops import reduce
from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.contraction import einsum

__all__ = ["composition_score", "ov_circuit", "qk_circuit"]


# --8<-- [start:composition_score]
@checked
def qk_circuit(
    w_q: Float[Tensor, "layer_q key"], w_k: Float[Tensor, "layer key"]
) -> Float[Tensor, "layer_q layer"]:
    r"""$W^{QK}_h = W^Q_{h,\mathsf{layer}\to\mathsf{layer_q}} \ndot{key} W^K_h$: a
    query that reads $x$ scores a key that reads $y$ by
    $x \ndot{layer_q} W^{QK}_h \ndot{layer} y / \sqrt{|\mathsf{key}|}$."""
    return einsum(w_q, w_k, "layer_q key, layer key -> layer_q layer")


@checked
def ov_circuit(
    w_v: Float[Tensor, "layer val"], w_o: Float[Tensor, "val layer_out"]
) -> Float[Tensor, "layer layer_out"]:
    r"""$W^{OV}_h = W^V_h \ndot{val} W^O_{h,\mathsf{layer}\to\mathsf{layer'}}$: what
    head $h$ writes to the stream ($\mathsf{layer'}$) for a source position that
    holds $y$ ($\mathsf{layer}$)."""
    return einsum(w_v, w_o, "layer val, val layer_out -> layer layer_out")


@checked
def composition_score(
    qk: Float[Tensor, "layer_q layer_out"], ov: Float[Tensor, "layer layer_out"]
) -> Float[Tensor, ""]:
    r"""K-composition of a head of a later layer (QK circuit ``qk``) with a head of an
    earlier one (OV circuit ``ov``): how much of what the earlier head writes the
    later head's keys read (Elhage et al. 2021),

    $$\text{K-comp}(h_1, h_0) = \frac{\lVert W^{QK}_{h_1,\mathsf{layer}\to
      \mathsf{layer'}} \ndot{layer'}
      W^{OV}_{h_0} \rVert_F}{\lVert W^{QK}_{h_1} \rVert_F\,
      \lVert W^{OV}_{h_0} \rVert_F}.$$

    The key side of $W^{QK}_{h_1}$ is contracted with the output side of
    $W^{OV}_{h_0}$ ($\mathsf{layer'}$, the stream where one writes and the other
    reads). Between 0 and 1: 1 when everything the earlier head writes lies where the
    later head's keys look, about $1/\sqrt{|\mathsf{layer}|}$ for unrelated random
    matrices.
    """
    product = einsum(qk, ov, "layer_q layer_out, layer layer_out -> layer_q layer")
    return _frobenius(product) / (_frobenius(qk) * _frobenius(ov))


def _frobenius(matrix: Tensor) -> Tensor:
    r"""$\lVert W \rVert_F = \sqrt{\sum W^2}$, over both axes."""
    return reduce(matrix * matrix, "rows columns -> ", "sum").sqrt()


# --8<-- [end:composition_score]
