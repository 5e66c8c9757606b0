"""The exercises whose library function no longer carries its own signature.

Since the one multi-head pipeline (``models.multihead.multihead``, weights in an
``AttentionWeights``), the library has no functional multi-head attention that takes
every weight as an argument. The exercise keeps that 0.4.0 form: its annotated
signature and docstring are here, the skeleton's source, and its body runs the
pipeline.
"""

from __future__ import annotations

from jaxtyping import Bool, Float
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.models.attention_weights import AttentionWeights
from named_transformer.models.cores import FUSED, MATERIALISE, Blockwise
from named_transformer.models.multihead import attend_projected, project_qkv
from named_transformer.models.variants import AttentionVariant

__all__ = ["multihead_attention"]


@checked
def multihead_attention(
    inputs: Float[Tensor, "*batch seq_q layer"],
    memory: Float[Tensor, "*batch seq memory"],
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "heads memory key"],
    w_v: Float[Tensor, "heads value_memory val"],
    w_o: Float[Tensor, "heads val layer"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    b_q: Float[Tensor, "heads key"] | None = None,
    b_k: Float[Tensor, "heads key"] | None = None,
    b_v: Float[Tensor, "heads val"] | None = None,
    b_o: Float[Tensor, " layer"] | None = None,
    dropout: float = 0.0,
    training: bool = False,
    fused: bool = False,
    *,
    values_from: Float[Tensor, "*batch seq value_memory"] | None = None,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    block: int | None = None,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"] | None
]:
    r"""Multi-head attention of ``inputs`` over ``memory``, the weights passed in.

    $$W^O \ndot{heads, val} \text{Attention}(
      W^Q \ndot{layer} X_{\mathsf{seq}\to\mathsf{seq'}},
      W^K \ndot{memory} X_m, W^V \ndot{memory_v} X_v, M, B).$$

    Self-attention passes the inputs as the memory ($\mathsf{memory} = \mathsf{layer}$);
    cross-attention passes the encoder output. The values come from the memory too,
    $X_v = X_m$, unless ``values_from`` gives a source $X_v$ of their own, of width
    $\mathsf{memory_v}$ (PyTorch's ``vdim`` when it differs from ``kdim``).
    ``score_bias`` is the additive bias $B$, shared by all heads. Returns (output,
    weights); the weights are None with ``fused=True`` or a ``block`` (neither forms
    the whole table of weights). A query with no allowed key attends to nothing: its
    weights are zeros and its output is $b^O$ (zeros without it), with zero
    gradient, never NaN.
    """
    core = FUSED if fused else MATERIALISE if block is None else Blockwise(block)
    heads = project_qkv(
        inputs, memory, AttentionWeights(w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o),
        values_from=values_from,
    )  # fmt: skip
    return attend_projected(
        heads, w_o, b_o, mask, variant=AttentionVariant(core=core),
        score_bias=score_bias, dropout=dropout if training else 0.0,
    )  # fmt: skip
