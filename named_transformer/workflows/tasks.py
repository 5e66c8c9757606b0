r"""Tasks that need no download: generated, deterministic given a seed, held out by construction.

Every task yields :class:`Example` pairs of token tuples ``(source, target)``:

* ``copy``, ``reverse``, ``sort``: digit sequences (10 symbols) of lengths
  ``min_len`` … ``max_len`` (default 10–20), the target the sequence copied, reversed or sorted;
* ``histogram``: each position outputs how often its token occurs in the whole sequence
  (dataflowr's "think like transformers" exercise, seed 05). The source starts with
  ``<bos>``: attention spread evenly over the $c$ equal tokens averages $c$ equal vectors
  and so cannot tell $c$; with one fixed extra token to attend to as well, each gets
  $1/(c+1)$, which can;
* ``dates``: a date written in one of many human formats (``"Sunday, March 7, 2021"``,
  ``"7.3.2021"``, ``"the 7th of march 2021"`` …, generated with the standard library's
  :mod:`datetime`) → ISO ``2021-03-07``, character by character;
* ``sentiment``: synthetic reviews with negation and intensifiers → ``positive`` /
  ``negative`` (see :mod:`named_transformer.workflows.sentiment`).

**Held out by construction.** Each item is assigned to a split by a hash of its *key*
(the source sequence; for dates the calendar date itself, so a held-out date is never seen
in any format): bucket 0 of 10 is ``test``, bucket 1 is ``valid``, the rest ``train``.
The splits are disjoint whatever the seeds, and the held-out splits hold distinct items.

A :class:`Vocabulary` maps tokens to ids with the specials ``<pad>``, ``<bos>``, ``<eos>``,
``<unk>`` at ids 0–3; :func:`collate` pads a list of examples into a :class:`Batch`,
whose masks come from :func:`~named_transformer.core.masks.key_padding_mask` and
:func:`~named_transformer.core.masks.causal_mask` (True = may attend).
"""

from __future__ import annotations

import datetime
import hashlib
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import NamedTuple

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core.masks import causal_mask, key_padding_mask, padding_mask

__all__ = [
    "SPECIALS",
    "START",
    "TASKS",
    "Batch",
    "Example",
    "LMBatch",
    "Vocabulary",
    "collate",
    "ClassifyBatch",
    "collate_classify",
    "collate_lm",
    "date_formats",
    "detokenize",
    "make_task",
    "split_of",
    "task_vocabulary",
    "tokenize",
]

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
START = SPECIALS[1]  # a source that begins with <bos> (histogram)
DIGITS = tuple("0123456789")
SPLITS = ("train", "valid", "test")


class Example(NamedTuple):
    """One item: a source and a target token sequence (a classification target is one label)."""

    source: tuple[str, ...]
    target: tuple[str, ...]


# --8<-- [start:split_of]
@checked
def split_of(key: str) -> str:
    """The split an item belongs to, from a stable hash of its key: 10% test, 10% valid."""
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 10
    return "test" if bucket == 0 else "valid" if bucket == 1 else "train"


# --8<-- [end:split_of]


# ----------------------------------------------------------------------------- digits
def _digits(rng: random.Random, min_len: int, max_len: int) -> tuple[str, ...]:
    return tuple(rng.choice(DIGITS) for _ in range(rng.randint(min_len, max_len)))


def _copy(rng, min_len, max_len):
    s = _digits(rng, min_len, max_len)
    return Example(s, s), "".join(s)


def _reverse(rng, min_len, max_len):
    s = _digits(rng, min_len, max_len)
    return Example(s, s[::-1]), "".join(s)


def _sort(rng, min_len, max_len):
    s = _digits(rng, min_len, max_len)
    return Example(s, tuple(sorted(s))), "".join(s)


def _histogram(rng, min_len, max_len):
    s = _digits(rng, min_len, max_len)
    counts = Counter(s)
    return Example((START, *s), tuple(str(counts[t]) for t in s)), "".join(s)


# ----------------------------------------------------------------------------- dates
MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
WEEKDAYS = (
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
)


