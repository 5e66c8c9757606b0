r"""The checks of every exercise: one function per property, parametrised over the
implementation under test.

A check takes ``impl``, a callable with the library function's signature, and either
returns (the property holds), raises an ``AssertionError`` whose message says in the
learner's words what is wrong ("rows of the weights do not sum to 1 along seq"), or
lets the shape error of :func:`~named_transformer.axes.checked` through (its first line
names the axis). The library's own test suite runs the same checks against the
library's functions (``tests/test_exercises.py``): they are one test code, not two.

References are written independently of the library: PyTorch's own functions where
there is one (``torch.softmax``, ``scaled_dot_product_attention``, ``layer_norm``,
``torch.gru_cell``), otherwise the equation in plain matrix products. Sizes are tiny
and seeded, the property checks draw theirs with hypothesis (the same draws on every
run, a failure shrunk to the smallest sizes), and the axes that could be confused have
different lengths, so a mix-up shows as a wrong number or a shape error rather than
passing by accident.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import TypeCheckError
from torch import Tensor, nn

from named_transformer.interop.pytorch import from_torch

__all__ = ["CHECKS"]

# a check: takes the implementation under test, raises on a failure
Check = Callable[[Callable[..., Any]], None]  # allow-raw: a type, not an index
DTYPE = torch.float64  # tight tolerances: a real mistake is never within 1e-9
TOLERANCE = 1e-6


def _randn(*shape: int, seed: int = 0) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=DTYPE)


def _for_drawn_sizes(prop: Callable[[int, int, int], None]) -> None:
    """Run ``prop(batch, seq, width)`` on sizes hypothesis draws, each axis a different
    length from 2 to 9. The draws are the same on every run (derandomised), and a
    failure is shrunk to the smallest sizes that fail before its message is raised."""
    from hypothesis import HealthCheck, Verbosity, given, settings
    from hypothesis import strategies as st

    sizes = st.lists(st.integers(2, 9), min_size=3, max_size=3, unique=True)

    @settings(
        max_examples=12,
        derandomize=True,
        deadline=None,
        database=None,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
    )
    @given(sizes)
    def run(drawn: list[int]) -> None:
        prop(*drawn)

    run()


def _shape(tensor: Tensor) -> str:
    return str(tuple(tensor.shape))


def _close(actual: Any, expected: Tensor, what: str, where: str = "") -> None:
    """``actual`` equals ``expected`` within the tolerance, else say by how much."""
    where = f" {where}" if where else ""
    if not isinstance(actual, Tensor):
        raise AssertionError(f"returns a {type(actual).__name__}, not a tensor{where}")
    if actual.shape != expected.shape:
        raise AssertionError(
            f"returns shape {_shape(actual)} where {what} has shape "
            f"{_shape(expected)}{where}"
        )
    if expected.dtype == torch.bool:
        if actual.dtype != torch.bool:
            raise AssertionError(f"returns dtype {actual.dtype}, not torch.bool")
        wrong = int((actual != expected).sum())
        if wrong:
            raise AssertionError(f"differs from {what} at {wrong} positions{where}")
        return
    difference = (actual.to(DTYPE) - expected.to(DTYPE)).abs().max().item()
    if not difference <= TOLERANCE:  # also catches NaN
        raise AssertionError(f"differs from {what} by {difference:.3g}{where}")


def _rejects(call: Callable[[], Any], what: str) -> None:
    """``call`` must fail with a shape error: the ``checked`` decorator is kept."""
    try:
        call()
    except TypeCheckError:
        return
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - any other failure is the wrong kind
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise AssertionError(
            f"{what} should be a shape error (keep the `checked` decorator), "
            f"but raised {type(error).__name__}: {first}"
        ) from None
    raise AssertionError(f"accepts {what}: keep the `checked` decorator")


# References, written as the equations in plain matrix products.
def _mm(a: Tensor, b: Tensor) -> Tensor:
    return a @ b  # allow-raw: the references are plain matrix products


def _mt(a: Tensor) -> Tensor:
    return rearrange(a, "... m n -> ... n m")


def _softmax(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    if mask is None:
        return torch.softmax(scores, -1)
    weights = torch.softmax(scores.masked_fill(~mask, -math.inf), -1)
    return weights.nan_to_num(0.0)  # a fully masked row: zeros


def _scaled_scores(queries: Tensor, keys: Tensor) -> Tensor:
    return _mm(queries, _mt(keys)) / math.sqrt(queries.shape[-1])


def _heads(inputs: Tensor, weight: Tensor) -> Tensor:
    """``inputs`` (... seq layer) times each head's (layer key) matrix."""
    return _mm(rearrange(inputs, "... seq layer -> ... 1 seq layer"), weight)


def _merge(heads_out: Tensor, w_o: Tensor) -> Tensor:
    """Concatenate the heads (heads-major), then one linear map: Vaswani's W^O."""
    concatenated = rearrange(heads_out, "... heads seq val -> ... seq (heads val)")
    w_flat = rearrange(w_o, "heads val layer -> (heads val) layer")
    return _mm(concatenated, w_flat)


def _causal(seq_q: int, seq: int, offset: int = 0) -> Tensor:
    return torch.ones(seq_q, seq, dtype=torch.bool).tril(offset)


