"""accuracy=HIGHEST where the platform has no float64 (TPUs): the
evaluation in float32 arithmetic (`_highest32`), lowered as for a TPU
(`lowered_as("tpu")`) and run by this CPU's XLA. Its results are the
float64 evaluation's bit for bit wherever the exact value is normal (that
one is correctly rounded: test_highest.py), NaNs, infinities and zeros
included, and its steps reach the precision its rounding test assumes.

Each TPU program takes seconds to compile, so one program per dtype
(`_results`, module-scoped) evaluates every input the tests look at."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from exhaustive import exact_is_normal, near_midpoint_diff_dst, near_midpoint_softplus
from helpers import dtype_id, seed_of
from jax import export

from jax_softplus import (
    _fe,
    _highest,
    _highest32,
    _rounding,
    _wide,
    softplus,
    softplus_backward,
    softplus_backward_inplace,
)
from jax_softplus.testing import lowered_as

# Each TPU program at HIGHEST takes seconds to compile (no float64: word
# arithmetic): the slow tier.
pytestmark = pytest.mark.slow

HIGHEST = jax.lax.AccuracyMode.HIGHEST
F32 = np.float32
DTYPES = (F32, jnp.bfloat16, np.float16)
BITS = {np.dtype(F32): 24, np.dtype(jnp.bfloat16): 8, np.dtype(np.float16): 11}
N = 2048


def _ops(src, dd, beta):
    """Both ops at HIGHEST, beta per element."""

    def one(s, d, b):
        return (
            softplus_backward(s, d, b, accuracy=HIGHEST),
            softplus(s, b, accuracy=HIGHEST),
        )

    return jax.vmap(one)(src, dd, beta)


def _inputs(dtype):
    """(src, dd, beta, near): random t over the core and the tails at the
    exhaustive run's betas and a few more, beta 0 and subnormal, the
    specials' grid, diff_dst near a midpoint, and softplus inputs near a
    midpoint (`near`: their slice, mpmath's correct rounding, the gap)."""
    bits = BITS[np.dtype(dtype)]
    rng = np.random.default_rng(seed_of("highest tpu", bits))
    srcs, dds, betas = [], [], []

    def add(s, d, b):
        srcs.append(np.asarray(s, F32))
        dds.append(np.asarray(d, F32))
        betas.append(np.broadcast_to(np.asarray(b, F32), np.shape(s)))

    for beta in (1.0, -1.0, 1.7, -2.5, 1e-3, 1e3, 2.0**-20, 3e30):
        n = 120
        t = np.concatenate(
            [rng.uniform(-30, 30, n // 2), rng.uniform(-200, 90, n // 2)]
        )
        with np.errstate(over="ignore"):
            s = (t / np.float64(F32(beta))).astype(F32)
        d = np.exp2(rng.uniform(-60, 60, n)) * rng.choice([-1, 1], n)
        add(s, np.clip(d, -6e4, 6e4) if dtype == np.float16 else d, beta)
    inf, nan = np.inf, np.nan
    specials = np.array([nan, inf, -inf, 0.0, -0.0, 1.0, -3.0, 1e4], F32)
    s, d = (v.ravel() for v in np.meshgrid(specials, specials))
    for beta in (0.0, -0.0, 1e-40, 1.5):
        add(s, d, beta)
    for beta in (1.7, -2.5, 1e-3):
        s, d = near_midpoint_diff_dst(beta, 40, rng, bits=bits)
        add(s, d, beta)
    x, b, want, gap = near_midpoint_softplus(60, rng, bits)
    start = sum(v.size for v in srcs)
    add(x, np.ones_like(x), b)
    near = (slice(start, start + x.size), want, gap)
    src, dd, beta = (np.concatenate(v) for v in (srcs, dds, betas))
    assert src.size <= N
    pad = N - src.size
    src, dd, beta = (np.pad(v, (0, pad), constant_values=1) for v in (src, dd, beta))
    with np.errstate(over="ignore"):  # float16 diff_dst beyond its range: inf
        return src.astype(dtype), dd.astype(dtype), beta, near


@pytest.fixture(scope="module")
def results():
    """{dtype: (inputs, tpu results, float64-evaluation results)}."""
    out = {}
    inputs = {dtype_id(d): _inputs(d) for d in DTYPES}
    with lowered_as("tpu"):
        tpu = {k: jax.device_get(jax.jit(_ops)(*v[:3])) for k, v in inputs.items()}
    for k, v in inputs.items():
        out[k] = (v, tpu[k], jax.device_get(jax.jit(_ops)(*v[:3])))
    return out


def _normal(want, dtype):
    info = jnp.finfo(dtype)
    w = np.asarray(want, np.float64)
    return exact_is_normal(w, w, float(info.tiny), float(info.max))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_tpu_bits_are_the_float64_evaluations(results, dtype):
    (src, dd, beta, _), tpu, cpu = results[dtype_id(dtype)]
    for got, want in zip(tpu, cpu, strict=True):
        assert got.dtype == dtype
        got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
        normal = _normal(want64, dtype)
        wrong = np.flatnonzero(normal & (got64 != want64))
        assert not wrong.size, (src[wrong[:3]], beta[wrong[:3]], got64[wrong[:3]])
        assert normal.sum() > 1000
        # NaN, infinities and signed zeros, alike (the specials' grid).
        special = ~np.isfinite(want64) | (want64 == 0)
        same = (np.isnan(got64) & np.isnan(want64)) | (
            (got64 == want64) & (np.signbit(got64) == np.signbit(want64))
        )
        assert special.sum() > 50 and same[special].all()


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_near_midpoints_take_the_expansion_step(results, dtype):
    # Inputs near a rounding midpoint are in doubt after the double-word
    # step (its error bound, 2**-41, is far wider than their gap); the
    # expansions decide them, against mpmath's rounding.
    (src, dd, beta, (where, want, gap)), tpu, _ = results[dtype_id(dtype)]
    got = np.asarray(tpu[1][where], np.float64)
    np.testing.assert_array_equal(got, want)
    v, _ = jax.jit(_highest32.softplus_value)(src[where].astype(F32), beta[where])
    _, doubt = _rounding.rounded(v, _highest32.ERROR["forward"], dtype)
    closest = np.log2(gap.min())
    if dtype == F32:
        assert np.asarray(doubt).mean() > 0.9 and closest < -50
        assert np.asarray(doubt).sum() > 2 * _highest32._BATCH
    else:
        assert np.asarray(doubt).any() and closest < -40


@pytest.mark.slow
@pytest.mark.parametrize("op", ["backward", "forward"])
def test_the_double_word_step_is_within_its_error_bound(op):
    # Against the float64 evaluation (within 2**-50): the bound the
    # rounding test assumes, 2**-41, holds with a margin, and the level
    # reached (2**-43.7 in this sample) is held to 2**-43.
    rng = np.random.default_rng(seed_of("double word", op))
    n = 1 << 15
    worst = 0.0
    for beta in (1.0, 1.7, -2.5, 1e-3, 1e3, 3e30):
        t = np.concatenate(
            [rng.uniform(-30, 30, n // 2), rng.uniform(-200, 90, n // 2)]
        )
        with np.errstate(over="ignore"):
            src = (t / np.float64(F32(beta))).astype(F32)
        dd = (np.exp2(rng.uniform(-60, 60, n)) * rng.choice([-1, 1], n)).astype(F32)
        b = np.full(n, beta, F32)
        with _wide._float64():
            if op == "backward":
                want = np.asarray(jax.jit(_highest.backward_value)(src, dd, b))
            else:
                want = np.asarray(jax.jit(_highest.softplus_value)(src, b))
        if op == "backward":
            (h, lo), k = jax.jit(_highest32.backward_value)(src, dd, b)
        else:
            (h, lo), k = jax.jit(_highest32.softplus_value)(src, b)
        got = (np.asarray(h, np.float64) + np.asarray(lo, np.float64)) * np.exp2(
            np.asarray(k, np.float64)
        )
        ok = np.isfinite(want) & (np.abs(want) > 2.0**-120) & (np.abs(want) < 2.0**120)
        worst = max(worst, float(np.max(np.abs(got[ok] / want[ok] - 1))))
    assert _highest32.ERROR["forward" if op == "forward" else "backward"] == 2.0**-41
    assert worst < 2.0**-43, np.log2(worst)


@pytest.mark.slow
def test_the_expansions_reach_their_precision():
    # exp over the evaluation's range, quotients and products of five-word
    # values: 2**-118 at worst in this sample (the double words' doubt is
    # 2**-41 wide; the CPU's double-double step reaches 2**-100).
    mpmath.mp.prec = 300
    rng = np.random.default_rng(seed_of("expansions"))

    def value(col):
        return sum(mpmath.mpf(float(w)) for w in col)

    x = np.concatenate([rng.uniform(-200, 60, 60), rng.uniform(-1e-3, 1e-3, 20)])
    x = x.astype(F32)
    xl = (x * rng.uniform(-(2.0**-25), 2.0**-25, x.size)).astype(F32)
    words = np.zeros((_fe.WORDS, x.size), F32)
    words[0], words[1] = x, xl
    k, m = jax.jit(_fe.exp)(words)
    worst = 0
    for i in range(x.size):
        exact = mpmath.exp(mpmath.mpf(float(x[i])) + mpmath.mpf(float(xl[i])))
        got = value(np.asarray(m)[:, i]) * mpmath.mpf(2) ** int(k[i])
        worst = max(worst, abs(got / exact - 1))
    a, b = (
        np.stack(
            [rng.uniform(1, 2, 60)]
            + [
                rng.uniform(-1, 1, 60) * 2.0 ** (-24 * i - 1)
                for i in range(1, _fe.WORDS)
            ]
        ).astype(F32)
        for _ in range(2)
    )
    q, p = np.asarray(jax.jit(_fe.div)(a, b)), np.asarray(jax.jit(_fe.mul)(a, b))
    for i in range(a.shape[1]):
        va, vb = value(a[:, i]), value(b[:, i])
        worst = max(
            worst,
            abs(value(q[:, i]) * vb / va - 1),
            abs(value(p[:, i]) / (va * vb) - 1),
        )
    assert worst < mpmath.mpf(2) ** -116, float(mpmath.log(worst, 2))


def test_a_midpoint_is_decided_through_cancellation():
    # a - (c + ulp/2) cancels to 2**-50 of a: the sign must come from the
    # words below, not from a first word the cancellation zeroed.
    a = np.array([1.5161566, -5.9604645e-08, 7.1316918e-16, 2.4847547e-23, 0], F32)
    got = jax.jit(lambda v: _fe.round_nearest(v, 24))(a[:, None])
    assert float(got[0]) == float(F32(1.5161566))
    below = a.copy()
    below[2:] = -below[2:]
    got = jax.jit(lambda v: _fe.round_nearest(v, 24))(below[:, None])
    assert float(got[0]) == float(np.nextafter(F32(1.5161566), F32(0)))


@pytest.mark.slow
def test_tpus_lower_highest_with_no_float64():
    specs = [jax.ShapeDtypeStruct((8,), d) for d in DTYPES]

    def f(x):
        return softplus(x, 1.7, accuracy=HIGHEST) + softplus_backward(
            x, x, 1.7, accuracy=HIGHEST
        )

    for spec in specs:
        tpu = export.export(jax.jit(f), platforms=("tpu",))(spec).mlir_module()
        assert "f64" not in tpu and "custom_call" not in tpu
        cuda = export.export(jax.jit(f), platforms=("cuda",))(spec).mlir_module()
        assert "f64" in cuda


@pytest.mark.slow
def test_shapes_and_the_in_place_call():
    # A shape that is no multiple of anything, an empty array, and the
    # in-place op (several batches of the expansion step: the near-midpoint
    # inputs above).
    rng = np.random.default_rng(seed_of("tpu shapes"))
    src = rng.uniform(-25, 25, (3, 701)).astype(F32)
    dd = np.exp2(rng.uniform(-30, 30, (3, 701))).astype(F32)
    f = jax.jit(lambda x: softplus(x, 1.7, accuracy=HIGHEST))
    with lowered_as("tpu"):
        inplace = np.asarray(
            softplus_backward_inplace(src, jnp.asarray(dd), 1.7, accuracy=HIGHEST)
        )
        forward = np.asarray(f(src))
        empty = f(np.zeros((0,), F32))
    np.testing.assert_array_equal(
        inplace, softplus_backward(src, dd, 1.7, accuracy=HIGHEST)
    )
    np.testing.assert_array_equal(forward, f(src))
    assert empty.shape == (0,)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_zeros_and_specials_keep_their_bits_on_tpus(dtype):
    # Results that are +-0 (underflow by beta's sign, x = +-inf, t = -inf)
    # and the other specials: the TPU's float32 evaluation gives the
    # float64 evaluation's bits, the sign of a zero included.
    big = float(jnp.finfo(dtype).max)
    xs = [-np.inf, np.inf, -big, big, -1e4, -300.0, -100.0, -0.0, 0.0, 1.0, np.nan]
    betas = [2.0, -2.0, 0.5, -0.5, 3e38, -3e38, 1e-30, -1e-30]
    x, b = (np.array(v) for v in zip(*[(x, b) for x in xs for b in betas], strict=True))
    x, b = x.astype(dtype), b.astype(F32)
    dd = np.where(np.arange(x.size) % 2, -1.0, 1.0).astype(dtype)
    fwd = jax.jit(jax.vmap(lambda x, b: softplus(x, b, accuracy=HIGHEST)))
    back = jax.jit(
        jax.vmap(lambda s, d, b: softplus_backward(s, d, b, accuracy=HIGHEST))
    )
    want = np.asarray(fwd(x, b)), np.asarray(back(x, dd, b))
    with lowered_as("tpu"):
        got = np.asarray(fwd(x, b)), np.asarray(back(x, dd, b))
    for name, g, w in zip(("softplus", "softplus_backward"), got, want, strict=True):
        g, w = g.astype(np.float32), w.astype(np.float32)
        nan = np.isnan(w)
        assert (np.isnan(g) == nan).all(), name
        bad = np.flatnonzero(g[~nan].view(np.uint32) != w[~nan].view(np.uint32))
        assert not bad.size, (
            name,
            x[~nan][bad][:4],
            b[~nan][bad][:4],
            g[~nan][bad][:4],
        )
        assert (w[~nan] == 0).any() and np.signbit(w[~nan][w[~nan] == 0]).any(), name


@pytest.mark.parametrize("precision", [24, 11, 8])
def test_rounding_just_below_a_power_of_two_takes_the_finer_spacing(precision):
    # Below 2**k the representable numbers are twice as dense: 1 - 0.6 *
    # 2**-p rounds down to 1 - 2**-p, 1 - 0.4 * 2**-p up to 1 (p the
    # precision), of either sign and beside the neighbouring powers of two.
    words = _fe.WORDS
    cases, want = [], []
    for scale in (1.0, 2.0, 0.5):  # the callers scale into [1, 2) first
        for sign in (1.0, -1.0):
            for frac, rounded in ((0.6, 1 - 2.0**-precision), (0.4, 1.0)):
                w = np.zeros(words, np.float64)
                # The first two words round to the power of two itself: the
                # third decides.
                step = -sign * scale * 2.0**-precision
                w[0], w[1], w[2] = sign * scale, (frac - 0.2) * step, 0.2 * step
                cases.append(w.astype(F32))
                want.append(sign * scale * rounded)
    got = jax.jit(lambda v: _fe.round_nearest(v, precision))(np.stack(cases, 1))
    np.testing.assert_array_equal(np.asarray(got, np.float64), np.array(want))
