r"""Sentiment: synthetic reviews (negation, intensifiers), a contrast set, and IMDB.

A synthetic review has one or two evaluative clauses (``the plot was not very good``)
and up to two neutral sentences, some of which contain a negation that changes nothing
(``i had not heard of it before .``). A clause's polarity is its adjective's, flipped by
a negator (``not``, ``never``) in front of it; intensifiers (``very``, ``really`` …)
keep it. Two clauses in one review agree, so the label is well defined.

The **negation contrast set** holds pairs of reviews that differ only by one negation
and have opposite labels. Its two members contain the same words but for the negator,
which is as frequent in positive as in negative reviews, so a bag-of-words model (a
linear function of word counts) cannot tell them apart: it scores about 50% there, while
a model that reads word order can reach 100%.

:func:`load_imdb` reads the standard ``aclImdb/{train,test}/{pos,neg}/*.txt`` layout of
Maas et al. (2011) when you have the data; nothing is downloaded.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import torch
from einops import reduce
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.workflows.data import Example, Vocabulary, split_of

__all__ = [
    "LABELS",
    "BagOfWords",
    "load_imdb",
    "negation_contrast_set",
    "sentiment_vocabulary",
    "synthetic_review",
    "words",
]

LABELS = ("negative", "positive")
ASPECTS = (
    "the acting", "the plot", "the story", "the film", "the movie", "the music",
    "the dialogue", "the ending", "the cast", "the script", "the camera work",
    "the pacing",
)  # fmt: skip
VERBS = ("was", "is", "felt", "seemed")
POSITIVE = (
    "good", "great", "excellent", "wonderful", "brilliant", "enjoyable", "superb",
    "moving", "clever", "charming", "delightful", "beautiful", "fun", "solid",
)  # fmt: skip
NEGATIVE = (
    "bad", "awful", "terrible", "boring", "dull", "weak", "poor", "horrible",
    "tedious", "bland", "clumsy", "dreadful", "forgettable", "messy",
)  # fmt: skip
INTENSIFIERS = (
    "very",
    "really",
    "extremely",
    "truly",
    "incredibly",
    "quite",
    "so",
    "absolutely",
)
NEGATORS = ("not", "never")
OPENERS = ("honestly ,", "overall ,", "i think", "in my opinion ,", "to be fair ,")
NEUTRAL = (
    "i saw it last week .",
    "my friend recommended it .",
    "it runs about two hours .",
    "we watched it at home .",
    "i had not heard of it before .",
    "i went in with no expectations .",
    "it was not my first time at the cinema .",
    "the tickets were never cheap .",
)
JOINERS = ("and", ", and", ". also ,")


def _clause(rng: random.Random, positive: bool, negated: bool) -> list[str]:
    """``the plot was [not] [very] good``, of polarity ``positive`` after negation."""
    adjective_positive = positive != negated
    aspect, verb, negator = rng.choice(ASPECTS), rng.choice(VERBS), rng.choice(NEGATORS)
    intensifier = [rng.choice(INTENSIFIERS)] if rng.random() < 0.4 else []
    adjective = (POSITIVE if adjective_positive else NEGATIVE)[
        rng.randrange(len(POSITIVE))
    ]
    # every draw is made whether or not the clause is negated, so a contrast pair
    # (same seed, negation toggled) differs only by the negator
    return [*aspect.split(), verb, *[negator] * negated, *intensifier, adjective]


def _review(rng: random.Random, positive: bool, negations: list[bool]) -> list[str]:
    before = rng.choice(NEUTRAL).split() if rng.random() < 0.4 else []
    after = rng.choice(NEUTRAL).split() if rng.random() < 0.3 else []
    opener = rng.choice(OPENERS).split() if rng.random() < 0.4 else []
    body = opener + _clause(rng, positive, negations[0])
    for negated in negations[1:]:
        body += rng.choice(JOINERS).split() + _clause(rng, positive, negated)
    return before + body + ["."] + after


def _key(words: list[str]) -> str:
    """The review with its clause negators removed.

    Both members of a contrast pair share it.
    """
    return " ".join(w for i, w in enumerate(words) if not _is_clause_negator(words, i))


def _is_clause_negator(words: list[str], i: int) -> bool:
    return words[i] in NEGATORS and i > 0 and words[i - 1] in VERBS


# --8<-- [start:synthetic_review]
@checked
def synthetic_review(rng: random.Random) -> tuple[Example, str]:
    """One review and its split key.

    The label is ``positive`` or ``negative``; half the clauses are negated.
    """
    positive = rng.random() < 0.5
    negations = [rng.random() < 0.5 for _ in range(rng.choice((1, 1, 2)))]
    words = _review(rng, positive, negations)
    return Example(tuple(words), (LABELS[positive],)), _key(words)


# --8<-- [end:synthetic_review]


# --8<-- [start:negation_contrast_set]
@checked
def negation_contrast_set(
    n: int, seed: int = 0, split: str = "test"
) -> list[tuple[Example, Example]]:
    """``n`` pairs of one-clause reviews that differ only by a negator.

    The two members of a pair have opposite labels. Both belong to ``split`` (their key
    ignores the negator), so the ``test`` pairs are never trained on.
    """
    rng = random.Random(f"contrast/{seed}/{split}")
    pairs: list[tuple[Example, Example]] = []
    seen: set[str] = set()
    while len(pairs) < n:
        positive = rng.random() < 0.5
        state = rng.getstate()
        plain = _review(rng, positive, [False])
        rng.setstate(state)
        negated = _review(rng, not positive, [True])
        # the same draws: negated differs from plain only by the inserted negator
        key = _key(plain)
        if split_of(key) != split or key in seen:
            continue
        seen.add(key)
        pairs.append(
            (
                Example(tuple(plain), (LABELS[positive],)),
                Example(tuple(negated), (LABELS[not positive],)),
            )
        )
    return pairs


# --8<-- [end:negation_contrast_set]


@checked
def sentiment_vocabulary() -> Vocabulary:
    """Every word the synthetic reviews can contain, plus the two labels."""
    tokens: list[str] = []
    for group in (
        ASPECTS,
        VERBS,
        POSITIVE,
        NEGATIVE,
        INTENSIFIERS,
        NEGATORS,
        OPENERS,
        NEUTRAL,
        JOINERS,
    ):
        for phrase in group:
            tokens += phrase.split()
    return Vocabulary([*tokens, ".", *LABELS])


_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")


# --8<-- [start:words]
@checked
def words(text: str) -> tuple[str, ...]:
    """Lower-case word tokens; IMDB's ``<br />`` line breaks become spaces."""
    return tuple(_TOKEN.findall(text.replace("<br />", " ").lower()))


