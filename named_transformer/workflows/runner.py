r"""From a task name to a trained model: build, train, evaluate, decode.

The CLI is built on these functions. A *spec*
(:class:`~named_transformer.workflows.spec.RunSpec`, made by :func:`make_spec`, stored
in every checkpoint as JSON) says which model to build: its ``kind`` is one of the
model kinds of :mod:`named_transformer.workflows.kinds`, which builds it, batches its
examples, computes its loss, decodes and collects its attention maps. The functions
here call the spec's kind; none of them knows what kinds there are.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from named_transformer.axes import checked
from named_transformer.models.config import TransformerConfig
from named_transformer.models.variants import position_scheme
from named_transformer.workflows.data import Example, Vocabulary
from named_transformer.workflows.kinds import MODEL_KINDS, AttentionMap, NoPositions
from named_transformer.workflows.recipes import (  # numbers the parser reads too
    PAPER,
    RECIPES,
    SIZES,
    position_choices,
)
from named_transformer.workflows.sentiment import negation_contrast_set
from named_transformer.workflows.spec import RunSpec, kind_for
from named_transformer.workflows.tasks import TASKS, make_task, task_vocabulary
from named_transformer.workflows.training import (
    CheckpointError,
    LossFunction,
    TrainConfig,
    Trainer,
    load_checkpoint,
)

__all__ = [
    "KINDS",
    "PAPER",
    "RECIPES",
    "SIZES",
    "NoPositions",
    "RunSettings",
    "RunSpec",
    "attention_figure",
    "attention_maps",
    "build_model",
    "contrast_examples",
    "decode_examples",
    "evaluate_model",
    "held_out",
    "load_run",
    "loss_function",
    "make_collate",
    "make_spec",
    "position_choices",
    "train_task",
]

KINDS = tuple(MODEL_KINDS)


# --8<-- [start:RunSettings]
@dataclass(frozen=True)
class RunSettings:
    """Everything that decides what a training run learns, besides its task and model
    kind: the numbers that :func:`train_task` used to take one by one.

    The model: ``size`` (a key of :data:`SIZES`), how ``positions`` enter it, its
    ``dropout``. The data: ``seed`` (it seeds the data, the weights and the batches),
    sources of ``min_len`` to ``max_len`` tokens, ``train_size`` training examples and
    ``test_size`` held-out ones scored at the end. The schedule: at most ``steps``
    steps of ``batch_size`` examples, the Noam schedule's ``warmup`` and ``factor``.
    Early stop: every ``eval_every`` steps (0: only at the end) the model is scored
    on ``eval_size`` validation items, and training stops once that score is at least
    ``target`` in ``patience`` evaluations in a row (``target`` None: never), or once
    ``max_seconds`` have passed (checked every step; None: no limit).
    :meth:`recipe` gives a task's recipe (:data:`RECIPES`).
    """

    size: str = "small"
    positions: str = "sinusoidal"
    dropout: float = 0.1
    seed: int = 0
    min_len: int = 10
    max_len: int = 20
    train_size: int = 50_000
    test_size: int = 1000
    steps: int = 2000
    batch_size: int = 64
    warmup: int = 400
    factor: float = 0.1
    eval_every: int = 100
    eval_size: int = 500
    target: float | None = 1.0
    patience: int = 2
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ValueError(
                f"RunSettings.size must be one of {sorted(SIZES)}, got {self.size!r}"
            )
        if self.positions not in position_choices():
            raise ValueError(
                f"RunSettings.positions must be one of {position_choices()}, "
                f"got {self.positions!r}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(
                f"RunSettings.dropout must be in [0, 1), got {self.dropout}"
            )
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(
                f"RunSettings.min_len must be >= 1 and <= max_len, got "
                f"min_len={self.min_len}, max_len={self.max_len}"
            )
        at_least_one = ("train_size", "test_size", "steps", "batch_size", "warmup",
                        "eval_size", "patience")  # fmt: skip
        for name in at_least_one:
            if getattr(self, name) < 1:
                raise ValueError(
                    f"RunSettings.{name} must be >= 1, got {getattr(self, name)}"
                )
        if self.eval_every < 0:
            raise ValueError(
                f"RunSettings.eval_every must be >= 0, got {self.eval_every}"
            )
        if self.factor <= 0:
            raise ValueError(f"RunSettings.factor must be > 0, got {self.factor}")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ValueError(
                f"RunSettings.max_seconds must be > 0, got {self.max_seconds}"
            )

    @classmethod
    def recipe(cls, task: str, paper: bool = False, **overrides: Any) -> RunSettings:
        """The recipe of ``task`` (:data:`RECIPES`), with ``paper`` the paper's
        settings over it (:data:`PAPER`), then ``overrides``."""
        if task not in RECIPES:
            raise ValueError(f"no recipe for task {task!r}; one of {sorted(RECIPES)}")
        return cls().replace(
            **{**RECIPES[task], **(PAPER if paper else {}), **overrides}
        )

    def replace(self, **changes: Any) -> RunSettings:
        """These settings with ``changes`` (field names) replaced, validated again."""
        known = {field.name for field in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(
                f"unknown run setting {unknown[0]!r}; the settings are "
                f"{', '.join(sorted(known))}"
            )
        return replace(self, **changes)


# --8<-- [end:RunSettings]


def make_spec(
    task: str,
    kind: str | None = None,
    size: str = "small",
    *,
    vocab: int,
    positions: str = "sinusoidal",
    max_distance: int = 8,
    max_positions: int = 128,
    dropout: float = 0.1,
) -> RunSpec:
    """The description of a model of ``size`` for ``task`` (validated here).

    ``kind`` names a model kind; by default the first registered kind that can learn
    the task.
    """
    model_kind = kind_for(task, kind)
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    if positions not in position_choices():
        raise ValueError(
            f"positions must be one of {position_choices()}, got {positions!r}"
        )
    s = SIZES[size]
    scheme = position_scheme(
        positions, max_distance=max_distance, max_positions=max_positions
    )
    config = TransformerConfig(
        encoder_layers=s["layers"], decoder_layers=s["layers"], layer=s["layer"],
        heads=s["heads"], hidden=s["hidden"], dropout=dropout, positions=scheme,
    )  # fmt: skip
    return RunSpec(task, model_kind, size, vocab, config)


def build_model(spec: RunSpec) -> nn.Module:
    """A fresh model as ``spec`` describes (see :func:`make_spec`)."""
    return spec.kind.build(spec)


def make_collate(
    spec: RunSpec, vocabulary: Vocabulary
) -> Callable[[list[Example]], Any]:
    """The batching function of the model's kind."""
    return partial(spec.kind.collate, vocabulary=vocabulary)