def _ordinal(n: int) -> str:
    suffix = (
        "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    )
    return f"{n}{suffix}"


@checked
def date_formats() -> dict[str, Callable[[datetime.date], str]]:
    """The human formats of the ``dates`` task, by name; each maps a date to a string."""
    m = lambda d: MONTHS[d.month - 1]  # noqa: E731
    return {
        "d month yyyy": lambda d: f"{d.day} {m(d)} {d.year}",
        "Month d, yyyy": lambda d: f"{m(d).capitalize()} {d.day}, {d.year}",
        "MONTH d yyyy": lambda d: f"{m(d).upper()} {d.day} {d.year}",
        "dd Mon yyyy": lambda d: f"{d.day:02d} {m(d)[:3].capitalize()} {d.year}",
        "Mon d yyyy": lambda d: f"{m(d)[:3]} {d.day} {d.year}",
        "Weekday, Month d, yyyy": lambda d: (
            f"{WEEKDAYS[d.weekday()].capitalize()}, {m(d).capitalize()} {d.day}, {d.year}"
        ),
        "wkd d mon yyyy": lambda d: (
            f"{WEEKDAYS[d.weekday()][:3]} {d.day} {m(d)[:3]} {d.year}"
        ),
        "the dth of month yyyy": lambda d: f"the {_ordinal(d.day)} of {m(d)} {d.year}",
        "Month dth, yyyy": lambda d: f"{m(d).capitalize()} {_ordinal(d.day)}, {d.year}",
        "m/d/yyyy": lambda d: f"{d.month}/{d.day}/{d.year}",
        "d.m.yyyy": lambda d: f"{d.day}.{d.month}.{d.year}",
        "dd.mm.yyyy": lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",
        "yyyy/mm/dd": lambda d: f"{d.year}/{d.month:02d}/{d.day:02d}",
        "yyyymmdd": lambda d: d.strftime("%Y%m%d"),
        "d-Mon-yyyy": lambda d: f"{d.day}-{m(d)[:3].capitalize()}-{d.year}",
    }


_FIRST_DAY = datetime.date(1900, 1, 1).toordinal()
_LAST_DAY = datetime.date(2099, 12, 31).toordinal()


def _dates(rng, min_len, max_len):
    del min_len, max_len  # a date has the length its format gives it
    date = datetime.date.fromordinal(rng.randint(_FIRST_DAY, _LAST_DAY))
    formats = list(date_formats().values())
    text = rng.choice(formats)(date)
    return Example(tuple(text), tuple(date.isoformat())), date.isoformat()


def _sentiment(rng, min_len, max_len):
    from named_transformer.workflows.sentiment import synthetic_review

    del min_len, max_len
    return synthetic_review(rng)


@dataclass(frozen=True)
class TaskInfo:
    """How a task is generated and read: ``seq2seq`` or ``classify``; tokens joined by ``sep``."""

    generate: Callable
    kind: str
    sep: str


TASKS: dict[str, TaskInfo] = {
    "copy": TaskInfo(_copy, "seq2seq", ""),
    "reverse": TaskInfo(_reverse, "seq2seq", ""),
    "sort": TaskInfo(_sort, "seq2seq", ""),
    "histogram": TaskInfo(_histogram, "seq2seq", " "),
    "dates": TaskInfo(_dates, "seq2seq", ""),
    "sentiment": TaskInfo(_sentiment, "classify", " "),
}


def _task(name: str) -> TaskInfo:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {sorted(TASKS)}")
    return TASKS[name]


# --8<-- [start:make_task]
@checked
def make_task(
    name: str,
    n: int,
    seed: int = 0,
    split: str = "train",
    min_len: int = 10,
    max_len: int = 20,
) -> list[Example]:
    """``n`` examples of task ``name`` from ``split`` (``train``, ``valid`` or ``test``).

    Deterministic given ``seed``. Items are drawn at random and kept when the hash of their
    key falls in ``split`` (:func:`split_of`), so the splits are disjoint by construction;
    ``valid`` and ``test`` hold distinct items, ``train`` may repeat short ones.
    """
    info = _task(name)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not 1 <= min_len <= max_len:
        raise ValueError(
            f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}"
        )
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"{name}/{seed}/{split}/{min_len}/{max_len}")
    examples: list[Example] = []
    seen: set[str] = set()
    attempts, budget = 0, 200 * n + 1000
    while len(examples) < n:
        attempts += 1
        if attempts > budget:
            raise ValueError(
                f"task {name!r} with lengths {min_len}-{max_len} has too few distinct items for {n} {split} examples"
            )
        example, key = info.generate(rng, min_len, max_len)
        if split_of(key) != split or (split != "train" and key in seen):
            continue
        seen.add(key)
        examples.append(example)
    return examples


