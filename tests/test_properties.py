"""Property-based tests (hypothesis), bounded so that CI stays fast."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    DTYPES,
    ULP_BOUND,
    backward_ref,
    dtype_id,
    f64,
    softplus_ref,
    ulp_error,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jax_softplus import softplus, softplus_backward, softplus_backward_inplace

# The profile's examples (few by default, more in CI: tests/conftest.py),
# derandomized, so a failure replays.
SETTINGS = settings()

F32_MAX = float(np.finfo(np.float32).max)
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 88.7, -88.7]
SPECIALS += [1e-30, -1e-30, F32_MAX, -F32_MAX]

dtypes = st.sampled_from(DTYPES)
# A fixed menu of shapes (0-d and zero-size included) keeps the number of
# distinct compilations, and so the run time, bounded.
shapes = st.sampled_from([(), (0,), (1,), (7,), (2, 3), (2, 0, 3), (3, 1, 4)])
values = st.one_of(
    st.sampled_from(SPECIALS),
    st.floats(-100, 100, width=32),
    st.floats(width=32, allow_nan=True, allow_infinity=True),
)
wide = st.one_of(
    st.floats(width=32, allow_nan=False, allow_infinity=False),
    st.floats(-1e6, 1e6, width=32),
    st.sampled_from([0.0, 1.0, -1.0, np.inf, np.nan, F32_MAX]),
)
betas = st.one_of(
    st.floats(-50, 50, width=32, allow_subnormal=False),
    st.sampled_from([0.0, 1e-20, -1e-20, 1e20, -1e20, 1.0, 1.7, 3e38, -1e-35]),
)


def _array(draw, shape, dtype, elements):
    data = draw(hnp.arrays(np.float32, shape, elements=elements))
    return jnp.asarray(data).astype(dtype)


@st.composite
def backward_case(draw):
    dtype, shape = draw(dtypes), draw(shapes)
    return (
        _array(draw, shape, dtype, values),
        _array(draw, shape, dtype, wide),
        draw(betas),
    )


def _assert_same_bits(a, b):
    """Bitwise equality, with every NaN equal to every other (a NaN's sign
    and payload depend on the instruction that made it)."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    nan = np.isnan(f64(a))
    np.testing.assert_array_equal(nan, np.isnan(f64(b)))
    np.testing.assert_array_equal(a[~nan].view(np.uint8), b[~nan].view(np.uint8))


def _as_read(x):
    """x as the kernel reads it: XLA:CPU treats float32 subnormals as 0,
    which matters only with an extreme beta, where a subnormal src gives
    t ~ 1. (float16 is widened first: none of its values is subnormal in
    float32; bfloat16 subnormals are.)"""
    if jax.default_backend() != "cpu":
        return x
    tiny = float(jnp.finfo(jnp.float32).tiny)
    return jnp.where(jnp.abs(x.astype(jnp.float32)) < tiny, jnp.zeros_like(x), x)


def _assert_close_to_reference(got, ref, dtype):
    """Within ULP_BOUND where the reference is normal; below the normal
    range (where the CPU flushes to zero) within the smallest normal."""
    g = f64(got)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(ref))
    inf = np.isinf(ref)
    np.testing.assert_array_equal(g[inf], ref[inf])
    err = ulp_error(g, ref, dtype)
    assert err.size == 0 or err.max() <= ULP_BOUND[np.dtype(dtype)], err.max()
    tiny = float(jnp.finfo(dtype).tiny)
    low = np.abs(ref) < tiny
    np.testing.assert_array_less(np.abs(g[low] - ref[low]), tiny)


@pytest.mark.slow
@SETTINGS
@given(backward_case())
def test_backward_matches_reference_where_it_is_defined(case):
    src, dd, beta = case
    got = softplus_backward(src, dd, beta)
    assert got.shape == src.shape and got.dtype == src.dtype
    ref = backward_ref(_as_read(src), _as_read(dd), beta)
    _assert_close_to_reference(got, ref, src.dtype)


@st.composite
def deep_tail_case(draw):
    # beta * src far below -87, diff_dst huge: the product dd * sigmoid(t)
    # is near or below the smallest normal.
    dtype = draw(st.sampled_from([jnp.float32, jnp.bfloat16]))
    beta = draw(st.sampled_from([1.0, 1.7, -0.37, 1e-3, 40.0]))
    t = draw(hnp.arrays(np.float64, (16,), elements=st.floats(-400, -170)))
    mag = draw(hnp.arrays(np.float64, (16,), elements=st.floats(25, 38.5)))
    sign = draw(hnp.arrays(np.float64, (16,), elements=st.sampled_from([-1.0, 1.0])))
    dd = np.minimum(10.0**mag, F32_MAX) * sign
    src = jnp.asarray((t / beta).astype(np.float32), dtype)
    return src, jnp.asarray(dd.astype(np.float32), dtype), beta


