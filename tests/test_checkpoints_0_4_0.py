"""Checkpoints written by version 0.4.0 load into the one multi-head pipeline and give
the same outputs.

``tests/data/0.4.0/`` holds tiny copy-task models (three training steps) of both
Transformer kinds with each kind of positions, written by 0.4.0's ``train_task``
(the optimizer moments dropped to keep the files small), and ``outputs.json`` what
0.4.0 computed from them: the summed cross-entropy of three examples and the greedy
(key/value-cached) decoding of their sources.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

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
