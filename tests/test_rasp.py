"""RASP: the interpreter against plain Python, the compiled model against the
interpreter (exhaustively up to length 6 over 4 tokens and up to length 8 over 3 of
them, and drawn by hypothesis), the attention weights against the selectors, and
errors that name the operation."""

import itertools
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import TypeCheckError

from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.sublayers import FeedForward
from named_transformer.rasp import (
    PROGRAMS,
    Comparison,
    aggregate,
    evaluate,
    map,
    numerical,
    select,
    selector_width,
    sequence_map,
    tokens,
)
from named_transformer.rasp.compiler import compile_program
from named_transformer.rasp.program import Aggregate, SelectorWidth


def _most_frequent(xs):
    counts = Counter(xs)
    best = max(counts.values())
    return next(x for x in xs if counts[x] == best)


def _dyck(xs):
    out, depth, broken = [], 0, False
    for x in xs:
        depth += (x == "(") - (x == ")")
        broken = broken or depth < 0
        out.append(int(depth == 0 and not broken))
    return out


REFERENCE = {  # each program's meaning, written directly
    "length": lambda xs: [len(xs)] * len(xs),
    "reverse": lambda xs: list(reversed(xs)),
    "histogram": lambda xs: [xs.count(x) for x in xs],
    "sort_unique": sorted,
    "sort": sorted,
    "most_frequent": lambda xs: [_most_frequent(xs)] * len(xs),
    "dyck1": _dyck,
}


def _inputs(vocabulary, length):
    return [list(x) for x in itertools.product(vocabulary, repeat=length)]


@pytest.fixture(scope="module")
def compiled():
    return {
        name: compile_program(p.program, p.vocabulary, p.max_length)
        for name, p in PROGRAMS.items()
    }


@pytest.fixture(scope="module")
def compiled32():  # float32: twice as fast, the same decoded outputs
    return {
        name: compile_program(
            p.program, p.vocabulary, p.max_length, dtype=torch.float32
        )
        for name, p in PROGRAMS.items()
    }


def test_there_are_at_least_six_programs_each_with_a_reference():
    assert len(PROGRAMS) >= 6 and set(PROGRAMS) == set(REFERENCE)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_interpreter_computes_what_the_program_means(name):
    example = PROGRAMS[name]
    for length in range(1, 7):
        for xs in _inputs(example.vocabulary, length):
            if example.unique_tokens and len(set(xs)) < len(xs):
                continue
            assert evaluate(example.program, xs) == list(REFERENCE[name](xs)), xs


def test_sort_unique_leaves_gaps_on_duplicates_and_the_tie_break_fills_them():
    xs = list("abca")
    assert evaluate(PROGRAMS["sort_unique"].program, xs) == ["a", None, "b", "c"]
    assert evaluate(PROGRAMS["sort"].program, xs) == ["a", "a", "b", "c"]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_compiled_model_equals_the_interpreter_on_every_input(name, compiled32):
    """Exhaustive on the model compiled for 4 tokens and lengths up to 8: every input
    of length 1 to 6 over the 4 tokens (5460), and every input of length 7 and 8 over
    the first 3 of them (8748), each length in one forward pass. The full length, each
    position and each count up to 8, with 15300 inputs instead of all 87380 (the
    drawn test below goes to length 10 over more tokens)."""
    example, model = PROGRAMS[name], compiled32[name]
    assert model.max_length == 8 and len(example.vocabulary) == 4
    checked = 0
    for length in range(1, 9):
        tokens = example.vocabulary if length <= 6 else example.vocabulary[:3]
        inputs = _inputs(tokens, length)
        expected = [evaluate(example.program, xs) for xs in inputs]
        assert model.run_batch(inputs) == expected
        checked += len(inputs)
    assert checked == 5460 + 8748


# a larger vocabulary and maximum length than the exhaustive test's
WIDE = {"length": "abcdef", "reverse": "abcdef", "histogram": "abcdef",
        "sort_unique": "abcdefghij", "sort": "abcdef", "most_frequent": "abcdef",
        "dyck1": "()abc"}  # fmt: skip


@pytest.fixture(scope="module")
def wide():
    return {
        n: compile_program(PROGRAMS[n].program, list(v), 10) for n, v in WIDE.items()
    }


