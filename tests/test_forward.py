"""softplus numerics against a float64 reference, and edge cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    DTYPES,
    EXTREME_BETAS,
    ULP_BOUND,
    dtype_id,
    f64,
    max_ulp,
    random_src,
    softplus_ref,
)

from jax_softplus import softplus

N = 20_000


@pytest.mark.parametrize("beta", (1.0, -1.0, 0.5))
def test_float32_log1p_range_dense(beta):
    # |t| < 4 is where the log1p polynomial carries the result, densely and
    # around its branch at t = -ln 2 and at 0. With an exact product
    # (beta a power of two) the error is the kernel's own: 1.40 ulp measured.
    ln2 = np.log(2.0)
    t = np.concatenate(
        [np.linspace(-4.0, 4.0, 1 << 18)]
        + [np.linspace(c - 1e-3, c + 1e-3, 1 << 14) for c in (-ln2, 0.0, ln2)]
    )
    x = jnp.asarray((t / beta).astype(np.float32))
    assert max_ulp(softplus(x, beta), softplus_ref(x, beta), jnp.float32) <= 1.5


@pytest.mark.parametrize("beta", (1.0, 0.1, 0.01, -0.01))
def test_float32_far_negative_tail_keeps_relative_accuracy(beta):
    # softplus ~ exp(beta x) / beta: normal for small |beta| even where
    # exp(beta x) itself is below float32's normal range.
    rng = np.random.default_rng(2)
    x = random_src(rng, N, beta, jnp.float32, (-150.0, -60.0))
    ref = softplus_ref(x, beta)
    assert np.any(np.abs(ref) >= np.finfo(np.float32).tiny)
    assert max_ulp(softplus(x, beta), ref, jnp.float32) <= 2.5


def test_no_overflow_for_large_arguments():
    x = jnp.array([-1e30, -1e4, 89.0, 1e4, 1e30, 3e38])
    got = np.asarray(softplus(x))
    np.testing.assert_array_equal(got, np.float32([0.0, 0.0, 89.0, 1e4, 1e30, 3e38]))
    got = np.array(softplus(x, -1.0))
    # softplus(89, -1) = -exp(-89), a subnormal: GPUs keep it, XLA:CPU
    # flushes it to zero.
    tail = np.float32(-np.exp(-89.0))
    assert got[2] == 0.0 or abs(float(got[2]) - float(tail)) <= 2.0**-149
    got[2] = 0.0
    np.testing.assert_array_equal(got, np.float32([-1e30, -1e4, 0.0, 0.0, 0.0, 0.0]))


def test_specials():
    x = jnp.array([jnp.nan, jnp.inf, -jnp.inf, 0.0])
    got = np.asarray(softplus(x))
    assert np.isnan(got[0])
    np.testing.assert_array_equal(
        got[1:], [np.inf, 0.0, np.log(2.0).astype(np.float32)]
    )


@pytest.mark.parametrize("shape", [(), (0,), (2, 0), (5,), (2, 3, 4)])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_shape_and_dtype_preserved(shape, dtype):
    x = jnp.zeros(shape, dtype)
    got = softplus(x, 2.0)
    assert got.shape == shape and got.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("beta", (1.7, 1.0, -0.25, 0.1, 7.3, 2.0**70, 3e38, -1e-30))
def test_jit_matches_eager_bitwise(dtype, beta):
    # Eagerly, a concrete beta lets the kernel skip steps (the error-free
    # product for a power of two, the rebalancing for a moderate beta), and
    # the kernel runs as the library's own jit (512-bit CPU vectors, no
    # custom_vjp); under a user's jit, beta is traced and nothing is skipped.
    # Same bits.
    x = random_src(np.random.default_rng(1), 4096, beta, dtype, (-100, 100))
    eager = softplus(x, beta)
    jitted = jax.jit(softplus)(x, jnp.float32(beta))
    # A Python-float beta inside a jit is a compile-time constant, and XLA
    # would turn the division by it into a multiplication by its rounded
    # reciprocal (other bits, 2.16 instead of 1.69 ulp at beta = 0.1).
    constant = jax.jit(lambda x: softplus(x, beta))(x)
    for other in (jitted, constant):
        np.testing.assert_array_equal(
            np.asarray(eager).view(np.uint8), np.asarray(other).view(np.uint8)
        )


def test_float64_under_x64(x64):
    x = jnp.linspace(-50.0, 50.0, 1001)
    assert x.dtype == jnp.float64
    got = softplus(x, 1.7)
    assert got.dtype == jnp.float64
    ref = np.logaddexp(0.0, 1.7 * f64(x)) / 1.7
    np.testing.assert_allclose(got, ref, rtol=1e-14)


@pytest.mark.parametrize("dtype", (jnp.float32, jnp.bfloat16))
@pytest.mark.parametrize("beta", EXTREME_BETAS)
def test_extreme_beta(dtype, beta):
    # A t of order 1 then needs a tiny or a huge x. Nothing that falls below
    # the normal range on the way may be flushed, and nothing may overflow:
    # with beta = 2**-70 the far tail used to come out as inf, with
    # beta = 3e38 the log1p term next to a tiny x was flushed to 0.
    rng = np.random.default_rng(4)
    for t_range in ((-40.0, 40.0), (-150.0, -60.0)):
        x = random_src(rng, N, beta, dtype, t_range)
        finite = np.isfinite(f64(x)) & (np.abs(f64(x)) >= float(jnp.finfo(dtype).tiny))
        x = x[jnp.asarray(finite)]
        got, ref = softplus(x, beta), softplus_ref(x, beta)
        with np.errstate(over="ignore"):  # ref rounded: beyond max is inf
            np.testing.assert_array_equal(
                np.isinf(f64(got)), np.isinf(ref.astype(dtype))
            )
        assert max_ulp(got, ref, dtype) <= ULP_BOUND[np.dtype(dtype)]


@pytest.mark.parametrize("beta", (2.5, -1.5, 1.7, 0.1, 3e38, 1e-35))
def test_the_correction_survives_a_constant_beta_in_a_users_jit(beta):
    # As for softplus_backward (tests/test_backward.py): where t = beta * x
    # is rounded, log1p(exp(t)) is |t| / 2 ulp off without the error-free
    # product's correction, whose FMAs (on CPUs that have them) must survive
    # a constant beta with few bits folded into the user's computation.
    rng = np.random.default_rng(17)
    x = random_src(rng, 1 << 14, beta, jnp.float32, (-85.0, -20.0))
    ref = softplus_ref(x, beta)
    constant = jax.jit(lambda x: softplus(x, beta))(x)
    traced = jax.jit(softplus)(x, jnp.float32(beta))
    for got in (constant, traced, softplus(x, beta)):
        assert max_ulp(got, ref, jnp.float32) <= ULP_BOUND[np.dtype(jnp.float32)]
