"""Every finite float32 src, at a set of betas: `python maintainers/exhaustive.py`.

The float32 values and first derivatives of both ops, for each of the 2**32
bit patterns of `src` that is a finite float32 (4,278,190,080 of them) at
each beta of `BETAS`, against a float64 NumPy reference computed from the
float32 inputs (no formula here cancels in float64: see `_reference`).
`diff_dst` is drawn per element, log-uniform over the binades 2**-40 to
2**127 with either sign, so that the tails where only a large diff_dst
keeps the result normal are reached too. Only results whose exact value is
a normal float32 count (XLA:CPU flushes subnormals).

A second pass chooses `diff_dst` against the backward op (`adversarial`):
the error of `diff_dst * sigmoid(t)` in ulps is largest where the result's
significand is just below 2 (an ulp is smallest against the value there),
which a random `diff_dst` reaches only by chance; that pass puts every
result there, over random `t` of the core and the tail.

`--random-betas N` checks float32 `softplus` at N random betas instead,
called directly and under vmap with a per-example beta (3,000 take about
three minutes): the bound must hold between the table's
betas too.

`--tables DIR` writes exhaustive.md and exhaustive.json: per quantity and
beta, the maximum error in ulps, the input where it occurs, and how many
elements counted; the machine, the commit and the stride (`--render JSON`
writes them again from a run's exhaustive.json). The full run's time is
in its table (48 minutes on 2 cores; HIGHEST's, 75 minutes beside other
runs); `--stride N` takes every N-th bit pattern and thins the second pass
alike (tests/test_exhaustive.py runs the same code with a large stride).

`--accuracy highest` counts the results of accuracy=HIGHEST that are not
correctly rounded (exhaustive-highest.md); with `--platform tpu`, those of
the TPUs' float32 evaluation, lowered as for a TPU and run by this CPU
(exhaustive-highest-tpu.md).

A HIGHEST run can be split into parts that fit a session each: `--stride N
--offset K` takes the bit patterns K, K + N, K + 2N, ..., and with
`--tables` adds its counts to those of the table's other parts of the same
stride (each part listed with its machine, commit and time; the
bfloat16/float16 and near-midpoint passes run in part 0). The N parts
together are every finite float32 src, and the table says so; `--render
JSON --accuracy highest` writes it again from its JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import softplus, softplus_backward
from tools._common import (
    input_json,
    machine,
    machine_line,
    non_negative_int,
    output_dir,
    positive_int,
)

# The betas the issue names: both signs, powers of two and not, the
# extremes where the kernels rebalance beta.
BETAS = (1.0, -1.0, 0.5, 1.7, 3.0, 7.3, -2.5, 1e-3, 1e3, 2.0**-20, 3e30)
QUANTITIES = (
    "softplus_backward",
    "softplus",
    "d softplus/dx",
    "d softplus/dbeta",
    "d softplus_backward/dsrc",
    "d softplus_backward/dbeta",
    "d softplus_backward/d diff_dst",
)
# softplus_backward with diff_dst chosen against it (`adversarial`).
ADVERSARIAL = "softplus_backward, diff_dst against it"
_TINY = float(np.finfo(np.float32).tiny)
_MAX = float(np.finfo(np.float32).max)


@dataclass
class Cell:
    quantity: str
    beta: float
    max_ulp: float
    count: int
    src: float  # the worst input
    diff_dst: float
    got: float
    exact: float


def bit_patterns(start, stop, stride):
    """The finite float32 values among the bit patterns start, start +
    stride, ... below stop (uint32 arithmetic)."""
    bits = np.arange(start, stop, stride, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    return values[np.isfinite(values)]


def diff_dst_for(n, seed):
    """Per element: +-(1 + u) 2**e, e uniform in [-40, 127]."""
    rng = np.random.default_rng(seed)
    e = rng.integers(-40, 128, n)
    m = 1.0 + rng.random(n)
    sign = rng.choice(np.float64([-1.0, 1.0]), n)
    with np.errstate(over="ignore"):
        dd = (sign * np.ldexp(m, e)).astype(np.float32)
    return np.where(np.isfinite(dd), dd, np.float32(3e38) * np.sign(dd))


@jax.jit
def _ours(src, dd, beta):
    """Every quantity per element, beta traced (the bits of a concrete beta:
    tests/test_backward.py)."""
    ones = jnp.ones_like(src)
    return (
        softplus_backward(src, dd, beta),
        softplus(src, beta),
        jax.grad(lambda x: softplus(x, beta).sum())(src),
        jax.vmap(jax.grad(softplus, 1), (0, None))(src, beta),
        jax.grad(lambda s: softplus_backward(s, dd, beta).sum())(src),
        jax.vmap(jax.grad(softplus_backward, 2), (0, 0, None))(src, dd, beta),
        jax.grad(lambda d: softplus_backward(src, d, beta).sum())(ones),
    )


class _Reference:
    """The quantities in float64 from the float32 inputs, into buffers
    reused from chunk to chunk (a float64 temporary per operation would
    cost more in page faults than the arithmetic).

    A subnormal input is 0, as XLA:CPU reads it (denormals-are-zero). t =
    beta src is exact; exp, log1p and the divisions round once each (about
    2**-52 relative), and every formula is a product or a sum of terms of
    one sign: sigmoid(t) = 1 / (1 + e) or e / (1 + e), e = exp(-|t|), and
    d softplus / d beta = -(|t| s(-|t|) + log1p(e)) / beta**2.
    """

    _NAMES = ("s", "d", "t", "a", "e", "u", "neg", "sig", "w", "log1p")

    def __init__(self, n):
        self.buf = {k: np.empty(n) for k in self._NAMES}
        self.out = [np.empty(n) for _ in QUANTITIES]

    def __call__(self, src, dd, beta):
        n = src.size
        s, d, t, a, e, u, neg, sig, w, log1p = (self.buf[k][:n] for k in self._NAMES)
        out = [o[:n] for o in self.out]
        b = np.float64(np.float32(beta))
        np.copyto(s, src)
        s[np.abs(s) < _TINY] = 0.0
        np.copyto(d, dd)
        d[np.abs(d) < _TINY] = 0.0
        np.multiply(s, b, out=t)
        np.abs(t, out=a)
        np.negative(a, out=e)
        np.exp(e, out=e)
        np.add(e, 1.0, out=u)
        np.divide(1.0, u, out=u)  # s(|t|)
        np.multiply(e, u, out=neg)  # s(-|t|)
        np.copyto(sig, u)
        np.copyto(sig, neg, where=t < 0)
        np.multiply(neg, u, out=w)  # s(t) s(-t)
        np.log1p(e, out=log1p)
        np.multiply(d, sig, out=out[0])
        np.divide(log1p, b, out=out[1])
        np.add(out[1], s, out=out[1], where=t > 0)
        np.copyto(out[2], sig)
        np.multiply(a, neg, out=out[3])
        np.add(out[3], log1p, out=out[3])
        np.multiply(out[3], -1.0 / (b * b), out=out[3])
        np.multiply(d, w, out=out[4])
        np.multiply(out[4], s, out=out[5])
        np.multiply(out[4], b, out=out[4])
        np.copyto(out[6], sig)
        return out


def _worst(got, exact, tmp):
    """(max error in float32 ulps, its index, count) where the exact value is
    a normal float32; NaN or inf where it is normal counts as inf."""
    np.abs(exact, out=tmp)
    normal = (tmp >= _TINY) & (tmp <= _MAX)
    count = int(np.count_nonzero(normal))
    if not count:
        return 0.0, -1, 0
    # 1 / ulp at exact, exactly: the float64 exponent less float32's 23
    # mantissa bits, negated, rebuilt as a power of two.
    exponent = exact.view(np.int64) >> 52 & 0x7FF
    inv_ulp = ((2046 + 23 - exponent) << 52).view(np.float64)
    np.subtract(got, exact, out=tmp)
    np.abs(tmp, out=tmp)
    np.multiply(tmp, inv_ulp, out=tmp)
    tmp[np.isnan(tmp)] = np.inf
    tmp[~normal] = -1.0
    k = int(np.argmax(tmp))
    return float(tmp[k]), k, count


def run(betas=BETAS, stride=1, chunk=1 << 20, log=None):
    """{(quantity, beta): Cell} over every stride-th bit pattern. JAX works
    on the next (chunk, beta) while NumPy checks the current one."""
    cells = {
        (q, b): Cell(q, b, 0.0, 0, np.nan, np.nan, np.nan, np.nan)
        for b in betas
        for q in QUANTITIES
    }
    total = 1 << 32
    starts = range(0, total, chunk * stride)
    reference = _Reference(chunk)
    tmp = np.empty(chunk)
    got64 = np.empty(chunk)
    started = time.perf_counter()

    def jobs():
        for i, start in enumerate(starts):
            src = bit_patterns(start, min(start + chunk * stride, total), stride)
            if src.size:
                dd = diff_dst_for(src.size, i)
                for beta in betas:
                    yield i, src, dd, beta

    def check(job, got):
        i, src, dd, beta = job
        n = src.size
        exact = reference(src, dd, beta)
        for q, g, r in zip(QUANTITIES, got, exact, strict=True):
            g64 = got64[:n]
            np.copyto(g64, np.asarray(g))
            err, k, count = _worst(g64, r, tmp[:n])
            cell = cells[(q, beta)]
            cell.count += count
            if count and err > cell.max_ulp:
                cell.max_ulp = err
                cell.src, cell.diff_dst = float(src[k]), float(dd[k])
                cell.got, cell.exact = float(g64[k]), float(r[k])
        if log and beta == betas[-1]:
            done = (i + 1) / len(starts)
            spent = time.perf_counter() - started
            log(f"{done:6.1%} of the bit patterns, {spent / done - spent:6.0f} s left")

    pending = None
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        for job in jobs():
            launched = (job, _ours(job[1], job[2], np.float32(job[3])))  # async
            if pending is not None:
                check(*pending)
            pending = launched
        if pending is not None:
            check(*pending)
    return cells


def adversarial(betas=BETAS, n=1 << 20, rounds=48, seed=0):
    """{(ADVERSARIAL, beta): Cell}: softplus_backward on `rounds` x `n`
    random t per beta (half over [-100, 40], half over [-25, -5], where
    the largest errors were found), each with a diff_dst that puts
    the exact result just below a power of two: (1 - j 2**-24) 2**e times
    the exact denominator 1 + exp(-t), j in [1, 64), e in [-60, 60).
    `adversarial_size` scales it with a run's stride."""
    reference = _Reference(n)
    tmp = np.empty(n)
    cells = {}
    for beta in betas:
        b = np.float64(np.float32(beta))
        cell = Cell(ADVERSARIAL, beta, 0.0, 0, np.nan, np.nan, np.nan, np.nan)
        for r in range(rounds):
            rng = np.random.default_rng((seed, r))
            lo, hi = (-100.0, 40.0) if r % 2 == 0 else (-25.0, -5.0)
            src = (rng.uniform(lo, hi, n) / b).astype(np.float32)
            with np.errstate(over="ignore", under="ignore"):
                denominator = 1.0 + np.exp(-(src.astype(np.float64) * b))
                scale = (1.0 - rng.integers(1, 64, n) * 2.0**-24) * np.ldexp(
                    1.0, rng.integers(-60, 60, n)
                )
                dd = (denominator * scale).astype(np.float32)
            keep = np.isfinite(src) & np.isfinite(dd) & (np.abs(dd) >= _TINY)
            src, dd = src[keep], dd[keep]
            got = np.asarray(_backward(src, dd, np.float32(beta)), np.float64)
            with np.errstate(all="ignore"):
                exact = reference(src, dd, beta)[0][: src.size]
            err, k, count = _worst(got, exact, tmp[: src.size])
            cell.count += count
            if count and err > cell.max_ulp:
                cell.max_ulp, cell.src, cell.diff_dst = err, float(src[k]), float(dd[k])
                cell.got, cell.exact = float(got[k]), float(exact[k])
        cells[(ADVERSARIAL, beta)] = cell
    return cells


