"""Hashes of every output of the sweeps: `python maintainers/same_bits.py`.

A refactor that must keep every output bit runs this before and after and
compares: `--out before.json`, then `--compare before.json`. Each cell is
the SHA-256 of one route's outputs over one sweep, with its element count:

- float32 `src` over the bit patterns 0, S, 2S, ... (`--stride S`; 1 is
  every finite float32, `exhaustive.py`'s sweep) at `exhaustive.BETAS`:
  the seven quantities of `exhaustive._ours` (beta traced), both ops with
  the beta a Python float (the kernels' constant-beta forms), and both ops
  at HIGHEST as a CPU, a GPU and a TPU lower them (`lowered_as`), each
  route in chunks of 2**20 and, for the first chunk of 2**23, in the
  two-pass form that large results take;
- every bfloat16 and float16 pattern, the same routes;
- near-midpoint inputs (`exhaustive.near_midpoint_*`, fixed seeds), which
  take the resolve loops of every HIGHEST evaluation;
- float64 `src` (random, fixed seed) at the default accuracy, both ops and
  their first derivatives;
- float32 and float64 `src` (random, fixed seed) at `BETAS`: five second
  derivatives as a CPU, a GPU and a TPU lower them (`second_derivatives`);
- the elements of those sweeps that HIGHEST's float64 evaluation leaves in
  doubt (`exact_steps`), and the double-double steps' values there: the
  only elements those steps reach. `--exact-steps` runs this part alone,
  so that a change to those steps is checked at `--stride 1` in minutes.

`--programs` hashes instead the StableHLO that each route lowers to (both
ops, their first and second derivatives, each dtype, accuracy, beta kind
and platform, at the sizes that take one pass and two): a refactor meant
to change no operation (a function moved, `a + b` written `lax.add(a, b)`)
shows it in seconds, since the same program gives the same bits.
`--compiled` hashes the same routes as XLA compiles them on this CPU
(each platform's evaluation, through `lowered_as`), as dataflow, without
names, source locations and the order of independent instructions: a
refactor that changes how the StableHLO is built (a
primitive where a traced function was, a rule where a `custom_jvp` was)
but not what XLA makes of it shows it in minutes; the same compiled
program gives the same bits at the same speed.

`diff_dst` is `exhaustive.diff_dst_for` of the chunk (fixed seeds). The
cells differ where any output bit differs; `--compare` names them and
exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from exhaustive import (
    BETAS,
    QUANTITIES,
    _highest,
    _ours,
    bit_patterns,
    diff_dst_for,
    near_midpoint_diff_dst,
    near_midpoint_softplus,
)

from jax_softplus import _highest as kernels
from jax_softplus import _wide, softplus, softplus_backward
from jax_softplus.testing import lowered_as
from tools._common import positive_int, x64

HIGHEST = jax.lax.AccuracyMode.HIGHEST
PLATFORMS = ("cpu", "cuda", "tpu")
_CHUNK = 1 << 20
_LARGE = 1 << 23


class Cells:
    """{name: [count, sha256]} built up chunk by chunk."""

    def __init__(self):
        self.hashes: dict[str, hashlib._Hash] = {}
        self.counts: dict[str, int] = {}

    def add(self, name, values):
        values = np.asarray(values)
        self.hashes.setdefault(name, hashlib.sha256()).update(values.tobytes())
        self.counts[name] = self.counts.get(name, 0) + values.size

    def add_text(self, name, text):
        """One program's text, counted as one output."""
        self.hashes.setdefault(name, hashlib.sha256()).update(text.encode())
        self.counts[name] = self.counts.get(name, 0) + 1

    def table(self):
        return {k: [self.counts[k], h.hexdigest()] for k, h in self.hashes.items()}


def _constant(src, dd, beta):
    return jax.jit(lambda s, d: (softplus_backward(s, d, beta), softplus(s, beta)))(
        src, dd
    )


