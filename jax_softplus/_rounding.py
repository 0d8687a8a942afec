"""Correct rounding: one rounding test and one loop, for every evaluation.

`accuracy=HIGHEST` rounds an approximation whose error is bounded, and
settles the rare elements that bound leaves in doubt with a far more
precise evaluation. The approximation is a double word (float64 words
where the platform has float64, `_highest`; float32 words elsewhere,
`_highest32`); this module holds what both share:

1. **The rounding test** (`rounded`): the double word v rounded to the
   dtype twice, at v (1 + error) and v (1 - error). Rounding to nearest is
   monotone, so the two agree exactly where no rounding boundary lies
   between them, and then both are the correct rounding of the exact value,
   which lies between them too.
2. **A bitmap of the elements in doubt**, a bit per element
   (`correctly_rounded`). In one pass, those elements of the result hold a
   marker, and the bitmap is read from the result. From
   `_highest._TWO_PASSES` bytes on (and for the in-place op, and on
   TPUs), in two: the first marks them, and the second writes the result
   but leaves the marked elements of one operand (diff_dst, or softplus's
   x) as they are, so that XLA can write the result over that operand
   where it is donated.
3. **One loop** over the marked elements, a few at a time: each turn reads
   the block flags, the first block of words with a mark and the
   operands' elements there, evaluates them precisely and writes them.

A `select` would be simpler than the loop, but XLA computes both sides of a
select for every element; the loop costs the bitmap's pass, and it turns
only while a marked element is left.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_softplus import _words

_F32 = np.float32
_F64 = np.float64
_BF16 = np.dtype("bfloat16")
_INT = {np.dtype(_F32): np.int32, np.dtype(_F64): np.int64}
_WORD = 32


def _odd(s, e):
    """s = fl(s + e) rounded to odd instead (e its exact error): an inexact
    s whose last bit is even moves one ulp toward s + e. Rounded to odd, a
    value rounds to nearest at two bits fewer as the exact value does."""
    itype = _INT[np.dtype(s.dtype)]
    bits = lax.bitcast_convert_type(s, itype)
    even = (bits & itype(1)) == itype(0)
    inexact = (e > 0) | (e < 0)  # NaN: not
    # Away from zero where e has s's sign (its bit's: s may be a signed 0).
    away = (e > 0) != (bits < itype(0))
    step = lax.select(away, lax.full_like(bits, 1), lax.full_like(bits, -1))
    return lax.bitcast_convert_type(
        lax.select(even & inexact, bits + step, bits), s.dtype
    )


def _narrowed(v, dtype):
    """The float v converted to `dtype`, rounded to odd."""
    f = lax.convert_element_type(v, dtype)
    return _odd(f, v - lax.convert_element_type(f, v.dtype))


def _to(s, e, dtype):
    """s, a float32 or float64 word, to `dtype`: rounded to odd first by its
    error e where e is given (and in float32 on the way from float64 to a
    half type), then to nearest."""
    if np.dtype(s.dtype) == np.dtype(dtype):
        return s
    if e is not None:
        s = _odd(s, e)
    if s.dtype == _F64 and np.dtype(dtype) != np.float32:
        s = _narrowed(s, _F32)
    return lax.convert_element_type(s, dtype)


def round_pair(hi, lo, dtype):
    """hi + lo (float32 or float64 words) rounded to `dtype` once."""
    return _to(*_words.two_sum(hi, lo), dtype)


def rounded(v, error, dtype):
    """(out, doubt) for v within `error` of the exact value (relative), a
    double word or a float64 word: v (1 + error) rounded to `dtype`, and
    where v (1 - error) rounds otherwise. A NaN is not in doubt.

    A float64 word's bounds are rounded to float64 first (the error leaves
    room for that rounding): rounded to odd, each would take a two-sum and
    a rounding to odd more in the main pass, for bounds no narrower."""
    if isinstance(v, tuple):
        hi, lo = v
        w = error * lax.abs(hi)
        up, down = round_pair(hi, lo + w, dtype), round_pair(hi, lo - w, dtype)
    else:
        up, down = (_to(v * (1.0 + d), None, dtype) for d in (error, -error))
    return up, (up != down) & (up == up)


# The two passes and the loop -----------------------------------------------------


def _block_size(n):
    """A block of n words: a power of two near sqrt(n)."""
    return min(n, 1 << ((max(n, 1).bit_length()) // 2))


def _unravel(i, dims):
    """The index of flat position i (an int32 array) in an array of dims."""
    out = []
    for d in reversed(dims):
        out.append(i % np.int32(d))
        i = i // np.int32(d)
    return tuple(reversed(out))


def _doubt_words(approx, operands, n):
    """Where `approx` of the flat operands is in doubt: bit i % 32 of word
    i // 32."""

    def words(lo, hi, width):
        parts = [v if v.ndim == 0 else v[lo:hi].reshape(-1, width) for v in operands]
        doubt = approx(*parts, wide=True)[1]
        place = lax.broadcasted_iota(np.uint32, doubt.shape, 1)
        bits = lax.shift_left(lax.full_like(place, 1), place)
        return lax.reduce_sum(lax.select(doubt, bits, bits * np.uint32(0)), (1,))

    whole = n - n % _WORD
    out = words(0, whole, _WORD) if whole else np.zeros(0, np.uint32)
    if whole < n:
        out = lax.concatenate([out, words(whole, n, n - whole)], 0)
    return out


