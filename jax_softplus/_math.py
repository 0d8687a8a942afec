"""The arithmetic of softplus and its gradient, written once in `lax` ops.

These functions are traced by the primitive's MLIR lowering (through
`mlir.lower_fun`), so every op here becomes a plain StableHLO op that XLA
fuses into one loop. Nothing here validates input: the public wrappers do
that before `bind`.

Float32 layout of the backward kernel, for `diff_src = dd * sigmoid(t)` with
`t = beta * src`:

1. `t` and its rounding error `tl` (an error-free product, skipped when
   `beta` is known to be a power of two, where the product is exact):
   Dekker's product, its factors rebalanced by 2**64 unless |beta| is known
   to be moderate, so that no half of the split is subnormal. On CPUs with
   FMAs, no `tl`: step 2 takes the exact product in one FMA
   (`_exp_reduce_fused`).
2. `exp(-t) = 2**k * (1 + p)`, with a Cody-Waite reduction by `ln 2`,
   `k` the nearest integer to `-t / ln 2`, so that `1 + p` lies in
   [0.71, 1.41], and a degree-6 polynomial for `p = expm1(r)`; `tl` enters
   the reduced argument as a correction, so `p` is that of the exact `t`.
3. `sigmoid(t) = 2**-K / D` with `D = 2**(k-K) * (1 + p) + 2**-K` and
   `K = clip(k - 1, 0, 126)`, so that `D >= 1`. The scale `K` keeps `D` in
   range when `exp(-t)` overflows, which is the tail where `sigmoid(t)`
   underflows but `dd * sigmoid(t)` does not. Below t = -175.7 (k > 253) a
   third factor, 2**-25, is taken from `dd` (exact unless the result is far
   below float32's normal range).
4. `diff_src = (dd / D) * 2**-K`, a single rounding in the division; the
   final scaling by a power of two is exact. On CPUs, which flush subnormal
   results, `(dd * 2**-K) / D` gives the same bits with the scaling off the
   division's dependency chain (`_scaled`).

Each expensive op (the division) has exactly one consumer: XLA's fusion pass
refuses to duplicate an expensive producer, and a second consumer would split
the loop into several fusions.
"""

from __future__ import annotations

import functools
from platform import machine as _host_machine

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_softplus import _words

_F32 = np.float32
_I32 = np.int32
_BF16 = jnp.dtype(jnp.bfloat16)

# ln 2 split so that k * _LN2_HI is exact for |k| < 2**15 (_LN2_HI has 9 bits).
_LN2_HI = _F32(0.693359375)
_LN2_LO = _F32(-2.12194440e-4)
_LOG2E = _F32(1.4426950408889634)
# Adding 1.5 * 2**23 to an integral float32 below 2**22 puts the integer in
# the low mantissa bits: a cheaper float -> int conversion than `convert`,
# which must also handle NaN and overflow.
_MAGIC = _F32(12582912.0)
_MAGIC_BITS = _I32(0x4B400000)
# Clamps of z = -t in the backward kernels. Below -_ZMAX sigmoid(t) is 1 to
# far below rounding (already below z = -17.4, where exp(z) < 2**-25); the
# value keeps k = round(z / ln 2) >= -126 (87 / ln 2 = 125.5), so that
# 2**k is a normal float32 with no clamp of its own in `_scale_bits`.
_ZMAX = _F32(87.0)
# The forward op's clamp of |t|: beyond it e**-|t| / beta is below the
# normal range for every normal beta, and k = round(-|t| / ln 2) >= -253.
_ZFWD = _F32(175.0)
# Beyond z = _ZDEEP, dd * exp(-z) < 2**-150 for every finite dd (< 2**128):
# 278 ln 2 = 192.7, so the result rounds to 0.
_ZDEEP = _F32(192.8)
# Coefficients of q in expm1(r) = r + r**2 * q(r) on [-ln 2 / 2, ln 2 / 2],
# highest first (a minimax fit of the error relative to exp(r): below
# 2**-26.7 with float32 coefficients and evaluation). These and the other
# polynomials below come from `python maintainers/fit.py`.
_EXPM1_Q = tuple(
    _F32(c)
    for c in (
        0.0013818301958963275,
        0.008368532173335552,
        0.04166829213500023,
        0.1666652262210846,
        0.4999999403953552,
    )
)


def _pow2(e):
    """2.0**e as float32 for int32 e in [-127, 127]; e = -127 gives 0.0."""
    bits = lax.shift_left(e + _I32(127), _I32(23))
    return lax.bitcast_convert_type(bits, _F32)