def _some_masked(*shape: int, seed: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(*shape, generator=generator) > 0.4
    mask[..., 0] = True  # every row keeps one position
    return mask


# --- softmax ----------------------------------------------------------------------
def softmax_matches_torch(impl: Check) -> None:
    """Without a mask: torch.softmax along the last axis, seq."""
    scores = _randn(2, 3, 5)
    _close(impl(scores), torch.softmax(scores, -1), "torch.softmax along seq",
           f"on scores of shape {_shape(scores)}")  # fmt: skip


def softmax_rows_sum_to_one(impl: Check) -> None:
    """Each row of the weights is a distribution over seq (sizes drawn by
    hypothesis)."""

    def prop(batch: int, seq_q: int, seq: int) -> None:
        weights = impl(_randn(batch, seq_q, seq, seed=seq))
        sums = weights.sum(-1)
        off = (sums - 1).abs().max().item()
        if not off <= TOLERANCE or bool((weights < 0).any()):
            raise AssertionError(
                f"rows of the weights do not sum to 1 along seq (off by {off:.3g} "
                f"on scores of shape {(batch, seq_q, seq)})"
            )

    _for_drawn_sizes(prop)


def softmax_masked(impl: Check) -> None:
    """Masked positions (False) get weight exactly 0; the rest renormalise."""
    scores, mask = _randn(2, 3, 5, seed=2), _some_masked(2, 3, 5, seed=2)
    weights = impl(scores, mask)
    leaked = weights.masked_fill(mask, 0.0).abs().max().item()
    if leaked != 0:
        raise AssertionError(
            f"gives weight {leaked:.3g} to positions where the mask is False "
            "(True means 'may attend', False means blocked)"
        )
    _close(weights, _softmax(scores, mask), "torch.softmax with -inf where masked")


def softmax_fully_masked_row(impl: Check) -> None:
    """A row with every position masked returns zeros, never NaN."""
    scores = _randn(2, 4, seed=3)
    mask = torch.tensor([[True, False, True, True], [False] * 4])
    weights = impl(scores, mask)
    if bool(weights.isnan().any()):
        raise AssertionError("a row with every position masked gives NaN, not zeros")
    _close(weights, _softmax(scores, mask), "zeros for a fully masked row")


def softmax_beta(impl: Check) -> None:
    """``beta`` multiplies the scores: softmax(beta * X)."""
    scores = _randn(3, 4, seed=4)
    _close(impl(scores, None, 2.5), torch.softmax(2.5 * scores, -1),
           "torch.softmax(beta * scores)", "with beta=2.5")  # fmt: skip


def softmax_wrong_shape(impl: Check) -> None:
    """A mask of another length is a shape error naming seq."""
    _rejects(lambda: impl(_randn(2, 3), torch.ones(2, 4, dtype=torch.bool)),
             "a mask with seq 4 for scores with seq 3")  # fmt: skip


# --- basic self-attention -----------------------------------------------------------
def basic_self_attention_matches_equation(impl: Check) -> None:
    """softmax(X X^T) X, unscaled, along seq."""
    inputs = _randn(2, 4, 3, seed=5)
    expected = _mm(torch.softmax(_mm(inputs, _mt(inputs)), -1), inputs)
    _close(impl(inputs), expected, "softmax(X·X)·X (no scaling, no weights)")


def basic_self_attention_permutation_equivariant(impl: Check) -> None:
    """Permuting the positions permutes the outputs the same way."""

    def prop(batch: int, seq: int, layer: int) -> None:
        inputs = _randn(batch, seq, layer, seed=seq)
        order = torch.randperm(seq, generator=torch.Generator().manual_seed(seq))
        _close(impl(inputs[:, order]), impl(inputs)[:, order],
               "the permuted outputs", "after permuting seq: it should be "
               "permutation equivariant")  # fmt: skip

    _for_drawn_sizes(prop)


def basic_self_attention_wrong_shape(impl: Check) -> None:
    """A vector with no seq axis is a shape error."""
    _rejects(lambda: impl(_randn(3)), "a 1-d input with no seq axis")


# --- the score zoo ------------------------------------------------------------------
def dot_score_matches_equation(impl: Check) -> None:
    """Q ·key K, one score per (query, key) pair."""
    queries, keys = _randn(2, 3, 4, seed=7), _randn(2, 5, 4, seed=8)
    _close(impl(queries, keys), _mm(queries, _mt(keys)), "Q·K along key")


def dot_score_wrong_shape(impl: Check) -> None:
    """Queries and keys of different widths are a shape error naming key."""
    _rejects(lambda: impl(_randn(2, 3, 4), _randn(2, 5, 6)),
             "queries with key 4 and keys with key 6")  # fmt: skip


def scaled_dot_score_matches_equation(impl: Check) -> None:
    """Q ·key K / √|key|."""
    queries, keys = _randn(2, 3, 4, seed=9), _randn(2, 5, 4, seed=10)
    _close(impl(queries, keys), _scaled_scores(queries, keys),
           "Q·K/√|key|")  # fmt: skip


def scaled_dot_score_wrong_shape(impl: Check) -> None:
    """Keys with another batch are a shape error."""
    _rejects(lambda: impl(_randn(2, 3, 4), _randn(3, 5, 4)),
             "queries with batch 2 and keys with batch 3")  # fmt: skip


def general_score_matches_equation(impl: Check) -> None:
    """Q ·key' W ·key K: W maps the query's key' axis onto the keys' key axis."""
    queries, keys = _randn(2, 3, 6, seed=11), _randn(2, 5, 4, seed=12)
    weight = _randn(6, 4, seed=13)
    expected = _mm(_mm(queries, weight), _mt(keys))
    _close(impl(queries, keys, weight), expected, "Q·W·K")


def general_score_wrong_shape(impl: Check) -> None:
    """A transposed W (key, key') is a shape error."""
    _rejects(lambda: impl(_randn(2, 3, 6), _randn(2, 5, 4), _randn(4, 6)),
             "W of shape (key, key') instead of (key', key)")  # fmt: skip


def additive_score_matches_equation(impl: Check) -> None:
    """w ·hidden tanh(W1 ·key' Q + W2 ·key K), summed over hidden."""
    queries, keys = _randn(2, 3, 6, seed=14), _randn(2, 5, 4, seed=15)
    w_query, w_key, w_score = _randn(7, 6, seed=16), _randn(7, 4, seed=17), _randn(7)
    q = rearrange(_mm(queries, _mt(w_query)), "... seq_q h -> ... seq_q 1 h")
    k = rearrange(_mm(keys, _mt(w_key)), "... seq h -> ... 1 seq h")
    expected = _mm(torch.tanh(q + k), w_score)
    _close(impl(queries, keys, w_query, w_key, w_score), expected,
           "w·tanh(W1·Q + W2·K)")  # fmt: skip


def additive_score_wrong_shape(impl: Check) -> None:
    """w_score of another hidden width is a shape error naming hidden."""
    _rejects(
        lambda: impl(_randn(2, 3, 6), _randn(2, 5, 4), _randn(7, 6), _randn(7, 4),
                     _randn(8)),
        "w_score with hidden 8 for W1 and W2 with hidden 7",
    )  # fmt: skip


def cosine_score_matches_torch(impl: Check) -> None:
    """The cosine of the angle between each query and each key."""
    queries, keys = _randn(2, 3, 4, seed=18), _randn(2, 5, 4, seed=19)
    expected = F.cosine_similarity(
        rearrange(queries, "b seq_q key -> b seq_q 1 key"),
        rearrange(keys, "b seq key -> b 1 seq key"),
        -1,
    )
    _close(impl(queries, keys), expected, "torch's cosine_similarity of each pair")


def cosine_score_wrong_shape(impl: Check) -> None:
    """Queries and keys of different widths are a shape error."""
    _rejects(lambda: impl(_randn(3, 4), _randn(5, 3)),
             "queries with key 4 and keys with key 3")  # fmt: skip


def location_score_matches_equation(impl: Check) -> None:
    """W_a ·hidden s: one score per source position, from the query alone."""
    queries, weight = _randn(2, 3, 4, seed=20), _randn(5, 4, seed=21)
    _close(impl(queries, weight), _mm(queries, _mt(weight)), "W_a·s")


def location_score_wrong_shape(impl: Check) -> None:
    """A weight of another hidden width is a shape error."""
    _rejects(lambda: impl(_randn(2, 3, 4), _randn(5, 6)),
             "a weight with hidden 6 for queries with hidden 4")  # fmt: skip


# --- masks --------------------------------------------------------------------------
def causal_mask_lower_triangle(impl: Check) -> None:
    """Position j may attend i iff i <= j: the lower triangle, diagonal included."""
    _close(impl(4), _causal(4, 4),
           "the lower triangle with its diagonal (j may attend i iff i ≤ j)",
           "for seq_q = seq = 4")  # fmt: skip


def causal_mask_offset(impl: Check) -> None:
    """With a cache of c positions, the queries sit at c, c+1, ...: offset=c."""
    _close(impl(2, 5, offset=3), _causal(2, 5, 3),
           "the mask of queries at positions 3 and 4 over 5 keys",
           "for causal_mask(2, 5, offset=3)")  # fmt: skip


def causal_mask_matches_sdpa(impl: Check) -> None:
    """Attention under the mask equals scaled_dot_product_attention(is_causal=True)."""
    queries, keys, values = (_randn(2, 4, 3, seed=s) for s in (22, 23, 24))
    mine = F.scaled_dot_product_attention(queries, keys, values, attn_mask=impl(4))
    _close(mine, F.scaled_dot_product_attention(queries, keys, values, is_causal=True),
           "scaled_dot_product_attention(is_causal=True)",
           "when passed as its attn_mask")  # fmt: skip


def causal_mask_wrong_type(impl: Check) -> None:
    """A length that is not an int is a type error."""
    _rejects(lambda: impl(2.5), "a length of 2.5")


def padding_mask_matches_lengths(impl: Check) -> None:
    """True at the first lengths[b] positions of each sequence, False on padding."""
    lengths = torch.tensor([2, 4, 1])
    expected = torch.arange(4) < rearrange(lengths, "b -> b 1")
    _close(impl(lengths, 4), expected,
           "'True at the first lengths[b] positions' (True means a real token)",
           "for lengths [2, 4, 1] and seq 4")  # fmt: skip


def padding_mask_batched(impl: Check) -> None:
    """Any number of batch axes: lengths of shape (2, 3) give a (2, 3, seq) mask."""
    lengths = torch.tensor([[1, 2, 3], [3, 0, 2]])
    expected = torch.arange(3) < rearrange(lengths, "a b -> a b 1")
    _close(impl(lengths, 3), expected, "the padding mask", "for 2-d lengths")


def padding_mask_wrong_type(impl: Check) -> None:
    """Float lengths are a type error."""
    _rejects(lambda: impl(torch.tensor([2.0, 3.0]), 4), "float lengths")


# --- attention ----------------------------------------------------------------------
def _qkv(seed: int, seq_q: int = 3, seq: int = 5) -> tuple[Tensor, Tensor, Tensor]:
    return (_randn(2, seq_q, 4, seed=seed), _randn(2, seq, 4, seed=seed + 1),
            _randn(2, seq, 6, seed=seed + 2))  # fmt: skip


def attention_weights_match_equation(impl: Check) -> None:
    """softmax(Q·K/√|key|) along seq."""
    queries, keys, _ = _qkv(25)
    _close(impl(queries, keys), _softmax(_scaled_scores(queries, keys)),
           "softmax(Q·K/√|key|) along seq")  # fmt: skip


def attention_weights_rows_sum_to_one(impl: Check) -> None:
    """Every row is a distribution over seq (sizes drawn by hypothesis)."""

    def prop(batch: int, seq_q: int, seq: int) -> None:
        weights = impl(_randn(batch, seq_q, 4, seed=seq), _randn(batch, seq, 4))
        off = (weights.sum(-1) - 1).abs().max().item()
        if not off <= TOLERANCE:
            raise AssertionError(
                f"rows of the weights do not sum to 1 along seq (off by {off:.3g} "
                f"for {seq_q} queries and {seq} keys)"
            )

    _for_drawn_sizes(prop)


def attention_weights_causal(impl: Check) -> None:
    """With a causal mask: zero above the diagonal, the rest renormalised."""
    queries, keys, _ = _qkv(27, seq_q=4, seq=4)
    mask = _causal(4, 4)
    _close(impl(queries, keys, mask), _softmax(_scaled_scores(queries, keys), mask),
           "softmax(Q·K/√|key| + M)", "with a causal mask")  # fmt: skip


def attention_weights_score_bias(impl: Check) -> None:
    """``score_bias`` is added to the scaled scores before the softmax."""
    queries, keys, _ = _qkv(28)
    bias = _randn(3, 5, seed=29)
    _close(impl(queries, keys, score_bias=bias),
           _softmax(_scaled_scores(queries, keys) + bias),
           "softmax(Q·K/√|key| + B)", "with a score bias")  # fmt: skip


def attention_weights_wrong_shape(impl: Check) -> None:
    """A mask over another number of keys is a shape error naming seq."""
    queries, keys, _ = _qkv(30)
    _rejects(lambda: impl(queries, keys, _causal(3, 4)),
             "a mask over 4 keys for 5 keys")  # fmt: skip


def attend_matches_equation(impl: Check) -> None:
    """alpha ·seq V: each query's weighted average of the values."""
    for seq_q, seq in ((4, 4), (3, 5)):  # square first: alpha^T V runs
        weights = _softmax(_randn(2, seq_q, seq, seed=seq_q))
        values = _randn(2, seq, 6, seed=seq)
        _close(impl(weights, values), _mm(weights, values), "alpha·V along seq",
               f"for {seq_q} queries over {seq} keys")  # fmt: skip


def attend_wrong_shape(impl: Check) -> None:
    """Values over another number of positions are a shape error naming seq."""
    _rejects(lambda: impl(_randn(2, 3, 5), _randn(2, 4, 6)),
             "weights over 5 keys with 4 values")  # fmt: skip


def attention_matches_sdpa(impl: Check) -> None:
    """Equal to PyTorch's scaled_dot_product_attention, unmasked."""
    queries, keys, values = _qkv(31)
    _close(impl(queries, keys, values),
           F.scaled_dot_product_attention(queries, keys, values),
           "scaled_dot_product_attention", "without a mask")  # fmt: skip


def attention_causal_matches_sdpa(impl: Check) -> None:
    """Equal to scaled_dot_product_attention with a causal mask."""
    queries, keys, values = _qkv(32, seq_q=4, seq=4)
    _close(impl(queries, keys, values, _causal(4, 4)),
           F.scaled_dot_product_attention(queries, keys, values, is_causal=True),
           "scaled_dot_product_attention", "with a causal mask")  # fmt: skip


def attention_padding_matches_sdpa(impl: Check) -> None:
    """Equal to scaled_dot_product_attention with a key padding mask (batch 1 seq)."""
    queries, keys, values = _qkv(33)
    mask = rearrange(torch.arange(5) < torch.tensor([[3], [5]]), "b seq -> b 1 seq")
    _close(impl(queries, keys, values, mask),
           F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask),
           "scaled_dot_product_attention", "with a padding mask")  # fmt: skip


