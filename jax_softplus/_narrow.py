"""The derivative families in the compute dtype, in double words.

`_derivatives` writes every derivative as a sum of two families:
combinations dd * sum c src**i beta**j s^(n)(t) (s the sigmoid, t = beta
src) and D_k = d^k softplus / d beta^k. Where the platform has no float64
(TPUs) float32 compute is evaluated here, in float32; float64 data is
evaluated here on every platform. (Where float64 exists, float32 compute
goes to `_wide`.)

Each term is a double word (h, l), an unevaluated sum of two values of the
dtype, times 2**k with k an int32 carried apart, and is rounded once, at
the end:

* e = e^-a, a = |t|, comes from the exact product (its rounding error
  enters the reduction) as 2**k (eh + el) (`_Exp`), so that nothing
  underflows however far the tail: a float32 derivative can be normal at
  |t| = 350 (a diff_dst of 3e38 times src**2 of 1e76), float64 at 2800.
* s'(t) = e / (1 + e)**2, s(-a) = e / (1 + e) and tanh(t / 2) are
  quotients of double words (a Newton reciprocal and the remainder's
  correction: no division with two consumers, which XLA would not fuse).
* the factors src**i beta**j (their significands; the exponents are
  carried apart) multiply the double word exactly (Dekker's product), and
  the terms are summed aligned to the largest exponent, with the sum's
  errors kept.

What rounds is the exponential's polynomial (2**-26.7 relative in
float32, 2**-63 in float64), log1p's for D_1 (0.85 ulp in float32), the
tanh series' smaller term, and the result: float32 derivatives within
about 1.5 ulp where a platform's float32 arithmetic is IEEE (the bounds,
found by search, are in docs/accuracy.md). XLA:CPU flushes subnormals, so
no intermediate may pass through one: the exponent bookkeeping sees to it.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_softplus import _math, _math64, _series, _words

_F32 = np.dtype(np.float32)
# Where `_exp_pair` clamps a = |t|: its exponent stays an int32, and every
# term of any order is far below the dtype's range beyond.
_CLAMP = {_F32: 2000.0, np.dtype(np.float64): 20000.0}
# The lowest exponent of a normal number.
_LOWEST = {_F32: -126, np.dtype(np.float64): -1022}
# Where log1p(e^-a) = s(-a) to below half an ulp (relative error e^-a / 2):
# above a = 17 in float32, 38 in float64.
_DBETA_SWITCH = {_F32: 17.0, np.dtype(np.float64): 38.0}
# Below |t| = 1.4 tanh(t/2) from its series, to well below an ulp: XLA's
# tanh and expm1 reach 3.8 and 4.8 ulp in float32 there (and tanh 6 ulp in
# float64 near |t| = 37). At y = t/2 = 0.7 each term is 0.2 of the one
# before: 12 terms leave 2**-28, 30 leave 2**-70.
_TANH_TERMS = {_F32: 12, np.dtype(np.float64): 30}


# Double words ----------------------------------------------------------------


def _div_by(x, m, times):
    """(y, shift) with y 2**shift = x / m**times, y a double word, for a
    significand m in [1/2, 1) of either sign: one quotient, by (2|m|)**times
    as a double word, its significand taken into [1, 4)."""
    two_m = 2 * lax.abs(m)
    d = (two_m, jnp.zeros_like(two_m))
    for _ in range(times - 1):
        d = _words.mul(d, two_m)
    md, ed = _frexp(d[0])  # md in [1/2, 1): 4 md in [2, 4)
    shift = times + 2 - ed
    y = _words.div(x, (4 * md, _math.times_pow2(d[1], 2 - ed)))
    if times % 2:
        y = (y[0] * jnp.sign(m), y[1] * jnp.sign(m))
    return y, shift


# e^-|t| ---------------------------------------------------------------------


def _exp_pair(z, zl):
    """(k, (eh, el)) with 2**k (eh + el) = exp(z + zl), eh + el in
    [0.7, 1.42]: a Cody-Waite reduction whose exact part rides along as the
    low word (float32: within 2**-26.3 relative, the polynomial's error;
    float64: `_math64._exp_reduce`, 2**-62)."""
    if z.dtype == np.float64:
        k, _, p, pl = _math64._exp_reduce(z, zl)
        hi, lo = _words.fast_two_sum(_words.one(p), p)
        return k.astype(np.int32), _words.fast_two_sum(hi, lo + pl)
    k, _, (rh, rest) = _math._exp_reduce(z, zl, split=True)
    hi, lo = _words.fast_two_sum(_words.one(rh), rh)
    return k, _words.fast_two_sum(hi, lo + rest)


class _Exp:
    """e = e^-a, a = |beta src| exactly, as 2**k (eh + el), and what the
    families are evaluated from: nothing here leaves the dtype's range (the
    exponent k is carried apart), and only e's polynomial rounds."""

    def __init__(self, src, beta):
        cdt = np.dtype(beta.dtype)
        t = beta * src
        # Beyond |t| = _CLAMP every term is 0 in the dtype, src**4 beta**4
        # diff_dst included: t is clamped there, and where the product
        # overflowed (a masked finfo.min element) its error is not NaN.
        clamped = jnp.clip(t, -_CLAMP[cdt], _CLAMP[cdt])
        err = _math64.balanced_product_error(src, beta, t)
        err = jnp.where((t == clamped) & jnp.isfinite(err), err, jnp.zeros_like(err))
        self.t, self.err = clamped, err
        # -a = z + zl.
        z = lax.neg(lax.abs(clamped))
        self.k, self.pair = _exp_pair(z, lax.neg(jnp.sign(t)) * err)
        # e itself, where it is normal; below, 1 + e is 1 to far below
        # rounding and a flushed e changes nothing.
        scale = _math.exp2_int(jnp.maximum(self.k, _LOWEST[cdt]), cdt)
        self.e = (self.pair[0] * scale, self.pair[1] * scale)
        # 1 + e, exactly as a double word.
        dh, dl = _words.fast_two_sum(_words.one(z), self.e[0])
        self.d = (dh, dl + self.e[1])

    @functools.cached_property
    def d2(self):
        """(1 + e)**2 as a double word."""
        return _words.mul2(self.d, self.d)

    def slope(self, md):
        """md s(t) s(-t) = md e / (1 + e)**2 as (double word, k)."""
        return _words.div(_words.mul(self.pair, md), self.d2), self.k

    @functools.cached_property
    def w(self):
        """s(t) s(-t) in the dtype (0 below its normal range), for the
        polynomials of orders 3 and up."""
        v, k = self.slope(jnp.ones_like(self.pair[0]))
        return _math.times_pow2(_words.value(v), k)

    def tanh_half(self):
        """tanh(t / 2) of the exact t as a double word: below |t| = 1.4 its
        series y + y**3 (c_2 + y**2 Q(y**2)), y = t / 2, corrected by the
        product's error (d tanh(t/2) / dt = 2 w); above, 1 - 2 s(-a), which
        cancels less than a third of a bit, with its sign.

        In the series y**3 c_2 is up to a sixth of the sum (at |t| = 1.4),
        so it is a product of double words (c_2 = -1/3 as one): rounded to
        one word it left tau 2**-53 off, and second derivatives just below
        a power of two 1.02 ulp off in float64. y**2 Q, a fifth of c_2 at
        most, rounds in one word.
        """
        t = self.t
        cdt = np.dtype(t.dtype)
        y = t * 0.5
        y2 = _words.two_prod(y, y)
        y3 = _words.mul(y2, y)
        coeffs = _series.tanh_series(_TANH_TERMS[cdt])
        c2h, c2l = _series.tanh_coefficient_word(2, cdt)
        tail = y2[0] * _words.horner(coeffs[:1:-1], y2[0])
        c2 = _words.fast_two_sum(lax.full_like(y, c2h), tail)
        rh, rl = _words.mul2(y3, (c2[0], c2[1] + c2l))
        rl = rl + 2 * self.w * self.err
        sh, sl = _words.div(self.e, self.d)  # s(-a), normal where a < 87
        th, tl = _words.fast_two_sum(_words.one(sh), -2 * sh)
        sign = jnp.sign(t)
        near = lax.abs(t) < 1.4
        # y + rh: |rh| < |y| / 6, so that the sum's error is exact.
        sh2, se = _words.fast_two_sum(y, rh)
        return _words.fast_two_sum(
            jnp.where(near, sh2, sign * th),
            jnp.where(near, se + rl, sign * (tl - 2 * sl)),
        )