def exp2_int(e, dtype):
    """2.0**e exactly, in float32 or float64, for integer e in the normal
    range ([-126, 126] in float32, [-1022, 1022] in float64; clamped).

    Built from the exponent bits: `jnp.ldexp` has no derivative at 0 and
    `exp2` need not be exact.
    """
    if np.dtype(dtype) == np.float64:
        e = lax.clamp(np.int64(-1022), e.astype(np.int64), np.int64(1022))
        bits = lax.shift_left(e + np.int64(1023), np.int64(52))
        return lax.bitcast_convert_type(bits, np.float64)
    return _pow2(lax.clamp(np.int32(-126), e.astype(np.int32), np.int32(126)))


def frexp(v):
    """(m, e) with v = m 2**e, |m| in [1, 2) and int32 e, for a normal
    float32 v."""
    bits = lax.bitcast_convert_type(v, _I32)
    e = lax.shift_right_logical(bits, _I32(23)) & _I32(0xFF)
    m = (bits & _I32(-0x7F800001)) | _I32(0x3F800000)  # the sign kept
    m = lax.bitcast_convert_type(m, _F32)
    return m, e - _I32(127)


def times_pow2(y, k):
    """y * 2**k for int32 k, rounded once: in two exact steps of the normal
    range (|k| is clamped where the result is 0 or inf anyway)."""
    lim = 126 if y.dtype == np.float32 else 1022
    k = lax.clamp(np.int32(-2 * lim), k, np.int32(2 * lim))
    k1 = lax.clamp(np.int32(-lim), k, np.int32(lim))
    return y * exp2_int(k1, y.dtype) * exp2_int(k - k1, y.dtype)


def power(v, k):
    """v**k for a static integer k by repeated multiplication (a reciprocal
    last for k < 0); None for k = 0, a factor of 1 left out."""
    out = None
    for _ in range(abs(k)):
        out = v if out is None else out * v
    if out is None:
        return None
    return out if k > 0 else lax.reciprocal(out)


def _fused_product_error(beta, x, t):
    """The rounding error `beta * x - t` of `t = fl(beta * x)`, in two FMAs
    where the compiler contracts `a * b - c` into one.

    XLA:CPU always allows that contraction ("it increases precision"), but
    LLVM contracts only a multiply with one use, after merging equal
    multiplies: `beta * x - t` would share `t`'s own multiply (or a user's
    `beta * x` beside it) and give 0. So beta = bh + bl with bh a 12-bit
    value that is never beta itself (beta * (1 - 2**-12) cut to 12 bits, even
    where beta has 12 bits or fewer and a constant beta's split is folded),
    and bl = beta - bh exact and nonzero: bh * x - t + bl * x, one rounding
    in each FMA, within 2**-35 |t| of the exact error (measured; that is
    below 2**-27.4 of exp(t) for |t| < 192, a tenth of an ulp). bl is
    subnormal (read as 0 by the CPU) below |beta| =
    2**-114: there, from |beta| < 2**-100, bh = beta and bl = 0, and the
    first FMA is exact (the forward op's balanced beta is never that small).
    Only for targets with FMA (`fma_contracts`).
    """
    tiny = lax.abs(beta) < _F32(2.0**-100)
    hi, _ = _words.split(beta * _F32(1 - 2.0**-12))
    bh = lax.select(tiny, beta, hi)
    bl = lax.select(tiny, lax.full_like(beta, 0), beta - hi)
    return (bh * x - t) + bl * x


