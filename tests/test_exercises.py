"""The exercises: the library passes every check; real learner mistakes are caught.

The checks live in the package (:mod:`named_transformer.exercises.checks`); here they
run against the library's own functions (every one must pass) and against a set of
deliberately wrong implementations, each a mistake learners make, each asserted to be
caught with a message naming what is wrong. Then the command line: ``init`` writes
skeletons with the library's annotations, ``check`` reports them "not started", and a
learner's correct function passes.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from einops import rearrange
from jaxtyping import Bool, Float, Int  # noqa: F401 - the copied annotations use them
from torch import Tensor  # noqa: F401

from named_transformer.axes import checked
from named_transformer.core.feedforward import relu  # noqa: F401
from named_transformer.exercises import (
    CHECKS,
    EXERCISES,
    PAGES,
    check_directory,
    check_exercise,
    load_learner,
    skeleton,
)
from named_transformer.workflows.cli import main

NAMES = list(EXERCISES)


def test_at_least_eighteen_exercises_in_page_order():
    assert len(EXERCISES) >= 18
    pages = list(PAGES)
    order = [pages.index(e.page) for e in EXERCISES.values()]
    assert order == sorted(order)
    assert set(CHECKS) == set(EXERCISES)


@pytest.mark.parametrize("name", NAMES)
def test_every_check_passes_on_the_library(name):
    exercise = EXERCISES[name]
    assert len(exercise.checks) >= 2  # an equivalence and a wrong-shape case at least
    for check in exercise.checks:
        check(exercise.library_function)  # raises on a failure


# --- wrong implementations: real learner mistakes -----------------------------------
def like(name: str) -> Callable[[Callable], Callable]:
    """Give ``fn`` the library function's annotations and ``@checked``, as a learner
    who filled in the skeleton has (the parameter names are the library's)."""

    def wrap(fn: Callable) -> Callable:
        exercise = EXERCISES[name]
        if exercise.method is not None:  # the learner's subclass with that method
            return like_method(exercise.library_function, exercise.method, fn)
        library = inspect.unwrap(exercise.library_function)
        fn.__annotations__ = dict(library.__annotations__)
        fn.__name__ = name
        return checked(fn)

    return wrap


def like_method(library: type, method: str, fn: Callable) -> type:
    """The library's class with ``fn`` as its ``method``, annotated and ``@checked``."""
    fn.__annotations__ = dict(inspect.unwrap(getattr(library, method)).__annotations__)
    fn.__name__ = method
    return type(library.__name__, (library,), {method: checked(fn)})


def _masked_softmax(scores, mask, fill=-math.inf):
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    return torch.softmax(scores, -1).nan_to_num(0.0)


def _scaled(queries, keys, scale=None):
    scale = math.sqrt(queries.shape[-1]) if scale is None else scale
    return queries @ keys.mT / scale


WRONG: dict[str, list[tuple[str, Callable, str]]] = {}


def wrong(name: str, mistake: str, expected: str):
    """Register a wrong implementation of ``name`` and the message it must produce."""

    def register(fn: Callable) -> Callable:
        WRONG.setdefault(name, []).append((mistake, like(name)(fn), expected))
        return fn

    return register


@wrong("softmax", "softmax over the wrong axis", "differs from torch.softmax along seq")
def _(scores, mask=None, beta=1.0):
    return torch.softmax(beta * scores, 0)


@wrong("softmax", "a mask with True meaning blocked",
       "to positions where the mask is False")  # fmt: skip
def _(scores, mask=None, beta=1.0):
    if mask is not None:
        scores = scores.masked_fill(mask, -math.inf)
    return torch.softmax(beta * scores, -1)


@wrong("softmax", "-inf fill: a fully masked row gives NaN", "gives NaN, not zeros")
def _(scores, mask=None, beta=1.0):
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.softmax(beta * scores, -1)


@wrong("softmax", "beta ignored", "with beta=2.5")
def _(scores, mask=None, beta=1.0):
    return _masked_softmax(scores, mask)


@wrong("attend", "the weights transposed: alpha^T V", "differs from alpha·V along seq")
def _(weights, values):
    return weights.mT @ values


@wrong("basic_self_attention", "scaled by √|layer| (that is the next step)",
       "differs from softmax(X·X)·X")  # fmt: skip
def _(inputs):
    return _masked_softmax(_scaled(inputs, inputs), None) @ inputs


@wrong("dot_score", "keys times queries: the scores transposed", "seq")
def _(queries, keys):
    return keys @ queries.mT


@wrong("scaled_dot_score", "no 1/√|key| scaling", "differs from Q·K/√|key|")
def _(queries, keys):
    return queries @ keys.mT


@wrong("scaled_dot_score", "divided by |key|, not its square root",
       "differs from Q·K/√|key|")  # fmt: skip
def _(queries, keys):
    return queries @ keys.mT / queries.shape[-1]


@wrong("general_score", "scaled like the scaled dot product", "differs from Q·W·K")
def _(queries, keys, weight):
    return _scaled(queries @ weight, keys)


@wrong("additive_score", "tanh forgotten", "differs from w·tanh(W1·Q + W2·K)")
def _(queries, keys, w_query, w_key, w_score):
    q = rearrange(queries @ w_query.mT, "... q h -> ... q 1 h")
    k = rearrange(keys @ w_key.mT, "... k h -> ... 1 k h")
    return (q + k) @ w_score


@wrong("cosine_score", "only the queries normalised",
       "differs from torch's cosine_similarity")  # fmt: skip
def _(queries, keys, eps=1e-8):
    return queries / queries.norm(p=2, dim=-1, keepdim=True) @ keys.mT


@wrong("location_score", "returns the softmax, not the scores", "differs from W_a·s")
def _(queries, weight):
    return torch.softmax(queries @ weight.mT, -1)


@wrong("attention_weights", "softmax over the queries (the wrong axis)",
       "differs from softmax(Q·K/√|key|) along seq")  # fmt: skip
def _(queries, keys, mask=None, *, score_bias=None):
    return torch.softmax(_scaled(queries, keys), -2)


@wrong("attention_weights", "the mask ignored", "with a causal mask")
def _(queries, keys, mask=None, *, score_bias=None):
    scores = _scaled(queries, keys)
    return _masked_softmax(scores if score_bias is None else scores + score_bias, None)


@wrong("attention", "masked scores set to 0, not -inf",
       "differs from scaled_dot_product_attention by")  # fmt: skip
def _(queries, keys, values, mask=None, *, score_bias=None):
    return _masked_softmax(_scaled(queries, keys), mask, 0.0) @ values


@wrong("causal_mask", "off by one: the diagonal masked (i < j)",
       "differs from the lower triangle with its diagonal")  # fmt: skip
def _(seq_q, seq=None, *, offset=0, device=None):
    seq = seq_q if seq is None else seq
    return torch.ones(seq_q, seq, dtype=torch.bool, device=device).tril(offset - 1)


@wrong("causal_mask", "offset ignored", "offset=3")
def _(seq_q, seq=None, *, offset=0, device=None):
    seq = seq_q if seq is None else seq
    return torch.ones(seq_q, seq, dtype=torch.bool, device=device).tril()


@wrong("padding_mask", "True on the padding", "True at the first lengths[b] positions")
def _(lengths, seq):
    return torch.arange(seq) >= rearrange(lengths, "... -> ... 1")


@wrong("standardize", "the unbiased (1/(n-1)) variance", "biased (1/n) variance")
def _(inputs, eps=1e-5):
    mean = inputs.mean(-1, keepdim=True)
    return (inputs - mean) / (inputs.var(-1, keepdim=True) + eps).sqrt()


@wrong("layer_norm", "normalised over the wrong axis (seq, not layer)",
       "differs from torch.nn.functional.layer_norm over layer")  # fmt: skip
def _(inputs, gamma, beta, eps=1e-5):
    mean = inputs.mean(-2, keepdim=True)
    variance = inputs.var(-2, unbiased=False, keepdim=True)
    out = (inputs - mean) / (variance + eps).sqrt() * gamma
    return out if beta is None else out + beta


@wrong("layer_norm", "the unbiased variance", "torch.nn.functional.layer_norm")
def _(inputs, gamma, beta, eps=1e-5):
    mean = inputs.mean(-1, keepdim=True)
    out = (inputs - mean) / (inputs.var(-1, keepdim=True) + eps).sqrt() * gamma
    return out if beta is None else out + beta


@wrong("feed_forward", "relu hard-coded, the activation argument ignored",
       "with activation=gelu")  # fmt: skip
def _(inputs, w1, b1, w2, b2, activation=None):
    hidden = inputs @ w1.mT + (0 if b1 is None else b1)
    return torch.relu(hidden) @ w2.mT + (0 if b2 is None else b2)


@wrong("sinusoidal_positions", "sines in the first half, cosines in the second",
       "differs from P[pos, 2i] = sin(pos/10000^(2i/|layer|))")  # fmt: skip
def _(seq, layer, *, offset=0, dtype=torch.float32, device=None):
    positions = torch.arange(offset, offset + seq, dtype=dtype)
    half = torch.arange(0, layer, 2, dtype=dtype)
    angles = rearrange(positions, "s -> s 1") / 10000 ** (half / layer)
    return torch.cat([angles.sin(), angles.cos()], -1)


@wrong("project_heads", "the bias forgotten", "with a bias")
def _(inputs, weight, bias=None):
    return rearrange(inputs, "... s l -> ... 1 s l") @ weight


@wrong("merge_heads", "heads and val swapped in W^O",
       "differs from concatenating the heads then W^O")  # fmt: skip
def _(heads_out, w_o, b_o=None):
    merged = rearrange(heads_out, "... h s v -> ... s (v h)")
    out = merged @ rearrange(w_o, "h v l -> (h v) l")
    return out if b_o is None else out + b_o


def _step(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o, mask_of):
    """A cached step whose mask comes from ``mask_of(new, seen)``."""
    queries, keys, values = (rearrange(inputs, "... s l -> ... 1 s l") @ w
                             for w in (w_q, w_k, w_v))  # fmt: skip
    all_keys = torch.cat([cached_keys, keys], -2)
    all_values = torch.cat([cached_values, values], -2)
    mask = mask_of(inputs.shape[-2], cached_keys.shape[-2])
    weights = _masked_softmax(_scaled(queries, all_keys), mask)
    merged = rearrange(weights @ all_values, "... h s v -> ... s (h v)")
    return merged @ rearrange(w_o, "h v l -> (h v) l"), keys, values


@wrong("cached_self_attention", "no causal mask: new positions see later new ones",
       "for 3 new positions after a cache of 2")  # fmt: skip
def _(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o):
    return _step(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o,
                 lambda new, seen: None)  # fmt: skip


@wrong("cached_self_attention", "the causal mask without the cache's offset",
       "causal self-attention recomputed over the whole prefix")  # fmt: skip
def _(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o):
    def no_offset(new, seen):
        return torch.ones(new, seen + new).tril().bool()

    return _step(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o, no_offset)


@wrong("cached_self_attention", "the cache ignored: only the new keys attended",
       "when 5 tokens are decoded one at a time")  # fmt: skip
def _(inputs, cached_keys, cached_values, w_q, w_k, w_v, w_o):
    outputs, keys, values = _step(
        inputs,
        cached_keys[..., :0, :],
        cached_values[..., :0, :],
        w_q,
        w_k,
        w_v,
        w_o,
        lambda new, seen: torch.ones(new, new).tril().bool(),
    )
    return outputs, keys, values


@wrong("multihead_attention", "scaled by √|layer|, not √|key| of a head",
       "differs from the heads' attention merged by W^O")  # fmt: skip
def _(inputs, memory, w_q, w_k, w_v, w_o, mask=None, b_q=None, b_k=None, b_v=None,
      b_o=None, dropout=0.0, training=False, fused=False, *, values_from=None,
      score_bias=None, block=None):  # fmt: skip
    heads = [rearrange(x, "... s l -> ... 1 s l") @ w for x, w in
             ((inputs, w_q), (memory, w_k), (memory, w_v))]  # fmt: skip
    if mask is not None:
        mask = rearrange(mask, "... q k -> ... 1 q k")
    weights = _masked_softmax(_scaled(*heads[:2], math.sqrt(inputs.shape[-1])), mask)
    merged = rearrange(weights @ heads[2], "... h s v -> ... s (h v)")
    return merged @ rearrange(w_o, "h v l -> (h v) l"), weights


@wrong("relative_attention_weights", "only the content term divided by √|key|",
       "differs from softmax((Q·K + Q·R^K)/√|key|)")  # fmt: skip
def _(queries, keys, a_k, index, mask=None):
    relative = (rearrange(queries, "... q d -> ... q 1 d") * a_k[index]).sum(-1)
    return _masked_softmax(_scaled(queries, keys) + relative, mask)


def _gates(inputs, state, w_input, w_hidden, b_input, b_hidden):
    i = (rearrange(inputs, "... x -> ... 1 1 x") * w_input).sum(-1) + b_input
    h = (rearrange(state, "... x -> ... 1 1 x") * w_hidden).sum(-1) + b_hidden
    return i.unbind(-2), h.unbind(-2)


@wrong("gru_cell", "z and 1 - z swapped", "differs from torch.nn.GRUCell")
def _(inputs, state, w_input, w_hidden, b_input, b_hidden):
    (i_r, i_z, i_n), (h_r, h_z, h_n) = _gates(
        inputs, state, w_input, w_hidden, b_input, b_hidden
    )
    reset, update = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    candidate = torch.tanh(i_n + reset * h_n)
    return update * candidate + (1 - update) * state


@wrong("bahdanau_attention", "the mask forgotten",
       "differs from softmax of the scores along seq, 0 where masked")  # fmt: skip
def _(previous_state, annotations, mask, score):
    scores = score(rearrange(previous_state, "... h -> ... 1 h"), annotations)
    weights = torch.softmax(rearrange(scores, "... 1 s -> ... s"), -1)
    context = (rearrange(weights, "... s -> ... s 1") * annotations).sum(-2)
    return context, weights


def _post_norm(residual, x, sublayer):
    return residual.norm(x + sublayer(x))


def _pre_norm(residual, x, sublayer):
    return x + sublayer(residual.norm(x))


@wrong("EncoderLayer", "pre-norm written as post-norm",
       "differs from torch.nn.TransformerEncoderLayer(norm_first=True)")  # fmt: skip
def _(self, inputs, mask=None, need_weights=False, *, score_bias=None):
    hidden = _post_norm(self.attention_residual, inputs,
                        lambda x: self.self_attention(x, mask=mask))  # fmt: skip
    return _post_norm(self.feed_forward_residual, hidden, self.feed_forward)


@wrong("EncoderLayer", "post-norm with the residual added after the norm",
       "differs from torch.nn.TransformerEncoderLayer(norm_first=False)")  # fmt: skip
def _(self, inputs, mask=None, need_weights=False, *, score_bias=None):
    def sublayer(residual, x, f):
        if residual.norm_first:
            return _pre_norm(residual, x, f)
        return residual.norm(f(x)) + x

    hidden = sublayer(self.attention_residual, inputs,
                      lambda x: self.self_attention(x, mask=mask))  # fmt: skip
    return sublayer(self.feed_forward_residual, hidden, self.feed_forward)


def _decoder(self, inputs, memory, mask, memory_mask, residual):
    def cross_attend(x):
        return self.cross_attention(x, memory, memory_mask)

    hidden = residual(self.self_attention_residual, inputs,
                      lambda x: self.self_attention(x, mask=mask))  # fmt: skip
    hidden = residual(self.cross_attention_residual, hidden, cross_attend)
    return residual(self.feed_forward_residual, hidden, self.feed_forward)


def _either_norm(residual, x, sublayer):
    return (_pre_norm if residual.norm_first else _post_norm)(residual, x, sublayer)


@wrong("DecoderLayer", "the causal mask ignored: the decoder attends to the future",
       "the self-attention sees later positions")  # fmt: skip
def _(self, inputs, memory, mask=None, memory_mask=None, need_weights=False, *,
      score_bias=None, memory_score_bias=None):  # fmt: skip
    return _decoder(self, inputs, memory, None, memory_mask, _either_norm)


@wrong("DecoderLayer", "pre-norm with the residual taken from the normalised input",
       "differs from torch.nn.TransformerDecoderLayer(norm_first=True)")  # fmt: skip
def _(self, inputs, memory, mask=None, memory_mask=None, need_weights=False, *,
      score_bias=None, memory_score_bias=None):  # fmt: skip
    def residual(sublayer, x, f):
        if not sublayer.norm_first:
            return _post_norm(sublayer, x, f)
        normalised = sublayer.norm(x)
        return normalised + f(normalised)

    return _decoder(self, inputs, memory, mask, memory_mask, residual)


@wrong("DecoderLayer", "the memory mask ignored",
       "with a causal target mask and a padded memory")  # fmt: skip
def _(self, inputs, memory, mask=None, memory_mask=None, need_weights=False, *,
      score_bias=None, memory_score_bias=None):  # fmt: skip
    return _decoder(self, inputs, memory, mask, None, _either_norm)


def test_every_exercise_has_a_wrong_implementation():
    assert set(WRONG) == set(EXERCISES)


CASES = [
    (name, mistake, fn, expected)
    for name, entries in WRONG.items()
    for mistake, fn, expected in entries
]


@pytest.mark.parametrize(
    ("name", "mistake", "fn", "expected"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES]
)
def test_each_mistake_is_caught_with_a_message_naming_it(name, mistake, fn, expected):
    result = check_exercise(EXERCISES[name], fn)
    assert result.status == "failed", f"{mistake} passed"
    assert expected in result.message, result.message
    assert result.line().startswith(f"{name}: failed: ")


def test_an_unchecked_implementation_is_caught():
    """The library's own code without @checked passes the equations but not the
    wrong-shape case."""
    unchecked = inspect.unwrap(EXERCISES["softmax"].library_function)
    result = check_exercise(EXERCISES["softmax"], unchecked)
    assert result.status == "failed"
    assert "keep the `checked` decorator" in result.message or "shape error" in (
        result.message
    )


def test_a_wrong_output_shape_names_the_axis():
    (_, transposed, _) = WRONG["dot_score"][0]
    result = check_exercise(EXERCISES["dot_score"], transposed)
    assert "seq" in result.message.splitlines()[0]


# --- skeletons and the command line -------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_a_skeleton_carries_the_library_signature(name, tmp_path):
    exercise = EXERCISES[name]
    text = skeleton(exercise)
    assert "raise NotImplementedError" in text
    assert exercise.page in text and "@checked" in text


def test_init_writes_skeletons_with_the_library_annotations(tmp_path, capsys):
    assert main(["exercises", "init", str(tmp_path / "mine")]) == 0
    learner = load_learner(tmp_path / "mine")
    for name, exercise in EXERCISES.items():
        library, mine = exercise.library_function, learner[name]
        if exercise.method is not None:  # a subclass of the library's class
            assert issubclass(mine, library) and mine is not library, name
            library = getattr(library, exercise.method)
            mine = getattr(mine, exercise.method)
            assert mine is not library, name
        assert mine.__doc__ == library.__doc__, name
        library, mine = inspect.signature(library), inspect.signature(mine)
        assert str(mine) == str(library), name  # names, defaults, annotations
        assert [str(p.annotation) for p in mine.parameters.values()] == [
            str(p.annotation) for p in library.parameters.values()
        ]
        assert str(mine.return_annotation) == str(library.return_annotation)


def test_a_fresh_init_is_not_started_and_exits_non_zero(tmp_path, capsys):
    main(["exercises", "init", str(tmp_path)])
    capsys.readouterr()
    assert main(["exercises", "check", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:-1] == [f"{name}: not started" for name in EXERCISES]
    assert lines[-1] == f"0 of {len(EXERCISES)} passed"


def test_init_refuses_a_non_empty_directory(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["exercises", "init", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "not empty" in error and "--force" in error
    assert main(["exercises", "init", str(tmp_path), "--force"]) == 0


def test_an_unknown_name_is_a_usage_error(tmp_path, capsys):
    main(["exercises", "init", str(tmp_path)])
    assert main(["exercises", "check", str(tmp_path), "softmaxx"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "'softmaxx'" in error


def test_a_syntax_error_names_the_file(tmp_path, capsys):
    main(["exercises", "init", str(tmp_path)])
    (tmp_path / "masks.py").write_text("def causal_mask(:\n")
    assert main(["exercises", "check", str(tmp_path), "causal_mask", "--hint"]) == 1
    out = capsys.readouterr().out
    assert "causal_mask: failed: cannot import masks.py: SyntaxError" in out
    assert "reread docs/learn/masks.md#the-causal-mask" in out


CORRECT_SOFTMAX = """
    if beta != 1.0:
        scores = beta * scores
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    if mask is not None:
        weights = weights * mask
    total = weights.sum(-1, keepdim=True)
    return weights / total.clamp_min(torch.finfo(scores.dtype).tiny)
"""


def test_init_edit_check_passes(tmp_path, capsys):
    """The learner's session: init, write one function with torch primitives, check."""
    main(["exercises", "init", str(tmp_path)])
    path = tmp_path / "notation.py"
    text = path.read_text()
    start = text.index("def softmax(")
    body = text.index("    raise NotImplementedError", start)
    end = body + len("    raise NotImplementedError")
    path.write_text(text[:body] + CORRECT_SOFTMAX.strip("\n") + text[end:])
    capsys.readouterr()
    assert main(["exercises", "check", str(tmp_path), "softmax"]) == 0
    assert capsys.readouterr().out.splitlines() == ["softmax: passed", "1 of 1 passed"]


def test_the_whole_check_of_the_library_is_fast(tmp_path, capsys):
    """A directory whose files are the library's functions passes every exercise."""
    for page, (file, _) in PAGES.items():
        imports = [
            f"from {e.module} import {e.name}  # noqa: F401"
            for e in EXERCISES.values()
            if e.page == page
        ]
        (tmp_path / file).write_text("\n".join(imports) + "\n")
    start = time.perf_counter()
    results = check_directory(tmp_path)
    seconds = time.perf_counter() - start
    assert [r.status for r in results] == ["passed"] * len(EXERCISES), results
    assert seconds < 60
    assert main(["exercises", "check", str(tmp_path)]) == 0


def test_the_exercises_page_lists_every_exercise_with_its_section():
    page = (Path(__file__).resolve().parents[1] / "docs/learn/exercises.md").read_text()
    for exercise in EXERCISES.values():
        link = exercise.page.removeprefix("learn/")
        link = link if link != exercise.page else f"../{exercise.page}"
        assert f"| `{exercise.name}` | [{exercise.heading}]({link}#" in page
        assert f"{link}#{exercise.section})" in page


def test_each_concept_page_names_its_exercises():
    docs = Path(__file__).resolve().parents[1] / "docs"
    for page in PAGES:
        text = (docs / page).read_text()
        assert '!!! tip "Try it yourself"' in text, page
        for exercise in EXERCISES.values():
            if exercise.page == page:
                assert f"`{exercise.name}`" in text.split("Try it yourself")[1], page
