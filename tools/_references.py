"""Ground truth for the tools and the tests: float64 and mpmath references
of every quantity the library returns, and the error in ulps.

References are computed from the rounded inputs (what the op was given), in
float64 by formulas without cancellation, or in mpmath where float64 is the
dtype under test. Only results whose exact value is a normal number of the
dtype, `LOWEST_ULPS` ulps above the smallest or more, count: XLA:CPU
flushes subnormal results to zero.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np


def _f64(x) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # a signaling NaN quiets on the way
        return np.asarray(x).astype(np.float64)


def _beta64(beta, dtype) -> np.float64:
    """beta as the library uses it: rounded to float32 unless data is f64."""
    if np.dtype(dtype) == np.float64:
        return np.float64(beta)
    return np.float64(np.float32(beta))


def sigmoid_ref(t: np.ndarray) -> np.ndarray:
    """Float64 sigmoid, stable on both sides."""
    with np.errstate(over="ignore", under="ignore"):
        e = np.exp(-np.abs(t))
        return np.where(t >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def backward_ref(src, diff_dst, beta) -> np.ndarray:
    """diff_dst * sigmoid(beta * src) in float64, from the rounded inputs.

    Where float64's own exp underflows (t < -700) the product is formed in
    logs, so that a huge diff_dst times a tiny sigmoid stays right.
    """
    s, d = _f64(src), _f64(diff_dst)
    b = _beta64(beta, np.asarray(src).dtype)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        t = b * s
        out = d * sigmoid_ref(t)
        deep = np.isfinite(t) & (t < -700) & np.isfinite(d) & (d != 0)
        logmag = np.log(np.abs(np.where(deep, d, 1.0))) + np.where(deep, t, 0.0)
        out = np.where(deep, np.sign(d) * np.exp(logmag), out)
        # sigmoid(t) > 0 for every finite t, so inf * sigmoid(t) = inf even
        # where float64's sigmoid underflows to 0.
        return np.where(np.isinf(d) & np.isfinite(t), d, out)


def softplus_ref(x, beta) -> np.ndarray:
    """(1/beta) log(1 + exp(beta x)) in float64, from the rounded input."""
    xs = _f64(x)
    b = _beta64(beta, np.asarray(x).dtype)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        t = b * xs
        part = np.log1p(np.exp(-np.abs(t))) / b
        return np.where(t > 0, xs + part, part)


# An exact value counts from this many ulps above the smallest normal: a
# result within its bound of the underflow threshold may come out below it,
# and a platform that flushes subnormal results (XLA:CPU, TPUs) then returns
# 0 (the default float32 and bfloat16 kernels did, for exact values less
# than a tenth of an ulp above it: tests/test_backward.py).
LOWEST_ULPS = 8


def normal_exact(ref, dtype) -> np.ndarray:
    """Where an exact value (float64, or hi + 1j * lo) is normal in `dtype`,
    at least `LOWEST_ULPS` ulps above the smallest normal."""
    info = jnp.finfo(dtype)
    lowest = float(info.tiny) * (1 + LOWEST_ULPS * float(info.eps))
    hi = np.real(ref)
    return np.isfinite(hi) & (np.abs(hi) >= lowest) & (np.abs(hi) <= float(info.max))


def ulp_error(got, ref, dtype) -> np.ndarray:
    """|got - ref| in ulps of `dtype` at `ref`, where `ref` is a normal number
    at least `LOWEST_ULPS` ulps above the smallest (`normal_exact`).

    Returns an empty array when no reference value is.
    """
    info = jnp.finfo(np.dtype(dtype))
    got, ref = _f64(got).ravel(), np.asarray(ref, np.float64).ravel()
    normal = normal_exact(ref, dtype)
    exponent = np.frexp(ref[normal])[1] - 1
    ulp = np.ldexp(1.0, exponent - info.nmant)
    with np.errstate(invalid="ignore"):
        return np.abs(got[normal] - ref[normal]) / ulp


# Derivatives -----------------------------------------------------------------


def slope_ref(t):
    """s(t) s(-t) = e^-|t| / (1 + e^-|t|)**2 in float64 (no overflow)."""
    with np.errstate(under="ignore"):
        e = np.exp(-np.abs(t))
        return e / (1.0 + e) ** 2


def dsoftplus_dbeta_ref(x, b):
    """d softplus / d beta = -(a s(-a) + log1p(e^-a)) / b**2, a = |b x|."""
    with np.errstate(under="ignore"):
        a = np.abs(b * x)
        e = np.exp(-a)
        return -(a * e / (1.0 + e) + np.log1p(e)) / b**2


def mp_derivatives():
    """The same quantities in mpmath (for float64), with no cancellation."""
    import mpmath

    def sig(t):
        return 1 / (1 + mpmath.exp(-t))

    def dbeta(x, b):
        a = abs(b * x)
        return -(a * sig(-a) + mpmath.log1p(mpmath.exp(-a))) / b**2

    return {
        "d softplus/d beta": dbeta,
        "d2 softplus/dx2": lambda x, b: b * sig(b * x) * sig(-b * x),
        "d2 softplus/dx dbeta": lambda x, b: x * sig(b * x) * sig(-b * x),
        "d softplus_backward/d src": lambda x, b: b * sig(b * x) * sig(-b * x),
        "d softplus_backward/d beta": lambda x, b: x * sig(b * x) * sig(-b * x),
    }


DERIVATIVE_REFS = {
    "d softplus/d beta": dsoftplus_dbeta_ref,
    "d2 softplus/dx2": lambda x, b: b * slope_ref(b * x),
    "d2 softplus/dx dbeta": lambda x, b: x * slope_ref(b * x),
    "d softplus_backward/d src": lambda x, b: b * slope_ref(b * x),
    "d softplus_backward/d beta": lambda x, b: x * slope_ref(b * x),
}


# Derivatives of every order, in mpmath ----------------------------------------
# A quantity is (function, (p, q, r)): d^p/dx^p d^q/dbeta^q d^r/ddd^r of
# "softplus"(x, beta) or "backward" = softplus_backward(x, dd, beta). Each
# comes with a scale, the sum of its terms' magnitudes: the size of what
# cancels in any evaluation in a finite dtype where the derivative has a zero
# of its own (it equals |value| elsewhere).


def _mp_sigmoid_derivatives(t, order):
    """[(s^(n)(t), scale)] for n = 0..order: the value and the magnitude of
    its terms, from s^(n) = w P_n(w, tau), w = s(t) s(-t), tau = tanh(t/2)."""
    import mpmath

    s, w, tau = 1 / (1 + mpmath.exp(-t)), None, mpmath.tanh(t / 2)
    w = s * (1 / (1 + mpmath.exp(t)))
    table = [
        (s, s),
        (w, w),
        (-w * tau, w * abs(tau)),
        (w * (1 - 6 * w), w * (1 + 6 * w)),
        (-w * tau * (1 - 12 * w), w * abs(tau) * (1 + 12 * w)),
        (w * (1 - 30 * w + 120 * w**2), w * (1 + 30 * w + 120 * w**2)),
    ]
    return table[: order + 1]


def _mp_sigmoid_mixed(p, q, x, b, sig):
    """d^p/dx^p d^q/db^q s(b x) = sum_r C(p,r) q!/(q-r)! x^(q-r) b^(p-r)
    s^(p+q-r)(t), with the sum of its terms' magnitudes."""
    import mpmath

    value = scale = mpmath.mpf(0)
    for r in range(min(p, q) + 1):
        c = math.comb(p, r) * math.factorial(q) // math.factorial(q - r)
        factor = c * x ** (q - r) * b ** (p - r)
        v, m = sig[p + q - r]
        value += factor * v
        scale += abs(factor) * m
    return value, scale


