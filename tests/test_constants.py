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

from jax_softplus import _math

mpmath.mp.dps = 40
F32 = np.float32
HALF_LN2 = math.log(2.0) / 2


def _grid(lo, hi, n=20_001):
    return np.linspace(lo, hi, n).astype(F32)


def _exact(fn, xs):
    return np.array([float(fn(mpmath.mpf(float(x)))) for x in xs])


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


@pytest.mark.parametrize("problem", fit.FITS, ids=lambda f: f.name)
def test_the_fitting_script_reproduces_the_committed_coefficients(problem):
    # Bit for bit: the fit is deterministic (mpmath, and float64 + - * /).
    got = fit.float32_coefficients(problem)
    committed = getattr(_math, problem.name)
    assert [float(c) for c in got] == [float(c) for c in committed]
