"""Seq2seq with and without attention: padding, equivalence with torch.nn.GRU,
decoding."""

import pytest
import torch
from einops import rearrange
from hypothesis import given
from hypothesis import strategies as st
from jaxtyping import TypeCheckError
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import named_transformer as nt
from named_transformer.core.scores import additive_score
from named_transformer.models.seq2seq import (
    AttentionDecoder,
    BahdanauSeq2Seq,
    BidirectionalEncoder,
    FixedContextDecoder,
    RNNEncoderDecoder,
    bahdanau_attention,
    bidirectional_annotations,
    readout,
    recurrence,
    reverse_padded,
)

# distinct sizes: vocab 11, layer 5, hidden 6 (annotation 12), decoder hidden 7,
# attention 4
VOCAB, LAYER, HIDDEN, DEC, ATT = 11, 5, 6, 7, 4


def batch_of(lengths, seq=None, seed=0):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    seq = int(lengths.max()) if seq is None else seq
    tokens = torch.randint(3, VOCAB, (len(lengths), seq), generator=generator)
    return tokens.masked_fill(torch.arange(seq) >= lengths[:, None], 0), lengths


@given(
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=4), extra=st.integers(0, 3)
)
def test_bidirectional_encoder_equals_each_sequence_unpadded(lengths, extra):
    torch.manual_seed(0)
    encoder = BidirectionalEncoder(VOCAB, LAYER, HIDDEN)
    tokens, lengths = batch_of(lengths, seq=max(lengths) + extra)
    annotations, backward_first = encoder(tokens, lengths)
    for b, n in enumerate(lengths.tolist()):
        alone, alone_first = encoder(tokens[b : b + 1, :n], lengths[b : b + 1])
        torch.testing.assert_close(annotations[b, :n], alone[0])
        torch.testing.assert_close(backward_first[b], alone_first[0])
        assert (annotations[b, n:] == 0).all()
        # the backward direction's state at position 1 is the state after reading it
        # last
        torch.testing.assert_close(annotations[b, 0, HIDDEN:], backward_first[b])


def _copy_gru(ours, weight_ih, weight_hh, bias_ih, bias_hh):
    h = ours.w_hidden.shape[-1]
    with torch.no_grad():
        ours.w_input.copy_(rearrange(weight_ih, "(gates h) i -> gates h i", h=h))
        ours.w_hidden.copy_(rearrange(weight_hh, "(gates h) k -> gates h k", h=h))
        ours.b_input.copy_(rearrange(bias_ih, "(gates h) -> gates h", h=h))
        ours.b_hidden.copy_(rearrange(bias_hh, "(gates h) -> gates h", h=h))


def test_bidirectional_encoder_equals_torch_bidirectional_gru_packed():
    torch.manual_seed(1)
    encoder = BidirectionalEncoder(VOCAB, LAYER, HIDDEN)
    reference = torch.nn.GRU(LAYER, HIDDEN, bidirectional=True, batch_first=True)
    _copy_gru(
        encoder.forward_cell,
        reference.weight_ih_l0,
        reference.weight_hh_l0,
        reference.bias_ih_l0,
        reference.bias_hh_l0,
    )
    _copy_gru(
        encoder.backward_cell,
        reference.weight_ih_l0_reverse,
        reference.weight_hh_l0_reverse,
        reference.bias_ih_l0_reverse,
        reference.bias_hh_l0_reverse,
    )
    tokens, lengths = batch_of([6, 2, 4], seq=8)
    packed = pack_padded_sequence(
        encoder.embedding[tokens], lengths, batch_first=True, enforce_sorted=False
    )
    out, final = reference(packed)
    expected, _ = pad_packed_sequence(out, batch_first=True, total_length=8)
    annotations, backward_first = encoder(tokens, lengths)
    torch.testing.assert_close(annotations, expected)
    torch.testing.assert_close(backward_first, final[1])


def test_reverse_padded_keeps_padding_at_the_end():
    tokens = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]])
    expected = torch.tensor([[5, 4, 3, 0], [7, 6, 0, 0]])
    assert torch.equal(reverse_padded(tokens, torch.tensor([3, 2])), expected)