def attention_wrong_shape(impl: Check) -> None:
    """Keys and values over different numbers of positions are a shape error."""
    _rejects(lambda: impl(_randn(2, 3, 4), _randn(2, 5, 4), _randn(2, 6, 6)),
             "5 keys with 6 values")  # fmt: skip


# --- multi-head attention -----------------------------------------------------------
def project_heads_matches_equation(impl: Check) -> None:
    """W ·layer X + b, one (layer, key) matrix per head."""
    inputs, weight = _randn(2, 5, 4, seed=34), _randn(3, 4, 6, seed=35)
    bias = _randn(3, 6, seed=36)
    _close(impl(inputs, weight), _heads(inputs, weight), "X·W_h for each head h",
           "without a bias")  # fmt: skip
    _close(impl(inputs, weight, bias),
           _heads(inputs, weight) + rearrange(bias, "heads key -> heads 1 key"),
           "X·W_h + b_h for each head h", "with a bias")  # fmt: skip


def project_heads_wrong_shape(impl: Check) -> None:
    """A weight reading another width is a shape error naming layer."""
    _rejects(lambda: impl(_randn(2, 5, 4), _randn(3, 7, 6)),
             "a weight reading 7 features from inputs 4 wide")  # fmt: skip


def merge_heads_matches_concatenation(impl: Check) -> None:
    """W^O ·heads,val Y equals concatenating the heads, then the linear map W^O."""
    heads_out, w_o = _randn(2, 3, 5, 4, seed=37), _randn(3, 4, 6, seed=38)
    b_o = _randn(6, seed=39)
    _close(impl(heads_out, w_o), _merge(heads_out, w_o),
           "concatenating the heads then W^O (heads-major, as Vaswani et al.)",
           "without a bias")  # fmt: skip
    _close(impl(heads_out, w_o, b_o), _merge(heads_out, w_o) + b_o,
           "concatenating the heads then W^O + b^O", "with a bias")  # fmt: skip