def _mp_softplus_mixed(p, q, x, b, sig):
    """d^p/dx^p d^q/db^q softplus(x, b), p + q >= 1."""
    import mpmath

    if p:
        return _mp_sigmoid_mixed(p - 1, q, x, b, sig)
    a = abs(b * x)
    d = -(a / (1 + mpmath.exp(a)) + mpmath.log1p(mpmath.exp(-a))) / b**2
    scale = abs(d)
    for k in range(2, q + 1):  # b D_k + k D_(k-1) = x^k s^(k-1)(t)
        v, m = sig[k - 1]
        d, scale = (x**k * v - k * d) / b, (abs(x**k) * m + k * scale) / abs(b)
    return d, scale


def _pair(v):
    """An mpmath value as hi + 1j * lo: hi its float64 rounding, lo the rest
    in float64 ulps of hi (so that it keeps its digits where hi is near the
    bottom of the normal range, where the rest itself would be subnormal)."""
    import mpmath

    hi = float(v)
    if not (mpmath.isfinite(v) and hi):
        return complex(hi, 0.0)
    ulp = mpmath.ldexp(1, math.frexp(hi)[1] - 53)
    return complex(hi, float((v - hi) / ulp))


def _ulp64(hi):
    """The float64 ulp of each (nonzero, finite) hi, as `_pair` measures lo."""
    return np.ldexp(1.0, np.frexp(hi)[1] - 53)


