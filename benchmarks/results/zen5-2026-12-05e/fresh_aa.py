"""The float32 backward op with a fresh output: the library's jitted call,
the op in your jit and a second, separately compiled copy of your jit (an
A/A pair: the same program twice), against the naive formula and `a * b`;
the order rotates every round, medians of per-round ratios. With `--code`,
first whether the library's call and your jit compile to the same object
code (each in a child process, XLA dumping its code; needs objdump).

    XLA_FLAGS=--xla_cpu_max_isa=AVX2 \
        python benchmarks/results/zen5-2026-12-05e/fresh_aa.py --code --size 4M
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

from jax_softplus import softplus_backward
from jax_softplus.tools._common import machine_line, sample_data
from jax_softplus.tools.bench import parse_size


def _user_jit():
    return jax.jit(lambda s, d, b: softplus_backward(s, d, b))


def _dump(who, size, beta):
    """Compile and run one call (the child process of `--code`)."""
    src, dd = sample_data(size, np.float32, 0)
    call = softplus_backward if who == "library" else _user_jit()
    call(src, dd, np.float32(beta)).block_until_ready()


def _object_code(who, size, beta):
    """The disassembly of every fusion XLA compiled for one call, less the
    lines that name the file."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise SystemExit("--code needs objdump (binutils)")
    with tempfile.TemporaryDirectory() as d:
        flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={d}".strip()
        args = [sys.executable, __file__, "--dump", who, "--size", str(size)]
        args += ["--beta", str(beta)]
        subprocess.run(args, env={**os.environ, "XLA_FLAGS": flags}, check=True)
        files = sorted(glob.glob(os.path.join(d, "*fusion*.o")))
        text = []
        for f in files:
            out = subprocess.run(
                [objdump, "-d", "--no-show-raw-insn", f],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            text += [ln for ln in out.splitlines() if not re.search(r"file format", ln)]
        return len(files), text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beta", type=float, default=1.7)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--size", type=parse_size, default=1 << 24, help="e.g. 4M")
    parser.add_argument("--code", action="store_true", help="compare object code")
    parser.add_argument("--dump", choices=("library", "user"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 1 or args.size < 1:
        got = f"--rounds {args.rounds}, --size {args.size}"
        parser.error(f"--rounds and --size take positive integers, got {got}")
    if args.dump:
        return _dump(args.dump, args.size, args.beta)
    print(machine_line())
    if args.code:
        (n_lib, lib), (n_user, user) = (
            _object_code(who, args.size, args.beta) for who in ("library", "user")
        )
        same = "the same" if lib == user else "DIFFERENT"
        fusions = f"library's call {n_lib} fusion(s), your jit {n_user}"
        print(f"object code: {fusions}: {same}")
    src, dd = sample_data(args.size, np.float32, 0)
    beta = np.float32(args.beta)
    naive = jax.jit(lambda s, d, b: d * jax.nn.sigmoid(b * s))
    mul = jax.jit(lambda s, d: s * d)
    user, copy = _user_jit(), _user_jit()
    calls = {
        "library's jit": lambda: softplus_backward(src, dd, beta),
        "your jit": lambda: user(src, dd, beta),
        "your jit again": lambda: copy(src, dd, beta),
        "naive": lambda: naive(src, dd, beta),
        "a*b": lambda: mul(src, dd),
    }
    for call in calls.values():
        for _ in range(3):
            call().block_until_ready()
    names = list(calls)
    times = {k: [] for k in names}
    for i in range(args.rounds):
        j = i % len(names)
        for k in names[j:] + names[:j]:
            start = time.perf_counter()
            out = calls[k]()
            out.block_until_ready()
            times[k].append(time.perf_counter() - start)
            del out
    print(f"float32, {args.size} elements, beta {args.beta}, {args.rounds} rounds")
    base = np.array(times["naive"])
    for k, t in times.items():
        ratio = np.median(np.array(t) / base)
        print(f"{k:15s} {np.median(t) * 1e3:8.3f} ms  {ratio:.3f}x the naive formula")


if __name__ == "__main__":
    main()
