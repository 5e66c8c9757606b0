"""Look inside: recording changes nothing, edits do what they say, and every activation
TransformerLens records equals its named counterpart (TransformerLens is the reference
only: a test dependency)."""

import re

import pytest
import torch

import named_transformer as nt
from named_transformer.recording import Named, ablate, edit, patch, record

VOCAB = 23


def gpt2_layout(dtype=torch.float32, seed=0) -> nt.LanguageModel:
    torch.manual_seed(seed)
    config = nt.TransformerConfig(
        decoder_layers=2, layer=12, heads=3, hidden=20, norm_first=True,
        activation="gelu_tanh", dropout=0.0,
    )  # fmt: skip
    model = nt.LanguageModel(
        VOCAB, config, positions="learned", scale_embeddings=False, max_positions=16,
        tie_output=False,
    )  # fmt: skip
    return model.to(dtype).eval()


def llama_layout(dtype=torch.float32, seed=0) -> nt.LanguageModel:
    torch.manual_seed(seed)
    config = nt.TransformerConfig.llama(
        decoder_layers=2, layer=16, heads=4, kv_heads=2, hidden=24, eps=1e-5
    )
    model = nt.LanguageModel(
        VOCAB, config, positions="rotary", scale_embeddings=False, tie_output=False,
        output_bias=False,
    )  # fmt: skip
    return model.to(dtype).eval()


def alibi_layout() -> nt.LanguageModel:
    """ALiBi: a score bias B in every self-attention (the biased softmax's path)."""
    torch.manual_seed(5)
    config = nt.TransformerConfig(decoder_layers=2, layer=12, heads=3, hidden=20,
                                  dropout=0.0)  # fmt: skip
    return nt.LanguageModel(VOCAB, config, positions="alibi").eval()


def encoder_decoder() -> nt.Transformer:
    torch.manual_seed(1)
    config = nt.TransformerConfig(
        encoder_layers=2, decoder_layers=2, layer=12, heads=3, hidden=20, dropout=0.0
    )
    return nt.Transformer(VOCAB, VOCAB + 2, config).eval()


def _tokens(*shape, seed=2, vocab=VOCAB):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def runs():
    """(name, model, a function running it) for every model kind."""
    lm, llama, transformer = gpt2_layout(), llama_layout(), encoder_decoder()
    alibi = alibi_layout()
    torch.manual_seed(3)
    classifier = nt.TransformerClassifier(VOCAB, 4, num_layers=2, dropout=0.0).eval()
    text = nt.TextEncoder(
        VOCAB, nt.TransformerConfig(encoder_layers=2, layer=12, heads=3, hidden=20,
                                    dropout=0.0, activation="gelu"),
        max_positions=16,
    ).eval()  # fmt: skip
    seq2seq = nt.BahdanauSeq2Seq(VOCAB, layer=6, hidden=8).eval()
    tokens, target = _tokens(2, 7), _tokens(2, 5, seed=4)
    mask = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])
    lengths = torch.tensor([7, 5])
    return [
        ("gpt2", lm, lambda: lm(tokens)),
        ("llama", llama, lambda: llama(tokens)),
        ("alibi", alibi, lambda: alibi(tokens)),
        ("transformer", transformer, lambda: transformer(tokens, target)),
        ("classifier", classifier, lambda: classifier(tokens, mask)),
        ("text_encoder", text, lambda: text(tokens, mask)),
        ("bahdanau", seq2seq, lambda: seq2seq(tokens, lengths, target)[0]),
    ]


RUNS = runs()
IDS = [name for name, _, _ in RUNS]


@pytest.mark.parametrize(("name", "model", "run"), RUNS, ids=IDS)
def test_recording_changes_nothing_bit_for_bit(name, model, run):
    plain = run()
    with record(model) as found:
        recorded = run()
    assert torch.equal(plain, recorded)
    assert len(found) > 8, sorted(found)


@pytest.mark.parametrize(("name", "model", "run"), RUNS, ids=IDS)
def test_every_value_carries_axes_that_fit_its_shape(name, model, run):
    with record(model) as found:
        run()
    for key in found:
        for value in found.calls(key):
            named = [a for a in value.axes.split() if not a.startswith("*")]
            assert value.tensor.ndim >= len(named), (key, value.axes)
            assert all(a in nt.AXES for a in [*named, "batch"]), (key, value.axes)