def _float32_chunks(stride):
    """The finite float32 bit patterns 0, S, 2S, ... in chunks of `_CHUNK`
    (the last one shorter), made a chunk at a time."""
    carry = np.zeros(0, np.float32)
    for start in range(0, 1 << 32, stride * _CHUNK):
        stop = min(start + stride * _CHUNK, 1 << 32)
        carry = np.concatenate([carry, bit_patterns(start, stop, stride)])
        while carry.size >= _CHUNK:
            yield carry[:_CHUNK]
            carry = carry[_CHUNK:]
    if carry.size:
        yield carry


def _inputs(stride, near_data):
    """(tag, src, diff_dst, betas): the sweeps' data, one chunk at a time
    (made again for each route)."""
    for dtype in (jnp.bfloat16, jnp.float16):
        src = np.arange(1 << 16, dtype=np.uint16).view(np.dtype(dtype))
        top = float(jnp.finfo(dtype).max)
        dd = np.clip(diff_dst_for(src.size, seed=7), -top, top).astype(dtype)
        yield np.dtype(dtype).name, src, dd, BETAS
    for n, s in enumerate(_float32_chunks(stride)):
        yield "float32", s, diff_dst_for(s.size, seed=n), BETAS
    # Results of 2**23 elements and more take two passes at HIGHEST.
    first = []
    for s in _float32_chunks(stride):
        first.append(s)
        if sum(map(len, first)) >= _LARGE:
            break
    s = np.resize(np.concatenate(first), _LARGE)
    yield "float32 2**23", s, diff_dst_for(s.size, seed=1 << 20), BETAS
    yield from near_data


def _near_backward(near):
    rng = np.random.default_rng(3)
    out = []
    for beta in BETAS:
        s, dd = near_midpoint_diff_dst(beta, near, rng)
        out.append(("float32 near-midpoint", s, dd, (beta,)))
    return out


def _near_softplus(near):
    """(dtype name, x, per-element beta) near softplus's rounding midpoints."""
    rng = np.random.default_rng(4)
    for bits, dtype in ((24, jnp.float32), (8, jnp.bfloat16), (11, jnp.float16)):
        x, b, _, _ = near_midpoint_softplus(near, rng, bits=bits)
        yield np.dtype(dtype).name, x.astype(dtype), b.astype(np.float32)


def default_routes(cells, data, log):
    """The default accuracy: every quantity (beta traced) and both ops with
    a Python-float beta."""
    t0 = time.perf_counter()
    for tag, src, dd, betas in data():
        if "near" in tag:
            continue
        for beta in betas:
            b = jnp.float32(beta)
            if tag != "float32 2**23":
                for q, out in zip(QUANTITIES, _ours(src, dd, b), strict=True):
                    cells.add(f"{tag} {q} beta={beta}", out)
            outs = _constant(src, dd, beta)
            for q, out in zip(("backward", "softplus"), outs, strict=True):
                cells.add(f"{tag} {q} constant beta={beta}", out)
    log(f"default accuracy: {time.perf_counter() - t0:.0f} s")


def highest_routes(cells, data, near, log):
    """accuracy=HIGHEST as each platform lowers it."""
    for platform in PLATFORMS:
        t0 = time.perf_counter()
        with lowered_as(platform):
            for tag, src, dd, betas in data():
                for beta in betas:
                    outs = _highest(src, dd, jnp.float32(beta))
                    for q, out in zip(("backward", "softplus"), outs, strict=True):
                        cells.add(f"{tag} {q} HIGHEST {platform} beta={beta}", out)
            f = jax.jit(jax.vmap(lambda x, b: softplus(x, b, accuracy=HIGHEST)))
            for name, x, b in near:
                cells.add(f"{name} near-midpoint softplus HIGHEST {platform}", f(x, b))
        log(f"HIGHEST as for {platform}: {time.perf_counter() - t0:.0f} s")