@functools.cache
def fma_contracts() -> bool:
    """Whether XLA:CPU's code for this host has FMAs to contract
    `a * b - c` into (x86-64 with FMA3, or AArch64, where FMA is part of
    the base ISA). Read from NumPy's runtime CPU dispatch table."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # NumPy 1.x
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as features
        except ImportError:  # a private table gone: Dekker's product, exact
            return False
    machine = _host_machine().lower()
    if machine in ("x86_64", "amd64"):
        return bool(features.get("FMA3"))
    return machine in ("arm64", "aarch64")


def _nearest_k(z):
    """k = z / ln 2 rounded to nearest, as int32 and as float32.

    The magic-number addition does the rounding itself (a multiply-add and
    an integer subtract, where a floor costs a rounding instruction and an
    add more), so the reduced argument r = z - k ln 2 has |r| <= ln(2) / 2.
    The float k is (v + MAGIC) - MAGIC, exact, with the magic number behind
    a barrier: XLA would fold a constant's sum and difference to v. One
    subtraction on the dependency chain instead of an integer subtract and
    a convert; k << 23, the integer's only use in the scale bits, shifts the
    magic's offset out.
    """
    magic = lax.optimization_barrier(_MAGIC)
    v = z * _LOG2E + magic
    return lax.bitcast_convert_type(v, _I32) - _MAGIC_BITS, v - magic


def _exp_reduce(z, zl, compensated=True, split=False):
    """exp(z + zl) = 2**k * (1 + p) for float32 z in [-_ZDEEP, _ZDEEP].

    `zl` is a small correction (the product error, or None for an exact z).
    With k from `_nearest_k`, a degree-6 polynomial suffices for expm1(r).
    `compensated`: p keeps the rounding error of the reduced argument (two
    operations more). Returns (k as int32, k as float32, p) with p in
    [-0.30, 0.42] up to rounding; with `split` (compensated), p as the
    unevaluated sum (rh, rest) of the exact reduced argument and the rest.
    """
    k, kf = _nearest_k(z)
    rh = z - kf * _LN2_HI  # exact: _LN2_HI has 9 bits, |k| < 2**15
    if not compensated:
        # r's two roundings (each below 2**-26.4 of exp(r)) stay in p. The
        # multiply-subtract is one FMA and zl comes after it, so that zl == 0
        # gives the same bits as zl = None (eager and jitted calls may take
        # different branches).
        r = rh - kf * _LN2_LO
        if zl is not None:
            r = r + zl
        return k, kf, r + _words.horner(_EXPM1_Q, r) * (r * r)
    # The two small terms are summed first: |w| < 0.06, so that rounding is
    # below 2**-28, and zl == 0 gives the same bits as zl = None.
    w = kf * _LN2_LO
    if zl is not None:
        w = w - zl
    # expm1(rh - w) = rh + (r**2 q(r) - w): rh is exact and |w| < 0.06, so
    # the rounded r serves only as the polynomial's argument and the sum has
    # one rounding of p's size.
    r = rh - w
    rest = _words.horner(_EXPM1_Q, r) * (r * r) - w
    return k, kf, (rh, rest) if split else rh + rest


# Where the fused kernel clamps z = -t (`_src_bounds`): below -_ZLOW the
# sigmoid is 1 to rounding (from z = -17.4), and k = round(z / ln 2) >= -126
# needs z >= -87.6; above _ZHIGH every result is below 2**-126 and flushed
# (from z = 176.5; the fused kernel runs on CPUs, which flush), and k <= 278
# (`_deep_tail`) needs z <= 193. Both bounds may be off by the approximate
# reciprocal's 2**-16.
_ZLOW = _F32(50.0)
_ZHIGH = _F32(184.8)


def _over(zs, u):
    """z / u for each z of `zs` in [17, 185] and float32 u > 0, within
    2**-16, without a division: XLA keeps a division of beta out of the
    loop's fusion. Above the float32 range, the largest float32."""
    bits = lax.bitcast_convert_type(u, _I32)
    e = lax.shift_right_arithmetic(bits, _I32(23)) - _I32(127)
    m = lax.bitcast_convert_type((bits & _I32(0x7FFFFF)) | _I32(0x3F800000), _F32)
    y = _F32(24 / 17) - _F32(8 / 17) * m  # 1 / m within 1/17, m in [1, 2)
    for _ in range(2):  # Newton: 2**-8.1, then 2**-16
        y = y * (_F32(2) - m * y)
    # z y 2**-e, exact but for rounding on overflow (2**-127 in two steps).
    y = y * lax.select(e > _I32(126), lax.full_like(u, 0.5), lax.full_like(u, 1.0))
    big = lax.full_like(u, np.finfo(np.float32).max)
    return [lax.min((z * y) * exp2_int(-e, _F32), big) for z in zs]


def _src_bounds(nbeta, like):
    """[lo, hi] of src, broadcast like `like`, with nbeta * src within
    [-_ZLOW, _ZHIGH] (up to 2**-16) or beyond, where the kernel's result no
    longer changes; for nbeta = 0, no bounds (0 * inf is NaN)."""
    u = lax.abs(nbeta)
    down, up = _over((_ZLOW, _ZHIGH), u)
    pos = nbeta > lax.full_like(nbeta, 0)
    lo, hi = lax.select(pos, -down, -up), lax.select(pos, up, down)
    inf = lax.full_like(nbeta, np.inf)
    zero = nbeta == lax.full_like(nbeta, 0)
    lo, hi = lax.select(zero, -inf, lo), lax.select(zero, inf, hi)
    if nbeta.ndim:  # a per-example beta, already of the data's shape
        return lo, hi
    # Of the data's sharding too (an explicit mesh's), as select needs.
    sharding = jax.typeof(like).sharding
    return (
        lax.broadcast_in_dim(b, like.shape, (), out_sharding=sharding) for b in (lo, hi)
    )