def exact_derivatives(quantities, x, b, dd):
    """{name: (value, scale)} for each (function, (p, q, r)): the value as
    a pair hi + 1j * lo (`_pair`: a float64 result is compared with the
    exact value, not with its rounding), the scale as a float64."""
    import mpmath

    out = {name: (np.empty(len(x), complex), np.empty(len(x))) for name in quantities}
    with mpmath.workdps(60):
        mb = mpmath.mpf(float(b))
        for k, (xv, dv) in enumerate(zip(x, dd, strict=True)):
            mx, md = mpmath.mpf(float(xv)), mpmath.mpf(float(dv))
            sig = _mp_sigmoid_derivatives(mb * mx, 5)
            for name, (fun, pqr) in quantities.items():
                v, m = _mp_derivative(fun, pqr, mx, mb, md, sig)
                out[name][0][k], out[name][1][k] = _pair(v), float(m)
    return out


def _mp_derivative(fun, pqr, x, b, dd, sig):
    import mpmath

    p, q, r = pqr
    if fun == "softplus":
        return _mp_softplus_mixed(p, q, x, b, sig)
    if r >= 2:
        return mpmath.mpf(0), mpmath.mpf(0)
    v, m = _mp_sigmoid_mixed(p, q, x, b, sig)
    return (v * dd, m * abs(dd)) if r == 0 else (v, m)


def mp_derivative(fun, pqr, x, b, dd=1):
    """(value, scale) of one derivative at one point, at 60 digits."""
    import mpmath

    with mpmath.workdps(60):
        x, b, dd = (mpmath.mpf(float(v)) for v in (x, b, dd))
        return _mp_derivative(fun, pqr, x, b, dd, _mp_sigmoid_derivatives(b * x, 5))


def derivative_error(got, ref, scale, dtype, relative=False) -> np.ndarray:
    """|got - exact| per element where the exact value is normal, in ulps of
    `dtype` at max(|exact|, scale), or relative to it; NaN counts as inf.

    `ref` is hi + 1j * lo (`_pair`), so that a float64 result is compared
    with the exact value rather than its rounding; `scale` is the sum of the
    terms' magnitudes, which exceeds |exact| only near a zero of the
    derivative's own.
    """
    info = jnp.finfo(dtype)
    normal = normal_exact(ref, dtype)
    hi, lo = np.real(ref)[normal], np.imag(ref)[normal]
    size = np.maximum(np.abs(hi), scale[normal])
    unit = size if relative else np.ldexp(1.0, np.frexp(size)[1] - 1 - info.nmant)
    with np.errstate(invalid="ignore", over="ignore"):
        # got - hi is exact where got is near hi; each quotient by a power
        # of two is exact too, down to the bottom of the normal range.
        near = (np.asarray(got, np.float64)[normal] - hi) / unit
        err = np.abs(near - lo * (_ulp64(hi) / unit))
    return np.where(np.isnan(err), np.inf, err)