def test_source_reversal_reads_the_reversed_source():
    torch.manual_seed(2)
    reversed_model = RNNEncoderDecoder(VOCAB, LAYER, HIDDEN, reverse_source=True)
    plain = RNNEncoderDecoder(VOCAB, LAYER, HIDDEN)
    plain.load_state_dict(reversed_model.state_dict())
    tokens, lengths = batch_of([5, 3, 1], seq=6)
    torch.testing.assert_close(
        reversed_model.encode(tokens, lengths),
        plain.encode(reverse_padded(tokens, lengths), lengths),
    )


def test_baseline_context_is_the_last_real_state():
    torch.manual_seed(3)
    model = RNNEncoderDecoder(VOCAB, LAYER, HIDDEN)
    tokens, lengths = batch_of([5, 2], seq=7)
    context = model.encode(tokens, lengths)
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(
            context[b], model.encode(tokens[b : b + 1, :n], lengths[b : b + 1])[0]
        )


@pytest.mark.parametrize("score", ["additive", "dot", "general", "concat"])
def test_alignments_are_distributions_over_real_positions(score):
    torch.manual_seed(4)
    decoder_hidden = 2 * HIDDEN if score == "dot" else DEC
    model = BahdanauSeq2Seq(
        VOCAB, LAYER, HIDDEN, decoder_hidden=decoder_hidden, score=score, attention=ATT
    )
    tokens, lengths = batch_of([5, 2, 3], seq=6)
    targets = torch.randint(3, VOCAB, (3, 4))
    logits, alignments = model(tokens, lengths, targets)
    assert logits.shape == (3, 4, VOCAB) and alignments.shape == (3, 4, 6)
    torch.testing.assert_close(alignments.sum(-1), torch.ones(3, 4))
    padded = torch.arange(6) >= lengths[:, None]
    assert (alignments.masked_select(padded[:, None, :]) == 0).all()


def test_extra_padding_changes_nothing():
    torch.manual_seed(5)
    model = BahdanauSeq2Seq(VOCAB, LAYER, HIDDEN, decoder_hidden=DEC, attention=ATT)
    tokens, lengths = batch_of([4, 2], seq=4)
    longer = torch.nn.functional.pad(tokens, (0, 3))
    targets = torch.randint(3, VOCAB, (2, 5))
    logits, alignments = model(tokens, lengths, targets)
    logits_long, alignments_long = model(longer, lengths, targets)
    torch.testing.assert_close(logits, logits_long)
    torch.testing.assert_close(alignments, alignments_long[..., :4])


