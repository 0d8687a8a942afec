"""The derivative families of float32 compute, evaluated in float64.

`_derivatives` writes every derivative as a sum of two families,
`dd src**i beta**j s^(n)(t)` (s the sigmoid, t = beta src) and
`d^k softplus / d beta^k`. For float32 (and bfloat16 and float16) data on
a CPU these are evaluated here, in float64, and rounded once to float32:

* the product t = beta src of two float32 values is exact in float64, and
  float64's exponent range holds every factor a float32 derivative can
  have (src**5 of 3.4e38 is 4.5e192, exp(-700) is 1e-304), so no exponent
  bookkeeping is needed;
* exp(-|t|), log1p(exp(-|t|)) and 1 / (1 + exp(-|t|)) come from short
  polynomials and `_math64`'s Newton reciprocal, accurate to 2**-35 or
  better (a float32 result needs no more), so that the float32 result is
  within about half an ulp wherever the derivative has no cancellation of
  its own.

Every operation is a cheap one for XLA: XLA will not duplicate an
expensive operation (exp, log1p, a division) into several consumers, and a
derivative's families then stay in one loop (`_words.reciprocal`).

A float64 operation needs x64 on while it is traced; `_float64` turns it on
for the evaluation's trace only, whatever the user's setting. The caller
(`_families.softplus_family_p`) takes this path wherever the platform has
float64 (CPUs, CUDA and ROCm GPUs); TPUs, which have none, take the
float32 evaluation with its exponents carried apart.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_softplus import _math, _math64, _series, _words

_F32 = np.float32
_F64 = np.float64
_LN2 = 0.6931471805599453
# A float32 result needs its float64 intermediates to about 2**-35 only, so
# these polynomials are shorter than `_math64`'s (`python maintainers/fit.py
# _EXP_Q32 _LOG1P_P32`): q in expm1(r) = r + r**2 q(r) on [-ln 2 / 2,
# ln 2 / 2] widened by 1e-4, error relative to exp(r) below 2**-39.6,
# highest first; P in log1p(f) = f - f**2/2 + f**3 P(f) on [-1/4, 1/2],
# relative error below 2**-35.5, lowest first.
_EXP_Q = (
    2.470825806046183e-05,
    0.0001990895228588494,
    0.0013889197278122614,
    0.008333281787825265,
    0.041666664403585164,
    0.16666666784511155,
    0.5000000000427169,
)
_LOG1P_P = (
    0.33333332756212275,
    -0.24999995860760352,
    0.20000076854832283,
    -0.1666716326687522,
    0.14283091103385806,
    -0.12479616660302487,
    0.1112576796864729,
    -0.10324100890590565,
    0.09591382433592034,
    -0.07074216251581258,
    0.026522554509698298,
)
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
        # exp(-a) = 2**k (1 + p), k the nearest integer to -a / ln 2.
        k, _, p, _ = _math64._exp_reduce(lax.neg(a), poly=_EXP_Q)
        self.e = (1.0 + p) * _math.exp2_int(k, _F64)  # exp(-|t|), to 2**-39
        # expm1(-|t|), without 1 - e's cancellation below |t| = ln(2) / 2.
        self.em1 = lax.select(k == 0, p, self.e - 1.0)
        self.u = _words.reciprocal(1.0 + self.e)  # s(|t|), 1 + e in [1, 2]

    @functools.cached_property
    def log1p(self):
        """log1p(exp(-|t|)): 1 + e = 2**j (1 + f), f in [-1/4, 1/2] (f = e
        below e = 1/2, (e - 1) / 2 above, exact), f - f**2/2 + f**3 P(f)."""
        big = self.e >= 0.5
        f = lax.select(big, (self.e - 1.0) * 0.5, self.e)
        f2 = f * f
        poly = _math64._estrin(_LOG1P_P[::-1], f)
        out = f + (f2 * (f * poly) - 0.5 * f2)
        return lax.select(big, out + _LN2, out)

    @functools.cached_property
    def slope(self):  # w = s(t) s(-t)
        return self.e * (self.u * self.u)

    @functools.cached_property
    def tau(self):
        return jnp.sign(self.t) * (-self.em1 * self.u)


def _combination(terms, sig):
    """sum c src**i beta**j s^(n)(t) over `terms` (each n >= 1: s itself is
    the primitive), in float64 (no dd)."""
    tc = lax.clamp(-_A_MAX, sig.t, _A_MAX)
    out = None
    for c, n, i, j in terms:
        even, odd = _series.slope_polynomial(n)
        w = sig.slope
        poly = _words.horner(even[::-1], w) if any(even) else None
        if any(odd):
            tail = sig.tau * _words.horner(odd[::-1], w)
            poly = tail if poly is None else poly + tail
        # src**i beta**j = t**m src**(i - m) beta**(j - m): one of the two
        # powers is 1, and t**m is of the clamped t, so that a factor stays
        # finite where s^(n) is 0.
        m = i if j < 0 else min(i, j)
        v = w * poly
        for of, k in ((tc, m), (sig.x, i - m), (sig.b, j - m)):
            factor = _math.power(of, k)
            if factor is not None:
                v = v * factor
        if c != 1:
            v = v * float(c)
        out = v if out is None else out + v
    # src**i s^(n)(beta src) -> 0 as src -> +-inf, for n >= 1 (beta != 0;
    # for beta = 0, t = 0 * inf is NaN and stays so).
    return lax.select(jnp.isinf(sig.x) & (sig.b != 0), jnp.zeros_like(out), out)


def combination(terms, hints, src, beta, dd=None):
    """dd * sum c src**i beta**j s^(n)(beta src), as float32 (`hints` are
    moot: the product is exact in float64)."""
    del hints
    with _float64():
        sig = _Sigmoid(src, beta)
        out = _combination(terms, sig)
        if dd is not None:
            out = out * lax.convert_element_type(dd, _F64)
        return lax.convert_element_type(out, _F32)


def dbeta(k, hints, x, beta):
    """D_k = d^k softplus / d beta^k, as float32.

    D_1 = -(a s(-a) + log1p(e^-a)) / beta**2, a = |t|, a sum of two
    positive terms; D_k = (combination) + gamma beta**(1-k) D_1
    (`_series.dbeta_terms`). Where x is +-inf, a is clamped and D_1
    is 0 to float32, as is every D_k: softplus(+-inf, beta) does not depend
    on beta.
    """
    del hints
    with _float64():
        sig = _Sigmoid(x, beta)
        b = sig.b
        first = (sig.a * (sig.e * sig.u) + sig.log1p) * (-1.0 / (b * b))
        if k == 1:
            out = first
        else:
            terms, gamma = _series.dbeta_terms(k)
            out = _combination(terms, sig)
            out = out + first * (float(gamma) * _math.power(b, 1 - k))
        return lax.convert_element_type(out, _F32)
