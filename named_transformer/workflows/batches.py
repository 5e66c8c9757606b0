r"""Batches: padded token ids and their masks, one kind of batch per kind of model.

:func:`collate` pads an encoder–decoder batch, :func:`collate_lm` a decoder-only one
(``source <bos> target <eos>``), :func:`collate_classify` a classification one. Their
masks come from :func:`~named_transformer.core.masks.key_padding_mask` and
:func:`~named_transformer.core.masks.causal_mask` (True = may attend).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Self

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core.masks import causal_mask, key_padding_mask, padding_mask
from named_transformer.workflows.data import Example, Vocabulary

__all__ = [
    "Batch",
    "ClassifyBatch",
    "LMBatch",
    "collate",
    "collate_classify",
    "collate_lm",
]


def _pad(rows: list[list[int]], pad: int) -> Tensor:
    width = max((len(r) for r in rows), default=0)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)


def _lengths(rows: list[list[int]], extra: int = 0) -> Tensor:
    """Each row's length plus ``extra`` (tokens added to every row, or cut: < 0)."""
    return torch.tensor([len(r) + extra for r in rows], dtype=torch.long)


def _causal_and_padding(tokens: Tensor, lengths: Tensor) -> Tensor:
    """Decoder self-attention: causal and ignoring padded keys."""
    t = tokens.shape[-1]
    return causal_mask(t, device=tokens.device) & key_padding_mask(lengths, t)


class _Tensors:
    """A dataclass of tensors that moves to a device as one."""

    def to(self, device: torch.device | str) -> Self:
        return type(self)(*(getattr(self, f.name).to(device) for f in fields(self)))


@dataclass
class _Sources(_Tensors):
    """The padded source token ids and each row's real length: what an encoder reads
    (the first fields of an encoder–decoder and of a classification batch)."""

    source: Int[Tensor, "batch seq"]
    source_lengths: Int[Tensor, " batch"]


def _sources(sources: list[list[int]], pad: int) -> dict[str, Tensor]:
    """The fields of :class:`_Sources` for the encoded ``sources``."""
    return {"source": _pad(sources, pad), "source_lengths": _lengths(sources)}


@dataclass
class Batch(_Sources):
    """A padded encoder–decoder batch: ``source`` and ``source_lengths``, then the
    targets.

    ``target_in`` = ``<bos>`` + target (teacher forcing), ``target_out`` = target +
    ``<eos>``, padded with ``<pad>`` (ignored by the loss).
    """

    target_in: Int[Tensor, "batch seq_q"]
    target_out: Int[Tensor, "batch seq_q"]
    target_lengths: Int[Tensor, " batch"]

    @property
    def source_mask(self) -> Bool[Tensor, "batch 1 seq"]:
        """Encoder self- and cross-attention mask: queries ignore padded source keys."""
        return key_padding_mask(self.source_lengths, self.source.shape[-1])

    @property
    def target_mask(self) -> Bool[Tensor, "batch seq_q seq_q"]:
        """Decoder self-attention: causal and ignoring padded target keys."""
        return _causal_and_padding(self.target_in, self.target_lengths)

    @property
    def target_tokens(self) -> int:
        """How many target tokens the loss counts (for tokens/s)."""
        return int(self.target_lengths.sum())


@dataclass
class LMBatch(_Tensors):
    """A decoder-only batch: each row is ``source <bos> target <eos>``, shifted by one.

    ``<bos>`` separates the prompt from the answer; ``outputs`` is ``<pad>`` (ignored by
    the loss) on the prompt, so only the answer and its ``<eos>`` are learned.
    """

    inputs: Int[Tensor, "batch seq"]
    outputs: Int[Tensor, "batch seq"]
    lengths: Int[Tensor, " batch"]
    prompt_lengths: Int[Tensor, " batch"]

    @property
    def mask(self) -> Bool[Tensor, "batch seq seq"]:
        """Causal and ignoring padded keys."""
        return _causal_and_padding(self.inputs, self.lengths)

    @property
    def target_tokens(self) -> int:
        return int((self.lengths - self.prompt_lengths + 1).sum())


# --8<-- [start:collate]
@checked
def collate(examples: Sequence[Example], vocabulary: Vocabulary) -> Batch:
    """Pad source and target sequences of ``examples`` into one :class:`Batch`."""
    if not examples:
        raise ValueError("collate needs at least one example")
    sources = [vocabulary.encode(e.source) for e in examples]
    targets = [vocabulary.encode(e.target) for e in examples]
    return Batch(
        **_sources(sources, vocabulary.pad),
        target_in=_pad([[vocabulary.bos] + t for t in targets], vocabulary.pad),
        target_out=_pad([t + [vocabulary.eos] for t in targets], vocabulary.pad),
        target_lengths=_lengths(targets, extra=1),  # each target and its <eos>
    )


# --8<-- [end:collate]


# --8<-- [start:collate_lm]
@checked
def collate_lm(examples: Sequence[Example], vocabulary: Vocabulary) -> LMBatch:
    """Pad ``source <bos> target <eos>`` rows for a decoder-only model.

    The outputs are the inputs shifted by one.
    """
    if not examples:
        raise ValueError("collate_lm needs at least one example")
    rows, prompts = [], []
    for e in examples:
        prompt = vocabulary.encode(e.source) + [vocabulary.bos]
        rows.append(prompt + vocabulary.encode(e.target) + [vocabulary.eos])
        prompts.append(len(prompt))
    outputs = [
        [vocabulary.pad] * (p - 1) + r[p:] for r, p in zip(rows, prompts, strict=True)
    ]
    return LMBatch(
        inputs=_pad([r[:-1] for r in rows], vocabulary.pad),
        outputs=_pad(outputs, vocabulary.pad),
        lengths=_lengths(rows, extra=-1),  # the inputs: the rows less their last
        prompt_lengths=torch.tensor(prompts, dtype=torch.long),
    )


# --8<-- [end:collate_lm]


@dataclass
class ClassifyBatch(_Sources):
    """A padded classification batch: token ids (``source``), their lengths
    (``source_lengths``), one label id per row."""

    labels: Int[Tensor, " batch"]

    @property
    def mask(self) -> Bool[Tensor, "batch seq"]:
        """True at real tokens, False at padding."""
        return padding_mask(self.source_lengths, self.source.shape[-1])

    @property
    def target_tokens(self) -> int:
        return int(self.labels.shape[0])


# --8<-- [start:collate_classify]
@checked
def collate_classify(
    examples: Sequence[Example], vocabulary: Vocabulary, labels: Sequence[str]
) -> ClassifyBatch:
    """Pad the sources of ``examples``; each target is one label out of ``labels``."""
    if not examples:
        raise ValueError("collate_classify needs at least one example")
    sources = [vocabulary.encode(e.source) for e in examples]
    unknown = {e.target[0] for e in examples} - set(labels)
    if unknown:
        raise ValueError(f"labels {sorted(unknown)} are not among {list(labels)}")
    return ClassifyBatch(
        **_sources(sources, vocabulary.pad),
        labels=torch.tensor([list(labels).index(e.target[0]) for e in examples]),
    )


# --8<-- [end:collate_classify]
