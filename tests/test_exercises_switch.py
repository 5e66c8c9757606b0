"""``nt.exercises.use``: the learner's functions inside the library's model.

References: the library's own functions (switched back in, the losses are the same
floats), an independent learner's answers in plain torch (the losses agree to
rounding), and causality (a decoder's prediction at j cannot depend on later tokens;
a softmax over the wrong axis breaks it).
"""

from __future__ import annotations

import math

import pytest
import torch

import named_transformer as nt
from named_transformer.core import attention as core_attention
from named_transformer.core.softmax import softmax as library_softmax
from named_transformer.exercises import EXERCISES, SWITCHED, use, write_exercises
from named_transformer.workflows.text import (
    TextCodec,
    TextSettings,
    read_corpus,
    text_model,
    train_text,
)

TEXT = read_corpus(None)[:20_000]
TINY = TextSettings(context=16, layers=1, layer=16, heads=2, batch_size=4, steps=5,
                    eval_every=5, sample_every=0)  # fmt: skip


def losses() -> list[float]:
    run = train_text(TEXT, TINY, progress=False)
    return [record.loss for record in run["trainer"].history]


def counting(name: str, calls: dict[str, int]):
    library = EXERCISES[name].library_function

    def function(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return library(*args, **kwargs)

    return function


def test_switched_to_the_library_the_losses_are_the_same_floats_step_by_step():
    """Every switched function is called, and the losses equal the unswitched run."""
    library = losses()
    calls: dict[str, int] = {}
    with use({name: counting(name, calls) for name in SWITCHED}):
        switched = losses()
    assert switched == library and len(library) == TINY.steps
    assert set(calls) == set(SWITCHED) and min(calls.values()) > 0
    assert core_attention.softmax is library_softmax  # restored on exit
    assert nt.softmax is library_softmax


ANSWERS = {
    "notation.py": ("softmax", """
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.exp(beta * (scores - scores.amax(-1, keepdim=True)))
    return (weights / weights.sum(-1, keepdim=True)).nan_to_num(0.0)
"""),
    "soft_dictionary.py": ("attend", """
    return torch.matmul(weights, values)
"""),
    "building_blocks.py": ("layer_norm", """
    mean = inputs.mean(-1, keepdim=True)
    variance = inputs.var(-1, keepdim=True, correction=0)
    return (inputs - mean) / torch.sqrt(variance + eps) * gamma + (
        0.0 if beta is None else beta)
"""),
}  # fmt: skip


def test_a_learners_correct_functions_learn_as_the_librarys_do(tmp_path):
    write_exercises(tmp_path)
    for file, (name, body) in ANSWERS.items():
        path = tmp_path / file
        text = path.read_text()
        at = text.index("    raise NotImplementedError\n", text.index(f"def {name}("))
        end = at + len("    raise NotImplementedError\n")
        path.write_text(text[:at] + body.lstrip("\n") + text[end:])
    names = [name for name, _ in ANSWERS.values()]
    results = nt.exercises.check_directory(tmp_path, names)
    assert [r.status for r in results] == ["passed"] * len(names), results
    library = losses()
    with nt.exercises.use(tmp_path, names=names) as switch:
        assert switch.names == tuple(names)
        yours = losses()
    assert yours == pytest.approx(library, rel=1e-5)


def wrong_softmax(scores, mask=None, beta=1.0):
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.softmax(beta * scores, dim=-2).nan_to_num(0.0)


def test_a_softmax_over_the_wrong_axis_lets_positions_see_the_future():
    codec = TextCodec.fit(TEXT)
    tokens = codec.encode(TEXT[:16])
    changed = tokens.clone()
    changed[-1] = (changed[-1] + 1) % codec.vocab
    torch.manual_seed(0)
    model = text_model(codec.vocab, TINY).eval()

    def earlier(tokens):
        with torch.no_grad():
            return model(tokens)[:-1]

    assert torch.equal(earlier(tokens), earlier(changed))  # causal
    with use({"softmax": wrong_softmax}, names=["softmax"]):
        assert not torch.allclose(earlier(tokens), earlier(changed))


def test_bad_switches_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="'EncoderLayer' is not an exercise function"):
        use({}, names=["EncoderLayer"])
    with pytest.raises(ValueError, match="softmax: no softmax given"):
        use({}, names=["softmax"])
    with pytest.raises(ValueError, match=r"softmax: cannot import notation\.py"):
        use(tmp_path / "missing", names=["softmax"])
    switch = use({"softmax": wrong_softmax}, names=["softmax"])
    try:
        with pytest.raises(ValueError, match="already on"):
            use({"softmax": wrong_softmax}, names=["softmax"])
        assert core_attention.softmax is wrong_softmax
    finally:
        switch.restore()
    assert core_attention.softmax is library_softmax


def test_switched_attention_is_called_at_lengths_the_automatic_core_runs_blockwise():
    """From ``CROSSOVER`` positions on (causal) the automatic core runs blockwise,
    which calls no softmax of the learner's: while attention is switched in it
    materialises, so the learner's softmax computes every call (and the outputs equal
    the library's)."""
    from named_transformer.core import blockwise

    seq = blockwise.CROSSOVER + 44
    assert blockwise.automatic_block(seq, seq) is not None  # blockwise unswitched
    q, k, v = (torch.randn(1, 2, seq, 8, dtype=torch.float64) for _ in range(3))
    mask = nt.causal_mask(seq, seq)
    expected = nt.attention(q, k, v, mask)
    calls: dict[str, int] = {}
    with use({"softmax": counting("softmax", calls)}, names=["softmax"]):
        switched = nt.attention(q, k, v, mask)
        module = nt.MultiHeadAttention(16, 2).double()
        module(torch.randn(1, seq, 16, dtype=torch.float64), mask=mask)
    assert calls["softmax"] == 2
    torch.testing.assert_close(switched, expected)
    assert blockwise.automatic_block(seq, seq) is not None  # restored on exit
    with use({"layer_norm": counting("layer_norm", calls)}, names=["layer_norm"]):
        assert blockwise.automatic_block(seq, seq) is not None
