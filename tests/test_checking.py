"""The shape-check switch, and compiling checked code with the checks on and off."""

import subprocess
import sys
from types import SimpleNamespace

import einops
import pytest
import torch
from jaxtyping import TypeCheckError

import named_transformer as nt
from named_transformer._tracing import IN_GRAPH, _register
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


def test_a_dynamo_that_refuses_the_registration_gets_a_warning_not_an_error():
    """Keeping einops' calls whole is a speed-up only: where ``allow_in_graph`` fails
    (a future torch), loading dynamo warns in one line and compiling goes on."""

    def refuse(function):
        raise RuntimeError("no such option")

    with pytest.warns(UserWarning, match="traced, not kept whole.*no such option"):
        _register(SimpleNamespace(allow_in_graph=refuse))


def test_each_einops_call_is_one_node_and_aten_operations_after_aot_autograd():
    """Dynamo records each einops call as one node (the package registers einops'
    functions when ``torch._dynamo`` loads: ``named_transformer._tracing``), in a
    small function and in a model; AOTAutograd then traces those nodes into aten
    operations alone (what Inductor compiles), and the compiled model's values and
    gradients equal eager ones."""
    # imported here, not at collection: they load dynamo, which every xdist worker
    # would otherwise import while collecting
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    recorded, aten = set(), []

    def aten_graph(gm, inputs):
        aten.append(gm.graph)
        return make_boxed_func(gm.forward)

    def backend(gm, inputs):
        recorded.update(
            node.target for node in gm.graph.nodes if node.op == "call_function"
        )
        return aot_autograd(fw_compiler=aten_graph, bw_compiler=aten_graph)(gm, inputs)

    def every_kind(x, y):
        turned = einops.rearrange(x, "a b -> b a")
        wide = einops.repeat(einops.reduce(turned, "b a -> b", "sum"), "b -> b c", c=2)
        packed, shapes = einops.pack([wide, y], "b *")
        first, _ = einops.unpack(packed, shapes, "b *")
        return einops.einsum(first, y, "b c, b d -> c d")

    x, y = torch.randn(3, 4), torch.randn(4, 5)
    compiled = torch.compile(every_kind, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x, y), every_kind(x, y))
    assert recorded >= set(IN_GRAPH)

    recorded.clear()
    config = TransformerConfig(decoder_layers=1, layer=16, heads=2, hidden=32)
    model = LanguageModel(50, config)
    model.train(False)
    tokens = torch.randint(0, 50, (2, 10))
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    eager = model(tokens)
    torch.testing.assert_close(compiled(tokens), eager)
    assert {einops.einsum, einops.rearrange} <= recorded
    expected = torch.autograd.grad(eager.square().mean(), list(model.parameters()))
    found = torch.autograd.grad(
        compiled(tokens).square().mean(), list(model.parameters())
    )
    torch.testing.assert_close(found, expected)
    targets = {node.target for graph in aten for node in graph.nodes
               if node.op == "call_function"}  # fmt: skip
    assert targets  # and none from einops:
    assert not any(getattr(t, "__module__", "").startswith("einops") for t in targets)
