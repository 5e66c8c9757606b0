r"""Watch a circuit form: train a two-layer attention-only Transformer until an
induction head appears, recording the heads' scores as it trains (Olsson et al. 2022,
"In-context Learning and Induction Heads"; Elhage et al. 2021).

The model reads characters: :data:`ALPHABET`, 28 symbols (:func:`encode`). Each
training batch mixes two kinds of rows. Some are windows of real text (the corpus of
``train text``: ``pydoc_data``'s help topics, or ``--corpus FILE``). The others are
rows of random tokens in which one segment is repeated: its length (4 to half the
context) and its place are drawn for every row, so that the only way to predict the
copy is to look up what followed the current token the last time it appeared (a
repeat at a fixed distance would be learned as that distance: a positional shortcut,
not induction). Real text alone forms no induction head within the budget (the page
gives the measurement): a repeat long enough to reward copying is rare in 32
characters, while the bigrams and trigrams that a model learns first are everywhere.

Every ``eval_every`` steps :func:`train_induction` records, with
:func:`~named_transformer.recording.record` and the analyses of
:mod:`~named_transformer.inside.analyses`:

- each head's induction score and previous-token score on repeated random tokens
  (the mean over a few periods, so that a head attending a fixed distance back does
  not score as an induction head);
- the loss on the repeated half of those sequences;
- the in-context-learning score (Olsson et al.): the loss at late tokens (the
  second half of a window) minus the loss at an early one, on held-out text (the
  corpus's last 10%),
  $\text{ICL} = \bar\ell_{\text{late}} - \bar\ell_{\text{early}}$ (negative: the
  model predicts better with more context).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from einops import pack, rearrange, reduce, repeat
from jaxtyping import Float, Int
from torch import Tensor

import named_transformer.inside as inside
from named_transformer.axes import checked
from named_transformer.models.attention_only import (
    composition_score,
    ov_circuit,
    qk_circuit,
)
from named_transformer.models.config import TransformerConfig
from named_transformer.models.language_model import LanguageModel
from named_transformer.workflows.text import _windows, read_corpus
from named_transformer.workflows.threads import threads

__all__ = [
    "ALPHABET",
    "InductionCurves",
    "InductionSettings",
    "ablation_effects",
    "attention_only_model",
    "composition_scores",
    "curves_figure",
    "encode",
    "head_scores",
    "held_out",
    "icl_score",
    "phase_change",
    "position_losses",
    "repeated_segments",
    "split_text",
    "text_tokens",
    "token_losses",
    "train_induction",
    "train_induction_command",
]

ATTENDED = "blocks.layers.{}.self_attention.attended"

# --8<-- [start:encode]
ALPHABET = "abcdefghijklmnopqrstuvwxyz ."
"""The model's 28 tokens: token ``i`` is ``ALPHABET[i]``. Letters are lowercased,
every whitespace is the space, and every other character is ``.``."""
_TOKEN = {symbol: i for i, symbol in enumerate(ALPHABET)}


@checked
def encode(text: str) -> Int[Tensor, " seq"]:
    """One token of :data:`ALPHABET` for every character of ``text``."""
    space, other = _TOKEN[" "], _TOKEN["."]
    ids = [_TOKEN.get(c.lower(), space if c.isspace() else other) for c in text]
    return torch.tensor(ids, dtype=torch.long)


@checked
def text_tokens(text: str) -> Int[Tensor, " seq"]:
    """The corpus as the recipe reads it: every run of whitespace one space (the
    help topics indent their code examples), then :func:`encode`."""
    return encode(" ".join(text.split()))


# --8<-- [end:encode]


# --8<-- [start:InductionSettings]
@dataclass(frozen=True)
class InductionSettings:
    """The recipe: a small vocabulary and context, so that the circuit forms in
    minutes on a CPU (the plateau before it grows quickly with both); ``text_rows``
    of every batch are windows of real text, the others repeated random segments."""

    vocab: int = len(ALPHABET)  # the random rows draw the first `vocab` symbols
    context: int = 32  # |seq| of a training row
    layers: int = 2
    layer: int = 32  # |layer|
    heads: int = 2
    rate: float = 1e-2  # AdamW's learning rate (no weight decay)
    batch_size: int = 32
    text_rows: int = 8  # of each batch: real text (0: random rows only)
    steps: int = 4000
    eval_every: int = 100
    shortest: int = 4  # the repeated segment's length: shortest ... context // 2
    periods: tuple[int, ...] = (7, 11, 16)  # of the repeated tokens scored
    eval_rows: int = 32  # repeated sequences of each period scored
    text_windows: int = 1024  # held-out text windows of the ICL score
    early: int = 3  # the ICL score's early token, of a held-out text window
    seed: int = 0
    # torch's threads while training and scoring: the products are tiny, and on a
    # busy 2-core machine one thread took 30 ms a step where two took 500 to 900 ms
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("vocab", "context", "layers", "layer", "heads", "batch_size",
                     "steps", "eval_every", "eval_rows", "text_windows",
                     "threads"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 2 <= self.shortest <= self.context // 2:
            raise ValueError(
                f"shortest={self.shortest} must be in 2 … context // 2 = "
                f"{self.context // 2}"
            )
        if not self.periods or max(self.periods) * 2 > self.context:
            raise ValueError(
                f"periods {self.periods}: two copies of each must fit in the "
                f"context of {self.context}"
            )
        if not 1 <= self.early < self.context // 2:
            raise ValueError(
                f"early={self.early} must be in 1 … context // 2 - 1, before the "
                "late half"
            )
        if not 0 <= self.text_rows <= self.batch_size:
            raise ValueError(
                f"text_rows={self.text_rows} must be in 0 … batch_size "
                f"({self.batch_size})"
            )
        if not 2 <= self.vocab <= len(ALPHABET):
            raise ValueError(
                f"vocab={self.vocab} must be in 2 … {len(ALPHABET)}: the random rows "
                "draw from the first vocab symbols of ALPHABET"
            )


# --8<-- [end:InductionSettings]


# --8<-- [start:attention_only_model]
def attention_only_model(settings: InductionSettings) -> LanguageModel:
    """The recipe's model, untrained: ``settings.layers`` attention-only layers of
    ``settings.heads`` heads, ``settings.layer`` wide, over the :data:`ALPHABET`."""
    config = TransformerConfig.attention_only(
        decoder_layers=settings.layers, layer=settings.layer, heads=settings.heads
    )
    return LanguageModel(len(ALPHABET), config)


# --8<-- [end:attention_only_model]


# --8<-- [start:repeated_segments]
@checked
def repeated_segments(
    vocab: int, context: int, batch: int, generator: torch.Generator,
    shortest: int = 4,
) -> Int[Tensor, "batch seq"]:  # fmt: skip
    """``batch`` rows of ``context + 1`` random ids in which a segment of ``shortest``
    … ``context // 2`` tokens, drawn per row, is followed by its copy at a place
    drawn per row (the row's inputs and its next tokens)."""
    length = context + 1
    rows = torch.randint(0, vocab, (batch, length), generator=generator)
    segment = torch.randint(shortest, context // 2 + 1, (batch,), generator=generator)
    room = (length - 2 * segment + 1).to(torch.float)  # where the first copy fits
    first = (torch.rand(batch, generator=generator) * room).long()
    index = repeat(torch.arange(length), "seq -> batch seq", batch=batch)
    first, segment = rearrange(first, "b -> b 1"), rearrange(segment, "b -> b 1")
    copy = (index >= first + segment) & (index < first + 2 * segment)
    source = torch.where(copy, index - segment, index)
    return rows.gather(-1, source)


@checked
def token_losses(
    log_probs: Float[Tensor, "*batch seq vocab"], targets: Int[Tensor, "*batch seq"]
) -> Float[Tensor, "*batch seq"]:
    r"""$-\log p(t_{j+1} \mid t_{\le j})$ at every position $j$."""
    picked = log_probs.gather(-1, rearrange(targets, "... seq -> ... seq 1"))
    return -rearrange(picked, "... seq 1 -> ... seq")


# --8<-- [end:repeated_segments]


# --8<-- [start:head_scores]
def head_scores(
    model: LanguageModel, settings: InductionSettings,
    edits: Mapping[str, inside.Edit] | None = None,
) -> dict[str, list]:  # fmt: skip
    """Each head's induction and previous-token scores (``layers heads``, the mean
    over ``settings.periods``) and the loss on the repeated half, with ``edits``
    applied (:func:`~named_transformer.recording.ablate`)."""
    induction, previous, repeated = [], [], []
    with threads(settings.threads), torch.no_grad(), inside.edit(model, edits or {}):
        for period in settings.periods:
            tokens = inside.repeated_tokens(
                settings.vocab, period, settings.eval_rows, seed=period
            )
            with inside.record(model, "*.weights") as found:
                log_probs = model(tokens)
            induction.append(inside.induction_scores(found, tokens).tensor)
            previous.append(inside.previous_token_scores(found).tensor)
            second = token_losses(log_probs[:, period:-1], tokens[:, period + 1 :])
            repeated.append(float(second.mean()))
    return {
        "induction": reduce(induction, "periods layers heads -> layers heads",
                            "mean").tolist(),  # fmt: skip
        "previous": reduce(previous, "periods layers heads -> layers heads",
                           "mean").tolist(),  # fmt: skip
        "repeated_loss": sum(repeated) / len(repeated),
    }


# --8<-- [end:head_scores]


# --8<-- [start:icl_score]
@checked
def split_text(
    text: str, context: int
) -> tuple[Int[Tensor, "..."], Int[Tensor, "..."]]:
    """The corpus's tokens (:func:`text_tokens`): the first 90% to train on, the last
    10% held out, as ``train text`` splits it (two lengths: ``...``)."""
    ids = text_tokens(text)
    cut = int(0.9 * len(ids))
    if len(ids) - cut <= context + 1:
        raise ValueError(
            f"the corpus has {len(ids):,} tokens: its held-out 10% is shorter than "
            f"one window of {context + 1}"
        )
    return ids[:cut], ids[cut:]


@checked
def held_out(
    ids: Int[Tensor, "..."], settings: InductionSettings
) -> tuple[Int[Tensor, "batch seq"], Int[Tensor, "batch seq"]]:
    """``text_windows`` evenly spaced windows of the held-out text ``ids`` (a length
    of its own: ``...``): their inputs and next tokens."""
    last = len(ids) - settings.context - 1
    starts = torch.linspace(0, last, min(settings.text_windows, last + 1)).long()
    return _windows(ids, starts, settings.context)


@checked
def position_losses(
    model: LanguageModel, inputs: Int[Tensor, "batch seq"],
    targets: Int[Tensor, "batch seq"], edits: Mapping[str, inside.Edit] | None = None,
) -> Float[Tensor, " seq"]:  # fmt: skip
    """The mean loss at every position of the windows ``inputs`` (nats)."""
    with torch.no_grad(), inside.edit(model, edits or {}):
        losses = token_losses(model(inputs), targets)
    return reduce(losses, "batch seq -> seq", "mean")


@checked
def icl_score(losses: Float[Tensor, " seq"], early: int) -> float:
    r"""The mean of the position ``losses`` over the second half of the window minus
    the loss at token ``early`` (Olsson et al.'s in-context-learning score, late
    minus early; negative: later tokens are predicted better, from what the window
    said before)."""
    return float(losses[len(losses) // 2 :].mean() - losses[early - 1])


# --8<-- [end:icl_score]


# --8<-- [start:InductionCurves]
@dataclass
class InductionCurves:
    """What :func:`train_induction` recorded at every evaluation: ``induction`` and
    ``previous`` are ``steps × layers × heads``."""

    settings: dict[str, Any]
    step: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    repeated_loss: list[float] = field(default_factory=list)
    text_loss: list[float] = field(default_factory=list)  # held-out text, nats/char
    icl: list[float] = field(default_factory=list)  # on the held-out text
    induction: list[list[list[float]]] = field(default_factory=list)
    previous: list[list[list[float]]] = field(default_factory=list)

    def best_induction(self, layer: int = -1) -> list[float]:
        """The best head's induction score of ``layer`` at every evaluation."""
        return [max(scores[layer]) for scores in self.induction]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --8<-- [end:InductionCurves]


# --8<-- [start:train_induction]
@checked
def train_induction(
    settings: InductionSettings | None = None, *, text: str | None = None,
    progress: bool = True,
) -> tuple[
    LanguageModel, InductionCurves, list[Float[Tensor, "heads seq_q seq"]]
]:  # fmt: skip
    """Train the attention-only model on batches of ``text`` (the default corpus for
    None) and :func:`repeated_segments`; return it, its curves, and its attention
    weights on one repeated sequence before training (``layers`` tensors
    ``heads seq_q seq``), for the before-and-after maps."""
    s = settings or InductionSettings()
    corpus = split_text(read_corpus(None) if text is None else text, s.context)
    with threads(s.threads):
        return _train(s, corpus, progress)


def _batch(
    s: InductionSettings, corpus: Tensor, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """One step's inputs and next tokens: ``text_rows`` windows of the corpus at
    random places, the other rows :func:`repeated_segments`."""
    rows = repeated_segments(s.vocab, s.context, s.batch_size - s.text_rows,
                             generator, s.shortest)  # fmt: skip
    starts = torch.randint(0, len(corpus) - s.context, (s.text_rows,),
                           generator=generator)  # fmt: skip
    inputs, targets = _windows(corpus, starts, s.context)
    # the random rows, then the text rows, along one batch axis
    stacked_inputs, _ = pack([rows[:, :-1], inputs], "* seq")
    stacked_targets, _ = pack([rows[:, 1:], targets], "* seq")
    return stacked_inputs, stacked_targets


# --8<-- [end:train_induction]


# --8<-- [start:training]
def _train(
    s: InductionSettings, corpus: tuple[Tensor, Tensor], progress: bool
) -> tuple[LanguageModel, InductionCurves, list[Tensor]]:
    torch.manual_seed(s.seed)
    model = attention_only_model(s)
    optimizer = torch.optim.AdamW(model.parameters(), lr=s.rate, weight_decay=0.0)
    generator = torch.Generator().manual_seed(s.seed + 1)
    windows, curves = held_out(corpus[1], s), InductionCurves(asdict(s))
    before = example_weights(model, s)
    start, losses = time.perf_counter(), []

    def evaluate(step: int) -> None:
        scores = head_scores(model, s)
        text = position_losses(model, *windows)
        curves.step.append(step)
        curves.seconds.append(round(time.perf_counter() - start, 2))
        curves.train_loss.append(sum(losses) / len(losses) if losses else None)
        curves.repeated_loss.append(scores["repeated_loss"])
        curves.text_loss.append(float(text.mean()))
        curves.icl.append(icl_score(text, s.early))
        curves.induction.append(scores["induction"])
        curves.previous.append(scores["previous"])
        losses.clear()
        if progress:
            print(f"step {step}/{s.steps}  loss {curves.repeated_loss[-1]:.3f} "
                  f"(repeated half), {curves.text_loss[-1]:.3f} (text)  induction "
                  f"{curves.best_induction()[-1]:.2f}  ICL {curves.icl[-1]:+.2f}  "
                  f"{curves.seconds[-1]:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip

    evaluate(0)
    for step in range(1, s.steps + 1):
        inputs, targets = _batch(s, corpus[0], generator)
        loss = token_losses(model(inputs), targets).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if step % s.eval_every == 0 or step == s.steps:
            evaluate(step)
    return model, curves, before


# --8<-- [end:training]


@checked
def example_weights(
    model: LanguageModel, settings: InductionSettings, period: int | None = None
) -> list[Float[Tensor, "heads seq_q seq"]]:
    """Each layer's weights (``heads seq_q seq``) on one repeated random sequence of
    ``period`` tokens (the longest scored period when None)."""
    period = period or max(settings.periods)
    tokens = inside.repeated_tokens(settings.vocab, period, 1, seed=12345)
    weights = "blocks.layers.{}.self_attention.weights"
    with torch.no_grad(), inside.record(model, weights) as found:
        model(tokens)
    return [w.tensor[0] for w in found.each(weights)]


# --8<-- [start:phase_change]
def phase_change(
    steps: list[int], scores: list[float], rise: float = 0.25
) -> tuple[int, int] | None:
    """The steps at which ``scores`` climbs from 10% to 90% of the way from its
    first value to its highest, when it climbs at least ``rise``, and does so in
    under a fifth of the run (abruptly); None otherwise."""
    low, high = scores[0], max(scores)
    if high - low < rise:
        return None
    pairs = list(zip(steps, scores, strict=True))
    begin = next(step for step, v in pairs if v >= low + 0.1 * (high - low))
    end = next(step for step, v in pairs if v >= low + 0.9 * (high - low))
    return (begin, end) if end - begin <= (steps[-1] - steps[0]) / 5 else None


# --8<-- [end:phase_change]


# --8<-- [start:composition_scores]
def composition_scores(model: LanguageModel) -> list[list[float]]:
    """K-composition of every head $h_1$ of layer 1 with every head $h_0$ of layer
    0 (:func:`~named_transformer.models.attention_only.composition_score`):
    ``scores[h1][h0]``."""
    first = model.blocks.layers[0].self_attention
    second = model.blocks.layers[1].self_attention
    with threads(1), torch.no_grad():
        return [
            [
                float(composition_score(
                    qk_circuit(second.w_q[h1], second.w_k[h1]),
                    ov_circuit(first.w_v[h0], first.w_o[h0]),
                ))  # fmt: skip
                for h0 in range(first.heads)
            ]
            for h1 in range(second.heads)
        ]


# --8<-- [end:composition_scores]


# --8<-- [start:ablation_effects]
def ablation_effects(
    model: LanguageModel, settings: InductionSettings, text: str | None = None
) -> list[dict[str, Any]]:
    """Every head zeroed in turn (its output $Y_h$, ``attended``): the heads'
    induction scores, the loss and the ICL score on the held-out part of ``text``
    (the default corpus for None) without it, after a row with none zeroed."""
    ids = split_text(read_corpus(None) if text is None else text, settings.context)
    windows = held_out(ids[1], settings)
    runs: list[tuple[str, dict[str, inside.Edit]]] = [("none", {})]
    for layer, block in enumerate(model.blocks.layers):
        for head in range(block.self_attention.heads):
            ablated = {ATTENDED.format(layer): inside.ablate("heads", head)}
            runs.append((f"{layer}.{head}", ablated))
    with threads(settings.threads):
        rows = []
        for name, edits in runs:
            losses = position_losses(model, *windows, edits)
            rows.append({"ablated": name, **head_scores(model, settings, edits),
                         "text_loss": float(losses.mean()),
                         "icl": icl_score(losses, settings.early)})  # fmt: skip
        return rows


# --8<-- [end:ablation_effects]


# --8<-- [start:command]
def curves_figure(
    curves: InductionCurves, path: str | Path, *,
    control: InductionCurves | None = None, phase: tuple[int, int] | None = None,
) -> None:  # fmt: skip
    """Every head's scores over the steps (left; the one-layer ``control``'s best
    head dashed), the loss on the repeated half and the ICL score (right), the
    ``phase`` change shaded; written to ``path``."""
    from named_transformer import plot

    figure, (left, right) = plot._pyplot().subplots(1, 2, figsize=(11, 3.8))
    scores, styles = {}, {}
    for layer, heads in enumerate(curves.induction[0]):
        for head in range(len(heads)):
            scores[f"induction {layer}.{head}"] = [
                step[layer][head] for step in curves.induction
            ]
    for head in range(len(curves.previous[0][0])):
        name = f"previous-token 0.{head}"
        scores[name] = [step[0][head] for step in curves.previous]
        styles[name] = {"linestyle": ":"}
    if control is not None:
        name = "one-layer control: best induction"
        scores[name] = control.best_induction(0)
        styles[name] = {"linestyle": "--", "color": "grey"}
    plot.line_plot(curves.step, scores, ax=left, xlabel="step", ylabel="score",
                   title="heads' scores", styles=styles)  # fmt: skip
    losses = {"loss on the repeated half (nats)": curves.repeated_loss,
              "ICL score (late - early, nats)": curves.icl}  # fmt: skip
    plot.line_plot(curves.step, losses, ax=right, xlabel="step", ylabel="nats",
                   title="loss and in-context learning")  # fmt: skip
    if phase is not None:
        for ax in (left, right):
            ax.axvspan(*phase, color="orange", alpha=0.25, label="phase change")
        left.legend(fontsize=7)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plot._pyplot().close(figure)


def train_induction_command(args: Any) -> int:
    """``python -m named_transformer train induction``: train the recipe (``--steps``,
    ``--seed``, ``--eval-every``, ``--batch-size``, ``--layers`` over its defaults)
    on ``--corpus`` (``train text``'s, pydoc_data's help topics by default), then
    write ``curves.json``, ``model.pt`` and ``curves.png`` to ``--out``."""
    given = {name: getattr(args, name) for name in
             ("steps", "seed", "eval_every", "batch_size", "layers")
             if getattr(args, name, None) is not None}  # fmt: skip
    settings = InductionSettings(**given)
    text = read_corpus(getattr(args, "corpus", None), settings.context)
    out = Path(args.out or Path("runs") / "induction")
    model, curves, _ = train_induction(settings, text=text,
                                       progress=not args.no_progress)  # fmt: skip
    phase = phase_change(curves.step, curves.best_induction())
    out.mkdir(parents=True, exist_ok=True)
    run = {**curves.to_json(), "phase_change": phase}
    (out / "curves.json").write_text(json.dumps(run) + "\n")
    torch.save(model.state_dict(), out / "model.pt")
    seen = "none visible" if phase is None else f"steps {phase[0]} to {phase[1]}"
    layers = f"{settings.layers} attention-only layer" + "s" * (settings.layers > 1)
    print(f"trained {layers} for {settings.steps} "
          f"steps in {curves.seconds[-1]:.0f} s: best layer-{settings.layers - 1} "
          f"induction score {curves.best_induction()[-1]:.2f}, ICL score "
          f"{curves.icl[-1]:+.2f} nats; phase change: {seen}; curves: "
          f"{out / 'curves.json'}")  # fmt: skip
    if not args.no_figure:
        figure = Path(args.figure or out / "curves.png")
        curves_figure(curves, figure, phase=phase)
        print(f"figure: {figure}")
    return 0


# --8<-- [end:command]