def merge_heads_wrong_shape(impl: Check) -> None:
    """W^O with heads and val swapped is a shape error."""
    _rejects(lambda: impl(_randn(2, 3, 5, 4), _randn(4, 3, 6)),
             "W^O of shape (val, heads, layer)")  # fmt: skip


def _reference_multihead(inputs, memory, w_q, w_k, w_v, w_o, mask=None):
    queries, keys = _heads(inputs, w_q), _heads(memory, w_k)
    values = _heads(memory, w_v)
    if mask is not None:
        mask = rearrange(mask, "... seq_q seq -> ... 1 seq_q seq")
    weights = _softmax(_scaled_scores(queries, keys), mask)
    return _merge(_mm(weights, values), w_o), weights


def _multihead_weights(layer: int, memory: int) -> list[Tensor]:
    heads, key, val = 2, 3, 5
    shapes = [(heads, layer, key), (heads, memory, key), (heads, memory, val),
              (heads, val, layer)]  # fmt: skip
    return [_randn(*shape, seed=40 + n) for n, shape in enumerate(shapes)]


def _same_pair(mine: Any, expected: tuple[Tensor, Tensor], where: str) -> None:
    if not isinstance(mine, tuple) or len(mine) != 2:
        raise AssertionError(f"returns {type(mine).__name__}, not (output, weights)")
    if mine[1] is None:
        raise AssertionError("returns no attention weights (None) with fused=False")
    _close(mine[0], expected[0], "the heads' attention merged by W^O", where)
    _close(mine[1], expected[1], "each head's softmax(Q·K/√|key|)",
           f"(the weights) {where}")  # fmt: skip


