"""Adversarial inputs: every pair computes a correct result or raises
TypeError/ValueError naming the problem, and nothing leaves the library in
a bad state."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import backward_ref

from jax_softplus import softplus_backward, softplus_backward_inplace

GOOD = jnp.linspace(-3.0, 3.0, 6).reshape(2, 3)


def _deleted():
    dead = jnp.ones((2, 3))
    softplus_backward_inplace(GOOD, dead)
    assert dead.is_deleted()
    return dead


# name -> factory (deleted arrays must be made fresh for each use).
CANDIDATES = {
    "f32": lambda: GOOD,
    "f16": lambda: GOOD.astype(jnp.float16),
    "int32": lambda: jnp.ones((2, 3), jnp.int32),
    "bool": lambda: jnp.ones((2, 3), bool),
    "complex64": lambda: jnp.ones((2, 3), jnp.complex64),
    "str": lambda: "not an array",
    "None": lambda: None,
    "nested list": lambda: [[0.5, 1.0, 1.5], [2.0, 2.5, 3.0]],
    "ragged list": lambda: [[0.5, 1.0], [2.0]],
    "int list": lambda: [[1, 2, 3], [4, 5, 6]],
    "other shape": lambda: jnp.ones((3, 2)),
    "0-d": lambda: jnp.float32(1.0),
    "numpy f32": lambda: np.ones((2, 3), np.float32),
    "deleted": _deleted,
}
NAMES = {"src", "diff_dst"}


@pytest.mark.parametrize(
    "src_name, dd_name", list(itertools.product(CANDIDATES, CANDIDATES)), ids=str
)
def test_every_pair_is_correct_or_rejected_cleanly(src_name, dd_name):
    src, dd = CANDIDATES[src_name](), CANDIDATES[dd_name]()
    try:
        got = softplus_backward(src, dd, 1.5)
    except (TypeError, ValueError) as err:
        message = str(err)
        assert any(name in message for name in NAMES), message
        assert len(message) > 30, message
    else:
        src_a, dd_a = np.asarray(src), np.asarray(dd)
        assert src_a.shape == dd_a.shape
        assert got.dtype in (jnp.float32, jnp.float16)
        ref = backward_ref(src_a.astype(got.dtype), dd_a.astype(got.dtype), 1.5)
        np.testing.assert_allclose(np.asarray(got, np.float64), ref, rtol=1e-3)
    # The library is still usable.
    np.testing.assert_allclose(
        softplus_backward(GOOD, GOOD, 1.5),
        backward_ref(GOOD, GOOD, 1.5),
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    "beta", [np.nan, np.inf, -np.inf, 1e40, "1.0", None, [1.0], 1j, b"1"], ids=repr
)
@pytest.mark.parametrize("fn", (softplus_backward, softplus_backward_inplace))
def test_bad_beta_is_rejected_cleanly(fn, beta):
    with pytest.raises((TypeError, ValueError), match="beta"):
        fn(GOOD, jnp.ones((2, 3)), beta)
    np.testing.assert_allclose(
        softplus_backward(GOOD, GOOD, 1.5), backward_ref(GOOD, GOOD, 1.5), rtol=1e-6
    )
