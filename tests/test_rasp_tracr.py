"""RASP three ways: the library's compiler, Tracr's own model, and Tracr's weights
loaded by ``from_tracr`` give the same outputs on every input up to length 5 over 3
tokens; ``from_tracr``'s residual stream equals Tracr's after every layer."""

import itertools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from tracr.rasp import rasp

from named_transformer.rasp import PROGRAMS, evaluate
from named_transformer.rasp.compiler import compile_program
from named_transformer.rasp.tracr import compile_with_tracr, from_tracr, to_tracr

MAX_LENGTH = 5
TRACR = [name for name in PROGRAMS if name != "dyck1"]  # see the last test


@pytest.fixture(scope="module", autouse=True)
def _quick_xla_compiles():
    """Tracr's model runs eagerly: JAX compiles each of its operations once per
    shape, and those compiles are most of this file's time. Without XLA's
    optimisation passes they compile about a third faster; with XLA's older CPU
    fusion emitters too (``XLA_FLAGS``, read when JAX first starts its CPU backend:
    this file is the only one that uses JAX) Tracr's compile of two programs took
    4.9 CPU-seconds instead of 8.0. The values are the same (the residual streams
    below still agree to 1e-5)."""
    before = jax.config.values["jax_disable_most_optimizations"]
    flags = os.environ.get("XLA_FLAGS")
    os.environ["XLA_FLAGS"] = f"{flags or ''} --xla_cpu_use_fusion_emitters=false"
    jax.config.update("jax_disable_most_optimizations", True)
    jax.devices()  # the backend starts here, reading the flag
    if flags is None:
        del os.environ["XLA_FLAGS"]
    else:
        os.environ["XLA_FLAGS"] = flags
    yield
    jax.config.update("jax_disable_most_optimizations", before)


def _inputs(name, length):
    example = PROGRAMS[name]
    found = [list(x) for x in itertools.product(example.vocabulary[:3], repeat=length)]
    if example.unique_tokens:  # sort_unique's precondition
        found = [x for x in found if len(set(x)) == len(x)]
    return found


@pytest.fixture(scope="module")
def tracr_models():
    return {
        name: compile_with_tracr(PROGRAMS[name].program,
                                 PROGRAMS[name].vocabulary[:3], MAX_LENGTH)
        for name in TRACR
    }  # fmt: skip


def _tracr_forward(compiled, inputs):
    """Tracr's own forward pass (what ``apply`` runs), a batch of one length,
    compiled whole by ``jax.jit`` (one XLA compile per shape instead of one per
    operation; on ``length`` the residuals equal the eager pass's to 3e-8, and
    ``test_apply_is_the_batched_forward`` checks it against eager ``apply``)."""
    ids = [compiled.input_encoder.encode(["BOS", *x]) for x in inputs]
    out = _jitted(compiled)(compiled.params, jnp.array(ids))
    decoded = [compiled.output_encoder.decode(row.tolist()[1:])
               for row in np.asarray(out.unembedded_output)]  # fmt: skip
    return decoded, [np.asarray(r) for r in out.transformer_output.residuals]


_JITTED: dict[int, object] = {}


def _jitted(compiled):
    """``compiled.forward`` under ``jax.jit``, one per model (jit caches by shape)."""
    if id(compiled) not in _JITTED:
        _JITTED[id(compiled)] = (compiled, jax.jit(compiled.forward))
    return _JITTED[id(compiled)][1]


@pytest.mark.parametrize("name", TRACR)
def test_the_three_ways_give_the_same_outputs_on_every_input(name, tracr_models):
    example, compiled = PROGRAMS[name], tracr_models[name]
    ours = compile_program(example.program, example.vocabulary[:3], MAX_LENGTH)
    loaded = from_tracr(compiled)
    checked = 0
    for length in range(1, MAX_LENGTH + 1):
        inputs = _inputs(name, length)
        if not inputs:
            continue
        expected = [evaluate(example.program, x) for x in inputs]
        assert ours.run_batch(inputs) == expected
        assert loaded.run_batch(inputs) == expected
        assert _tracr_forward(compiled, inputs)[0] == expected
        checked += len(inputs)
    assert checked == (15 if example.unique_tokens else 363)


