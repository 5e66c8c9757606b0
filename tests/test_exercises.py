"""The exercises: the library passes every check; real learner mistakes are caught.

The checks live in the package (:mod:`named_transformer.exercises.checks`); here they
run against the library's own functions (every one must pass) and against a set of
deliberately wrong implementations, each a mistake learners make, each asserted to be
caught with a message naming what is wrong. Then the command line: ``init`` writes
skeletons with the library's annotations, ``check`` reports them "not started", and a
learner's correct function passes.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from einops import einsum, rearrange
from jaxtyping import Bool, Float, Int  # noqa: F401 - the copied annotations use them
from torch import Tensor  # noqa: F401

from named_transformer.axes import checked
from named_transformer.core.feedforward import relu  # noqa: F401
from named_transformer.exercises import (
    CHECKS,
    EXERCISES,
    PAGES,
    check_exercise,
    load_learner,
    skeleton,
)
from named_transformer.models.attention_weights import AttentionWeights  # noqa: F401
from named_transformer.models.multihead import merge_heads, multihead, project_heads
from named_transformer.models.rotary import Rotary
from named_transformer.models.variants import PLAIN, AttentionVariant  # noqa: F401
from named_transformer.workflows.cli import main

NAMES = list(EXERCISES)


def test_at_least_eighteen_exercises_in_page_order():
    assert len(EXERCISES) >= 18
    pages = list(PAGES)
    order = [pages.index(e.page) for e in EXERCISES.values()]
    assert order == sorted(order)
    assert set(CHECKS) == set(EXERCISES)


def test_the_checks_are_one_module_per_page_named_as_the_learners_file():
    for exercise in EXERCISES.values():
        for check in exercise.checks:
            assert f"{check.__module__.rsplit('.', 1)[-1]}.py" == exercise.file


@pytest.mark.parametrize("name", NAMES)
def test_every_check_passes_on_the_library(name):
    exercise = EXERCISES[name]
    assert len(exercise.checks) >= 2  # an equivalence and a wrong-shape case at least
    for check in exercise.checks:
        check(exercise.library_function)  # raises on a failure


# --- wrong implementations: real learner mistakes -----------------------------------
def like(name: str) -> Callable[[Callable], Callable]:
    """Give ``fn`` the library function's annotations and ``@checked``, as a learner
    who filled in the skeleton has (the parameter names are the library's)."""

    def wrap(fn: Callable) -> Callable:
        exercise = EXERCISES[name]
        if exercise.method is not None:  # the learner's subclass with that method
            return like_method(exercise.library_function, exercise.method, fn)
        library = inspect.unwrap(exercise.library_function)
        fn.__annotations__ = dict(library.__annotations__)
        fn.__name__ = name
        return checked(fn)

    return wrap


def like_method(library: type, method: str, fn: Callable) -> type:
    """The library's class with ``fn`` as its ``method``, annotated and ``@checked``."""
    fn.__annotations__ = dict(inspect.unwrap(getattr(library, method)).__annotations__)
    fn.__name__ = method
    return type(library.__name__, (library,), {method: checked(fn)})


WRONG: dict[str, list[tuple[str, Callable, str]]] = {}


def wrong(name: str, mistake: str, expected: str):
    """Register a wrong implementation of ``name`` and the part of the message it must
    produce (a distinctive part: the check that caught it, on what input)."""

    def register(fn: Callable) -> Callable:
        WRONG.setdefault(name, []).append((mistake, like(name)(fn), expected))
        return fn

    return register


# The softmaxes learners write. Each is right on small scores; they differ on a row
# with nothing to attend and on large scores.
def _masked_softmax(scores, mask, fill=-math.inf):
    """-inf where masked, NaN (a row with nothing left) turned into 0 afterwards."""
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    return torch.softmax(scores, -1).nan_to_num(0.0)


def _nan_softmax(scores, mask):
    """-inf where masked and nothing more: a row with nothing left is NaN."""
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.softmax(scores, -1)


def _additive_mask_softmax(scores, mask):
    """M = 0 or -inf added, the equation read literally, NaN turned into 0 after: the
    right values, but the NaN is still in the gradient."""
    if mask is not None:
        scores = scores + torch.zeros_like(scores).masked_fill(~mask, -math.inf)
    return torch.softmax(scores, -1).nan_to_num(0.0)


def _naive_softmax(scores, mask):
    """exp(x)/Σexp(x), the maximum not subtracted: exp(2e4) overflows."""
    exps = scores.exp()
    if mask is not None:
        exps = exps * mask
    total = exps.sum(-1, keepdim=True)
    return exps / (total + (total == 0))  # a row with nothing left: 0/1


def _scaled(queries, keys, scale=None):
    scale = math.sqrt(queries.shape[-1]) if scale is None else scale
    return queries @ keys.mT / scale


OVERFLOWS = "returns NaN or inf for scores of about ±2e4 in float32"


# --- notation ---
@wrong("softmax", "softmax over the wrong axis", "differs from torch.softmax along seq")
def _(scores, mask=None, beta=1.0):
    return torch.softmax(beta * scores, 0)


@wrong("softmax", "a mask with True meaning blocked",
       "to positions where the mask is False")  # fmt: skip
def _(scores, mask=None, beta=1.0):
    if mask is not None:
        scores = scores.masked_fill(mask, -math.inf)
    return torch.softmax(beta * scores, -1)


@wrong("softmax", "masked weights zeroed after the softmax, not renormalised",
       "differs from torch.softmax with -inf where masked")  # fmt: skip
def _(scores, mask=None, beta=1.0):
    weights = torch.softmax(beta * scores, -1)
    return weights if mask is None else weights * mask


@wrong("softmax", "-inf fill: a fully masked row gives NaN", "gives NaN, not zeros")
def _(scores, mask=None, beta=1.0):
    return _nan_softmax(beta * scores, mask)


@wrong("softmax", "the most negative number as the fill, the mask not applied after",
       "a row with every position masked gives values up to 0.25")  # fmt: skip
def _(scores, mask=None, beta=1.0):
    return _masked_softmax(beta * scores, mask, torch.finfo(scores.dtype).min)


@wrong("softmax", "M = 0 or -inf added, NaN zeroed after: the gradient is NaN",
       "its gradient with respect to scores is NaN")  # fmt: skip
def _(scores, mask=None, beta=1.0):
    return _additive_mask_softmax(beta * scores, mask)


@wrong("softmax", "beta ignored", "with beta=2.5")
def _(scores, mask=None, beta=1.0):
    return _masked_softmax(scores, mask)


@wrong("softmax", "exp(x)/sum(exp(x)) without subtracting the maximum", OVERFLOWS)
def _(scores, mask=None, beta=1.0):
    return _naive_softmax(beta * scores, mask)


# --- soft dictionary ---
@wrong("attend", "the weights transposed: alpha^T V", "differs from alpha·V along seq")
def _(weights, values):
    return weights.mT @ values


@wrong("attend", "the weights ignored: every query gets the mean of the values",
       "differs from alpha·V along seq")  # fmt: skip
def _(weights, values):
    return (torch.ones_like(weights) / weights.shape[-1]) @ values


@wrong("attend", "a softmax applied again to the weights",
       "differs from alpha·V along seq")  # fmt: skip
def _(weights, values):
    return torch.softmax(weights, -1) @ values


# --- basic self-attention ---
@wrong("basic_self_attention", "scaled by √|layer| (that is the next step)",
       "differs from softmax(X·X)·X")  # fmt: skip
def _(inputs):
    return _masked_softmax(_scaled(inputs, inputs), None) @ inputs


@wrong("basic_self_attention", "the softmax over the queries, not the keys",
       "differs from softmax(X·X)·X")  # fmt: skip
def _(inputs):
    return torch.softmax(inputs @ inputs.mT, -2) @ inputs


@wrong("basic_self_attention", "exp(x)/sum(exp(x)) without subtracting the maximum",
       "returns NaN or inf for scores X·X of about 1.6e4 in float32")  # fmt: skip
def _(inputs):
    return _naive_softmax(inputs @ inputs.mT, None) @ inputs


# --- the score zoo ---
@wrong("dot_score", "keys times queries: the scores transposed", "seq")
def _(queries, keys):
    return keys @ queries.mT


@wrong("dot_score", "scaled by √|key| (that is the scaled dot product)",
       "differs from Q·K along key")  # fmt: skip
def _(queries, keys):
    return _scaled(queries, keys)


@wrong("scaled_dot_score", "no 1/√|key| scaling", "differs from Q·K/√|key|")
def _(queries, keys):
    return queries @ keys.mT


@wrong("scaled_dot_score", "divided by |key|, not its square root",
       "differs from Q·K/√|key|")  # fmt: skip
def _(queries, keys):
    return queries @ keys.mT / queries.shape[-1]


@wrong("general_score", "scaled like the scaled dot product", "differs from Q·W·K")
def _(queries, keys, weight):
    return _scaled(queries @ weight, keys)


@wrong("general_score", "the softmax of the scores, not the scores",
       "differs from Q·W·K")  # fmt: skip
def _(queries, keys, weight):
    return torch.softmax(queries @ weight @ keys.mT, -1)


def _additive_parts(queries, keys, w_query, w_key):
    q = rearrange(queries @ w_query.mT, "... q h -> ... q 1 h")
    k = rearrange(keys @ w_key.mT, "... k h -> ... 1 k h")
    return q, k


@wrong("additive_score", "tanh forgotten", "differs from w·tanh(W1·Q + W2·K)")
def _(queries, keys, w_query, w_key, w_score):
    q, k = _additive_parts(queries, keys, w_query, w_key)
    return (q + k) @ w_score


@wrong("additive_score", "w applied inside the tanh: tanh(w·(W1·Q + W2·K))",
       "differs from w·tanh(W1·Q + W2·K)")  # fmt: skip
def _(queries, keys, w_query, w_key, w_score):
    q, k = _additive_parts(queries, keys, w_query, w_key)
    return torch.tanh((q + k) @ w_score)


def _norms(queries, keys):
    return queries.norm(p=2, dim=-1, keepdim=True), keys.norm(p=2, dim=-1)


@wrong("cosine_score", "only the queries normalised",
       "differs from torch's cosine_similarity")  # fmt: skip
def _(queries, keys, eps=1e-8):
    return queries / queries.norm(p=2, dim=-1, keepdim=True) @ keys.mT


@wrong("cosine_score", "the norms not clamped: a query of norm 0 gives 0/0",
       "gives NaN for a query of norm 0")  # fmt: skip
def _(queries, keys, eps=1e-8):
    q_norm, k_norm = _norms(queries, keys)
    return queries @ keys.mT / (q_norm * rearrange(k_norm, "... k -> ... 1 k"))


@wrong("cosine_score", "the product of the norms clamped, not each norm",
       "differs from torch's cosine_similarity with eps=0.5")  # fmt: skip
def _(queries, keys, eps=1e-8):
    q_norm, k_norm = _norms(queries, keys)
    norms = q_norm * rearrange(k_norm, "... k -> ... 1 k")
    return queries @ keys.mT / norms.clamp_min(eps)


@wrong("location_score", "returns the softmax, not the scores", "differs from W_a·s")
def _(queries, weight):
    return torch.softmax(queries @ weight.mT, -1)


@wrong("location_score", "scaled by √|hidden|", "differs from W_a·s")
def _(queries, weight):
    return _scaled(queries, weight)


# --- the Transformer's attention ---
def _weights(queries, keys, mask, score_bias, softmax=_masked_softmax):
    scores = _scaled(queries, keys)
    return softmax(scores if score_bias is None else scores + score_bias, mask)


@wrong("attention_weights", "softmax over the queries (the wrong axis)",
       "differs from softmax(Q·K/√|key|) along seq")  # fmt: skip
def _(queries, keys, mask=None, *, score_bias=None):
    return torch.softmax(_scaled(queries, keys), -2)


@wrong("attention_weights", "the mask ignored", "with a causal mask")
def _(queries, keys, mask=None, *, score_bias=None):
    return _weights(queries, keys, None, score_bias)


@wrong("attention_weights", "the score bias added after the softmax",
       "with a score bias")  # fmt: skip
def _(queries, keys, mask=None, *, score_bias=None):
    weights = _weights(queries, keys, mask, None)
    return weights if score_bias is None else weights + score_bias


@wrong("attention_weights", "-inf fill: a query with every key masked gives NaN",
       "a query whose every key is masked gives NaN")  # fmt: skip
def _(queries, keys, mask=None, *, score_bias=None):
    return _weights(queries, keys, mask, score_bias, _nan_softmax)


@wrong("attention_weights", "exp(x)/sum(exp(x)) without subtracting the maximum",
       OVERFLOWS)  # fmt: skip
def _(queries, keys, mask=None, *, score_bias=None):
    return _weights(queries, keys, mask, score_bias, _naive_softmax)


@wrong("attention", "masked scores set to 0, not -inf",
       "differs from scaled_dot_product_attention by")  # fmt: skip
def _(queries, keys, values, mask=None, *, score_bias=None):
    return _masked_softmax(_scaled(queries, keys), mask, 0.0) @ values


@wrong("attention", "the score bias ignored",
       "with a score bias")  # fmt: skip
def _(queries, keys, values, mask=None, *, score_bias=None):
    return _weights(queries, keys, mask, None) @ values


@wrong("attention", "-inf fill: a query with no allowed key returns NaN",
       "a query with no allowed key gives NaN, not zeros")  # fmt: skip
def _(queries, keys, values, mask=None, *, score_bias=None):
    return _weights(queries, keys, mask, score_bias, _nan_softmax) @ values


@wrong("attention", "M = 0 or -inf added, NaN zeroed after: the gradient is NaN",
       "a query with no allowed key gives zeros, but its gradient with respect to "
       "queries is NaN")  # fmt: skip
def _(queries, keys, values, mask=None, *, score_bias=None):
    return _weights(queries, keys, mask, score_bias, _additive_mask_softmax) @ values


@wrong("attention", "exp(x)/sum(exp(x)) without subtracting the maximum", OVERFLOWS)
def _(queries, keys, values, mask=None, *, score_bias=None):
    return _weights(queries, keys, mask, score_bias, _naive_softmax) @ values


# --- masks ---
@wrong("causal_mask", "off by one: the diagonal masked (i < j)",
       "differs from the lower triangle with its diagonal")  # fmt: skip
def _(seq_q, seq=None, *, offset=0, device=None):
    seq = seq_q if seq is None else seq
    return torch.ones(seq_q, seq, dtype=torch.bool, device=device).tril(offset - 1)


@wrong("causal_mask", "offset ignored", "offset=3")
def _(seq_q, seq=None, *, offset=0, device=None):
    seq = seq_q if seq is None else seq
    return torch.ones(seq_q, seq, dtype=torch.bool, device=device).tril()


@wrong("causal_mask", "True on the future: the upper triangle",
       "differs from the lower triangle with its diagonal")  # fmt: skip
def _(seq_q, seq=None, *, offset=0, device=None):
    seq = seq_q if seq is None else seq
    return torch.ones(seq_q, seq, dtype=torch.bool, device=device).triu(offset)


@wrong("padding_mask", "True on the padding", "True at the first lengths[b] positions")
def _(lengths, seq):
    return torch.arange(seq) >= rearrange(lengths, "... -> ... 1")


@wrong("padding_mask", "one position too many (≤ lengths[b])",
       "True at the first lengths[b] positions")  # fmt: skip
def _(lengths, seq):
    return torch.arange(seq) <= rearrange(lengths, "... -> ... 1")


@wrong("padding_mask", "one batch axis assumed: lengths[:, None]",
       "returns shape (2, 1, 3)")  # fmt: skip
def _(lengths, seq):
    return torch.arange(seq) < lengths[:, None]


# --- building blocks ---
def _centred_and_variance(inputs, dim=-1, unbiased=False):
    mean = inputs.mean(dim, keepdim=True)
    return inputs - mean, inputs.var(dim, unbiased=unbiased, keepdim=True)


@wrong("standardize", "the unbiased (1/(n-1)) variance", "biased (1/n) variance")
def _(inputs, eps=1e-5):
    centred, variance = _centred_and_variance(inputs, unbiased=True)
    return centred / (variance + eps).sqrt()


@wrong("standardize", "eps outside the square root",
       "put epsilon inside the square root")  # fmt: skip
def _(inputs, eps=1e-5):
    centred, variance = _centred_and_variance(inputs)
    return centred / (variance.sqrt() + eps)


@wrong("standardize", "eps hard-coded: the argument ignored", "with eps=0.5")
def _(inputs, eps=1e-5):
    centred, variance = _centred_and_variance(inputs)
    return centred / (variance + 1e-5).sqrt()


@wrong("standardize", "the mean and the variance detached: a wrong gradient",
       "differs from the gradient of (X − mean)/√(variance + ε)")  # fmt: skip
def _(inputs, eps=1e-5):
    centred, variance = _centred_and_variance(inputs.detach())
    return (inputs - (inputs.detach() - centred)) / (variance + eps).sqrt()


def _layer_norm(inputs, gamma, beta, eps, dim=-1, unbiased=False, eps_outside=False):
    centred, variance = _centred_and_variance(inputs, dim, unbiased)
    sigma = variance.sqrt() + eps if eps_outside else (variance + eps).sqrt()
    out = centred / sigma * gamma
    return out if beta is None else out + beta


@wrong("layer_norm", "normalised over the wrong axis (seq, not layer)",
       "differs from torch.nn.functional.layer_norm over layer")  # fmt: skip
def _(inputs, gamma, beta, eps=1e-5):
    return _layer_norm(inputs, gamma, beta, eps, dim=-2)


@wrong("layer_norm", "the unbiased variance", "that is the unbiased variance")
def _(inputs, gamma, beta, eps=1e-5):
    return _layer_norm(inputs, gamma, beta, eps, unbiased=True)


@wrong("layer_norm", "eps outside the square root",
       "put epsilon inside the square root")  # fmt: skip
def _(inputs, gamma, beta, eps=1e-5):
    return _layer_norm(inputs, gamma, beta, eps, eps_outside=True)


@wrong("layer_norm", "beta ignored: no shift",
       "differs from torch.nn.functional.layer_norm over layer")  # fmt: skip
def _(inputs, gamma, beta, eps=1e-5):
    return _layer_norm(inputs, gamma, None, eps)


def _plus(x, bias):
    return x if bias is None else x + bias


@wrong("feed_forward", "relu hard-coded, the activation argument ignored",
       "with activation=gelu")  # fmt: skip
def _(inputs, w1, b1, w2, b2, activation=None):
    return _plus(torch.relu(_plus(inputs @ w1.mT, b1)) @ w2.mT, b2)


@wrong("feed_forward", "b1 added after the activation",
       "differs from W2·relu(W1·X + b1) + b2")  # fmt: skip
def _(inputs, w1, b1, w2, b2, activation=relu):
    return _plus(_plus(activation(inputs @ w1.mT), b1) @ w2.mT, b2)


@wrong("feed_forward", "the activation applied to the output too",
       "differs from W2·relu(W1·X + b1) + b2")  # fmt: skip
def _(inputs, w1, b1, w2, b2, activation=relu):
    return activation(_plus(activation(_plus(inputs @ w1.mT, b1)) @ w2.mT, b2))


def _angles(seq, layer, offset, dtype, pair=True):
    positions = torch.arange(offset, offset + seq, dtype=dtype)
    channels = torch.arange(0, layer, 2, dtype=dtype)
    exponent = channels / layer if pair else channels / 2 / layer
    return rearrange(positions, "s -> s 1") / 10000**exponent


def _interleave(angles):
    return rearrange([angles.sin(), angles.cos()], "two s i -> s (i two)")


@wrong("sinusoidal_positions", "sines in the first half, cosines in the second",
       "differs from P[pos, 2i] = sin(pos/10000^(2i/|layer|))")  # fmt: skip
def _(seq, layer, *, offset=0, dtype=torch.float32, device=None):
    angles = _angles(seq, layer, offset, dtype)
    return torch.cat([angles.sin(), angles.cos()], -1)


@wrong("sinusoidal_positions", "the exponent i/|layer|, not 2i/|layer|",
       "differs from P[pos, 2i] = sin(pos/10000^(2i/|layer|))")  # fmt: skip
def _(seq, layer, *, offset=0, dtype=torch.float32, device=None):
    return _interleave(_angles(seq, layer, offset, dtype, pair=False))


@wrong("sinusoidal_positions", "offset ignored", "with offset=4")
def _(seq, layer, *, offset=0, dtype=torch.float32, device=None):
    return _interleave(_angles(seq, layer, 0, dtype))


@wrong("sinusoidal_positions", "the dtype argument ignored: always float64",
       "returns dtype torch.float64 when asked for torch.float32")  # fmt: skip
def _(seq, layer, *, offset=0, dtype=torch.float32, device=None):
    return _interleave(_angles(seq, layer, offset, torch.float64))


# --- multi-head attention ---
def _project(inputs, weight, bias=None):
    projected = rearrange(inputs, "... s l -> ... 1 s l") @ weight
    return projected if bias is None else projected + rearrange(bias, "h k -> h 1 k")


def _concatenate(heads_out, w_o):
    merged = rearrange(heads_out, "... h s v -> ... s (h v)")
    return merged @ rearrange(w_o, "h v l -> (h v) l")


@wrong("project_heads", "the bias forgotten", "with a bias")
def _(inputs, weight, bias=None):
    return _project(inputs, weight)


@wrong("project_heads", "every head projected by head 0's weight",
       "differs from X·W_h for each head h")  # fmt: skip
def _(inputs, weight, bias=None):
    first = _project(inputs, weight[:1], None if bias is None else bias[:1])
    return first.expand(*first.shape[:-3], weight.shape[0], *first.shape[-2:])


@wrong("merge_heads", "heads and val swapped in W^O",
       "differs from concatenating the heads then W^O")  # fmt: skip
def _(heads_out, w_o, b_o=None):
    merged = rearrange(heads_out, "... h s v -> ... s (v h)")
    return _plus(merged @ rearrange(w_o, "h v l -> (h v) l"), b_o)


@wrong("merge_heads", "the heads averaged, not summed",
       "differs from concatenating the heads then W^O")  # fmt: skip
def _(heads_out, w_o, b_o=None):
    return _plus(_concatenate(heads_out, w_o) / w_o.shape[0], b_o)


@wrong("merge_heads", "b^O forgotten", "with a bias")
def _(heads_out, w_o, b_o=None):
    return _concatenate(heads_out, w_o)


def _neighbour_rotation(heads, offset, base):
    """RoFormer's pairs, the neighbours (2i, 2i+1): not the library's halves."""
    key = heads.shape[-1]
    theta = base ** (-torch.arange(0, key, 2, dtype=heads.dtype) / key)
    angles = (offset + torch.arange(heads.shape[-2], dtype=heads.dtype))
    angles = rearrange(angles, "s -> s 1") * theta
    x, y = rearrange(heads, "... s (p two) -> two ... s p", two=2)
    turned = [x * angles.cos() - y * angles.sin(), y * angles.cos() + x * angles.sin()]
    return rearrange(turned, "two ... s p -> ... s (p two)")


def _multihead_with(mistake: str, softmax: Callable | None = None) -> Callable:
    """The pipeline right in every way but ``mistake`` (none: ``""``), with
    ``softmax`` if given: the variant's position part called for R and T, the
    attention written out, the weights None from a core that does not form them."""

    def multihead(inputs, memory, weights, mask=None, *, variant=PLAIN,
                  score_bias=None, offset=0, dropout=0.0):  # fmt: skip
        w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o = weights
        if mistake == "biases":
            b_q = b_k = b_v = b_o = None
        positions = variant.positions
        queries, keys = _project(inputs, w_q, b_q), _project(memory, w_k, b_k)
        values = _project(memory, w_v, b_v)
        at = 0 if mistake == "offset" else offset
        if isinstance(positions, Rotary) and mistake == "neighbours":
            queries = _neighbour_rotation(queries, at, positions.base)
            keys = _neighbour_rotation(keys, 0, positions.base)
        elif mistake != "rotation":
            queries = positions.rotate(queries, at)
            keys = positions.rotate(keys, at if mistake == "keys offset" else 0)
        if mistake == "values rotated":
            values = positions.rotate(values, 0)
        scale = math.sqrt(inputs.shape[-1] if mistake == "layer" else w_q.shape[-1])
        scores = _scaled(queries, keys, scale)
        term = positions.score_term(queries, keys.shape[-2], at)
        if term is not None and mistake != "alibi":
            scores = scores + (-term if mistake == "alibi sign" else term)
        if score_bias is not None and mistake != "score bias":
            scores = scores + rearrange(score_bias, "... q k -> ... 1 q k")
        if mask is not None:
            mask = rearrange(mask, "... q k -> ... 1 q k")
        chosen = {"overflow": _naive_softmax, "nan": _nan_softmax}.get(
            mistake, softmax or _masked_softmax
        )
        attention = chosen(scores, mask)
        output = _plus(_concatenate(attention @ values, w_o), b_o)
        none = not variant.core.returns_weights and mistake != "weights"
        return output, None if none else attention

    return multihead


_ROTARY = "with the rotary part Rotary(base=100.0)"
_OFFSET = "for the queries at positions 2, 3, 4 (offset=2)"
for _mistake, _name, _expected in [
    ("layer", "scaled by √|layer|, not √|key| of a head",
     "differs from the heads' attention merged by W^O"),
    ("biases", "the biases forgotten", "with the biases b^Q, b^K, b^V and b^O"),
    ("score bias", "the score bias ignored", "with a score bias, shared by all heads"),
    ("rotation", "the rotary part never called", _ROTARY),
    ("neighbours", "RoPE's pairs taken as neighbours (2i, 2i+1), not halves",
     _ROTARY),
    ("values rotated", "the values rotated too", _ROTARY),
    ("alibi", "the ALiBi part's score term ignored", "with the ALiBi part"),
    ("alibi sign", "the ALiBi score term subtracted", "with the ALiBi part"),
    ("offset", "offset ignored: the queries placed from position 0", _OFFSET),
    ("keys offset", "the keys rotated from offset too", _OFFSET),
    ("weights", "the weights returned with the fused core",
     "returns attention weights with the fused core"),
    ("overflow", "exp(x)/sum(exp(x)) without subtracting the maximum", OVERFLOWS),
    ("nan", "-inf fill: a query with no allowed key returns NaN",
     "a query with no allowed key (output) gives NaN, not zeros"),
]:  # fmt: skip
    wrong("multihead", _name, _expected)(_multihead_with(_mistake))


def _relative(queries, keys, a_k, index, mask, scale_all=True, softmax=None):
    relative = (rearrange(queries, "... q d -> ... q 1 d") * a_k[index]).sum(-1)
    scale = math.sqrt(queries.shape[-1])
    scores = (queries @ keys.mT + relative) / scale if scale_all else (
        queries @ keys.mT / scale + relative
    )
    return (softmax or _masked_softmax)(scores, mask)


@wrong("relative_attention_weights", "only the content term divided by √|key|",
       "differs from softmax((Q·K + Q·R^K)/√|key|)")  # fmt: skip
def _(queries, keys, a_k, index, mask=None):
    return _relative(queries, keys, a_k, index, mask, scale_all=False)


@wrong("relative_attention_weights", "a^K read by key position, not by distance",
       "differs from softmax((Q·K + Q·R^K)/√|key|)")  # fmt: skip
def _(queries, keys, a_k, index, mask=None):
    by_position = torch.arange(index.shape[-1]).expand(index.shape)
    return _relative(queries, keys, a_k, by_position, mask)


@wrong("relative_attention_weights",
       "exp(x)/sum(exp(x)) without subtracting the maximum", OVERFLOWS)  # fmt: skip
def _(queries, keys, a_k, index, mask=None):
    return _relative(queries, keys, a_k, index, mask, softmax=_naive_softmax)


# --- the encoder-decoder Transformer ---
def _post_norm(residual, x, sublayer):
    return residual.norm(x + sublayer(x))


def _pre_norm(residual, x, sublayer):
    return x + sublayer(residual.norm(x))


def _either_norm(residual, x, sublayer):
    return (_pre_norm if residual.norm_first else _post_norm)(residual, x, sublayer)


def _by_pipeline(attention, inputs, memory=None, mask=None, score_bias=None):
    """``attention``'s output computed by the pipeline from its weights, not by
    calling the module: right, but nothing is recorded under the module's name."""
    memory = inputs if memory is None else memory
    return multihead(inputs, memory, attention.named_weights(), mask,
                     score_bias=score_bias)[0]  # fmt: skip


def _encoder(self, inputs, mask, score_bias, residual=_either_norm, attend=None):
    attend = attend or (lambda attention, x, **kw: attention(x, **kw))

    def self_attend(x):
        return attend(self.self_attention, x, mask=mask, score_bias=score_bias)

    hidden = residual(self.attention_residual, inputs, self_attend)
    return residual(self.feed_forward_residual, hidden, self.feed_forward)


@wrong("EncoderLayer", "pre-norm written as post-norm",
       "differs from torch.nn.TransformerEncoderLayer(norm_first=True)")  # fmt: skip
def _(self, inputs, mask=None, *, score_bias=None):
    return _encoder(self, inputs, mask, score_bias, _post_norm)


@wrong("EncoderLayer", "post-norm with the residual added after the norm",
       "differs from torch.nn.TransformerEncoderLayer(norm_first=False)")  # fmt: skip
def _(self, inputs, mask=None, *, score_bias=None):
    def residual(sublayer, x, f):
        if sublayer.norm_first:
            return _pre_norm(sublayer, x, f)
        return sublayer.norm(f(x)) + x

    return _encoder(self, inputs, mask, score_bias, residual)


@wrong("EncoderLayer", "the score bias not passed to the self-attention",
       "with a score bias (a float src_mask)")  # fmt: skip
def _(self, inputs, mask=None, *, score_bias=None):
    return _encoder(self, inputs, mask, None)


@wrong("EncoderLayer", "the self-attention by the pipeline, not the module",
       "nothing was recorded as 'self_attention.weights'")  # fmt: skip
def _(self, inputs, mask=None, *, score_bias=None):
    return _encoder(self, inputs, mask, score_bias,
                    attend=lambda a, x, **kw: _by_pipeline(a, x, **kw))  # fmt: skip


def _decoder(self, inputs, memory, mask, memory_mask, residual=_either_norm, *,
             score_bias=None, memory_score_bias=None, attend=None):  # fmt: skip
    attend = attend or (lambda attention, *args, **kw: attention(*args, **kw))

    def self_attend(x):
        return attend(self.self_attention, x, mask=mask, score_bias=score_bias)

    def cross_attend(x):
        return attend(self.cross_attention, x, memory, mask=memory_mask,
                      score_bias=memory_score_bias)  # fmt: skip

    hidden = residual(self.self_attention_residual, inputs, self_attend)
    hidden = residual(self.cross_attention_residual, hidden, cross_attend)
    return residual(self.feed_forward_residual, hidden, self.feed_forward)


@wrong("DecoderLayer", "the causal mask ignored: the decoder attends to the future",
       "the self-attention sees later positions")  # fmt: skip
def _(self, inputs, memory, mask=None, memory_mask=None, *, score_bias=None,
      memory_score_bias=None):  # fmt: skip
    return _decoder(self, inputs, memory, None, memory_mask)


@wrong("DecoderLayer", "pre-norm with the residual taken from the normalised input",
       "differs from torch.nn.TransformerDecoderLayer(norm_first=True)")  # fmt: skip
def _(self, inputs, memory, mask=None, memory_mask=None, *, score_bias=None,
      memory_score_bias=None):  # fmt: skip
    def residual(sublayer, x, f):
        if not sublayer.norm_first:
            return _post_norm(sublayer, x, f)
        normalised = sublayer.norm(x)
        return normalised + f(normalised)

    return _decoder(self, inputs, memory, mask, memory_mask, residual)


@wrong("DecoderLayer", "the memory mask ignored",
       "with a causal target mask and a padded memory")  # fmt: skip
def _(self, inputs, memory, mask=None, memory_mask=None, *, score_bias=None,
      memory_score_bias=None):  # fmt: skip
    return _decoder(self, inputs, memory, mask, None)


@wrong("DecoderLayer", "the memory score bias not passed to the cross-attention",
       "with a score bias and a memory score bias")  # fmt: skip
def _(self, inputs, memory, mask=None, memory_mask=None, *, score_bias=None,
      memory_score_bias=None):  # fmt: skip
    return _decoder(self, inputs, memory, mask, memory_mask, score_bias=score_bias)


@wrong("DecoderLayer", "the cross-attention by the pipeline, not the module",
       "nothing was recorded as 'cross_attention.weights'")  # fmt: skip
def _(self, inputs, memory, mask=None, memory_mask=None, *, score_bias=None,
      memory_score_bias=None):  # fmt: skip
    def attend(attention, x, *args, **kw):
        if attention is self.cross_attention:
            return _by_pipeline(attention, x, *args, **kw)
        return attention(x, *args, **kw)

    return _decoder(self, inputs, memory, mask, memory_mask, score_bias=score_bias,
                    memory_score_bias=memory_score_bias, attend=attend)  # fmt: skip


# --- seq2seq ---
def _gates(inputs, state, w_input, w_hidden, b_input, b_hidden):
    i = (rearrange(inputs, "... x -> ... 1 1 x") * w_input).sum(-1) + b_input
    h = (rearrange(state, "... x -> ... 1 1 x") * w_hidden).sum(-1) + b_hidden
    return i.unbind(-2), h.unbind(-2)


def _gru(inputs, state, w_input, w_hidden, b_input, b_hidden, *, swap=False,
         cho=False):  # fmt: skip
    (i_r, i_z, i_n), (h_r, h_z, h_n) = _gates(
        inputs, state, w_input, w_hidden, b_input, b_hidden
    )
    reset, update = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    if cho:
        h_n = (reset * state) @ w_hidden[2].mT + b_hidden[2]
        candidate = torch.tanh(i_n + h_n)
    else:
        candidate = torch.tanh(i_n + reset * h_n)
    keep = 1 - update if swap else update
    return (1 - keep) * candidate + keep * state


@wrong("gru_cell", "z and 1 - z swapped", "z and 1 − z are swapped")
def _(inputs, state, w_input, w_hidden, b_input, b_hidden):
    return _gru(inputs, state, w_input, w_hidden, b_input, b_hidden, swap=True)


@wrong("gru_cell", "the reset gate before the projection (Cho et al.)",
       "the reset gate is applied before the hidden projection")  # fmt: skip
def _(inputs, state, w_input, w_hidden, b_input, b_hidden):
    return _gru(inputs, state, w_input, w_hidden, b_input, b_hidden, cho=True)


def _bahdanau(previous_state, annotations, mask, score, softmax):
    scores = score(rearrange(previous_state, "... h -> ... 1 h"), annotations)
    weights = softmax(rearrange(scores, "... 1 s -> ... s"), mask)
    context = (rearrange(weights, "... s -> ... s 1") * annotations).sum(-2)
    return context, weights


@wrong("bahdanau_attention", "the mask forgotten",
       "differs from softmax of the scores along seq, 0 where masked")  # fmt: skip
def _(previous_state, annotations, mask, score):
    return _bahdanau(previous_state, annotations, None, score, _masked_softmax)


@wrong("bahdanau_attention", "the padding zeroed after the softmax, not renormalised",
       "differs from softmax of the scores along seq, 0 where masked")  # fmt: skip
def _(previous_state, annotations, mask, score):
    def zeroed(scores, mask):
        return torch.softmax(scores, -1) * mask

    return _bahdanau(previous_state, annotations, mask, score, zeroed)


@wrong("bahdanau_attention", "exp(x)/sum(exp(x)) without subtracting the maximum",
       OVERFLOWS)  # fmt: skip
def _(previous_state, annotations, mask, score):
    return _bahdanau(previous_state, annotations, mask, score, _naive_softmax)


# --- decoding ---
def _step(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o, mask_of,
          softmax=_masked_softmax):  # fmt: skip
    """A cached step whose mask comes from ``mask_of(new, seen)``."""
    queries, keys, values = (_project(inputs, w) for w in (w_q, w_k, w_v))
    all_keys = torch.cat([cached_keys, keys], -2)
    all_values = torch.cat([cached_values, values], -2)
    mask = mask_of(inputs.shape[-2], cached_keys.shape[-2])
    weights = softmax(_scaled(queries, all_keys), mask)
    return _concatenate(weights @ all_values, w_o), keys, values


def _offset_causal(new, seen):
    return torch.ones(new, seen + new).tril(seen).bool()


@wrong("cached_self_attention", "no causal mask: new positions see later new ones",
       "for 3 new positions after a cache of 2")  # fmt: skip
def _(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o):
    return _step(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o,
                 lambda new, seen: None)  # fmt: skip


@wrong("cached_self_attention", "the causal mask without the cache's offset",
       "causal self-attention recomputed over the whole prefix")  # fmt: skip
def _(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o):
    def no_offset(new, seen):
        return torch.ones(new, seen + new).tril().bool()

    return _step(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o, no_offset)


@wrong("cached_self_attention", "the cache ignored: only the new keys attended",
       "when 5 tokens are decoded one at a time")  # fmt: skip
def _(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o):
    return _step(inputs, cached_keys[..., :0, :], cached_values[..., :0, :], w_q,
                 w_k, w_v, w_o, _offset_causal)  # fmt: skip


@wrong("cached_self_attention", "exp(x)/sum(exp(x)) without subtracting the maximum",
       OVERFLOWS)  # fmt: skip
def _(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o):
    return _step(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o,
                 _offset_causal, _naive_softmax)  # fmt: skip



# --- look inside: induction score, logit lens, per-head direct logit attribution ----
def _key_score(weights, offset, queries):
    """The mean weight on key j + offset over the queries j (a learner's loop)."""
    picked = [weights[..., j, j + offset] for j in queries]
    return rearrange(picked, "j ... -> ... j").mean(-1)


@wrong("induction_score", "key j - T: the query's own token's earlier occurrence",
       "that is key j - T, the earlier occurrence")  # fmt: skip
def _(weights, period, start=0):
    return _key_score(weights, -period, range(start + period, start + 2 * period))


@wrong("induction_score", "averaged over the queries of both copies",
       "differs from the mean weight on key j - T + 1")  # fmt: skip
def _(weights, period, start=0):
    queries = range(start + period - 1, start + 2 * period)  # j - T + 1 >= start
    return _key_score(weights, 1 - period, queries)


@wrong("induction_score", "the first query of the second copy left out",
       "differs from the mean weight on key j - T + 1")  # fmt: skip
def _(weights, period, start=0):
    queries = range(start + period + 1, start + 2 * period)
    return _key_score(weights, 1 - period, queries)


def _lens(stream, norm, unembedding, bias, read=torch.log_softmax, axis=-1):
    normalised = stream if norm is None else norm(stream)
    logits = einsum(normalised, unembedding, "... layer, vocab layer -> ... vocab")
    return read(logits if bias is None else logits + bias, axis)


@wrong("lens", "the final norm not applied", "the final norm is not applied")
def _(stream, norm, unembedding, bias=None):
    return _lens(stream, None, unembedding, bias)


@wrong("lens", "the softmax, not its log", "probabilities, not log-probabilities")
def _(stream, norm, unembedding, bias=None):
    return _lens(stream, norm, unembedding, bias, torch.softmax)


@wrong("lens", "log softmax over the positions, not the vocabulary",
       "differs from log softmax over vocab of E'·Norm(X) + b")  # fmt: skip
def _(stream, norm, unembedding, bias=None):
    return _lens(stream, norm, unembedding, bias, axis=-2)


def _attribution(contributions, final, directions, gain, eps, centre, own=False):
    if centre:
        contributions = contributions - contributions.mean(-1, keepdim=True)
        final = final - final.mean(-1, keepdim=True)
    per_head = rearrange(final, "... seq layer -> ... 1 seq layer")
    divided = contributions if own else per_head
    sigma = (divided.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    scaled = contributions / sigma * gain
    return einsum(scaled, directions, "... heads seq layer, ... seq layer -> "
                  "... heads seq")  # fmt: skip


@wrong("head_attribution", "LayerNorm's centring left out", "no centring")
def _(contributions, final, directions, gain, eps, centre=True):
    return _attribution(contributions, final, directions, gain, eps, False)


@wrong("head_attribution", "each head divided by its own root mean square",
       "each head normalised by its own root mean square")  # fmt: skip
def _(contributions, final, directions, gain, eps, centre=True):
    return _attribution(contributions, final, directions, gain, eps, centre, True)


@wrong("head_attribution", "the gain left out", "the gain gamma is left out")
def _(contributions, final, directions, gain, eps, centre=True):
    return _attribution(contributions, final, directions, 1.0, eps, centre)

# --- right implementations written another standard way: every check passes ---------
RIGHT: dict[str, list[tuple[str, Callable]]] = {}


def right(name: str, way: str):
    """Register a right implementation of ``name``, written ``way``."""

    def register(fn: Callable) -> Callable:
        RIGHT.setdefault(name, []).append((way, like(name)(fn)))
        return fn

    return register


def _logsumexp_softmax(scores, mask=None):
    """exp(x - logsumexp(x)): no overflow, but x - logsumexp(x) is rounded at the
    size of x (about 1e-3 at 2e4 in float32). A row with nothing allowed (by the mask
    or by -inf) takes its logsumexp over the dtype's lowest number, then times 0."""
    allowed = scores > -math.inf
    allowed = allowed if mask is None else allowed & mask
    filled = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return torch.exp(filled - torch.logsumexp(filled, -1, keepdim=True)) * allowed


def _summed(weights, values):
    """weights ·seq values, summed in another order than a matrix product's."""
    return (rearrange(weights, "... q k -> ... q k 1")
            * rearrange(values, "... k v -> ... 1 k v")).sum(-2)  # fmt: skip


@right("softmax", "exp(x - logsumexp(x))")
def _(scores, mask=None, beta=1.0):
    return _logsumexp_softmax(beta * scores, mask)


@right("basic_self_attention", "logsumexp, and the values summed elementwise")
def _(inputs):
    return _summed(_logsumexp_softmax(inputs @ inputs.mT), inputs)


@right("attention_weights", "exp(x - logsumexp(x))")
def _(queries, keys, mask=None, *, score_bias=None):
    return _weights(queries, keys, mask, score_bias, _logsumexp_softmax)


@right("attention", "logsumexp, and the values summed elementwise")
def _(queries, keys, values, mask=None, *, score_bias=None):
    return _summed(_weights(queries, keys, mask, score_bias, _logsumexp_softmax),
                   values)  # fmt: skip


right("multihead", "exp(x - logsumexp(x))")(_multihead_with("", _logsumexp_softmax))


@right("multihead", "project_heads, the part's R and T, the variant's core, "
       "merge_heads")  # fmt: skip
def _(inputs, memory, weights, mask=None, *, variant=PLAIN, score_bias=None,
      offset=0, dropout=0.0):  # fmt: skip
    positions = variant.positions
    queries = positions.rotate(project_heads(inputs, weights.w_q, weights.b_q), offset)
    keys = positions.rotate(project_heads(memory, weights.w_k, weights.b_k), 0)
    values = project_heads(memory, weights.w_v, weights.b_v)
    bias = positions.score_term(queries, keys.shape[-2], offset)
    if score_bias is not None:
        lifted = rearrange(score_bias, "... q k -> ... 1 q k")
        bias = lifted if bias is None else bias + lifted
    if mask is not None:
        mask = rearrange(mask, "... q k -> ... 1 q k")
    outputs, attention = variant.core(queries, keys, values, mask, bias, dropout)
    return merge_heads(outputs, weights.w_o, weights.b_o), attention


@right("relative_attention_weights", "exp(x - logsumexp(x))")
def _(queries, keys, a_k, index, mask=None):
    return _relative(queries, keys, a_k, index, mask, softmax=_logsumexp_softmax)


@right("bahdanau_attention", "exp(x - logsumexp(x))")
def _(previous_state, annotations, mask, score):
    return _bahdanau(previous_state, annotations, mask, score, _logsumexp_softmax)


@right("cached_self_attention", "exp(x - logsumexp(x))")
def _(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o):
    return _step(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o,
                 _offset_causal, _logsumexp_softmax)  # fmt: skip


RIGHT_CASES = [(name, way, fn) for name, entries in RIGHT.items()
               for way, fn in entries]  # fmt: skip


@pytest.mark.parametrize(("name", "way", "fn"), RIGHT_CASES,
                         ids=[f"{c[0]}: {c[1]}" for c in RIGHT_CASES])  # fmt: skip
def test_a_right_implementation_written_another_way_passes(name, way, fn):
    # 0.8.3 failed exp(x - logsumexp(x)) on float32 rounding at ±2e4 (by 0.000683)
    result = check_exercise(EXERCISES[name], fn)
    assert result.status == "passed", result.line()


def test_every_docstring_promising_zeros_for_a_masked_row_is_checked_on_one():
    for name, exercise in EXERCISES.items():
        function = exercise.library_function
        if exercise.method is not None:
            function = getattr(function, exercise.method)
        if "never NaN" in (inspect.getdoc(inspect.unwrap(function)) or ""):
            checks = [check.__name__ for check in exercise.checks]
            assert any("fully" in check for check in checks), (name, checks)
    multihead = EXERCISES["multihead"].library_function
    assert "never NaN" in inspect.getdoc(multihead)  # 0.8.3 promised nothing there


def test_every_softmax_check_has_a_right_implementation_beside_the_wrong_ones():
    stable = {name for name, checks in CHECKS.items()
              if any("stable" in check.__name__ for check in checks)}  # fmt: skip
    assert stable <= set(RIGHT), sorted(stable - set(RIGHT))


def test_every_exercise_has_two_wrong_implementations_and_sixty_in_all():
    assert set(WRONG) == set(EXERCISES)
    fewest = min(WRONG.values(), key=len)
    assert len(fewest) >= 2, fewest
    assert sum(len(entries) for entries in WRONG.values()) >= 60

CASES = [
    (name, mistake, fn, expected)
    for name, entries in WRONG.items()
    for mistake, fn, expected in entries
]


@pytest.mark.parametrize(
    ("name", "mistake", "fn", "expected"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES]
)
def test_each_mistake_is_caught_with_a_message_naming_it(name, mistake, fn, expected):
    result = check_exercise(EXERCISES[name], fn)
    assert result.status == "failed", f"{mistake} passed"
    assert expected in result.message, result.message
    assert result.line().startswith(f"{name}: failed: ")


def test_an_unchecked_implementation_is_caught():
    """The library's own code without @checked passes the equations but not the
    wrong-shape case."""
    unchecked = inspect.unwrap(EXERCISES["softmax"].library_function)
    result = check_exercise(EXERCISES["softmax"], unchecked)
    assert result.status == "failed"
    assert "keep the `checked` decorator" in result.message or "shape error" in (
        result.message
    )


def test_multihead_without_checked_fails_the_wrong_shape_check():
    """A right pipeline without ``@checked``: the mask over 4 keys for a memory of 5
    is then no shape error, and the check says to keep the decorator."""
    result = check_exercise(EXERCISES["multihead"], _multihead_with(""))
    assert result.status == "failed"
    assert "a mask over 4 keys for a memory of 5" in result.message
    assert "keep the `checked` decorator" in result.message


def test_a_wrong_output_shape_names_the_axis():
    (_, transposed, _) = WRONG["dot_score"][0]
    result = check_exercise(EXERCISES["dot_score"], transposed)
    assert "seq" in result.message.splitlines()[0]


# --- skeletons and the command line -------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_a_skeleton_carries_the_library_signature(name, tmp_path):
    exercise = EXERCISES[name]
    text = skeleton(exercise)
    assert "raise NotImplementedError" in text
    assert exercise.page in text and "@checked" in text


def test_init_writes_skeletons_with_the_library_annotations(tmp_path, capsys):
    assert main(["exercises", "init", str(tmp_path / "mine")]) == 0
    learner = load_learner(tmp_path / "mine")
    for name, exercise in EXERCISES.items():
        library, mine = exercise.library_function, learner[name]
        if exercise.method is not None:  # a subclass of the library's class
            assert issubclass(mine, library) and mine is not library, name
            library = getattr(library, exercise.method)
            mine = getattr(mine, exercise.method)
            assert mine is not library, name
        assert mine.__doc__ == library.__doc__, name
        library, mine = inspect.signature(library), inspect.signature(mine)
        assert str(mine) == str(library), name  # names, defaults, annotations
        assert [str(p.annotation) for p in mine.parameters.values()] == [
            str(p.annotation) for p in library.parameters.values()
        ]
        assert str(mine.return_annotation) == str(library.return_annotation)


def test_a_fresh_init_is_not_started_and_exits_non_zero(tmp_path, capsys):
    main(["exercises", "init", str(tmp_path)])
    capsys.readouterr()
    assert main(["exercises", "check", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:-1] == [f"{name}: not started" for name in EXERCISES]
    assert lines[-1] == f"0 of {len(EXERCISES)} passed"


def test_init_refuses_a_non_empty_directory(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["exercises", "init", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "not empty" in error and "--force" in error
    assert main(["exercises", "init", str(tmp_path), "--force"]) == 0


def test_an_unknown_name_is_a_usage_error(tmp_path, capsys):
    main(["exercises", "init", str(tmp_path)])
    assert main(["exercises", "check", str(tmp_path), "softmaxx"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "'softmaxx'" in error


def test_a_syntax_error_names_the_file(tmp_path, capsys):
    main(["exercises", "init", str(tmp_path)])
    (tmp_path / "masks.py").write_text("def causal_mask(:\n")
    assert main(["exercises", "check", str(tmp_path), "causal_mask", "--hint"]) == 1
    out = capsys.readouterr().out
    assert "causal_mask: failed: cannot import masks.py: SyntaxError" in out
    assert "reread docs/learn/masks.md#the-causal-mask" in out


CORRECT_SOFTMAX = """
    if beta != 1.0:
        scores = beta * scores
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    if mask is not None:
        weights = weights * mask
    total = weights.sum(-1, keepdim=True)
    return weights / total.clamp_min(torch.finfo(scores.dtype).tiny)
"""


def test_init_edit_check_passes(tmp_path, capsys):
    """The learner's session: init, write one function with torch primitives, check."""
    main(["exercises", "init", str(tmp_path)])
    path = tmp_path / "notation.py"
    text = path.read_text()
    start = text.index("def softmax(")
    body = text.index("    raise NotImplementedError", start)
    end = body + len("    raise NotImplementedError")
    path.write_text(text[:body] + CORRECT_SOFTMAX.strip("\n") + text[end:])
    capsys.readouterr()
    assert main(["exercises", "check", str(tmp_path), "softmax"]) == 0
    assert capsys.readouterr().out.splitlines() == ["softmax: passed", "1 of 1 passed"]


CORRECT_MULTIHEAD = """
    w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o = weights

    def project(x, w, b):
        heads = einsum(x, w, "... seq layer, heads layer key -> ... heads seq key")
        return heads if b is None else heads + rearrange(b, "h k -> h 1 k")

    queries = variant.positions.rotate(project(inputs, w_q, b_q), offset)
    keys = variant.positions.rotate(project(memory, w_k, b_k), 0)
    values = project(memory, w_v, b_v)
    scores = einsum(queries, keys, "... q key, ... k key -> ... q k")
    scores = scores / math.sqrt(queries.shape[-1])
    term = variant.positions.score_term(queries, keys.shape[-2], offset)
    scores = scores if term is None else scores + term
    if score_bias is not None:
        scores = scores + rearrange(score_bias, "... q k -> ... 1 q k")
    allowed = torch.ones_like(scores, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & rearrange(mask, "... q k -> ... 1 q k")
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    exps = torch.exp(scores - reduce(scores, "... q k -> ... q 1", "max")) * allowed
    total = reduce(exps, "... q k -> ... q 1", "sum")
    attention = exps / total.clamp_min(torch.finfo(scores.dtype).tiny)
    heads = einsum(attention, values, "... q k, ... k val -> ... q val")
    output = einsum(heads, w_o, "... heads q val, heads val layer -> ... q layer")
    output = output if b_o is None else output + b_o
    return output, attention if variant.core.returns_weights else None
"""


def test_init_edit_check_passes_for_the_pipeline(tmp_path, capsys):
    """The pipeline exercise, written in the learner's file with its header's imports
    only (AttentionWeights, AttentionVariant and PLAIN among them), passes."""
    main(["exercises", "init", str(tmp_path)])
    path = tmp_path / "multihead_attention.py"
    text = path.read_text()
    start = text.index("def multihead(")
    body = text.index("    raise NotImplementedError", start)
    end = body + len("    raise NotImplementedError")
    path.write_text(text[:body] + CORRECT_MULTIHEAD.strip("\n") + text[end:])
    capsys.readouterr()
    assert main(["exercises", "check", str(tmp_path), "multihead"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["multihead: passed", "1 of 1 passed"]


def test_the_whole_check_of_the_library_passes(tmp_path, capsys):
    """A directory whose files are the library's functions passes every exercise,
    through the command line: one line a passed exercise, in order, and the total.
    (No wall time is asserted: CI must fail only for a reason.)"""
    for page, (file, _) in PAGES.items():
        imports = [
            f"from {e.module} import {e.name}  # noqa: F401"
            for e in EXERCISES.values()
            if e.page == page
        ]
        (tmp_path / file).write_text("\n".join(imports) + "\n")
    assert main(["exercises", "check", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [f"{name}: passed" for name in NAMES] + [
        f"{len(NAMES)} of {len(NAMES)} passed"
    ]


def test_the_exercises_page_lists_every_exercise_with_its_section():
    page = (Path(__file__).resolve().parents[1] / "docs/learn/exercises.md").read_text()
    for exercise in EXERCISES.values():
        link = exercise.page.removeprefix("learn/")
        link = link if link != exercise.page else f"../{exercise.page}"
        assert f"| `{exercise.name}` | [{exercise.heading}]({link}#" in page
        assert f"{link}#{exercise.section})" in page


def test_each_concept_page_names_its_exercises():
    docs = Path(__file__).resolve().parents[1] / "docs"
    for page in PAGES:
        text = (docs / page).read_text()
        assert '!!! tip "Try it yourself"' in text, page
        for exercise in EXERCISES.values():
            if exercise.page == page:
                assert f"`{exercise.name}`" in text.split("Try it yourself")[1], page