def multihead_self_attention_causal(impl: Check) -> None:
    """Self-attention with a causal mask: output and per-head weights."""
    inputs = _randn(2, 4, 6, seed=44)
    weights = _multihead_weights(6, 6)
    mask = _causal(4, 4)
    _same_pair(impl(inputs, inputs, *weights, mask),
               _reference_multihead(inputs, inputs, *weights, mask),
               "in self-attention with a causal mask")  # fmt: skip


def multihead_cross_attention_padding(impl: Check) -> None:
    """Cross-attention over a memory of another width, with a key padding mask."""
    inputs, memory = _randn(2, 3, 6, seed=45), _randn(2, 5, 7, seed=46)
    weights = _multihead_weights(6, 7)
    mask = rearrange(torch.arange(5) < torch.tensor([[2], [5]]), "b seq -> b 1 seq")
    _same_pair(impl(inputs, memory, *weights, mask),
               _reference_multihead(inputs, memory, *weights, mask),
               "in cross-attention with a padding mask")  # fmt: skip


def multihead_attention_wrong_shape(impl: Check) -> None:
    """W^K reading the inputs' width while the memory is wider is a shape error."""
    inputs, memory = _randn(2, 3, 6), _randn(2, 5, 7)
    w_q, _, w_v, w_o = _multihead_weights(6, 7)
    _rejects(lambda: impl(inputs, memory, w_q, _randn(2, 6, 3), w_v, w_o),
             "W^K reading 6 features from a memory 7 wide")  # fmt: skip


# --- the cached decoding step -------------------------------------------------------
def _step_weights() -> list[Tensor]:
    heads, layer, key, val = 2, 6, 3, 5
    shapes = [(heads, layer, key), (heads, layer, key), (heads, layer, val),
              (heads, val, layer)]  # fmt: skip
    return [_randn(*shape, seed=60 + n) for n, shape in enumerate(shapes)]


def _recomputed(inputs: Tensor, weights: list[Tensor]) -> Tensor:
    """Causal self-attention over the whole prefix, recomputed: the cache's target."""
    seq = inputs.shape[-2]
    return _reference_multihead(inputs, inputs, *weights, _causal(seq, seq))[0]


def _triple(mine: Any) -> tuple[Tensor, Tensor, Tensor]:
    if not isinstance(mine, tuple) or len(mine) != 3:
        raise AssertionError(
            f"returns {type(mine).__name__}, not (outputs, new keys, new values)"
        )
    return mine


def cached_self_attention_token_by_token(impl: Check) -> None:
    """One token at a time from an empty cache, appending each step's keys and
    values: the rows of causal self-attention recomputed over the whole prefix."""
    inputs, weights = _randn(2, 5, 6, seed=64), _step_weights()
    keys, values = _randn(2, 2, 0, 3), _randn(2, 2, 0, 5)
    rows = []
    for j in range(inputs.shape[-2]):
        out, new_keys, new_values = _triple(impl(inputs[:, j : j + 1], keys, values,
                                                 *weights))  # fmt: skip
        rows.append(out)
        keys = torch.cat([keys, new_keys], -2)  # allow-raw: the caller's cache
        values = torch.cat([values, new_values], -2)  # allow-raw: the caller's cache
    _close(torch.cat(rows, -2), _recomputed(inputs, weights),  # allow-raw: the rows
           "causal self-attention recomputed over the whole prefix",
           "when 5 tokens are decoded one at a time from an empty cache")  # fmt: skip


def cached_self_attention_several_new(impl: Check) -> None:
    """Three new positions after a cache of two: the causal mask sits at offset 2, so
    a new position does not see the new positions after it."""
    inputs, weights = _randn(2, 5, 6, seed=65), _step_weights()
    w_k, w_v = weights[1], weights[2]
    cached, new = inputs[:, :2], inputs[:, 2:]
    out, new_keys, new_values = _triple(
        impl(new, _heads(cached, w_k), _heads(cached, w_v), *weights)
    )
    _close(new_keys, _heads(new, w_k), "the new positions' keys W^K·X")
    _close(new_values, _heads(new, w_v), "the new positions' values W^V·X")
    _close(out, _recomputed(inputs, weights)[:, 2:],
           "causal self-attention recomputed over the whole prefix",
           "for 3 new positions after a cache of 2 "
           "(the causal mask at offset 2)")  # fmt: skip


def cached_self_attention_wrong_shape(impl: Check) -> None:
    """A cache of 3 heads for weights of 2 is a shape error naming heads."""
    _rejects(lambda: impl(_randn(2, 1, 6), _randn(2, 3, 2, 3), _randn(2, 3, 2, 5),
                          *_step_weights()),
             "a cache of 3 heads for weights of 2")  # fmt: skip


# --- layer norm, feed-forward -------------------------------------------------------
def _standardized(inputs: Tensor, eps: float) -> Tensor:
    mean = inputs.mean(-1, keepdim=True)
    variance = inputs.var(-1, unbiased=False, keepdim=True)
    return (inputs - mean) / (variance + eps).sqrt()


def standardize_matches_equation(impl: Check) -> None:
    """(X - mean) / sqrt(biased variance + eps), along layer."""
    inputs = _randn(2, 3, 5, seed=47)
    _close(
        impl(inputs),
        _standardized(inputs, 1e-5),
        "(X − mean)/√(variance + ε) along layer, biased (1/n) variance",
    )
    _close(impl(inputs, 0.5), _standardized(inputs, 0.5),
           "(X − mean)/√(variance + ε)", "with eps=0.5")  # fmt: skip


def standardize_wrong_shape(impl: Check) -> None:
    """A 0-d input has no layer axis: a shape error."""
    _rejects(lambda: impl(torch.tensor(1.0, dtype=DTYPE)), "a 0-d input")


