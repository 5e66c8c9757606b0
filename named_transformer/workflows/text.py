r"""Train the decoder-only model on real text, one character (or byte) a token.

    python -m named_transformer train text                     # pydoc's help topics
    python -m named_transformer train text --corpus book.txt   # any UTF-8 file

The corpus is any UTF-8 file; with none it is the help topics of the standard
library's ``pydoc_data`` (what ``help("if")`` prints: about 0.46 MB of English about
Python, shipped with every Python, under the PSF licence). The first 90% trains, the
last 10% validates. Each token is a character (the vocabulary: the corpus's distinct
characters) or a byte (``level="bytes"``: 256 tokens, any text).

The model is :class:`~named_transformer.models.language_model.LanguageModel` in GPT-2's
arrangement (pre-norm blocks, GELU, learned positions, tied output) and the loss is
the plain cross-entropy of every next token, reported in **bits per character**,

$$\text{bpc} = -\frac{1}{|\mathsf{seq}|}\sum_j \log_2 p(c_{j+1} \mid c_{\le j})
  = \frac{\text{loss in nats}}{\ln 2}.$$

Training stops once the validation bpc reaches ``target`` (or at ``steps``, or after
``max_seconds``); it prints a sample every few evaluations, writes ``loss.png`` and a
checkpoint, which :func:`generate_from_checkpoint` continues text from.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from einops import rearrange
from jaxtyping import Int
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.decoding.search import sample
from named_transformer.models.language_model import LanguageModel
from named_transformer.workflows.recipes import (  # the parser reads them too
    LEVELS,
    TextSettings,
    text_settings,
)
from named_transformer.workflows.training import (
    CheckpointError,
    TrainConfig,
    Trainer,
    load_checkpoint,
    smoothed_cross_entropy,
)

__all__ = [
    "TextCodec",
    "TextSettings",
    "bits_per_character",
    "default_corpus",
    "generate_from_checkpoint",
    "load_text_model",
    "loss_figure",
    "read_corpus",
    "text_model",
    "train_text",
]



@dataclass(frozen=True)
class TextCodec:
    """Text to token ids and back: characters (``symbols``, in id order) or bytes."""

    level: str
    symbols: str = ""  # the characters, for level "chars"

    @classmethod
    def fit(cls, text: str, level: str = "chars") -> TextCodec:
        """The codec of ``text``: its distinct characters, sorted, or the 256 bytes."""
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
        return cls(level, "".join(sorted(set(text))) if level == "chars" else "")

    @property
    def vocab(self) -> int:
        """How many tokens there are."""
        return len(self.symbols) if self.level == "chars" else 256

    def encode(self, text: str) -> Tensor:
        """The ids of ``text``; ValueError naming the characters it has never seen."""
        if self.level == "bytes":
            return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)
        index = {c: i for i, c in enumerate(self.symbols)}
        unknown = sorted({c for c in text if c not in index})
        if unknown:
            raise ValueError(
                f"characters the model never saw: {' '.join(map(repr, unknown[:10]))}"
            )
        return torch.tensor([index[c] for c in text], dtype=torch.long)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (bytes that split a character are replaced)."""
        if self.level == "bytes":
            return bytes(ids).decode("utf-8", errors="replace")
        return "".join(self.symbols[i] for i in ids)


def default_corpus() -> str:
    """The help topics of ``pydoc_data`` (what ``help("if")`` shows), in key order."""
    from pydoc_data.topics import topics

    return "".join(topics[key] for key in sorted(topics))


def read_corpus(path: str | Path | None, context: int = 1) -> str:
    """The text of the UTF-8 file ``path`` (the default corpus for None).

    One-line ValueErrors: a missing file, a binary or non-UTF-8 file, an empty one, or
    one too short to give a training and a validation window of ``context`` tokens.
    """
    if path is None:
        text, name = default_corpus(), "the pydoc_data corpus"
    else:
        path, name = Path(path), str(path)
        if not path.is_file():
            raise ValueError(f"no corpus at {path}")
        raw = path.read_bytes()
        if b"\0" in raw:
            raise ValueError(f"{path} is binary (it holds NUL bytes), not text")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(
                f"{path} is not UTF-8 text (byte {error.start} cannot be decoded)"
            ) from None
    if not text.strip():
        raise ValueError(f"{name} is empty")
    validation = len(text) - int(0.9 * len(text))
    if validation <= context:
        raise ValueError(
            f"{name} has {len(text):,} characters: too few for a context of "
            f"{context} (its last 10% validates and must hold more than one context; "
            f"need more than {10 * (context + 1):,})"
        )
    return text


def text_model(vocab: int, settings: TextSettings) -> LanguageModel:
    """The decoder-only model of the recipe: GPT-2's arrangement at its size."""
    return LanguageModel(
        vocab, settings.config(), positions="learned",
        max_positions=settings.context, scale_embeddings=False,
    )  # fmt: skip