def float64_sweep(cells, count, log):
    rng = np.random.default_rng(9)
    with x64():
        src = rng.standard_normal(count) * np.exp2(rng.uniform(-30, 30, count))
        dd = rng.standard_normal(count) * np.exp2(rng.uniform(-60, 60, count))
        f = jax.jit(
            lambda s, d, b: (
                softplus_backward(s, d, b),
                softplus(s, b),
                jax.grad(lambda x: softplus(x, b).sum())(s),
                jax.grad(lambda x: softplus_backward(x, d, b).sum())(s),
            )
        )
        for beta in BETAS:
            outs = f(src, dd, jnp.float64(beta))
            names = ("backward", "softplus", "d/dx", "d backward/dsrc")
            for q, out in zip(names, outs, strict=True):
                cells.add(f"float64 {q} beta={beta}", out)
    log("float64")


def _second(s, b):
    """Second derivatives: each op's d2/dsrc2, d2/dbeta2 and the mixed one,
    and the Hessian of softplus cubed (beta traced)."""

    def per_element(f):
        return jax.vmap(f, (0, None))(s, b)

    def backward(x, bb):
        return softplus_backward(x, jnp.ones_like(x), bb)

    return (
        per_element(jax.grad(jax.grad(softplus))),
        per_element(jax.grad(jax.grad(backward))),
        per_element(jax.grad(jax.grad(softplus, 1), 1)),
        per_element(jax.grad(jax.grad(softplus, 1))),
        per_element(jax.hessian(lambda x, bb: softplus(x, bb) ** 3)),
    )


SECOND = ("d2/dx2", "d2 backward/dsrc2", "d2/dbeta2", "d2/dx dbeta", "hessian of cube")