def layer_norm_matches_torch(impl: Check) -> None:
    """Equal to torch.nn.functional.layer_norm, with and without beta."""
    inputs, gamma, beta = _randn(2, 3, 5, seed=48), _randn(5, seed=49), _randn(5)
    _close(impl(inputs, gamma, beta), F.layer_norm(inputs, (5,), gamma, beta),
           "torch.nn.functional.layer_norm over layer (biased variance)")  # fmt: skip
    _close(impl(inputs, gamma, None), F.layer_norm(inputs, (5,), gamma),
           "torch.nn.functional.layer_norm", "with beta=None")  # fmt: skip
    _close(impl(inputs, gamma, beta, 0.5),
           F.layer_norm(inputs, (5,), gamma, beta, 0.5),
           "torch.nn.functional.layer_norm", "with eps=0.5")  # fmt: skip


def layer_norm_wrong_shape(impl: Check) -> None:
    """A gamma of another width is a shape error naming layer."""
    _rejects(lambda: impl(_randn(2, 5), _randn(4), None),
             "gamma of width 4 for inputs 5 wide")  # fmt: skip


def feed_forward_matches_equation(impl: Check) -> None:
    """W2 ·hidden relu(W1 ·layer X + b1) + b2; a bias of None is left out."""
    inputs, w1, b1 = _randn(2, 3, 4, seed=50), _randn(7, 4, seed=51), _randn(7)
    w2, b2 = _randn(4, 7, seed=52), _randn(4, seed=53)
    hidden = _mm(inputs, _mt(w1))
    _close(impl(inputs, w1, b1, w2, b2), _mm(torch.relu(hidden + b1), _mt(w2)) + b2,
           "W2·relu(W1·X + b1) + b2")  # fmt: skip
    _close(impl(inputs, w1, None, w2, None), _mm(torch.relu(hidden), _mt(w2)),
           "W2·relu(W1·X)", "with both biases None")  # fmt: skip
    gelu = _mm(F.gelu(hidden + b1), _mt(w2)) + b2
    _close(impl(inputs, w1, b1, w2, b2, F.gelu), gelu,
           "W2·gelu(W1·X + b1) + b2", "with activation=gelu")  # fmt: skip


def feed_forward_wrong_shape(impl: Check) -> None:
    """W2 not mapping back to layer is a shape error."""
    _rejects(lambda: impl(_randn(2, 4), _randn(7, 4), None, _randn(5, 7), None),
             "W2 mapping hidden to 5 features for inputs 4 wide")  # fmt: skip


# --- positions ----------------------------------------------------------------------
def _sinusoids(seq: int, layer: int, offset: int = 0) -> Tensor:
    table = torch.zeros(seq, layer, dtype=DTYPE)
    for pos in range(offset, offset + seq):
        for channel in range(layer):
            angle = pos / 10000 ** ((channel - channel % 2) / layer)
            table[pos - offset, channel] = (
                math.sin(angle) if channel % 2 == 0 else math.cos(angle)
            )
    return table


def sinusoidal_positions_match_paper(impl: Check) -> None:
    """P[pos, 2i] = sin(pos/10000^(2i/layer)), P[pos, 2i+1] = cos(the same)."""
    _close(impl(6, 8, dtype=DTYPE), _sinusoids(6, 8),
           "P[pos, 2i] = sin(pos/10000^(2i/|layer|)), P[pos, 2i+1] = cos(…)",
           "for seq 6, layer 8")  # fmt: skip


def sinusoidal_positions_offset(impl: Check) -> None:
    """``offset`` shifts the positions: rows offset … offset + seq - 1."""
    _close(impl(3, 8, offset=4, dtype=DTYPE), _sinusoids(3, 8, offset=4),
           "the rows 4, 5, 6 of the table", "with offset=4")  # fmt: skip


def sinusoidal_positions_wrong_type(impl: Check) -> None:
    """A length that is not an int is a type error."""
    _rejects(lambda: impl(6.0, 8), "a length of 6.0")


def relative_attention_weights_match_equation(impl: Check) -> None:
    """softmax((Q·K + Q·R^K)/√|key| + M), R^K = a^K[index] per (query, key) pair."""
    queries, keys = _randn(2, 3, 4, seed=54), _randn(2, 5, 4, seed=55)
    a_k = _randn(5, 4, seed=56)  # distances -2 … 2
    distance = torch.arange(5) - rearrange(torch.arange(3), "seq_q -> seq_q 1")
    index = distance.clamp(-2, 2) + 2
    relative = (rearrange(queries, "b seq_q key -> b seq_q 1 key") * a_k[index]).sum(-1)
    scores = _scaled_scores(queries, keys) + relative / 2.0  # √|key| = 2
    mask = _causal(3, 5, 2)
    _close(impl(queries, keys, a_k, index), _softmax(scores),
           "softmax((Q·K + Q·R^K)/√|key|)")  # fmt: skip
    _close(impl(queries, keys, a_k, index, mask), _softmax(scores, mask),
           "softmax((Q·K + Q·R^K)/√|key| + M)", "with a causal mask")  # fmt: skip


def relative_attention_weights_wrong_shape(impl: Check) -> None:
    """An index over another number of keys is a shape error naming seq."""
    index = torch.zeros(3, 4, dtype=torch.long)
    _rejects(lambda: impl(_randn(2, 3, 4), _randn(2, 5, 4), _randn(5, 4), index),
             "an index over 4 keys for 5 keys")  # fmt: skip


# --- the encoder and decoder layers: the learner's forward, the library's weights ---
_WIDTH, _HEADS, _HIDDEN, _MEMORY = 6, 2, 7, 5  # heads of 3; every width different


def _torch_layer(kind: type[nn.Module], norm_first: bool, seed: int) -> nn.Module:
    """PyTorch's own layer, batch-first, no dropout, in eval mode, random LayerNorms."""
    torch.manual_seed(seed)
    options = {"dropout": 0.0, "batch_first": True, "norm_first": norm_first}
    theirs = kind(_WIDTH, _HEADS, _HIDDEN, dtype=DTYPE, **options).eval()
    with torch.no_grad():  # LayerNorm's gamma = 1, beta = 0 would hide a missing norm
        for name, parameter in theirs.named_parameters():
            if name.startswith("norm"):
                parameter.copy_(_randn(*parameter.shape, seed=seed + len(name)))
    return theirs