@pytest.mark.parametrize("name", TRACR)
def test_apply_is_the_batched_forward(name, tracr_models):
    compiled = tracr_models[name]
    for x in _inputs(name, 3)[:4]:
        assert (
            compiled.apply(["BOS", *x]).decoded[1:]
            == _tracr_forward(compiled, [x])[0][0]
        )


@pytest.mark.parametrize("name", TRACR)
def test_from_tracr_has_tracrs_residual_stream_after_every_layer(name, tracr_models):
    compiled = tracr_models[name]
    loaded = from_tracr(compiled)
    assert loaded.labels == compiled.residual_labels
    inputs = _inputs(name, MAX_LENGTH) or _inputs(name, 3)
    residuals, _ = loaded(loaded.encode(inputs))
    _, theirs = _tracr_forward(compiled, inputs)
    assert len(residuals) == len(theirs) + 1  # ours also returns the embedding
    worst = max(
        (ours - torch.from_numpy(t)).abs().max().item()
        for ours, t in zip(residuals[1:], theirs, strict=True)
    )
    assert worst < 1e-5


@pytest.mark.parametrize("name", TRACR)
def test_the_interpreter_agrees_with_tracrs(name):
    program = to_tracr(PROGRAMS[name].program)
    for x in _inputs(name, 4):
        assert rasp.evaluate(program, x) == evaluate(PROGRAMS[name].program, x)


def test_tracr_cannot_compile_a_mean_of_a_non_binary_variable():
    """The library's compiler averages any numerical s-op with a finite value set;
    Tracr only 0/1 ones, so the Dyck-1 program (a mean of -1, 0, 1) is ours alone."""
    with pytest.raises(NotImplementedError, match="only average binary"):
        compile_with_tracr(PROGRAMS["dyck1"].program, list("()a"), MAX_LENGTH)


def test_from_tracr_without_tracr_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "tracr.rasp", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[rasp\]' in a clone"):
        from_tracr(object())


def test_where_a_selector_selects_nothing_the_library_decodes_none_tracr_a_guess():
    """Tracr's own ``shift_by`` and ``detect_pattern`` select no key at position 0.
    There the output's directions are all zero (up to rounding) in Tracr's model and
    in ``from_tracr``'s alike: the library decodes ``None``, as both interpreters say;
    Tracr's ``apply`` takes the argmax of those zeros, some value of the output's
    value set. Every other position decodes the same (docs/learn/rasp.md)."""
    from tracr.compiler import compiling, lib

    programs = [lib.shift_by(1, rasp.tokens), lib.detect_pattern(rasp.tokens, "ab")]
    inputs = [list("bab"), list("aab"), list("abb"), list("bba")]
    for program in programs:
        compiled = compiling.compile_rasp_to_model(
            program, vocab={"a", "b"}, max_seq_len=3, compiler_bos="BOS"
        )
        loaded = from_tracr(compiled)
        applied = [compiled.apply(["BOS", *x]) for x in inputs]
        theirs = [out.decoded[1:] for out in applied]
        ours = loaded.run_batch(inputs)
        assert ours == [rasp.evaluate(program, x) for x in inputs]
        assert all(row[0] is None for row in ours)
        assert [row[1:] for row in theirs] == [row[1:] for row in ours]
        assert all(row[0] in loaded.output_values for row in theirs)  # not None
        residuals, _ = loaded(loaded.encode(inputs))
        assert residuals[-1][:, 1, loaded.output_dims].abs().max() < 1e-6
        for out in applied:
            assert np.abs(out.residuals[-1][0, 1, loaded.output_dims]).max() < 1e-6


@pytest.fixture(scope="module")
def causal_models():
    return {
        name: compile_with_tracr(PROGRAMS[name].program,
                                 PROGRAMS[name].vocabulary[:3], MAX_LENGTH,
                                 causal=True)
        for name in TRACR
    }  # fmt: skip