@pytest.mark.parametrize(("name", "model", "run"), RUNS, ids=IDS)
def test_patching_every_value_with_its_own_record_leaves_the_output(name, model, run):
    with record(model) as found:
        plain = run()
    copies = {}
    for key in found:
        values = found.calls(key)
        if len(values) == 1:
            copies[key] = values[0].tensor.detach().clone()
    with edit(model, copies):
        patched = run()
    assert torch.equal(plain, patched)


def test_the_names_the_issue_asks_for_are_recorded():
    layer = "blocks.layers.1."
    expected = {
        "gpt2": [
            "embedding.embedded", "positions.table", "blocks.norm.normalised",
            "generator.logits",
            *(layer + name for name in [
                "attention_residual.inputs", "attention_residual.norm.normalised",
                "self_attention.queries", "self_attention.keys",
                "self_attention.values", "self_attention.scores",
                "self_attention.weights", "self_attention.attended",
                "self_attention.contributions", "attention_residual.outputs",
                "feed_forward.hidden", "feed_forward.activated",
                "feed_forward_residual.outputs",
            ]),
        ],
        "llama": [
            "blocks.layers.0.self_attention.rotated_queries",
            "blocks.layers.0.self_attention.rotated_keys",
            "blocks.layers.0.feed_forward.gate", "blocks.layers.0.feed_forward.up",
        ],
        "alibi": ["blocks.layers.1.self_attention.scores",
                  "blocks.layers.1.self_attention.weights"],
        "transformer": [
            "stacks.encoder.layers.1.self_attention.weights",
            "stacks.decoder.layers.1.cross_attention.weights",
            "stacks.decoder.layers.0.self_attention_residual.inputs",
            "source_embedding.embedded", "target_embedding.embedded",
        ],
        "classifier": ["pooled", "logits", "encoder.layers.1.self_attention.weights"],
        "text_encoder": ["types.embedded", "embedding_norm.normalised"],
        "bahdanau": [
            "encoder.annotations", "decoder.steps.4.alignment",
            "decoder.steps.0.context", "decoder.steps.2.logits",
        ],
    }  # fmt: skip
    for name, model, run in RUNS:
        with record(model) as found:
            run()
        missing = [key for key in expected[name] if key not in found]
        assert not missing, (name, missing)
    transformer = dict((n, (m, r)) for n, m, r in RUNS)["transformer"]
    with record(transformer[0]) as found:
        transformer[1]()
    assert len(found.calls("positions.table")) == 2  # the source's, then the target's
    with pytest.raises(ValueError, match=r"tapped 2 times.*calls"):
        found["positions.table"]


def test_recorded_biased_scores_are_not_written_over_by_the_weights():
    # the biased softmax works over its own table; the recorded S + B is the tap's
    model = dict((n, m) for n, m, _ in RUNS)["alibi"]
    tokens = _tokens(2, 7)
    for gradient in (False, True):  # without one, the weights go over a table
        with torch.set_grad_enabled(gradient), record(model, ["*.s*", "*.w*"]) as found:
            model(tokens)
        name = "blocks.layers.0.self_attention."
        scores, weights = found[name + "scores"].tensor, found[name + "weights"].tensor
        assert torch.isfinite(scores).all()  # S + B: the mask not added into it
        causal = nt.causal_mask(7)
        expected = torch.softmax(scores.masked_fill(~causal, -torch.inf), dim=-1)
        torch.testing.assert_close(weights, expected)


def test_bahdanau_steps_stack_into_the_alignment_matrix():
    _, model, _ = RUNS[IDS.index("bahdanau")]
    sources, lengths, targets = _tokens(2, 7), torch.tensor([7, 5]), _tokens(2, 5)
    with record(model, "*.alignment") as found:
        _, alignments = model(sources, lengths, targets)
    stacked = found.stack("decoder.steps.{}.alignment", axis="seq_q")
    assert stacked.axes == "seq_q *batch seq"
    assert torch.equal(stacked.to("*batch seq_q seq"), alignments)
    assert set(found) == {f"decoder.steps.{i}.alignment" for i in range(5)}


