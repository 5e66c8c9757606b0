"""Checks of the page "Look inside a Transformer": ``induction_score``, ``lens``,
``head_attribution``.

The references index and sum in plain loops and matrix products (PyTorch's
``layer_norm`` and ``log_softmax`` where there is one), independent of the library's
einsums.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor

from named_transformer.exercises.checks._references import _mm, _mt, _softmax
from named_transformer.exercises.checks._support import (
    Check,
    _close,
    _randn,
    _rejects,
)


# --- induction_score ------------------------------------------------------------------
def _weights(*shape: int, seed: int) -> Tensor:
    """Causal attention weights (batch heads seq seq): rows sum to 1 over the past."""
    seq = shape[-1]
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    return _softmax(_randn(*shape, seed=seed) * 2, causal)


def _induction_reference(weights: Tensor, period: int, start: int) -> Tensor:
    """The weight on key j - T + 1, for each query j of the second copy, averaged."""
    picked = [weights[..., j, j - period + 1]
              for j in range(start + period, start + 2 * period)]  # fmt: skip
    return rearrange(picked, "j ... -> ... j").mean(-1)


def induction_score_matches_equation(impl: Check) -> None:
    """Random causal weights of 2 sequences x 3 heads over 2 x 4 positions, and over
    1 + 2 x 4 after a first token (start=1): the mean over the second copy's queries of
    the weight on key j - T + 1."""
    for start in (0, 1):
        weights = _weights(2, 3, start + 8, start + 8, seed=80 + start)
        expected = _induction_reference(weights, 4, start)
        same_token = rearrange([weights[..., j, j - 4]
                                for j in range(start + 4, start + 8)],
                               "j ... -> ... j").mean(-1)  # fmt: skip
        _close(impl(weights, 4, start), expected,
               "the mean weight on key j - T + 1 over the second copy's queries j",
               f"for period 4, start {start}",
               mistakes=[(same_token, "that is key j - T, the earlier occurrence "
                          "of the query's own token, not the token after it")],
               )  # fmt: skip


def induction_score_of_pure_heads(impl: Check) -> None:
    """A pure induction head (every second-copy query on key j - T + 1) scores 1; a
    previous-token head (key j - 1) and a head on the first token score 0."""
    period, seq = 5, 10
    j = torch.arange(seq)
    pure = torch.zeros(3, seq, seq, dtype=torch.float64)
    pure[0, j, (j - period + 1).clamp(min=0)] = 1.0  # induction (first copy: key 0)
    pure[1, j, (j - 1).clamp(min=0)] = 1.0  # previous token
    pure[2, :, 0] = 1.0  # everything on the first token
    expected = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    _close(impl(pure, period), expected, "the scores (1, 0, 0)",
           "for a pure induction head, a previous-token head and a head on the "
           "first token, period 5")  # fmt: skip


def induction_score_keeps_batch_axes(impl: Check) -> None:
    """Weights of shape (2, 4, 3 heads, 6, 6): one score per sequence and head."""
    weights = _weights(2, 4, 3, 6, 6, seed=82)
    _close(impl(weights, 3), _induction_reference(weights, 3, 0),
           "one score per sequence and head (the *batch axes kept)",
           "for weights of shape (2, 4, 3, 6, 6), period 3")  # fmt: skip


# --- lens -----------------------------------------------------------------------------
def _rms_norm(gain: Tensor, eps: float = 1e-6):
    return lambda x: x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * gain


def _lens_reference(stream, norm, unembedding, bias):
    normalised = stream if norm is None else norm(stream)
    logits = _mm(normalised, _mt(unembedding))
    if bias is not None:
        logits = logits + bias
    return torch.log_softmax(logits, -1)


def lens_matches_equation(impl: Check) -> None:
    """A stream of 3 layers x 2 sequences x 4 positions x width 6 through an RMSNorm
    and a vocabulary of 7 with a bias: log softmax over vocab of E'·Norm(X) + b."""
    stream, unembedding = _randn(3, 2, 4, 6, seed=83) * 3, _randn(7, 6, seed=84)
    bias, norm = _randn(7, seed=85), _rms_norm(1 + _randn(6, seed=86) ** 2)
    expected = _lens_reference(stream, norm, unembedding, bias)
    _close(impl(stream, norm, unembedding, bias), expected,
           "log softmax over vocab of E'·Norm(X) + b",
           "for an RMSNorm as the final norm",
           mistakes=[
               (_lens_reference(stream, None, unembedding, bias),
                "the final norm is not applied"),
               (_lens_reference(stream, norm, unembedding, bias).exp(),
                "probabilities, not log-probabilities"),
               (_lens_reference(stream, norm, unembedding, None),
                "the bias b is left out"),
           ])  # fmt: skip