def _frexp(v):
    m, e = jnp.frexp(v)
    return m, e.astype(np.int32)


# Combinations ------------------------------------------------------------------
# A term (c, n, i, j) is dd src**i beta**j s^(n)(t) times c; each is a
# double word times 2**k (a "part"), and the parts are summed aligned to
# the largest exponent.


def _normalized(x, k):
    """(x 2**-e, k + e) with the high word's significand in [1/2, 1): the
    aligned sum must not shift a part out of range."""
    m, e = _frexp(x[0])
    return (m, _math.times_pow2(x[1], -e)), k + e


def _parts(terms, src, beta, dd=None, exp=None):
    """The parts of a combination's terms (each n >= 1: s itself is the
    primitive), in beta's dtype."""
    cdt = beta.dtype
    src = src.astype(cdt)
    # A power of src multiplies only a slope term, which is 0 at an infinite
    # src: its significand there is that of 0, not inf (inf * 0 would be
    # NaN).
    inf_src = jnp.isinf(src)
    ms, es = _frexp(jnp.where(inf_src, jnp.zeros_like(src), src))
    mb, eb = _frexp(beta)
    md, ed = _frexp(dd.astype(cdt)) if dd is not None else (None, 0)
    md = jnp.ones_like(src) if md is None else md * jnp.ones_like(src)
    tau = None
    exp = exp or _Exp(src, beta)
    v, k = exp.slope(md)
    # src**i s^(n)(beta src) -> 0 as src -> +-inf, for n >= 1 (beta != 0;
    # for beta = 0, t = 0 * inf is NaN and stays so).
    gone = inf_src & (beta != 0)
    v = tuple(jnp.where(gone, jnp.zeros_like(u), u) for u in v)
    base = _normalized(v, ed + k)
    parts = []
    for c, n, i, j in terms:
        v, k = base
        for _ in range(i):
            v = _words.mul(v, ms)
        for _ in range(max(j, 0)):
            v = _words.mul(v, mb)
        if j < 0:
            v, shift = _div_by(v, mb, -j)
            k = k + shift
        if n >= 2:
            even, odd = _series.slope_polynomial(n)
            if tau is None:
                tau = exp.tanh_half()
            poly = None
            if any(odd):
                poly = _words.mul(tau, _words.horner(odd[::-1], exp.w))
            if any(even):
                a = _words.horner(even[::-1], exp.w)
                poly = (a, jnp.zeros_like(a)) if poly is None else _add(poly, a)
            v = _words.mul2(v, poly)
        if c != 1:
            v = (v[0] * c, v[1] * c)  # exact: c is a small integer
        parts.append((v, k + es * i + eb * j))
    return parts


