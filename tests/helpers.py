"""Float64 references, ulp measurement and per-dtype tolerances."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
BETAS = (1.0, 0.5, 3.0, -1.0, -2.5)

# Max error in ulps of the result's dtype, wherever the exact result is a
# normal number. f32: the bound of the numerics issue (2.5); half types:
# within 1 ulp of the correctly rounded value.
ULP_BOUND = {
    np.dtype(jnp.float32): 2.5,
    np.dtype(jnp.bfloat16): 1.0,
    np.dtype(jnp.float16): 1.0,
    np.dtype(jnp.float64): 4.0,
}


def f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def sigmoid_ref(t: np.ndarray) -> np.ndarray:
    """Float64 sigmoid, stable on both sides."""
    e = np.exp(-np.abs(t))
    return np.where(t >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def backward_ref(src, diff_dst, beta) -> np.ndarray:
    """diff_dst * sigmoid(beta * src) in float64, from the rounded inputs.

    Where sigmoid underflows even float64 (t < -745) the product is formed
    from logs, so that a huge diff_dst times a tiny sigmoid stays right.
    """
    s, d = f64(src), f64(diff_dst)
    b = np.float64(np.float32(beta))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        t = b * s
        out = d * sigmoid_ref(t)
        deep = np.isfinite(t) & (t < -700) & np.isfinite(d) & (d != 0)
        logmag = np.log(np.abs(np.where(deep, d, 1.0))) + np.where(deep, t, 0.0)
        out = np.where(deep, np.sign(d) * np.exp(logmag), out)
    return out


def softplus_ref(x, beta) -> np.ndarray:
    """(1/beta) log(1 + exp(beta x)) in float64."""
    xs = f64(x)
    b = np.float64(np.float32(beta))
    with np.errstate(over="ignore", invalid="ignore"):
        t = b * xs
        part = np.log1p(np.exp(-np.abs(t))) / b
        return np.where(t > 0, xs + part, part)


def ulp_error(got, ref, dtype) -> np.ndarray:
    """|got - ref| in ulps of `dtype` at ref, for refs that are normal numbers.

    Returns an empty array when no reference value is normal.
    """
    dtype = np.dtype(dtype)
    info = jnp.finfo(dtype)
    got, ref = f64(got).ravel(), np.asarray(ref, np.float64).ravel()
    normal = np.isfinite(ref) & (np.abs(ref) >= float(info.tiny))
    normal &= np.abs(ref) <= float(info.max)
    exponent = np.frexp(ref[normal])[1] - 1
    ulp = np.ldexp(1.0, exponent - info.nmant)
    return np.abs(got[normal] - ref[normal]) / ulp


def max_ulp(got, ref, dtype) -> float:
    err = ulp_error(got, ref, dtype)
    return float(err.max()) if err.size else 0.0


def random_src(rng, n, beta, dtype, t_range=(-30.0, 30.0)):
    """src values whose beta * src spans t_range, rounded to dtype."""
    t = rng.uniform(*t_range, n)
    b = beta if beta != 0 else 1.0
    return jnp.asarray((t / b).astype(np.float32), dtype)


def random_dd(rng, n, dtype, scale=1.0):
    mag = scale * np.exp(rng.uniform(-2.0, 2.0, n))
    sign = rng.choice([-1.0, 1.0], n)
    return jnp.asarray((mag * sign).astype(np.float32), dtype)
