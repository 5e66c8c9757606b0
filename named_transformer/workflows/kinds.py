r"""Model kinds: one class per kind of model, each knowing its whole workflow.

A kind builds its model from a run's
:class:`~named_transformer.workflows.spec.RunSpec` (which holds the kind itself),
turns examples into its kind of batch, computes its loss, decodes, and collects its
attention maps. The kinds are registered by name in one table, :data:`MODEL_KINDS`,
read when a checkpoint's spec is (:meth:`~named_transformer.workflows.spec.RunSpec.
from_dict`); the runner only calls methods: adding a kind is one new class with the
:func:`register` decorator.

* ``encoder-decoder``: :class:`~named_transformer.models.transformer.Transformer`;
* ``decoder-only``: :class:`~named_transformer.models.language_model.LanguageModel`,
  the prompt ``source <bos>`` continued by the answer;
* ``classifier``: :class:`~named_transformer.models.classifier.TransformerClassifier`;
* ``bag-of-words``: the sentiment baseline
  :class:`~named_transformer.workflows.sentiment.BagOfWords`.

The Transformer kinds build from the spec's configuration
(:class:`~named_transformer.models.config.TransformerConfig`), whose ``positions`` are
added to the embeddings (sinusoidal, the paper; learned) or are a scheme of every
self-attention (rotary, ALiBi: causal in decoders and symmetric in encoders;
relative). Cross-attention keeps no positions in every case: its queries and its keys
(the encoder output) already carry their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor, nn

from named_transformer.decoding import (
    Decoded,
    IncrementalDecoder,
    beam_search,
    greedy,
    sample,
    strip_after_eos,
)
from named_transformer.models.classifier import TransformerClassifier
from named_transformer.models.config import TransformerConfig
from named_transformer.models.embedding import NoPositions
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.transformer import Transformer
from named_transformer.recording import record
from named_transformer.workflows.batches import (
    collate,
    collate_classify,
    collate_lm,
)
from named_transformer.workflows.data import Example, Vocabulary
from named_transformer.workflows.sentiment import LABELS, BagOfWords
from named_transformer.workflows.training import smoothed_cross_entropy

if TYPE_CHECKING:  # the spec holds a kind: it imports this module
    from named_transformer.workflows.spec import RunSpec

__all__ = [
    "MODEL_KINDS",
    "AttentionMap",
    "BagOfWordsKind",
    "ClassifierKind",
    "DecoderOnlyKind",
    "EncoderDecoderKind",
    "ModelKind",
    "NoPositions",
    "kind_of",
    "register",
]

# (title, weights heads × seq_q × seq, query labels, key labels); the sizes differ
# from one map to the next, so one jaxtyping annotation cannot bind them across the
# list.
AttentionMap = tuple[str, Tensor, list[str], list[str]]
# the recorded names of a stack's attention weights, {} for the layer
_SELF, _CROSS = "layers.{}.self_attention.weights", "layers.{}.cross_attention.weights"
Strategy = Callable[..., Decoded]


def _labels(tokens: Sequence[str]) -> list[str]:
    return [token if token.strip() else "␣" for token in tokens]  # a visible space


# --8<-- [start:ModelKind]
class ModelKind:
    """What the runner needs of a kind of model; subclasses fill in each step."""

    name: str  # its name in a stored spec's "kind"
    learns: str  # the task kind it can learn: "seq2seq" or "classify"
    # The attention maps: (the recorded name of the weights, {} for the layer;
    # title, query labels, key labels), where labels are the "source", the
    # "target" (<bos> + prediction) or the "prompt" (source <bos> prediction).
    maps: tuple[tuple[str, str, str, str], ...] = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"  # one instance each, registered

    def network(self, vocab: int, config: TransformerConfig) -> nn.Module:
        """A fresh model for a vocabulary of ``vocab`` tokens."""
        raise NotImplementedError

    def build(self, spec: RunSpec) -> nn.Module:
        """The model ``spec`` describes: its configuration, positions included."""
        return self.network(spec.vocab, spec.config)

    def collate(self, examples: Sequence[Example], vocabulary: Vocabulary) -> Any:
        """The padded batch of ``examples``."""
        raise NotImplementedError

    def loss(
        self, model: nn.Module, batch: Any, vocabulary: Vocabulary, smoothing: float
    ) -> tuple[Tensor, Tensor]:
        """(summed label-smoothed cross-entropy, target count) of ``batch``."""
        raise NotImplementedError

    def group(self, index: int, source: Sequence[str], batch_size: int) -> int:
        """Sources with the same group are decoded in one batch."""
        return index // batch_size

    def batch_decoder(
        self, model: nn.Module, vocabulary: Vocabulary, **options: Any
    ) -> Callable[[list[Example]], list[tuple[str, ...]]]:
        """The function from a batch of examples to the model's outputs."""
        raise NotImplementedError

    @torch.no_grad()
    def decode(
        self,
        model: nn.Module,
        vocabulary: Vocabulary,
        sources: Sequence[Sequence[str]],
        *,
        batch_size: int = 256,
        **options: Any,
    ) -> list[tuple[str, ...]]:
        """The model's output for each source (a classifier: its label), in batches
        of at most ``batch_size`` sources of one :meth:`group`."""
        model.eval()
        decode_batch = self.batch_decoder(model, vocabulary, **options)
        groups: dict[int, list[int]] = {}
        for i, source in enumerate(sources):
            groups.setdefault(self.group(i, source, batch_size), []).append(i)
        results: dict[int, tuple[str, ...]] = {}
        for indices in groups.values():
            for first in range(0, len(indices), batch_size):
                chunk = indices[first : first + batch_size]
                outputs = decode_batch([self.example(sources[i], ()) for i in chunk])
                results.update(zip(chunk, outputs, strict=True))
        return [results[i] for i in range(len(sources))]

    def example(self, source: Sequence[str], prediction: Sequence[str]) -> Example:
        """The example whose batch gives the weights of ``source`` and
        ``prediction``."""
        return Example(tuple(source), tuple(prediction))

    def read(self, model: nn.Module, batch: Any) -> Tensor:
        """The model's output on ``batch``, while :meth:`attention_maps` records
        the weights :attr:`maps` names."""
        raise NotImplementedError

    def attention_maps(
        self,
        model: nn.Module,
        vocabulary: Vocabulary,
        source: Sequence[str],
        prediction: Sequence[str],
    ) -> list[AttentionMap]:
        """One map per attention kind and layer while reading ``source``."""
        if not self.maps:
            return []  # no attention at all
        batch = self.collate([self.example(source, prediction)], vocabulary)
        with record(model, [name for name, *_ in self.maps]) as found:
            self.read(model, batch)
        sources, predicted = _labels(source), _labels(prediction)
        labels = {
            "source": sources,
            "target": ["<bos>", *predicted],
            "prompt": [*sources, "<bos>", *predicted],
        }
        return [
            (f"{title}, layer {i + 1}", w.tensor[0], labels[queries], labels[keys])
            for name, title, queries, keys in self.maps
            for i, w in enumerate(found.each(name))
        ]