def _causal_evaluate(program, x):
    """Tracr's causal interpreter, or None where it refuses (an aggregate of
    different categories: most_frequent is not a causal program)."""
    from tracr.rasp import causal_eval

    try:
        return causal_eval.evaluate(program, x)
    except ValueError:
        return None


@pytest.mark.parametrize("name", TRACR)
def test_a_causal_tracr_model_loads_as_tracrs_causal_model(
    name, causal_models, tracr_models
):
    """Compiled with ``causal=True``, Tracr masks the future (its
    ``model_config.causal``; the weights are those of ``causal=False``).
    ``from_tracr`` carries the mask: on every input up to length 5 its residual
    stream equals Tracr's after every layer, as without the mask, and its outputs
    equal Tracr's causal interpreter wherever that answers, and Tracr's model at every
    position where a selector selects something."""
    compiled = causal_models[name]
    assert compiled.model_config.causal
    loaded = from_tracr(compiled)
    assert loaded.causal and not from_tracr(tracr_models[name]).causal
    program = to_tracr(PROGRAMS[name].program)
    answered = 0
    for length in range(1, MAX_LENGTH + 1):
        inputs = _inputs(name, length)
        if not inputs:
            continue
        residuals, _ = loaded(loaded.encode(inputs))
        decoded, theirs = _tracr_forward(compiled, inputs)
        for ours, t in zip(residuals[1:], theirs, strict=True):
            assert (ours - torch.from_numpy(t)).abs().max().item() < 1e-5
        expected = [_causal_evaluate(program, x) for x in inputs]
        kept = [i for i, e in enumerate(expected) if e is not None]
        if not kept:
            continue
        ours = loaded.run_batch([inputs[i] for i in kept])
        assert ours == [expected[i] for i in kept]
        for row, i in zip(ours, kept, strict=True):
            assert all(a == b for a, b in zip(row, decoded[i], strict=True)
                       if a is not None)  # fmt: skip
        answered += len(kept)
    assert answered >= 15


def test_make_length_counts_what_a_causal_query_sees():
    """Tracr's own example: under the causal mask each position sees itself and
    those before it, so ``make_length`` gives 1, 2, 3 on "abc" (3, 3, 3 without)."""
    from tracr.compiler import compiling, lib

    causal = compiling.compile_rasp_to_model(
        lib.make_length(), vocab=set("abc"), max_seq_len=4, compiler_bos="BOS",
        causal=True,
    )  # fmt: skip
    assert causal.apply(["BOS", *"abc"]).decoded[1:] == [1, 2, 3]
    assert from_tracr(causal).run(list("abc")) == [1, 2, 3]
    plain = compiling.compile_rasp_to_model(
        lib.make_length(), vocab=set("abc"), max_seq_len=4, compiler_bos="BOS"
    )
    assert from_tracr(plain).run(list("abc")) == [3, 3, 3]


def test_frac_prevs_is_the_same_with_and_without_the_mask():
    """Tracr's ``make_frac_prevs`` selects only earlier positions, so the causal mask
    changes nothing: both loaded models equal Tracr's causal interpreter."""
    from tracr.compiler import compiling, lib
    from tracr.rasp import causal_eval

    program = lib.make_frac_prevs(rasp.tokens == "a")
    loaded = [
        from_tracr(compiling.compile_rasp_to_model(
            program, vocab=set("ab"), max_seq_len=4, compiler_bos="BOS",
            causal=causal,
        ))
        for causal in (False, True)
    ]  # fmt: skip
    inputs = [list(x) for x in itertools.product("ab", repeat=4)]
    expected = [[round(v, 6) for v in causal_eval.evaluate(program, x)]
                for x in inputs]  # fmt: skip
    for model in loaded:
        assert [[pytest.approx(v, abs=1e-5) for v in row]
                for row in model.run_batch(inputs)] == expected  # fmt: skip
