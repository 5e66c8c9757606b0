r"""Decoding strategies: greedy, sampling and beam search over any next-token step.

A trained model gives $\log p(y_j \mid y_{<j}, x)$. Decoding picks the tokens one at a
time:

* **greedy**:
  $y_j = \operatorname{argmax}_{\mathsf{vocab}} \log p(\cdot \mid y_{<j}, x)$;
* **sampling**: $y_j \sim \nfun{vocab}{softmax}(\beta \log p)$ with the inverse
  temperature $\beta = 1/T$ of the NYU notes ($\beta \to \infty$ is greedy,
  $\beta = 1$ the model's own distribution), optionally among the ``top_k`` most likely
  tokens only, or the nucleus of ``top_p`` (:func:`nucleus_mask`);
* **beam search**: keep the ``width`` best partial sequences by summed log-probability;
  finished ones are ranked by $\log p(Y) / \text{lp}(Y)$ with the length penalty
  $\text{lp}(Y) = ((5 + |Y|)/6)^{\alpha}$ (Wu et al., 2016), and the best finished one
  is the result (the best unfinished one only where none finished).

A *step* is any callable from the tokens so far to next-token log-probabilities: a
model recomputing the whole prefix, or the cached
:class:`~named_transformer.decoding.incremental.IncrementalDecoder`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from einops import pack, rearrange, repeat
from jaxtyping import Bool, Float, Int
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core.softmax import softmax
from named_transformer.decoding.incremental import IncrementalDecoder

__all__ = [
    "Decoded",
    "beam_search",
    "greedy",
    "length_penalty",
    "nucleus_mask",
    "sample",
    "stream",
    "strip_after_eos",
]


@dataclass
class Decoded:
    """Generated tokens (after the start tokens), the log-probabilities of every step,
    scores."""

    tokens: Int[Tensor, "batch seq"]
    log_probs: Float[Tensor, "batch seq vocab"] | None = None
    scores: Float[Tensor, " batch"] | None = None
    extra: dict = field(default_factory=dict)


def _append(tokens: Tensor, new: Tensor) -> Tensor:
    return pack([tokens, new], "batch *")[0]


def _steps(
    step: Callable[[Tensor], Tensor],
    start: Tensor,
    max_len: int,
    eos: int | None,
    pad: int,
    choose: Callable[[Tensor], Tensor],
) -> Iterator[tuple[Tensor, Tensor]]:
    """(the tokens so far, this step's log-probabilities), one step at a time, until
    every row has chosen ``eos`` or ``max_len`` tokens were added."""
    tokens = start
    finished = torch.zeros(start.shape[0], dtype=torch.bool, device=start.device)
    for _ in range(max_len):
        log_probs = step(tokens)
        chosen = choose(log_probs)
        chosen = torch.where(finished, torch.full_like(chosen, pad), chosen)
        tokens = _append(tokens, rearrange(chosen, "batch -> batch 1"))
        yield tokens, log_probs
        finished = finished | (chosen == eos) if eos is not None else finished
        if bool(finished.all()):
            return


def _generate(
    step: Callable[[Tensor], Tensor],
    start: Tensor,
    max_len: int,
    eos: int | None,
    pad: int,
    choose: Callable[[Tensor], Tensor],
) -> Decoded:
    tokens, steps = start, []
    for grown, log_probs in _steps(step, start, max_len, eos, pad, choose):
        tokens = grown
        steps.append(log_probs)
    generated = tokens[:, start.shape[-1] :]
    return Decoded(generated, rearrange(steps, "seq batch vocab -> batch seq vocab"))


def _most_likely(log_probs: Tensor) -> Tensor:
    return log_probs.argmax(-1)  # allow-raw: the most likely token along vocab


# --8<-- [start:greedy]
@checked
def greedy(
    step: Callable[[Tensor], Tensor],
    start: Int[Tensor, "batch seq"],
    max_len: int,
    eos: int | None = None,
    pad: int = 0,
) -> Decoded:
    r"""$y_j = \nfun{vocab}{argmax} \log p(\cdot \mid y_{<j})$ until ``eos`` or
    ``max_len`` tokens.

    ``step`` maps the prefix so far to next-token log-probabilities (an
    :class:`IncrementalDecoder`); ``start`` is the prefix to continue (``<bos>`` for an
    encoder–decoder, the prompt for a language model). After ``eos`` a row gets
    ``pad``.
    """
    return _generate(step, start, max_len, eos, pad, _most_likely)


# --8<-- [end:greedy]


# --8<-- [start:nucleus_mask]
@checked
def nucleus_mask(
    probabilities: Float[Tensor, "*batch vocab"], top_p: float
) -> Bool[Tensor, "*batch vocab"]:
    r"""The nucleus of Holtzman et al. (2020): the fewest most likely tokens whose
    probabilities sum to at least ``top_p``.

    With the tokens sorted by probability, $p_{(1)} \ge p_{(2)} \ge \dots$, token
    $(r)$ is kept when the tokens before it sum to less than $p$:
    $\sum_{s < r} p_{(s)} < p$, so the most likely token is always kept.
    """
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    ordered = probabilities.sort(-1, descending=True).values  # allow-raw: by vocab
    before = ordered.cumsum(-1) - ordered  # allow-raw: the mass of the likelier ones
    kept = (before < top_p).sum(-1, keepdim=True)  # allow-raw: the nucleus's size
    smallest = ordered.gather(-1, kept - 1)  # the least likely token kept
    return probabilities >= smallest


# --8<-- [end:nucleus_mask]


def _sampler(
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
) -> Callable[[Tensor], Tensor]:
    """The draw of :func:`sample`: one token per row from the tempered softmax."""
    if temperature <= 0:
        raise ValueError(
            f"temperature must be > 0 (use greedy for T -> 0), got {temperature}"
        )
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")

    def choose(log_probs: Tensor) -> Tensor:
        mask = None
        if top_k is not None and top_k < log_probs.shape[-1]:
            kth = log_probs.topk(top_k).values[:, -1:]
            mask = log_probs >= kth
        probabilities = softmax(log_probs, mask, beta=1.0 / temperature)
        if top_p is not None and top_p < 1:
            nucleus = nucleus_mask(probabilities, top_p)
            mask = nucleus if mask is None else mask & nucleus
            probabilities = softmax(log_probs, mask, beta=1.0 / temperature)
        return rearrange(
            torch.multinomial(probabilities, 1, generator=generator), "b 1 -> b"
        )

    return choose


# --8<-- [start:sample]
@checked
def sample(
    step: Callable[[Tensor], Tensor],
    start: Int[Tensor, "batch seq"],
    max_len: int,
    eos: int | None = None,
    pad: int = 0,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Decoded:
    r"""$y_j \sim \nfun{vocab}{softmax}(\beta \log p(\cdot \mid y_{<j}))$,
    $\beta = 1/T$ (the NYU notes).

    ``top_k`` keeps only the $k$ most likely tokens, ``top_p`` only the nucleus of
    the tempered distribution (:func:`nucleus_mask`): both are the named softmax's
    mask. ``generator`` makes the draws reproducible.
    """
    choose = _sampler(temperature, top_k, top_p, generator)
    return _generate(step, start, max_len, eos, pad, choose)


# --8<-- [end:sample]


# --8<-- [start:stream]
@checked
def stream(
    step: Callable[[Tensor], Tensor],
    start: Int[Tensor, "batch seq"],
    max_len: int,
    eos: int | None = None,
    *,
    temperature: float = 0.0,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Iterator[Int[Tensor, " batch"]]:
    """The tokens of :func:`greedy` (``temperature=0``) or :func:`sample`, yielded
    one step at a time as they are chosen, for a caller that shows them as they
    come. It stops after every row chose ``eos``, or after ``max_len`` tokens."""
    choose = (
        _most_likely
        if temperature == 0
        else _sampler(temperature, None, top_p, generator)
    )
    for tokens, _ in _steps(step, start, max_len, eos, 0, choose):
        yield tokens[:, -1]


# --8<-- [end:stream]


# --8<-- [start:length_penalty]
@checked
def length_penalty(
    length: int | Float[Tensor, "*batch"], alpha: float
) -> float | Float[Tensor, "*batch"]:
    r"""$\text{lp}(Y) = ((5 + |Y|) / 6)^{\alpha}$ (Wu et al., 2016);
    $\alpha = 0$: no penalty."""
    return ((5 + length) / 6) ** alpha


# --8<-- [end:length_penalty]


# --8<-- [start:beam_search]
@checked
def beam_search(
    decoder: IncrementalDecoder,
    start: Int[Tensor, "batch seq"],
    max_len: int,
    eos: int,
    pad: int = 0,
    *,
    width: int = 4,
    alpha: float = 0.6,
) -> Decoded:
    r"""Keep the ``width`` most likely prefixes; return each row's best finished
    sequence.

    A hypothesis's score is its summed log-probability $\log p(Y)$, by which the beams
    are kept; a finished one (ended with ``eos``) is ranked by
    $\log p(Y)/\text{lp}(Y)$. Each row returns its best finished hypothesis, whenever
    it ended (also one that later fell out of the beam), even if an unfinished beam
    scores higher; only a row where none finished within ``max_len`` tokens returns
    its best unfinished beam, ranked the same way. ``decoder`` is an
    :class:`IncrementalDecoder` for the ``batch`` rows of ``start``; it is expanded to
    ``batch × width`` rows and reordered as beams are kept.
    """
    if width < 1:
        raise ValueError(f"beam width must be >= 1, got {width}")
    batch, device = start.shape[0], start.device
    rows = repeat(
        torch.arange(batch, device=device), "batch -> (batch width)", width=width
    )
    decoder.select(rows)
    tokens = start[rows]
    scores = torch.full((batch, width), -math.inf, device=device)
    # all beams start equal: keep one so the first step is not repeated
    scores[:, 0] = 0.0
    finished = torch.zeros(batch * width, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch * width, device=device)
    # each row's best finished hypothesis so far: its normalised score and tokens
    best_finished = torch.full((batch,), -math.inf, device=device)
    kept = start.new_full((batch, 0), pad)
    for _ in range(max_len):
        log_probs = decoder(tokens)
        vocab = log_probs.shape[-1]
        # a finished beam may only continue with pad, at no cost
        stay = torch.full_like(log_probs, -math.inf)
        stay[:, pad] = 0.0
        log_probs = torch.where(rearrange(finished, "b -> b 1"), stay, log_probs)
        candidates = rearrange(scores, "batch width -> (batch width) 1") + log_probs
        flat = rearrange(
            candidates, "(batch width) vocab -> batch (width vocab)", width=width
        )
        scores, best = flat.topk(width)
        beam, token = best // vocab, best % vocab
        chosen = (
            rearrange(torch.arange(batch, device=device), "batch -> batch 1") * width
            + beam
        )
        chosen = rearrange(chosen, "batch width -> (batch width)")
        token = rearrange(token, "batch width -> (batch width)")
        decoder.select(chosen)
        was_finished = finished[chosen]
        lengths = lengths[chosen] + (~was_finished).to(lengths.dtype)
        finished = was_finished | (token == eos)
        tokens = _append(tokens[chosen], rearrange(token, "b -> b 1"))
        ended = rearrange(finished & ~was_finished, "(b w) -> b w", w=width)
        kept = _append(kept, rearrange(kept.new_full((batch,), pad), "b -> b 1"))
        best_finished, kept = _keep_best_finished(
            _normalised(scores, lengths, alpha).masked_fill(~ended, -math.inf),
            tokens[:, start.shape[-1] :], best_finished, kept,
        )  # fmt: skip
        if bool(finished.all()):
            break
    normalised = _normalised(scores, lengths, alpha)
    winner = normalised.argmax(-1)  # allow-raw: best beam per row (none finished)
    rows = torch.arange(batch, device=device)
    unfinished = tokens[rows * width + winner][:, start.shape[-1] :]
    any_finished = best_finished > -math.inf
    return Decoded(
        torch.where(rearrange(any_finished, "b -> b 1"), kept, unfinished),
        scores=torch.where(any_finished, best_finished, normalised[rows, winner]),
        extra={
            "beams": rearrange(
                tokens[:, start.shape[-1] :], "(b w) s -> b w s", w=width
            )
        },
    )


def _normalised(scores: Tensor, lengths: Tensor, alpha: float) -> Tensor:
    r"""$\log p(Y)/\text{lp}(Y)$ of every beam, ``batch × width``."""
    width = scores.shape[-1]
    penalty = rearrange(length_penalty(lengths, alpha), "(b w) -> b w", w=width)
    return scores / penalty


def _keep_best_finished(
    ended: Tensor, generated: Tensor, best: Tensor, kept: Tensor
) -> tuple[Tensor, Tensor]:
    """Each row's best finished hypothesis: the one of ``best`` and ``kept`` or, if it
    scores higher, the best of the beams that ended at this step (``ended``: their
    normalised scores, -inf for the others)."""
    width = ended.shape[-1]
    top, beam = ended.max(-1)  # allow-raw: best beam that ended, per row
    better = top > best
    rows = torch.arange(ended.shape[0], device=ended.device)
    newest = generated[rows * width + beam]
    return torch.where(better, top, best), torch.where(
        rearrange(better, "b -> b 1"), newest, kept
    )


# --8<-- [end:beam_search]


@checked
def strip_after_eos(tokens: Int[Tensor, "batch seq"], eos: int) -> list[list[int]]:
    """Each row's tokens up to (not including) its first ``eos``."""
    rows = []
    for row in tokens.tolist():
        rows.append(row[: row.index(eos)] if eos in row else row)
    return rows