def _exp_reduce_fused(beta, x, tiny=False):
    """exp(z) = 2**k (1 + p) for z = -beta * x exact, on targets that
    contract `a * b + c` into an FMA (`fma_contracts`). Returns (k_bits,
    deep, p): k_bits an int32 with k in its low bits (`_scale_bits` shifts
    the rest out), deep where k > 253 (`_deep_tail`), p as `_exp_reduce`'s.

    The reduced argument r = z - k ln 2 comes from the exact product in one
    FMA, so the product's rounding needs no operation of its own
    (`_words.product_error` costs four, `_fused_product_error` three). For that
    the FMA's multiply must have no other use, which LLVM would merge with
    it: it multiplies src clamped (`_src_bounds`), which nothing else
    computes; k comes from xc times nbeta log2(e); and k ln_hi is an FMA too
    (`+ 0`, which IEEE arithmetic cannot drop), so that LLVM does not
    contract that multiply instead. For |nbeta| > 2**126, where nbeta log2(e)
    could overflow, the magic number rounds to halves and the k-scaled
    constants are doubled. beta sits behind a barrier, before its negation
    (which XLA would otherwise leave out of the loop): XLA would fold the
    product of a constant src and beta, with no FMA.

    Below |beta| = 5.4e-37 the bounds are beyond float32 (no finite src
    reaches the saturated t), and an infinite src is clamped to the largest
    float32 instead. `tiny` (|beta| < 2**-100 known at trace time,
    `BetaHints.beta_tiny`) computes with beta 2**64 and src 2**-64 instead:
    the same products (src 2**-64 flushes only where |t| < 2**-162, where
    sigmoid rounds to 1/2), so the same bits for every finite src, and the
    right ones at +-inf. One multiply more, at the head of the loop's
    dependency chain: about 20% of the float32 loop at 16M elements, so not
    for a beta that may be anything.
    """
    beta, zero = lax.optimization_barrier((beta, _F32(0)))
    nbeta = -beta
    if tiny:
        nbeta, x = nbeta * _F32(2.0**64), x * _F32(2.0**-64)
    lo, hi = _src_bounds(nbeta, x)
    xc = lax.select(x < lo, lo, x)
    xc = lax.select(xc > hi, hi, xc)
    half = lax.abs(nbeta) > _F32(2.0**126)
    one = lax.full_like(nbeta, 1.0)
    s = lax.select(half, lax.full_like(nbeta, 0.5), one)
    per_s = lax.select(half, lax.full_like(nbeta, 2.0), one)  # 1 / s
    magic = _MAGIC * s
    v = xc * (nbeta * (_LOG2E * s)) + magic
    ks = v - magic  # k * s, exact
    c = ks * (-_LN2_HI * per_s) + zero
    r = nbeta * xc + c
    r = r - ks * (_LN2_LO * per_s)
    deep = ks > _F32(253) * s
    p = r + _words.horner(_EXPM1_Q, r) * (r * r)
    return lax.bitcast_convert_type(v, _I32), deep, p


def _balance(beta, x):
    """(beta * s, x / s, s) with s = 2**-64, 1 or 2**64, so |beta * s| is in
    [2**-64, 2**64] for every normal beta. beta * x is unchanged.

    With an extreme beta, a t of order 1 needs a tiny or a huge x, and the
    CPU flushes what falls below the normal range: a low half of Dekker's
    split (which turns the correction into an error of 2**-12), or a term
    the forward op adds to x. Both scalings are exact (x / s may underflow
    only where |beta * x| < 2**-126). One multiply per element.
    """
    big, small = lax.abs(beta) > 2.0**64, lax.abs(beta) < 2.0**-64
    up, down, one = (lax.full_like(beta, v) for v in (2.0**64, 2.0**-64, 1.0))
    s = lax.select(big, down, lax.select(small, up, one))
    return beta * s, x * lax.select(big, up, lax.select(small, down, one)), s


def _product(beta, x, compensate, limit, fused=False):
    """t = fl(beta * x) and the correction zl with beta * x = t + zl.

    For an exact correction, |beta| must be in [2**-64, 2**64] (`_balance`).
    `fused`: the correction from `_fused_product_error`.
    """
    t = beta * x
    if not compensate:
        return t, None
    tl = (_fused_product_error if fused else _words.product_error)(beta, x, t)
    # Where |t| is clamped (at `limit`, or t is inf/NaN) the correction is
    # moot and the split may overflow; drop it there.
    return t, lax.select(lax.abs(t) < limit, tl, lax.full_like(tl, 0))


def _scale_bits(k):
    """Bits of x_scale = 2**(k - K) and y_scale = 2**-K, K = clip(k - 1, 0, 126).

    For k in [-126, 253] (`_ZMAX`, `_deep_tail`). K lags k by one so that, with
    exp = 2**k * q and q in [0.71, 1.41], D = q * x_scale + y_scale is at
    least 1 (x_scale >= 2 wherever K > 0) and dd / D cannot overflow.
    """
    # Clamped after the shift, which |k| <= 253 leaves in range: one shift
    # instead of two, and XLA takes k << 23 straight from `_nearest_k`'s
    # bits, whose magic offset shifts out.
    kb = lax.shift_left(k, _I32(23))
    y_bits = _I32(128 << 23) - lax.clamp(_I32(1 << 23), kb, _I32(127 << 23))
    # 2**(k - K) = 2**k * 2**-K: add the exponents (k - K = k where k < 0).
    return kb + y_bits, y_bits


