"""JAX's own tests of `jax.nn.softplus`, ported to this library.

From `tests/nn_test.py` of jax-ml/jax (class `NNFunctionsTest`), each case
named after the upstream test it ports and keeping its tolerances: JAX's
`check_grads` defaults (no `rtol`/`atol` given upstream off TPU) and exact
equality where upstream uses `assertEqual`. They run with x64 off and on,
as JAX's CI does (`JAX_ENABLE_X64`).

Two deliberate differences, each asserted below:
- `softplus` is a `jax.custom_vjp`, so forward mode raises and its
  `check_grads` runs in reverse mode only; `softplus_backward` is checked
  in both modes, to order 3.
- Integer dtypes raise `TypeError` (no promotion, as in oneDNN), where
  `jax.nn.softplus` promotes them; Python ints and floats are accepted.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jax_softplus import softplus, softplus_backward

INF, NAN = float("inf"), float("nan")


@pytest.fixture(params=[False, True], ids=["x32", "x64"])
def x64_mode(request):
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", request.param)
    try:
        yield request.param
    finally:
        jax.config.update("jax_enable_x64", previous)


def _backward_of(dd=0.75, beta=1.0):
    """softplus_backward as a function of src alone (dd, beta fixed)."""
    return lambda x: softplus_backward(x, jnp.full_like(x, dd), beta)


# upstream: testSoftplusGrad -> check_grads(nn.softplus, (1e-8,), order=4)
def test_softplus_grad(x64_mode):
    check_grads(softplus, (1e-8,), order=4, modes=["rev"])


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
def test_softplus_grad_zero(x64_mode):
    check_grads(softplus, (0.0,), order=1, modes=["rev"])
    check_grads(_backward_of(), (0.0,), order=1, modes=["fwd", "rev"])


# upstream: testSoftplusGradInf -> assertAllClose(1., grad(nn.softplus)(inf))
def test_softplus_grad_inf(x64_mode):
    np.testing.assert_allclose(1.0, jax.grad(softplus)(INF))
    np.testing.assert_allclose(1.0, softplus_backward(INF, 1.0))


# upstream: testSoftplusGradNegInf -> check_grads(nn.softplus, (-inf,), order=1)
def test_softplus_grad_neg_inf(x64_mode):
    check_grads(softplus, (-INF,), order=1, modes=["rev"])
    check_grads(_backward_of(), (-INF,), order=1, modes=["fwd", "rev"])


# upstream: testSoftplusGradNan -> check_grads(nn.softplus, (nan,), order=1)
def test_softplus_grad_nan(x64_mode):
    check_grads(softplus, (NAN,), order=1, modes=["rev"])
    check_grads(_backward_of(), (NAN,), order=1, modes=["fwd", "rev"])


# upstream: testSoftplusZero, parameters [int, float] + floating + integer,
# assertEqual(jnp.log(dtype(2)), nn.softplus(dtype(0)))
FLOATING = [jnp.bfloat16, jnp.float16, jnp.float32, jnp.float64]
INTEGER = [jnp.int8, jnp.int16, jnp.int32, jnp.int64]


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype float64")
@pytest.mark.parametrize(
    "dtype", [int, float, *FLOATING], ids=lambda d: getattr(d, "__name__", str(d))
)
def test_softplus_zero(x64_mode, dtype):
    want, got = jnp.log(dtype(2)), softplus(dtype(0))
    assert want.dtype == got.dtype
    assert want == got


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype int64")
@pytest.mark.parametrize("dtype", INTEGER, ids=lambda d: d.__name__)
def test_softplus_zero_integers_are_refused(x64_mode, dtype):
    with pytest.raises(TypeError, match="does not promote"):
        softplus(dtype(0))


# upstream (older nn_test.py): testSoftplusValue -> softplus(89.) close to 89.
def test_softplus_value(x64_mode):
    np.testing.assert_allclose(softplus(89.0), 89.0)


# The same cases through jax.nn.softplus itself, so that a change upstream
# that broke them there would show here as a difference, not a mystery.
def test_the_ported_cases_pass_for_jax_nn_softplus(x64_mode):
    check_grads(jax.nn.softplus, (1e-8,), order=2)
    np.testing.assert_allclose(1.0, jax.grad(jax.nn.softplus)(INF))
    for x in (1e-8, 0.0, 2.5, -30.0):
        np.testing.assert_allclose(
            jax.grad(softplus)(x), jax.grad(jax.nn.softplus)(x), rtol=1e-6
        )
