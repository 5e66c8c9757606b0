r"""From a task name to a trained model: build, loss, evaluate, decode (used by the CLI).

A *spec* (a JSON-friendly dict stored in every checkpoint) says which model to build:
``kind`` is ``encoder-decoder`` (:class:`~named_transformer.models.transformer.Transformer`),
``decoder-only`` (:class:`~named_transformer.models.language_model.LanguageModel`, the prompt
``source <bos>`` continued by the answer), ``classifier``
(:class:`~named_transformer.models.classifier.TransformerClassifier`) or ``bag-of-words`` (the
sentiment baseline); ``positions`` is ``sinusoidal`` (the paper), ``learned`` (a table of
``max_positions`` rows) or ``relative`` (Shaw et al.: every self-attention becomes
:class:`~named_transformer.models.relative.RelativeMultiHeadAttention` with clipping distance
``max_distance``, and nothing is added to the embeddings).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.dropout import dropout
from named_transformer.decoding import (
    IncrementalDecoder,
    beam_search,
    greedy,
    sample,
    strip_after_eos,
)
from named_transformer.models.classifier import TransformerClassifier
from named_transformer.models.config import TransformerConfig
from named_transformer.models.embedding import LearnedPositions
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.relative import RelativeMultiHeadAttention
from named_transformer.models.transformer import Transformer
from named_transformer.workflows.sentiment import (
    LABELS,
    BagOfWords,
    negation_contrast_set,
)
from named_transformer.workflows.tasks import (
    TASKS,
    Example,
    Vocabulary,
    collate,
    collate_classify,
    collate_lm,
    make_task,
    task_vocabulary,
)
from named_transformer.workflows.training import (
    LossFunction,
    TrainConfig,
    Trainer,
    smoothed_cross_entropy,
)

__all__ = [
    "KINDS",
    "attention_figure",
    "attention_maps",
    "SIZES",
    "NoPositions",
    "build_model",
    "decode_examples",
    "evaluate_model",
    "loss_function",
    "make_collate",
    "held_out",
    "load_run",
    "make_spec",
    "train_task",
]

KINDS = ("encoder-decoder", "decoder-only", "classifier", "bag-of-words")
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"layers": 1, "layer": 32, "heads": 2, "hidden": 64},
    "small": {"layers": 2, "layer": 64, "heads": 4, "hidden": 256},
    "medium": {"layers": 3, "layer": 128, "heads": 4, "hidden": 512},
}


# (title, weights heads × seq_q × seq, query labels, key labels); the sizes differ from one
# map to the next, so one jaxtyping annotation cannot bind them across the list.
AttentionMap = tuple[str, Tensor, list[str], list[str]]


class NoPositions(nn.Module):
    """Dropout only: with relative positions nothing is added to the embeddings."""

    def __init__(self, dropout: float = 0.1) -> None:
        super().__init__()
        self.dropout = dropout

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch seq layer"], offset: int = 0
    ) -> Float[Tensor, "*batch seq layer"]:
        del offset
        return dropout(inputs, self.dropout, self.training)


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
) -> dict[str, Any]:
    """The JSON-friendly description of a model for ``task`` (validated here)."""
    kind = kind or (
        "classifier" if TASKS[task].kind == "classify" else "encoder-decoder"
    )
    if kind not in KINDS:
        raise ValueError(f"model kind must be one of {KINDS}, got {kind!r}")
    if (TASKS[task].kind == "classify") != (kind in ("classifier", "bag-of-words")):
        raise ValueError(f"task {task!r} cannot be learned by a {kind} model")
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    if positions not in ("sinusoidal", "learned", "relative"):
        raise ValueError(
            f"positions must be sinusoidal, learned or relative, got {positions!r}"
        )
    s = SIZES[size]
    config = TransformerConfig(
        encoder_layers=s["layers"], decoder_layers=s["layers"], layer=s["layer"],
        heads=s["heads"], hidden=s["hidden"], dropout=dropout,
    )  # fmt: skip
    return {
        "task": task, "kind": kind, "size": size, "vocab": vocab, "positions": positions,
        "max_distance": max_distance, "max_positions": max_positions, "config": asdict(config),
    }  # fmt: skip


def _relative(model: nn.Module, config: TransformerConfig, max_distance: int) -> None:
    for module in list(model.modules()):
        attention = getattr(module, "self_attention", None)
        if attention is not None and not isinstance(
            attention, RelativeMultiHeadAttention
        ):
            module.self_attention = RelativeMultiHeadAttention(
                config.layer, config.heads, max_distance, dropout=config.dropout
            )


def build_model(spec: dict[str, Any]) -> nn.Module:
    """A fresh model as ``spec`` describes (see :func:`make_spec`)."""
    config = TransformerConfig(**spec["config"])
    vocab, kind = spec["vocab"], spec["kind"]
    if kind == "bag-of-words":
        return BagOfWords(vocab, len(LABELS), config.layer)
    if kind == "classifier":
        model = TransformerClassifier(
            vocab, len(LABELS), num_layers=config.encoder_layers, layer=config.layer,
            heads=config.heads, hidden=config.hidden, dropout=config.dropout,
        )  # fmt: skip
    elif kind == "decoder-only":
        model = LanguageModel(vocab, config)
    else:
        model = Transformer(vocab, vocab, config)
    if spec["positions"] == "learned":
        model.positions = LearnedPositions(
            spec["max_positions"], config.layer, dropout=config.dropout
        )
    elif spec["positions"] == "relative":
        model.positions = NoPositions(config.dropout)
        _relative(model, config, spec["max_distance"])
    return model


def make_collate(
    spec: dict[str, Any], vocabulary: Vocabulary
) -> Callable[[list[Example]], Any]:
    """The batching function of the model's kind."""
    kind = spec["kind"]
    if kind == "decoder-only":
        return lambda examples: collate_lm(examples, vocabulary)
    if kind in ("classifier", "bag-of-words"):
        return lambda examples: collate_classify(examples, vocabulary, LABELS)
    return lambda examples: collate(examples, vocabulary)


