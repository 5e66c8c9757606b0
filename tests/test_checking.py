"""The shape-check switch, and compiling checked code with the checks on and off."""

import subprocess
import sys

import pytest
import torch
from jaxtyping import TypeCheckError

import named_transformer as nt
from named_transformer.models.config import TransformerConfig
from named_transformer.models.language_model import LanguageModel


def bad_call():
    return nt.attention(torch.randn(3, 4), torch.randn(5, 6), torch.randn(5, 2))


def test_switch_turns_checks_off_and_on():
    assert nt.shape_checks_enabled()
    with pytest.raises(TypeCheckError):
        bad_call()
    nt.shape_checks(False)
    assert not nt.shape_checks_enabled()
    with pytest.raises(RuntimeError):  # torch itself now fails, deep inside einsum
        bad_call()
    nt.shape_checks(True)
    with pytest.raises(TypeCheckError):
        bad_call()


def test_switch_as_context_manager_restores_the_previous_state():
    with nt.shape_checks(False):
        assert not nt.shape_checks_enabled()
        with nt.shape_checks(True):
            assert nt.shape_checks_enabled()
        assert not nt.shape_checks_enabled()
    assert nt.shape_checks_enabled()


def test_environment_variable_disables_checks_at_import():
    code = "import named_transformer as nt; print(nt.shape_checks_enabled())"
    env = {"JAXTYPING_DISABLE": "1", "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_a_model_compiles_fullgraph_with_the_checks_on_as_by_default():
    # the trace runs the checked functions unchecked (the graph could not run a
    # check); eager calls are still checked
    torch._dynamo.reset()
    config = TransformerConfig(decoder_layers=1, layer=16, heads=2, hidden=32)
    model = LanguageModel(50, config).eval()
    tokens = torch.randint(0, 50, (2, 10))
    assert nt.shape_checks_enabled()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(tokens), model(tokens))
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    attention = torch.compile(nt.attention, fullgraph=True, backend="eager")
    mask = nt.causal_mask(3, 5)
    torch.testing.assert_close(attention(q, k, v, mask), nt.attention(q, k, v, mask))
    with pytest.raises(TypeCheckError, match="key"):
        nt.attention(q, k[..., :3], v, mask)


def test_checked_attention_compiles_fullgraph_with_checks_off():
    torch._dynamo.reset()
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    mask = nt.causal_mask(3, 5)
    with nt.shape_checks(False):
        compiled = torch.compile(nt.attention, fullgraph=True, backend="eager")
        torch.testing.assert_close(compiled(q, k, v, mask), nt.attention(q, k, v, mask))
