"""JAX's own tests of `jax.nn.softplus`, ported to this library.

From `tests/nn_test.py` of jax-ml/jax (class `NNFunctionsTest`), each case
named after the upstream test it ports and keeping its tolerances: JAX's
`check_grads` defaults (no `rtol`/`atol` given upstream off TPU) and exact
equality where upstream uses `assertEqual`. They run with x64 off and on,
as JAX's CI does (`JAX_ENABLE_X64`).

`check_grads` runs in JAX's default modes (forward and reverse) where the
installed JAX gives `softplus` forward mode (`HiPrim`, JAX 0.9+); on JAX 0.8
`softplus` is a `jax.custom_vjp` and runs in reverse mode only.
`softplus_backward` is checked in both modes, to order 3. Integer and bool
inputs promote as in `jax.nn.softplus`.

The `nn` fixture runs each case twice: on this library, and through
`jax.nn.softplus` after `jax.nn.softplus = jax_softplus.softplus`, as a user
who swaps it in would (`.ci/run`'s drop-in stage does the same for numpyro's
own suites).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FORWARD_MODE
from jax.test_util import check_grads

from jax_softplus import softplus, softplus_backward

# JAX's default check_grads modes where forward mode is supported.
MODES = ["fwd", "rev"] if FORWARD_MODE else ["rev"]

INF, NAN = float("inf"), float("nan")


@pytest.fixture(params=[False, True], ids=["x32", "x64"])
def x64_mode(request):
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", request.param)
    try:
        yield request.param
    finally:
        jax.config.update("jax_enable_x64", previous)


class _Ours:
    softplus = staticmethod(softplus)


@pytest.fixture(params=["jax_softplus", "swapped"])
def nn(request, monkeypatch):
    """Where the cases find `softplus`: this library, or `jax.nn` with its
    softplus replaced by this library's (looked up at call time)."""
    if request.param == "jax_softplus":
        return _Ours
    monkeypatch.setattr(jax.nn, "softplus", softplus)
    return jax.nn


def _backward_of(dd=0.75, beta=1.0):
    """softplus_backward as a function of src alone (dd, beta fixed)."""
    return lambda x: softplus_backward(x, jnp.full_like(x, dd), beta)


# upstream: testSoftplusGrad -> check_grads(nn.softplus, (1e-8,), order=4)
@pytest.mark.slow
def test_softplus_grad(nn, x64_mode):
    check_grads(nn.softplus, (1e-8,), order=4, modes=MODES)


@pytest.mark.slow
def test_softplus_backward_grad(x64_mode):
    check_grads(_backward_of(), (1e-8,), order=3, modes=["fwd", "rev"])
    # In every operand, beta included.
    check_grads(
        lambda x, dd, b: softplus_backward(x, dd, b),
        (0.3, 0.75, 1.7),
        order=3,
        modes=["fwd", "rev"],
    )


# upstream: testSoftplusGradZero -> check_grads(nn.softplus, (0.,), order=1)
def test_softplus_grad_zero(nn, x64_mode):
    check_grads(nn.softplus, (0.0,), order=1, modes=MODES)
    check_grads(_backward_of(), (0.0,), order=1, modes=["fwd", "rev"])


# upstream: testSoftplusGradInf -> assertAllClose(1., grad(nn.softplus)(inf))
def test_softplus_grad_inf(nn, x64_mode):
    np.testing.assert_allclose(1.0, jax.grad(nn.softplus)(INF))
    np.testing.assert_allclose(1.0, softplus_backward(INF, 1.0))


# upstream: testSoftplusGradNegInf -> check_grads(nn.softplus, (-inf,), order=1)
def test_softplus_grad_neg_inf(nn, x64_mode):
    check_grads(nn.softplus, (-INF,), order=1, modes=MODES)
    check_grads(_backward_of(), (-INF,), order=1, modes=["fwd", "rev"])


# upstream: testSoftplusGradNan -> check_grads(nn.softplus, (nan,), order=1)
def test_softplus_grad_nan(nn, x64_mode):
    check_grads(nn.softplus, (NAN,), order=1, modes=MODES)
    check_grads(_backward_of(), (NAN,), order=1, modes=["fwd", "rev"])


# upstream: testSoftplusZero, parameters [int, float] + floating + integer,
# assertEqual(jnp.log(dtype(2)), nn.softplus(dtype(0)))
FLOATING = [jnp.bfloat16, jnp.float16, jnp.float32, jnp.float64]
INTEGER = [jnp.int8, jnp.int16, jnp.int32, jnp.int64]


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype float64")
@pytest.mark.parametrize(
    "dtype", [int, float, *FLOATING], ids=lambda d: getattr(d, "__name__", str(d))
)
def test_softplus_zero(nn, x64_mode, dtype):
    want, got = jnp.log(dtype(2)), nn.softplus(dtype(0))
    assert want.dtype == got.dtype
    assert want == got


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype int64")
@pytest.mark.parametrize("dtype", INTEGER, ids=lambda d: d.__name__)
def test_softplus_zero_integers(nn, x64_mode, dtype):
    want, got = jnp.log(dtype(2)), nn.softplus(dtype(0))
    assert want.dtype == got.dtype
    assert want == got


# upstream (older nn_test.py): testSoftplusValue -> softplus(89.) close to 89.
def test_softplus_value(nn, x64_mode):
    np.testing.assert_allclose(nn.softplus(89.0), 89.0)


# The same cases through jax.nn.softplus itself, so that a change upstream
# that broke them there would show here as a difference, not a mystery.
def test_the_ported_cases_pass_for_jax_nn_softplus(x64_mode):
    check_grads(jax.nn.softplus, (1e-8,), order=2)
    np.testing.assert_allclose(1.0, jax.grad(jax.nn.softplus)(INF))
    for x in (1e-8, 0.0, 2.5, -30.0):
        np.testing.assert_allclose(
            jax.grad(softplus)(x), jax.grad(jax.nn.softplus)(x), rtol=1e-6
        )