def sigmoid_is_zero(src, beta):
    """Where sigmoid(beta * src) is exactly 0: src = -inf * sign(beta).

    Then inf * sigmoid is NaN. A finite src whose product overflows to -inf
    has a tiny but positive sigmoid, and inf times it stays inf. One compare,
    against a value computed once from beta: NaN (equal to nothing) for
    beta = 0, where t = 0 * inf is NaN.
    """
    return src == lax.full_like(beta, -np.inf) * lax.sign(beta)


def _deep_tail(k, deep, src, dd, beta):
    """Move 2**-25 of the scale into dd where k > 253 (t below -175.7).

    2**-k then needs three factors; dd * 2**-25 is exact unless dd is so
    small that the result is 0 anyway. Where sigmoid is exactly 0 the factor
    is 0, so that inf * 0 is NaN. Returns the new (k, dd). `deep` comes
    from the float k, so that the integer is only shifted (`_nearest_k`).
    """
    zero = lax.full_like(dd, 0)
    scale = lax.select(sigmoid_is_zero(src, beta), zero, zero + _F32(2.0**-25))
    return lax.select(deep, k - _I32(25), k), lax.select(deep, dd * scale, dd)


def _scaled(dd, d, y_scale, ftz):
    """(dd / d) * y_scale, with y_scale = 2**-K and d >= 1.

    Where subnormal results are flushed to zero (`ftz`, XLA:CPU's default),
    the scale may come first, off the division's dependency chain, with the
    same bits: a power of two commutes with the rounding wherever the result
    is normal, and where dd * y_scale is subnormal so is the result (both
    orders give 0). Without flushing, a subnormal result could round twice.
    """
    return (dd * y_scale) / d if ftz else _divide(dd, d) * y_scale


def _divide(a, b, div=None):
    """a / b within half an ulp and a hair, whatever the platform's division
    (`div`, which the tests replace by one up to 2 ulp off).

    XLA:GPU divides float32 with PTX's `div.full.f32` (within 2 ulp, not
    correctly rounded), and TPUs through a reciprocal: on an H200 the
    kernel's one division took the backward op to 2.60 ulp, past the 2.5
    that XLA:CPU's IEEE division gives. The significands (in [1, 2)) are
    divided and the quotient corrected once from the exact residual
    `ma - q mb` (Dekker's product, exact under any contraction, and
    `ma - fl(q mb)` exact by Sterbenz), which leaves it within 0.5 ulp plus
    2**-20 ulp: correctly rounded unless the exact quotient lies within
    2**-20 ulp of a midpoint (none of the 16,384 nearest one out of 2**22
    was misrounded: tests/test_gpu_kernel.py). The exponents are then put
    back in two exact steps. Where either operand is 0, subnormal or not
    finite, or the result is not finite, it is `div(a, b)`.
    """
    div = div or lax.div
    ma, ea = frexp(lax.abs(a))
    mb, eb = frexp(lax.abs(b))
    q = div(ma, mb)
    p = q * mb
    r = (ma - p) - _words.product_error(q, mb, p)
    fixed = times_pow2(q + div(r, mb), ea - eb)
    fixed = lax.select((a < 0) != (b < 0), -fixed, fixed)
    normal = _is_normal(a) & _is_normal(b) & lax.is_finite(fixed)
    return lax.select(normal, fixed, div(a, b))


def _is_normal(v):
    mag = lax.abs(v)
    return (mag >= _F32(np.finfo(np.float32).tiny)) & (
        mag <= _F32(np.finfo(np.float32).max)
    )


