"""The training loop: schedule, label-smoothed loss, determinism, exact resumption, and
DistributedDataParallel on two CPU processes equal to one process on the same global
batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import TypeCheckError
from torch import nn

from named_transformer import shape_checks
from named_transformer.workflows.batches import collate_lm
from named_transformer.workflows.tasks import make_task, task_vocabulary
from named_transformer.workflows.training import (
    TrainConfig,
    Trainer,
    noam_rate,
    smoothed_cross_entropy,
)

VOCAB = task_vocabulary("reverse")


class TinyLM(nn.Module):
    """Embedding, one position-wise MLP with dropout, and output logits: enough to
    train."""

    def __init__(
        self, vocab: int = len(VOCAB), layer: int = 8, dropout: float = 0.2
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, layer)
        self.positions = nn.Embedding(64, layer)
        self.hidden = nn.Linear(layer, 16)
        self.out = nn.Linear(16, vocab)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens) + self.positions(torch.arange(tokens.shape[-1]))
        return self.out(self.dropout(torch.relu(self.hidden(x))))


def lm_loss(model, batch):
    return smoothed_cross_entropy(model(batch.inputs), batch.outputs, VOCAB.pad, 0.1)


DATA = make_task("reverse", 200, seed=0, min_len=2, max_len=5)


def collate(examples):
    return collate_lm(examples, VOCAB)


def make_trainer(directory=None, dropout=0.2, evaluate=None, **overrides):
    torch.manual_seed(0)
    settings = dict(
        steps=12, batch_size=8, layer=8, warmup=4, progress=False, log_every=1
    )
    config = TrainConfig(**{**settings, **overrides})
    model = TinyLM(dropout=dropout)
    return Trainer(
        model, DATA, collate, lm_loss, config, evaluate, directory, {"kind": "tiny"}
    )


def weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_noam_rate_warms_up_then_decays():
    rates = [noam_rate(s, layer=16, warmup=10) for s in range(1, 40)]
    assert max(rates) == rates[9] == pytest.approx(16**-0.5 * 10**-0.5)
    assert rates[:10] == sorted(rates[:10]) and rates[9:] == sorted(
        rates[9:], reverse=True
    )
    assert noam_rate(4, 16, 10, factor=2.0) == pytest.approx(
        2 * 16**-0.5 * 4 * 10**-1.5
    )
    with pytest.raises(ValueError, match="step"):
        noam_rate(0, 16, 10)


def test_smoothed_cross_entropy_is_the_paper_formula():
    torch.manual_seed(1)
    log_probs = torch.randn(3, 5, 7).log_softmax(-1)
    targets = torch.randint(1, 7, (3, 5))
    targets[0, 3:] = 0
    loss, count = smoothed_cross_entropy(log_probs, targets, ignore=0, smoothing=0.1)
    keep = targets != 0
    nll = -log_probs.gather(-1, targets[..., None])[..., 0]
    uniform = -log_probs.mean(-1)
    expected = ((0.9 * nll + 0.1 * uniform) * keep).sum()
    assert count == keep.sum() == 13
    torch.testing.assert_close(loss, expected)
    mean = F.cross_entropy(log_probs[keep], targets[keep], label_smoothing=0.1)
    torch.testing.assert_close(loss / count, mean)


def test_smoothed_cross_entropy_rejects_wrong_axis_size():
    with shape_checks(True), pytest.raises(TypeCheckError, match="targets"):
        smoothed_cross_entropy(
            torch.randn(3, 5, 7), torch.zeros(3, 4, dtype=torch.long), 0
        )


def test_training_reduces_the_loss_and_is_deterministic():
    first = make_trainer(steps=60, dropout=0.0, warmup=10, factor=4.0)
    history = first.fit()
    assert (
        history[-1].loss < 0.95 * history[0].loss
    )  # a position-wise toy: little to learn
    assert history[-1].step == 60 and history[0].tokens_per_second > 0
    second = make_trainer(steps=60, dropout=0.0, warmup=10, factor=4.0)
    second.fit()
    for key, value in weights(first.model).items():
        assert torch.equal(value, second.model.state_dict()[key]), key


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    calls = []

    def evaluate(model):
        calls.append(model.training)
        torch.rand(3)  # evaluation must not disturb the random state of training
        return {"score": 1.0}

    straight = make_trainer(tmp_path / "straight", evaluate=evaluate, eval_every=5)
    straight.fit()
    interrupted = make_trainer(tmp_path / "resumed", evaluate=evaluate, eval_every=5)
    interrupted.fit(until=7)
    interrupted.save(tmp_path / "resumed" / "checkpoint.pt")
    torch.manual_seed(123)  # a new process: fresh weights and random state
    resumed = make_trainer(tmp_path / "resumed", evaluate=evaluate, eval_every=5)
    resumed.load(tmp_path / "resumed" / "checkpoint.pt")
    assert resumed.step == 7
    resumed.fit()
    for key, value in weights(straight.model).items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key
    assert [r.step for r in resumed.history] == [r.step for r in straight.history]
    assert calls and not any(calls)  # evaluation ran in eval mode
    assert [r.metrics for r in straight.history if r.metrics] == [{"score": 1.0}] * 3
    saved = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=False)
    assert saved["step"] == 12 and saved["meta"] == {"kind": "tiny"}
    assert set(saved) >= {"model", "optimizer", "scheduler", "train_config", "rng"}


def test_bad_configuration_is_rejected():
    with pytest.raises(ValueError, match="warmup"):
        TrainConfig(warmup=0)
    with pytest.raises(ValueError, match="label_smoothing"):
        TrainConfig(label_smoothing=1.0)
    with pytest.raises(ValueError, match="at least one"):
        Trainer(TinyLM(), [], collate, lm_loss, TrainConfig(progress=False))


DDP_SCRIPT = """
import os, sys, torch
sys.path.insert(0, {tests!r})
from test_training import make_trainer
trainer = make_trainer(dropout=0.0, steps=6, batch_size=8)
trainer.fit()
torch.save(trainer.model.state_dict(), {out!r} + f"/rank{{trainer.rank}}.pt")
torch.distributed.barrier()
# Leave without the C++ teardown: on a loaded machine gloo's threads sometimes abort
# the process at interpreter exit ("terminate called without an active exception")
# after all the work is done and saved; that shutdown race is not what this test checks.
sys.stdout.flush()
os._exit(0)
"""


def test_two_process_ddp_equals_one_process_on_the_same_global_batch(tmp_path):
    script = tmp_path / "ddp_train.py"
    tests = str(Path(__file__).parent)
    script.write_text(
        textwrap.dedent(DDP_SCRIPT.format(tests=tests, out=str(tmp_path)))
    )
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    command += [
        "--master_port=0",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=localhost:0",
        str(script),
    ]
    result = subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rank0 = torch.load(tmp_path / "rank0.pt")
    rank1 = torch.load(tmp_path / "rank1.pt")
    single = make_trainer(dropout=0.0, steps=6, batch_size=8)
    single.fit()
    for key, value in single.model.state_dict().items():
        assert torch.equal(rank0[key], rank1[key]), key
        torch.testing.assert_close(rank0[key], value, rtol=1e-5, atol=1e-6)


def test_training_stops_early_when_asked(tmp_path):
    trainer = make_trainer(tmp_path, evaluate=lambda m: {"score": 1.0}, eval_every=3)
    assert trainer.stop is None  # never, until a rule is set
    trainer.stop = lambda metrics: metrics["score"] >= 1.0
    trainer.fit()
    assert trainer.step == 3
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["step"] == 3


@pytest.mark.parametrize(
    ("target", "patience", "stopped_at"), [(0.0, 1, 2), (0.0, 3, 6), (1.01, 2, 8)]
)
def test_train_task_stops_after_patience_evaluations_at_the_target(
    target, patience, stopped_at
):
    from named_transformer.workflows.runner import train_task

    run = train_task(
        "copy", size="tiny", steps=8, train_size=32, test_size=4, eval_every=2,
        eval_size=4, batch_size=4, warmup=2, progress=False, target=target,
        patience=patience,
    )  # fmt: skip
    assert run["trainer"].step == stopped_at


def test_train_task_takes_one_settings_object_and_keywords_over_it():
    from named_transformer.workflows.runner import RunSettings, train_task

    settings = RunSettings(size="tiny", steps=8, train_size=32, test_size=4,
                           eval_every=2, eval_size=4, batch_size=4, warmup=2,
                           target=0.0, patience=3)  # fmt: skip
    run = train_task("copy", settings=settings, progress=False, patience=1)
    assert run["trainer"].step == 2  # the keyword won over the object's patience
    assert run["settings"] == settings.replace(patience=1)
    assert run["results"]["size"] == "tiny"
    with pytest.raises(TypeError, match="unknown run setting 'stepz'"):
        train_task("copy", settings=settings, stepz=3)


@pytest.mark.parametrize(
    ("change", "field"),
    [({"size": "huge"}, "size"), ({"positions": "none"}, "positions"),
     ({"dropout": 1.0}, "dropout"), ({"min_len": 5, "max_len": 3}, "min_len"),
     ({"min_len": 0}, "min_len"), ({"steps": 0}, "steps"),
     ({"patience": 0}, "patience"), ({"eval_every": -1}, "eval_every"),
     ({"factor": 0.0}, "factor"), ({"train_size": 0}, "train_size")],
)  # fmt: skip
def test_run_settings_name_the_field_that_is_wrong_in_one_line(change, field):
    from named_transformer.workflows.runner import RunSettings

    with pytest.raises(ValueError, match=rf"^RunSettings\.{field} ") as error:
        RunSettings(**change)
    assert "\n" not in str(error.value)


def test_a_recipe_is_run_settings_and_the_papers_go_over_it():
    from named_transformer.workflows.runner import PAPER, RECIPES, RunSettings

    copy = RunSettings.recipe("copy")
    assert {k: getattr(copy, k) for k in RECIPES["copy"]} == RECIPES["copy"]
    paper = RunSettings.recipe("copy", paper=True, steps=5)
    assert {k: getattr(paper, k) for k in PAPER} == PAPER and paper.steps == 5
    assert paper.eval_size == RECIPES["copy"]["eval_size"]
    with pytest.raises(ValueError, match="no recipe for task 'cpy'"):
        RunSettings.recipe("cpy")


def test_the_functions_that_took_many_parameters_take_at_most_8():
    """Issue "One attention, many variants", item 2: settings that travel together
    are one object (RunSettings, HeatmapOptions, LinePlotOptions, OutputVariable,
    SpecialTokens)."""
    import inspect

    from named_transformer import plot
    from named_transformer.models.seq2seq import BahdanauSeq2Seq, RNNEncoderDecoder
    from named_transformer.rasp.model import CompiledModel
    from named_transformer.workflows.runner import train_task

    for function in (train_task, Trainer.__init__, plot.attention_heatmap,
                     plot.line_plot, CompiledModel.__init__, BahdanauSeq2Seq.__init__,
                     RNNEncoderDecoder.__init__):  # fmt: skip
        names = [n for n in inspect.signature(function).parameters if n != "self"]
        assert len(names) <= 8, (function.__qualname__, names)


# Written by version 0.1.0 (commit df5e901, before the modules moved into subpackages):
# `train_task("copy", size="tiny", steps=3, ...)`'s checkpoint, and that code's
# log-probabilities for two sources, computed then with the model it loaded.
CHECKPOINT_0_1_0 = Path(__file__).parent / "data" / "copy-tiny-0.1.0.pt"


def test_a_checkpoint_written_by_version_0_1_0_still_loads_and_computes_the_same():
    from named_transformer.workflows import load_run
    from named_transformer.workflows.batches import collate
    from named_transformer.workflows.data import Example

    run = load_run(CHECKPOINT_0_1_0)
    then = torch.load(
        CHECKPOINT_0_1_0.with_name("copy-tiny-0.1.0-outputs.pt"), weights_only=True
    )
    examples = [Example(tuple(s), tuple(s)) for s in then["sources"]]
    batch = collate(examples, run["vocabulary"])
    with torch.no_grad():
        now = run["model"](
            batch.source, batch.target_in, batch.source_mask, batch.target_mask
        )
    assert run["spec"].kind.name == "encoder-decoder" and run["step"] == 3
    torch.testing.assert_close(now, then["log_probs"], rtol=0, atol=1e-6)


def test_ctrl_c_finishes_the_step_saves_and_resumes_exactly(tmp_path):
    """A real SIGINT, sent to this process in the middle of step 7 (pytest, and
    xdist's workers, run tests in the main thread, where ``fit`` sets its handler):
    the step finishes, its checkpoint is saved, ``TrainingInterrupted`` names step 7
    (without the handler the signal would stop step 7 half done: "after step 6"),
    the previous handler is back, and resuming from the checkpoint ends with the
    weights of an uninterrupted run."""
    directory = tmp_path / "interrupted"
    calls = []

    def loss(model, batch):  # Ctrl-C arrives in the middle of step 7
        calls.append(1)
        if len(calls) == 7:
            os.kill(os.getpid(), signal.SIGINT)
        return lm_loss(model, batch)

    # elsewhere fit sets no handler, and the signal would stop the test run
    assert threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT)
    interrupted = make_trainer(directory, eval_every=5)
    interrupted.loss = loss
    with pytest.raises(KeyboardInterrupt, match="training interrupted after step 7$"):
        interrupted.fit()
    assert signal.getsignal(signal.SIGINT) is before
    straight = make_trainer(tmp_path / "straight", eval_every=5)
    straight.fit()
    resumed = make_trainer(directory, eval_every=5)
    resumed.load(directory / "checkpoint.pt")
    assert resumed.step == 7
    resumed.fit()
    for key, value in weights(straight.model).items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key


def test_progress_off_a_terminal_is_a_few_lines(capsys):
    trainer = make_trainer(steps=1000, batch_size=2, log_every=100, progress=True)
    trainer.fit()
    lines = capsys.readouterr().err.strip().splitlines()
    assert 10 <= len(lines) < 50, len(lines)
    assert lines[-1].startswith("step 1000/1000  loss ")
    assert "\r" not in "".join(lines)
