r"""Tasks that need no download: generated, deterministic given a seed, held out.

Every task yields :class:`~named_transformer.workflows.data.Example` pairs of token
tuples ``(source, target)``:

* ``copy``, ``reverse``, ``sort``: digit sequences (10 symbols) of lengths
  ``min_len`` … ``max_len`` (default 10–20), the target the sequence copied,
  reversed or sorted;
* ``histogram``: each position outputs how often its token occurs in the whole
  sequence (dataflowr's "think like transformers" exercise). The source starts
  with ``<bos>``: attention spread evenly over the $c$ equal tokens averages $c$ equal
  vectors and so cannot tell $c$; with one fixed extra token to attend to as well, each
  gets $1/(c+1)$, which can;
* ``dates``: a date written in one of many human formats (``"Sunday, March 7, 2021"``,
  ``"7.3.2021"``, ``"the 7th of march 2021"`` …, generated with the standard library's
  :mod:`datetime`) → ISO ``2021-03-07``, character by character;
* ``sentiment``: synthetic reviews with negation and intensifiers → ``positive`` /
  ``negative`` (see :mod:`named_transformer.workflows.sentiment`).

Each item's split comes from its *key*
(:func:`~named_transformer.workflows.data.split_of`): the source sequence; for dates the
calendar date itself, so a held-out date is never seen in any format. The held-out
splits hold distinct items.
"""

from __future__ import annotations

import datetime
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from named_transformer.axes import checked
from named_transformer.workflows.data import (
    SPLITS,
    START,
    Example,
    Vocabulary,
    split_of,
)
from named_transformer.workflows.sentiment import (
    sentiment_vocabulary,
    synthetic_review,
    words,
)

__all__ = [
    "TASKS",
    "TaskInfo",
    "date_formats",
    "detokenize",
    "make_task",
    "task_vocabulary",
    "tokenize",
]

DIGITS = tuple("0123456789")


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
    """The ``dates`` task's human formats, by name; each maps a date to a string."""
    m = lambda d: MONTHS[d.month - 1]  # noqa: E731
    return {
        "d month yyyy": lambda d: f"{d.day} {m(d)} {d.year}",
        "Month d, yyyy": lambda d: f"{m(d).capitalize()} {d.day}, {d.year}",
        "MONTH d yyyy": lambda d: f"{m(d).upper()} {d.day} {d.year}",
        "dd Mon yyyy": lambda d: f"{d.day:02d} {m(d)[:3].capitalize()} {d.year}",
        "Mon d yyyy": lambda d: f"{m(d)[:3]} {d.day} {d.year}",
        "Weekday, Month d, yyyy": lambda d: (
            f"{WEEKDAYS[d.weekday()].capitalize()}, "
            f"{m(d).capitalize()} {d.day}, {d.year}"
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
    del min_len, max_len
    return synthetic_review(rng)


@dataclass(frozen=True)
class TaskInfo:
    """How a task is generated and read.

    Its ``kind`` is ``seq2seq`` or ``classify``; its tokens are joined by ``sep``. A
    user's text is read as ``digits`` (anything else is dropped; lengths ``min_len`` …
    ``max_len`` apply), ``characters`` or ``words``; ``start``: the source begins with
    ``<bos>``.
    """

    generate: Callable
    kind: str
    sep: str
    reads: str
    start: bool = False

    @property
    def lengths(self) -> bool:
        """Whether ``min_len`` and ``max_len`` set the length of a source."""
        return self.reads == "digits"


TASKS: dict[str, TaskInfo] = {
    "copy": TaskInfo(_copy, "seq2seq", "", "digits"),
    "reverse": TaskInfo(_reverse, "seq2seq", "", "digits"),
    "sort": TaskInfo(_sort, "seq2seq", "", "digits"),
    "histogram": TaskInfo(_histogram, "seq2seq", " ", "digits", start=True),
    "dates": TaskInfo(_dates, "seq2seq", "", "characters"),
    "sentiment": TaskInfo(_sentiment, "classify", " ", "words"),
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
    """``n`` examples of task ``name`` from ``split``: ``train``, ``valid`` or ``test``.

    Deterministic given ``seed``. Items are drawn at random and kept when the hash of
    their key falls in ``split`` (:func:`split_of`), so the splits are disjoint by
    construction; ``valid`` and ``test`` hold distinct items, ``train`` may repeat short
    ones.
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
                f"task {name!r} with lengths {min_len}-{max_len} has too few distinct "
                f"items for {n} {split} examples"
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
    """Read a user's input for task ``name``.

    Digits for the digit tasks, characters for dates, lower-case words for sentiment.
    """
    info = _task(name)
    if info.reads == "characters":
        return tuple(text.strip())
    if info.reads == "words":
        return words(text)
    digits = tuple(c for c in text if c.isdigit())
    return (START, *digits) if info.start else digits


@checked
def detokenize(name: str, tokens: Iterable[str]) -> str:
    """Join tokens the way task ``name`` writes them (without a leading ``<bos>``)."""
    return _task(name).sep.join(t for t in tokens if t != START)


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
    return sentiment_vocabulary()