def _add(x, f):
    s, e = _words.two_sum(x[0], f)
    return s, e + x[1]


def _aligned(parts):
    """(double word, top) with sum of the parts = its value 2**top: each
    part scaled to the largest k (of those not zero), the sum's rounding
    errors kept in the low word."""
    floor = np.int32(-(2**20))
    top = functools.reduce(
        jnp.maximum, [jnp.where(v[0] == 0, floor, k) for v, k in parts]
    )
    total = None
    for (hi, lo), k in parts:
        hi, lo = _math.times_pow2(hi, k - top), _math.times_pow2(lo, k - top)
        if total is None:
            total = (hi, lo)
        else:
            s, e = _words.two_sum(total[0], hi)
            total = (s, (total[1] + lo) + e)
    return total, top


def _aligned_sum(parts):
    """The parts' sum, rounded once."""
    total, top = _aligned(parts)
    return _math.times_pow2(_words.value(total), top)


def combination(terms, hints, src, beta, *dd):
    """dd * sum c src**i beta**j s^(n)(beta src) over `terms`, in beta's
    dtype (`hints` are moot: the products are exact double words)."""
    del hints
    if not dd:
        return _aligned_sum(_parts(terms, src, beta))
    # An infinite dd multiplies the sum, as in `_wide`: inf times each term
    # would make inf - inf of a sum whose sign is known.
    (dd,) = dd
    big = jnp.isinf(dd)
    unit = jnp.where(big, jnp.sign(dd), dd)
    out = _aligned_sum(_parts(terms, src, beta, unit))
    return jnp.where(big, out * dd.astype(out.dtype), out)