def sigmoid_times_f32(
    src, dd, beta, *, compensate, balance=True, ftz=False, fused=False, tiny=False
):
    """dd * sigmoid(beta * src) for float32 data, within 2.5 ulp.

    `compensate` adds the error-free product, needed unless beta * src is
    known to be exact; `balance` rebalances it (`_balance`), needed unless
    |beta| is known to be in [2**-64, 2**64]. `ftz`: the platform flushes
    subnormal results (`_scaled`). `fused`: the compiler contracts
    multiply-adds into FMAs, and the reduced argument comes from the exact
    product in one (`_exp_reduce_fused`, for any beta: `compensate` and
    `balance` are then moot; `tiny`, |beta| < 2**-100, rescales the pair).
    """
    if fused:
        k, deep, p = _exp_reduce_fused(beta, src, tiny)
    else:
        # -t = (-beta) * src exactly, with -beta formed once: the negation
        # costs nothing per element. exp(-t) = exp(z + zl).
        nbeta, x = -beta, src
        if compensate and balance:
            nbeta, x, _ = _balance(nbeta, x)
        z = nbeta * x
        zc = lax.clamp(-_ZMAX, z, _ZDEEP)
        zl = None
        if compensate:
            # Where z is clamped (or inf or NaN) the correction is moot and
            # may be NaN or overflow: dropped there, with one compare.
            zl = _words.product_error(nbeta, x, z)
            zl = lax.select(zc == z, zl, lax.full_like(z, 0))
        # The reduced argument uncompensated: two instructions (5% of the
        # 256-bit loop) for tails' maxima of 1.9 ulp instead of 1.7; the
        # core's maximum (1.96) is the denominator's.
        k, kf, p = _exp_reduce(zc, zl, compensated=False)
        deep = kf > _F32(253)
    k, dd = _deep_tail(k, deep, src, dd, beta)
    # exp(-t) = 2**k (1 + p). K = clip(k - 1, 0, 126) scales D into range.
    x_bits, y_bits = _scale_bits(k)
    # D = x_scale + (y_scale + p * x_scale). For t < -1 (K > 0) x_scale is
    # the larger term and the inner sum's rounding is far below ulp(D); for
    # t > -1, where y_scale = 1 is, it adds up to half an ulp(D) more (1.98
    # against 1.90 ulp at worst in a 2.4M-point sample; bound 2.5), for two
    # instructions less than ordering the terms (a min and a max of the
    # bits, ~8% of the 256-bit loop).
    x_scale = lax.bitcast_convert_type(x_bits, _F32)
    y_scale = lax.bitcast_convert_type(y_bits, _F32)
    d = x_scale + (y_scale + p * x_scale)
    return _scaled(dd, d, y_scale, ftz)


# exp(r) on [-ln 2 / 2, ln 2 / 2], degree 4, highest first (a minimax fit:
# relative error below 2.9e-6, 2**-18.4, with float32 evaluation, fused or
# not: far below half an ulp of a bfloat16 or float16). The constant term is
# exactly 1, so that sigmoid(0) is exactly 1/2: with exp(0) = 1.0000036,
# 0.5 * dd fell just below the smallest normal for dd = 2**-125 and the CPU
# flushed it to 0.
_EXP_Q4 = tuple(
    _F32(c)
    for c in (
        0.041513603180646896,
        0.1678745001554489,
        0.5000301599502563,
        0.9999668598175049,
        1.0,
    )
)


def _exp_reduce_half(z):
    """exp(z) = 2**k * q, q in [0.707, 1.414], to about 2**-18 relative.

    For half-precision results computed in f32: about half the instructions
    of XLA's exp, which is accurate to float32's last bit. k is from
    `_nearest_k`. Returns (k, k as float32, q).
    """
    k, kf = _nearest_k(z)
    r = z - kf * _F32(np.log(2.0))
    q = _EXP_Q4[0]
    for c in _EXP_Q4[1:]:
        q = q * r + c
    return k, kf, q


def sigmoid_times_bf16(src, dd, beta, *, ftz=False):
    """dd * sigmoid(beta * src) in float32 for bfloat16 data.

    bfloat16 has float32's exponent range, so the tail where exp(-t)
    overflows but the result is normal is kept, with the scaled
    denominator of the float32 kernel; the exponential needs only 2**-18.
    `ftz` as for `sigmoid_times_f32`.
    """
    k, kf, q = _exp_reduce_half(lax.clamp(-_ZMAX, -beta * src, _ZDEEP))
    k, dd = _deep_tail(k, kf > _F32(253), src, dd, beta)
    x_bits, y_bits = _scale_bits(k)
    y_scale = lax.bitcast_convert_type(y_bits, _F32)
    d = q * lax.bitcast_convert_type(x_bits, _F32) + y_scale
    return _scaled(dd, d, y_scale, ftz)


def sigmoid_times_f16(src, dd, beta):
    """dd * sigmoid(beta * src) in float32 for float16 data.

    A float16 result is normal only for t = beta * src above about -21
    (|dd| <= 65504), so unlike bfloat16 there is no tail to keep:
    dd / (1 + exp(-t)), with exp(-t) capped at exp(88) so that inf * sigmoid(t)
    stays inf for finite t, and 0 below the normal range.
    """
    # -t >= -_ZMAX: e >= exp(-87) is a normal float32 with k >= -126, so
    # 2**k needs no clamp of its own, and e + 1 rounds to 1 from e < 2**-24
    # on (below -t = -16.6) as it would for the exact e. -t <= 88:
    # exp(88) < float32's max (e**88.7), so e + 1 is finite and inf * sigmoid
    # stays inf; 65504 / exp(88) is far below float16's smallest subnormal.
    k, _, q = _exp_reduce_half(lax.clamp(-_ZMAX, -beta * src, _F32(88.0)))
    e = q * _pow2(k)
    out = dd / (e + _F32(1))
    return lax.select(sigmoid_is_zero(src, beta), dd * _F32(0), out)


# The GPU kernel's clamp of -|t|: exp(-_ZHALF_GPU / 4) is a normal float32,
# and beyond it dd * exp(t) rounds to 0 in float32 for every finite dd.
_ZHALF_GPU = _F32(256.0)


