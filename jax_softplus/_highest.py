"""Correctly rounded values on request: `accuracy=lax.AccuracyMode.HIGHEST`.

For float32, bfloat16 and float16 data, both ops return the exact value
rounded to nearest even, wherever it is a normal number of the dtype (on
a platform without float64, `_highest32` takes the same steps in float32
arithmetic):

1. **float64.** t = beta * src is exact in float64 (two 24-bit
   significands); exp(-|t|) comes from `_math64`'s Cody-Waite reduction and
   polynomial, and the result, rounded a few times in float64, is within
   `ERROR` of the exact value (the sum of those roundings' bounds).
2. **The rounding test.** The float64 value v is rounded to the data dtype
   twice, at v (1 + ERROR) and at v (1 - ERROR) (`_rounded`): rounding to
   nearest is monotone, so the two agree exactly where no rounding
   boundary lies between them, and then both are the correct rounding of
   the exact value, which lies between them too.
3. **Where they differ, again in double-double** (`_dd`, about 2**-100),
   one element at a time, in a loop that runs only while such an element
   is left (about 1 in 2**25 float32 elements, 1 in 2**41 bfloat16 ones).
   A `select` would be simpler, but XLA computes both sides of a select for
   every element; the loop costs one pass over the result, which flags the
   blocks of about sqrt(n) elements that hold one, and each of its turns
   reads the flags and one block (`_resolve`).

Steps 1 and 2 are one loop fusion: the elements of step 3 hold a signaling
NaN meanwhile (`_PENDING`), which no arithmetic returns, rather than a
second array of flags (XLA would compute the loop twice, once per
output), and a division's result is taken through an opaque `+ 0` before
its several consumers, so that XLA fuses it (it does not duplicate an
expensive operation into several consumers).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_softplus import _dd, _math, _math64

_F64 = np.float64
_I64 = np.int64
_BF16 = np.dtype("bfloat16")
# The float64 evaluations' error bounds, relative to the result. Backward:
# the reduced argument's rounding (2**-55 absolute), p's (2**-54.3), the
# denominator's two (2**-53 each) and the division's (2**-53), 2**-51.1 in
# all. Forward: the exponential's (2**-54), log1p's (f - f**2/2, 2**-53,
# and its tail), the division by beta and the sum with x (2**-53 each),
# about 2**-50.8. Each bound leaves room for the rounding of v (1 +- ERROR)
# itself (2**-53).
ERROR = {"backward": 2.0**-50, "forward": 2.0**-49}
# Clamps of -t: below -60, exp(-t) < 2**-86 and the backward's result is
# diff_dst to far below rounding; above 200 (for both ops), every result
# is far below the normal range (diff_dst exp(-200) < 2**-160, and
# exp(-200) / beta < 2**-162 for every normal float32 beta).
_ZLOW, _ZHIGH = -60.0, 200.0
# What an element left to step 3 holds: a signaling NaN, which no
# arithmetic returns (the NaNs it passes on are quiet).
_PENDING = {
    np.dtype(np.float32): (np.uint32, 0x7F800001),
    _BF16: (np.uint16, 0x7F81),
    np.dtype(np.float16): (np.uint16, 0x7C01),
}


def _fused(v):
    """v (a quotient) through an opaque `- 0`: the division then has one
    consumer, and XLA fuses it with the rest of the loop. (`- 0`, not
    `+ 0`, which would turn -0.0 into +0.0.)"""
    return v - _math64._opaque(0.0)


def _exp_neg(a):
    """exp(-a) = 2**k (1 + p) for float64 a in [-60, 200]: (2**k, p), p in
    [-0.30, 0.42] within 2**-54.3 absolute."""
    magic = _math64._opaque(_math64._MAGIC)
    v = a * -_math64._LOG2E + magic
    kf = v - magic
    k = lax.bitcast_convert_type(v, _I64) - _math64._MAGIC_BITS
    # r = -a - k ln 2, rounded once (2**-55 absolute); expm1(r) to 2**-63.
    r = (lax.neg(a) - kf * _math64._LN2_HI) - kf * _math64._LN2_LO
    p = r + (r * r) * _math64._estrin(_math64._EXP_Q, r)
    return _math.exp2_int(k, _F64), p


def backward_value(src, dd, beta):
    """dd * sigmoid(beta * src) in float64, within ERROR["backward"], for
    float32, bfloat16 or float16 operands (beta float32)."""
    x, d, b = (lax.convert_element_type(v, _F64) for v in (src, dd, beta))
    t = b * x  # exact
    scale, p = _exp_neg(lax.clamp(-_ZHIGH, t, -_ZLOW))
    # 1 + exp(-t) = (1 + 2**k) + 2**k p: 1 + 2**k exact for |k| <= 52, and
    # within 2**-53 otherwise.
    q = _fused(d / ((_math64._opaque(1.0) + scale) + scale * p))
    # Where sigmoid is exactly 0 (src = -inf sign(beta)) the result is dd * 0
    # (NaN for an infinite dd).
    return lax.select(_math.sigmoid_is_zero(x, b), d * 0.0, q)


def softplus_value(x, beta):
    """(1/beta) log(1 + exp(beta x)) in float64, within ERROR["forward"],
    for float32, bfloat16 or float16 x (beta float32).

    [t > 0] x + log1p(e) / beta, e = exp(-|t|); log1p(e) in fdlibm's form
    f - f**2/2 + s (f**2/2 + R(s**2)), s = f / (2 + f), from f = e (e below
    1/2) or (e - 1) / 2 (exact, plus ln 2), which rounds once beyond its
    polynomial; below e = 2**-60, log1p(e) = e to 2**-61.
    """
    # A Python-float beta in a user's jit is a constant, and XLA would turn
    # the division by it into a multiplication by its rounded reciprocal.
    beta = lax.optimization_barrier(beta)
    xs, b = lax.convert_element_type(x, _F64), lax.convert_element_type(beta, _F64)
    t = b * xs  # exact
    scale, p = _exp_neg(lax.min(lax.abs(t), lax.full_like(t, _ZHIGH)))
    e = scale + scale * p
    big = e >= 0.5
    f = lax.select(big, (e - 1.0) * 0.5, e)
    s = _fused(f / (f + 2.0))
    z = s * s
    hfsq = 0.5 * f * f
    log = (f - hfsq) + s * (hfsq + z * _math64._horner(_math64._LOG1P_R, z))
    log = lax.select(big, log + 0.6931471805599453, log)
    log = lax.select(scale < 2.0**-60, e, log)
    q = _fused(log / b)
    out = lax.select(t > 0, xs + q, q)
    # beta = +-0 (traced, or subnormal): ln 2 / beta, +-inf by the zero's
    # sign, and NaN for an infinite or NaN x (0 x), as the default kernel.
    return lax.select(b == 0, (xs * 0.0 + np.log(2.0)) / b, out)


def _rounded(v, error, dtype):
    """(out, doubt): v (1 + error) rounded to `dtype`, and where v (1 -
    error) rounds otherwise. float32: one hardware conversion each; the
    half types through float32 rounded to odd, which makes the second
    rounding exact (24 >= 8 + 2 bits)."""
    hi, lo = v * (1.0 + error), v * (1.0 - error)
    outs = [_to(w, dtype) for w in (hi, lo)]
    out = outs[0]
    # A NaN is unequal to itself, not in doubt.
    return out, (out != outs[1]) & (out == out)


def _to(v, dtype):
    f = lax.convert_element_type(v, np.float32)
    if np.dtype(dtype) == np.float32:
        return f
    # Round to odd: an inexact result whose last bit is even moves one ulp
    # toward v (odd), so that the rounding to the half type is the one of v.
    back = lax.convert_element_type(f, _F64)
    bits = lax.bitcast_convert_type(f, np.int32)
    even = (bits & np.int32(1)) == np.int32(0)
    away = (lax.abs(v) > lax.abs(back)).astype(np.int32) * 2 - 1
    odd = lax.select(even & (back != v) & (v == v), bits + away, bits)
    f = lax.bitcast_convert_type(odd, np.float32)
    return lax.convert_element_type(f, dtype)


# Step 3: one element at a time, in double-double --------------------------------


def _dd_backward(s, d, b):
    """dd * sigmoid(beta * src) for one element, as a double word."""
    s, d, b = (lax.convert_element_type(v, _F64) for v in (s, d, b))
    t = lax.clamp(-_ZHIGH, b * s, -_ZLOW)
    zero = lax.full_like(t, 0)
    e = _dd.exp((-t, zero))
    # 1 behind a barrier: XLA folds (1 + e) - 1 to e.
    den = _dd.add((_math64._opaque(1.0) * lax.full_like(t, 1.0), zero), e)
    return _dd.div((d, zero), den)


def _dd_softplus(x, b):
    """(1/beta) log(1 + exp(beta x)) for one element, as a double word."""
    x, b = (lax.convert_element_type(v, _F64) for v in (x, b))
    t = b * x
    a = lax.min(lax.abs(t), lax.full_like(t, _ZHIGH))
    zero = lax.full_like(t, 0)
    q = _dd.div(_dd.log1p(_dd.exp((-a, zero))), (b, zero))
    s = _dd.add((x, zero), q)
    pos = t > 0
    return lax.select(pos, s[0], q[0]), lax.select(pos, s[1], q[1])


def _round_pair(hi, lo, dtype):
    """The double word hi + lo rounded to `dtype` once (its low word is far
    below an ulp of the dtype: rounding hi to odd in float64 first, by
    lo's sign, makes the float64 step exact for what follows)."""
    bits = lax.bitcast_convert_type(hi, _I64)
    even = (bits & _I64(1)) == _I64(0)
    toward = (lax.sign(lo) * lax.sign(hi)).astype(_I64)
    hi = lax.bitcast_convert_type(
        lax.select(even & (lo != 0) & (hi == hi), bits + toward, bits), _F64
    )
    return _to(hi, dtype)


def _pending_mask(values, dtype=None):
    """Where `values` (of `dtype`, or its bits) hold the marker, quieted or
    not: XLA:CPU may quiet a signaling NaN it moves through a scalar
    register (a lone element). A NaN of the data with that payload is taken
    as pending too, and step 3 gives it NaN again."""
    dtype = np.dtype(dtype or values.dtype)
    utype, bits = _PENDING[dtype]
    quiet = utype(1 << (jnp.finfo(dtype).nmant - 1))
    raw = values if values.dtype == utype else lax.bitcast_convert_type(values, utype)
    return (raw & ~quiet) == utype(bits)


def _block_size(n):
    """A block for a flat result: a power of two near sqrt(n)."""
    return min(n, 1 << ((max(n, 1).bit_length()) // 2))


def _row_axes(shape):
    """k such that the trailing axes from k on hold between sqrt(n) / 64 and
    64 sqrt(n) elements, nearest sqrt(n); None where no k >= 1 does (a 1-d
    result among them)."""
    n = math.prod(shape)
    best = None
    for k in range(1, len(shape)):
        size = math.prod(shape[k:])
        gap = abs(math.log2(max(size, 1)) - math.log2(n) / 2)
        if gap <= 6 and (best is None or gap < best[0]):
            best = (gap, k)
    return None if best is None else best[1]


def _run_flags(values, size, dtype):
    """Which runs of `size` along the last axis of `values` hold a pending
    element, row by row, as flat bytes (each row's last run may be
    shorter). The marker test is made on `values` in its own shape, and
    only its bytes are reshaped."""
    mask = _pending_mask(values, dtype).astype(np.uint8)
    length = mask.shape[-1]
    rows = mask.reshape(-1, length)
    whole = length // size
    flags = lax.reduce_max(rows[:, : whole * size].reshape(-1, whole, size), (2,))
    if whole * size < length:
        tail = lax.reduce_max(rows[:, whole * size :], (1,))
        flags = lax.concatenate([flags, tail[:, None]], 1)
    return flags.reshape(-1)


def _unravel(i, dims):
    """The index of flat position i (an int32 scalar) in an array of dims."""
    out = []
    for d in reversed(dims):
        out.append(i % np.int32(d))
        i = i // np.int32(d)
    return tuple(reversed(out))


def _resolve(out, doubt, evaluate):
    """The elements in doubt, `evaluate(i)` (double-double, i a flat index)
    one at a time while any is left; they hold `_PENDING` meanwhile.

    One pass over the result flags the blocks of about sqrt(n) elements
    that hold one, reading the result as bytes (XLA:CPU reduces that a
    third faster than `reduce_or` of the booleans, through a temporary of
    one byte per element; reduced by 32 first, in a fused loop, it kept a
    byte per 32 elements but took 5-20% longer at 1M-4M elements). Each
    turn of the loop then reads the flags and one block: an argmax
    over the whole result, which XLA:CPU runs as a scalar loop, took 45 ms
    over 16M elements (1.3x the whole default op) for the one element a
    call of that size has in doubt on average.

    The blocks are the sub-arrays of the trailing axes (`_row_axes`), or
    else runs of `_block_size` along the last axis (each row's last one
    may be shorter), so that the loop reads the main pass's result in its
    own shape: a reshape there made XLA fuse the rounding test into every
    consumer and keep the pass's float64 quotients in memory (a [512,
    1024] softplus took 1.6x the time; with rows too long for blocks, a
    float16 [8, 1048576] one 4-14x, a float32 [3, 262144] one 2x)."""
    if out.size == 0:  # nothing in doubt, and argmax refuses an empty array
        return out
    if out.ndim == 0:
        return _resolve(out.reshape(1), doubt.reshape(1), evaluate).reshape(())
    dtype, shape = out.dtype, out.shape
    utype, bits = _PENDING[np.dtype(dtype)]
    # bfloat16 as its bits: XLA:CPU selects and updates bfloat16 through
    # float32, and its rounding back turns the marker into the canonical
    # NaN (every element in doubt came back NaN).
    as_bits = np.dtype(dtype) == _BF16
    if as_bits:
        out = lax.bitcast_convert_type(out, utype)
        marker = lax.full_like(out, bits)
    else:
        marker = lax.bitcast_convert_type(
            lax.full_like(out, 0, utype) + utype(bits), dtype
        )
    marked = lax.select(doubt, marker, out)
    k = _row_axes(shape)
    if k is None:
        # Runs of about sqrt(n) along the last axis, each row's last one
        # reaching back into the one before it.
        values, lead, length = marked, shape[:-1], shape[-1]
        size = min(length, _block_size(out.size))
        runs = -(-length // size)
        flags = _run_flags(marked, size, dtype)

        def block_of(values, j):
            row, run = j // np.int32(runs), j % np.int32(runs)
            start = lax.min(run * np.int32(size), np.int32(length - size))
            at = _unravel(row, lead) + (start,)
            block = lax.dynamic_slice(values, at, (1,) * len(lead) + (size,))
            # The run's own elements: a flagged run has one pending there.
            own = lax.iota(np.int32, size) >= run * size - start
            return block.reshape(size), own, row * np.int32(length) + start

        def put(values, j, start, i, value):
            return lax.dynamic_update_slice(
                values, value.reshape((1,) * len(shape)), _unravel(start + i, shape)
            )

    else:
        values, lead, trail = marked, shape[:k], shape[k:]
        size = math.prod(trail)
        mask = _pending_mask(marked, dtype).astype(np.uint8)
        flags = lax.reduce_max(mask, tuple(range(k, len(shape)))).reshape(-1)
        zeros = (np.int32(0),) * len(trail)

        def block_of(values, j):
            at = _unravel(j, lead) + zeros
            block = lax.dynamic_slice(values, at, (1,) * k + trail).reshape(-1)
            return block, True, j * np.int32(size)

        def put(values, j, start, i, value):
            at = _unravel(j, lead) + _unravel(i, trail)
            return lax.dynamic_update_slice(
                values, value.reshape((1,) * len(shape)), at
            )

    def find(values, flags):
        """The first block with an element pending, its elements pending
        and the first of them."""
        j = lax.argmax(flags, 0, np.int32)
        block, own, start = block_of(values, j)
        pending = _pending_mask(block, dtype) & own
        return j, start, pending, lax.argmax(pending, 0, np.int32)

    # Each turn writes the element found before it, then reads the next
    # block from what it wrote: a turn that read `values` before writing
    # into it made XLA copy the whole result, twice, on every turn.
    def fix(state):
        values, flags, j, start, pending, i = state
        value = _round_pair(*evaluate(start + i), dtype)
        if as_bits:
            value = lax.bitcast_convert_type(value, utype)
        values = put(values, j, start, i, value)
        left = pending & (lax.iota(np.int32, size) != i)
        flag = lax.reduce_max(left.astype(np.uint8), (0,))
        flags = lax.dynamic_update_slice(flags, flag.reshape(1), (j,))
        return (values, flags, *find(values, flags))

    def more(state):
        return lax.reduce_max(state[1], (0,)) > np.uint8(0)

    state = (values, flags, *find(values, flags))
    out = lax.while_loop(more, fix, state)[0].reshape(shape)
    return lax.bitcast_convert_type(out, dtype) if as_bits else out


def _read(v, i, take):
    """take(v, i), an element of v read inside the loop (a 0-d v as it is).

    XLA:CPU slices a bfloat16 array through a float32 copy of all of it,
    which it hoists out of the loop: two such copies (src and dd) were 8
    bytes of temporaries per element and made bfloat16 HIGHEST twice as
    slow at 16M elements, for a loop that almost never turns. Behind a
    conditional (always taken: i >= 0, which XLA does not fold) the copy is
    made only on a turn.
    """
    if v.ndim == 0:
        return v
    if v.dtype != _BF16:
        return take(v, i)
    return lax.cond(i >= 0, take, lambda v, i: lax.full_like(v, 0, shape=()), v, i)


def _element(v, i):
    """Element i of a flattened operand (a 0-d beta as it is)."""
    return _read(v, i, lambda v, i: v.reshape(-1)[i])


def backward(src, dd, beta):
    """dd * sigmoid(beta * src), correctly rounded to the data dtype (a
    float32 beta): in one pass, or from `_TWO_PASSES`'s sizes on in two
    (`backward_inplace`)."""
    if two_passes(dd):
        return backward_inplace(src, dd, beta)
    return _backward_one_pass(src, dd, beta)


def _backward_one_pass(src, dd, beta):
    out, doubt = _rounded(backward_value(src, dd, beta), ERROR["backward"], src.dtype)

    def evaluate(i):
        return _dd_backward(_element(src, i), _element(dd, i), _element(beta, i))

    return _resolve(out, doubt, evaluate)


def softplus(x, beta):
    """(1/beta) log(1 + exp(beta x)), correctly rounded to the data dtype (a
    float32 beta): in one pass, or from `_TWO_PASSES`'s sizes on in two
    (`softplus_inplace`)."""
    if two_passes(x):
        return softplus_inplace(x, beta)
    return _softplus_one_pass(x, beta)


def _softplus_one_pass(x, beta):
    out, doubt = _rounded(softplus_value(x, beta), ERROR["forward"], x.dtype)

    def evaluate(i):
        return _dd_softplus(_element(x, i), _element(beta, i))

    return _resolve(out, doubt, evaluate)


# In place ---------------------------------------------------------------------
#
# `_resolve` reads the operand elements in doubt after the main pass has
# written the result over them, so XLA cannot write that result over a
# donated operand: it writes it into a temporary as large as the result and
# copies it at the end. In two passes, the first marks those elements in a
# bitmap, one bit per element (a sum of distinct powers of two over 32
# elements, which XLA:CPU fuses with the evaluation); the second writes the
# result but leaves the marked elements of the operand it may be written
# over (diff_dst, or softplus's x) as they are, and the loop reads them there.

_WORD = 32
# The sizes from which the lowering takes two passes (`backward`, `softplus`),
# where one pass's temporaries outgrow what the allocator keeps between
# calls: a donated call then writes over its operand, with a bit per element
# of temporaries instead of a byte (and a copy of the result). Measured on a
# Zen 5 VM in a user's jit (docs/inplace.md): float32 at 8M elements,
# donated, 27 -> 7.3 ms, fresh the same. The half types' evaluation costs
# more per byte (a fresh call pays 14-43% for the second pass at 32M
# elements, 3-60% at 16M): theirs start at 32M, where one pass's
# temporaries reach 34-100 MB.
_TWO_PASSES = {
    np.dtype(np.float32): 1 << 23,
    _BF16: 1 << 25,
    np.dtype(np.float16): 1 << 25,
}


def two_passes(v):
    """Whether the lowering evaluates `v` (an operand, or its aval) in two
    passes."""
    return v.size >= _TWO_PASSES.get(np.dtype(v.dtype), math.inf)


def _doubt_words(value, operands, error, dtype):
    """Where `value` of the flat operands, rounded to `dtype` with `error`,
    is in doubt: bit i % 32 of word i // 32."""
    n = max(v.size for v in operands)

    def words(lo, hi, width):
        parts = [v if v.ndim == 0 else v[lo:hi].reshape(-1, width) for v in operands]
        doubt = _rounded(value(*parts), error, dtype)[1]
        place = lax.broadcasted_iota(np.uint32, doubt.shape, 1)
        bits = lax.shift_left(lax.full_like(place, 1), place)
        return lax.reduce_sum(lax.select(doubt, bits, bits * np.uint32(0)), (1,))

    whole = n - n % _WORD
    out = words(0, whole, _WORD) if whole else np.zeros(0, np.uint32)
    if whole < n:
        out = lax.concatenate([out, words(whole, n, n - whole)], 0)
    return out


def _marked(words, n):
    """The bitmap's bit of each of n elements, as booleans."""
    spread = lax.broadcast_in_dim(words, (words.size, _WORD), (0,))
    bits = lax.shift_right_logical(spread, lax.iota(np.uint32, _WORD)[None])
    return (bits & np.uint32(1)).reshape(-1)[:n] != 0


def _at(v, i):
    """Element i (a flat index) of an operand in its own shape."""

    def take(v, i):
        return lax.dynamic_slice(v, _unravel(i, v.shape), (1,) * v.ndim).reshape(())

    return _read(v, i, take)


def _two_pass(operands, over, value, evaluate, error):
    """`value` of `operands` correctly rounded, which XLA can write over the
    donated operand `operands[over]` (of the result's shape and dtype): its
    temporaries are the bitmap (one bit per element) and about a byte per
    256 elements. `evaluate(*elements)` is the double-double value of one
    element, `error` the bound of `value`. beta is the last operand.

    The first pass marks the elements in doubt with four times `error`: the
    second pass evaluates again, and XLA may compile it otherwise, but both
    are within `error` of the exact value, so the second's v (1 + error),
    which it rounds, lies within 3 `error` of the first's v, and where the
    first is not in doubt it rounds to the same. The loop takes the marked
    elements in turn, by blocks of about sqrt(n / 32) words, as `_resolve`
    does: a block's flag (its largest word: the first block with a mark is
    not needed, any one is), a word, and the word's lowest set bit."""
    target = operands[over]
    shape, dtype, n = target.shape, target.dtype, target.size
    # The data flat; beta, last, as it is where it is a scalar.
    *data, beta = operands
    beta = beta if beta.ndim == 0 else beta.reshape(-1)
    flat = (*(v.reshape(-1) for v in data), beta)
    words = _doubt_words(value, flat, 4 * error, dtype)
    # The loop writes into the result in its own shape: a reshape of the
    # loop's result makes XLA copy it out of the operand's buffer.
    out = _rounded(value(*operands), error, dtype)[0]
    values = lax.select(_marked(words, n).reshape(shape), target, out)

    m = words.size
    size = _block_size(m)
    rows = -(-m // size)
    if rows * size > m:
        words = lax.concatenate([words, np.zeros(rows * size - m, np.uint32)], 0)
    words = words.reshape(rows, size)
    # A block's largest word, nonzero where it holds a mark: `words != 0` as
    # bytes first kept a byte per 32 elements more of temporaries, for no
    # speed (benchmarks/results/zen5-2026-12-05d/flags.md).
    flags = lax.reduce_max(words, (1,))

    def find(values, words, flags):
        """The first marked element: its block, row of words, word, the
        word's other marks, flat index and operands (the written-over one's
        where the second pass left it)."""
        j = lax.argmax(flags, 0, np.int32)
        row = lax.dynamic_slice(words, (j, np.int32(0)), (1, size)).reshape(size)
        g = lax.argmax(row != 0, 0, np.int32)
        word = _element(row, g)
        low = word & (~word + np.uint32(1))  # its lowest set bit
        bit = np.int32(_WORD - 1) - lax.clz(low).astype(np.int32)
        at = (j * np.int32(size) + g) * np.int32(_WORD) + bit
        at = lax.clamp(np.int32(0), at, np.int32(n - 1))  # none left: bit -1
        reads = (*operands[:over], values, *operands[over + 1 :])
        return j, row, g, word & ~low, at, tuple(_at(v, at) for v in reads)

    # Each turn writes the element found before it, then reads the next one
    # from what it wrote (as `_resolve`'s turns do).
    def fix(state):
        values, words, flags, j, row, g, rest, at, one = state
        value = _round_pair(*evaluate(*one), dtype)
        where = _unravel(at, shape)
        values = lax.dynamic_update_slice(
            values, value.reshape((1,) * len(shape)), where
        )
        row = lax.dynamic_update_slice(row, rest.reshape(1), (g,))
        words = lax.dynamic_update_slice(words, row.reshape(1, size), (j, np.int32(0)))
        flag = lax.reduce_max(row, (0,))
        flags = lax.dynamic_update_slice(flags, flag.reshape(1), (j,))
        return (values, words, flags, *find(values, words, flags))

    def more(state):
        return lax.reduce_max(state[2], (0,)) > np.uint32(0)

    state = (values, words, flags, *find(values, words, flags))
    return lax.while_loop(more, fix, state)[0]


def backward_inplace(src, dd, beta):
    """`backward`, which XLA can write over a donated dd (`_two_pass`)."""
    if dd.size == 0:
        return _backward_one_pass(src, dd, beta)
    return _two_pass(
        (src, dd, beta), 1, backward_value, _dd_backward, ERROR["backward"]
    )


def softplus_inplace(x, beta):
    """`softplus`, which XLA can write over a donated x (`_two_pass`)."""
    if x.size == 0:
        return _softplus_one_pass(x, beta)
    return _two_pass((x, beta), 0, softplus_value, _dd_softplus, ERROR["forward"])
