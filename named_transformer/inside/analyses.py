r"""Analyses as named equations, each a few lines on top of
:func:`~named_transformer.recording.record` and
:func:`~named_transformer.recording.edit`; the equations themselves are tensor
functions (:func:`lens`, :func:`head_attribution`, :func:`induction_score`), which the
exercises of the page "Look inside a Transformer" ask for.

**Logit lens** (nostalgebraist 2020): read the residual stream $X^l$ entering layer
$l$ (and the last layer's output) through the final norm and the unembedding, as if
the model stopped there:

$$\text{lens}^l = \nfun{vocab}{log\,softmax}\big(E' \ndot{layer}
  \text{Norm}(X^l)\big).$$

**Direct logit attribution** (Elhage et al. 2021): head $h$ of layer $l$ adds
$c_{l,h} = W^O_{l,h} \ndot{val} Y_{l,h}$ to the residual stream, and the final norm is
linear once its divisor $\sigma$ is read from the final stream $X^L$; its direct
share of the logit of token $t$ is

$$\text{DLA}_{l,h} = E'_t \ndot{layer}
  \frac{c_{l,h} - \nfun{layer}{mean} c_{l,h}}{\sigma(X^L)} \odot \gamma$$

(RMSNorm: no centring, $\sigma$ the root mean square).

**Induction and previous-token scores** (Olsson et al. 2022): on a random sequence of
$T$ tokens repeated once, a head that attends from each token of the second copy to
the token *after* its earlier occurrence, key $i = j - T + 1$, is an induction head; one
that attends to the token before, $i = j - 1$, a previous-token head. A head's score is
its mean weight on that key, over the queries $Q$ of the second copy:

$$\text{induction}_h = \frac{1}{|Q|} \sum_{j \in Q} A_h[j, j - T + 1], \qquad
  \text{previous}_h = \frac{1}{|Q|} \sum_{j \in Q} A_h[j, j - 1].$$
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from einops import rearrange, reduce
from jaxtyping import Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.models.generator import log_probabilities
from named_transformer.recording import Named, Record

__all__ = [
    "direct_logit_attribution",
    "head_attribution",
    "induction_score",
    "induction_scores",
    "lens",
    "logit_lens",
    "previous_token_scores",
    "repeated_tokens",
    "residual_stream",
]

WEIGHTS = "blocks.layers.{}.self_attention.weights"


# --8<-- [start:residual_stream]
def residual_stream(found: Record, prefix: str = "blocks") -> Named:
    r"""$X^0, \dots, X^L$: the stream entering each layer of the stack ``prefix``, and
    the last layer's output (``layers *batch seq layer``, $L + 1$ entries)."""
    first = next(
        (kind for kind in ("attention_residual", "self_attention_residual")
         if f"{prefix}.layers.0.{kind}.inputs" in found),
        None,
    )  # fmt: skip
    if first is None:
        raise ValueError(f"no residual stream of '{prefix}' was recorded")
    entering = found.stack(f"{prefix}.layers.{{}}.{first}.inputs")
    layers = len(entering.tensor)
    # the last sublayer's output: the feed-forward's, or, in an attention-only
    # block, the attention's
    last = next(
        found[name] for kind in ("feed_forward_residual", first)
        if (name := f"{prefix}.layers.{layers - 1}.{kind}.outputs") in found
    )  # fmt: skip
    stream = rearrange([*entering.tensor, last.tensor], "layers ... -> layers ...")
    return Named(stream, entering.axes)


# --8<-- [end:residual_stream]


def _readout(model: nn.Module) -> tuple[str, nn.Module | None, nn.Module]:
    """The stack that ends in the unembedding, its final norm, and the generator."""
    if hasattr(model, "blocks") and hasattr(model, "generator"):  # LanguageModel
        return "blocks", model.blocks.norm, model.generator
    if hasattr(model, "stacks") and hasattr(model, "generator"):  # Transformer
        return "stacks.decoder", model.stacks.decoder.norm, model.generator
    raise ValueError(
        f"{type(model).__name__} has no unembedding to read the stream through "
        "(a LanguageModel or a Transformer has)"
    )


# --8<-- [start:logit_lens]
@checked
def lens(
    stream: Float[Tensor, "*batch seq layer"],
    norm: Callable[[Tensor], Tensor] | None,
    unembedding: Float[Tensor, "vocab layer"],
    bias: Float[Tensor, " vocab"] | None = None,
) -> Float[Tensor, "*batch seq vocab"]:
    r"""The residual stream $X$ read as if the model stopped there:

    $$\nfun{vocab}{log\,softmax}\big(E' \ndot{layer} \text{Norm}(X) + b\big),$$

    ``norm`` the final norm (None: a post-norm stack, read as it is), ``unembedding``
    the generator's table $E'$, ``bias`` its $b$."""
    normalised = stream if norm is None else norm(stream)
    return log_probabilities(normalised, unembedding, bias)


