"""Every derivative the library returns, per element, in ulps of the exact
value wherever it is a normal number.

float32 (and float32 math for bfloat16/float16 data) against float64
formulas that have no cancellation, evaluated on the rounded inputs; float64
against mpmath at 150 digits. Bands: t = beta * x over [-120, 120], and the
tails near t = +-88 where s(t) s(-t) leaves float32's normal range while a
scaled product does not.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from helpers import seed_of, ulp_error

from jax_softplus import softplus, softplus_backward
from tools import _references as references

BETAS = (1.0, 1.7, -2.5, 0.1)
BOUND = 4.0  # ulps, float32 and float64 alike
VALUE_BOUND = 2.5


_slope = references.slope_ref
_dsp_dbeta = references.dsoftplus_dbeta_ref


REFERENCES = {
    # quantity: (reference(x, b), how the library computes it per element)
    "d softplus/d beta": (
        _dsp_dbeta,
        jax.vmap(jax.grad(softplus, argnums=1), (0, None)),
    ),
    "d2 softplus/dx2": (
        lambda x, b: b * _slope(b * x),
        jax.vmap(jax.hessian(softplus), (0, None)),
    ),
    "d2 softplus/dx dbeta": (
        lambda x, b: x * _slope(b * x),
        jax.vmap(jax.grad(jax.grad(softplus), argnums=1), (0, None)),
    ),
    "d softplus_backward/d src": (
        lambda x, b: b * _slope(b * x),
        jax.vmap(
            jax.grad(lambda x, b: softplus_backward(x, jnp.ones_like(x), b)),
            (0, None),
        ),
    ),
    "d softplus_backward/d beta": (
        lambda x, b: x * _slope(b * x),
        jax.vmap(
            jax.grad(lambda x, b: softplus_backward(x, jnp.ones_like(x), b), 1),
            (0, None),
        ),
    ),
    "d softplus_backward/d beta, forward mode": (
        lambda x, b: x * _slope(b * x),
        lambda x, b: jax.jvp(
            lambda b: softplus_backward(x, jnp.ones_like(x), b),
            (b,),
            (jnp.ones_like(b),),
        )[1],
    ),
}


def _ts(seed):
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [
            rng.uniform(-120, 120, 3000),
            rng.uniform(-92, -84, 1000),
            rng.uniform(84, 92, 1000),
        ]
    )


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("quantity", list(REFERENCES))
def test_float32_derivatives(quantity, beta):
    ref_fn, ours = REFERENCES[quantity]
    x = (_ts(1) / beta).astype(np.float32)
    b = np.float32(beta)
    got = ours(jnp.asarray(x), jnp.float32(b))
    ref = ref_fn(x.astype(np.float64), np.float64(b))
    err = ulp_error(got, ref, jnp.float32)
    assert np.isfinite(err).any()
    assert err.max() <= BOUND, (float(err.max()), float(b * x[np.argmax(err)]))


@pytest.mark.parametrize("dtype", (jnp.bfloat16, jnp.float16), ids=("bf16", "f16"))
@pytest.mark.parametrize("beta", BETAS)
def test_half_data_beta_gradient_is_float32_accurate(dtype, beta):
    # beta is float32 for half-precision data, and so is its gradient: the
    # per-element derivative is computed in float32 from the rounded x.
    x = jnp.asarray((_ts(2) / beta).astype(np.float32), dtype)
    got = REFERENCES["d softplus/d beta"][1](x, jnp.float32(beta))
    assert got.dtype == jnp.float32
    ref = _dsp_dbeta(np.asarray(x, np.float64), np.float64(np.float32(beta)))
    assert ulp_error(got, ref, jnp.float32).max() <= BOUND


# float64: mpmath.
mpmath.mp.dps = 150


def _mp_sig(t):
    return 1 / (1 + mpmath.exp(-t))


MP_REFERENCES = {
    "softplus": lambda x, b: mpmath.log1p(mpmath.exp(b * x)) / b,
    "softplus_backward": lambda x, b: _mp_sig(b * x),
    "d softplus/d beta": lambda x, b: (
        -(abs(b * x) * _mp_sig(-abs(b * x)) + mpmath.log1p(mpmath.exp(-abs(b * x))))
        / b**2
    ),
    "d2 softplus/dx2": lambda x, b: b * _mp_sig(b * x) * _mp_sig(-b * x),
    "d softplus_backward/d beta": lambda x, b: x * _mp_sig(b * x) * _mp_sig(-b * x),
}


@functools.cache
def _ours64():
    def backward(x, b):
        return softplus_backward(x, jnp.ones_like(x), b)

    return {
        "softplus": softplus,
        "softplus_backward": backward,
        "d softplus/d beta": jax.vmap(jax.grad(softplus, argnums=1), (0, None)),
        "d2 softplus/dx2": jax.vmap(jax.hessian(softplus), (0, None)),
        "d softplus_backward/d beta": jax.vmap(jax.grad(backward, 1), (0, None)),
    }


# float64 holds to the level its kernels reach on these samples (0.552 ulp
# at worst), not only to the docs' 1 ulp (the accuracy tool's maxima over
# all its points: values 0.731, derivatives 0.791).
LEVEL64 = 0.65


@pytest.mark.slow
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("quantity", list(MP_REFERENCES))
def test_float64_against_mpmath(x64, quantity, beta):
    rng = np.random.default_rng(3)
    t = np.concatenate([rng.uniform(-120, 120, 150), rng.uniform(-40, 40, 50)])
    x = t / beta
    got = np.asarray(_ours64()[quantity](jnp.asarray(x), jnp.float64(beta)))
    exact = [MP_REFERENCES[quantity](mpmath.mpf(v), mpmath.mpf(beta)) for v in x]
    err = _ulps64(got, exact)
    assert err.max() <= LEVEL64, (float(err.max()), float(t[np.argmax(err)]))


def _ulps64(got, exact):
    """|got - exact| in float64 ulps of the mpmath value (not of its
    rounding, which would make every error a whole number of ulps)."""
    out = []
    for g, e in zip(np.ravel(got), exact, strict=True):
        unit = 2.0 ** (np.frexp(float(e))[1] - 53)
        out.append(float(abs(mpmath.mpf(float(g)) - e) / unit))
    return np.array(out)


@pytest.mark.parametrize("beta", (1.0, -2.5, 7.3, 1e-5, 3e5))
def test_float64_beta_derivative_on_both_sides_of_its_switch(x64, beta):
    # d softplus / d beta switches at |t| = 38 from a e + log1p(e) (1 + e)
    # to (a + 1) e, which is within half an ulp only above it: moved to 34,
    # the band below reads 0.63-0.73 ulp; it holds 0.55.
    rng = np.random.default_rng(seed_of("switch 38", beta))
    t = rng.uniform(34, 42, 800) * rng.choice([-1, 1], 800)
    x = t / beta
    got = np.asarray(_ours64()["d softplus/d beta"](jnp.asarray(x), jnp.float64(beta)))
    ref = MP_REFERENCES["d softplus/d beta"]
    exact = [ref(mpmath.mpf(v), mpmath.mpf(beta)) for v in x]
    assert _ulps64(got, exact).max() <= 0.6


def test_float64_backward_deep_tail_with_a_huge_diff_dst(x64):
    # Below t = -700 exp(-|t|) leaves float64's normal range while
    # dd * sigmoid(t) need not: formed as dd exp(-r) 2**-k, within 1.5 ulp
    # (two half-exponent products read 3 ulp here).
    rng = np.random.default_rng(4)
    t = rng.uniform(-1000.0, -700.0, 1000)
    # A dd that lifts the product to about 2**-5, up to float64's maximum.
    lift = np.minimum((-t * 1.4427).astype(int) - 5, 1020)
    dd = np.ldexp(rng.uniform(0.5, 1.0, 1000), lift)
    got = np.asarray(softplus_backward(jnp.asarray(t), jnp.asarray(dd), 1.0))
    ref = np.array(
        [
            float(mpmath.mpf(d) * _mp_sig(mpmath.mpf(v)))
            for d, v in zip(dd, t, strict=True)
        ]
    )
    err = ulp_error(got, ref, jnp.float64)
    assert err.size > 900 and err.max() <= 2.0, float(err.max())