def _bits(words):
    """The words' bits, 32 booleans per word."""
    spread = lax.broadcast_in_dim(words.reshape(-1), (words.size, _WORD), (0,))
    bits = lax.shift_right_logical(spread, lax.iota(np.uint32, _WORD)[None])
    return (bits & np.uint32(1)).reshape(-1) != 0


def _pack(bits):
    """`_bits`'s inverse (of booleans or bytes)."""
    bits = bits.reshape(-1, _WORD).astype(np.uint32)
    return lax.reduce_sum(lax.shift_left(bits, lax.iota(np.uint32, _WORD)[None]), (1,))


def _elements(v, i):
    """The elements at flat indices i (a vector) of an operand in its own
    shape (a 0-d beta broadcast), by dynamic slices: XLA:CPU gathered from
    bfloat16 through a copy of all of it."""
    if v.ndim == 0:
        return lax.broadcast(v, i.shape)

    def take(v, i):
        ones = (1,) * v.ndim
        parts = [lax.dynamic_slice(v, _unravel(k, v.shape), ones) for k in i]
        return jnp.stack([p.reshape(()) for p in parts])

    return _read(v, i, take)


def _two_passes(approx, operands, over, n):
    """(values, words) in two passes: the bitmap from a first evaluation,
    then the result with the marked elements of `operands[over]` left as
    they are."""
    *data, beta = operands
    flat = (
        *(v.reshape(-1) for v in data),
        beta if beta.ndim == 0 else beta.reshape(-1),
    )
    words = _doubt_words(approx, flat, n)
    # The loop writes into the result in its own shape: a reshape of the
    # loop's result makes XLA copy it out of the operand's buffer.
    out = approx(*operands)[0]
    target = operands[over]
    return lax.select(_bits(words)[:n].reshape(target.shape), target, out), words


# One pass ---------------------------------------------------------------------
#
# Below `_highest._TWO_PASSES` bytes, the rounding test and the result are
# one loop fusion, and the elements in doubt hold a signaling NaN (which no
# arithmetic returns) until the loop settles them, rather than a second
# output (XLA would evaluate twice, once per output); the bitmap is read
# from the result, as bytes in its own shape (a bitmap of its booleans made
# XLA keep the evaluation's float64 quotients in memory, for both).

_MARKER = {
    np.dtype(np.float32): (np.uint32, 0x7F800001),
    _BF16: (np.uint16, 0x7F81),
    np.dtype(np.float16): (np.uint16, 0x7C01),
}


def _pending_mask(values, dtype=None):
    """Where `values` (of `dtype`, or its bits) hold the marker, quieted or
    not: XLA:CPU may quiet a signaling NaN it moves through a scalar
    register (a lone element). A NaN of the data with that payload is taken
    as pending too, and the loop gives it NaN again."""
    dtype = np.dtype(dtype or values.dtype)
    utype, bits = _MARKER[dtype]
    quiet = utype(1 << (jnp.finfo(dtype).nmant - 1))
    raw = values if values.dtype == utype else lax.bitcast_convert_type(values, utype)
    return (raw & ~quiet) == utype(bits)


def _read(v, i, take):
    """take(v, i), an element of v read inside the loop.

    XLA:CPU slices a bfloat16 array through a float32 copy of all of it,
    which it hoists out of the loop: two such copies (src and dd) were 8
    bytes of temporaries per element and made bfloat16 HIGHEST twice as
    slow at 16M elements, for a loop that almost never turns. Behind a
    conditional (always taken: i >= 0, which XLA does not fold) the copy is
    made only on a turn.
    """
    if v.dtype != _BF16:
        return take(v, i)
    return lax.cond(
        i.reshape(-1)[0] >= 0,
        take,
        lambda v, i: lax.full_like(v, 0, shape=i.shape),
        v,
        i,
    )