def test_record_keeps_only_the_names_asked_for_and_computes_no_contributions():
    model = gpt2_layout()
    with record(model, ["*.weights"]) as found:
        model(_tokens(2, 7))
    expected = [f"blocks.layers.{i}.self_attention.weights" for i in (0, 1)]
    assert sorted(found) == expected


def test_zero_ablating_a_head_equals_zeroing_its_slice_of_w_o():
    model, tokens = gpt2_layout(torch.float64), _tokens(2, 7)
    attention = model.blocks.layers[1].self_attention
    name = "blocks.layers.1.self_attention."
    with edit(model, {name + "attended": ablate("heads", 2)}):
        ablated = model(tokens)
    with edit(model, {name + "contributions": ablate("heads", 2)}):
        ablated_contribution = model(tokens)
    with torch.no_grad():
        attention.w_o[2] = 0.0
    zeroed = model(tokens)
    assert torch.equal(ablated, zeroed)
    torch.testing.assert_close(ablated_contribution, zeroed, rtol=0, atol=1e-12)


def test_a_cross_attention_head_ablated_equals_its_w_o_slice_zeroed():
    model = encoder_decoder().double()
    source, target = _tokens(2, 7), _tokens(2, 5, seed=4)
    name = "stacks.decoder.layers.0.cross_attention.attended"
    with edit(model, {name: ablate("heads", 1)}):
        ablated = model(source, target)
    with torch.no_grad():
        model.stacks.decoder.layers[0].cross_attention.w_o[1] = 0.0
    assert torch.equal(ablated, model(source, target))


def test_patching_a_position_from_another_input():
    model = gpt2_layout()
    clean, corrupt = _tokens(1, 7, seed=5), _tokens(1, 7, seed=6)
    name = "blocks.layers.0.attention_residual.inputs"
    with record(model, name) as found:
        expected = model(clean)
    everything = {name: patch(found[name])}
    with edit(model, everything):
        assert torch.equal(model(corrupt), expected)  # all positions: the clean run
    with edit(model, {name: patch(found[name], "seq", 0)}):
        patched = model(corrupt)
    # the first position sees only itself (causal): it is the clean run's
    assert torch.equal(patched[..., 0, :], expected[..., 0, :])
    assert not torch.equal(patched[..., 1:, :], expected[..., 1:, :])


def test_named_values_move_axes_by_name():
    value = Named(torch.arange(24.0).reshape(2, 3, 4), "*batch heads seq")
    assert value.dim("heads") == -2 and value.dim("seq") == -1
    moved = value.to("seq heads *batch")
    assert moved.shape == (4, 3, 2) and moved[1, 2, 1] == value.tensor[1, 2, 1]
    with pytest.raises(ValueError, match="no axis 'key'"):
        value.dim("key")


def test_bad_edits_and_names_are_one_clear_line():
    model, tokens = gpt2_layout(), _tokens(2, 7)
    with pytest.raises(ValueError, match=r"edit of 'generator.logits' gave \(3,\)"):
        with edit(model, {"generator.logits": torch.zeros(3)}):
            model(tokens)
    with record(model) as found:
        model(tokens)
    with pytest.raises(KeyError, match="the nearest recorded: 'blocks.layers.0.self"):
        found["layers.0.self_attention.weights"]


