import pytest

from tests.sharding.stages import gpt_train_problem


@pytest.fixture(scope="module")
def gpt_train():
    """The GPT training-step problem on 1x8 H100 (tests/sharding/stages.py)."""
    return gpt_train_problem()