def _windows(ids: Tensor, starts: Tensor, context: int) -> tuple[Tensor, Tensor]:
    """Inputs ``ids[s : s + context]`` and next tokens ``ids[s + 1 : s + 1 + context]``
    for every start ``s``."""
    offsets = rearrange(torch.arange(context + 1), "seq -> 1 seq")
    chunks = ids[rearrange(starts, "batch -> batch 1") + offsets]
    return chunks[:, :-1], chunks[:, 1:]


def _loss(model: LanguageModel, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """Summed next-token cross-entropy (no smoothing) and the number of tokens."""
    inputs, targets = batch
    return smoothed_cross_entropy(model(inputs), targets, ignore=-1, smoothing=0.0)


@checked
def bits_per_character(
    model: LanguageModel,
    ids: Int[Tensor, " seq"],
    context: int,
    windows: int,
    batch_size: int = 32,
) -> float:
    """The mean next-token loss over ``windows`` evenly spaced windows of ``ids``, in
    bits per token (per character at level ``chars``)."""
    last = len(ids) - context - 1
    starts = torch.linspace(0, last, min(windows, last + 1)).long()
    total, count = 0.0, 0
    with torch.no_grad():
        for chunk in starts.split(batch_size):
            summed, tokens = _loss(model, _windows(ids, chunk, context))
            total, count = total + float(summed), count + int(tokens)
    return total / count / math.log(2)


def _continue(
    model: LanguageModel,
    prompt: Tensor,
    length: int,
    context: int,
    temperature: float,
    generator: torch.Generator,
) -> list[int]:
    """Sample ``length`` tokens after ``prompt``, the model reading at most its last
    ``context`` tokens."""

    def step(tokens: Tensor) -> Tensor:
        return model(tokens[:, -context:])[:, -1]

    start = rearrange(prompt, "seq -> 1 seq")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one row's tiny products: a second thread only waits
    try:
        decoded = sample(step, start, length, temperature=temperature,
                         generator=generator)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    return decoded.tokens[0].tolist()


def train_text(
    text: str,
    settings: TextSettings | None = None,
    directory: str | Path | None = None,
    progress: bool = True,
    show: Callable[[str], None] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train the recipe's model on ``text``; checkpoint and ``loss.png`` in
    ``directory`` (when given). With ``resume``, training continues from
    ``directory``'s checkpoint (the same text and settings) up to ``steps``.

    ``show`` receives each progress line and sample (default: print to stderr).
    Returns the model, codec, trainer, the evaluations ``[(step, bpc)]``, the
    final validation bpc, the seconds trained and a sample: the validation text's
    first 16 characters and ``settings.sample_length`` sampled after them.
    """
    settings = settings or TextSettings()
    show = show or (lambda line: print(line, file=sys.stderr, flush=True))
    codec = TextCodec.fit(text, settings.level)
    ids = codec.encode(text)
    split = int(0.9 * len(ids))
    train, validation = ids[:split], ids[split:]
    if len(validation) <= settings.context + 1:
        raise ValueError(
            f"the corpus has {len(ids):,} tokens: its validation part is shorter "
            f"than the context ({settings.context})"
        )
    torch.manual_seed(settings.seed)
    model = text_model(codec.vocab, settings)
    config = TrainConfig(
        steps=settings.steps, batch_size=settings.batch_size, layer=settings.layer,
        warmup=settings.warmup, factor=settings.factor, betas=(0.9, 0.99),
        eps=1e-8, label_smoothing=0.0, eval_every=settings.eval_every,
        log_every=1, seed=settings.seed, progress=progress,
        max_seconds=settings.max_seconds,
    )  # fmt: skip
    evaluations: list[tuple[int, float]] = []
    generator = torch.Generator().manual_seed(settings.seed)
    prompt = validation[:16]  # the first characters of the validation text

    def evaluate(model: LanguageModel) -> dict[str, float]:
        bpc = bits_per_character(
            model, validation, settings.context, settings.eval_windows
        )
        evaluations.append((trainer.step, bpc))
        every = settings.sample_every
        if progress and every and (len(evaluations) - 1) % every == 0:
            tokens = _continue(model, prompt, 120, settings.context, 0.8, generator)
            show(f"sample at step {trainer.step} ({bpc:.2f} bits/char): "
                 f"{codec.decode(prompt.tolist() + tokens)!r}")  # fmt: skip
        return {"val_bpc": bpc}

    meta = {"text": {"settings": asdict(settings), "level": codec.level,
                     "symbols": codec.symbols}}  # fmt: skip
    trainer = Trainer(
        model, range(len(train) - settings.context - 1),
        lambda starts: _windows(train, torch.tensor(starts), settings.context),
        _loss, config, evaluate=evaluate, directory=directory, meta=meta,
    )  # fmt: skip
    if resume:
        _resume_text(trainer, Path(directory or ".", "checkpoint.pt"))
    started = time.perf_counter()
    trainer.stop = lambda metrics: metrics["val_bpc"] <= settings.target
    trainer.fit()  # up to steps, the target or max_seconds (checked every step)
    seconds = time.perf_counter() - started
    model.eval()
    if not evaluations:  # resumed at its last step: nothing left to train
        evaluate(model)
    tokens = []
    if settings.sample_length:
        with torch.no_grad():
            tokens = _continue(model, prompt, settings.sample_length,
                               settings.context, 0.8, generator)  # fmt: skip
    run = {
        "model": model, "codec": codec, "trainer": trainer, "settings": settings,
        "evaluations": evaluations, "bpc": evaluations[-1][1], "seconds": seconds,
        "steps": trainer.step, "sample": codec.decode(prompt.tolist() + tokens),
        "parameters": sum(p.numel() for p in model.parameters()),
    }  # fmt: skip
    return run


def _resume_text(trainer: Trainer, path: Path) -> None:
    """Continue from the checkpoint at ``path``; one line if it does not fit."""
    try:
        trainer.load(path)
    except RuntimeError as error:  # torch's many-line message about the weights
        raise CheckpointError(
            f"{path} does not fit this model (another corpus, level or size?): "
            f"{str(error).splitlines()[0][:160]}"
        ) from None


def loss_figure(
    training: Sequence[tuple[int, float]],
    evaluations: Sequence[tuple[int, float]],
    target: float,
    path: str | Path,
    title: str = "",
) -> None:
    """Draw the training loss ``[(step, nats per token)]`` and the validation
    ``[(step, bits per character)]``, both in bits per character, with the target as
    a dotted line; write it to ``path``."""
    from named_transformer import plot

    ax = plot.line_plot(
        [step for step, _ in training],
        {"training": [loss / math.log(2) for _, loss in training]},
        xlabel="step", ylabel="bits per character", title=title,
    )  # fmt: skip
    ax.plot(*zip(*evaluations, strict=True), marker="o", markersize=3,
            label="validation")  # fmt: skip
    ax.axhline(target, color="gray", linestyle=":", label=f"target {target}")
    ax.legend(fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ax.figure.savefig(path, dpi=120, bbox_inches="tight")
    plot._pyplot().close(ax.figure)


def load_text_model(path: str | Path) -> tuple[LanguageModel, TextCodec, TextSettings]:
    """The model, codec and settings of a checkpoint written by :func:`train_text`;
    :class:`~named_transformer.workflows.training.CheckpointError` for any other."""
    state = load_checkpoint(path)
    meta = state["meta"].get("text")
    if meta is None:
        raise CheckpointError(
            f"{path} is not a text model's checkpoint (train text writes one)"
        )
    settings = TextSettings(**meta["settings"])
    codec = TextCodec(meta["level"], meta["symbols"])
    model = text_model(codec.vocab, settings)
    model.load_state_dict(state["model"])
    return model.eval(), codec, settings


def generate_from_checkpoint(
    path: str | Path,
    prompt: str,
    length: int = 300,
    temperature: float = 0.8,
    seed: int = 0,
) -> str:
    """``prompt`` continued by ``length`` sampled tokens of the text model at
    ``path`` (temperature $T$; the same seed, the same text)."""
    if length < 1 or temperature <= 0:
        raise ValueError(f"need length >= 1 and temperature > 0, got {length}, "
                         f"{temperature}")  # fmt: skip
    model, codec, settings = load_text_model(path)
    start = codec.encode(prompt or "\n")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        tokens = _continue(model, start, length, settings.context, temperature,
                           generator)  # fmt: skip
    return prompt + codec.decode(tokens)


def train_text_command(args: Any, start: str | None = None) -> int:
    """``python -m named_transformer train text``: train, report, draw, checkpoint;
    ``start`` (a line saying what trains) goes to stderr once the corpus is read."""
    settings = text_settings(args)
    text = read_corpus(args.corpus, settings.context)
    if start:
        print(start, file=sys.stderr, flush=True)
    out = Path(args.out or Path("runs") / "text")
    run = train_text(text, settings, directory=out, progress=not args.no_progress,
                     resume=args.resume)  # fmt: skip
    reached = "reached" if run["bpc"] <= settings.target else "not reached"
    corpus = args.corpus or "pydoc_data's help topics"
    print(
        f"trained the decoder-only model ({run['parameters']:,} parameters) on "
        f"{len(text):,} characters of {corpus} for {run['steps']} steps in "
        f"{run['seconds']:.0f} s: validation {run['bpc']:.3f} bits per "
        f"{'character' if settings.level == 'chars' else 'byte'} (target "
        f"{settings.target}: {reached}); checkpoint: {out / 'checkpoint.pt'}"
    )
    if not args.no_figure:
        figure = Path(args.figure or out / "loss.png")
        training = [(r.step, r.loss) for r in run["trainer"].history]
        loss_figure(training, run["evaluations"], settings.target, figure,
                    title=f"{run['parameters']:,} parameters")  # fmt: skip
        print(f"loss figure: {figure}")
    print(f"sample: {run['sample']!r}")
    return 0