# --8<-- [end:ModelKind]

MODEL_KINDS: dict[str, ModelKind] = {}
_Kind = TypeVar("_Kind", bound=type[ModelKind])


def register(kind: _Kind) -> _Kind:
    """Add a kind to :data:`MODEL_KINDS` under its ``name``."""
    MODEL_KINDS[kind.name] = kind()
    return kind


def kind_of(name: str) -> ModelKind:
    """The registered kind called ``name``."""
    if name not in MODEL_KINDS:
        raise ValueError(
            f"model kind must be one of {tuple(MODEL_KINDS)}, got {name!r}"
        )
    return MODEL_KINDS[name]


def _strategy(
    method: str,
    width: int = 4,
    alpha: float = 0.6,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> Strategy:
    """``strategy(decoder, start, max_len, eos, pad)`` for greedy, beam or sample."""
    if method == "greedy":
        return greedy
    if method == "beam":
        return partial(beam_search, width=width, alpha=alpha)
    if method == "sample":
        generator = torch.Generator().manual_seed(seed)
        return partial(
            sample, temperature=temperature, top_k=top_k, generator=generator
        )
    raise ValueError(f"method must be greedy, beam or sample, got {method!r}")


class _Generating(ModelKind):
    """A kind that writes its answer token by token, with the key/value cache."""

    learns = "seq2seq"

    def teacher_forced(self, model: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        """(log-probabilities of every next token, the tokens they should name)."""
        raise NotImplementedError

    def loss(
        self, model: nn.Module, batch: Any, vocabulary: Vocabulary, smoothing: float
    ) -> tuple[Tensor, Tensor]:
        log_probs, targets = self.teacher_forced(model, batch)
        return smoothed_cross_entropy(log_probs, targets, vocabulary.pad, smoothing)

    def start(
        self, model: nn.Module, examples: list[Example], vocabulary: Vocabulary
    ) -> tuple[IncrementalDecoder, Tensor]:
        """The cached decoder of these sources and the tokens it starts from."""
        raise NotImplementedError

    def batch_decoder(
        self,
        model: nn.Module,
        vocabulary: Vocabulary,
        *,
        method: str = "greedy",
        max_len: int | None = None,
        **options: Any,
    ) -> Callable[[list[Example]], list[tuple[str, ...]]]:
        strategy = _strategy(method, **options)  # one sampler for every batch

        def decode_batch(examples: list[Example]) -> list[tuple[str, ...]]:
            limit = max_len or max(len(e.source) for e in examples) + 12
            decoder, start = self.start(model, examples, vocabulary)
            decoded = strategy(decoder, start, limit, vocabulary.eos, vocabulary.pad)
            rows = strip_after_eos(decoded.tokens, vocabulary.eos)
            return [vocabulary.decode(ids) for ids in rows]

        return decode_batch


@register
class EncoderDecoderKind(_Generating):
    """The paper's encoder–decoder Transformer: source in, target out."""

    name = "encoder-decoder"
    maps = (
        (f"stacks.encoder.{_SELF}", "encoder self-attention", "source", "source"),
        (f"stacks.decoder.{_SELF}", "decoder self-attention", "target", "target"),
        (f"stacks.decoder.{_CROSS}", "cross-attention", "target", "source"),
    )

    def network(self, vocab: int, config: TransformerConfig) -> nn.Module:
        return Transformer(vocab, vocab, config)

    def collate(self, examples: Sequence[Example], vocabulary: Vocabulary) -> Any:
        return collate(examples, vocabulary)

    def teacher_forced(self, model: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        log_probs = model(
            batch.source, batch.target_in, batch.source_mask, batch.target_mask
        )
        return log_probs, batch.target_out

    def start(
        self, model: nn.Module, examples: list[Example], vocabulary: Vocabulary
    ) -> tuple[IncrementalDecoder, Tensor]:
        batch = collate(examples, vocabulary)
        decoder = IncrementalDecoder(model, batch.source, batch.source_mask)
        return decoder, batch.target_in[:, :1]

    def read(self, model: nn.Module, batch: Any) -> Tensor:
        return model(batch.source, batch.target_in)


@register
class DecoderOnlyKind(_Generating):
    """A causal language model that continues the prompt ``source <bos>``."""

    name = "decoder-only"
    maps = ((f"blocks.{_SELF}", "causal self-attention", "prompt", "prompt"),)

    def network(self, vocab: int, config: TransformerConfig) -> nn.Module:
        return LanguageModel(vocab, config)

    def collate(self, examples: Sequence[Example], vocabulary: Vocabulary) -> Any:
        return collate_lm(examples, vocabulary)

    def teacher_forced(self, model: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        return model(batch.inputs), batch.outputs

    def group(self, index: int, source: Sequence[str], batch_size: int) -> int:
        return len(source)  # prompts of equal length: no left padding needed

    def start(
        self, model: nn.Module, examples: list[Example], vocabulary: Vocabulary
    ) -> tuple[IncrementalDecoder, Tensor]:
        batch = collate_lm(examples, vocabulary)
        return IncrementalDecoder(model), batch.inputs[:, : batch.prompt_lengths[0]]

    def read(self, model: nn.Module, batch: Any) -> Tensor:
        return model(batch.inputs)


class _Classifying(ModelKind):
    """A kind that reads a whole review and answers one of :data:`LABELS`."""

    learns = "classify"

    def example(self, source: Sequence[str], prediction: Sequence[str]) -> Example:
        return Example(tuple(source), (LABELS[0],))  # any label: only read

    def collate(self, examples: Sequence[Example], vocabulary: Vocabulary) -> Any:
        return collate_classify(examples, vocabulary, LABELS)

    def loss(
        self, model: nn.Module, batch: Any, vocabulary: Vocabulary, smoothing: float
    ) -> tuple[Tensor, Tensor]:
        logits = model(batch.source, batch.mask)
        return smoothed_cross_entropy(logits, batch.labels, -100, smoothing)

    def batch_decoder(
        self, model: nn.Module, vocabulary: Vocabulary, **options: Any
    ) -> Callable[[list[Example]], list[tuple[str, ...]]]:
        del options  # one label per source: nothing to search

        def decode_batch(examples: list[Example]) -> list[tuple[str, ...]]:
            batch = self.collate(examples, vocabulary)
            best = model(batch.source, batch.mask).argmax(-1)  # allow-raw: best class
            return [(LABELS[i],) for i in best.tolist()]

        return decode_batch


@register
class ClassifierKind(_Classifying):
    """A Transformer encoder, pooled, then a linear layer over the labels."""

    name = "classifier"
    maps = ((f"encoder.{_SELF}", "encoder self-attention", "source", "source"),)

    def network(self, vocab: int, config: TransformerConfig) -> nn.Module:
        return TransformerClassifier(vocab, len(LABELS), config)

    def read(self, model: nn.Module, batch: Any) -> Tensor:
        return model(batch.source, batch.mask)


@register
class BagOfWordsKind(_Classifying):
    """The baseline that cannot read word order: mean word embedding, then linear."""

    name = "bag-of-words"

    def build(self, spec: RunSpec) -> nn.Module:
        return BagOfWords(spec.vocab, len(LABELS), spec.config.layer)  # no positions
