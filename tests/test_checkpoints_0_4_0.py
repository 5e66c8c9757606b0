"""Checkpoints written by versions 0.4.0 and 0.8.3 load into the one multi-head pipeline
and give the same outputs.

``tests/data/0.4.0/`` holds tiny copy-task models (three training steps) of both
Transformer kinds with each kind of positions, written by 0.4.0's ``train_task``
(the optimizer moments dropped to keep the files small), and ``outputs.json`` what
0.4.0 computed from them: the summed cross-entropy of three examples and the greedy
(key/value-cached) decoding of their sources. ``tests/data/0.8.3/`` holds the same
for 0.8.3's spec with the options 0.9.0 moved into the configuration's positions (the
rotary base, kept in the configuration then) or now builds from it (grouped heads, the
Llama block; a classifier with ALiBi positions), written by 0.8.3's ``train_task``
with those options put into its spec.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import named_transformer as nt
from named_transformer.workflows.data import Example
from named_transformer.workflows.kinds import kind_of
from named_transformer.workflows.runner import load_run

DATA = Path(__file__).parent / "data" / "0.4.0"
THEN = json.loads((DATA / "outputs.json").read_text())
SOURCES = [tuple("3141592653"), tuple("27182818284"), tuple("1123581321345")]


@pytest.mark.parametrize("name", sorted(THEN))
def test_a_0_4_0_checkpoint_computes_what_0_4_0_computed(name):
    run = load_run(DATA / f"{name}.pt")
    kind = kind_of(run["spec"]["kind"])
    batch = kind.collate([Example(s, s) for s in SOURCES], run["vocabulary"])
    with torch.no_grad():
        loss, count = kind.loss(run["model"], batch, run["vocabulary"], 0.0)
    decoded = kind.decode(run["model"], run["vocabulary"], SOURCES)
    assert run["spec"]["positions"] in name
    assert count.item() == THEN[name]["count"]
    assert loss.item() == pytest.approx(THEN[name]["loss"], rel=1e-6)
    assert ["".join(tokens) for tokens in decoded] == THEN[name]["decoded"]


DATA_0_8_3 = Path(__file__).parent / "data" / "0.8.3"
THEN_0_8_3 = json.loads((DATA_0_8_3 / "outputs.json").read_text())


@pytest.mark.parametrize("name", sorted(THEN_0_8_3))
def test_a_0_8_3_checkpoint_computes_what_0_8_3_computed(name):
    then = THEN_0_8_3[name]
    run = load_run(DATA_0_8_3 / f"{name}.pt")
    kind = kind_of(run["spec"]["kind"])
    sources = [tuple(source) for source in then["sources"]]
    targets = sources if kind.learns == "seq2seq" else [("positive",)] * len(sources)
    examples = [Example(s, t) for s, t in zip(sources, targets, strict=True)]
    batch = kind.collate(examples, run["vocabulary"])
    with torch.no_grad():
        loss, count = kind.loss(run["model"], batch, run["vocabulary"], 0.0)
    decoded = kind.decode(run["model"], run["vocabulary"], sources)
    joiner = "" if kind.learns == "seq2seq" else " "
    assert count.item() == then["count"]
    assert loss.item() == pytest.approx(then["loss"], rel=1e-6)
    assert [joiner.join(tokens) for tokens in decoded] == then["decoded"]
    # the options of the spec are in the model: the positions, and the rest
    positions = run["model"].config.positions
    assert positions.kind == name.split("-")[-1 if "classifier" in name else 3]
    if "llama" in name:
        assert positions == nt.Rotary(500.0)
        assert run["model"].blocks.layers[0].self_attention.kv_heads == 2
