"""Tasks: deterministic generation, held-out splits disjoint by construction,
vocabulary, batching and masks; sentiment corpus, negation contrast set and the IMDB
loader."""

from __future__ import annotations

import datetime
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from named_transformer import causal_mask, key_padding_mask
from named_transformer.workflows.batches import collate, collate_lm
from named_transformer.workflows.data import (
    SPECIALS,
    START,
    Example,
    Vocabulary,
    split_of,
)
from named_transformer.workflows.sentiment import (
    INTENSIFIERS,
    NEGATIVE,
    NEGATORS,
    POSITIVE,
    VERBS,
    load_imdb,
    negation_contrast_set,
    words,
)
from named_transformer.workflows.tasks import (
    TASKS,
    date_formats,
    detokenize,
    make_task,
    task_vocabulary,
    tokenize,
)

DIGIT_TASKS = ["copy", "reverse", "sort", "histogram"]


def _key(name: str, example: Example) -> str:
    return (
        "".join(example.target)
        if name == "dates"
        else "".join(t for t in example.source if t != START)
    )


@pytest.mark.parametrize("name", sorted(TASKS))
def test_deterministic_given_seed(name):
    assert make_task(name, 50, seed=3) == make_task(name, 50, seed=3)
    assert make_task(name, 50, seed=3) != make_task(name, 50, seed=4)


@pytest.mark.parametrize("name", ["copy", "sort", "dates", "histogram"])
def test_held_out_is_disjoint_distinct_and_large(name):
    train = make_task(name, 3000, seed=0)
    test = make_task(name, 1000, seed=0, split="test")
    valid = make_task(name, 200, seed=0, split="valid")
    train_keys = {_key(name, e) for e in train}
    test_keys = [_key(name, e) for e in test]
    assert len(test) == 1000 and len(set(test_keys)) == 1000
    assert not train_keys & set(test_keys)
    assert not {_key(name, e) for e in valid} & (train_keys | set(test_keys))
    assert {split_of(k) for k in test_keys} == {"test"}


@pytest.mark.parametrize("name", DIGIT_TASKS)
@settings(deadline=None, max_examples=10)
@given(min_len=st.integers(1, 30), extra=st.integers(0, 15), seed=st.integers(0, 10**6))
def test_digit_tasks_are_right(name, min_len, extra, seed):
    max_len = min_len + extra
    for source, target in make_task(
        name, 20, seed=seed, min_len=min_len, max_len=max_len
    ):
        if name == "histogram":  # a fixed token to attend to first: counts need it
            assert source[0] == START
            source = source[1:]
        assert min_len <= len(source) <= max_len
        assert set(source) <= set("0123456789")
        counts = Counter(source)
        expected = {
            "copy": source,
            "reverse": source[::-1],
            "sort": tuple(sorted(source)),
            "histogram": tuple(str(counts[t]) for t in source),
        }[name]
        assert target == expected


def test_long_lengths_for_length_generalisation():
    long = make_task("reverse", 100, seed=0, split="test", min_len=21, max_len=40)
    assert {len(s) for s, _ in long} <= set(range(21, 41)) and max(
        len(s) for s, _ in long
    ) > 35


def test_dates_are_human_formats_of_the_iso_target():
    formats = date_formats()
    assert len(formats) >= 12
    used = Counter()
    for source, target in make_task("dates", 500, seed=1):
        date = datetime.date.fromisoformat("".join(target))
        renderings = {name: f(date) for name, f in formats.items()}
        matches = [name for name, text in renderings.items() if text == "".join(source)]
        assert matches, "".join(source)
        used.update(matches[:1])
    assert len(used) == len(formats)  # every format occurs


@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_vocabulary_covers_the_task(name):
    vocabulary = task_vocabulary(name)
    for example in make_task(name, 300, seed=2) + make_task(
        name, 300, seed=2, split="test"
    ):
        ids = vocabulary.encode(example.source + example.target)
        assert Vocabulary.unk not in ids
    if name in ("copy", "reverse", "sort"):
        assert len(vocabulary) == 10 + len(SPECIALS)


