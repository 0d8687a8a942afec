"""Derivatives of order 1 to 4, by every route, against mpmath at 60 digits.

Per element, float32 and float64, betas log-uniform over [1e-5, 1e5] of
either sign, t = beta * x over the range where each quantity is normal,
diff_dst log-uniform up to 3e38. Orders 1 and 2 are held in ulps to the
level each evaluation reaches (`level`), orders 3 and 4 to 1e-5 relative
(and finite wherever the exact value is).

The error is measured against the exact value, except where a derivative
has a zero of its own between its terms (d2 softplus_backward / d src
d beta = g s'(t) (1 - t tanh(t/2)) at |t| = 1.5434, the third and fourth
orders at theirs): there against the sum of its terms' magnitudes, the
size of what cancels in any evaluation in the dtype.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import jax.test_util
import mpmath
import numpy as np
import pytest
from helpers import FORWARD_MODE, examples, seed_of
from hypothesis import given, settings
from hypothesis import strategies as st

from jax_softplus import softplus, softplus_backward
from jax_softplus.testing import lowered_as
from tools import _references as references
from tools import _routes as derivatives

# Each example costs mpmath references over routes and platforms: 2 here,
# 6 in CI's profile (tests/conftest.py).
SETTINGS = settings(max_examples=examples(2))
# Orders 1 and 2, in ulps, held to the level each evaluation reaches (the
# docs' bounds are looser: docs/accuracy.md). float32 derivatives are
# evaluated in float64 on CPUs and GPUs and rounded once (half an ulp, up
# to the float64 evaluation's 2**-35), but for the first derivatives that
# are the backward kernel itself (d softplus / dx, d softplus_backward /
# d diff_dst: its 2 ulp); on TPUs in float32 double words (1.43 ulp at worst
# in maintainers/derivative_search.py, 1.31 in the accuracy tool); float64
# derivatives in float64 double words everywhere (0.67 with diff_dst chosen
# against them in maintainers/derivative_search.py --float64).
KERNEL = ("softplus d100", "backward d001")


def level(name, dtype, platform="cpu"):
    if name in KERNEL:
        return 2.0
    if np.dtype(dtype) == np.float64:
        return 0.8
    return 1.5 if platform == "tpu" else 0.51


RELATIVE = 1e-5
DTYPES = (np.float32, np.float64)


def _quantities(orders):
    out = {}
    for fun in ("softplus", "backward"):
        for p in range(5):
            for q in range(5):
                for r in range(2 if fun == "backward" else 1):
                    if p + q + r in orders:
                        out[f"{fun} d{p}{q}{r}"] = (fun, (p, q, r))
    return out


FIRST_AND_SECOND = _quantities((1, 2))
# Representative orders 3 and 4: in x, in beta, mixed, and through diff_dst.
THIRD_AND_FOURTH = {
    name: spec
    for name, spec in _quantities((3, 4)).items()
    if name
    in (
        "softplus d030",
        "softplus d040",
        "softplus d120",
        "softplus d130",
        "softplus d300",
        "backward d030",
        "backward d040",
        "backward d111",
        "backward d120",
        "backward d210",
        "backward d300",
    )
}


# Inputs ------------------------------------------------------------------


def _inputs(seed, log_beta, negative, dtype, n=32):
    rng = np.random.default_rng(seed)
    b = dtype(-(10.0**log_beta) if negative else 10.0**log_beta)
    span = 180.0 if dtype == np.float32 else 740.0
    t = np.concatenate(
        [rng.uniform(-30, 30, n // 2), rng.uniform(-span, span, n - n // 2)]
    )
    x = (t / np.float64(b)).astype(dtype)
    top = np.log10(3e38)
    dd = 10.0 ** rng.uniform(-20, top, n) * rng.choice([-1.0, 1.0], n)
    return x, b, dd.astype(dtype)


QUANTITIES = {**FIRST_AND_SECOND, **THIRD_AND_FOURTH}


def _compiled(route, names):
    return derivatives.compiled(route, tuple((n, *QUANTITIES[n]) for n in names))


def _measure(route, names, dtype, drawn, relative=False):
    """Per quantity: (a description of the worst element, its errors in ulps
    of max(|exact|, scale), or relative to it)."""
    log_beta, negative, seed = drawn
    x, b, dd = _inputs(seed_of(route, seed), log_beta, negative, dtype)
    got = _compiled(route, names)(jnp.asarray(x), jnp.asarray(b), jnp.asarray(dd))
    refs = references.exact_derivatives(
        {name: QUANTITIES[name] for name in names}, x, b, dd
    )
    for name in names:
        ref, scale = refs[name]
        if route == "hessian":
            # Every entry of a column comes from one JVP: where another
            # entry's exact value overflows, inf times a zero tangent is NaN
            # here (as for any function); those elements are left out.
            fun = QUANTITIES[name][0]
            for other in names:
                if QUANTITIES[other][0] == fun:
                    big = np.abs(refs[other][0].real) > jnp.finfo(dtype).max
                    ref = np.where(big, np.nan, ref)
        err = references.derivative_error(got[name], ref, scale, dtype, relative)
        normal = np.flatnonzero(references.normal_exact(ref, dtype))
        at = normal[np.argmax(err)] if err.size else 0
        where = (
            f"{name} by {route}: beta={b!r}, x={x[at]!r}, diff_dst={dd[at]!r}: "
            f"got {float(got[name][at])!r}, exact {ref[at].real!r}"
        )
        yield where, err


def _ulp_of(size, dtype):
    info = jnp.finfo(dtype)
    return np.ldexp(1.0, np.frexp(size)[1] - 1 - info.nmant)


def _worst(err):
    return float(np.max(np.where(np.isnan(err), np.inf, err), initial=0.0))


def _available(route, names):
    """On JAX 0.8 (a custom_vjp) softplus has no forward mode of its own:
    the routes whose innermost derivative is forward leave it out."""
    if FORWARD_MODE or route not in ("jvp", "grad_of_jvp"):
        return names
    return tuple(n for n in names if QUANTITIES[n][0] != "softplus")


_DRAWN = st.tuples(st.floats(-5, 5), st.booleans(), st.integers(0, 2**16))
_SECOND = tuple(n for n, (_, pqr) in FIRST_AND_SECOND.items() if sum(pqr) == 2)
_FIRST = tuple(n for n, (_, pqr) in FIRST_AND_SECOND.items() if sum(pqr) == 1)


# jax.hessian is jacfwd(jacrev): one route for both. float64 by the three
# that differ most (reverse, forward, forward over reverse in jax.hessian).
@pytest.mark.slow
@pytest.mark.parametrize(
    "route, dtype",
    [(r, np.float32) for r in ("grad", "jvp", "jvp_of_grad", "grad_of_jvp", "hessian")]
    + [(r, np.float64) for r in ("grad", "jvp", "hessian")],
    ids=lambda v: v if isinstance(v, str) else np.dtype(v).name,
)
@SETTINGS
@given(drawn=_DRAWN)
def test_first_and_second_derivatives_within_their_bounds(x64, route, dtype, drawn):
    names = _available(route, _SECOND + (_FIRST if route in ("grad", "jvp") else ()))
    for name, (where, err) in zip(
        names, _measure(route, names, dtype, drawn), strict=True
    ):
        bound = level(name, dtype)
        assert _worst(err) <= bound, f"{_worst(err)} ulps: {where}"


@pytest.fixture(params=("tpu", "cuda"))
def other_platform(request):
    """Another platform's lowering on the CPU during one test
    (`jax_softplus.testing.lowered_as`)."""
    with lowered_as(request.param):
        yield request.param


@pytest.mark.slow
@pytest.mark.parametrize("route", ("grad", "hessian"))
@SETTINGS
@given(drawn=_DRAWN)
def test_the_other_platforms_float32_evaluation_within_its_bounds(
    other_platform, route, drawn
):
    names = _SECOND + (_FIRST if route == "grad" else ())
    for name, (where, err) in zip(
        names, _measure(route, names, np.float32, drawn), strict=True
    ):
        bound = level(name, np.float32, other_platform)
        assert _worst(err) <= bound, f"{_worst(err)} ulps: {where}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "route, dtype",
    [("grad", np.float32), ("jvp", np.float64), ("jvp_of_grad", np.float32)],
    ids=("grad-float32", "jvp-float64", "jvp_of_grad-float32"),
)
@settings(SETTINGS, max_examples=examples(3))
@given(drawn=_DRAWN)
def test_third_and_fourth_order_within_1e_5(x64, route, dtype, drawn):
    names = _available(route, tuple(THIRD_AND_FOURTH))
    for where, rel in _measure(route, names, dtype, drawn, relative=True):
        assert _worst(rel) <= RELATIVE, f"{_worst(rel)} relative: {where}"


# The cases that were wrong, each against mpmath ------------------------------


def _mp(f, *args):
    with mpmath.workdps(60):
        return float(f(*[mpmath.mpf(float(a)) for a in args]))


def _mp_sig(t):
    return 1 / (1 + mpmath.exp(-t))


def _mp_slope(t):
    return _mp_sig(t) * _mp_sig(-t)


def _mp_d1(x, b):
    a = abs(b * x)
    return -(a * _mp_sig(-a) + mpmath.log1p(mpmath.exp(-a))) / b**2


def _mp_d2(x, b):
    return (x**2 * _mp_slope(b * x) - 2 * _mp_d1(x, b)) / b


def _mp_softplus_b(k):
    """d^k softplus / d beta^k by the recursion, at 60 digits."""

    def dk(x, b):
        return references.mp_derivative("softplus", (0, k, 0), x, b)[0]

    return dk


def _ulps(got, exact, dtype=np.float32):
    return abs(float(got) - exact) / float(_ulp_of(np.float64(abs(exact)), dtype))


F32 = np.float32


def test_reverse_over_reverse_in_beta_far_in_the_tail():
    # t = -18: the cotangent used to meet the lifted kernel's drop first.
    x, b = F32(-2), F32(9)
    bb = jax.jit(jax.grad(jax.grad(softplus, 1), 1))(x, b)
    bx = jax.jit(jax.grad(jax.grad(softplus, 1), 0))(x, b)
    assert _ulps(bb, _mp(_mp_d2, x, b)) <= 4
    assert _ulps(bx, _mp(lambda x, b: x * _mp_slope(b * x), x, b)) <= 4
    # Elementwise d/dx (dL/dbeta) for x ~ N(0, 3), beta = 8.
    xs = jnp.asarray(np.random.default_rng(0).normal(0, 3, 256), jnp.float32)
    dx = jax.jit(jax.grad(lambda x: jax.grad(lambda b: softplus(x, b).sum())(F32(8))))(
        xs
    )
    exact = [_mp(lambda x, b: x * _mp_slope(b * x), v, 8) for v in np.asarray(xs)]
    assert max(_ulps(g, e) for g, e in zip(np.asarray(dx), exact, strict=True)) <= 4


@pytest.mark.slow
def test_hessian_in_a_small_beta_at_large_x():
    h = jax.jit(jax.hessian(softplus, (0, 1)))(F32(1000), F32(1e-3))
    assert _ulps(h[1][1], _mp(_mp_d2, 1000, F32(1e-3))) <= 4
    assert _ulps(h[1][0], _mp(lambda x, b: x * _mp_slope(b * x), 1000, F32(1e-3))) <= 4
    # Newton's method on a learnable beta: the curvature of a sum.
    xs = jnp.linspace(-2000, 2000, 101, dtype=jnp.float32)
    curvature = jax.jit(jax.hessian(lambda b: softplus(xs, b).sum()))(F32(0.01))
    exact = sum(_mp(_mp_d2, v, F32(0.01)) for v in np.asarray(xs))
    assert abs(float(curvature) / exact - 1) < 1e-6


@pytest.mark.parametrize(
    "order, beta",
    [(4, 1e-3), (3, 1e-5), (4, 1e-5)],
    ids=("d4-1e-3", "d3-1e-5", "d4-1e-5"),
)
def test_third_and_fourth_order_in_a_small_beta(order, beta):
    f = functools.partial(softplus, F32(1))
    for _ in range(order):
        f = jax.grad(f)
    got = float(jax.jit(f)(F32(beta)))
    exact = _mp(_mp_softplus_b(order), 1, F32(beta))
    assert np.isfinite(got) and abs(got / exact - 1) < 1e-5, (got, exact)


def test_first_derivatives_of_the_backward_op_with_a_huge_diff_dst():
    dd = F32(3e38)
    dbeta = jax.grad(lambda b: softplus_backward(F32(100), dd, b))(F32(1))
    dsrc = jax.grad(lambda s: softplus_backward(s, dd, F32(5)))(F32(20))
    assert _ulps(dbeta, _mp(lambda s, g, b: g * s * _mp_slope(b * s), 100, dd, 1)) <= 4
    assert _ulps(dsrc, _mp(lambda s, g, b: g * b * _mp_slope(b * s), 20, dd, 5)) <= 4


@pytest.mark.parametrize("t", [0.05, -0.001, 1e-6])
def test_mixed_second_derivative_near_t_0(t):
    # d/dx d/dbeta softplus = x s(t) s(-t), evaluated directly.
    x = F32(t)
    got = jax.grad(jax.grad(softplus, 1), 0)(x, F32(1))
    assert _ulps(got, _mp(lambda x: x * _mp_slope(x), x)) <= 4


@pytest.mark.parametrize("beta, t", [(-2.5, 3.47), (0.1, -8.68)])
def test_float64_backward_beta_derivative(x64, beta, t):
    src = jnp.float64(t / beta)
    got = jax.grad(lambda b: softplus_backward(src, jnp.ones_like(src), b))(
        jnp.float64(beta)
    )
    exact = _mp(lambda s, b: s * _mp_slope(b * s), src, beta)
    assert _ulps(got, exact, np.float64) <= 4


@pytest.mark.slow
@pytest.mark.parametrize("beta", [1e-4, 1e4])
def test_check_grads_to_order_4_at_extreme_betas(x64, beta):
    # beta0 f(u / beta0, beta0 v) = log1p(e^(u v)) / v: the library's x and
    # beta derivatives at |beta| = beta0, scaled so that one finite
    # difference step suits both arguments.
    def g(u, v):
        return beta * softplus(u / beta, beta * v)

    # One mode per beta, reverse at the small one and forward at the large
    # (both modes at every level would be 2**4 chains); JAX 0.8's softplus
    # has reverse mode only.
    mode = "fwd" if beta > 1 and FORWARD_MODE else "rev"
    u, v = (-3.0, 1.0) if beta < 1 else (4.0, -1.0)
    jax.test_util.check_grads(
        g, (jnp.float64(u), jnp.float64(v)), order=4, modes=(mode,)
    )


@pytest.mark.parametrize(
    "pqr, src, dd, beta",
    [
        ((2, 0, 0), 264.7468, -0.05886, -0.00668),  # 4.80 ulp (the naive: 1.8)
        ((0, 2, 0), -91476.57, -0.09788, -4.97e-5),  # 5.40 eagerly, 4.40 jitted
    ],
)
def test_float32_second_derivatives_that_were_over_the_bound(pqr, src, dd, beta):
    f = derivatives.derivative("backward", pqr, "grad")
    exact, _ = references.mp_derivative("backward", pqr, F32(src), F32(beta), F32(dd))
    for g in (f, jax.jit(f)):
        got = g(F32(src), F32(beta), F32(dd))
        assert _ulps(got, float(exact)) <= 1, (got, float(exact))


def test_the_second_beta_derivative_far_in_the_tail_of_a_tiny_beta():
    # x 1.76e32, beta 1e-30 (t = 176): D_1's part flushed above t ~ 173 and
    # was dropped, 1.1355e18 against 1.1485e18.
    x, b = F32(1.76e32), F32(1e-30)
    got = jax.grad(jax.grad(softplus, 1), 1)(x, b)
    exact, _ = references.mp_derivative("softplus", (0, 2, 0), x, b)
    assert _ulps(got, float(exact)) <= 1, (got, float(exact))
