"""softplus_backward numerics against a float64 reference, and edge cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    DTYPES,
    EXTREME_BETAS,
    ULP_BOUND,
    backward_ref,
    dtype_id,
    f64,
    max_ulp,
    random_dd,
    random_src,
    seed_of,
)

from jax_softplus import (
    _math,
    softplus_backward,
    softplus_backward_inplace,
)
from tools._references import LOWEST_ULPS, normal_exact, sigmoid_ref

N = 20_000


@pytest.mark.parametrize("beta", (1.0, 1.7, -2.5, 0.1))
def test_float32_tail_where_sigmoid_underflows(beta):
    # beta * src in [-103, -87.5]: sigmoid is below float32's normal range,
    # diff_dst * sigmoid is not.
    rng = np.random.default_rng(7)
    src = random_src(rng, N, beta, jnp.float32, (-103.0, -87.5))
    dd = jnp.asarray(rng.uniform(1.0, 1e6, N).astype(np.float32))
    ref = backward_ref(src, dd, beta)
    assert np.mean(np.abs(ref) >= np.finfo(np.float32).tiny) > 0.5
    assert max_ulp(softplus_backward(src, dd, beta), ref, jnp.float32) <= 2.5


@pytest.mark.parametrize("dtype", (jnp.float32, jnp.bfloat16))
def test_beyond_the_tail_with_a_huge_diff_dst(dtype):
    # Below t = -176.06 the exact result is under the smallest normal for
    # every finite diff_dst: 0 here (the CPU flushes subnormals), not the
    # value at a clamped t. Just above it, normal results stay accurate.
    t = np.array([-175.6, -176.0, -176.1, -180.0, -300.0, -1e30], np.float32)
    dd = jnp.full(t.shape, 3.3e38, dtype)
    for beta in (1.0, 1.7, -0.37):
        src = jnp.asarray(t / np.float32(beta), dtype)
        got = np.asarray(softplus_backward(src, dd, beta), np.float64)
        ref = backward_ref(src, dd, beta)
        tiny = float(jnp.finfo(dtype).tiny)
        low = np.abs(ref) < tiny
        assert low[-3:].all() and np.all(np.abs(got[low]) < tiny), (beta, got)
        assert max_ulp(got, ref, dtype) <= ULP_BOUND[np.dtype(dtype)], (beta, got)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_results_just_above_the_smallest_normal(dtype):
    # diff_dst chosen to put the exact result within 16 ulps above the
    # smallest normal, where the CPU's flushing meets the kernel's error:
    # from LOWEST_ULPS above it every result is within the bound; nearer,
    # a computed value a hair below the threshold is flushed to 0 (the
    # float32 and bfloat16 kernels do for a few exact values in a million
    # within 5 ulps above it). HIGHEST never flushes one.
    info = jnp.finfo(dtype)
    tiny, eps, bound = float(info.tiny), float(info.eps), ULP_BOUND[np.dtype(dtype)]
    # Where the exact value is this small, diff_dst stays finite.
    t_low = max(-100.0, float(np.log(tiny) - np.log(float(info.max))) + 1)
    n = 1 << 15
    rng = np.random.default_rng(seed_of("smallest normal", np.dtype(dtype).name))
    for beta in (1.7, 0.1, 7.3, -2.5):
        src = jnp.asarray((rng.uniform(t_low, 5.0, n) / beta).astype(np.float32), dtype)
        sig = sigmoid_ref(np.float64(np.float32(beta)) * f64(src))
        want = tiny * (1 + rng.uniform(0, 2 * LOWEST_ULPS, n) * eps)
        dd = jnp.asarray((want / sig).astype(np.float32), dtype)
        ref = backward_ref(src, dd, beta)
        got = f64(softplus_backward(src, dd, beta))
        counted = normal_exact(ref, dtype)
        assert counted.mean() > 0.3, beta
        assert max_ulp(got, ref, dtype) <= bound, beta
        near = (np.abs(ref) >= tiny) & ~counted
        err = np.abs(got - ref)[near] / (tiny * eps)
        assert near.mean() > 0.2 and np.all((got[near] == 0) | (err <= bound)), beta
        # What the docs say of them: only a tenth of an ulp above it, or less.
        flushed = np.abs(ref[near & (got == 0)])
        assert np.all(flushed < tiny * (1 + 0.1 * eps)), (beta, flushed)
        best = softplus_backward(src, dd, beta, accuracy=jax.lax.AccuracyMode.HIGHEST)
        normal = np.abs(ref) >= tiny
        assert np.all(np.abs(f64(best)[normal]) >= tiny), beta


@pytest.mark.slow
@pytest.mark.parametrize("dtype", (jnp.float32, jnp.bfloat16), ids=dtype_id)
def test_the_band_where_only_the_largest_diff_dst_keeps_a_normal_result(dtype):
    # t in [-177, -175]: exp(-t) is above 2**253, so 2**-k needs a third
    # factor, only a diff_dst above 2**127 keeps the result normal, and
    # below t = -176.06 none does. Eager and traced beta (and a concrete
    # tiny one, rescaled at trace time; a huge one, whose k rounds to halves).
    # Held to the level the kernels reach there (1.76 and 0.50 ulp at worst
    # over 2.75 million inputs at seven betas, eager and traced), under the
    # bounds of 2.5 and 1.
    info = jnp.finfo(dtype)
    tiny = float(info.tiny)
    bound = {np.dtype(jnp.float32): 2.0, np.dtype(jnp.bfloat16): 0.55}[np.dtype(dtype)]
    assert bound < ULP_BOUND[np.dtype(dtype)]
    rng = np.random.default_rng(seed_of("third factor band", np.dtype(dtype).name))
    n = 1 << 14
    for beta in (1.0, 1.7, -2.5, 2.0**-110, -3e38):
        t = rng.uniform(-177.0, -175.0, n)
        src = jnp.asarray((t / beta).astype(np.float32), dtype)
        mag = np.minimum(rng.uniform(2.0**127, 2.0**128, n), float(info.max))
        dd = jnp.asarray((mag * rng.choice([-1.0, 1.0], n)).astype(np.float32), dtype)
        ref = backward_ref(src, dd, beta)
        assert normal_exact(ref, dtype).mean() > 0.05, beta
        traced = jax.jit(softplus_backward)(src, dd, jnp.asarray(beta, jnp.float32))
        for got in (softplus_backward(src, dd, beta), traced):
            assert max_ulp(got, ref, dtype) <= bound, beta
            below = np.abs(ref) < tiny
            assert below.mean() > 0.3 and np.all(np.abs(f64(got)[below]) < tiny), beta
        # An infinite diff_dst times the positive sigmoid stays infinite; at
        # src = -inf * sign(beta) sigmoid is exactly 0, and inf * 0 is NaN.
        inf = np.float32(np.inf)
        edge_src = jnp.array([src[0], src[1], -inf * np.sign(beta)], dtype)
        edge = softplus_backward(edge_src, jnp.array([inf, -inf, inf], dtype), beta)
        np.testing.assert_array_equal(f64(edge), [np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_largest_finite_diff_dst_never_overflows(dtype):
    # diff_dst * sigmoid <= |diff_dst|: no intermediate may overflow for the
    # largest finite diff_dst, at any t. (A half-precision reduction with
    # exp(-t) = 2**k * q, q < 1, once divided diff_dst by a denominator
    # below 1 and returned inf.)
    t = np.linspace(-100.0, 100.0, 40_001)
    dd = jnp.full(t.shape, jnp.finfo(dtype).max, dtype)
    for beta in (1.0, 1.7, -0.37):
        src = jnp.asarray((t / beta).astype(np.float32), dtype)
        got = softplus_backward(src, dd, beta)
        assert np.isfinite(f64(got)).all(), beta
        err = max_ulp(got, backward_ref(src, dd, beta), dtype)
        assert err <= ULP_BOUND[np.dtype(dtype)], (beta, err)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_infinities(dtype):
    # sigmoid(-inf) is exactly 0: inf * 0 is NaN. For a finite src whose
    # sigmoid merely underflows, inf * sigmoid stays inf. beta = 0 with an
    # infinite src is 0 * inf: NaN.
    src = jnp.array([-np.inf, -np.inf, -6e4, -200.0, np.inf], dtype)
    dd = jnp.array([np.inf, 5.0, -np.inf, np.inf, np.inf], dtype)
    for beta, sign in ((1.0, 1), (-2.0, -1)):
        got = f64(softplus_backward(sign * src, dd, beta))
        assert np.isnan(got[0]) and got[1] == 0.0, got
        np.testing.assert_array_equal(got[2:], [-np.inf, np.inf, np.inf])
    got = f64(softplus_backward(src, jnp.zeros(5, dtype), 0.0))
    assert np.isnan(got[[0, 1, 4]]).all() and not np.isnan(got[2:4]).any()


def test_issue_example_in_the_tail():
    got = softplus_backward(jnp.float32(-90.0), jnp.float32(1000.0))
    ref = 1000.0 * np.exp(-90.0) / (1 + np.exp(-90.0))
    np.testing.assert_allclose(float(got), ref, rtol=3e-7)
    assert float(got) > 8e-37


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_beta_zero_gives_half(dtype):
    dd = random_dd(np.random.default_rng(0), 64, dtype)
    big = float(jnp.finfo(dtype).max) / 2
    src = jnp.linspace(-big, big, 64).astype(dtype)
    got = softplus_backward(src, dd, 0.0)
    np.testing.assert_array_equal(f64(got), f64(dd) * 0.5)


def test_nan_propagates_and_sigmoid_limits():
    src = jnp.array([jnp.nan, 1.0, jnp.inf, -jnp.inf, jnp.inf, -jnp.inf])
    dd = jnp.array([1.0, jnp.nan, 2.0, 2.0, jnp.inf, jnp.inf])
    got = np.asarray(softplus_backward(src, dd))
    np.testing.assert_array_equal(got[:4], [np.nan, np.nan, 2.0, 0.0])
    assert got[4] == np.inf  # inf * sigmoid(inf) = inf * 1
    assert np.isnan(got[5])  # inf * sigmoid(-inf) = inf * 0


@pytest.mark.parametrize("beta", (1.0, -1.0, 1e-20, 1e20))
def test_huge_arguments_never_nan_or_overflow(beta):
    with np.errstate(over="ignore"):
        src = np.float32([-1e30, -1e10, 1e10, 1e30]) / np.float32(beta)
    src = jnp.asarray(np.where(np.isfinite(src), src, 0.0))
    dd = jnp.full(4, 3.0)
    got = np.asarray(softplus_backward(src, dd, beta))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, backward_ref(src, dd, beta), rtol=1e-6, atol=0)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (1,), (2, 3, 4)])
def test_shapes(shape):
    src = jnp.full(shape, 0.5)
    got = softplus_backward(src, jnp.ones(shape), 2.0)
    assert got.shape == shape and got.dtype == jnp.float32
    np.testing.assert_allclose(got, np.full(shape, 1 / (1 + np.exp(-1.0))), rtol=1e-7)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("beta", (1.0, 1.7, -2.5, 0.1, 3e38))
def test_eager_jit_vmap_inplace_bitwise_identical(dtype, beta):
    rng = np.random.default_rng(3)
    src = random_src(rng, 4096, beta, dtype, (-120.0, 120.0)).reshape(64, 64)
    dd = random_dd(rng, 4096, dtype, 1e3).reshape(64, 64)
    eager = softplus_backward(src, dd, beta)
    jitted = jax.jit(softplus_backward)(src, dd, beta)
    # A Python-float beta inside a jit is a compile-time constant for XLA.
    constant = jax.jit(lambda s, d: softplus_backward(s, d, beta))(src, dd)
    mapped = jax.vmap(softplus_backward, in_axes=(0, 0, None))(src, dd, beta)
    inplace = softplus_backward_inplace(src, jnp.array(dd, copy=True), beta)
    for other in (jitted, constant, mapped, inplace):
        np.testing.assert_array_equal(
            np.asarray(eager).view(np.uint8), np.asarray(other).view(np.uint8)
        )


@pytest.mark.parametrize(
    "beta", (1.0, 0.5, -2.0, 4.0, 0.0, 2.0**-20, 1.7, -0.3, 2.0**70, 3e38, -1e-30)
)
def test_static_hints_change_no_bits(beta):
    # A concrete beta may skip the error-free product (a power of two) or the
    # rebalancing (a moderate |beta|); a traced one skips neither. All must
    # give the same bits.
    rng = np.random.default_rng(11)
    src = random_src(rng, 1 << 16, beta or 1.0, jnp.float32, (-180.0, 180.0))
    dd = random_dd(rng, 1 << 16, jnp.float32, 1e4)
    traced = jax.jit(softplus_backward)(src, dd, jnp.float32(beta))
    for concrete in (
        softplus_backward(src, dd, beta),
        softplus_backward_inplace(src, jnp.array(dd, copy=True), beta),
    ):
        np.testing.assert_array_equal(
            np.asarray(concrete).view(np.uint32), np.asarray(traced).view(np.uint32)
        )


def test_eager_calls_take_the_static_shortcuts():
    # beta stays a traced argument of the library's own jits, but for an
    # eager call a power of two compiles without the error-free product (its
    # 0xfffff000 split mask), and a moderate beta without the rebalancing
    # (its 2**64 constant). Where the CPU has FMAs the kernel takes the exact
    # product in one FMA, with neither; a concrete |beta| < 2**-100
    # (`BetaHints.beta_tiny`) rescales the pair by 2**64 there.
    # The CPU's kernel, lowered as such on any machine (a GPU has its own).
    # A beta constant in your jit is concrete at trace time, as an eager
    # call's is: the same shortcuts.
    x = jnp.ones(256)
    exact, inexact, huge, tiny = (
        jax.jit(lambda s, d, b=b: softplus_backward(s, d, b))
        .trace(x, x)
        .lower(lowering_platforms=("cpu",))
        .as_text()
        for b in (1.0, 1.7, 3e38, 1e-35)
    )
    assert "1.84467441E+19" in tiny
    if _math.fma_contracts():
        assert "-4096" not in tiny
        for text in (exact, inexact, huge):
            assert "-4096" not in text and "1.84467441E+19" not in text
    else:
        assert "-4096" in tiny
        assert "-4096" in inexact and "-4096" not in exact
        assert "1.84467441E+19" in huge and "1.84467441E+19" not in inexact


@pytest.mark.parametrize("beta", (1e-35, -3e-31, 2e-38, 7.8e-31))
def test_a_concrete_tiny_beta_gives_a_traced_ones_bits(beta):
    # BetaHints change no bit for a finite src. A concrete |beta| < 2**-100
    # took Dekker's product, a traced one the fused kernel: 5 of 6,000
    # elements differed in the last bit at beta = 1e-35.
    rng = np.random.default_rng(seed_of("tiny beta bits", beta))
    t = rng.uniform(-190.0, 60.0, 1 << 14)
    with np.errstate(over="ignore"):
        src = (t / np.float64(np.float32(beta))).astype(np.float32)
    src = src[np.isfinite(src)]
    dd = rng.uniform(0.5, 2.0, src.size).astype(np.float32)
    concrete = softplus_backward(src, dd, beta)
    traced = jax.jit(softplus_backward)(src, dd, jnp.float32(beta))
    np.testing.assert_array_equal(
        np.asarray(concrete).view(np.uint32), np.asarray(traced).view(np.uint32)
    )
    # At an infinite src a concrete tiny beta is exact (a traced one below
    # 5.4e-37 is not: docs/sharp_bits.md).
    edge = softplus_backward(
        jnp.array([np.inf, -np.inf], jnp.float32), jnp.ones(2), beta
    )
    np.testing.assert_array_equal(edge, [1.0, 0.0] if beta > 0 else [0.0, 1.0])


@pytest.mark.parametrize("beta", [1.0, 2.0, 1.7])
def test_a_lowered_inplace_op_serves_every_beta(beta):
    # What is handed to a user is compiled without hints: lowered at a power
    # of two, a moderate beta or any other, it keeps the error-free product
    # and the rebalancing, and stays within the bound when called with
    # another beta (it was ~120 ulp off with hints from the lowering beta).
    x = jnp.linspace(-30.0, 30.0, 4096, dtype=jnp.float32)
    if jax.default_backend() == "cpu":  # the CPU's kernel (a GPU has its own)
        text = softplus_backward_inplace.lower(x, x, beta).as_text()
        assert ("-4096" in text) != _math.fma_contracts()
        assert ("1.84467441E+19" in text) != _math.fma_contracts()
    compiled = softplus_backward_inplace.lower(x, jnp.ones_like(x), beta).compile()
    tiny = np.finfo(np.float32).tiny
    for other in (1.7, 3e38, -2.5, 2.0**-70):
        src = (np.linspace(-30.0, 30.0, 4096) / other).astype(np.float32)
        src = jnp.asarray(np.where(np.abs(src) < tiny, 0, src))  # the CPU flushes
        got = compiled(src, jnp.ones_like(src), np.float32(other))
        ref = backward_ref(src, np.ones(4096, np.float32), other)
        assert max_ulp(got, ref, jnp.float32) <= ULP_BOUND[np.dtype(jnp.float32)]
        np.testing.assert_array_equal(
            got, softplus_backward(src, jnp.ones_like(src), other)
        )


def test_numpy_and_python_inputs_are_converted():
    got = softplus_backward(np.array([0.0, 1.0]), [2.0, 2.0], np.float32(1.0))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, 2 / (1 + np.exp([-0.0, -1.0])), rtol=1e-7)
    assert softplus_backward(0.0, 4.0).shape == ()


def test_float64_under_x64(x64):
    rng = np.random.default_rng(5)
    src = jnp.asarray(rng.uniform(-30, 30, 1000))
    dd = jnp.asarray(rng.standard_normal(1000))
    assert src.dtype == jnp.float64
    got = softplus_backward(src, dd, 1.7)
    assert got.dtype == jnp.float64
    t = 1.7 * f64(src)  # beta stays float64 for float64 data
    ref = f64(dd) / (1 + np.exp(-t))
    np.testing.assert_allclose(got, ref, rtol=1e-14)


def test_every_bfloat16_nan_stays_nan():
    # On CPU the bfloat16 rounding skips its NaN select: every NaN payload
    # of src, diff_dst and beta must still come out as a NaN.
    exp_all_ones = np.uint16(0x7F80)
    mantissas = np.arange(1, 128, dtype=np.uint16)
    nans = np.concatenate([exp_all_ones | mantissas, 0x8000 | exp_all_ones | mantissas])
    nans = jnp.asarray(nans.view(jnp.bfloat16))
    half = jnp.full(nans.shape, 0.5, jnp.bfloat16)
    payloads = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0xFFBFFFFF], np.uint32)
    jitted = jax.jit(softplus_backward)
    for beta in (1.7, -0.3, *payloads.view(np.float32)):
        for src, dd in ((nans, half), (half, nans)):
            assert np.isnan(f64(jitted(src, dd, np.float32(beta)))).all(), beta
    for beta in payloads.view(np.float32):
        assert np.isnan(f64(jitted(half, half, beta))).all(), beta


@pytest.mark.parametrize("dtype", (jnp.float32, jnp.bfloat16))
@pytest.mark.parametrize("beta", EXTREME_BETAS)
def test_extreme_beta(dtype, beta):
    # The error-free product's split of a tiny src (or of a tiny beta) must
    # not produce subnormal halves, which the CPU flushes: that turned the
    # correction into an error of 2**-12 (thousands of ulps).
    rng = np.random.default_rng(9)
    src = random_src(rng, N, beta, dtype, (-100.0, 60.0))
    normal = np.abs(f64(src)) >= float(jnp.finfo(dtype).tiny)  # DAZ reads 0
    src = src[jnp.asarray(normal)]
    dd = random_dd(rng, src.shape[0], dtype)
    got = softplus_backward(src, dd, beta)
    err = max_ulp(got, backward_ref(src, dd, beta), dtype)
    assert err <= ULP_BOUND[np.dtype(dtype)], err


@pytest.mark.parametrize("beta", (2.5, -1.5, 1.7, 0.1, 3e38, 1e-35, -3e-33))
def test_the_correction_survives_a_constant_beta_in_a_users_jit(beta):
    # Without the error-free product's correction, t = beta * src rounded
    # costs |t| / 2 ulp: 40 to 85 ulp here. On CPUs with FMAs the correction
    # is two contracted multiply-adds, which LLVM merges away where their
    # multiply equals another one: a split of beta whose high part is beta
    # itself (2.5 and 1.5 have under 12 bits) makes it t's own multiply, and
    # so would a constant |beta| below 2**-100 (`BetaHints.beta_tiny`).
    # Traced and constant betas alike.
    rng = np.random.default_rng(seed_of("constant beta", beta))
    src = random_src(rng, 1 << 14, beta, jnp.float32, (-170.0, -80.0))
    dd = jnp.asarray(2.0 ** rng.uniform(100, 127, 1 << 14), jnp.float32)
    ref = backward_ref(src, dd, beta)
    constant = jax.jit(lambda s, d: softplus_backward(s, d, beta))(src, dd)
    traced = jax.jit(softplus_backward)(src, dd, jnp.float32(beta))
    for got in (constant, traced, softplus_backward(src, dd, beta)):
        assert max_ulp(got, ref, jnp.float32) <= ULP_BOUND[np.dtype(jnp.float32)]


@pytest.mark.parametrize("beta", (1.7, 0.1))
def test_a_closed_over_constant_src_keeps_the_correction(beta):
    # A NumPy src that a jit closes over is a constant of the program, and
    # XLA folded the kernel's `beta * src` on it before the loop that would
    # fuse it into the FMA: 35 of 64 results differed from an eager call's,
    # up to 56 ulp. beta behind a barrier keeps the product in the loop.
    rng = np.random.default_rng(seed_of("closed-over src", beta))
    src = rng.uniform(-60 / beta, -40 / beta, 64).astype(np.float32)
    dd = np.ones(64, np.float32)
    eager = softplus_backward(jnp.asarray(src), jnp.asarray(dd), beta)
    for jitted in (
        jax.jit(lambda: softplus_backward(src, dd, beta))(),
        jax.jit(lambda b: softplus_backward(src, dd, b))(jnp.float32(beta)),
    ):
        np.testing.assert_array_equal(
            np.asarray(jitted).view(np.uint32), np.asarray(eager).view(np.uint32)
        )


@pytest.mark.parametrize("beta", (1.7, -0.3))
def test_the_correction_survives_the_same_product_beside_it(beta):
    # LLVM merges equal multiplies before it contracts one into an FMA: had
    # the kernel's FMA multiplied beta by src itself, a `beta * src` or
    # `|beta| |src|` of the user's (the derivative in beta computes the
    # latter) would have taken its multiply, and the correction with it
    # (64 ulp for d softplus / d beta).
    rng = np.random.default_rng(seed_of("product beside", beta))
    src = random_src(rng, 1 << 12, beta, jnp.float32, (-80.0, -20.0))
    dd = random_dd(rng, 1 << 12, jnp.float32)

    def step(s, d, b):
        # The products in the kernel's own loop: a select that keeps `out`.
        seen = jnp.isfinite(b * s) & jnp.isfinite(-b * s)
        seen &= jnp.isfinite(jnp.abs(b) * jnp.abs(s))
        return jnp.where(seen, softplus_backward(s, d, b), 0.0)

    out = jax.jit(step)(src, dd, jnp.float32(beta))
    err = max_ulp(out, backward_ref(src, dd, beta), jnp.float32)
    assert err <= ULP_BOUND[np.dtype(jnp.float32)], err


@pytest.mark.parametrize("beta", (1.2e-38, -2e-38, 3e-37, 2.0**127, -3.3e38))
def test_a_traced_extreme_beta_with_finite_src_is_within_the_bound(beta):
    # The fused kernel clamps src to bounds from beta: below |beta| = 5.4e-37
    # they pass float32's largest finite value (every finite src is inside),
    # and above 2**126 beta * log2(e) would overflow (the magic number then
    # rounds to halves). Any finite src, t over the whole range.
    rng = np.random.default_rng(seed_of("traced extreme beta", beta))
    with np.errstate(over="ignore"):
        src = (rng.uniform(-190.0, 90.0, 1 << 14) / beta).astype(np.float32)
    big = np.finfo(np.float32).max
    src = np.clip(src, -big, big)
    src = jnp.asarray(np.where(np.abs(src) < np.finfo(np.float32).tiny, 0, src))
    dd = jnp.asarray(2.0 ** rng.uniform(-20, 127, src.size), jnp.float32)
    got = jax.jit(softplus_backward)(src, dd, jnp.float32(beta))
    err = max_ulp(got, backward_ref(src, dd, beta), jnp.float32)
    assert err <= ULP_BOUND[np.dtype(jnp.float32)], err