# D_k = d^k softplus / d beta^k ---------------------------------------------------


def _dbeta1_parts(x, beta, exp, coef, j):
    """coef * beta**j * D_1 as parts.

    D_1 = -G / beta**2, G = a s(-a) + log1p(e^-a), a = |beta x|: the same
    expression for either sign of beta x, and a sum of two positive terms,
    so nothing cancels (the textbook (x s(beta x) - softplus(x)) / beta
    loses every digit for beta x above about 17). With s(-a) = e / (1 + e),
    one quotient: G beta**(j - 2) = (a e + log1p(e) (1 + e)) / ((1 + e)
    beta**(2 - j)). Above a = 17 (38 in float64) log1p(e) is e / (1 + e)
    to below half an ulp, and the numerator is (a + 1) e, its exponent
    apart (`_Exp`); below, e is normal and log1p(e) a double word.
    """
    cdt = np.dtype(beta.dtype)
    t = exp.t
    # a = |t| exactly, as a double word.
    a = (lax.abs(t), jnp.sign(t) * exp.err)
    far = lax.abs(t) > _DBETA_SWITCH[cdt]
    if cdt == np.float64:
        log = _words.fast_two_sum(*_math64._log1p(*exp.e))
    else:
        log = (_math._log1p_small(*exp.e), jnp.zeros_like(t))
    near = _add2(_words.mul2(a, exp.e), _words.mul2(log, exp.d))
    a1 = _add(a, _words.one(t))
    num = tuple(
        jnp.where(far, u, v)
        for u, v in zip(_words.mul2(a1, exp.pair), near, strict=True)
    )
    k = jnp.where(far, exp.k, 0)
    # The denominator: (1 + e) |beta|**n, n = 2 - j, as a double word in
    # [1, 4): |beta|**n = mn 2**en with mn in [1, 2) (from beta's
    # significand, once for a 0-d beta), times 1 + e in [1, 2].
    mb, eb = _frexp(beta)
    power = 2 - j
    mn = (2 * lax.abs(mb), jnp.zeros_like(mb))
    for _ in range(power - 1):
        mn = _words.mul(mn, 2 * lax.abs(mb))
    f, en = _frexp(mn[0])  # (2|mb|)**n = 2 f 2**(en - 1), 2 f in [1, 2)
    mn = (2 * f, _math.times_pow2(mn[1], 1 - en))
    g = _words.div(num, _words.mul2(exp.d, mn))
    # G / beta**n = g / (2 f) 2**(-(en - 1) + n - n eb) sign(beta)**n.
    sign = jnp.sign(mb) if power % 2 else jnp.ones_like(mb)
    c = -coef * sign  # exact: coef is a small integer
    g = (g[0] * c, g[1] * c)
    return [_normalized(g, k + power + 1 - en - eb * power)]


def _add2(x, y):
    """The double words x plus y."""
    s, e = _words.two_sum(x[0], y[0])
    return s, e + (x[1] + y[1])


def dbeta(k, hints, x, beta):
    """D_k = d^k softplus / d beta^k in beta's dtype (`hints` moot)."""
    del hints
    x = x.astype(beta.dtype)
    exp = _Exp(x, beta)
    if k == 1:
        parts = _dbeta1_parts(x, beta, exp, 1, 0)
    else:
        terms, gamma = _series.dbeta_terms(k)
        parts = _dbeta1_parts(x, beta, exp, gamma, 1 - k)
        parts += _parts(terms, x, beta, exp=exp)
    out = _aligned_sum(parts)
    # At beta = 0, D_1 = -inf (G = ln 2 over 0) and the higher orders
    # diverge (NaN at an infinite x, where softplus itself is 0 * inf);
    # softplus(+-inf, beta) does not depend on beta (beta != 0), where
    # a s(-a) is inf * 0 in the evaluation.
    zero = beta == 0
    out = jnp.where(zero & jnp.isfinite(x) & (k == 1), -np.inf, out)
    out = jnp.where(zero & ~(jnp.isfinite(x) & (k == 1)), np.nan, out)
    return jnp.where(jnp.isinf(x) & ~zero, jnp.zeros_like(out), out)