def _layer_like(impl: Check, theirs: nn.Module, **options: Any) -> nn.Module:
    """The learner's class, built at the small sizes, holding ``theirs``'s weights."""
    layer = impl(_WIDTH, _HEADS, _HIDDEN, dropout=0.0, norm_first=theirs.norm_first,
                 **options).to(DTYPE).eval()  # fmt: skip
    layer.load_state_dict(from_torch(theirs).state_dict())
    return layer


def _encoder_layer_matches_torch(impl: Check, norm_first: bool) -> None:
    theirs = _torch_layer(nn.TransformerEncoderLayer, norm_first, seed=66)
    mine = _layer_like(impl, theirs)
    inputs, mask = _randn(2, 4, _WIDTH, seed=67), _causal(4, 4)
    what = f"torch.nn.TransformerEncoderLayer(norm_first={norm_first})"
    with torch.no_grad():
        _close(mine(inputs), theirs(inputs), what, "without a mask")
        _close(mine(inputs, mask), theirs(inputs, src_mask=~mask), what,
               "with a causal mask (PyTorch's True means blocked)")  # fmt: skip


def encoder_layer_post_norm_matches_torch(impl: Check) -> None:
    """Post-norm: LayerNorm(X + SelfAtt(X)), then LayerNorm(T + FFN(T))."""
    _encoder_layer_matches_torch(impl, norm_first=False)


def encoder_layer_pre_norm_matches_torch(impl: Check) -> None:
    """Pre-norm: X + SelfAtt(LayerNorm(X)), then T + FFN(LayerNorm(T))."""
    _encoder_layer_matches_torch(impl, norm_first=True)


def encoder_layer_wrong_shape(impl: Check) -> None:
    """A mask over 4 positions for 3 inputs is a shape error naming seq."""
    layer = impl(_WIDTH, _HEADS, _HIDDEN, dropout=0.0).to(DTYPE)
    _rejects(lambda: layer(_randn(2, 3, _WIDTH), _causal(4, 4)),
             "a mask over 4 positions for 3 inputs")  # fmt: skip


def _decoder_pair(impl: Check, norm_first: bool) -> tuple[nn.Module, nn.Module]:
    theirs = _torch_layer(nn.TransformerDecoderLayer, norm_first, seed=68)
    return _layer_like(impl, theirs), theirs


def decoder_layer_is_causal(impl: Check) -> None:
    """Under the causal mask, position j's output ignores the target tokens after j."""
    mine, _ = _decoder_pair(impl, norm_first=False)
    inputs, memory = _randn(2, 5, _WIDTH, seed=69), _randn(2, 3, _WIDTH, seed=70)
    changed = inputs.clone()
    changed[:, 3:] = _randn(2, 2, _WIDTH, seed=71)
    with torch.no_grad():
        before = mine(inputs, memory, _causal(5, 5))
        after = mine(changed, memory, _causal(5, 5))
    moved = (before[:, :3] - after[:, :3]).abs().max().item()
    if not moved <= TOLERANCE:
        raise AssertionError(
            f"the outputs at positions 0-2 change (by {moved:.3g}) when the target "
            "tokens at 3-4 change: the self-attention sees later positions (apply "
            "the causal mask)"
        )


def _decoder_layer_matches_torch(impl: Check, norm_first: bool) -> None:
    mine, theirs = _decoder_pair(impl, norm_first)
    inputs, memory = _randn(2, 4, _WIDTH, seed=72), _randn(2, 3, _WIDTH, seed=73)
    mask, padding = _causal(4, 4), torch.arange(3) < torch.tensor([[2], [3]])
    what = f"torch.nn.TransformerDecoderLayer(norm_first={norm_first})"
    with torch.no_grad():
        expected = theirs(inputs, memory, tgt_mask=~mask,
                          memory_key_padding_mask=~padding)  # fmt: skip
        actual = mine(inputs, memory, mask, rearrange(padding, "b seq -> b 1 seq"))
    _close(actual, expected, what,
           "with a causal target mask and a padded memory")  # fmt: skip


def decoder_layer_post_norm_matches_torch(impl: Check) -> None:
    """Post-norm: masked self-attention, cross-attention, feed-forward, each
    LayerNorm(X + f(X))."""
    _decoder_layer_matches_torch(impl, norm_first=False)


def decoder_layer_pre_norm_matches_torch(impl: Check) -> None:
    """Pre-norm: each sublayer X + f(LayerNorm(X))."""
    _decoder_layer_matches_torch(impl, norm_first=True)


def decoder_layer_wrong_shape(impl: Check) -> None:
    """A memory with another batch is a shape error naming batch."""
    layer = impl(_WIDTH, _HEADS, _HIDDEN, dropout=0.0).to(DTYPE)
    _rejects(lambda: layer(_randn(2, 4, _WIDTH), _randn(3, 3, _WIDTH)),
             "a memory of batch 3 for targets of batch 2")  # fmt: skip


# --- seq2seq: the GRU step and Bahdanau's attention ---------------------------------
def _gru_weights() -> list[Tensor]:
    hidden, inputs = 4, 3
    return [_randn(3, hidden, inputs, seed=57), _randn(3, hidden, hidden, seed=58),
            _randn(3, hidden, seed=59), _randn(3, hidden, seed=60)]  # fmt: skip


def gru_cell_matches_torch(impl: Check) -> None:
    """Equal to torch.nn.GRUCell, gates stacked (r, z, n), reset after W^h."""
    inputs, state = _randn(2, 3, seed=61), _randn(2, 4, seed=62)
    w_input, w_hidden, b_input, b_hidden = _gru_weights()
    expected = torch.gru_cell(
        inputs, state,
        rearrange(w_input, "gates hidden input -> (gates hidden) input"),
        rearrange(w_hidden, "gates hidden_next hidden -> (gates hidden_next) hidden"),
        rearrange(b_input, "gates hidden -> (gates hidden)"),
        rearrange(b_hidden, "gates hidden -> (gates hidden)"),
    )  # fmt: skip
    _close(impl(inputs, state, w_input, w_hidden, b_input, b_hidden), expected,
           "torch.nn.GRUCell")  # fmt: skip


