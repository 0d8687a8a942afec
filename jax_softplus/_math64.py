"""The float64 kernels, in double-word arithmetic.

XLA's float64 `exp` and `log1p` are within about 1.25 ulp each; a formula
built on them rounds several times more. These kernels carry every
intermediate that the result is sensitive to as a double word (an unevaluated
sum hi + lo) and round once at the end, so that both ops are within about
0.6 ulp (the bounds, found by search, are in docs/accuracy.md):

1. `t = beta * x` exactly, as `th + tl` (Dekker's product on a pair
   rebalanced so that no half of a split is subnormal).
2. `exp(z) = 2**k (1 + p + pl)` for `z = -t` or `-|t|`: a Cody-Waite
   reduction whose low part (the product's error and `k ln2_lo`) rides along
   to `pl`, with a degree-10 polynomial for `expm1(r) - r`.
3. The backward op divides `dd` by `D = 1 + exp(-t)`, formed as a double
   word at the float32 kernel's scale (`2**-K`, which keeps it finite where
   `exp(-t)` overflows), and corrects the quotient by its exact remainder.
   The forward op takes `log1p` of the double word `exp(-|t|)` (fdlibm's
   `f - (hfsq - s (hfsq + R))`, with `hfsq` exact), divides it by beta with
   the same correction and adds `x` with an exact sum.

An error-free transformation must see no compile-time constant: XLA folds
`(v + C) - C` to `v`. Constants that enter one sit behind an optimization
barrier (`_opaque`).
"""

from __future__ import annotations

import numpy as np
from jax import lax

from jax_softplus import _math, _words

_F64 = np.float64
_I64 = np.int64

_LOG2E = 1.4426950408889634
# fdlibm's split of ln 2: _LN2_HI has 32 significant bits, so k * _LN2_HI is
# exact for |k| < 2**21, and the reduced argument z - k _LN2_HI is exact.
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
# 1.5 * 2**52: adding it to |v| < 2**51 rounds v to an integer in the low
# mantissa bits (see `_math._nearest_k`).
_MAGIC = 6755399441055744.0
_MAGIC_BITS = _I64(0x4338000000000000)
# q in expm1(r) = r + r**2 q(r) on [-ln 2 / 2, ln 2 / 2] (widened by 1e-4
# for a k off by one from the nearest): weighted minimax, error relative to
# exp(r) below 2**-63.8 with these float64 coefficients, highest first
# (`python maintainers/fit.py _EXP_Q64`).
_EXP_Q = (
    2.083725186214216e-09,
    2.5110849128659772e-08,
    2.7557529093750146e-07,
    2.7557238756519384e-06,
    2.4801587023861207e-05,
    0.00019841269891815913,
    0.0013888888889032904,
    0.008333333333319275,
    0.041666666666666415,
    0.1666666666666668,
    0.5,
)
# R(z) / z in log1p(f) = f - f**2/2 + s (f**2/2 + R(z)), s = f / (2 + f),
# z = s**2 in [0, 0.0401] (f in [-1/4, 1/2]): weighted minimax, error
# relative to log1p(f) below 2**-62.6, highest first
# (`python maintainers/fit.py _LOG1P_R64`).
_LOG1P_R = (
    0.13843358917182144,
    0.13173558362568238,
    0.15391113973941753,
    0.18181665827326476,
    0.22222224297030135,
    0.2857142855582561,
    0.4000000000005668,
    0.666666666666666,
)

# Clamps of z = -t in the backward op: below -_ZLOW, exp(z) < 2**-57 and
# sigmoid(t) rounds to 1; above _ZHIGH, dd exp(-z) < 2**-1022 for every
# finite dd (e**709.8 / e**1418.2 = 2**-1022).
_ZLOW = 40.0
_ZHIGH = 1418.5
# The forward op's clamp of |t|: beyond, e**-|t| / beta is below 2**-1022
# for every normal beta (2044 ln 2 = 1416.8), and k >= -2045.
_ZFWD = 1417.0
# Below exp(-|t|) = 2**-60, log1p(e) = e to 2**-61.
_K_TAIL = -60.0
# |beta| is rebalanced into [2**-512, 2**512] (`_balance`).
_BAL = 512