@settings(max_examples=40, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_compiled_model_equals_the_interpreter_on_drawn_inputs(name, wide, data):
    vocabulary = list(WIDE[name])
    if PROGRAMS[name].unique_tokens:
        xs = data.draw(st.permutations(vocabulary))[: data.draw(st.integers(1, 10))]
    else:
        xs = data.draw(st.lists(st.sampled_from(vocabulary), min_size=1, max_size=10))
    assert wide[name].run(xs) == evaluate(PROGRAMS[name].program, xs)


def _heads(program):
    """The aggregates and selector widths of ``program``, by label."""
    found, todo = {}, [program]
    while todo:
        sop = todo.pop()
        if isinstance(sop, Aggregate | SelectorWidth):
            found[sop.label] = sop
        todo.extend(sop.children)
    return found


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_head_attends_as_its_selector_selects(name, compiled):
    """The weights of the head computing a select equal the selector, normalised by
    row, to 1e-6; a query that selects nothing attends to BOS (an aggregate), and a
    selector width attends to BOS as much as to each selected key."""
    example, model = PROGRAMS[name], compiled[name]
    inputs = _inputs(example.vocabulary, 6)
    _, weights = model(model.encode(inputs))
    heads = _heads(example.program)
    worst = 0.0
    for block, labels in zip(weights, model.heads, strict=True):
        for h, label in enumerate(labels):
            sop = heads[label]
            expected = []
            for xs in inputs:
                rows = evaluate(sop.selector, xs)
                bos = [1.0 if isinstance(sop, SelectorWidth) or not any(r) else 0.0
                       for r in rows]  # fmt: skip
                table = [[b, *map_float(r)] for b, r in zip(bos, rows, strict=True)]
                expected.append([[v / sum(row) for v in row] for row in table])
            got = block[:, h, 1:, :]
            worst = max(worst, (got - torch.tensor(expected)).abs().max().item())
    assert worst < 1e-6


def map_float(row):
    return [float(v) for v in row]


def test_the_residual_stream_is_the_named_concatenation_and_zero_at_bos(compiled):
    model = compiled["reverse"]
    assert model.labels[:5] == ["tokens:BOS", "tokens:a", "tokens:b", "tokens:c",
                                "tokens:d"]  # fmt: skip
    assert "indices:7" in model.labels and "length:8" in model.labels
    residuals, _ = model(model.encode([list("abcab")]))
    at_bos = residuals[-1][0, 0]
    assert at_bos[0] == 1 and at_bos[1:].abs().max() < 1e-6


def test_the_output_variable_is_read_from_its_directions(compiled):
    from named_transformer.rasp.model import CompiledModel, OutputVariable

    model = compiled["reverse"]
    assert model.output == "reverse" and model.output_values == list("abcd")
    assert model.labels[model.output_dims] == [f"reverse:{v}" for v in "abcd"]
    again = CompiledModel(
        model.token_table.data, model.position_table.data, model.blocks,
        vocabulary=model.vocabulary, bos=model.bos, labels=model.labels,
        output=OutputVariable("reverse", iter("abcd")), heads=model.heads,
    )  # fmt: skip
    assert again.run(list("abca")) == model.run(list("abca")) == list("acba")
    with pytest.raises(ValueError, match="output 'length' has no contiguous"):
        labels = [label.replace("length:", "x:") for label in model.labels]
        CompiledModel(model.token_table.data, model.position_table.data, [],
                      vocabulary=model.vocabulary, bos=model.bos, labels=labels,
                      output=OutputVariable("length"), heads=[])  # fmt: skip


def test_the_compiled_weights_are_the_library_modules_with_named_shapes(compiled):
    model = compiled["sort"]
    layer = len(model.labels)
    for block in model.blocks:
        assert isinstance(block, MultiHeadAttention | FeedForward)
        if isinstance(block, MultiHeadAttention):
            heads, key, val = block.heads, block.key, block.val
            assert block.w_q.shape == block.w_k.shape == (heads, layer, key)
            assert block.w_v.shape == (heads, layer, val)
            assert block.w_o.shape == (heads, val, layer)
        else:
            assert block.w1.shape[1] == block.w2.shape[0] == layer
    with pytest.raises(TypeCheckError):  # the modules' shape checks run
        model.blocks[0](torch.zeros(1, 3, layer + 1))
    assert model.num_parameters() > 0


# --- wrong programs


def test_a_select_on_an_undefined_variable_names_select():
    with pytest.raises(TypeError, match="select: queries"):
        select(tokens, "lenght", Comparison.EQ)
    with pytest.raises(TypeError, match="aggregate: values"):
        aggregate(select(tokens, tokens, Comparison.EQ), None)


def test_a_select_on_a_numerical_sop_names_the_select():
    number = numerical(map(lambda t: 1, tokens)).named("one")
    width = selector_width(select(number, tokens, Comparison.EQ)).named("w")
    with pytest.raises(ValueError, match="select in selector_width 'w': keys 'one'"):
        compile_program(width, "ab", 4)


def test_a_categorical_aggregate_that_is_not_one_hot_names_the_aggregate():
    mixed = aggregate(select(tokens, tokens, Comparison.TRUE), tokens).named("mixed")
    with pytest.raises(ValueError, match="aggregate 'mixed': query 0 selects"):
        evaluate(mixed, list("ab"))
    model = compile_program(mixed, "ab", 4)
    assert model.run(list("aa")) == ["a", "a"]  # one value: fine
    with pytest.raises(ValueError, match="'mixed' at position 0 .* not one-hot"):
        model.run(list("ab"))


def test_an_input_beyond_the_compiled_length_or_vocabulary_is_refused(compiled):
    model = compiled["sort"]
    with pytest.raises(ValueError, match="9 tokens is longer than max_length=8"):
        model.run(list("abcdabcda"))
    with pytest.raises(ValueError, match="token 'z' is not in the vocabulary"):
        model.run(list("abz"))
    with pytest.raises(ValueError, match="compiled for at most max_length=8"):
        model(torch.zeros(1, 10, dtype=torch.long))


def test_a_numerical_sequence_map_input_is_refused():
    number = numerical(map(lambda t: 1, tokens))
    bad = sequence_map(lambda x, y: x, number, tokens).named("pair")
    with pytest.raises(ValueError, match="sequence_map 'pair'"):
        compile_program(bad, "ab", 4)
