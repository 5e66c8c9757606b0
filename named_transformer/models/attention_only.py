r"""An attention-only Transformer: the blocks keep their self-attention and lose their
feed-forward and norms (Elhage et al. 2021, "A Mathematical Framework for Transformer
Circuits").

$$X^0 = (E \ndot{vocab} I)\sqrt{|\mathsf{layer}|} + P, \qquad
  X^{l} = X^{l-1} + \text{MultiHead}^{l}(X^{l-1}, M_{\text{causal}}), \qquad
  \log p = \nfun{vocab}{log\,softmax}(E \ndot{layer} X^L).$$

With nothing between the heads but sums, every path from a token to a logit is a
product of weight matrices, which is what lets the paper read circuits off the
weights. Each head $h$ reads the stream through two circuits: its **QK circuit**
$W^{QK}_h = W^Q_{h,\mathsf{layer}\to\mathsf{layer_q}} \ndot{key} W^K_h$ decides where
it attends, its **OV circuit**
$W^{OV}_h = W^V_h \ndot{val} W^O_{h,\mathsf{layer}\to\mathsf{layer'}}$ what it writes
there. A head of layer 1 whose
keys read what a head of layer 0 wrote *composes* with it (K-composition,
:func:`composition_score`); one layer alone cannot, so an induction head needs two.

The parts are the library's: :class:`~named_transformer.models.embedding.TokenEmbedding`
(scaled by $\sqrt{|\mathsf{layer}|}$ as in the paper: unscaled, the rows are
$\sqrt{|\mathsf{layer}|}$ times smaller than the positions, and a plain PyTorch copy
of this model formed no induction head in 16,000 steps of the induction recipe), the
fixed sinusoidal positions, one
:class:`~named_transformer.models.multihead.MultiHeadAttention` per layer (no biases)
and a generator tied to the embedding. The modules sit at the paths of a
:class:`~named_transformer.models.language_model.LanguageModel`
(``blocks.layers.{l}.self_attention``), so the analyses of
:mod:`~named_transformer.inside` read them unchanged.
"""

from __future__ import annotations

from einops import reduce
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.core.masks import causal_mask
from named_transformer.models.embedding import SinusoidalPositions, TokenEmbedding
from named_transformer.models.generator import Generator
from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.parameters import CountsParameters
from named_transformer.recording import tap

__all__ = [
    "AttentionOnlyLayer",
    "AttentionOnlyModel",
    "composition_score",
    "ov_circuit",
    "qk_circuit",
]


# --8<-- [start:AttentionOnlyModel]
class AttentionOnlyLayer(nn.Module):
    r"""$X + \text{MultiHead}(X, M)$: a residual self-attention, nothing else."""

    def __init__(self, layer: int, heads: int) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(layer, heads, bias=False)

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq layer"],
        mask: Bool[Tensor, "#seq_q #seq"],
        need_weights: bool = False,
    ) -> (
        Float[Tensor, "*batch seq layer"]
        | tuple[
            Float[Tensor, "*batch seq layer"], Float[Tensor, "*batch heads seq seq"]
        ]
    ):
        stream = "*batch seq layer"  # the residual stream, tapped on both sides
        inputs = tap("inputs", inputs, stream)
        attended, weights = self.self_attention(inputs, mask=mask, need_weights=True)
        outputs = tap("outputs", inputs + attended, stream)
        return (outputs, weights) if need_weights else outputs


class _Blocks(nn.Module):
    """The layers, at ``blocks.layers`` as in a ``LanguageModel``."""

    def __init__(self, layers: int, layer: int, heads: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            AttentionOnlyLayer(layer, heads) for _ in range(layers)
        )
        self.norm = None  # no final norm: the logit lens reads the stream as it is


class AttentionOnlyModel(CountsParameters, nn.Module):
    r"""A causal language model of ``layers`` attention-only layers, ``heads`` heads
    each, ``layer`` wide, over ``vocab`` tokens; the output tied to the embedding."""

    def __init__(self, vocab: int, layers: int = 2, layer: int = 32,
                 heads: int = 2) -> None:  # fmt: skip
        super().__init__()
        if layers < 1:
            raise ValueError(f"layers must be >= 1, got {layers}")
        self.embedding = TokenEmbedding(vocab, layer)
        self.positions = SinusoidalPositions(layer, dropout=0.0)
        self.blocks = _Blocks(layers, layer, heads)
        self.generator = Generator(layer, vocab, table=self.embedding.table, bias=False)

    @checked
    def forward(
        self, tokens: Int[Tensor, "*batch seq"], need_weights: bool = False
    ) -> (
        Float[Tensor, "*batch seq vocab"]
        | tuple[
            Float[Tensor, "*batch seq vocab"],
            list[Float[Tensor, "*batch heads seq seq"]],
        ]
    ):
        """Log-probabilities of the next token at every position (and each layer's
        weights)."""
        mask = causal_mask(tokens.shape[-1], device=tokens.device)
        stream = self.positions(self.embedding(tokens))
        weights = []
        for block in self.blocks.layers:
            stream, layer_weights = block(stream, mask, need_weights=True)
            weights.append(layer_weights)
        log_probs = self.generator(stream)
        return (log_probs, weights) if need_weights else log_probs


# --8<-- [end:AttentionOnlyModel]


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
