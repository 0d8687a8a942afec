"""Test configuration: strict promotion, so silent broadcasting or dtype
promotion inside the library fails loudly here."""

import jax
import pytest

from jax_softplus.tools import _common

# Scripts run in subprocesses by the tests, not test modules.
collect_ignore = ["scripts"]

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def x64():
    """Run a test with float64 enabled, restoring the previous setting."""
    with _common.x64():
        yield