def test_bahdanau_attention_is_the_additive_score_softmaxed():
    torch.manual_seed(6)
    state, annotations = torch.randn(2, DEC), torch.randn(2, 5, 2 * HIDDEN)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    w_q, w_k, w_s = (
        torch.randn(ATT, DEC),
        torch.randn(ATT, 2 * HIDDEN),
        torch.randn(ATT),
    )

    def score(q, k):
        return additive_score(q, k, w_q, w_k, w_s)

    context, weights = bahdanau_attention(state, annotations, mask, score)
    raw = (
        torch.tanh((state @ w_q.T)[:, None, :] + annotations @ w_k.T) @ w_s
    )  # plain torch
    expected = torch.softmax(raw.masked_fill(~mask, -torch.inf), -1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(context, (expected[..., None] * annotations).sum(1))


def test_teacher_forcing_ratio_zero_equals_greedy_decoding():
    torch.manual_seed(7)
    model = BahdanauSeq2Seq(
        VOCAB, LAYER, HIDDEN, decoder_hidden=DEC, attention=ATT, eos=-1
    )
    tokens, lengths = batch_of([4, 3], seq=5)
    targets = torch.randint(3, VOCAB, (2, 6))
    logits, alignments = model(tokens, lengths, targets, teacher_forcing=0.0)
    decoded, greedy_alignments = model.greedy_decode(tokens, lengths, max_steps=6)
    assert torch.equal(decoded, logits.argmax(-1))
    torch.testing.assert_close(greedy_alignments, alignments)


def test_teacher_forcing_ratio_between_mixes_truth_and_prediction():
    torch.manual_seed(8)
    model = BahdanauSeq2Seq(VOCAB, LAYER, HIDDEN, decoder_hidden=DEC, attention=ATT)
    tokens, lengths = batch_of([4, 3, 5, 2], seq=5)
    targets = torch.randint(3, VOCAB, (4, 6))
    forced, _ = model(tokens, lengths, targets, teacher_forcing=1.0)
    free, _ = model(tokens, lengths, targets, teacher_forcing=0.0)
    mixed, _ = model(tokens, lengths, targets, teacher_forcing=0.5)
    torch.testing.assert_close(mixed[:, 0], forced[:, 0])  # step 1 always reads bos
    assert not torch.allclose(forced, free)


def test_greedy_decoding_stops_and_pads_after_eos():
    torch.manual_seed(9)
    model = RNNEncoderDecoder(VOCAB, LAYER, HIDDEN, decoder_hidden=DEC, eos=2, pad=0)
    with torch.no_grad():  # make eos the only choice after the first step
        model.decoder.b_out.fill_(-10.0)
        model.decoder.b_out[2] = 10.0
    tokens, lengths = batch_of([3, 2], seq=3)
    decoded = model.greedy_decode(tokens, lengths, max_steps=6)
    assert decoded.shape == (2, 1) and (decoded == 2).all()


def test_fixed_context_decoder_sees_one_vector():
    torch.manual_seed(10)
    decoder = FixedContextDecoder(VOCAB, LAYER, DEC, HIDDEN)
    logits = decoder(torch.randn(3, HIDDEN), torch.randint(3, VOCAB, (3, 4)), bos=1)
    assert logits.shape == (3, 4, VOCAB)


def test_tiny_model_learns_to_copy():
    torch.manual_seed(11)
    model = BahdanauSeq2Seq(VOCAB, 8, 16, attention=8)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    tokens, lengths = batch_of([3, 3, 3, 3], seq=3, seed=11)
    nt.shape_checks(
        False
    )  # the autouse fixture turns them back on; every call above is checked
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only contend on a shared machine
    for _ in range(40):
        logits, _ = model(tokens, lengths, tokens)
        loss = torch.nn.functional.cross_entropy(
            rearrange(logits, "b s v -> (b s) v"), rearrange(tokens, "b s -> (b s)")
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.set_num_threads(threads)
    assert loss.item() < 0.1


def _double(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def test_gradcheck_functional_pieces():
    from named_transformer.models.rnn import elman_cell

    w_i, w_h, b = _double(3, 4), _double(3, 3), _double(3)
    mask = torch.tensor([[True, True, False], [True, False, False]])

    def run(inputs, initial):
        states, final = recurrence(
            inputs,
            mask,
            initial,
            lambda x, h: elman_cell(x, h, w_i, w_h, b),
            reverse=True,
        )
        return states, final

    assert torch.autograd.gradcheck(run, (_double(2, 3, 4), _double(2, 3)))
    assert torch.autograd.gradcheck(
        bidirectional_annotations, (_double(2, 3, 4), _double(2, 3, 4))
    )
    w_q, w_k, w_s = _double(4, 5), _double(4, 6), _double(4)
    assert torch.autograd.gradcheck(
        lambda s, h: bahdanau_attention(
            s, h, mask, lambda q, k: additive_score(q, k, w_q, w_k, w_s)
        ),
        (_double(2, 5), _double(2, 3, 6)),
    )
    assert torch.autograd.gradcheck(
        readout,
        (
            _double(2, 5),
            _double(2, 6),
            _double(2, 3),
            _double(7, 5),
            _double(7, 6),
            _double(7, 3),
            _double(7),
        ),
    )


def test_wrong_sizes_name_the_argument():
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(TypeCheckError, match="mask"):
        recurrence(torch.randn(2, 3, 4), mask[:, :2], torch.randn(2, 5), lambda x, h: h)
    with pytest.raises(TypeCheckError, match="backward_states"):
        bidirectional_annotations(torch.randn(2, 3, 4), torch.randn(2, 3, 5))
    with pytest.raises(TypeCheckError, match="lengths"):
        reverse_padded(
            torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, dtype=torch.long)
        )
    with pytest.raises(TypeCheckError, match="mask"):
        bahdanau_attention(
            torch.randn(2, 5), torch.randn(2, 3, 6), mask[:, :2], lambda q, k: q
        )
    with pytest.raises(TypeCheckError, match="w_context"):
        readout(
            torch.randn(2, 5),
            torch.randn(2, 6),
            torch.randn(2, 3),
            torch.randn(7, 5),
            torch.randn(7, 4),
            torch.randn(7, 3),
            torch.randn(7),
        )


def test_modules_reject_wrong_sizes():
    encoder = BidirectionalEncoder(VOCAB, LAYER, HIDDEN)
    tokens, lengths = batch_of([3, 2])
    with pytest.raises(TypeCheckError, match="lengths"):
        encoder(tokens, lengths[:1])
    decoder = AttentionDecoder(VOCAB, LAYER, DEC, 2 * HIDDEN, HIDDEN, attention=ATT)
    with pytest.raises(TypeCheckError, match="mask"):
        decoder(
            torch.randn(2, 3, 2 * HIDDEN),
            torch.ones(2, 4, dtype=torch.bool),
            torch.randn(2, HIDDEN),
            torch.zeros(2, 2, dtype=torch.long),
            1,
        )
    model = RNNEncoderDecoder(VOCAB, LAYER, HIDDEN)
    with pytest.raises(TypeCheckError, match="lengths"):
        model(tokens, lengths[:1], tokens)


def test_bad_configuration_is_a_clear_error():
    with pytest.raises(ValueError, match="score"):
        BahdanauSeq2Seq(VOCAB, score="cosine")
    with pytest.raises(ValueError, match="dot score needs hidden == annotation"):
        BahdanauSeq2Seq(VOCAB, LAYER, HIDDEN, decoder_hidden=DEC, score="dot")
    with pytest.raises(ValueError, match="hidden"):
        RNNEncoderDecoder(VOCAB, LAYER, 0)


def test_special_tokens_are_one_object_or_given_one_by_one():
    from named_transformer.models.seq2seq import SpecialTokens

    special = SpecialTokens(bos=3, eos=-1, pad=0)
    for model in (BahdanauSeq2Seq(VOCAB, special=special),
                  BahdanauSeq2Seq(VOCAB, bos=3, eos=-1),
                  RNNEncoderDecoder(VOCAB, special=SpecialTokens(eos=9), bos=3,
                                    eos=-1)):  # fmt: skip
        assert (model.bos, model.eos, model.pad) == (3, -1, 0)
    with pytest.raises(ValueError, match="three different ids"):
        RNNEncoderDecoder(VOCAB, eos=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'eso'"):
        BahdanauSeq2Seq(VOCAB, eso=2)


def test_experiment_script_quick_mode(tmp_path):
    """The docs experiment runs end to end in its quick mode and writes every output."""
    import importlib.util
    import json
    from pathlib import Path

    script = (
        Path(__file__).resolve().parents[1]
        / "docs"
        / "scripts"
        / "bahdanau_experiment.py"
    )
    spec = importlib.util.spec_from_file_location("bahdanau_experiment", script)
    experiment = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(experiment)
    threads = torch.get_num_threads()
    try:
        experiment.main(["--quick", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    results = json.loads((tmp_path / "bahdanau-results.json").read_text())
    assert set(results["models"]) == set(experiment.MODELS)
    sizes = [m["parameters"] for m in results["models"].values()]
    assert max(sizes) <= 1.1 * min(sizes)  # within ±10 %
    for name in ("length", "loss", "copy-alignment", "dates"):
        assert (tmp_path / f"bahdanau-{name}.png").stat().st_size > 0
    assert "| 5–7 |" in (tmp_path / "bahdanau-table.txt").read_text()