def logit_lens(model: nn.Module, found: Record) -> Named:
    r""":func:`lens` of every $X^l$ of :func:`residual_stream` (``layers *batch seq
    vocab``): what the model would predict if it stopped before layer $l$."""
    prefix, norm, generator = _readout(model)
    stream = residual_stream(found, prefix).tensor
    read = lens(stream, norm, generator.table, generator.bias)
    return Named(read, "layers *batch seq vocab")


# --8<-- [end:logit_lens]


# --8<-- [start:direct_logit_attribution]
@checked
def head_attribution(
    contributions: Float[Tensor, "*batch heads seq layer"],
    final: Float[Tensor, "*batch seq layer"],
    directions: Float[Tensor, "*batch seq layer"],
    gain: Float[Tensor, " layer"],
    eps: float,
    centre: bool = True,
) -> Float[Tensor, "*batch heads seq"]:
    r"""$\text{DLA}_h$: each head's contribution $c_h$ through the final norm, whose
    divisor $\sigma$ is read from the final stream $X^L$ (``final``), onto the
    unembedding row $E'_t$ of each position's token (``directions``):

    $$\text{DLA}_h = E'_t \ndot{layer}
      \frac{c_h - \nfun{layer}{mean} c_h}{\sigma(X^L)} \odot \gamma,$$

    LayerNorm (``centre``): $\sigma = \sqrt{\nfun{layer}{var} X^L + \epsilon}$;
    RMSNorm (``centre=False``): no centring, and
    $\sigma = \sqrt{\nfun{layer}{mean} (X^L)^2 + \epsilon}$."""
    if centre:
        contributions = contributions - reduce(contributions, "... layer -> ... 1",
                                               "mean")  # fmt: skip
        final = final - reduce(final, "... layer -> ... 1", "mean")
    sigma = (reduce(final * final, "... layer -> ... 1", "mean") + eps).sqrt()
    scaled = contributions / rearrange(sigma, "... seq 1 -> ... 1 seq 1") * gain
    return einsum(scaled, directions,
                  "... heads seq layer, ... seq layer -> ... heads seq")  # fmt: skip


@checked
def direct_logit_attribution(
    model: nn.Module, found: Record, tokens: Int[Tensor, "*batch seq"]
) -> Named:
    r""":func:`head_attribution` of every head of every layer to the logit of
    ``tokens`` at every position (``layers heads *batch seq``); ``tokens`` is usually
    the next token.

    Needs pre-norm blocks (or blocks with no norm: attention-only), so that each
    head's contribution reaches the final norm unchanged, and every layer's
    ``contributions`` recorded.
    """
    prefix, norm, generator = _readout(model)
    residual = model.blocks.layers[0].attention_residual if prefix == "blocks" else None
    if residual is not None and residual.norm is not None and not residual.norm_first:
        raise ValueError(
            "direct logit attribution needs pre-norm blocks: in a post-norm stack "
            "every later layer's norm rescales a head's contribution"
        )
    parts = found.stack(f"{prefix}.layers.{{}}.self_attention.contributions").tensor
    layers = len(parts)
    heads = rearrange(parts, "layers ... heads seq layer -> ... (layers heads) seq "
                      "layer")  # fmt: skip
    final = residual_stream(found, prefix).tensor[-1]  # X^L, *batch seq layer
    directions = generator.table[tokens]  # E'_t: *batch seq layer
    if norm is None:  # no final norm: the contributions reach the unembedding as such
        shares = einsum(heads, directions, "... heads seq layer, ... seq layer -> "
                        "... heads seq")  # fmt: skip
    else:  # a LayerNorm has a shift beta and centres; an RMSNorm does neither
        shares = head_attribution(heads, final, directions, norm.gamma, norm.eps,
                                  centre=hasattr(norm, "beta"))  # fmt: skip
    return Named(rearrange(shares, "... (layers heads) seq -> layers heads ... seq",
                           layers=layers), "layers heads *batch seq")  # fmt: skip


# --8<-- [end:direct_logit_attribution]


# --8<-- [start:repeated_tokens]
@checked
def repeated_tokens(
    vocab: int, period: int, batch: int = 1, *, low: int = 0, seed: int = 0
) -> Int[Tensor, "batch seq"]:
    """``batch`` random sequences of ``period`` ids in ``low … vocab - 1``, each
    repeated once (``2 period`` positions)."""
    if not 0 <= low < vocab or period < 2:
        raise ValueError(
            f"need 0 <= low < vocab and period >= 2, got low={low}, vocab={vocab}, "
            f"period={period}"
        )
    generator = torch.Generator().manual_seed(seed)
    half = torch.randint(low, vocab, (batch, period), generator=generator)
    return rearrange([half, half], "copy batch period -> batch (copy period)")