def lens_without_a_norm(impl: Check) -> None:
    """A post-norm stack (norm None) and no bias: log softmax over vocab of E'·X."""
    stream, unembedding = _randn(2, 5, 6, seed=87), _randn(7, 6, seed=88)
    layer_norm = torch.nn.functional.layer_norm
    plain = _lens_reference(stream, None, unembedding, None)
    _close(impl(stream, None, unembedding), plain, "log softmax over vocab of E'·X",
           "with no final norm and no bias")  # fmt: skip
    _close(impl(stream, lambda x: layer_norm(x, (6,)), unembedding),
           _lens_reference(stream, lambda x: layer_norm(x, (6,)), unembedding, None),
           "log softmax over vocab of E'·LayerNorm(X)",
           "with torch's layer_norm as the final norm")  # fmt: skip


def lens_wrong_shape(impl: Check) -> None:
    """An unembedding of width 5 for a stream of width 6 is a shape error."""
    _rejects(lambda: impl(_randn(2, 4, 6), None, _randn(7, 5)),
             "an unembedding of width 5 for a stream of width 6")  # fmt: skip


# --- head_attribution -----------------------------------------------------------------
def _attribution_reference(contributions, final, directions, gain, eps, centre):
    """Loop over heads: torch's layer_norm's divisor (or the root mean square)."""
    if centre:
        sigma = (final.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
        contributions = contributions - contributions.mean(-1, keepdim=True)
    else:
        sigma = (final.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    shares = [((c / sigma * gain) * directions).sum(-1)
              for c in contributions.unbind(-3)]  # fmt: skip
    return rearrange(shares, "heads ... seq -> ... heads seq")


def _attribution_inputs(seed: int) -> tuple[Tensor, ...]:
    """Head contributions of 2 sequences x 3 heads x 4 positions x width 6 (a shift
    of 2, which only the centring removes), the final stream, the directions E'_t and
    a gain."""
    contributions = _randn(2, 3, 4, 6, seed=seed) + 2
    final = _randn(2, 4, 6, seed=seed + 1) * 3 + 1
    directions, gain = _randn(2, 4, 6, seed=seed + 2), 1 + _randn(6, seed=seed + 3) ** 2
    return contributions, final, directions, gain


_OWN = (
    "each head normalised by its own root mean square: the norm's divisor is "
    "the final stream's, X^L"
)


def _own_divisor(contributions, directions, gain, eps, centre) -> Tensor:
    """The mistake: each head's c divided by its own sigma, not the final stream's."""
    if centre:
        contributions = contributions - contributions.mean(-1, keepdim=True)
    sigma = (contributions.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    per_head = rearrange(directions, "b seq layer -> b 1 seq layer")
    return (contributions / sigma * gain * per_head).sum(-1)


def head_attribution_layer_norm(impl: Check) -> None:
    """A final LayerNorm (centre=True): each head's c, centred, over the final
    stream's sigma, times gamma, onto E'_t."""
    contributions, final, directions, gain = _attribution_inputs(90)
    expected = _attribution_reference(contributions, final, directions, gain, 1e-5,
                                      True)  # fmt: skip
    _close(impl(contributions, final, directions, gain, 1e-5, True), expected,
           "E'_t · (c - mean c) / sigma(X^L) * gamma for each head",
           "with a final LayerNorm (centre=True)",
           mistakes=[
               (_attribution_reference(contributions, final, directions, gain, 1e-5,
                                       False),
                "no centring: a LayerNorm subtracts the mean"),
               (_attribution_reference(contributions, final, directions,
                                       torch.ones_like(gain), 1e-5, True),
                "the gain gamma is left out"),
               (_own_divisor(contributions, directions, gain, 1e-5, True), _OWN),
           ])  # fmt: skip


def head_attribution_rms_norm(impl: Check) -> None:
    """A final RMSNorm (centre=False): c over the final stream's root mean square,
    times the gain, onto E'_t; sigma comes from X^L, not from c."""
    contributions, final, directions, gain = _attribution_inputs(94)
    expected = _attribution_reference(contributions, final, directions, gain, 1e-6,
                                      False)  # fmt: skip
    own = _own_divisor(contributions, directions, gain, 1e-6, False)
    _close(impl(contributions, final, directions, gain, 1e-6, False), expected,
           "E'_t · c / rms(X^L) * g for each head",
           "with a final RMSNorm (centre=False)",
           mistakes=[(own, _OWN)])  # fmt: skip


def head_attribution_wrong_shape(impl: Check) -> None:
    """A gain of width 5 for contributions of width 6 is a shape error."""
    contributions, final, directions, _ = _attribution_inputs(98)
    _rejects(lambda: impl(contributions, final, directions, _randn(5), 1e-5, True),
             "a gain of width 5 for contributions of width 6")  # fmt: skip


CHECKS: dict[str, tuple[Check, ...]] = {
    "induction_score": (induction_score_matches_equation,
                        induction_score_of_pure_heads,
                        induction_score_keeps_batch_axes),
    "lens": (lens_matches_equation, lens_without_a_norm, lens_wrong_shape),
    "head_attribution": (head_attribution_layer_norm, head_attribution_rms_norm,
                         head_attribution_wrong_shape),
}  # fmt: skip