# --8<-- [end:make_task]


@checked
def tokenize(name: str, text: str) -> tuple[str, ...]:
    """Read a user's input for task ``name``: digits for the digit tasks, characters for dates,
    lower-case words for sentiment."""
    info = _task(name)
    if name == "dates":
        return tuple(text.strip())
    if info.sep == " " and name == "sentiment":
        from named_transformer.workflows.sentiment import words

        return words(text)
    digits = tuple(c for c in text if c.isdigit())
    return (START, *digits) if name == "histogram" else digits


@checked
def detokenize(name: str, tokens: Iterable[str]) -> str:
    """Join tokens the way task ``name`` writes them (without a leading ``<bos>``)."""
    return _task(name).sep.join(t for t in tokens if t != START)


# ----------------------------------------------------------------------------- vocabulary
# --8<-- [start:Vocabulary]
class Vocabulary:
    """Tokens ↔ ids, with ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>`` at ids 0, 1, 2, 3."""

    pad, bos, eos, unk = 0, 1, 2, 3

    def __init__(self, tokens: Iterable[str]) -> None:
        self.itos: list[str] = list(SPECIALS)
        for token in tokens:
            if token not in SPECIALS and token not in self.itos:
                self.itos.append(token)
        self.stoi = {token: i for i, token in enumerate(self.itos)}

    @classmethod
    def build(
        cls,
        sequences: Iterable[Sequence[str]],
        min_count: int = 1,
        max_size: int | None = None,
    ) -> Vocabulary:
        """The tokens seen at least ``min_count`` times, most frequent first (ties by name)."""
        counts = Counter(token for sequence in sequences for token in sequence)
        ranked = sorted(
            (t for t, c in counts.items() if c >= min_count),
            key=lambda t: (-counts[t], t),
        )
        return cls(
            ranked[: None if max_size is None else max(0, max_size - len(SPECIALS))]
        )

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.itos == other.itos

    def encode(
        self, tokens: Iterable[str], bos: bool = False, eos: bool = False
    ) -> list[int]:
        """Ids of ``tokens`` (unknown tokens → ``<unk>``), optionally framed by bos/eos."""
        ids = [self.stoi.get(token, self.unk) for token in tokens]
        return [self.bos] * bos + ids + [self.eos] * eos

    def decode(self, ids: Iterable[int], strip: bool = True) -> tuple[str, ...]:
        """Tokens of ``ids``; with ``strip``, stop at the first ``<eos>`` and drop pad/bos."""
        out = []
        for i in ids:
            i = int(i)
            if strip and i == self.eos:
                break
            if strip and i in (self.pad, self.bos):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else SPECIALS[self.unk])
        return tuple(out)

    def to_list(self) -> list[str]:
        """The tokens in id order (JSON-friendly; rebuild with ``Vocabulary(tokens)``)."""
        return list(self.itos)


# --8<-- [end:Vocabulary]


@checked
def task_vocabulary(name: str, max_len: int = 20) -> Vocabulary:
    """The fixed vocabulary of a generated task (independent of the data drawn)."""
    _task(name)
    if name in ("copy", "reverse", "sort"):
        return Vocabulary(DIGITS)
    if name == "histogram":
        return Vocabulary(DIGITS + tuple(str(i) for i in range(10, max_len + 1)))
    if name == "dates":
        sample = datetime.date(2021, 3, 7)
        chars = set("0123456789-")
        for month in range(1, 13):
            for day in (1, 2, 3, 11, 22, 27):
                for fmt in date_formats().values():
                    chars.update(fmt(sample.replace(month=month, day=day)))
        return Vocabulary(sorted(chars))
    from named_transformer.workflows.sentiment import sentiment_vocabulary

    return sentiment_vocabulary()