def adversarial_size(stride):
    """(n, rounds) of the second pass for a run over every stride-th bit
    pattern: 48 x 2**20 inputs per beta for the full run, that over the
    stride otherwise (at least 2**14), as the first pass thins."""
    total = max(1 << 14, (48 << 20) // stride)
    n = min(1 << 20, total)
    return n, total // n


@jax.jit
def _backward(src, dd, beta):
    return softplus_backward(src, dd, beta)


@jax.jit
def _forward(x, beta):
    return softplus(x, beta)


# softplus under vmap with a per-example beta: XLA multiplies by beta's
# reciprocal there, a second rounding.
_forward_vmap = jax.jit(jax.vmap(softplus))


def random_betas(count, n=1 << 20, seed=5):
    """{route: (max ulp, beta, src)} of float32 softplus, called directly
    and under vmap with a per-example beta (64 rows of n / 64), over `count`
    betas drawn log-uniform in [1e-4, 1e4] of either sign, n random t in
    [-4, 4] each (where its largest errors are): the betas between the
    table's."""
    rng = np.random.default_rng(seed)
    signs = rng.choice([-1.0, 1.0], count)
    betas = np.float32(signs * np.exp(rng.uniform(np.log(1e-4), np.log(1e4), count)))
    reference = _Reference(n)
    tmp = np.empty(n)
    ones = np.ones(n, np.float32)
    worst = {route: (0.0, np.nan, np.nan) for route in ("softplus", "under vmap")}
    for b in betas:
        src = (rng.uniform(-4.0, 4.0, n) / np.float64(b)).astype(np.float32)
        with np.errstate(all="ignore"):
            exact = reference(src, ones, float(b))[1]
        rows = _forward_vmap(src.reshape(64, -1), np.full(64, b))
        for route, got in (("softplus", _forward(src, b)), ("under vmap", rows)):
            got = np.asarray(got, np.float64).reshape(-1)
            err, k, _ = _worst(got, exact, tmp)
            if err > worst[route][0]:
                worst[route] = (err, float(b), float(src[k]))
    return worst


# accuracy=HIGHEST: correct rounding, decided exactly -------------------------

HIGHEST = jax.lax.AccuracyMode.HIGHEST
HIGHEST_QUANTITIES = (
    "softplus_backward",
    "softplus_backward, diff_dst near a midpoint",
    "softplus",
)
_HALF = {"bfloat16": (jnp.bfloat16, 8), "float16": (jnp.float16, 11)}


@jax.jit
def _highest(src, dd, beta):
    return (
        softplus_backward(src, dd, beta, accuracy=HIGHEST),
        softplus(src, beta, accuracy=HIGHEST),
    )


def round_to(v, bits):
    """float64 v rounded to `bits` significant bits, to nearest even (NumPy,
    from the bits: no double rounding), as float64; inf and NaN kept."""
    v = np.asarray(v, np.float64)
    drop = 53 - bits
    u = np.abs(v).view(np.int64)
    half = np.int64(1 << (drop - 1))
    odd = (u >> drop) & 1
    r = (u + half - 1 + odd) & np.int64(~((1 << drop) - 1))
    out = np.copysign(r.view(np.float64), v)
    return np.where(np.isfinite(v), out, v)


def _decide(approx, error, bits):
    """(verdict, open): `approx` (float64, within `error` relative of the
    exact value) rounded to `bits` bits where approx (1 +- error) round
    alike (rounding is monotone: then the exact value, which lies between
    them, rounds so too), and the indices where they do not."""
    with np.errstate(all="ignore"):
        up = round_to(approx * (1 + error), bits)
        down = round_to(approx * (1 - error), bits)
    return up, np.flatnonzero((up != down) & np.isfinite(approx))


def _float64_references(src, dd, beta):
    """(backward, softplus) in float64 from float32 inputs (a subnormal one
    is 0, as XLA:CPU reads it): t = beta src is exact, and NumPy's exp and
    log1p (within an ulp) and three or four roundings leave them within
    2**-50 of the exact values."""
    b64 = np.float64(np.float32(beta))
    s = np.where(np.abs(src) < _TINY, 0.0, src.astype(np.float64))
    d = np.where(np.abs(dd) < _TINY, 0.0, dd.astype(np.float64))
    with np.errstate(all="ignore"):
        t = b64 * s
        e = np.exp(-np.abs(t))
        sig = np.where(t >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        fwd = np.log1p(e) / b64
        return d * sig, np.where(t > 0, s + fwd, fwd), s, d, b64


def _long_double(s, d, b64, op):
    """The same in long double (x87's 64-bit significand: about 2**-61)."""
    ld = np.longdouble
    with np.errstate(all="ignore"):
        t = ld(b64) * s.astype(ld)
        if op == "backward":
            return d.astype(ld) / (ld(1) + np.exp(-t))
        v = np.log1p(np.exp(-np.abs(t))) / ld(b64)
        return np.where(t > 0, s.astype(ld) + v, v)


def _mp_rounded(s, d, b64, op, bits):
    """mpmath's value at 80 digits, rounded to `bits` bits (ties to even)."""
    import mpmath

    out = np.empty(s.size)
    with mpmath.workdps(80):
        b = mpmath.mpf(float(b64))
        for k in range(s.size):
            x = mpmath.mpf(float(s[k]))
            t = b * x
            if op == "backward":
                v = mpmath.mpf(float(d[k])) / (1 + mpmath.exp(-t))
            else:
                v = mpmath.log1p(mpmath.exp(-abs(t))) / b + (x if t > 0 else 0)
            out[k] = _mp_round(v, bits)
    return out


def _mp_round(v, bits):
    """An mpmath value rounded to `bits` significant bits (ties to even), as
    a float64; 0, infinities and NaN as they are."""
    import mpmath

    if v == 0 or not mpmath.isfinite(v):
        return float(v)
    top = int(mpmath.floor(mpmath.log(abs(v), 2)))
    unit = mpmath.mpf(2) ** (top - bits + 1)
    q = v / unit
    n = int(mpmath.floor(q))
    frac = q - n
    if frac > 0.5 or (frac == 0.5 and n % 2):
        n += 1
    return float(n * unit)


def correctly_rounded(src, dd, beta, bits):
    """{op: (values, levels, approx)}: softplus_backward ("backward") and
    softplus ("forward") of float32 inputs correctly rounded to `bits` bits
    (as float64), decided in float64 (2**-48 of room), in long double where
    that cannot (2**-50 of room: its own error is 2**-61, and the float64
    ends of the interval move by 2**-53 at most), and in mpmath where
    neither can; levels counts the elements that each of the last two
    decided, and approx is the float64 value (within 2**-48)."""
    bwd, fwd, s, d, b64 = _float64_references(src, dd, beta)
    out = {}
    for op, approx in (("backward", bwd), ("forward", fwd)):
        verdict, open_ = _decide(approx, 2.0**-48, bits)
        levels = {"long double": int(open_.size), "mpmath": 0}
        if open_.size:
            ld = _long_double(s[open_], d[open_], b64, op)
            with np.errstate(all="ignore"):
                room = np.longdouble(2.0**-50)
                ends = [np.float64(ld * (1 + room)), np.float64(ld * (1 - room))]
            again = round_to(ends[0], bits)
            hard = np.flatnonzero(again != round_to(ends[1], bits))
            if hard.size:
                levels["mpmath"] = int(hard.size)
                idx = open_[hard]
                again[hard] = _mp_rounded(s[idx], d[idx], b64, op, bits)
            verdict[open_] = again
        out[op] = (verdict, levels, approx)
    return out


def near_midpoint_diff_dst(beta, n, rng, bits=24):
    """(src, diff_dst) pairs whose exact softplus_backward lies within
    2**-46 (relative) of a rounding midpoint of a `bits`-bit result, from `n`
    random t: with R = s(t) 2**w in [1, 4), a continued-fraction convergent
    p / q of R with p odd in [2**bits, 2**(bits + 1)) (a midpoint's
    significand) and q below 2**bits (diff_dst's) gives diff_dst = q 2**j
    and diff_dst s(t) = (p + (R q - p)) 2**(j + e - w), as close to the
    midpoint p 2**(j + e - w) as |R q - p| / p, which is small whenever the
    next partial quotient is large. The float64 evaluation cannot round
    most of these: they take the double-double step."""
    import mpmath

    b = np.float64(np.float32(beta))
    # t within [-30, 30] and what a finite float32 src reaches at this beta.
    span = min(30.0, abs(b) * float(np.finfo(np.float32).max) * 0.99)
    srcs, dds = [], []
    with mpmath.workdps(60):
        for _ in range(n):
            x = np.float32(rng.uniform(-span, span) / b)
            sig = 1 / (1 + mpmath.exp(-mpmath.mpf(float(b)) * mpmath.mpf(float(x))))
            e = int(mpmath.floor(mpmath.log(sig, 2)))
            for w in (0, 1):
                r = sig * mpmath.mpf(2) ** (w - e)
                for p_, q_ in _convergents(r, 1 << bits):
                    if not (p_ % 2 and (1 << bits) <= p_ < (1 << (bits + 1))):
                        continue
                    if abs(r * q_ - p_) / p_ < mpmath.mpf(2) ** -46:
                        dd = np.float32(q_ * 2.0 ** int(rng.integers(-40, 40)))
                        srcs.append(x)
                        dds.append(dd * np.float32(rng.choice([-1, 1])))
    return np.array(srcs, np.float32), np.array(dds, np.float32)


def near_midpoint_softplus(n, rng, bits=24, tries=32):
    """(x, beta, want, gap): `n` softplus inputs whose exact value lies near
    a rounding midpoint of a `bits`-bit result, the correct rounding of each
    (float64) and its distance from the midpoint relative to the value.

    Each input has its own beta: for a random x of `bits` bits and one of
    the first midpoints above it, m = x + (k + 1/2) ulp(x), k < 4,
    x + log1p(e**-(b x)) / b = m is solved for b (in float64; t = b x is
    then 14-17 for float32, 3-7 for the half types) and b rounded to
    float32, which moves log1p's term, (k + 1/2) ulp(x), by up to (t + 1)
    2**-25 of itself. Of `tries` candidates per input (their distances
    measured in long double), the `n` closest are kept. For float32
    results about one candidate in 32 lies within the float64 step's doubt
    (2**-49) and one in 500 within 2**-53; for bfloat16 and float16, whose
    ulp is far larger, the closest stay near 2**-42, which float64
    decides. Half of them are negated (softplus(-x, -b) = -softplus(x, b)).
    """
    import mpmath

    lo, hi = {24: (-40, 40), 11: (-6, 12), 8: (-40, 40)}[bits]
    size = n * tries
    x = round_to(np.exp2(rng.uniform(lo, hi, size)), bits)
    unit = np.exp2(np.floor(np.log2(x)) - bits + 1)
    m = x + (rng.integers(0, 4, size) + 0.5) * unit
    r = (m - x) / x  # log1p(e**-t) / t = r
    t = -np.log(r)
    for _ in range(8):
        t = -np.log(np.expm1(r * t))
    b = t / x
    for _ in range(3):  # Newton on log1p(e**-(b x)) / b - (m - x)
        e = np.exp(-b * x)
        g = np.log1p(e) / b - (m - x)
        b -= g / (-(x * e / (1 + e)) / b - np.log1p(e) / b**2)
    b = b.astype(np.float32).astype(np.float64)
    ld = np.longdouble
    v = x.astype(ld) + np.log1p(np.exp(-b.astype(ld) * x.astype(ld))) / b.astype(ld)
    keep = np.argsort(np.abs(v - m.astype(ld)) / v)[:n]
    x, b, m = x[keep], b[keep], m[keep]
    want, gap = np.empty(n), np.empty(n)
    with mpmath.workdps(60):
        for i in range(n):
            mb, mx = mpmath.mpf(float(b[i])), mpmath.mpf(float(x[i]))
            exact = mx + mpmath.log1p(mpmath.exp(-mb * mx)) / mb
            want[i] = _mp_round(exact, bits)
            gap[i] = float(abs(exact - mpmath.mpf(float(m[i]))) / exact)
    sign = rng.choice([-1.0, 1.0], n)
    return x * sign, b * sign, want * sign, gap


def _convergents(r, limit):
    """The continued-fraction convergents p / q of r with q < limit."""
    import mpmath

    h0, h1, k0, k1 = 0, 1, 1, 0
    x = r
    while True:
        a = int(mpmath.floor(x))
        h0, h1 = h1, a * h1 + h0
        k0, k1 = k1, a * k1 + k0
        if k1 >= limit:
            return
        yield h1, k1
        frac = x - a
        if frac == 0:
            return
        x = 1 / frac


def run_highest(
    betas=BETAS, stride=1, chunk=1 << 20, near=2000, seed=0, log=None, offset=0
):
    """{(quantity, beta): HighestCell}: float32 softplus_backward (diff_dst
    random over binades) and softplus at HIGHEST on the bit patterns
    offset, offset + stride, ... of src; at offset 0, softplus_backward
    with diff_dst near a midpoint at `near` random t per beta
    (`near_midpoint_diff_dst`) and every bfloat16 / float16 bit pattern of
    src for both ops; counted: results whose exact value is normal and that
    differ from its correct rounding."""
    cells: dict = {}

    def cell(q, beta):
        return cells.setdefault((q, beta), HighestCell(q, beta))

    def check(names, got, src, dd, beta, bits, tiny=_TINY, top=_MAX):
        want = correctly_rounded(
            src.astype(np.float32), dd.astype(np.float32), beta, bits
        )
        for name, g, op in zip(names, got, ("backward", "forward"), strict=False):
            if name is not None:
                wanted = dd if op == "backward" else None
                got64 = np.asarray(g, np.float64)
                _count(cell(name, beta), got64, want[op], src, wanted, tiny, top)

    total = 1 << 32
    starts = list(range(0, total, chunk * stride))
    started = time.perf_counter()
    for i, start in enumerate(starts):
        src = bit_patterns(start + offset, min(start + chunk * stride, total), stride)
        if not src.size:
            continue
        dd = diff_dst_for(src.size, i + (offset << 16))
        for beta in betas:
            got = _highest(src, dd, np.float32(beta))
            check(("softplus_backward", "softplus"), got, src, dd, beta, 24)
        if log:
            done = (i + 1) / len(starts)
            spent = time.perf_counter() - started
            log(f"{done:6.1%} of the bit patterns, {spent / done - spent:6.0f} s left")
    if offset:
        return cells
    rng = np.random.default_rng(seed)
    for beta in betas:
        src, dd = near_midpoint_diff_dst(beta, near, rng)
        got = _highest(src, dd, np.float32(beta))
        check((HIGHEST_QUANTITIES[1], None), got, src, dd, beta, 24)
        if log:
            log(f"near midpoints, beta {beta:g}: {src.size} inputs")
    bits16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for name, (dtype, bits) in _HALF.items():
        src = bits16.view(dtype)
        src = src[np.isfinite(src.astype(np.float32))]
        dd = diff_dst_for(src.size, 7)
        if dtype == jnp.float16:
            dd = np.clip(dd, -65504, 65504)
        dd = dd.astype(dtype)
        info = jnp.finfo(dtype)
        for beta in betas:
            got = _highest(src, dd, np.float32(beta))
            names = (f"softplus_backward, {name}", f"softplus, {name}")
            check(names, got, src, dd, beta, bits, float(info.tiny), float(info.max))
    return cells


def random_betas_highest(count, n=1 << 18, near=100, seed=11, log=None):
    """{quantity: HighestCell} of accuracy=HIGHEST over `count` random betas
    (log-uniform over the whole normal float32 range, either sign): per
    beta, `n` random t over the core and the tails with diff_dst random over
    binades, and `near` t with diff_dst near a midpoint
    (`near_midpoint_diff_dst`)."""
    rng = np.random.default_rng(seed)
    cells = {q: HighestCell(q, float("nan")) for q in HIGHEST_QUANTITIES}
    for k in range(count):
        beta = float(
            np.float32(np.exp(rng.uniform(np.log(_TINY), np.log(_MAX))))
            * rng.choice([-1.0, 1.0])
        )
        t = np.concatenate(
            [rng.uniform(-30, 30, n // 2), rng.uniform(-180, 90, n // 2)]
        )
        with np.errstate(over="ignore"):
            src = (t / np.float64(np.float32(beta))).astype(np.float32)
        keep = np.isfinite(src)
        src = src[keep]
        dd = diff_dst_for(src.size, k)
        got = _highest(src, dd, np.float32(beta))
        want = correctly_rounded(src, dd, beta, 24)
        _count(cells["softplus_backward"], np.asarray(got[0], np.float64),
               want["backward"], src, dd)  # fmt: skip
        _count(cells["softplus"], np.asarray(got[1], np.float64),
               want["forward"], src, None)  # fmt: skip
        s2, d2 = near_midpoint_diff_dst(beta, near, rng)
        if s2.size:
            got = _highest(s2, d2, np.float32(beta))
            want = correctly_rounded(s2, d2, beta, 24)
            _count(cells[HIGHEST_QUANTITIES[1]], np.asarray(got[0], np.float64),
                   want["backward"], s2, d2)  # fmt: skip
        if log and (k + 1) % 20 == 0:
            log(f"{k + 1}/{count} random betas")
    return cells


@dataclass
class HighestCell:
    quantity: str
    beta: float
    wrong: int = 0  # results not correctly rounded
    count: int = 0  # results whose exact value is normal
    long_double: int = 0  # elements the float64 reference left open
    mpmath: int = 0  # ... and long double too
    src: float = float("nan")  # the first wrong one
    diff_dst: float = float("nan")
    got: float = float("nan")
    want: float = float("nan")


def exact_is_normal(want, approx, tiny=_TINY, top=_MAX):
    """Where the exact value is a normal number (the domain of HIGHEST's
    guarantee): its correct rounding `want` is above the smallest normal
    `tiny`, or equal to it and the float64 value `approx` (within 2**-48) is
    not below it. An exact value just below `tiny` that rounds up to it is
    not normal: a platform that flushes subnormals may return 0 there."""
    a = np.abs(want)
    edge = (a == tiny) & (np.abs(approx) >= tiny)
    return np.isfinite(want) & (a <= top) & ((a > tiny) | edge)


def _count(cell, got, reference, src, dd, tiny=_TINY, top=_MAX):
    """Count into `cell` the results `got` that differ from the correct
    rounding where the exact value is normal (`reference`: an entry of
    `correctly_rounded`)."""
    want, levels, approx = reference
    normal = exact_is_normal(want, approx, tiny, top)
    wrong = np.flatnonzero(normal & (got != want))
    cell.count += int(np.count_nonzero(normal))
    cell.long_double += levels["long double"]
    cell.mpmath += levels["mpmath"]
    if wrong.size and not cell.wrong:
        k = wrong[0]
        cell.src, cell.got, cell.want = float(src[k]), float(got[k]), float(want[k])
        cell.diff_dst = float(dd[k]) if dd is not None else float("nan")
    cell.wrong += int(wrong.size)


def coverage(stride, offsets=(0,)) -> str:
    """Which float32 bit patterns of src the parts `offsets` of a run with
    `stride` took, in words."""
    offsets = sorted(set(offsets))
    if offsets == list(range(stride)):
        return "every finite float32 src"
    if offsets == [0]:
        return f"every {stride}-th bit pattern"
    *head, last = map(str, offsets)
    which = f"{', '.join(head)} or {last}" if head else last
    return (
        f"{len(offsets)} of the {stride} parts: the bit patterns equal to "
        f"{which} mod {stride}"
    )


def markdown_highest(cells, stride, offsets=(0,)) -> str:
    betas = list(dict.fromkeys(c.beta for c in cells.values()))
    quantities = list(dict.fromkeys(c.quantity for c in cells.values()))
    halves = any("float16" in q for q in quantities)
    out = [
        "Results not correctly rounded at accuracy=HIGHEST, of those whose exact "
        f"value is a normal number ({coverage(stride, offsets)}; "
        + ("every bfloat16 and float16 src; " if halves else "")
        + "diff_dst random over binades, or chosen so that the result lies "
        "within about 2**-46 of a rounding midpoint):\n"
    ]
    heads = " | ".join(f"beta = {b:g}" for b in betas)
    out.append(f"| quantity | {heads} | counted |")
    out.append("|---|" + "---:|" * (len(betas) + 1))
    for q in quantities:
        row = [str(cells[(q, b)].wrong) for b in betas]
        counted = sum(cells[(q, b)].count for b in betas)
        out.append(f"| {q} | " + " | ".join(row) + f" | {counted:,} |")
    return "\n".join(out) + "\n"


def markdown(cells, stride) -> str:
    """One table: a row per quantity, a column per beta (max ulp)."""
    betas = list(dict.fromkeys(c.beta for c in cells.values()))
    quantities = list(dict.fromkeys(c.quantity for c in cells.values()))
    which = (
        "every finite float32 src" if stride == 1 else f"every {stride}-th bit pattern"
    )
    out = [f"Max error in float32 ulps over {which}:\n"]
    out.append("| quantity | " + " | ".join(f"beta = {b:g}" for b in betas) + " |")
    out.append("|---|" + "---:|" * len(betas))
    for q in quantities:
        row = [_max_cell(cells[(q, b)]) for b in betas]
        out.append(f"| {q} | " + " | ".join(row) + " |")
    tried = [c.count for c in cells.values() if c.quantity == ADVERSARIAL]
    if tried:
        out.append(
            f"\n{ADVERSARIAL}: the second pass, about {min(tried):,} inputs per beta"
            " whose diff_dst puts the result just below a power of two (where an ulp"
            " is smallest against it), t random over the core and the tail."
        )
    if any(not c.count for c in cells.values()):
        out.append(
            "\nnone normal: no exact value in the cell is a normal float32 (at"
            " |beta| above 9.2e18, |d softplus / d beta| < 1 / beta**2 is below"
            " the smallest normal for every src)."
        )
    out.append("\nWhere each maximum occurs (src, diff_dst, got, exact):\n")
    out.append("| quantity | beta | src | diff_dst | got | exact | ulp | counted |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for c in cells.values():
        if not c.count:
            continue
        out.append(
            f"| {c.quantity} | {c.beta:g} | {c.src!r} | {c.diff_dst!r} | {c.got!r} | "
            f"{c.exact!r} | {c.max_ulp:.3f} | {c.count:,} |"
        )
    return "\n".join(out) + "\n"


def _max_cell(cell):
    return f"{cell.max_ulp:.3f}" if cell.count else "none normal"


def _commit():
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_tables(directory, cells, stride, seconds, m=None, commit=None):
    """exhaustive.md and exhaustive.json; `m` and `commit` default to this
    machine and checkout's (given: a run rendered again)."""
    m = m or machine()
    commit = commit or _commit()
    where = (
        f"Measured on {machine_line(m)}, commit {commit}, in {seconds / 60:.0f} "
        f"minutes; written by `python maintainers/exhaustive.py --tables "
        f"{directory}`."
    )
    text = where + "\n\n" + markdown(cells, stride)
    _write(directory, "exhaustive", text, m, commit, stride, seconds, cells)


def _write(directory, name, text, m, commit, stride, seconds, cells):
    """name.md (`text`) and name.json (the run) in `directory`."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{name}.md"), "w") as f:
        f.write(text)
    with open(os.path.join(directory, f"{name}.json"), "w") as f:
        json.dump(
            {
                "machine": m,
                "commit": commit,
                "stride": stride,
                "seconds": seconds,
                "cells": [asdict(c) for c in cells.values()],
            },
            f,
            indent=1,
        )


def _platform(name):
    """A context in which the ops are lowered as for platform `name`."""
    if name == "cpu":
        return contextlib.nullcontext()
    from jax_softplus.testing import lowered_as

    return lowered_as(name)


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def _highest_runs(path, stride, offset):
    """The runs in the table's JSON at `path` that a new part (`stride`,
    `offset`) keeps: the other parts of the same stride. A JSON from before
    parts holds one run, part 0."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        data = json.load(f)
    runs = data.get("runs", [{"offset": 0, **data}])
    return [r for r in runs if r["stride"] == stride and r["offset"] != offset]


def merge_highest(runs):
    """{(quantity, beta): HighestCell}: the counts of `runs` (JSON runs of
    the parts of one stride) added up; the first wrong result kept."""
    cells: dict = {}
    for run in runs:
        for c in run["cells"]:
            part = HighestCell(**c)
            key = (part.quantity, part.beta)
            if key not in cells:
                cells[key] = part
                continue
            total = cells[key]
            if part.wrong and not total.wrong:
                total.src, total.diff_dst = part.src, part.diff_dst
                total.got, total.want = part.got, part.want
            total.wrong += part.wrong
            total.count += part.count
            total.long_double += part.long_double
            total.mpmath += part.mpmath
    return cells


def write_highest_tables(directory, cells, stride, seconds, platform="cpu", offset=0):
    """exhaustive-highest.md and .json (platform "tpu": -tpu.md and .json).
    The part `offset` of a run with `stride` joins the parts of that stride
    already in the JSON (replacing an earlier run of the same part); the
    table adds up their counts and names each part's machine, commit and
    time."""
    name = "exhaustive-highest" + ("" if platform == "cpu" else f"-{platform}")
    path = os.path.join(directory, f"{name}.json")
    run = {
        "machine": machine(),
        "commit": _commit(),
        "stride": stride,
        "offset": offset,
        "seconds": seconds,
        "cells": [asdict(c) for c in cells.values()],
    }
    runs = sorted(
        _highest_runs(path, stride, offset) + [run], key=lambda r: r["offset"]
    )
    write_highest_runs(directory, runs, platform)


def write_highest_runs(directory, runs, platform="cpu"):
    """exhaustive-highest(-platform).md and .json from `runs`, the JSON runs
    of the parts of one stride (`--render` writes a table again from its
    JSON this way)."""
    name = "exhaustive-highest" + ("" if platform == "cpu" else f"-{platform}")
    stride, offsets = runs[0]["stride"], [r["offset"] for r in runs]
    flags = "" if platform == "cpu" else f" --platform {platform}"
    flags += "" if stride == 1 else f" --stride {stride}"
    command = "`python maintainers/exhaustive.py --accuracy highest" + flags
    if offsets == [0]:
        (run,) = runs
        where = (
            f"Measured on {machine_line(run['machine'])}, commit {run['commit']}, in "
            f"{run['seconds'] / 60:.0f} minutes; written by {command} --tables "
            f"{directory}`."
        )
    else:
        machines: dict = {}  # machine line: its parts, in order
        for r in runs:
            machines.setdefault(machine_line(r["machine"]), []).append(
                f"part {r['offset']}: commit {r['commit']}, "
                f"in {r['seconds'] / 60:.0f} minutes"
            )
        where = (
            "Measured on "
            + " and on ".join(f"{m} ({'; '.join(p)})" for m, p in machines.items())
            + f"; {len(runs)} parts, each written by {command} --offset K "
            f"--tables {directory}`, whose counts the table adds up."
        )
    if platform != "cpu":
        where += (
            f" Lowered as for a {platform.upper()} (`jax_softplus.testing."
            f'lowered_as("{platform}")`: the evaluation in float32 arithmetic, '
            "with no float64 operation) and run by the CPU's XLA."
        )
    merged = merge_highest(runs)
    ld = sum(c.long_double for c in merged.values())
    mp = sum(c.mpmath for c in merged.values())
    how = (
        f"\nThe reference rounded each exact value in float64 where that could "
        f"decide, in long double for {ld:,} elements where it could not, and in "
        f"mpmath for {mp:,} where neither could.\n"
    )
    text = where + "\n\n" + markdown_highest(merged, stride, offsets) + how
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{name}.md"), "w") as f:
        f.write(text)
    with open(os.path.join(directory, f"{name}.json"), "w") as f:
        json.dump({"runs": runs}, f, indent=1)


# What a default run's JSON holds (`write_tables`), for --render.
_RUN_KEYS = ("cells", "stride", "seconds", "machine", "commit")


def _render_runs(parser, path):
    """The runs of a table's JSON for --render (a run, or {"runs": [...]} of
    HIGHEST's parts), each with `_RUN_KEYS`; else a usage error."""
    with open(path) as f:
        data = json.load(f)
    runs = data.get("runs", [data]) if isinstance(data, dict) else None
    if not isinstance(runs, list) or not runs:
        runs = [None]  # reported as lacking every key
    for run in runs:
        missing = [k for k in _RUN_KEYS if not isinstance(run, dict) or k not in run]
        if missing:
            lacks = ", ".join(missing)
            parser.error(f"--render: {path!r} is no run's JSON (it lacks {lacks})")
    return runs


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python maintainers/exhaustive.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--stride", type=positive_int, default=1, help="every N-th bit pattern"
    )
    p.add_argument(
        "--tables", type=output_dir, metavar="DIR", help="write exhaustive.md/.json"
    )
    p.add_argument(
        "--random-betas",
        type=positive_int,
        metavar="N",
        help="instead: float32 softplus at N random betas; print the worst",
    )
    p.add_argument(
        "--render",
        type=input_json,
        metavar="JSON",
        help="write the tables (--tables) again from a run's JSON "
        "(with --accuracy highest: exhaustive-highest(-tpu).json)",
    )
    p.add_argument(
        "--accuracy",
        choices=("default", "highest"),
        default="default",
        help="highest: count the results of accuracy=HIGHEST that are not "
        "correctly rounded (exhaustive-highest.md/.json)",
    )
    p.add_argument(
        "--near",
        type=non_negative_int,
        default=4000,
        metavar="N",
        help="with --accuracy highest: random t per beta for the diff_dst "
        "chosen near a rounding midpoint",
    )
    p.add_argument(
        "--platform",
        choices=("cpu", "tpu"),
        default="cpu",
        help="with --accuracy highest: the evaluation of this platform, "
        "lowered for it and run here (tpu: float32 arithmetic; "
        "exhaustive-highest-tpu.md/.json)",
    )
    p.add_argument(
        "--offset",
        type=non_negative_int,
        default=0,
        metavar="K",
        help="with --accuracy highest: the part K of the run, bit patterns "
        "K, K + N, ... (N: --stride), added to the table's other parts",
    )
    args = p.parse_args(argv)
    if args.platform != "cpu" and args.accuracy != "highest":
        p.error("--platform needs --accuracy highest")
    if args.offset and args.accuracy != "highest":
        p.error("--offset needs --accuracy highest")
    if args.offset >= args.stride:
        p.error(
            f"--offset {args.offset} is not below --stride {args.stride}: "
            f"the parts are 0 to {args.stride - 1}"
        )
    if args.accuracy == "highest" and args.random_betas:
        started = time.perf_counter()
        cells = random_betas_highest(args.random_betas, log=_log)
        for c in cells.values():
            print(
                f"{c.quantity}, {args.random_betas} random betas: {c.wrong} of "
                f"{c.count:,} not correctly rounded (long double for "
                f"{c.long_double:,}, mpmath for {c.mpmath:,})"
            )
        print(f"{(time.perf_counter() - started) / 60:.1f} min on {machine_line()}")
        return
    if args.accuracy == "highest" and args.render:
        if not args.tables:
            p.error("--render needs --tables DIR")
        runs = [{"offset": 0, **r} for r in _render_runs(p, args.render)]
        write_highest_runs(args.tables, runs, args.platform)
        print(f"tables written to {args.tables}")
        return
    if args.accuracy == "highest":
        started = time.perf_counter()
        with _platform(args.platform):
            cells = run_highest(
                stride=args.stride, near=args.near, log=_log, offset=args.offset
            )
        seconds = time.perf_counter() - started
        print(markdown_highest(cells, args.stride, (args.offset,)))
        if args.tables:
            write_highest_tables(
                args.tables, cells, args.stride, seconds, args.platform, args.offset
            )
            print(f"tables written to {args.tables}")
        return
    if args.random_betas:
        for route, (err, beta, src) in random_betas(args.random_betas).items():
            print(
                f"{route}, {args.random_betas} random betas: {err:.3f} ulp at worst"
                f" (beta {beta!r}, src {src!r})"
            )
        return
    if args.render:
        if not args.tables:
            p.error("--render needs --tables DIR")
        data = _render_runs(p, args.render)[0]
        cells = {(c["quantity"], c["beta"]): Cell(**c) for c in data["cells"]}
        if not any(q == ADVERSARIAL for q, _ in cells):
            cells.update(adversarial())  # a run from before that pass
        write_tables(
            args.tables, cells, data["stride"], data["seconds"],
            data["machine"], data["commit"],
        )  # fmt: skip
        print(markdown(cells, data["stride"]))
        return

    started = time.perf_counter()
    cells = run(stride=args.stride, log=_log)
    n, rounds = adversarial_size(args.stride)
    cells.update(adversarial(n=n, rounds=rounds))
    seconds = time.perf_counter() - started
    print(markdown(cells, args.stride))
    if args.tables:
        write_tables(args.tables, cells, args.stride, seconds)
        print(f"tables written to {args.tables}")


if __name__ == "__main__":
    main()
