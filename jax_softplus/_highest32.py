"""Correctly rounded values where the platform has no float64 (TPUs):
`accuracy=HIGHEST` in float32 arithmetic, in the steps of `_highest`.

1. **Double words.** t = beta src exactly, as a double word (Dekker's
   product); e = e**-|t| = 2**k (mh + ml) from a table of 2**(j/32) and
   a polynomial of degree 6, log1p from a table of 513 logarithms and a
   polynomial of degree 7, and the quotients by a Newton reciprocal and
   the exact remainder's correction. The result is a double word times a
   power of two carried apart (float32's range is too narrow for the
   tails), within `ERROR` of the exact value.
2. **The rounding test and its loop** (`_rounding`), in two passes: where
   the bound leaves the rounding in doubt (about 1 element in 2**15 of
   float32 data, 1 in 2**30 of bfloat16), the element is evaluated again in
   float32 expansions (`_fe`, about 2**-118), `_BATCH` elements a turn.

Only float32 addition and multiplication rounding to nearest is relied
upon: no FMA contraction, no division of the platform (the reciprocal is
a polynomial and two Newton steps), no `exp` or `log`. The error bounds
are the analysis's below; the exhaustive runs (maintainers/exhaustive.py
--accuracy highest --platform tpu) check the results bit for bit against
the float64 evaluation's, on a CPU.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_softplus import _fe, _math, _math64, _rounding, _words

_F32 = np.float32
_I32 = np.int32
_BF16 = np.dtype("bfloat16")
_PRECISION = {np.dtype(np.float32): 24, np.dtype(np.float16): 11, _BF16: 8}
# The double-word evaluations' bounds, relative to the result, with room
# for the rounding of v (1 +- ERROR) itself. Backward: the exponential's
# polynomial tail (2**-43.8) and table (2**-47), the quotient's correction
# (2**-46) and the sums' low words (2**-46), 2**-42.7 in all. Forward: the
# same exponential, log1p's tail (2**-43.8 of the logarithm where its
# table entry is nonzero), the quotient by beta and the sum with x, about
# 2**-42.5. Measured against the float64 evaluation: 2**-43.7 at worst for
# both (tests/test_highest_tpu.py holds them to 2**-43).
ERROR = {"backward": 2.0**-41, "forward": 2.0**-41}
# Where |t| is clamped (as in `_highest`): e**-200 < 2**-288.
_AMAX = 200.0
# Elements evaluated in expansions at a time: float32 data has about one
# in doubt per 2**15 elements (4 or 5 per million).
_BATCH = 16


def _pow2(k):
    """2**k for int32 k, 0 below -126 (clamped at 127)."""
    k = lax.clamp(_I32(-127), k, _I32(127))
    return _math._pow2(k)


def _pair(x, count=2):
    words, rest = [], Fraction(x)
    for _ in range(count):
        w = float(np.float32(float(rest)))
        words.append(w)
        rest -= Fraction(w)
    return words


# ln 2 / 32 in three parts: the first of 10 bits (n C1 exact for |n| <
# 2**14), the second a float32 (n C2 by Dekker's product), the third
# rounded.
_C = _fe._LN2 / 32
_C1 = float(Fraction(round(_C * 2**15), 2**15))
_C2, _C3 = _pair(_C - Fraction(_C1))
_INV_C = float(1 / _C)
# 2**(j/32) as double words (float64's exp2 is within 2**-53).
_EXP2 = np.asarray([_pair(Fraction(float(np.exp2(j / 32)))) for j in range(32)], _F32)
# Reciprocals r_j of 1 + j/512 cut to 16 bits (r_0 = 1, so that the
# logarithm of 1 + e for small e is relative to e), and -log(r_j).
_RECIP = np.asarray(
    [float(Fraction(round(2**16 / (1 + j / 512)), 2**16)) for j in range(513)], _F32
)
_LOGR = np.asarray([_pair(-math.log(float(r))) for r in _RECIP], _F32)


def _table(values, index):
    """values[index] for a constant table (rows of words)."""
    table = jnp.asarray(values)
    return tuple(table[index, w] for w in range(values.shape[1]))


# Step 1 ------------------------------------------------------------------------


def _exp_neg(ah, al):
    """e**-(ah + al) = 2**k (mh + ml) for ah in [0, 200] and al below an
    ulp of it: (k, (mh, ml)), mh + ml in [0.98, 1.99], within 2**-43.5.

    -a = n ln2/32 + r, |r| <= ln2/64, exactly as a double word; then
    2**(j/32) (n = 32 k + j) from the table and exp(r) = 1 + r + r**2/2 +
    r**3 p(r), the square as a double word."""
    nf = lax.round(ah * _F32(-_INV_C), lax.RoundingMethod.TO_NEAREST_EVEN)
    r1h, r1l = _words.two_sum(lax.neg(ah), nf * _F32(-_C1))
    p, pe = _words.two_prod(nf, lax.full_like(nf, _C2))
    rh, rl = _words.two_sum(r1h, lax.neg(p))
    # al (up to 2**-17) enters exactly: rl's own terms are below 2**-26.
    rh, rl2 = _words.two_sum(rh, lax.neg(al))
    rl = (rl + rl2) + ((r1l - pe) - nf * _F32(_C3))
    rh, rl = _words.fast_two_sum(rh, rl)
    s, se = _words.two_prod(rh, rh)
    sqh, sql = 0.5 * s, 0.5 * se + rh * rl
    poly = _F32(1 / 6) + rh * (_F32(1 / 24) + rh * (_F32(1 / 120) + rh * _F32(1 / 720)))
    tail = s * rh * poly + 0.5 * s * rl
    h, l0 = _words.fast_two_sum(_words.one(rh), rh)
    h, l1 = _words.fast_two_sum(h, sqh)
    eh, el = _words.fast_two_sum(h, (l0 + l1) + ((rl + sql) + tail))
    n = nf.astype(_I32)
    th, tl = _table(_EXP2, n & _I32(31))
    mh, ml = _words.two_prod(th, eh)
    ml = ml + (th * el + tl * eh)
    return lax.shift_right_arithmetic(n, _I32(5)), _words.fast_two_sum(mh, ml)


def _t(src, beta):
    """(t, a_h, a_l): t = fl(beta src) and |beta src| = a_h + a_l exactly,
    clamped at 200 (a_l = 0 there, and where t is not finite)."""
    t = beta * src
    err = _math64.balanced_product_error(src, beta, t)
    ah = lax.abs(t)
    al = lax.select(t < 0, lax.neg(err), err)
    keep = (ah <= _AMAX) & jnp.isfinite(err)
    return (
        t,
        lax.min(ah, lax.full_like(ah, _AMAX)),
        lax.select(keep, al, jnp.zeros_like(al)),
    )


def backward_value(src, dd, beta):
    """dd sigmoid(beta src) as ((qh, ql), k): the double word times 2**k,
    within ERROR["backward"], qh in [0.35, 2.9) (float32 operands)."""
    t, ah, al = _t(src, beta)
    k, (mh, ml) = _exp_neg(ah, al)
    scale = _pow2(k)  # e = 2**k m, 0 where that is far below 2**-126
    dh, dl = _words.fast_two_sum(_words.one(mh), mh * scale)
    dl = dl + ml * scale
    md, kd = _math.frexp(dd)
    # sigmoid(t) = 1 / (1 + e) for t >= 0, e / (1 + e) below.
    neg = t < 0
    nh, nl = _words.two_prod(md, mh)
    nl = nl + md * ml
    num = (lax.select(neg, nh, md), lax.select(neg, nl, jnp.zeros_like(nl)))
    q = _words.div(num, (dh, dl))
    return q, kd + lax.select(neg, k, jnp.zeros_like(k))


def _log1p(k, m):
    """log1p(e) for e = 2**k (mh + ml), k <= 0, as (L, kL): the double word
    L times 2**kL, within 2**-43.8.

    Below e = 2**-45, e itself (within e / 2). Above, log(1 + e) = -log(r_j)
    + log1p(d), d = (1 + e) r_j - 1 = (r_j - 1) + e r_j exactly to a low
    word's rounding, |d| < 2**-9.9, and log1p(d) = d - d**2/2 + d**3 p(d),
    the square as a double word."""
    mh, ml = m
    scale = _pow2(k)
    eh, el = mh * scale, ml * scale
    j = lax.round((eh * _F32(512)), lax.RoundingMethod.TO_NEAREST_EVEN).astype(_I32)
    j = lax.clamp(_I32(0), j, _I32(512))
    (r,) = _table(_RECIP[:, None], j)
    gh, gl = _table(_LOGR, j)
    p, pe = _words.two_prod(eh, r)
    dh, dl = _words.two_sum(r - _words.one(r), p)
    dh, dl = _words.fast_two_sum(dh, dl + (pe + el * r))
    s, se = _words.two_prod(dh, dh)
    sqh, sql = -0.5 * s, -0.5 * se - dh * dl
    poly = _F32(1 / 3) + dh * (
        _F32(-1 / 4) + dh * (_F32(1 / 5) + dh * (_F32(-1 / 6) + dh * _F32(1 / 7)))
    )
    tail = s * dh * poly + s * dl
    h, l0 = _words.two_sum(gh, dh)
    h, l1 = _words.two_sum(h, sqh)
    lh, ll = _words.fast_two_sum(h, (l0 + l1) + (((dl + sql) + tail) + gl))
    small = k < -45
    return (lax.select(small, mh, lh), lax.select(small, ml, ll)), lax.select(
        small, k, jnp.zeros_like(k)
    )


def softplus_value(x, beta):
    """(1/beta) log(1 + exp(beta x)) as ((vh, vl), k): the double word
    times 2**k, within ERROR["forward"], |vh| in [1, 2] (float32 operands,
    beta normal)."""
    t, ah, al = _t(x, beta)
    k, m = _exp_neg(ah, al)
    (lh, ll), kl = _log1p(k, m)
    mb, kb = _math.frexp(beta)
    qh, ql = _words.div((lh, ll), (lax.abs(mb), jnp.zeros_like(mb)))
    sign = lax.select(mb < 0, -jnp.ones_like(mb), jnp.ones_like(mb))
    qh, ql, kq = qh * sign, ql * sign, kl - kb
    # t > 0: x + q, in the frame of the larger: q / x = log1p(e) / t.
    mx, kx = _math.frexp(x)
    _, eq = _math.frexp(qh)
    f = lax.max(kx, kq + eq)
    xs = mx * _pow2(kx - f)
    qs = _pow2(kq - f)
    sh, sl = _words.two_sum(xs, qh * qs)
    sh, sl = _words.fast_two_sum(sh, sl + ql * qs)
    pos = t > 0
    vh, vl = lax.select(pos, sh, qh), lax.select(pos, sl, ql)
    # The double word into [1, 2) (log1p's can be near 2**-45): rounding it
    # to float16 must not meet float16's subnormals.
    _, e = _math.frexp(vh)
    scale = _pow2(-e)
    return (vh * scale, vl * scale), lax.select(pos, f, kq) + e


# Step 2: `_rounding` ------------------------------------------------------------


def _scaled(out, k, dtype):
    """out (rounded to `dtype`) times 2**k, in `dtype` (exact wherever the
    result is normal)."""
    out = lax.convert_element_type(out, _F32)
    return lax.convert_element_type(_math.times_pow2(out, k), dtype)


# The elements in doubt, in float32 expansions ----------------------------------


def _expansion(hi, lo):
    zeros = jnp.zeros((_fe.WORDS - 2,) + hi.shape, hi.dtype)
    return jnp.concatenate([hi[None], lo[None], zeros])


def _fe_backward(src, dd, beta):
    """`backward_value` in float32 expansions: (v, k)."""
    t, ah, al = _t(src, beta)
    k, m = _fe.exp(-_expansion(ah, al))
    den = _fe.add(_fe.const(1, m), _fe.scale(m, k))
    md, kd = _math.frexp(dd)
    neg = t < 0
    num = jnp.where(neg[None], _fe.mul_scalar(m, md), _fe.scalar(md))
    return _fe.div(num, den), kd + lax.select(neg, k, jnp.zeros_like(k))


def _fe_log1p(k, m, seed):
    """log1p(2**k m) as (Z, kZ), Z an expansion: below e = 2**-10 by its
    series, e (1 - e/2 + e**2/3 - ...) to e**11 / 12 (2**-121); above, two
    Newton steps y + (1 + e) e**-y - 1 from the double word `seed`."""
    e = _fe.scale(m, k)
    coeffs = lax.optimization_barrier(
        np.asarray([_fe._words_of(Fraction((-1) ** n, n + 1)) for n in range(12)], _F32)
    )

    def term(i, s):  # Horner from the coefficient of e**11 down
        c = coeffs[11 - i][:, None] + jnp.zeros_like(m)
        return _fe.add(_fe.mul(s, e), c)

    z_small = _fe.mul(m, lax.fori_loop(0, 12, term, jnp.zeros_like(m)))
    u = _fe.add(_fe.const(1, m), e)
    one = _fe.const(1, m)

    def newton(_, y):
        kw, w = _fe.exp(-y)
        return _fe.add(y, _fe.add(_fe.mul(u, _fe.scale(w, kw)), -one))

    y = lax.fori_loop(0, 2, newton, _expansion(*seed))
    small = k < -10
    return jnp.where(small[None], z_small, y), lax.select(small, k, jnp.zeros_like(k))


def _fe_softplus(x, beta):
    """`softplus_value` in float32 expansions: (v, k)."""
    t, ah, al = _t(x, beta)
    k, m = _fe.exp(-_expansion(ah, al))
    kd, md = _exp_neg(ah, al)
    seed, _ = _log1p(kd, md)
    z, kz = _fe_log1p(k, m, seed)
    mb, kb = _math.frexp(beta)
    q = _fe.div(z, _fe.scalar(lax.abs(mb))) * lax.sign(mb)[None]
    kq = kz - kb
    mx, kx = _math.frexp(x)
    _, eq = _math.frexp(q[0])
    f = lax.max(kx, kq + eq)
    s = _fe.add(_fe.scalar(mx * _pow2(kx - f)), q * _pow2(kq - f)[None])
    pos = t > 0
    return jnp.where(pos[None], s, q), lax.select(pos, f, kq)


def _finish(v, k, dtype):
    """The expansion v times 2**k, correctly rounded to `dtype` (v taken
    into [1, 2) first, so that no rounding meets float16's subnormals)."""
    _, e = _math.frexp(v[0])
    out = _fe.round_nearest(v * _pow2(-e)[None], _PRECISION[np.dtype(dtype)])
    return _scaled(out, k + e, dtype)


def backward(src, dd, beta):
    """dd * sigmoid(beta * src), correctly rounded to the data dtype,
    wherever it is a normal number (a float32 beta)."""
    dtype = src.dtype

    def approx(src, dd, beta, wide=False):
        s, d = (lax.convert_element_type(v, _F32) for v in (src, dd))
        b = jnp.broadcast_to(beta, s.shape)
        v, k = backward_value(s, d, b)
        out, doubt = _rounding.rounded(v, ERROR["backward"] * (4 if wide else 1), dtype)
        # Infinite or NaN t or dd, and dd 0 or below the normal range: dd
        # times sigmoid's limit (1, 0, NaN) or 1/2.
        t = b * s
        special = ~jnp.isfinite(t) | ~jnp.isfinite(d) | (lax.abs(d) < _F32(2.0**-126))
        limit = lax.select(
            jnp.isinf(t),
            lax.select(t > 0, jnp.ones_like(t), jnp.zeros_like(t)),
            t * 0 + 0.5,
        )
        # inf * sigmoid(t) is inf wherever sigmoid(t) > 0, a t that
        # overflowed to -inf from a finite beta * src included: NaN (inf * 0)
        # only where src = -inf * sign(beta), as in the float64 evaluation.
        keep = jnp.isinf(d) & (t < 0) & ~_math.sigmoid_is_zero(s, b)
        limit = lax.convert_element_type(lax.select(keep, d, d * limit), dtype)
        return lax.select(special, limit, _scaled(out, k, dtype)), doubt & ~special

    def exact(src, dd, beta):
        s, d = (lax.convert_element_type(v, _F32) for v in (src, dd))
        return _finish(*_fe_backward(s, d, beta), dtype)

    return _rounding.correctly_rounded(
        (src, dd, beta), 1, approx, exact, two_passes=True, batch=_BATCH
    )


def softplus(x, beta):
    """(1/beta) log(1 + exp(beta x)), correctly rounded to the data dtype,
    wherever it is a normal number (a float32 beta)."""
    dtype = x.dtype
    # A constant beta: XLA would fold what depends on it alone.
    beta = lax.optimization_barrier(beta)

    def approx(x, beta, wide=False):
        xs = lax.convert_element_type(x, _F32)
        b = jnp.broadcast_to(beta, xs.shape)
        v, k = softplus_value(xs, b)
        out, doubt = _rounding.rounded(v, ERROR["forward"] * (4 if wide else 1), dtype)
        t = b * xs
        zero_beta = lax.abs(b) < _F32(2.0**-126)
        special = ~jnp.isfinite(t) | zero_beta
        # beta = +-0 (or subnormal): ln 2 / beta, NaN for an infinite x;
        # t = inf: x; t = -inf: +-0 by beta's sign; NaN: NaN.
        limit = lax.select(
            zero_beta,
            (xs * 0 + _F32(math.log(2))) / b,
            lax.select(t != t, t, lax.select(t > 0, xs, jnp.zeros_like(xs) / b)),
        )
        limit = lax.convert_element_type(limit, dtype)
        return lax.select(special, limit, _scaled(out, k, dtype)), doubt & ~special

    def exact(x, beta):
        return _finish(*_fe_softplus(lax.convert_element_type(x, _F32), beta), dtype)

    return _rounding.correctly_rounded(
        (x, beta), 0, approx, exact, two_passes=True, batch=_BATCH
    )