@SETTINGS
@given(deep_tail_case())
def test_backward_deep_tail_with_huge_diff_dst(case):
    src, dd, beta = case
    got = softplus_backward(src, dd, beta)
    ref = backward_ref(_as_read(src), _as_read(dd), beta)
    _assert_close_to_reference(got, ref, src.dtype)


@pytest.mark.slow
@SETTINGS
@given(backward_case())
def test_eager_jit_vmap_inplace_are_bitwise_identical(case):
    src, dd, beta = case
    eager = softplus_backward(src, dd, beta)
    jitted = jax.jit(softplus_backward)(src, dd, beta)
    flat_src, flat_dd = src.reshape(-1), dd.reshape(-1)
    mapped = jax.vmap(softplus_backward, (0, 0, None))(flat_src, flat_dd, beta)
    inplace = softplus_backward_inplace(src, jnp.array(dd, copy=True), beta)
    for other in (jitted, mapped, inplace):
        _assert_same_bits(eager, other)


@st.composite
def forward_case(draw):
    dtype, shape = draw(dtypes), draw(shapes)
    beta = draw(betas.filter(lambda b: b != 0))
    return _array(draw, shape, dtype, values), beta


@pytest.mark.slow
@SETTINGS
@given(forward_case())
def test_forward_matches_reference_where_it_is_defined(case):
    x, beta = case
    got = softplus(x, beta)
    assert got.shape == x.shape and got.dtype == x.dtype
    _assert_close_to_reference(got, softplus_ref(_as_read(x), beta), x.dtype)


def _ulp(x, dtype):
    info = jnp.finfo(dtype)
    mag = np.maximum(np.abs(x), float(info.tiny))
    return np.ldexp(1.0, np.frexp(mag)[1] - 1 - info.nmant)


@SETTINGS
@given(forward_case())
def test_softplus_reflection_identity(case):
    # softplus(x) - softplus(-x) == x, within the rounding of both terms.
    x, beta = case
    # Subnormal x is left out: the CPU flushes it to 0 inside the kernel.
    mag = np.abs(f64(x))
    finite = (mag < 1e30) & ((mag >= jnp.finfo(x.dtype).tiny) | (mag == 0))
    x = jnp.where(jnp.asarray(finite), x, jnp.zeros((), x.dtype))
    a, b = f64(softplus(x, beta)), f64(softplus(-x, beta))
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return  # |beta x| overflowed float32: nothing to compare
    tol = 4 * np.maximum(_ulp(a, x.dtype), _ulp(b, x.dtype)) + _ulp(f64(x), x.dtype)
    assert np.all(np.abs((a - b) - f64(x)) <= tol)


@SETTINGS
@given(backward_case())
def test_sigmoid_symmetry_identity(case):
    # sigmoid(t) + sigmoid(-t) == 1.
    src, _, beta = case
    with np.errstate(invalid="ignore"):
        undefined = np.isnan(np.float32(beta) * f64(src))  # NaN, or 0 * inf
    src = jnp.where(jnp.asarray(undefined), jnp.zeros((), src.dtype), src)
    ones = jnp.ones_like(src)
    total = f64(softplus_backward(src, ones, beta)) + f64(
        softplus_backward(-src, ones, beta)
    )
    tol = 3 * float(jnp.finfo(src.dtype).eps)
    assert np.all(np.abs(total - 1.0) <= tol), total


SWEEP_BETAS = (1.0, 1.7, -0.37, 40.0, 0.0, 1e-20, 1e20, 2.0**-100, 3e38, -1e-35)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_random_bit_patterns_against_reference(dtype):
    # Every float32 bit pattern is equally likely (NaNs, infinities,
    # subnormals, huge and tiny values), rounded to dtype; a bounded version
    # of the sweep that found the extreme-beta bugs.
    rng = np.random.default_rng(17)
    n = 1 << 14
    bits = rng.integers(0, 1 << 32, (2, n), dtype=np.uint64).astype(np.uint32)
    src, dd = (jnp.asarray(b.view(np.float32)).astype(dtype) for b in bits)
    for beta in SWEEP_BETAS:
        got = softplus_backward(src, dd, beta)
        ref = backward_ref(_as_read(src), _as_read(dd), beta)
        _assert_close_to_reference(got, ref, dtype)
        if beta != 0:
            ref = softplus_ref(_as_read(src), beta)
            _assert_close_to_reference(softplus(src, beta), ref, dtype)
