"""The induction recipe: a short form grows an induction head in layer 1, which reads
from the previous-token head of layer 0 (ablations), and the K-composition score is
the norm of the product of the weights' circuits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import named_transformer as nt
from named_transformer.models.attention_only import (
    AttentionOnlyModel,
    composition_score,
    ov_circuit,
    qk_circuit,
)
from named_transformer.workflows.induction import (
    ATTENDED,
    InductionSettings,
    composition_scores,
    head_scores,
    phase_change,
    repeated_segments,
    train_induction,
)

# The short form: 12 tokens, 16 positions; the circuit forms in some hundreds of
# steps (by step 800 with this seed, 0.70; seeds 2 and 3 by 1,000, seed 1 not),
# trained once for all the tests.
SHORT = InductionSettings(
    vocab=12, context=16, periods=(5, 8), steps=1200, eval_every=1200, seed=0
)
THRESHOLD = 0.3  # a uniform head over ~10 keys scores ~0.1


@pytest.fixture(scope="module")
def trained():
    model, curves, _ = train_induction(SHORT, progress=False)
    return model.eval(), curves


def _top(scores: list[list[float]]) -> tuple[int, int, float]:
    return max(
        ((layer, head, score) for layer, row in enumerate(scores)
         for head, score in enumerate(row)),
        key=lambda found: found[2],
    )  # fmt: skip


def test_the_short_recipe_forms_an_induction_head_in_layer_1(trained):
    model, curves = trained
    torch.manual_seed(SHORT.seed)
    untrained = AttentionOnlyModel(SHORT.vocab, SHORT.layers, SHORT.layer, SHORT.heads)
    assert _top(head_scores(untrained, SHORT)["induction"])[2] < THRESHOLD
    layer, _, score = _top(head_scores(model, SHORT)["induction"])
    assert (layer, score > THRESHOLD) == (1, True)
    assert curves.best_induction()[-1] == pytest.approx(score)


def test_ablating_the_previous_token_head_removes_the_induction_pattern(trained):
    model, _ = trained
    clean = head_scores(model, SHORT)
    _, head, score = _top(clean["induction"])
    previous = max(range(SHORT.heads), key=lambda h: clean["previous"][0][h])
    for layer, ablated in [(0, h) for h in range(SHORT.heads)] + [(1, 1 - head)]:
        edits = {ATTENDED.format(layer): nt.ablate("heads", ablated)}
        after = head_scores(model, SHORT, edits)["induction"][1][head]
        if (layer, ablated) == (0, previous):
            assert after < score / 2
        else:
            assert after > score - 0.1


def test_the_previous_token_head_composes_most_with_the_induction_head(trained):
    model, _ = trained
    clean = head_scores(model, SHORT)
    _, head, _ = _top(clean["induction"])
    previous = max(range(SHORT.heads), key=lambda h: clean["previous"][0][h])
    scores = composition_scores(model)
    assert max(
        (scores[h1][h0], (h1, h0)) for h1 in range(2) for h0 in range(2)
    )[1] == (head, previous)


def test_the_composition_score_is_the_norm_of_the_product_of_the_circuits():
    generator = torch.Generator().manual_seed(0)
    w_q, w_k, w_v = (torch.randn(16, 4, generator=generator) for _ in range(3))
    w_o = torch.randn(4, 16, generator=generator)
    qk, ov = w_q @ w_k.T, w_v @ w_o  # the merged matrices, row vectors x W
    norm = torch.linalg.matrix_norm
    # the later head's keys read x W_OV: scores x W_QK (y W_OV)^T
    direct = norm(qk @ ov.T) / (norm(qk) * norm(ov))
    named = composition_score(qk_circuit(w_q, w_k), ov_circuit(w_v, w_o))
    torch.testing.assert_close(named, direct)
    assert 0.0 < float(named) < 1.0


def test_repeated_segments_hold_one_copy_of_varying_length_and_place():
    rows = repeated_segments(50, 32, 64, torch.Generator().manual_seed(1), 4)
    assert rows.shape == (64, 33)
    places = set()
    for row in rows.tolist():
        found = [
            (start, length)
            for length in range(16, 3, -1)
            for start in range(0, 34 - 2 * length)
            if row[start : start + length] == row[start + length : start + 2 * length]
        ]
        assert found
        places.add(found[0])
    assert len({length for _, length in places}) > 5
    assert len({start for start, _ in places}) > 5


def test_phase_change_finds_an_abrupt_rise_and_no_slow_one():
    steps = list(range(0, 1100, 100))
    abrupt = [0.0] * 5 + [0.5, 0.7] + [0.7] * 4
    assert phase_change(steps, abrupt) == (500, 600)
    assert phase_change(steps, [0.07 * i for i in range(11)]) is None
    assert phase_change(steps, [0.1] * 11) is None


def test_a_record_nested_in_an_edit_names_its_taps_by_module_path():
    torch.manual_seed(0)
    model = AttentionOnlyModel(12, 2, 16, 2)
    tokens = nt.repeated_tokens(12, 5, 2)
    name = ATTENDED.format(0)
    with torch.no_grad(), nt.edit(model, {name: nt.ablate("heads", 0)}), \
            nt.record(model) as found:
        model(tokens)
    assert float(found[name].tensor[:, 0].abs().max()) == 0.0
    with torch.no_grad(), nt.record(model) as outer, \
            nt.edit(model, {name: nt.ablate("heads", 1)}):
        model(tokens)
    assert float(outer[name].tensor[:, 1].abs().max()) == 0.0
    assert float(outer[name].tensor[:, 0].abs().max()) > 0.0


RESULTS = Path(__file__).resolve().parents[1] / "docs/figures/induction/results.json"
PAGE = Path(__file__).resolve().parents[1] / "docs/models/induction-heads.md"


def test_the_page_says_what_the_committed_run_measured():
    run = json.loads(RESULTS.read_text())
    two, one = run["two_layers"], run["one_layer"]
    at = {step: i for i, step in enumerate(two["step"])}
    best = [max(scores[1]) for scores in two["induction"]]
    previous = [scores[0][1] for scores in two["previous"]]
    ablated = {row["ablated"]: row for row in run["ablations"]}
    claims = {  # what the page writes: the value the JSON holds
        f"took {run['seconds']:.0f} s": True,
        f"and {run['control_seconds']:.0f} s for the": True,
        "Between steps 1,500 and 1,900": run["phase_change"] == [1500, 1900],
        "no head of layer 1 scores above 0.14": max(best[: at[1500]]) < 0.14,
        "is still 3.22 nats at step 1,400": round(two["repeated_loss"][at[1400]], 2)
        == 3.22,
        "goes from 0.21 to 0.73": (round(best[at[1500]], 2), round(best[at[1900]], 2))
        == (0.21, 0.73),
        "peaks at 0.77 at step 2,300 and ends at 0.70": (
            round(max(best), 2), two["step"][best.index(max(best))], round(best[-1], 2)
        ) == (0.77, 2300, 0.70),
        "from 0.25 at step 1,500 to 0.85 at step 2,000 and ends at 0.96": (
            round(previous[at[1500]], 2), round(previous[at[2000]], 2),
            round(previous[-1], 2),
        ) == (0.25, 0.85, 0.96),
        "falls from 3.18\n  at step 1,500 to 1.70 at step 2,000 and ends at 1.40": [
            round(two["repeated_loss"][i], 2) for i in (at[1500], at[2000], -1)
        ] == [3.18, 1.70, 1.40],
        "−0.06 at step 1,400,\n  −0.83 at step 2,000 and −0.97 at the end": [
            round(two["icl"][i], 2) for i in (at[1400], at[2000], -1)
        ] == [-0.06, -0.83, -0.97],
        "never scores above 0.14": max(max(s[0]) for s in one["induction"]) < 0.14,
        "ends at 3.14 and its\n  ICL score at −0.10": (
            round(one["repeated_loss"][-1], 2), round(one["icl"][-1], 2)
        ) == (3.14, -0.10),
        "falls from 0.70 to 0.09": round(ablated["0.1"]["induction"][1][1], 2) == 0.09,
        "rises from 1.40 to 3.21": round(ablated["0.1"]["repeated_loss"], 2) == 3.21,
        "from −0.97 to −0.10": round(ablated["0.1"]["icl"], 2) == -0.10,
        "stays at 0.71": round(ablated["0.0"]["induction"][1][1], 2) == 0.71,
        "+0.07; zeroing head 1.0 leaves it at −1.06": (
            round(ablated["1.1"]["icl"], 2), round(ablated["1.0"]["icl"], 2)
        ) == (0.07, -1.06),
        "The pair (1.1, 0.1) composes most, 0.27": round(run["composition"][1][1], 2)
        == 0.27,
    }
    page = PAGE.read_text()
    assert [claim for claim in claims if claim not in page] == []
    assert [claim for claim, holds in claims.items() if not holds] == []


def test_train_induction_writes_the_curves_and_the_model(tmp_path, capsys):
    from named_transformer.workflows.cli import main

    argv = ["train", "induction", "--steps", "20", "--eval-every", "10",
            "--seed", "3", "--out", str(tmp_path), "--no-figure", "--no-progress"]
    assert main(argv) == 0  # fmt: skip
    run = json.loads((tmp_path / "curves.json").read_text())
    assert run["step"] == [0, 10, 20] and run["settings"]["seed"] == 3
    assert len(run["induction"][-1]) == 2  # layers
    model = AttentionOnlyModel(28)
    model.load_state_dict(torch.load(tmp_path / "model.pt"))
    assert "phase change: none visible" in capsys.readouterr().out
