"""Ground truth for the tools and the tests: float64 and mpmath references
of every quantity the library returns, and the error in ulps.

References are computed from the rounded inputs (what the op was given), in
float64 by formulas without cancellation, or in mpmath where float64 is the
dtype under test. Only results whose exact value is a normal number of the
dtype count: XLA:CPU flushes subnormal results to zero.
"""

from __future__ import annotations

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


def ulp_error(got, ref, dtype) -> np.ndarray:
    """|got - ref| in ulps of `dtype` at `ref`, where `ref` is a normal number.

    Returns an empty array when no reference value is normal.
    """
    info = jnp.finfo(np.dtype(dtype))
    got, ref = _f64(got).ravel(), np.asarray(ref, np.float64).ravel()
    normal = np.isfinite(ref) & (np.abs(ref) >= float(info.tiny))
    normal &= np.abs(ref) <= float(info.max)
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