def _marked(approx, operands):
    """(values, words) in one pass: the elements in doubt hold `_MARKER`,
    and the bitmap is read from the result."""
    out, doubt = approx(*operands)
    dtype = out.dtype
    utype, bits = _MARKER[np.dtype(dtype)]
    as_bits = np.dtype(dtype) == _BF16
    if as_bits:
        out = lax.bitcast_convert_type(out, utype)
        marker = lax.full_like(out, bits)
    else:
        marker = lax.bitcast_convert_type(
            lax.full_like(out, 0, utype) + utype(bits), dtype
        )
    values = lax.select(doubt, marker, out)
    mask = _pending_mask(values, dtype).astype(np.uint8).reshape(-1)
    pad = -mask.size % _WORD
    if pad:
        mask = lax.concatenate([mask, np.zeros(pad, np.uint8)], 0)
    # bfloat16 stays bits through the loop: XLA:CPU selects and updates
    # bfloat16 through float32, and its rounding back turns the marker into
    # the canonical NaN (every element in doubt came back NaN).
    return values, _pack(mask)


def correctly_rounded(operands, over, approx, exact, *, two_passes, batch=1):
    """The correct rounding of an elementwise function of `operands` (the
    last one beta, 0-d or of the data's shape).

    `approx(*operands, wide=False)` is (out, doubt): the rounded
    approximation and where it is in doubt (`rounded`); `exact(*elements)`
    the correct rounding of a vector of elements. The elements in doubt are
    marked in a bitmap, in one pass (`_marked`) or, with `two_passes`,
    in two, which XLA can write over the donated operand `operands[over]`:
    their temporaries are the bitmap (a bit per element) and a few bytes per
    block. In the first of two passes `approx` takes four times its error
    (`wide`): the second evaluates again, and XLA may compile it otherwise,
    but both are within the error of the exact value, so the second's v (1
    + error) lies within three errors of the first's, and where the first is
    not in doubt it rounds to the same.

    The loop takes `batch` marked elements a turn, from the first block of
    about sqrt(n / 32) words that holds one (its flag: the block's largest
    word), its row of words and the row's set bits. Where fewer are left in
    the row than the batch, the rest repeat the first."""
    target = operands[over]
    shape, n = target.shape, target.size
    if n == 0:
        return approx(*operands)[0]
    if target.ndim == 0:
        *data, beta = operands
        data = (v.reshape(1) for v in data)
        one = correctly_rounded(
            (*data, beta), over, approx, exact, two_passes=two_passes, batch=batch
        )
        return one.reshape(())
    if two_passes:
        values, words = _two_passes(approx, operands, over, n)
        reads = (*operands[:over], None, *operands[over + 1 :])
    else:
        values, words = _marked(approx, operands)
        reads = operands

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
    batch = min(batch, n)

    def find(values, words, flags):
        """The first block with a mark, its row of bits and the first
        `batch` marked elements' flat indices and operands (the written-over
        one's where the second pass left it)."""
        j = lax.argmax(flags, 0, np.int32)
        row = _bits(lax.dynamic_slice(words, (j, np.int32(0)), (1, size)))
        if batch == 1:
            g = lax.argmax(row, 0, np.int32).reshape(1)
        else:
            (g,) = jnp.nonzero(row, size=batch)
            g = g.astype(np.int32)
            some = lax.iota(np.int32, batch) < jnp.sum(row, dtype=np.int32)
            g = lax.select(some, g, lax.broadcast(g[0], (batch,)))
        at = j * np.int32(size * _WORD) + g
        at = lax.clamp(np.int32(0), at, np.int32(n - 1))  # the padding's
        ops = (values if v is None else v for v in reads)
        return j, row, g, at, tuple(_elements(v, at) for v in ops)

    # Each turn finds its elements, then writes them: `find` is traced once
    # (finding the next ones after the write, with a first find before the
    # loop, compiled it twice: 60-80 ms more per op on a Zen 3). The
    # compiled loop copies nothing (tests/test_highest.py's temporaries).
    def fix(state):
        values, words, flags = state
        j, row, g, at, one = find(values, words, flags)
        if batch == 1:  # scalars: a vector of one broadcasts every constant
            new = exact(*(e.reshape(()) for e in one)).reshape(1)
        else:
            new = exact(*one)
        if new.dtype != values.dtype:  # bfloat16's bits
            new = lax.bitcast_convert_type(new, values.dtype)
        for k in range(batch):  # no scatter: XLA:CPU copied the result for it
            at_k = _unravel(at[k], shape)
            values = lax.dynamic_update_slice(
                values, new[k].reshape((1,) * len(shape)), at_k
            )
        if batch == 1:
            row = lax.dynamic_update_slice(row, np.zeros(1, bool), g)
        else:
            row = row.at[g].set(False)
        row = _pack(row)
        words = lax.dynamic_update_slice(words, row.reshape(1, size), (j, np.int32(0)))
        flags = lax.dynamic_update_slice(flags, lax.reduce_max(row, (0,))[None], (j,))
        return values, words, flags

    def more(state):
        return lax.reduce_max(state[2], (0,)) > np.uint32(0)

    out = lax.while_loop(more, fix, (values, words, flags))[0]
    return lax.bitcast_convert_type(out, target.dtype)