def test_bad_configuration_is_rejected():
    with pytest.raises(ValueError, match="unknown task"):
        make_task("translate", 1)
    with pytest.raises(ValueError, match="min_len"):
        make_task("copy", 1, min_len=5, max_len=3)
    with pytest.raises(ValueError, match="split"):
        make_task("copy", 1, split="dev")
    with pytest.raises(ValueError, match="too few distinct"):
        make_task("copy", 1000, split="test", min_len=1, max_len=1)


def test_vocabulary_round_trip_and_specials():
    vocabulary = Vocabulary.build([list("abca"), list("cb")])
    assert vocabulary.itos[:4] == list(SPECIALS)
    assert (vocabulary.pad, vocabulary.bos, vocabulary.eos, vocabulary.unk) == (
        0,
        1,
        2,
        3,
    )
    assert vocabulary.itos[4:] == ["a", "b", "c"]  # most frequent first, ties by name
    ids = vocabulary.encode("abz", bos=True, eos=True)
    assert ids == [1, 4, 5, 3, 2]
    assert vocabulary.decode(ids) == ("a", "b", "<unk>")
    assert vocabulary.decode([4, 2, 5]) == ("a",)  # stops at eos
    assert vocabulary.decode(ids, strip=False)[0] == "<bos>"
    assert Vocabulary(vocabulary.to_list()) == vocabulary
    assert len(Vocabulary.build([list("abc")], max_size=6)) == 6


def test_tokenize_and_detokenize():
    assert tokenize("copy", "3 1 4, 1") == ("3", "1", "4", "1")
    assert detokenize("copy", ("3", "1")) == "31"
    assert tokenize("dates", " March 7, 2021 ") == tuple("March 7, 2021")
    assert tokenize("sentiment", "The plot was NOT good.") == (
        "the", "plot", "was", "not", "good", ".",
    )  # fmt: skip
    assert detokenize("histogram", ("1", "12")) == "1 12"
    assert tokenize("histogram", "3 1 3") == (START, "3", "1", "3")
    assert detokenize("histogram", tokenize("histogram", "3 1 3")) == "3 1 3"


def test_collate_pads_and_builds_masks():
    vocabulary = task_vocabulary("copy")
    examples = [Example(tuple("123"), tuple("321")), Example(tuple("4"), tuple("4"))]
    batch = collate(examples, vocabulary)
    enc = vocabulary.encode
    assert batch.source.tolist() == [enc("123"), enc("4") + [0, 0]]
    assert batch.target_in.tolist() == [[1, *enc("321")], [1, *enc("4"), 0, 0]]
    assert batch.target_out.tolist() == [[*enc("321"), 2], [*enc("4"), 2, 0, 0]]
    assert batch.source_lengths.tolist() == [
        3,
        1,
    ] and batch.target_lengths.tolist() == [4, 2]
    assert torch.equal(batch.source_mask, key_padding_mask(batch.source_lengths, 3))
    assert batch.source_mask.shape == (2, 1, 3)
    expected = causal_mask(4) & key_padding_mask(batch.target_lengths, 4)
    assert torch.equal(batch.target_mask, expected)
    assert not batch.target_mask[1, 3, 2]  # a padded key is never attended
    assert batch.target_tokens == 6
    assert batch.to("cpu").source.equal(batch.source)
    with pytest.raises(ValueError, match="at least one"):
        collate([], vocabulary)


def test_collate_lm_learns_only_the_answer():
    vocabulary = task_vocabulary("reverse")
    batch = collate_lm(
        [Example(tuple("12"), tuple("21")), Example(tuple("3"), tuple("3"))], vocabulary
    )
    e = vocabulary.encode
    # rows: 1 2 <bos> 2 1 <eos>  and  3 <bos> 3 <eos>
    assert batch.inputs.tolist() == [
        [*e("12"), 1, *e("21")],
        [*e("3"), 1, *e("3"), 0, 0],
    ]
    assert batch.outputs.tolist() == [[0, 0, *e("21"), 2], [0, *e("3"), 2, 0, 0]]
    assert batch.lengths.tolist() == [5, 3] and batch.prompt_lengths.tolist() == [3, 2]
    assert batch.target_tokens == int((batch.outputs != 0).sum()) == 5
    assert torch.equal(batch.mask, causal_mask(5) & key_padding_mask(batch.lengths, 5))


