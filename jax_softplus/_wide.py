"""The derivative families of float32 compute, evaluated in float64.

`_derivatives` evaluates every derivative as a sum of two families,
`dd src**i beta**j s^(n)(t)` (s the sigmoid, t = beta src) and
`d^k softplus / d beta^k`. For float32 (and bfloat16 and float16) data on
a CPU these are evaluated here, in float64, and rounded once to float32:

* the product t = beta src of two float32 values is exact in float64, and
  float64's exponent range holds every factor a float32 derivative can
  have (src**5 of 3.4e38 is 4.5e192, exp(-700) is 1e-304), so no exponent
  bookkeeping is needed;
* exp(-|t|) and 1 / (1 + exp(-|t|)) come from `_math64`'s reduction and
  Newton reciprocal, accurate to 2**-36 or better, so that the float32
  result is within about half an ulp wherever the derivative has no
  cancellation of its own.

Every operation is a cheap one for XLA (the one `log1p` has one consumer):
XLA will not duplicate an expensive operation into several consumers, and
a derivative's families then stay in one loop (`_math64._reciprocal`).

A float64 operation needs x64 on while it is traced; `_float64` turns it on
for the evaluation's trace only, whatever the user's setting. The caller
(`_derivatives`) takes this path on CPUs only (`lax.platform_dependent`):
TPUs have no float64, and a GPU's float64 rate is a fraction of its
float32 rate.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_softplus import _math, _math64

_F32 = np.float32
_F64 = np.float64
# Beyond |t| = 700 (exp(-700) = 1e-304, still normal in float64) every
# term of a float32 derivative is below 1e-61 (its factors are below
# 1e243): the clamp keeps inf * exp(-|t|) inf and |t|**m finite.
_A_MAX = 700.0


def _float64():
    """A context in which float64 operations trace as float64."""
    enable = getattr(jax, "enable_x64", None)
    if enable is None:  # pragma: no cover - JAX without the context manager
        return contextlib.nullcontext()
    return enable(True)


def _flushed(beta):
    """beta, with a subnormal beta as 0 (what the public boundary does to a
    concrete one, and what the CPU's arithmetic reads)."""
    tiny = _F32(np.finfo(np.float32).tiny)
    return lax.select(lax.abs(beta) < tiny, lax.full_like(beta, 0), beta)


class _Sigmoid:
    """s(t), s'(t) = w, tau = tanh(t / 2) and their inputs at t = beta src,
    in float64 from float32 operands."""

    def __init__(self, src, beta):
        self.x = lax.convert_element_type(src, _F64)
        self.b = lax.convert_element_type(_flushed(beta), _F64)
        self.t = self.b * self.x  # exact
        a = lax.min(lax.abs(self.t), lax.full_like(self.t, _A_MAX))
        self.a = a
        k, _, p, pl = _math64._exp_reduce(-a, lax.full_like(a, 0))
        e = (1.0 + p) * _math.exp2_int(k, _F64)
        self.e = e  # exp(-|t|), to 2**-52
        # expm1(-|t|), without 1 - e's cancellation below |t| = ln(2) / 2.
        self.em1 = lax.select(k == 0, p + pl, e - 1.0)
        self.u = _math64._reciprocal(1.0 + e)  # s(|t|), 1 + e in [1, 2]

    @functools.cached_property
    def value(self):
        return lax.select(self.t >= 0, self.u, self.e * self.u)

    @functools.cached_property
    def slope(self):  # w = s(t) s(-t)
        return self.e * (self.u * self.u)

    @functools.cached_property
    def tau(self):
        return jnp.sign(self.t) * (-self.em1 * self.u)


def _power(v, k):
    out = None
    for _ in range(abs(k)):
        out = v if out is None else out * v
    if out is None:
        return None
    return out if k > 0 else 1.0 / out


def _combination(terms, sig, slope_polynomial):
    """sum c src**i beta**j s^(n)(t) over `terms`, in float64 (no dd)."""
    tc = lax.clamp(-_A_MAX, sig.t, _A_MAX)
    base = None
    slope = None
    for c, n, i, j in terms:
        if n == 0:
            # The families start at dd s(t); d/dsrc and d/dbeta raise n for
            # every term with i = j = 0, so s(t) is never multiplied by a
            # power (which could be inf times s(-inf) = 0).
            assert i == j == 0, (n, i, j)
            v = sig.value
        else:
            even, odd = slope_polynomial(n)
            w = sig.slope
            poly = _horner64(even, w) if any(even) else None
            if any(odd):
                tail = sig.tau * _horner64(odd, w)
                poly = tail if poly is None else poly + tail
            # src**i beta**j = t**m src**(i - m) beta**(j - m): one of the two
            # powers is 1, and t**m is of the clamped t, so that a factor
            # stays finite where s^(n) is 0.
            m = i if j < 0 else min(i, j)
            v = w * poly
            for factor in (_power(tc, m), _power(sig.x, i - m), _power(sig.b, j - m)):
                if factor is not None:
                    v = v * factor
            if c != 1:
                v = v * float(c)
            slope = v if slope is None else slope + v
            continue
        base = v * float(c) if base is None else base + v * float(c)
    if slope is not None:
        # src**i s^(n)(beta src) -> 0 as src -> +-inf, for n >= 1 (beta != 0;
        # for beta = 0, t = 0 * inf is NaN and stays so).
        slope = lax.select(
            jnp.isinf(sig.x) & (sig.b != 0), jnp.zeros_like(slope), slope
        )
    if base is None:
        return slope
    return base if slope is None else base + slope


def _horner64(coeffs, w):
    """sum c_a w**a (integer coefficients, lowest first) in float64."""
    out = None
    for c in coeffs[::-1]:
        out = jnp.full_like(w, float(c)) if out is None else out * w + float(c)
    return out


def combination(terms, slope_polynomial, src, beta, dd=None):
    """dd * sum c src**i beta**j s^(n)(beta src), as float32."""
    with _float64():
        sig = _Sigmoid(src, beta)
        out = _combination(terms, sig, slope_polynomial)
        if dd is not None:
            out = out * lax.convert_element_type(dd, _F64)
        return lax.convert_element_type(out, _F32)


def dbeta(k, dbeta_terms, slope_polynomial, x, beta):
    """D_k = d^k softplus / d beta^k, as float32.

    D_1 = -(a s(-a) + log1p(e^-a)) / beta**2, a = |t|, a sum of two
    positive terms; D_k = (combination) + gamma beta**(1-k) D_1
    (`_derivatives._dbeta_terms`). Where x is +-inf, a is clamped and D_1
    is 0 to float32, as is every D_k: softplus(+-inf, beta) does not depend
    on beta.
    """
    with _float64():
        sig = _Sigmoid(x, beta)
        b = sig.b
        first = -(sig.a * (sig.e * sig.u) + jnp.log1p(sig.e)) / (b * b)
        if k == 1:
            out = first
        else:
            terms, gamma = dbeta_terms(k)
            out = _combination(terms, sig, slope_polynomial)
            out = out + first * (float(gamma) * _power(b, 1 - k))
        return lax.convert_element_type(out, _F32)