def loss_function(
    spec: RunSpec, vocabulary: Vocabulary, smoothing: float = 0.1
) -> LossFunction:
    """``loss(model, batch) -> (summed label-smoothed cross-entropy, target count)``."""
    return partial(spec.kind.loss, vocabulary=vocabulary, smoothing=smoothing)


def decode_examples(
    model: nn.Module,
    spec: RunSpec,
    vocabulary: Vocabulary,
    sources: Sequence[Sequence[str]],
    **options: Any,
) -> list[tuple[str, ...]]:
    """Decode each source, using the key/value cache; a classifier gives its label.

    ``options``: ``method`` (``greedy``, ``beam`` or ``sample``), ``max_len``,
    ``batch_size``, the beam's ``width`` and ``alpha``, sampling's ``temperature``,
    ``top_k`` and ``seed``.
    """
    return spec.kind.decode(model, vocabulary, sources, **options)


def evaluate_model(
    model: nn.Module,
    spec: RunSpec,
    vocabulary: Vocabulary,
    examples: Sequence[Example],
    **options: Any,
) -> float:
    """Exact match (a classifier: accuracy) of greedy decoding on ``examples``."""
    sources = [e.source for e in examples]
    predictions = decode_examples(model, spec, vocabulary, sources, **options)
    hits = sum(p == tuple(e.target) for p, e in zip(predictions, examples, strict=True))
    return hits / max(len(examples), 1)


def held_out(
    task: str, data: dict[str, Any], n: int = 1000, split: str = "test"
) -> list[Example]:
    """The held-out examples of a run (``data`` holds the task's seed and lengths)."""
    return make_task(task, n, data["seed"], split, data["min_len"], data["max_len"])