# ----------------------------------------------------------------------------- batches
def _pad(rows: list[list[int]], pad: int) -> Tensor:
    width = max((len(r) for r in rows), default=0)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)


@dataclass
class Batch:
    """A padded encoder–decoder batch. ``target_in`` = ``<bos>`` + target (teacher forcing),
    ``target_out`` = target + ``<eos>``, padded with ``<pad>`` (ignored by the loss)."""

    source: Int[Tensor, "batch seq"]
    source_lengths: Int[Tensor, " batch"]
    target_in: Int[Tensor, "batch seq_q"]
    target_out: Int[Tensor, "batch seq_q"]
    target_lengths: Int[Tensor, " batch"]

    def to(self, device: torch.device | str) -> Batch:
        return type(self)(*(getattr(self, f.name).to(device) for f in fields(self)))

    @property
    def source_mask(self) -> Bool[Tensor, "batch 1 seq"]:
        """Encoder self-attention and cross-attention: every query ignores padded source keys."""
        return key_padding_mask(self.source_lengths, self.source.shape[-1])

    @property
    def target_mask(self) -> Bool[Tensor, "batch seq_q seq_q"]:
        """Decoder self-attention: causal and ignoring padded target keys."""
        t = self.target_in.shape[-1]
        return causal_mask(t, device=self.target_in.device) & key_padding_mask(
            self.target_lengths, t
        )

    @property
    def target_tokens(self) -> int:
        """How many target tokens the loss counts (for tokens/s)."""
        return int(self.target_lengths.sum())


@dataclass
class LMBatch:
    """A decoder-only batch: each row is ``source <bos> target <eos>``, shifted by one.

    ``<bos>`` separates the prompt from the answer; ``outputs`` is ``<pad>`` (ignored by
    the loss) on the prompt, so only the answer and its ``<eos>`` are learned.
    """

    inputs: Int[Tensor, "batch seq"]
    outputs: Int[Tensor, "batch seq"]
    lengths: Int[Tensor, " batch"]
    prompt_lengths: Int[Tensor, " batch"]

    def to(self, device: torch.device | str) -> LMBatch:
        return type(self)(*(getattr(self, f.name).to(device) for f in fields(self)))

    @property
    def mask(self) -> Bool[Tensor, "batch seq seq"]:
        """Causal and ignoring padded keys."""
        t = self.inputs.shape[-1]
        return causal_mask(t, device=self.inputs.device) & key_padding_mask(
            self.lengths, t
        )

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
        source=_pad(sources, vocabulary.pad),
        source_lengths=torch.tensor([len(s) for s in sources], dtype=torch.long),
        target_in=_pad([[vocabulary.bos] + t for t in targets], vocabulary.pad),
        target_out=_pad([t + [vocabulary.eos] for t in targets], vocabulary.pad),
        target_lengths=torch.tensor([len(t) + 1 for t in targets], dtype=torch.long),
    )


# --8<-- [end:collate]


# --8<-- [start:collate_lm]
@checked
def collate_lm(examples: Sequence[Example], vocabulary: Vocabulary) -> LMBatch:
    """Pad ``source <bos> target <eos>`` rows for a decoder-only model, shifted by one."""
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
        lengths=torch.tensor([len(r) - 1 for r in rows], dtype=torch.long),
        prompt_lengths=torch.tensor(prompts, dtype=torch.long),
    )


# --8<-- [end:collate_lm]


@dataclass
class ClassifyBatch:
    """A padded classification batch: token ids, their lengths, and one label id per row."""

    source: Int[Tensor, "batch seq"]
    source_lengths: Int[Tensor, " batch"]
    labels: Int[Tensor, " batch"]

    def to(self, device: torch.device | str) -> ClassifyBatch:
        return type(self)(*(getattr(self, f.name).to(device) for f in fields(self)))

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
        source=_pad(sources, vocabulary.pad),
        source_lengths=torch.tensor([len(s) for s in sources], dtype=torch.long),
        labels=torch.tensor([list(labels).index(e.target[0]) for e in examples]),
    )


# --8<-- [end:collate_classify]
