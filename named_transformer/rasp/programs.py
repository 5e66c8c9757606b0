r"""Example RASP programs, the ones the workflows learn from data and a few more.

Each builder returns the program's output s-op; :data:`PROGRAMS` names them with a
default vocabulary, maximum length and example input (what the command line and the
tests use). The constructions follow Weiss et al. (2021) and Tracr's ``lib.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from named_transformer.rasp.program import (
    Comparison,
    SOp,
    aggregate,
    indices,
    map,
    numerical,
    select,
    selector_width,
    sequence_map,
    tokens,
)

__all__ = [
    "PROGRAMS",
    "ExampleProgram",
    "make_dyck1",
    "make_histogram",
    "make_length",
    "make_most_frequent",
    "make_reverse",
    "make_sort",
    "make_sort_unique",
]


# --8<-- [start:length]
def make_length() -> SOp:
    """$n$ at every position: the width of the all-true selector."""
    everything = select(tokens, tokens, Comparison.TRUE)
    return selector_width(everything).named("length")


# --8<-- [end:length]


# --8<-- [start:reverse]
def make_reverse(sop: SOp = tokens) -> SOp:
    """``sop`` backwards: the query at position $j$ reads the key at position
    $n - 1 - j$."""
    opposite = sequence_map(lambda n, i: n - i - 1, make_length(), indices)
    flip = select(indices, opposite.named("opposite"), Comparison.EQ)
    return aggregate(flip, sop).named("reverse")


# --8<-- [end:reverse]


# --8<-- [start:histogram]
def make_histogram() -> SOp:
    """How many times each position's token occurs in the input."""
    same = select(tokens, tokens, Comparison.EQ)
    return selector_width(same).named("histogram")


# --8<-- [end:histogram]


# --8<-- [start:sort]
def make_sort_unique(values: SOp = tokens, keys: SOp = tokens) -> SOp:
    """``values`` ordered by ``keys``, assumed all different: the key at position
    $i$ goes to the number of keys smaller than it."""
    smaller = select(keys, keys, Comparison.LT)
    target = selector_width(smaller).named("target")
    return aggregate(select(target, indices, Comparison.EQ), values).named("sort")


def make_sort(values: SOp = tokens, keys: SOp = tokens) -> SOp:
    """``values`` ordered by ``keys``, duplicates allowed: ties are broken by the
    position, the key becoming the pair (key, index), all different."""
    unique = sequence_map(lambda key, i: (key, i), keys, indices)
    return make_sort_unique(values, unique.named("key_index"))


# --8<-- [end:sort]


# --8<-- [start:most_frequent]
def make_most_frequent() -> SOp:
    """The most frequent token, at every position (ties: the earliest one).

    Sort the positions by (-count, index); the first in that order is read by every
    query.
    """
    count = make_histogram()
    rank_key = sequence_map(lambda c, i: (-c, i), count, indices).named("rank_key")
    rank = selector_width(select(rank_key, rank_key, Comparison.LT)).named("rank")
    first = map(lambda i: 0, indices).named("zero")
    return aggregate(select(rank, first, Comparison.EQ), tokens).named("most_frequent")


# --8<-- [end:most_frequent]


# --8<-- [start:dyck1]
def make_dyck1(opening: str = "(", closing: str = ")") -> SOp:
    """Whether the prefix ending here is balanced: 1 when it has as many closing as
    opening brackets and no prefix of it closes more than it opened; other tokens
    are ignored.

    The balance is a mean over the prefix (a numerical aggregate), so it is the
    bracket count divided by the prefix length: its sign is the count's.
    """
    step = numerical(map(lambda t: (t == opening) - (t == closing), tokens))
    prefix = select(indices, indices, Comparison.LEQ)
    balance = numerical(aggregate(prefix, step.named("step"))).named("balance")
    below = numerical(map(lambda b: int(b < 0), balance)).named("below_zero")
    broken = numerical(aggregate(prefix, below)).named("broken")
    closed = map(lambda b: b == 0, balance).named("closed")
    intact = map(lambda b: b == 0, broken).named("intact")
    both = sequence_map(lambda c, i: int(c and i), closed, intact)
    return both.named("dyck1")


# --8<-- [end:dyck1]


@dataclass(frozen=True)
class ExampleProgram:
    """A named example: the program, the vocabulary and maximum length it is compiled
    for by default, an example input, and whether its inputs must have no repeated
    token (``sort_unique``'s precondition)."""

    program: SOp
    vocabulary: tuple[str, ...]
    max_length: int
    example: str
    about: str
    unique_tokens: bool = False


_LETTERS = ("a", "b", "c", "d")
PROGRAMS: dict[str, ExampleProgram] = {
    "length": ExampleProgram(make_length(), _LETTERS, 8, "abcab", "the length"),
    "reverse": ExampleProgram(
        make_reverse(), _LETTERS, 8, "abcd", "the input reversed"
    ),
    "histogram": ExampleProgram(
        make_histogram(), _LETTERS, 8, "abcab", "each token's count"
    ),
    "sort_unique": ExampleProgram(
        make_sort_unique(),
        _LETTERS,
        8,
        "dbca",
        "sorted, keys all different",
        unique_tokens=True,
    ),  # fmt: skip
    "sort": ExampleProgram(
        make_sort(), _LETTERS, 8, "dbcab", "sorted, ties by position"
    ),
    "most_frequent": ExampleProgram(
        make_most_frequent(), _LETTERS, 8, "abcbd", "the most frequent token"
    ),
    "dyck1": ExampleProgram(
        make_dyck1(), ("(", ")", "a", "b"), 8, "(()a)", "balanced prefix (Dyck-1)"
    ),
}
"""The example programs by name."""