def _rule_label(tokens: tuple[str, ...]) -> str:
    """Read a synthetic review by its grammar: verb [negator] [intensifier]
    adjective."""
    polarities = set()
    for i, token in enumerate(tokens):
        if token in POSITIVE or token in NEGATIVE:
            j, negated = i - 1, False
            while tokens[j] not in VERBS:
                negated |= tokens[j] in NEGATORS
                assert tokens[j] in NEGATORS or tokens[j] in INTENSIFIERS
                j -= 1
            polarities.add((token in POSITIVE) != negated)
    assert len(polarities) == 1  # clauses agree
    return "positive" if polarities.pop() else "negative"


def test_synthetic_reviews_have_negation_intensifiers_and_consistent_labels():
    reviews = make_task("sentiment", 2000, seed=0)
    labels = Counter(target for _, target in reviews)
    assert 0.45 < labels[("positive",)] / 2000 < 0.55
    assert any("not" in s for s, _ in reviews) and any(
        set(s) & set(INTENSIFIERS) for s, _ in reviews
    )
    for source, (label,) in reviews:
        assert _rule_label(source) == label
    # negators are as frequent in positive as in negative reviews
    negated = Counter(t for s, t in reviews if set(s) & set(NEGATORS))
    assert abs(negated[("positive",)] - negated[("negative",)]) < 0.1 * sum(
        negated.values()
    )


def test_negation_contrast_pairs_differ_by_one_negator():
    pairs = negation_contrast_set(1000, seed=0)
    assert len({" ".join(a.source) for a, _ in pairs}) == 1000
    train = {" ".join(s) for s, _ in make_task("sentiment", 5000, seed=0)}
    for plain, negated in pairs:
        assert plain.target != negated.target
        assert _rule_label(plain.source) == plain.target[0]
        assert _rule_label(negated.source) == negated.target[0]
        extra = Counter(negated.source) - Counter(plain.source)
        assert len(negated.source) == len(plain.source) + 1 and set(extra) <= set(
            NEGATORS
        )
        assert (
            " ".join(plain.source) not in train
            and " ".join(negated.source) not in train
        )


def test_imdb_loader_reads_the_standard_layout(tmp_path):
    texts = {
        ("train", "pos"): ["A <br />wonderful film!", "Loved it."],
        ("train", "neg"): ["Dull. Didn't like it."],
        ("test", "pos"): ["Great."],
        ("test", "neg"): ["Awful acting."],
    }
    for (split, label), reviews in texts.items():
        folder = tmp_path / "aclImdb" / split / label
        folder.mkdir(parents=True)
        for i, text in enumerate(reviews):
            (folder / f"{i}_{7 + i}.txt").write_text(text, encoding="utf-8")
    (tmp_path / "aclImdb" / "imdb.vocab").write_text("film\n")
    train = load_imdb(tmp_path, "train")
    assert [e.target for e in train] == [("negative",), ("positive",), ("positive",)]
    assert train[0].source == ("dull", ".", "didn't", "like", "it", ".")
    assert train[1].source == ("a", "wonderful", "film", "!")
    assert load_imdb(tmp_path / "aclImdb", "test") == [
        Example(("awful", "acting", "."), ("negative",)),
        Example(("great", "."), ("positive",)),
    ]
    with pytest.raises(FileNotFoundError, match="aclImdb"):
        load_imdb(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="split"):
        load_imdb(tmp_path, "unsup")
    assert words("It's <br />GOOD") == ("it's", "good")


def test_bag_of_words_is_the_mean_embedding_and_rejects_wrong_sizes():
    from jaxtyping import TypeCheckError

    from named_transformer import shape_checks
    from named_transformer.workflows.sentiment import BagOfWords

    torch.manual_seed(0)
    model = BagOfWords(vocab=11, classes=2, layer=5)
    tokens = torch.tensor([[4, 5, 6, 0], [7, 7, 0, 0]])
    mask = tokens != 0
    expected = torch.stack(
        [model.table[[4, 5, 6]].mean(0), model.table[[7, 7]].mean(0)]
    )
    torch.testing.assert_close(
        model(tokens, mask), expected @ model.w_out.T + model.b_out
    )
    # word order is invisible to it
    shuffled = torch.tensor([[6, 4, 5, 0], [7, 7, 0, 0]])
    torch.testing.assert_close(model(shuffled, mask), model(tokens, mask))
    with shape_checks(True), pytest.raises(TypeCheckError, match="mask"):
        model(tokens, mask[:, :3])