def sigmoid_times_half_gpu(src, dd, beta, *, divide=False, tail=True):
    """dd * sigmoid(beta * src) in float32, for bfloat16 and float16 on GPUs.

    With u = exp(-|t| / 4), exp(-|t|) = u**4 and, for t < 0,
    dd * sigmoid(t) = (((dd u) u) u) u / (1 + u**4). u is a normal float32
    for |t| <= 256 (it is clamped there: beyond, the result rounds to 0 for
    every finite dd, and stays inf for an infinite one), and each partial
    product is at least the result, so nothing underflows before the result
    does: the tail where sigmoid(t) underflows but dd * sigmoid(t) does not
    comes out right with no special case. One `exp`, plain converts and no
    integer work: on a GPU the bit-level reductions of the CPU kernels cost
    more than the memory traffic of a 2-byte type. 1 / (1 + u**4) is
    rsqrt(1 + u**4)**2, one special-function instruction where a division
    is a subroutine; in all about 1e-6 relative error, far below half an
    ulp of a bfloat16 or float16. Where sigmoid is exactly 0 (t = -inf) the
    result is dd * 0: NaN for an infinite dd. `divide` and `tail=False`
    (no t = -inf case) exist for the GPU benchmark's ablation only.
    """
    t = beta * src
    u = lax.exp(lax.max(-lax.abs(t), -_ZHALF_GPU) * _F32(0.25))
    # dd u first: a power of u alone may underflow where dd u**4 does not.
    num = lax.select(t >= lax.full_like(t, 0), dd, (((dd * u) * u) * u) * u)
    u2 = u * u
    denom = u2 * u2 + _F32(1)
    if divide:
        out = num / denom
    else:
        r = lax.rsqrt(denom)
        out = num * (r * r)
    if not tail:
        return out
    return lax.select(sigmoid_is_zero(src, beta), dd * _F32(0), out)


def _bf16_to_f32(x):
    # bf16 is the top half of an f32: a shift, which XLA vectorises more
    # widely than its own convert around transcendental code.
    bits = lax.convert_element_type(lax.bitcast_convert_type(x, np.uint16), np.uint32)
    return lax.bitcast_convert_type(lax.shift_left(bits, np.uint32(16)), np.float32)


def _f32_to_bf16(x, nan_low_bits_clear):
    # Round to nearest even on the bits. Rounding a NaN whose low 16 bits
    # are set can carry into the sign (0x7FFFFFFF becomes -0.0), so a NaN
    # becomes the canonical quiet NaN, unless the caller knows that every
    # NaN in x has its low 16 bits clear: then the rounding keeps it a NaN.
    bits = lax.bitcast_convert_type(x, np.uint32)
    lsb = lax.shift_right_logical(bits, np.uint32(16)) & np.uint32(1)
    out = lax.shift_right_logical(bits + np.uint32(0x7FFF) + lsb, np.uint32(16))
    if not nan_low_bits_clear:
        out = lax.select(x != x, lax.full_like(out, 0x7FC0), out)
    return lax.bitcast_convert_type(lax.convert_element_type(out, np.uint16), _BF16)


def to_f32(x):
    """Widen bf16/f16 to f32 (exact)."""
    if x.dtype == _BF16:
        return _bf16_to_f32(x)
    return lax.convert_element_type(x, np.float32)


def from_f32(x, dtype, *, nan_low_bits_clear=False):
    """Round f32 to `dtype` once, to nearest even.

    `nan_low_bits_clear` promises that every NaN in `x` has its low 16 bits
    clear, which saves a compare and a select for bfloat16 (see
    `canonical_nan`).
    """
    if dtype == _BF16:
        return _f32_to_bf16(x, nan_low_bits_clear)
    return lax.convert_element_type(x, dtype)


def canonical_nan(beta):
    """beta, with any NaN replaced by the quiet NaN 0x7FC00000.

    On CPUs (x86 and Arm) float32 arithmetic either propagates an operand's
    NaN, quieted, or makes the default NaN, whose low 16 bits are clear, as
    are those of every NaN widened from bfloat16. beta is the one float32
    input, so with it canonical a bfloat16 kernel's NaNs all have their low
    16 bits clear. (NVIDIA GPUs make 0x7FFFFFFF instead.)
    """
    return lax.select(beta != beta, lax.full_like(beta, np.nan), beta)