# --8<-- [end:words]


# --8<-- [start:load_imdb]
@checked
def load_imdb(root: str | Path, split: str = "train") -> list[Example]:
    """IMDB reviews (Maas et al., 2011) from ``root/aclImdb/{split}/{pos,neg}/*.txt``.

    ``root`` may also be the ``aclImdb`` folder itself. Files are read in sorted order
    (negatives, then positives), so the result is deterministic. Raises
    ``FileNotFoundError`` naming the folder when the layout is not there.
    """
    if split not in ("train", "test"):
        raise ValueError(f"IMDB split must be 'train' or 'test', got {split!r}")
    root = Path(root)
    base = root if root.name == "aclImdb" else root / "aclImdb"
    examples: list[Example] = []
    for label, folder in ((LABELS[0], "neg"), (LABELS[1], "pos")):
        directory = base / split / folder
        if not directory.is_dir():
            raise FileNotFoundError(
                f"no IMDB folder {directory} "
                f"(expected aclImdb/{{train,test}}/{{pos,neg}})"
            )
        for path in sorted(directory.glob("*.txt")):
            examples.append(Example(words(path.read_text(encoding="utf-8")), (label,)))
    return examples


# --8<-- [end:load_imdb]


# --8<-- [start:BagOfWords]
class BagOfWords(nn.Module):
    r"""The baseline: mean of the word embeddings, then a linear layer (fastText-style).

    $$\text{logits} = W \ndot{layer}
      \operatorname{mean}_{\mathsf{seq}}(E_{\text{tokens}}) + b$$

    A linear function of the word counts: word order, and so the scope of a negation,
    is invisible to it.
    """

    def __init__(self, vocab: int, classes: int, layer: int = 32) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab, layer) / layer**0.5)
        self.w_out = nn.Parameter(torch.randn(classes, layer) / layer**0.5)
        self.b_out = nn.Parameter(torch.zeros(classes))

    @checked
    def forward(
        self, tokens: Int[Tensor, "*batch seq"], mask: Bool[Tensor, "*batch seq"]
    ) -> Float[Tensor, "*batch classes"]:
        weights = mask.to(self.table.dtype)
        weights = weights / reduce(
            weights, "... seq -> ... 1", "sum"
        )  # mean over real tokens
        pooled = einsum(
            weights, self.table[tokens], "... seq, ... seq layer -> ... layer"
        )
        return (
            einsum(pooled, self.w_out, "... layer, classes layer -> ... classes")
            + self.b_out
        )


# --8<-- [end:BagOfWords]