def test_a_name_or_pattern_that_matches_no_tap_is_refused_with_the_nearest():
    # a misspelt name edited nothing and recorded nothing, silently
    model, tokens = gpt2_layout(), _tokens(2, 7)
    attended = "blocks.layers.1.self_attention.attended"
    typo = "blocks.layer.1.self_attention.attended"
    for change in (ablate("heads", 2), patch(None), torch.zeros(2, 3, 7, 4)):
        with pytest.raises(ValueError, match=rf"name to edit '{typo}' matches no tap"
                           rf".*nearest: '{attended}'"):  # fmt: skip
            with edit(model, {typo: change}):
                model(tokens)
    weights = "blocks.layers.0.self_attention.weights"
    for pattern, near in (("*.weight", weights), ("blocks.layers.7.*", "blocks.")):
        with pytest.raises(ValueError, match=rf"record '{re.escape(pattern)}' matches"
                           rf" no tap.*nearest: '{near}"):  # fmt: skip
            with record(model, ["*.keys", pattern]):
                model(tokens)
    with pytest.raises(ValueError, match="no tap ran in the block"):
        with record(model, "*.weights"):
            pass
    with pytest.raises(ValueError, match="matches no tap"):
        nt.patching_grid(model, lambda: model(tokens), lambda out: out.sum(),
                         "blocks.layer.{}.self_attention.attended",
                         "heads")  # fmt: skip
    with record(model) as found:
        model(tokens)
    with pytest.raises(KeyError, match=f"nothing was recorded as '{weights[:-1]}'; "
                       f"the nearest recorded: '{weights}'"):  # fmt: skip
        found[weights[:-1]]
    # an error of the block itself is not hidden behind the refusal
    with pytest.raises(RuntimeError, match="the block's own"):
        with edit(model, {typo: ablate("heads", 2)}):
            raise RuntimeError("the block's own error")


def test_an_edit_inside_a_record_of_the_same_model_is_named_by_its_path():
    # the inner block read a copy of the outer one's module paths: bare names
    model, tokens = gpt2_layout(), _tokens(2, 7)
    attended = "blocks.layers.1.self_attention.attended"
    with record(model, "*.attended") as found:
        with edit(model, {attended: ablate("heads", 0)}):
            edited = model(tokens)
    assert sorted(found) == [attended.replace("1", "0"), attended]
    assert not found[attended].tensor[:, 0].any()
    with edit(model, {attended: ablate("heads", 0)}):
        assert torch.equal(model(tokens), edited)


def test_recording_works_on_a_function_called_directly():
    inputs = torch.randn(2, 5, 8)
    weights = nt.MultiHeadAttention(8, 2).named_weights()
    with record() as found:
        nt.multihead(inputs, inputs, weights)
    assert found["weights"].tensor.shape == (2, 2, 5, 5)


def test_a_fused_attention_is_materialised_while_its_weights_are_recorded():
    layer = nt.MultiHeadAttention(8, 2, fused=True).eval()
    inputs = torch.randn(2, 5, 8)
    plain = layer(inputs)
    with record(layer, "weights") as found:
        recorded = layer(inputs)
    assert found["weights"].tensor.shape == (2, 2, 5, 5)
    torch.testing.assert_close(recorded, plain)


def test_nothing_recorded_compiles_whole():
    model, tokens = gpt2_layout(), _tokens(2, 7)
    with nt.shape_checks(False):
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        torch.testing.assert_close(compiled(tokens), model(tokens))


# --- analyses ---------------------------------------------------------------------
def test_the_logit_lens_ends_with_the_models_own_output():
    model, tokens = gpt2_layout(), _tokens(2, 7)
    with record(model) as found:
        output = model(tokens)
    lens = nt.logit_lens(model, found)
    assert lens.axes == "layers *batch seq vocab" and lens.tensor.shape[0] == 3
    assert torch.equal(lens.tensor[-1], output)
    first = model.generator(
        model.blocks.norm(
            found["embedding.embedded"].tensor + found["positions.table"].tensor
        )
    )
    torch.testing.assert_close(lens.tensor[0], first)


def _diagonal_reference(weights, offset, queries):
    """The mean of weights[..., j, j + offset] over j in queries, by loops."""
    layers, batch, heads = weights.shape[:3]
    scores = torch.zeros(layers, heads)
    for layer in range(layers):
        for head in range(heads):
            picked = [weights[layer, b, head, j, j + offset]
                      for b in range(batch) for j in queries]  # fmt: skip
            scores[layer, head] = sum(picked) / len(picked)
    return scores