# log1p(f) = f - f**2 / 2 + f**3 P(f) on [-1/4, 1/2], P of degree 8, lowest
# first (a weighted minimax fit: with these float32 coefficients the relative
# error in log1p is below 2**-30, evaluated exactly; tests/test_constants.py).
_LOG1P_P = tuple(
    _F32(c)
    for c in (
        0.33333340287208557,
        -0.2500016391277313,
        0.19999578595161438,
        -0.16655316948890686,
        0.1427680253982544,
        -0.1272837519645691,
        0.11696992069482803,
        -0.09106801450252533,
        0.03760991990566254,
    )
)
_LN2_HI_LOG = _F32(6.9313812256e-01)  # 16 bits: j * hi is exact
_LN2_LO_LOG = _F32(9.0580006145e-06)
# Below 2**-100, log1p(e) == e in float32 and e may be subnormal.
_K_TAIL = _I32(-100)


# 1/(1 + e) on [0, 1] to 1.02% (a minimax quadratic; two FMAs): enough for
# the correction term e_lo / (1 + e), of relative size 2**-24, and no
# division (an expensive op for XLA).
_RECIP_1P = tuple(
    _F32(c) for c in (0.32309845089912415, -0.80790776014328, 0.9898526668548584)
)


def _log1p_small(e_hi, e_lo):
    """log(1 + e_hi + e_lo) for e_hi in [0, 1], within 0.85 ulp (measured).

    No `u = 1 + e` is formed: XLA folds `(e + 1) - 1` to `e`, which would
    erase the compensation. For e < 1/2, f = e; above, 1 + e = 2 (1 + f) with
    f = (e - 1) / 2, exact by Sterbenz's lemma. Then
    log1p(f) = f - f**2 / 2 + f**3 P(f), in Estrin's scheme and with no
    division: the fused loop is bound by its longest chain of dependent
    operations, so the short tree beats Horner's rule, and the terms that do
    not need P are summed while P is evaluated.
    """
    big = e_hi >= _F32(0.5)
    f = lax.select(big, (e_hi - _F32(1)) * _F32(0.5), e_hi)
    j = lax.select(big, lax.full_like(f, 1), lax.full_like(f, 0))
    c = _LOG1P_P
    f2 = f * f
    f4 = f2 * f2
    lo = (c[0] + c[1] * f) + f2 * (c[2] + c[3] * f)
    hi = (c[4] + c[5] * f) + f2 * (c[6] + c[7] * f) + f4 * c[8]
    poly = lo + f4 * hi
    hfsq = _F32(0.5) * f2
    recip = (_RECIP_1P[0] * e_hi + _RECIP_1P[1]) * e_hi + _RECIP_1P[2]
    small = (j * _LN2_LO_LOG + e_lo * recip) - hfsq
    return ((f2 * f) * poly + small) + f + j * _LN2_HI_LOG


def softplus_f32(x, beta, *, compensate, balance=True, fused=False, ieee_division=True):
    """(1/beta) log(1 + exp(beta x)) for float32 operands.

    With t = beta x and e = exp(-|t|): softplus = [t > 0] x + log1p(e) / beta,
    which never overflows and keeps full relative accuracy for t << 0. The
    body is computed for the balanced (beta s, x / s) and scaled back by s
    (skipped when `balance` is False: |beta| known to be moderate); the
    tail e / beta (below t = -69) is formed as ((1 + p) / beta) * 2**k, the
    division first so that no intermediate leaves float32's range.
    `fused`: the error-free product is `_fused_product_error`; the balanced
    beta is never below 2**-100, and a moderate one is never either.
    `ieee_division` False: the platform's division may be off by 2 ulp (GPUs,
    TPUs), and the one division is corrected (`_divide`).
    """
    x_in, unbalance = x, None
    if balance:
        beta, x, unbalance = _balance(beta, x)
    t, tl = _product(beta, x, compensate, _ZFWD, fused)
    pos = t > 0
    z = lax.max(-lax.abs(t), -_ZFWD)
    if tl is not None:
        tl = lax.select(pos, -tl, tl)  # -|beta x| = z + tl
    k, _, p = _exp_reduce(z, tl)
    # e = 2**k (1 + p) as e_hi + e_lo (k <= 0); wrong below k = -126, where
    # only the tail is used.
    scale = _pow2(lax.max(k, _I32(-126)))
    ps = p * scale
    e_hi = scale + ps
    e_lo = (scale - e_hi) + ps
    tail = k < _K_TAIL  # log1p(e) = e to 2**-100
    num = lax.select(tail, p + _F32(1), _log1p_small(e_hi, e_lo))
    q = num / beta if ieee_division else _divide(num, beta)  # the one division
    qu = q if unbalance is None else q * unbalance  # at most 2**127 in the tail
    # 2**k = scale * 2**(k + 126) below k = -126.
    tail_part = (qu * scale) * _pow2(lax.min(k + _I32(126), _I32(0)))
    # For t > 69 the log1p term is below x's rounding: softplus is x (also
    # where x / s overflowed, which only happens there).
    body = x + q if unbalance is None else (x + q) * unbalance
    body = lax.select(tail, x_in, body)
    return lax.select(pos, body, lax.select(tail, tail_part, qu))
