"""Shared test settings: hypothesis without deadlines (torch on 2 cores misses 200
ms)."""

import os

import pytest
import torch
from hypothesis import settings

settings.register_profile("named", deadline=None, max_examples=25, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "named"))

# Tests use tiny tensors and pytest-xdist runs one worker per core: a second intra-op
# thread per worker only makes the workers wait on each other.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed_and_checks_on():
    """Every test starts seeded and with shape checks on, whatever the last one did."""
    import named_transformer as nt

    torch.manual_seed(0)
    with nt.shape_checks(True):
        yield