def _opaque(value):
    """A float64 constant behind a barrier: XLA would fold `(v + C) - C`."""
    return lax.optimization_barrier(np.asarray(value, _F64))


def _fused_product_error(a, x, t):
    """The error a x - t of t = fl(a x), in two FMAs where the compiler
    contracts `u * v - w` into one (`_math.fma_contracts`).

    `_math._fused_product_error`'s split at float64: a = ah + al with ah
    26 bits of a (1 - 2**-26), never a itself, so that LLVM cannot merge
    ah x with t's own multiply; al = a - ah is exact and nonzero. ah x - t
    is exact to 2**-79 |t| and is of al x's size, so the sum rounds below
    2**-53 of the error itself.
    """
    ah, _ = _words.split(a * (1.0 - 2.0**-26))
    return (ah * x - t) + (a - ah) * x


def _estrin(coeffs, v):
    """The polynomial with `coeffs` (highest first) at v, in Estrin's
    scheme: pairs, then pairs of pairs in v**2, v**4, ... A fused loop is
    bound by its longest chain of dependent operations, and this tree's is
    about log2 of Horner's."""
    terms = list(coeffs[::-1])  # lowest first
    power = v
    while len(terms) > 1:
        pairs = [terms[i] + terms[i + 1] * power for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            pairs.append(terms[-1])
        terms, power = pairs, power * power
    return terms[0]


def _balance(beta, x):
    """(beta / s, x s, 1 / s, log2 of 1 / s) with s = 2**512, 1 or 2**-512,
    so that |beta / s| is in [2**-512, 2**512] for every normal beta; the
    product is unchanged and exact (x s underflows only where |beta x| <
    2**-510, and overflows only where |beta x| > 2**1024)."""
    ab = lax.abs(beta)
    e = lax.select(ab > 2.0**_BAL, lax.full_like(ab, _BAL), lax.full_like(ab, 0))
    e = lax.select(ab < 2.0**-_BAL, lax.full_like(ab, -_BAL), e).astype(_I64)
    down = _math.exp2_int(-e, _F64)
    return beta * down, x * _math.exp2_int(e, _F64), down, -e


def balanced_product_error(src, beta, t):
    """The exact rounding error beta src - t of t = fl(beta src), in float32
    or float64, the factors rebalanced by a power of two first, so that no
    partial product of the split is subnormal (a beta of 1e35 times a src
    of 1e-35)."""
    beta = beta * lax.full_like(src, 1)
    if t.dtype == _F64:
        b, x, _, _ = _balance(beta, src)
    else:
        b, x, _ = _math._balance(beta, src)
    return _words.product_error(b, x, t)


def _exp_reduce(z, zl=None, poly=_EXP_Q):
    """exp(z + zl) = 2**k (1 + p + pl) for z in [-1418.5, 1418.5] and a
    small correction zl: k (int64) the nearest integer to z / ln 2, its
    float kf, and expm1 of the reduced argument as a double word (p, pl),
    p in [-0.30, 0.42] and |pl| <= 2**-53 |p|. Relative error about
    2**-62.

    With no correction, exp(z) = 2**k (1 + p) with p in one word (pl is
    None): the reduced argument rounds once (2**-55 absolute), and `poly`
    (q in expm1(r) = r + r**2 q(r), highest first) may be a shorter one.
    """
    magic = _opaque(_MAGIC)
    v = z * _LOG2E + magic
    kf = v - magic
    k = lax.bitcast_convert_type(v, _I64) - _MAGIC_BITS
    rh = z - kf * _LN2_HI  # exact (Sterbenz; k * _LN2_HI has 43 bits)
    if zl is None:
        r = rh - kf * _LN2_LO
        return k, kf, r + (r * r) * _estrin(poly, r), None
    r, rl = _words.fast_two_sum(rh, zl - kf * _LN2_LO)
    # expm1(r + rl) = r + r**2 q(r) + rl (1 + r) to 2**-106; the sum with
    # r exact (|r| > r**2 q(r)), the rest's rounding of r**2's size.
    p, pl = _words.fast_two_sum(r, (r * r) * _estrin(poly, r) + (rl + rl * r))
    return k, kf, p, pl


def _denominator_scales(k):
    """2**min(k, 1) and 2**-min(max(k - 1, 0), 1022) for int64 k in [-58,
    2047]: with exp(-t) = 2**k (1 + p), D = 2**min(k, 1) (1 + p) + 2**-K is
    2**-K (1 + exp(-t)) for K = max(k - 1, 0), in [1, 4): at t < -1 the
    1 is scaled down, past 2**-1022 where it no longer counts (D >= 2)."""
    x_bits = lax.shift_left(lax.min(k, _I64(1)) + _I64(1023), _I64(52))
    y_bits = lax.shift_left(
        _I64(1023) - lax.clamp(_I64(0), k - _I64(1), _I64(1022)), _I64(52)
    )
    return (lax.bitcast_convert_type(b, _F64) for b in (x_bits, y_bits))


def _normalize(v):
    """(v 2**-e, e) with v 2**-e in [1, 4) for normal v (in [2, 4) at
    float64's top binade, whose 2**-1023 is not normal; 0, inf and NaN
    unchanged), int64 e: the quotient's correction must see neither
    underflow nor overflow in its partial products."""
    exp_bits = lax.bitcast_convert_type(v, _I64) & _I64(0x7FF << 52)
    exp_bits = lax.clamp(_I64(1 << 52), exp_bits, _I64(2045 << 52))
    scale = lax.bitcast_convert_type(_I64(2046 << 52) - exp_bits, _F64)
    return v * scale, lax.shift_right_logical(exp_bits, _I64(52)) - _I64(1023)


def _guarded(hi, lo):
    """hi + lo, or hi where lo is NaN: the correction of a quotient whose
    operand is infinite is inf - inf."""
    return lax.select(lo != lo, hi, hi + lo)


def sigmoid_times(src, dd, beta, *, fused=False):
    """dd * sigmoid(beta * src) in float64, within about 0.6 ulp.

    With exp(-t) = 2**k (1 + p + pl): dd / (1 + exp(-t)) = 2**(e - K) m / D
    for dd = m 2**e (m in [1, 2)) and D = 2**-K (1 + exp(-t)) in [1, 4)
    (`_denominator_scales`), summed as a double word (Dh, Dl). The quotient
    q = m y, y = 1 / Dh to 2**-36 (`_words.reciprocal`), is corrected by its exact
    remainder, q + (m - q Dh - q Dl) y, which rounds once; the power of
    two is applied in two exact steps. The product is exact as a double
    word and the clamps of -t (-40 and 1418.5) are where sigmoid rounds to
    1 and where the result is below 2**-1022 for every finite dd. Where
    sigmoid is exactly 0 (src = -inf sign(beta)) the result is dd * 0.

    `fused`: the compiler contracts `u * v - w` into an FMA (XLA:CPU on a
    CPU with FMA), so that the product's error and the remainder take an
    FMA each instead of Dekker's product. beta sits behind a barrier: XLA
    would fold the product of a constant beta and src, with no FMA.
    """
    beta = lax.optimization_barrier(beta)
    nbeta, x, _, _ = _balance(-beta, src)
    if fused:
        z = nbeta * x
        zl = _fused_product_error(nbeta, x, z)
    else:
        z, zl = _words.two_prod(nbeta, x)
    zc = lax.clamp(-_ZLOW, z, _ZHIGH)
    # Where z is clamped (or inf or NaN) the correction is moot, and NaN.
    k, _, p, pl = _exp_reduce(zc, lax.select(zc == z, zl, lax.full_like(zl, 0)))
    xs, ys = _denominator_scales(k)
    h, l1 = _words.fast_two_sum(xs, xs * p)  # |xs p| < xs / 2, and xs p is exact
    dh, l2 = _words.two_sum(h, ys)
    dl = (l1 + l2) + xs * pl
    dd = lax.select(_math.sigmoid_is_zero(src, beta), dd * 0.0, dd)
    m, e = _normalize(dd)
    y = _words.reciprocal(dh)  # dh in [1, 4)
    q = m * y
    if fused:
        rem = (m - q * dh) - q * dl  # exact: one FMA
    else:
        ph, ql = _words.two_prod(q, dh)
        rem = ((m - ph) - ql) - q * dl
    out = _guarded(q, rem * y)
    shift = e - lax.max(k - _I64(1), _I64(0))
    return _math.times_pow2(out, lax.max(shift, _I64(-1100)).astype(np.int32))


def _log1p(eh, el):
    """log1p(eh + el) for eh in [2**-61, 1] and |el| <= 2**-52 eh, as a
    double word, within about 2**-57 relative.

    1 + e = 2**j (1 + f) with f = e (j = 0) below e = 1/2, f = (e - 1) / 2
    (exact) above, so f is in [-1/4, 1/2]; log1p(f) = f - hfsq + s (hfsq +
    R(s**2)) with s = f / (2 + f) and hfsq = f**2 / 2 (fdlibm's form), f -
    hfsq exact as a double word, so that only the last term, of f's size
    cubed, rounds; e's low part enters as el / (1 + f).
    """
    big = eh >= 0.5
    fh = lax.select(big, (eh - 1.0) * 0.5, eh)
    fl = lax.select(big, el * 0.5, el)
    j = lax.select(big, lax.full_like(eh, 1.0), lax.full_like(eh, 0.0))
    s = fh / (fh + 2.0)
    z = s * s
    rz = z * _words.horner(_LOG1P_R, z)
    hh, hl = _words.two_prod(fh, fh)
    hh, hl = hh * 0.5, hl * 0.5
    u, ue = _words.fast_two_sum(fh, -hh)  # f - hfsq, exactly
    small = (ue - (hl - s * (hh + rz))) + fl * (1.0 - fh * (1.0 - fh * (1.0 - fh)))
    lh, le = _words.fast_two_sum(j * 0.6931471805599453, u)
    return lh, le + (small + j * 2.3190468138462996e-17)


def _divide(nh, nl, recip, b):
    """(nh + nl) / b as a double word, from recip = 1 / b (rounded): the
    quotient nh recip corrected by its exact remainder."""
    q = nh * recip
    ph, pl = _words.two_prod(q, b)
    return q, ((nh - ph) - pl + nl) * recip


def softplus(x, beta):
    """(1/beta) log(1 + exp(beta x)) in float64, within about 0.6 ulp.

    [t > 0] x + log1p(e) / beta, e = exp(-|t|) = 2**k (1 + p + pl), for the
    balanced (beta / s, x s) and scaled back by s (`_balance`): log1p(e)
    as a double word (`_log1p`), divided by beta with its remainder's
    correction and, for t > 0, added to x exactly, one rounding in all.
    Below e = 2**-60 (the tail), log1p(e) / beta = (1 + p + pl) / beta
    scaled by 2**k exactly, which keeps a tiny beta's tail where e alone
    underflows; for t > 41.6 the log1p term is below x's rounding.
    """
    x_in = x
    b, x, unbalance, e_unbalance = _balance(beta, x)
    t, tl = _words.two_prod(b, x)
    pos = t > 0
    z = lax.max(-lax.abs(t), lax.full_like(t, -_ZFWD))
    zl = lax.select(z == -lax.abs(t), lax.select(pos, -tl, tl), lax.full_like(tl, 0))
    k, kf, p, pl = _exp_reduce(z, zl)
    tail = kf < _K_TAIL
    mh, ml = _words.fast_two_sum(_opaque(1.0), p)
    ml = ml + pl  # exp(z) = 2**k (mh + ml)
    scale = _math.exp2_int(lax.max(k, _I64(-61)), _F64)
    lh, ll = _log1p(mh * scale, ml * scale)
    recip = 1.0 / b
    qh, ql = _divide(lax.select(tail, mh, lh), lax.select(tail, ml, ll), recip, b)
    sh, sl = _words.two_sum(x, qh)
    body_pos = _guarded(sh, sl + ql) * unbalance
    part = _guarded(qh, ql)
    body_neg = part * unbalance
    shift = (k + e_unbalance).astype(np.int32)
    tail_neg = _math.times_pow2(part, shift)
    return lax.select(
        pos, lax.select(tail, x_in, body_pos), lax.select(tail, tail_neg, body_neg)
    )
