r"""What every task is made of: examples, splits held out by construction, a vocabulary.

An :class:`Example` is a pair of token tuples ``(source, target)`` (a classification
target is one label). **Held out by construction**: each item is assigned to a split by
a hash of its *key* (:func:`split_of`): bucket 0 of 10 is ``test``, bucket 1 is
``valid``, the rest ``train``, so the splits are disjoint whatever the seeds. A
:class:`Vocabulary` maps tokens to ids with the specials ``<pad>``, ``<bos>``,
``<eos>``, ``<unk>`` at ids 0–3.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from named_transformer.axes import checked

__all__ = ["SPECIALS", "SPLITS", "START", "Example", "Vocabulary", "split_of"]

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
START = SPECIALS[1]  # a source that begins with <bos> (histogram)
SPLITS = ("train", "valid", "test")


class Example(NamedTuple):
    """One item: a source and a target token sequence.

    A classification target is one label.
    """

    source: tuple[str, ...]
    target: tuple[str, ...]


# --8<-- [start:split_of]
@checked
def split_of(key: str) -> str:
    """The split of an item, from a stable hash of its key: 10% test, 10% valid."""
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 10
    return "test" if bucket == 0 else "valid" if bucket == 1 else "train"


# --8<-- [end:split_of]


# --8<-- [start:Vocabulary]
class Vocabulary:
    """Tokens ↔ ids, with ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>`` at ids 0–3."""

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
        """The tokens seen at least ``min_count`` times, most frequent first.

        Ties are broken by name.
        """
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
        """Ids of ``tokens`` (unknown → ``<unk>``), optionally framed by bos/eos."""
        ids = [self.stoi.get(token, self.unk) for token in tokens]
        return [self.bos] * bos + ids + [self.eos] * eos

    def decode(self, ids: Iterable[int], strip: bool = True) -> tuple[str, ...]:
        """Tokens of ``ids``.

        With ``strip``, stop at the first ``<eos>`` and drop pad/bos.
        """
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
        """The tokens in id order (JSON-friendly).

        Rebuild with ``Vocabulary(tokens)``.
        """
        return list(self.itos)


# --8<-- [end:Vocabulary]