def gru_cell_wrong_shape(impl: Check) -> None:
    """A state of another width is a shape error naming hidden."""
    w_input, w_hidden, b_input, b_hidden = _gru_weights()
    _rejects(lambda: impl(_randn(2, 3), _randn(2, 5), w_input, w_hidden, b_input,
                          b_hidden),
             "a state 5 wide for weights of hidden 4")  # fmt: skip


def _bahdanau_score(weight: Tensor) -> Callable[[Tensor, Tensor], Tensor]:
    def score(query: Tensor, annotations: Tensor) -> Tensor:
        return _mm(_mm(query, weight), _mt(annotations))

    return score


def bahdanau_attention_matches_equation(impl: Check) -> None:
    """alpha = softmax of the masked scores along seq; context = alpha ·seq h."""
    state, annotations = _randn(2, 4, seed=63), _randn(2, 5, 6, seed=64)
    weight = _randn(4, 6, seed=65)
    mask = torch.arange(5) < torch.tensor([[3], [5]])
    query = rearrange(state, "b hidden -> b 1 hidden")
    scores = _mm(_mm(query, weight), _mt(annotations))
    alpha = _softmax(rearrange(scores, "b 1 seq -> b seq"), mask)
    context = (rearrange(alpha, "b seq -> b seq 1") * annotations).sum(-2)
    result = impl(state, annotations, mask, _bahdanau_score(weight))
    if not isinstance(result, tuple) or len(result) != 2:
        raise AssertionError(f"returns {type(result).__name__}, not (context, alpha)")
    _close(result[1], alpha, "softmax of the scores along seq, 0 where masked",
           "(the weights alpha)")  # fmt: skip
    _close(result[0], context, "alpha·h along seq", "(the context)")


def bahdanau_attention_wrong_shape(impl: Check) -> None:
    """A mask over another number of positions is a shape error naming seq."""
    mask = torch.ones(2, 4, dtype=torch.bool)
    _rejects(lambda: impl(_randn(2, 4), _randn(2, 5, 6), mask,
                          _bahdanau_score(_randn(4, 6))),
             "a mask over 4 positions for 5 annotations")  # fmt: skip


def _checks(*functions: Check) -> tuple[Check, ...]:
    return functions


CHECKS: dict[str, tuple[Check, ...]] = {
    "softmax": _checks(softmax_matches_torch, softmax_rows_sum_to_one, softmax_masked,
                       softmax_fully_masked_row, softmax_beta, softmax_wrong_shape),
    "basic_self_attention": _checks(basic_self_attention_matches_equation,
                                    basic_self_attention_permutation_equivariant,
                                    basic_self_attention_wrong_shape),
    "dot_score": _checks(dot_score_matches_equation, dot_score_wrong_shape),
    "scaled_dot_score": _checks(scaled_dot_score_matches_equation,
                                scaled_dot_score_wrong_shape),
    "general_score": _checks(general_score_matches_equation,
                             general_score_wrong_shape),
    "additive_score": _checks(additive_score_matches_equation,
                              additive_score_wrong_shape),
    "cosine_score": _checks(cosine_score_matches_torch, cosine_score_wrong_shape),
    "location_score": _checks(location_score_matches_equation,
                              location_score_wrong_shape),
    "attention_weights": _checks(attention_weights_match_equation,
                                 attention_weights_rows_sum_to_one,
                                 attention_weights_causal,
                                 attention_weights_score_bias,
                                 attention_weights_wrong_shape),
    "attend": _checks(attend_matches_equation, attend_wrong_shape),
    "attention": _checks(attention_matches_sdpa, attention_causal_matches_sdpa,
                         attention_padding_matches_sdpa, attention_wrong_shape),
    "causal_mask": _checks(causal_mask_lower_triangle, causal_mask_offset,
                           causal_mask_matches_sdpa, causal_mask_wrong_type),
    "padding_mask": _checks(padding_mask_matches_lengths, padding_mask_batched,
                            padding_mask_wrong_type),
    "standardize": _checks(standardize_matches_equation, standardize_wrong_shape),
    "layer_norm": _checks(layer_norm_matches_torch, layer_norm_wrong_shape),
    "feed_forward": _checks(feed_forward_matches_equation, feed_forward_wrong_shape),
    "sinusoidal_positions": _checks(sinusoidal_positions_match_paper,
                                    sinusoidal_positions_offset,
                                    sinusoidal_positions_wrong_type),
    "project_heads": _checks(project_heads_matches_equation,
                             project_heads_wrong_shape),
    "merge_heads": _checks(merge_heads_matches_concatenation, merge_heads_wrong_shape),
    "multihead_attention": _checks(multihead_self_attention_causal,
                                   multihead_cross_attention_padding,
                                   multihead_attention_wrong_shape),
    "cached_self_attention": _checks(cached_self_attention_token_by_token,
                                     cached_self_attention_several_new,
                                     cached_self_attention_wrong_shape),
    "relative_attention_weights": _checks(relative_attention_weights_match_equation,
                                          relative_attention_weights_wrong_shape),
    "EncoderLayer": _checks(encoder_layer_post_norm_matches_torch,
                            encoder_layer_pre_norm_matches_torch,
                            encoder_layer_wrong_shape),
    "DecoderLayer": _checks(decoder_layer_is_causal,
                            decoder_layer_post_norm_matches_torch,
                            decoder_layer_pre_norm_matches_torch,
                            decoder_layer_wrong_shape),
    "gru_cell": _checks(gru_cell_matches_torch, gru_cell_wrong_shape),
    "bahdanau_attention": _checks(bahdanau_attention_matches_equation,
                                  bahdanau_attention_wrong_shape),
}  # fmt: skip
"""Each exercise's checks, in the order they run (the first failure is reported)."""