def contrast_examples(n: int = 1000, seed: int = 0) -> list[Example]:
    """The negation contrast set, flattened: both members of every pair."""
    return [e for pair in negation_contrast_set(n // 2, seed) for e in pair]


# --8<-- [start:train_task]
def train_task(
    task: str,
    kind: str | None = None,
    size: str | None = None,
    *,
    settings: RunSettings | None = None,
    directory: str | Path | None = None,
    progress: bool = True,
    resume: bool = False,
    **overrides: Any,
) -> dict[str, Any]:
    """Train a model on ``task`` and score it on held-out items.

    ``settings`` (:class:`RunSettings`, default ``RunSettings()``) decide the run;
    ``size`` and ``overrides``, named as its fields (``steps=500``), replace some of
    them. Every ``eval_every`` steps the model is scored on ``eval_size`` items of the
    ``valid`` split; training stops early once that score is at least ``target`` in
    ``patience`` evaluations in a row (one lucky evaluation is not enough). The final
    score is on ``test_size`` items of the ``test`` split: exact match of greedy
    decoding, or accuracy for a classifier (then also on the negation contrast set).
    Returns the model, its spec and vocabulary, the trainer (history), the settings and
    the numbers; with ``directory``, writes ``checkpoint.pt`` and ``metrics.json``
    there. With ``resume``, training continues from ``directory/checkpoint.pt``
    (exactly as if it had never stopped) up to ``steps``; with no checkpoint there it
    starts afresh (the command line's ``--resume`` refuses instead). ``progress``: a
    progress bar or log lines.
    """
    if size is not None:
        overrides["size"] = size
    settings = (settings or RunSettings()).replace(**overrides)
    torch.manual_seed(settings.seed)
    vocabulary = task_vocabulary(task, settings.max_len)
    spec = make_spec(task, kind, settings.size, vocab=len(vocabulary),
                     positions=settings.positions,
                     dropout=settings.dropout)  # fmt: skip
    lengths = {"min_len": settings.min_len, "max_len": settings.max_len}
    data = {"seed": settings.seed, **lengths}
    model = build_model(spec)
    valid = held_out(task, data, settings.eval_size, "valid")
    config = TrainConfig(
        steps=settings.steps, batch_size=settings.batch_size,
        layer=spec.config.layer, warmup=settings.warmup, factor=settings.factor,
        eval_every=settings.eval_every, seed=settings.seed, progress=progress,
        max_seconds=settings.max_seconds,
    )  # fmt: skip
    trainer = Trainer(
        model, make_task(task, settings.train_size, settings.seed, "train", **lengths),
        make_collate(spec, vocabulary), loss_function(spec, vocabulary), config,
        lambda m: {"valid": evaluate_model(m, spec, vocabulary, valid)}, directory,
        {"spec": spec.to_dict(), "vocabulary": vocabulary.to_list(), "data": data},
    )  # fmt: skip
    if settings.target is not None:
        trainer.stop = partial(_reached, settings.target, settings.patience, trainer)
    earlier = _resume(trainer, directory) if resume else 0.0
    started = time.perf_counter()
    trainer.fit()
    results = {
        "task": task, "kind": spec.kind.name, "size": settings.size,
        "positions": settings.positions, "steps": trainer.step,
        "seconds": round(earlier + time.perf_counter() - started, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        **_scores(model, spec, vocabulary, held_out(task, data, settings.test_size)),
    }  # fmt: skip
    if directory is not None and trainer.rank == 0:
        Path(directory, "metrics.json").write_text(json.dumps(results, indent=2))
    return {
        "model": model, "spec": spec, "vocabulary": vocabulary, "trainer": trainer,
        "data": data, "settings": settings, "results": results,
    }  # fmt: skip


def _reached(target: float, patience: int, trainer: Trainer, _: dict) -> bool:
    """The last ``patience`` validation scores are all at least ``target``."""
    history = [record.metrics for record in trainer.history]
    scores = [metrics["valid"] for metrics in history if "valid" in metrics]
    return len(scores) >= patience and min(scores[-patience:]) >= target


def _resume(trainer: Trainer, directory: str | Path | None) -> float:
    """Continue from ``directory``'s checkpoint, if any; the seconds already spent."""
    if directory is None or not Path(directory, "checkpoint.pt").exists():
        return 0.0
    trainer.load(Path(directory, "checkpoint.pt"))
    metrics = Path(directory, "metrics.json")
    return (
        json.loads(metrics.read_text()).get("seconds", 0.0) if metrics.exists() else 0.0
    )


def _scores(
    model: nn.Module, spec: RunSpec, vocabulary: Vocabulary, test: list[Example]
) -> dict[str, float]:
    """The held-out score; for sentiment also the negation contrast set's."""
    scores = {"held_out": evaluate_model(model, spec, vocabulary, test)}
    if spec.task == "sentiment":
        contrast = contrast_examples(len(test))
        scores["contrast"] = evaluate_model(model, spec, vocabulary, contrast)
    return scores


# --8<-- [end:train_task]


def load_run(path: str | Path) -> dict[str, Any]:
    """Rebuild the model, spec (:class:`RunSpec`), vocabulary and data settings of a
    ``checkpoint.pt``.

    A checkpoint of a task or model kind this version does not know, or whose weights
    do not fit the model its spec describes, raises
    :class:`~named_transformer.workflows.training.CheckpointError` in one line.
    """
    state = load_checkpoint(path)
    stored = state["meta"].get("spec", {})
    if stored.get("task") not in TASKS or stored.get("kind") not in MODEL_KINDS:
        raise CheckpointError(
            f"{path} holds a model of kind {stored.get('kind')!r} for task "
            f"{stored.get('task')!r}, which this version does not know (tasks: "
            f"{', '.join(sorted(TASKS))})"
        )
    spec = RunSpec.from_dict(stored)
    model = build_model(spec)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        detail = str(error).splitlines()[1].strip() if "\n" in str(error) else ""
        raise CheckpointError(
            f"{path}: its weights do not fit the {spec.kind.name} model its spec "
            f"describes ({detail[:200]})"
        ) from None
    model.eval()
    return {
        "model": model, "spec": spec,
        "vocabulary": Vocabulary(state["meta"]["vocabulary"]),
        "data": state["meta"]["data"], "history": state["history"],
        "step": state["step"],
    }  # fmt: skip


@checked
@torch.no_grad()
def attention_maps(
    model: nn.Module,
    spec: RunSpec,
    vocabulary: Vocabulary,
    source: Sequence[str],
) -> tuple[tuple[str, ...], list[AttentionMap]]:
    """Decode ``source`` greedily, then return (prediction, maps): one entry per
    attention kind and layer, ``(title, weights heads×seq_q×seq, query labels, key
    labels)``."""
    model.eval()
    (prediction,) = decode_examples(model, spec, vocabulary, [source])
    maps = spec.kind.attention_maps(model, vocabulary, source, prediction)
    return prediction, maps


@checked
def attention_figure(
    maps: list[AttentionMap],
    path: str | Path,
    title: str = "",
    width: float | None = None,
) -> Path:
    """Draw every (kind, layer) row of ``maps`` with one panel per head; save a PNG.

    Rows are attention kinds and layers, columns heads; every panel shares one colour
    scale (weights in [0, 1], one colour bar). Queries ($\\mathsf{seq'}$) run down,
    keys ($\\mathsf{seq}$) across, labelled with their tokens. ``width`` (inches)
    fixes the figure's width, e.g. to a page's text column; by default each panel
    grows with the number of tokens.
    """
    from named_transformer.plot import _pyplot

    plt = _pyplot()
    heads = max((m[1].shape[0] for m in maps), default=1)
    rows = max(len(maps), 1)
    size = max((max(len(m[2]), len(m[3])) for m in maps), default=4)
    margins = 1.9  # inches: the query labels on the left, the colour bar on the right
    if width is None:
        panel = min(max(0.16 * size + 1.0, 2.0), 5.0)
    else:
        panel = (width - margins) / heads
    font = 7 if panel >= 2.5 else 6 if panel >= 1.6 else 5
    across, down = panel * heads + margins, (panel + 0.9) * rows + 0.8
    figure, axes = plt.subplots(rows, heads, figsize=(across, down), squeeze=False)
    figure.subplots_adjust(
        left=0.8 / across, right=1 - 1.1 / across, bottom=0.9 / down,
        top=1 - 0.7 / down, wspace=0.12, hspace=0.9 / panel,
    )  # fmt: skip
    kinds = {m[0].rsplit(", ", 1)[0] for m in maps}
    shared = kinds.pop() if len(kinds) == 1 else ""  # one kind: named once, on top
    image = None
    for row, (name, weights, queries, keys) in enumerate(maps):
        for head, ax in enumerate(axes[row]):
            if head >= weights.shape[0]:
                ax.axis("off")
                continue
            grid = weights[head].detach().float().cpu().numpy()
            image = ax.imshow(grid, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            label = name.removeprefix(f"{shared}, ") if shared else name
            ax.set_title(f"{label}, head {head + 1}" if head == 0 else
                         f"head {head + 1}", fontsize=font + 1, loc="left")  # fmt: skip
            ax.set_xticks(range(len(keys)), keys, fontsize=font, rotation=90)
            if head == 0:  # the query tokens once per row
                ax.set_yticks(range(len(queries)), queries, fontsize=font)
                ax.set_ylabel("seq_q (queries)", fontsize=font + 1)
                ax.set_xlabel("seq (keys)", fontsize=font + 1)
            else:
                ax.set_yticks([])
    if image is not None:
        bar = figure.add_axes((1 - 0.85 / across, 0.25, 0.12 / across, 0.5))
        figure.colorbar(image, cax=bar).set_label("attention weight", fontsize=8)
    if title or shared:
        figure.suptitle(f"{shared}: {title}" if shared else title, fontsize=9)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110 if width else 90)
    plt.close(figure)
    return path