def second_derivatives(cells, count, log):
    """The second derivatives (`_second`) of float32 and float64 `src`
    (random over binades, fixed seed) at `BETAS`, as each platform lowers
    them: the derivative families' float64 and float32 evaluations."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(11)
    draw = rng.standard_normal(count) * np.exp(rng.uniform(-3, 5, count))
    for dtype in (np.float32, np.float64):
        with x64() if dtype == np.float64 else contextlib.nullcontext():
            src = jnp.asarray(draw.astype(dtype))
            for platform in PLATFORMS:
                with lowered_as(platform):
                    f = jax.jit(_second)
                    for beta in BETAS:
                        outs = f(src, jnp.asarray(beta, dtype))
                        for q, out in zip(SECOND, outs, strict=True):
                            name = f"{np.dtype(dtype).name} {q} {platform} beta={beta}"
                            cells.add(name, out)
    log(f"second derivatives: {time.perf_counter() - t0:.0f} s")


def _doubt(op, *operands):
    """Where `_highest`'s float64 evaluation of `op` is in doubt under its
    widest bound (the first of two passes'): a superset of the elements
    every route's loop settles (each route's own evaluation is within the
    bound of the exact value)."""
    value = {"backward": kernels.backward_value, "forward": kernels.softplus_value}
    dtype = operands[0].dtype
    approx = kernels._approx(value[op], kernels.ERROR[op], dtype)
    return approx(*operands, wide=True)[1]


def exact_steps(cells, data, near, log):
    """The double-double steps (`_highest.exact_backward`,
    `exact_softplus`) over the elements in doubt (`_doubt`), as one vector
    each, and the public ops at HIGHEST over the same elements (their
    loops, an element at a time)."""
    t0 = time.perf_counter()
    with _wide._float64():
        doubt = {
            op: jax.jit(functools.partial(_doubt, op)) for op in ("backward", "forward")
        }
        steps = {
            "backward": jax.jit(kernels.exact_backward),
            "forward": jax.jit(kernels.exact_softplus),
        }
    public = {
        "backward": jax.vmap(
            lambda s, d, b: softplus_backward(s, d, b, accuracy=HIGHEST)
        ),
        "forward": jax.vmap(lambda x, b: softplus(x, b, accuracy=HIGHEST)),
    }
    found = {}
    for tag, src, dd, betas in data():
        for beta in betas:
            b = np.float32(beta)
            for op, args in (("backward", (src, dd)), ("forward", (src,))):
                with _wide._float64():
                    at = np.flatnonzero(np.asarray(doubt[op](*args, b)))
                parts = found.setdefault((tag, op, beta), [])
                parts.append(tuple(np.asarray(a)[at] for a in args))
    for name, x, b in near:
        with _wide._float64():
            at = np.flatnonzero(np.asarray(doubt["forward"](x, b)))
        found[(f"{name} near-midpoint", "forward", None)] = [(x[at], b[at])]
    for (tag, op, beta), parts in sorted(found.items(), key=str):
        args = [np.concatenate(a) for a in zip(*parts, strict=True)]
        if not args[0].size:
            continue
        if beta is not None:
            args.append(np.full(args[0].shape, np.float32(beta)))
        name = f"{tag} {op} in doubt" + (f" beta={beta}" if beta is not None else "")
        for a in args:
            cells.add(f"{name}: elements", a)
        with _wide._float64():
            cells.add(f"{name}: double-double step", steps[op](*args))
        cells.add(f"{name}: HIGHEST", public[op](*args))
    total = sum(len(a[0]) for parts in found.values() for a in parts)
    log(f"exact steps: {total} elements in doubt, {time.perf_counter() - t0:.0f} s")


def _program_cases():
    """(name, function, argument shapes): each route `programs` lowers."""
    hi = {"default": {}, "HIGHEST": {"accuracy": HIGHEST}}
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float16, jnp.float64):
        for n in (1024, 1 << 23, 1 << 25):
            if n > 1024 and dtype == jnp.float64:
                continue
            x = jax.ShapeDtypeStruct((n,), dtype)
            b = jax.ShapeDtypeStruct((), dtype if dtype == jnp.float64 else jnp.float32)
            for acc, kw in hi.items():
                tag = f"{np.dtype(dtype).name}[{n}] {acc}"
                yield (
                    f"{tag} softplus",
                    lambda x, b, kw=kw: softplus(x, b, **kw),
                    (x, b),
                )
                yield (
                    f"{tag} backward",
                    lambda s, d, b, kw=kw: softplus_backward(s, d, b, **kw),
                    (x, x, b),
                )
                yield (
                    f"{tag} backward, constant beta",
                    lambda s, d, kw=kw: softplus_backward(s, d, 1.7, **kw),
                    (x, x),
                )
                yield (
                    f"{tag} softplus, constant beta",
                    lambda x, kw=kw: softplus(x, 1.7, **kw),
                    (x,),
                )
                if n > 1024:
                    continue
                yield (
                    f"{tag} grad",
                    lambda x, b, kw=kw: jax.grad(lambda v: softplus(v, b, **kw).sum())(
                        x
                    ),
                    (x, b),
                )
                yield (
                    f"{tag} jvp",
                    lambda x, b, kw=kw: jax.jvp(
                        lambda v, c: softplus(v, c, **kw), (x, b), (x, b)
                    ),
                    (x, b),
                )
                yield (
                    f"{tag} per-example beta",
                    jax.vmap(lambda s, d, b, kw=kw: softplus_backward(s, d, b, **kw)),
                    (x, x, x if dtype == jnp.float64 else x.update(dtype=jnp.float32)),
                )
            if n == 1024:
                yield f"{np.dtype(dtype).name}[{n}] second derivatives", _second, (x, b)


def _dataflow(text):
    """A compiled module's dataflow, as text to hash: each instruction
    stands for its opcode, shape, attributes and its operands' and called
    computations' digests (in HLO text each is defined before its first
    use), each computation for its root's. Names, metadata, source
    locations and the order of independent instructions do not count."""
    text = re.sub(r", metadata=\{[^}]*\}", "", text)
    text = re.sub(r"/\*[^*]*\*/", "", text)
    computations, local, entry = {}, {}, None

    def digest(m):
        name = m.group(1)
        return local.get(name) or computations.get(name) or name

    for line in text.splitlines():
        head = re.match(r"(ENTRY )?%([\w.-]+) \(.*\{$", line)
        if head:
            name, local = head.group(2), {}
            entry = name if head.group(1) else entry
            continue
        inst = re.match(r"\s+(ROOT )?%([\w.-]+) = (.*)$", line)
        if inst:
            body = re.sub(r"%([\w.-]+)", digest, inst.group(3))
            local[inst.group(2)] = hashlib.sha256(body.encode()).hexdigest()[:16]
            if inst.group(1):
                computations[name] = local[inst.group(2)]
    return f"{computations.get(entry)} {len(computations)} computations"


def programs(cells, log, cases=None, compiled=False):
    """Each route's StableHLO (`cases()`, `_program_cases`) as each
    platform lowers it, or with `compiled` its instructions as XLA compiles
    that here (`_dataflow`): one cell per program."""
    t0 = time.perf_counter()
    for platform in PLATFORMS:
        with lowered_as(platform):
            for name, fn, args in (cases or _program_cases)():
                with x64() if "float64" in name else contextlib.nullcontext():
                    lowered = jax.jit(fn).lower(*args)
                    if compiled:
                        text = _dataflow(lowered.compile().as_text())
                    else:
                        text = lowered.as_text()
                cells.add_text(f"{name} {platform}", text)
    log(f"programs: {time.perf_counter() - t0:.0f} s")


def compare(old, new):
    """The cells whose counts or hashes differ, and those only one has."""
    lines = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            lines.append(f"{name}: {old.get(name)} -> {new.get(name)}")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--stride",
        type=positive_int,
        default=1 << 10,
        help="every N-th float32 bit pattern (1: all; default 1024)",
    )
    p.add_argument(
        "--near",
        type=positive_int,
        default=200,
        help="near-midpoint inputs per beta and dtype (default 200)",
    )
    only = p.add_mutually_exclusive_group()
    only.add_argument(
        "--exact-steps",
        action="store_true",
        help="only the elements in doubt and the double-double steps there",
    )
    only.add_argument(
        "--programs",
        action="store_true",
        help="only each route's lowered StableHLO, for a refactor of no operation",
    )
    only.add_argument(
        "--compiled",
        action="store_true",
        help="only each route's program as XLA compiles it here, for a "
        "refactor of how the StableHLO is built",
    )
    p.add_argument("--out", help="write the cells as JSON to this file")
    p.add_argument("--compare", help="compare with the JSON of an earlier run")
    args = p.parse_args(argv)
    old = None
    if args.compare:
        try:
            with open(args.compare) as f:
                old = json.load(f)["cells"]
        except (OSError, ValueError, KeyError) as e:
            p.error(f"--compare {args.compare!r}: {e}")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    cells = Cells()
    near_data = _near_backward(args.near)

    def data():
        return _inputs(args.stride, near_data)

    near = list(_near_softplus(args.near))
    log(f"inputs: {time.perf_counter() - t0:.0f} s")
    if args.programs or args.compiled:
        programs(cells, log, compiled=args.compiled)
    elif args.exact_steps:
        exact_steps(cells, data, near, log)
    else:
        float64_sweep(cells, 1 << 16, log)
        second_derivatives(cells, 1 << 16, log)
        default_routes(cells, data, log)
        highest_routes(cells, data, near, log)
        exact_steps(cells, data, near, log)
    table = cells.table()
    total = sum(c for c, _ in table.values())
    summary = hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()
    print(f"{len(table)} cells, {total} outputs, in {time.perf_counter() - t0:.0f} s")
    print(f"hash of the cells: {summary}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "stride": args.stride,
                    "near": args.near,
                    "exact_steps_only": args.exact_steps,
                    "programs_only": args.programs,
                    "compiled_only": args.compiled,
                    "cells": table,
                },
                f,
                indent=1,
                sort_keys=True,
            )
    if old is not None:
        diff = compare(old, table)
        print(f"{len(diff)} of {len(table)} cells differ from {args.compare}")
        for line in diff:
            print(" ", line)
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
