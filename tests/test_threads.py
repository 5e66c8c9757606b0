"""The workflows' thread policy (named_transformer.workflows.threads): one thread for a
small model or on a busy machine, the user's OMP_NUM_THREADS honoured, the count put
back after a training run."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from named_transformer.workflows import threads as policy
from named_transformer.workflows.threads import (
    SMALL,
    busy_cores,
    suited_threads,
    threads,
)


@pytest.fixture
def two_threads(monkeypatch):
    """torch at 2 threads, no OMP_NUM_THREADS, on an idle machine of 2 cores."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(policy, "busy_cores", lambda seconds=0.1: 0.0)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def large_model() -> nn.Module:
    return nn.Linear(SMALL, 1)  # SMALL + 1 parameters, allocated lazily by the OS


def test_a_small_model_trains_on_one_thread(two_threads):
    assert suited_threads(nn.Linear(8, 8)) == 1


def test_a_large_model_takes_the_free_cores(two_threads, monkeypatch):
    model = large_model()
    assert suited_threads(model) == 2
    monkeypatch.setattr(policy, "busy_cores", lambda seconds=0.1: 1.2)
    assert suited_threads(model) == 1  # one core taken by another process
    monkeypatch.setattr(policy, "busy_cores", lambda seconds=0.1: 5.0)
    assert suited_threads(model) == 1  # never fewer than one


def test_the_users_omp_num_threads_wins(two_threads, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert suited_threads(nn.Linear(8, 8)) == torch.get_num_threads() == 2


def test_threads_puts_the_count_back_even_after_an_error(two_threads):
    with pytest.raises(RuntimeError), threads(1):
        assert torch.get_num_threads() == 1
        raise RuntimeError
    assert torch.get_num_threads() == 2


def test_fit_runs_a_small_model_on_one_thread_and_puts_the_count_back(two_threads):
    from test_training import make_trainer

    trainer = make_trainer(steps=2)
    seen = []
    step = trainer.train_step

    def counting_step():
        seen.append(torch.get_num_threads())
        return step()

    trainer.train_step = counting_step
    trainer.fit()
    assert seen == [1, 1]
    assert torch.get_num_threads() == 2


def test_busy_cores_is_a_share_of_the_cores():
    assert 0.0 <= busy_cores(0.05) <= (os.cpu_count() or 1) + 1e-9
