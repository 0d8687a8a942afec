"""An element masked with finfo(dtype).min or .max (JAX's attention-mask
idiom): every derivative of every order stays finite and exact beside it,
in every dtype and every platform's lowering (`lowered_as`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import dtype_id

from jax_softplus import softplus, softplus_backward
from jax_softplus.testing import lowered_as
from tools import _references as references
from tools import _routes as routes

DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16, jnp.float64)
# Relative error allowed against the exact value of the unmasked element:
# float32 and float64 within their bounds (orders 1-3), the half types as
# their float32 value rounded once.
RTOL = {
    np.dtype(jnp.float32): 4e-7,
    np.dtype(jnp.bfloat16): 8e-3,
    np.dtype(jnp.float16): 1e-3,
    np.dtype(jnp.float64): 1e-15,
}


def _exact(fun, pqr, x, beta, dd=1.0):
    value, _ = references.mp_derivative(fun, pqr, float(x), float(beta), dd)
    return float(value)


@pytest.mark.slow
@pytest.mark.parametrize("platform", ("cpu", "cuda", "tpu"))
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_a_learnable_beta_beside_a_masked_element(x64, dtype, platform):
    # The case: grad in beta of softplus(x, b).sum() was NaN at
    # beta 1 and 2 where beta * x overflows (the product's error was NaN).
    info = jnp.finfo(dtype)
    x = jnp.array([0.5, info.min, info.max], dtype)

    def loss(c):
        return softplus(x, c).sum()

    def loss_bwd(c):
        return softplus_backward(x, jnp.ones_like(x), c).sum()

    @jax.jit
    def derivatives(c):
        return {
            "d/dbeta": jax.grad(loss)(c),
            "d/dbeta of the backward op": jax.grad(loss_bwd)(c),
            "d2/dbeta2": jax.grad(jax.grad(loss))(c),
            "d3/dbeta3": jax.grad(jax.grad(jax.grad(loss)))(c),
            "hessian": jax.hessian(loss)(c),
            "per element": jax.vmap(jax.grad(softplus, 1), (0, None))(x, c),
        }

    for beta in (1.0, 2.0, -0.5):
        with lowered_as(platform):
            got = derivatives(jnp.asarray(beta, dtype))
        b = float(jnp.asarray(beta, dtype))
        want = {
            "d/dbeta": _exact("softplus", (0, 1, 0), 0.5, b),
            "d/dbeta of the backward op": _exact("backward", (0, 1, 0), 0.5, b),
            "d2/dbeta2": _exact("softplus", (0, 2, 0), 0.5, b),
            "d3/dbeta3": _exact("softplus", (0, 3, 0), 0.5, b),
        }
        for name, value in want.items():
            assert np.isfinite(float(got[name])), (name, beta)
            np.testing.assert_allclose(
                float(got[name]), value, rtol=RTOL[np.dtype(dtype)], err_msg=name
            )
        assert float(got["hessian"]) == float(got["d2/dbeta2"])
        # The masked elements' own d/dbeta is 0 (their exact value is below
        # every dtype's range).
        per_element = np.asarray(got["per element"][1:], np.float64)
        np.testing.assert_array_equal(per_element, 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("platform", ("cpu", "cuda", "tpu"))
@pytest.mark.parametrize("dtype", (jnp.float32, jnp.float64), ids=dtype_id)
def test_every_derivative_at_a_masked_element_is_exact(x64, dtype, platform):
    # Orders 1 and 2 of both ops in every argument, at elements whose
    # beta * src overflows or nearly does: each is its exact value (0 where
    # that is below the normal range), never NaN.
    info = jnp.finfo(dtype)
    quantities = tuple(
        (f"{fun} d{p}{q}{r}", fun, (p, q, r))
        for fun in ("softplus", "backward")
        for p in range(3)
        for q in range(3)
        for r in range(2 if fun == "backward" else 1)
        if 1 <= p + q + r <= 2
    )
    x = np.array([info.min, info.max, info.min / 4, info.max / 2], dtype)
    dd = np.array([1.5, -2.0, 0.75, 3.0], dtype)
    for beta in (1.0, -2.0, 1e-3):
        with lowered_as(platform):
            got = routes.compiled("grad", quantities)(
                jnp.asarray(x), jnp.asarray(beta, dtype), jnp.asarray(dd)
            )
        for name, fun, pqr in quantities:
            value = np.asarray(got[name], np.float64)
            assert np.all(np.isfinite(value)), (name, beta, value)
            for k in range(x.size):
                exact = _exact(fun, pqr, x[k], beta, float(dd[k]))
                if abs(exact) < info.tiny:
                    assert value[k] == 0, (name, beta, x[k], value[k], exact)
                else:
                    np.testing.assert_allclose(
                        value[k], exact, rtol=3 * float(info.eps), err_msg=name
                    )