def loss_function(
    spec: dict[str, Any], vocabulary: Vocabulary, smoothing: float = 0.1
) -> LossFunction:
    """``loss(model, batch) -> (summed label-smoothed cross-entropy, target count)``."""
    kind, pad = spec["kind"], vocabulary.pad

    def seq2seq(model: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        log_probs = model(
            batch.source, batch.target_in, batch.source_mask, batch.target_mask
        )
        return smoothed_cross_entropy(log_probs, batch.target_out, pad, smoothing)

    def language(model: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        return smoothed_cross_entropy(
            model(batch.inputs), batch.outputs, pad, smoothing
        )

    def classify(model: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        logits = model(batch.source, batch.mask)
        return smoothed_cross_entropy(logits, batch.labels, -100, smoothing)

    if kind == "decoder-only":
        return language
    if kind in ("classifier", "bag-of-words"):
        return classify
    return seq2seq


@torch.no_grad()
def decode_examples(
    model: nn.Module,
    spec: dict[str, Any],
    vocabulary: Vocabulary,
    sources: Sequence[Sequence[str]],
    *,
    method: str = "greedy",
    max_len: int | None = None,
    batch_size: int = 256,
    width: int = 4,
    alpha: float = 0.6,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> list[tuple[str, ...]]:
    """Decode each source with ``method`` (greedy, beam or sample), using the key/value cache.

    A classifier returns its predicted label. A decoder-only model decodes prompts of
    equal length together (no left padding needed).
    """
    model.eval()
    kind = spec["kind"]
    if kind in ("classifier", "bag-of-words"):
        out = []
        for start in range(0, len(sources), batch_size):
            chunk = [
                Example(tuple(s), (LABELS[0],))
                for s in sources[start : start + batch_size]
            ]
            batch = collate_classify(chunk, vocabulary, LABELS)
            logits = model(batch.source, batch.mask)
            out += [
                (LABELS[i],) for i in logits.argmax(-1).tolist()
            ]  # allow-raw: best class
        return out
    generator = torch.Generator().manual_seed(seed)
    results: dict[int, tuple[str, ...]] = {}
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(sources):
        key = len(s) if kind == "decoder-only" else i // batch_size
        groups.setdefault(key, []).append(i)
    for indices in groups.values():
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            longest = max(len(sources[i]) for i in chunk)
            limit = max_len or longest + 12
            examples = [Example(tuple(sources[i]), ()) for i in chunk]
            if kind == "decoder-only":
                batch = collate_lm(examples, vocabulary)
                prompt = batch.inputs[:, : batch.prompt_lengths[0]]
                decoder, begin = IncrementalDecoder(model), prompt
            else:
                batch = collate(examples, vocabulary)
                decoder = IncrementalDecoder(model, batch.source, batch.source_mask)
                begin = batch.target_in[:, :1]
            if method == "greedy":
                decoded = greedy(decoder, begin, limit, vocabulary.eos, vocabulary.pad)
            elif method == "beam":
                decoded = beam_search(
                    decoder,
                    begin,
                    limit,
                    vocabulary.eos,
                    vocabulary.pad,
                    width=width,
                    alpha=alpha,
                )
            elif method == "sample":
                decoded = sample(
                    decoder, begin, limit, vocabulary.eos, vocabulary.pad,
                    temperature=temperature, top_k=top_k, generator=generator,
                )  # fmt: skip
            else:
                raise ValueError(
                    f"method must be greedy, beam or sample, got {method!r}"
                )
            for i, ids in zip(
                chunk, strip_after_eos(decoded.tokens, vocabulary.eos), strict=True
            ):
                results[i] = vocabulary.decode(ids)
    return [results[i] for i in range(len(sources))]


def evaluate_model(
    model: nn.Module,
    spec: dict[str, Any],
    vocabulary: Vocabulary,
    examples: Sequence[Example],
    **options: Any,
) -> float:
    """Exact match (a classifier: accuracy) of greedy decoding on ``examples``, in [0, 1]."""
    predictions = decode_examples(
        model, spec, vocabulary, [e.source for e in examples], **options
    )
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
    size: str = "small",
    *,
    steps: int = 2000,
    seed: int = 0,
    directory: str | Path | None = None,
    positions: str = "sinusoidal",
    batch_size: int = 64,
    min_len: int = 10,
    max_len: int = 20,
    train_size: int = 50_000,
    test_size: int = 1000,
    eval_every: int = 100,
    eval_size: int = 500,
    warmup: int = 400,
    factor: float = 0.1,
    dropout: float = 0.1,
    target: float | None = 1.0,
    patience: int = 2,
    progress: bool = True,
    resume: bool = False,
) -> dict[str, Any]:
    """Train a model on ``task`` and score it on ``test_size`` held-out items.

    Every ``eval_every`` steps the model is scored on ``eval_size`` items of the ``valid``
    split; training stops early once that score is at least ``target`` in ``patience``
    evaluations in a row (one lucky evaluation is not enough; None: never stop). The
    final score is on the ``test`` split: exact match of greedy decoding, or accuracy for
    a classifier (then also on the negation contrast set). Returns the model, its spec and
    vocabulary, the trainer (history) and the numbers; with ``directory``, writes
    ``checkpoint.pt`` and ``metrics.json`` there. With ``resume``, training continues from
    ``directory/checkpoint.pt`` (exactly as if it had never stopped) up to ``steps``.
    """
    torch.manual_seed(seed)
    vocabulary = task_vocabulary(task, max_len)
    spec = make_spec(
        task, kind, size, vocab=len(vocabulary), positions=positions, dropout=dropout
    )
    data = {"seed": seed, "min_len": min_len, "max_len": max_len}
    model = build_model(spec)
    train = make_task(task, train_size, seed, "train", min_len, max_len)
    valid = held_out(task, data, eval_size, "valid")

    def evaluate(m: nn.Module) -> dict[str, float]:
        return {"valid": evaluate_model(m, spec, vocabulary, valid)}

    config = TrainConfig(
        steps=steps, batch_size=batch_size, layer=spec["config"]["layer"], warmup=warmup,
        factor=factor, eval_every=eval_every, seed=seed, progress=progress,
    )  # fmt: skip
    meta = {"spec": spec, "vocabulary": vocabulary.to_list(), "data": data}

    def reached(
        _: dict[str, float],
    ) -> bool:  # the last `patience` evaluations at the target
        scores = [
            record.metrics["valid"]
            for record in trainer.history
            if "valid" in record.metrics
        ]
        return len(scores) >= patience and min(scores[-patience:]) >= target

    trainer = Trainer(
        model, train, make_collate(spec, vocabulary), loss_function(spec, vocabulary), config,
        evaluate, directory, meta, stop=None if target is None else reached,
    )  # fmt: skip
    earlier = 0.0
    if resume and directory is not None and Path(directory, "checkpoint.pt").exists():
        trainer.load(Path(directory, "checkpoint.pt"))
        if Path(directory, "metrics.json").exists():
            earlier = json.loads(Path(directory, "metrics.json").read_text()).get(
                "seconds", 0.0
            )
    started = time.perf_counter()
    trainer.fit()
    seconds = earlier + time.perf_counter() - started
    results = {
        "task": task, "kind": spec["kind"], "size": size, "positions": positions,
        "steps": trainer.step, "seconds": round(seconds, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "held_out": evaluate_model(model, spec, vocabulary, held_out(task, data, test_size)),
    }  # fmt: skip
    if task == "sentiment":
        results["contrast"] = evaluate_model(
            model, spec, vocabulary, contrast_examples(test_size)
        )
    if directory is not None and trainer.rank == 0:
        Path(directory, "metrics.json").write_text(json.dumps(results, indent=2))
    return {
        "model": model, "spec": spec, "vocabulary": vocabulary, "trainer": trainer,
        "data": data, "results": results,
    }  # fmt: skip


# --8<-- [end:train_task]


def load_run(path: str | Path) -> dict[str, Any]:
    """Rebuild the model, spec, vocabulary and data settings from a ``checkpoint.pt``."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    meta = state["meta"]
    model = build_model(meta["spec"])
    model.load_state_dict(state["model"])
    model.eval()
    return {
        "model": model, "spec": meta["spec"], "vocabulary": Vocabulary(meta["vocabulary"]),
        "data": meta["data"], "history": state["history"], "step": state["step"],
    }  # fmt: skip


def _labels(tokens: Sequence[str]) -> list[str]:
    return [token if token.strip() else "␣" for token in tokens]  # a visible space


@checked
@torch.no_grad()
def attention_maps(
    model: nn.Module,
    spec: dict[str, Any],
    vocabulary: Vocabulary,
    source: Sequence[str],
) -> tuple[tuple[str, ...], list[AttentionMap]]:
    """Decode ``source`` greedily, then return (prediction, maps): one entry per attention
    kind and layer, ``(title, weights heads×seq_q×seq, query labels, key labels)``."""
    model.eval()
    (prediction,) = decode_examples(model, spec, vocabulary, [source])
    kind, maps = spec["kind"], []
    source_labels = _labels(source)
    if kind == "bag-of-words":
        return prediction, maps
    if kind == "classifier":
        batch = collate_classify(
            [Example(tuple(source), (LABELS[0],))], vocabulary, LABELS
        )
        _, weights = model(batch.source, batch.mask, need_weights=True)
        for i, w in enumerate(weights):
            maps.append(
                (
                    f"encoder self-attention, layer {i + 1}",
                    w[0],
                    source_labels,
                    source_labels,
                )
            )
        return prediction, maps
    if kind == "decoder-only":
        batch = collate_lm([Example(tuple(source), tuple(prediction))], vocabulary)
        labels = [*source_labels, "<bos>", *_labels(prediction)]
        _, weights = model(batch.inputs, need_weights=True)
        for i, w in enumerate(weights):
            maps.append((f"causal self-attention, layer {i + 1}", w[0], labels, labels))
        return prediction, maps
    batch = collate([Example(tuple(source), tuple(prediction))], vocabulary)
    _, weights = model(batch.source, batch.target_in, need_weights=True)
    target_labels = ["<bos>", *_labels(prediction)]
    for name, queries, keys in (
        ("encoder", source_labels, source_labels),
        ("decoder_self", target_labels, target_labels),
        ("decoder_cross", target_labels, source_labels),
    ):
        title = {"encoder": "encoder self", "decoder_self": "decoder self",
                 "decoder_cross": "cross"}[name]  # fmt: skip
        for i, w in enumerate(weights[name]):
            maps.append((f"{title}-attention, layer {i + 1}", w[0], queries, keys))
    return prediction, maps


@checked
def attention_figure(
    maps: list[AttentionMap], path: str | Path, title: str = ""
) -> Path:
    """Draw every (kind, layer) row of ``maps`` with one panel per head; save a PNG at ``path``."""
    from named_transformer.plot import _pyplot, attention_heatmap

    plt = _pyplot()
    heads = max(m[1].shape[0] for m in maps) if maps else 1
    rows = max(len(maps), 1)
    size = max((max(len(m[2]), len(m[3])) for m in maps), default=4)
    panel = min(max(0.22 * size + 1.2, 2.2), 6.0)
    figure, axes = plt.subplots(
        rows,
        heads,
        figsize=(panel * heads, panel * rows),
        squeeze=False,
        layout="constrained",
    )
    for row, (name, weights, queries, keys) in enumerate(maps):
        for head in range(heads):
            ax = axes[row][head]
            if head >= weights.shape[0]:
                ax.axis("off")
                continue
            attention_heatmap(
                weights[head].float(), queries, keys, ax=ax, annotate=False, colorbar=False,
                title=f"{name}, head {head + 1}",
            )  # fmt: skip
            ax.title.set_fontsize(8)
            ax.tick_params(labelsize=6)
            ax.set_xlabel("")
            ax.set_ylabel("")
    if title:
        figure.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
