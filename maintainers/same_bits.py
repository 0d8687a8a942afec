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
  derivatives as a CPU, a GPU and a TPU lower them (`second_derivatives`).

`diff_dst` is `exhaustive.diff_dst_for` of the chunk (fixed seeds). The
cells differ where any output bit differs; `--compare` names them and
exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
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

from jax_softplus import softplus, softplus_backward
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

    def table(self):
        return {k: [self.counts[k], h.hexdigest()] for k, h in self.hashes.items()}


def _constant(src, dd, beta):
    return jax.jit(lambda s, d: (softplus_backward(s, d, beta), softplus(s, beta)))(
        src, dd
    )


def _inputs(stride, near_data):
    """(tag, src, diff_dst, betas): the sweeps' data, one chunk at a time
    (made again for each route: at stride 1, 32 GiB in all)."""
    for dtype in (jnp.bfloat16, jnp.float16):
        src = np.arange(1 << 16, dtype=np.uint16).view(np.dtype(dtype))
        top = float(jnp.finfo(dtype).max)
        dd = np.clip(diff_dst_for(src.size, seed=7), -top, top).astype(dtype)
        yield np.dtype(dtype).name, src, dd, BETAS
    src = bit_patterns(0, 1 << 32, stride)
    for n, start in enumerate(range(0, src.size, _CHUNK)):
        s = src[start : start + _CHUNK]
        yield "float32", s, diff_dst_for(s.size, seed=n), BETAS
    # Results of 2**23 elements and more take two passes at HIGHEST.
    s = np.resize(src, _LARGE)
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
    float64_sweep(cells, 1 << 16, log)
    second_derivatives(cells, 1 << 16, log)
    default_routes(cells, data, log)
    highest_routes(cells, data, near, log)
    table = cells.table()
    total = sum(c for c, _ in table.values())
    summary = hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()
    print(f"{len(table)} cells, {total} outputs, in {time.perf_counter() - t0:.0f} s")
    print(f"hash of the cells: {summary}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {"stride": args.stride, "near": args.near, "cells": table},
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