# --8<-- [end:repeated_tokens]


# --8<-- [start:induction_scores]
def _diagonal(weights: Tensor, offset: int, queries: range) -> Tensor:
    """Each head's mean weight on key ``j + offset`` over the queries ``j``
    (``*batch heads seq_q seq`` -> ``*batch heads``)."""
    seq_q, seq = weights.shape[-2], weights.shape[-1]
    j = rearrange(torch.arange(seq_q, device=weights.device), "seq_q -> seq_q 1")
    i = rearrange(torch.arange(seq, device=weights.device), "seq -> 1 seq")
    chosen = (i == j + offset) & (j >= queries.start) & (j < queries.stop)
    chosen = chosen.to(weights.dtype)
    picked = einsum(weights, chosen, "... seq_q seq, seq_q seq -> ...")
    return picked / len(queries)


@checked
def induction_score(
    weights: Float[Tensor, "*batch heads seq_q seq"], period: int, start: int = 0
) -> Float[Tensor, "*batch heads"]:
    r"""$\text{induction}_h$ of weights on :func:`repeated_tokens`: each head's mean
    weight on key $j - T + 1$ (the token after the query's earlier occurrence) over the
    queries $j$ of the second copy, $\text{start} + T \le j < \text{start} + 2T$
    ($T$ = ``period``; the first copy starts at position ``start``)."""
    if period < 1 or start < 0 or start + 2 * period > weights.shape[-2]:
        raise ValueError(
            f"two copies of period {period} from position {start} need "
            f"{start + 2 * period} queries, the weights have {weights.shape[-2]}"
        )
    return _diagonal(weights, 1 - period, range(start + period, start + 2 * period))


def _mean_over_batch(scores: Tensor) -> Named:
    """``layers *batch heads`` -> ``layers heads``, the mean over the sequences."""
    return Named(reduce(scores, "layers ... heads -> layers heads", "mean"),
                 "layers heads")  # fmt: skip


def _two_copies(tokens: Tensor) -> tuple[int, int]:
    r"""``(start, period)`` of the two copies in ``tokens``: the longest period $T$
    for which one start $s$ has ``tokens[..., s:s+T] == tokens[..., s+T:s+2T]`` in
    every sequence ($s = 1$ after a ``[CLS]`` or BOS token). Refused when no such
    pair of copies is there, or when several starts fit (the copies' position would
    be a guess)."""
    rows = rearrange(tokens, "... seq -> (...) seq").tolist()
    seq = len(rows[0])
    for period in range(seq // 2, 1, -1):
        starts = [
            start for start in range(seq - 2 * period + 1)
            if all(row[start : start + period] == row[start + period :][:period]
                   for row in rows)
        ]  # fmt: skip
        if len(starts) > 1:
            raise ValueError(
                f"the tokens hold two copies of period {period} from positions "
                f"{starts[0]} and {starts[1]} alike: the copies' start is ambiguous"
            )
        if starts:
            return starts[0], period
    raise ValueError(
        f"the tokens hold no two copies of a sequence ({seq} positions): an "
        "induction score needs a sequence written twice (repeated_tokens)"
    )


@checked
def induction_scores(
    found: Record, tokens: Int[Tensor, "*batch seq"], *, template: str = WEIGHTS
) -> Named:
    r""":func:`induction_score` of every head (``layers heads``, the mean over the
    sequences) from its recorded weights on ``tokens`` (``*batch seq``, the model's
    input: :func:`repeated_tokens`, after a ``[CLS]`` or BOS token or not). The
    period $T$ and the first copy's start are read from the tokens
    ($T$ the longest period written twice, the start the one position it fits at;
    refused when none or several fit), never assumed: a start token assumed away
    would move every query of the second copy by one."""
    weights = found.stack(template).to("layers *batch heads seq_q seq")
    batch_and_seq = (*weights.shape[1:-3], weights.shape[-2])
    if tuple(tokens.shape) != batch_and_seq:
        raise ValueError(
            f"tokens of shape {tuple(tokens.shape)} for weights recorded on "
            f"{batch_and_seq} (*batch seq_q): pass the tokens the model ran on"
        )
    start, period = _two_copies(tokens)
    return _mean_over_batch(induction_score(weights, period, start))


def previous_token_scores(
    found: Record, *, start: int = 0, template: str = WEIGHTS
) -> Named:
    r"""$\text{previous}_h$ of every head (``layers heads``): its mean weight on the
    key just before each query, over the queries after position ``start``."""
    weights = found.stack(template).to("layers *batch heads seq_q seq")
    queries = range(start + 1, weights.shape[-2])
    return _mean_over_batch(_diagonal(weights, -1, queries))


# --8<-- [end:induction_scores]