def test_induction_and_previous_token_scores_are_their_diagonals():
    model, period = gpt2_layout(), 5
    tokens = nt.repeated_tokens(VOCAB, period, batch=3, seed=1)
    assert torch.equal(tokens[:, :period], tokens[:, period:])
    with record(model, "*.weights") as found:
        model(tokens)
    weights = found.stack("blocks.layers.{}.self_attention.weights").tensor.detach()
    induction = nt.induction_scores(found, tokens)
    previous = nt.previous_token_scores(found)
    assert induction.axes == previous.axes == "layers heads"
    expected = _diagonal_reference(weights, 1 - period, range(period, 2 * period))
    torch.testing.assert_close(induction.tensor, expected)
    expected = _diagonal_reference(weights, -1, range(1, 2 * period))
    torch.testing.assert_close(previous.tensor, expected)


def test_induction_scores_find_the_copies_after_a_start_token():
    # 0.8.3 took the period and assumed start 0: a BOS token shifted every query
    model, period = gpt2_layout(), 5
    copies = nt.repeated_tokens(VOCAB, period, batch=3, seed=1, low=1)
    tokens = torch.cat([torch.zeros(3, 1, dtype=torch.long), copies], 1)  # BOS 0
    with record(model, "*.weights") as found:
        model(tokens)
    weights = found.stack("blocks.layers.{}.self_attention.weights").tensor.detach()
    expected = _diagonal_reference(weights, 1 - period,
                                   range(1 + period, 1 + 2 * period))  # fmt: skip
    torch.testing.assert_close(nt.induction_scores(found, tokens).tensor, expected)


def test_induction_scores_refuse_tokens_without_one_pair_of_copies():
    model = gpt2_layout()
    ambiguous = torch.tensor([[3, 1, 2, 3, 1, 2, 3]])  # 312|312 from 0, 123|123 from 1
    plain = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
    for tokens, refusal in ((ambiguous, "ambiguous"), (plain, "no two copies")):
        with record(model, "*.weights") as found:
            model(tokens)
        with pytest.raises(ValueError, match=refusal):
            nt.induction_scores(found, tokens)
    with pytest.raises(TypeError, match="argument 'tokens' is int 3, not a tensor"):
        nt.induction_scores(found, 3)  # 0.8.3's induction_scores(found, period)
    with pytest.raises(ValueError, match=r"tokens of shape \(2, 7\)"):
        nt.induction_scores(found, torch.cat([plain, plain]))


def test_the_patching_grid_of_ablations_equals_zeroed_w_o_slices():
    model, tokens = gpt2_layout(torch.float64), _tokens(2, 7)

    def metric(log_probs):
        return log_probs[:, -1, 3].mean()

    name = "blocks.layers.{}.self_attention.attended"
    grid = nt.patching_grid(model, lambda: model(tokens), metric, name, "heads")
    assert grid.axes == "layers heads" and grid.tensor.shape == (2, 3)
    for layer, head in [(0, 1), (1, 2)]:
        w_o = model.blocks.layers[layer].self_attention.w_o
        saved = w_o.detach().clone()
        with torch.no_grad():
            w_o[head] = 0.0
            expected = float(metric(model(tokens)))
            w_o.copy_(saved)
        assert grid.tensor[layer, head] == expected


def test_patching_positions_from_a_clean_run_equals_a_pytorch_hook_doing_it():
    model = gpt2_layout(torch.float64)
    clean, corrupt = _tokens(1, 6, seed=8), _tokens(1, 6, seed=9)
    name = "blocks.layers.{}.attention_residual.inputs"
    with record(model, "*.attention_residual.inputs") as found:
        model(clean)

    def metric(out):
        return out[0, -1].max()

    run = lambda: model(corrupt)  # noqa: E731
    grid = nt.patching_grid(model, run, metric, name, "seq", found)
    assert grid.axes == "layers seq" and grid.tensor.shape == (2, 6)
    for layer, position in [(0, 2), (1, 5)]:
        clean_input = found[name.format(layer)].tensor

        def replace(module, args, clean_input=clean_input, position=position):
            inputs = args[0].clone()
            inputs[:, position] = clean_input[:, position]
            return (inputs, *args[1:])

        block = model.blocks.layers[layer]
        handle = block.register_forward_pre_hook(replace)
        with torch.no_grad():
            expected = float(metric(run()))
        handle.remove()
        assert grid.tensor[layer, position] == expected