# Values in mpmath, for float64 -------------------------------------------------


def exact_values(op, x, beta, dd=None):
    """The exact value of `op` ("backward" or "forward") per element, as a
    pair hi + 1j * lo (`_pair`: `derivative_error` compares a float64 result
    with the exact value, not with its rounding). A subnormal float64 input
    is 0, as XLA:CPU reads it."""
    import mpmath

    tiny = np.finfo(np.float64).tiny
    x = np.where(np.abs(np.asarray(x, np.float64)) < tiny, 0.0, x)
    if dd is not None:
        dd = np.where(np.abs(np.asarray(dd, np.float64)) < tiny, 0.0, dd)
    out = np.empty(len(x), complex)
    with mpmath.workdps(40):
        b = mpmath.mpf(float(beta))
        for k, xv in enumerate(x):
            t = b * mpmath.mpf(float(xv))
            if op == "backward":
                v = mpmath.mpf(float(dd[k])) / (1 + mpmath.exp(-t))
            elif t > 0:
                v = mpmath.mpf(float(xv)) + mpmath.log1p(mpmath.exp(-t)) / b
            else:
                v = mpmath.log1p(mpmath.exp(t)) / b
            out[k] = _pair(v)
    return out


# Derivatives of float32 data, in float64 -------------------------------------


def _f64_sigmoid_derivatives(t):
    """[(s^(n)(t), scale)] for n = 0..5 in float64, as
    `_mp_sigmoid_derivatives`: no cancellation, no overflow."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        e = np.exp(-np.abs(t))
        s = np.where(t >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        w = e / (1.0 + e) ** 2
        tau = np.tanh(t / 2)
        return [
            (s, s),
            (w, w),
            (-w * tau, w * np.abs(tau)),
            (w * (1 - 6 * w), w * (1 + 6 * w)),
            (-w * tau * (1 - 12 * w), w * np.abs(tau) * (1 + 12 * w)),
            (w * (1 - 30 * w + 120 * w**2), w * (1 + 30 * w + 120 * w**2)),
        ]


def f64_derivatives(quantities, x, b, dd):
    """{name: (value, scale)} for each (function, (p, q, r)) in float64
    (`exact_derivatives`' formulas), for float32 (or narrower) inputs: each
    within a few float64 ulps of the exact value, about 1e-8 of a float32
    ulp, wherever the value is a normal float32. A screen for searches
    over millions of points; mpmath confirms what it finds."""
    x, dd = _f64(x), _f64(dd)
    b = np.float64(b)
    t = b * x
    sig = _f64_sigmoid_derivatives(t)
    out = {}
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for name, (fun, (p, q, r)) in quantities.items():
            if fun == "softplus":
                if p:
                    v, m = _f64_mixed(p - 1, q, x, b, sig)
                else:
                    a = np.abs(t)
                    e = np.exp(-a)
                    v = -(a * e / (1 + e) + np.log1p(e)) / b**2
                    m = np.abs(v)
                    for k in range(2, q + 1):
                        sv, sm = sig[k - 1]
                        xk = x**k
                        v, m = (xk * sv - k * v) / b, (np.abs(xk) * sm + k * m) / abs(b)
            elif r >= 2:
                v = m = np.zeros_like(x)
            else:
                v, m = _f64_mixed(p, q, x, b, sig)
                if r == 0:
                    v, m = v * dd, m * np.abs(dd)
            out[name] = (v, m)
    return out


def _f64_mixed(p, q, x, b, sig):
    value = scale = 0.0
    for r in range(min(p, q) + 1):
        c = math.comb(p, r) * math.factorial(q) // math.factorial(q - r)
        factor = c * x ** (q - r) * b ** (p - r)
        v, m = sig[p + q - r]
        value = value + factor * v
        scale = scale + np.abs(factor) * m
    return value, scale
