"""Test configuration: strict promotion, so silent broadcasting or dtype
promotion inside the library fails loudly here; the tiers; hypothesis
profiles.

Tiers (pyproject.toml's markers): `pytest` runs the default tier, which
answers "did I break it?" in minutes; `pytest -m ''` runs every tier, as CI
does. Hypothesis draws few examples by default and more with
`JAX_SOFTPLUS_HYPOTHESIS=ci` (CI sets it), as JAX's own suite scales its
cases with `JAX_NUM_GENERATED_CASES`.
"""

import os

import jax
import pytest
from hypothesis import HealthCheck, settings

from tools import _common

# Scripts run in subprocesses by the tests, not test modules.
collect_ignore = ["scripts"]

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

# derandomize: every run draws the same examples, so a failure replays.
_COMMON = dict(
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
settings.register_profile("dev", max_examples=10, **_COMMON)
settings.register_profile("ci", max_examples=100, **_COMMON)
_PROFILE = os.environ.get("JAX_SOFTPLUS_HYPOTHESIS", "dev")
if _PROFILE not in ("dev", "ci"):
    raise pytest.UsageError(
        f"JAX_SOFTPLUS_HYPOTHESIS must be 'dev' or 'ci', got {_PROFILE!r}"
    )
settings.load_profile(_PROFILE)


@pytest.fixture
def x64():
    """Run a test with float64 enabled, restoring the previous setting."""
    with _common.x64():
        yield


@pytest.fixture(autouse=True, scope="module")
def _fresh_caches():
    """Each test file starts and ends with JAX's caches empty: the default
    tier's programs would otherwise stay compiled to the end of the run (most
    are one file's own), past 1.5 GiB."""
    yield
    jax.clear_caches()
