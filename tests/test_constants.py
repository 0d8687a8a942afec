"""The kernels' polynomial coefficients are what `maintainers/fit.py`
computes, and meet the error bounds their comments state, evaluated as the
kernels evaluate them (float32 coefficients, float32 Horner), against mpmath
on a dense grid of each interval. The float32 arithmetic is NumPy's on the
host, so the figures do not depend on whether a device contracts
multiply-adds (a GPU does).
"""

from __future__ import annotations

import math

import fit
import mpmath
import numpy as np
import pytest

from jax_softplus import _math, _math64, _wide, _words

mpmath.mp.dps = 40
F32 = np.float32
HALF_LN2 = math.log(2.0) / 2


def _grid(lo, hi, n=20_001):
    return np.linspace(lo, hi, n).astype(F32)


def _exact(fn, xs):
    return np.array([float(fn(mpmath.mpf(float(x)))) for x in xs])


@pytest.mark.slow
def test_expm1_polynomial_is_within_2_to_the_minus_26_7():
    # expm1(r) = r + r**2 q(r) on [-ln 2 / 2, ln 2 / 2], error relative to
    # exp(r): r**2 q(r) as the kernel evaluates it, in float32; the sum with
    # r (which the kernel compensates) in float64.
    r = _grid(-HALF_LN2, HALF_LN2)
    q = _math._EXPM1_Q[0]
    for c in _math._EXPM1_Q[1:]:
        q = q * r + c  # float32, as _math._expm1_q
    got = r.astype(np.float64) + (r * r * q).astype(np.float64)
    exact = _exact(mpmath.expm1, r)
    err = np.max(np.abs(got - exact) / np.exp(r.astype(np.float64)))
    assert err <= 2.0**-26.7, math.log2(err)


def test_exp_degree_4_is_within_2_9e_minus_6_with_an_exact_constant():
    assert _math._EXP_Q4[-1] == F32(1.0)  # so that sigmoid(0) = 1/2 exactly
    r = _grid(-HALF_LN2, HALF_LN2)

    q = _math._EXP_Q4[0]
    for c in _math._EXP_Q4[1:]:
        q = q * r + c  # float32, as _math._exp_reduce_half
    got = q.astype(np.float64)
    exact = _exact(mpmath.exp, r)
    # 2.886e-6 in float32 without fused multiply-adds.
    assert np.max(np.abs(got / exact - 1)) <= 2.9e-6


@pytest.mark.slow
def test_log1p_polynomial_is_within_2_to_the_minus_30():
    # log1p(f) = f - f**2 / 2 + f**3 P(f) on [-1/4, 1/2], relative error, with
    # the float32 coefficients evaluated exactly (float64): the fit's own
    # error, as the comment states it.
    f = np.linspace(-0.25, 0.5, 20_001)
    f = f[f != 0]
    c = [float(v) for v in _math._LOG1P_P]
    got = f - f * f / 2 + f**3 * sum(ck * f**k for k, ck in enumerate(c))
    exact = _exact(mpmath.log1p, f)
    err = np.max(np.abs(got / exact - 1))
    assert err <= 2.0**-30, math.log2(err)


def test_reciprocal_quadratic_is_within_1_02_percent():
    a, b, c = (float(v) for v in _math._RECIP_1P)
    e = np.linspace(0.0, 1.0, 10_001)
    assert np.max(np.abs(((a * e + b) * e + c) * (1 + e) - 1)) <= 0.0102


def test_float64_expm1_polynomial_is_within_2_to_the_minus_63():
    # expm1(r) = r + r**2 q(r) on [-ln 2 / 2, ln 2 / 2] widened by 1e-4,
    # error relative to exp(r), q's float64 coefficients evaluated exactly
    # (the fit's own error: the kernel's float64 rounding adds 2**-53 of
    # r**2 q, below 2**-56 of exp(r)).
    with mpmath.workdps(40):
        c = [mpmath.mpf(v) for v in _math64._EXP_Q]
        worst = mpmath.mpf(0)
        for r in np.linspace(-HALF_LN2 * 1.0001, HALF_LN2 * 1.0001, 2001):
            r = mpmath.mpf(float(r))
            got = r + r * r * fit._mp_poly(c[::-1], r)
            worst = max(worst, abs(got - mpmath.expm1(r)) / mpmath.exp(r))
    assert worst <= mpmath.mpf(2) ** -63, float(mpmath.log(worst, 2))


def test_float64_log1p_series_is_within_2_to_the_minus_62_5():
    # log1p(f) = 2 s + s R(s**2), s = f / (2 + f), for f in [-1/4, 1/2]:
    # relative error with the float64 coefficients evaluated exactly.
    with mpmath.workdps(40):
        c = [mpmath.mpf(v) for v in _math64._LOG1P_R]
        worst = mpmath.mpf(0)
        for f in np.linspace(-0.25, 0.5, 2001):
            f = mpmath.mpf(float(f))
            if f == 0:
                continue
            s = f / (2 + f)
            z = s * s
            got = 2 * s + s * z * fit._mp_poly(c[::-1], z)
            worst = max(worst, abs(got / mpmath.log1p(f) - 1))
    assert worst <= mpmath.mpf(2) ** -62.5, float(mpmath.log(worst, 2))


def test_the_float32_derivatives_float64_polynomials_are_within_2_to_the_minus_35():
    # _wide's exp and log1p, their float64 coefficients evaluated exactly.
    with mpmath.workdps(40):
        q = [mpmath.mpf(v) for v in _wide._EXP_Q]
        p = [mpmath.mpf(v) for v in _wide._LOG1P_P]
        worst_exp = worst_log = mpmath.mpf(0)
        for r in np.linspace(-HALF_LN2 * 1.0001, HALF_LN2 * 1.0001, 1001):
            r = mpmath.mpf(float(r))
            got = r + r * r * fit._mp_poly(q[::-1], r)
            worst_exp = max(worst_exp, abs(got - mpmath.expm1(r)) / mpmath.exp(r))
        for f in np.linspace(-0.25, 0.5, 1001):
            f = mpmath.mpf(float(f))
            if f == 0:
                continue
            got = f - f * f / 2 + f**3 * fit._mp_poly(p, f)
            worst_log = max(worst_log, abs(got / mpmath.log1p(f) - 1))
    assert worst_exp <= mpmath.mpf(2) ** -39.5, float(mpmath.log(worst_exp, 2))
    assert worst_log <= mpmath.mpf(2) ** -35.4, float(mpmath.log(worst_log, 2))


def test_the_float64_reciprocal_start_is_within_2_to_the_minus_9():
    # 1 / m on [1, 2]: two Newton steps from 2**-9.17 give 2**-36.7.
    m = np.linspace(1.0, 2.0, 20_001)
    y = np.polyval(np.array(_words._RECIP), m)
    assert np.max(np.abs(y * m - 1)) <= 2.0**-9.1


@pytest.mark.tools
@pytest.mark.parametrize("problem", fit.FITS, ids=lambda f: f"{f.module}.{f.name}")
def test_the_fitting_script_reproduces_the_committed_coefficients(problem):
    # Bit for bit: the fit is deterministic (mpmath, and float64 + - * /).
    got = fit.coefficients(problem)
    modules = {"_math": _math, "_math64": _math64, "_wide": _wide}
    committed = getattr(modules[problem.module], problem.name)
    assert [float(c) for c in got] == [float(c) for c in committed]
