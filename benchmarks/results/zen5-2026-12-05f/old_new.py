"""The float32 backward op in your jit with a fresh output: this checkout's
kernel against another checkout's `_math.sigmoid_times_f32` (`--old`, loaded
from its file into this process), the naive formula and `a * b`, the order
rotating every round, medians of per-round ratios; and whether the two
kernels' bits agree on the timed data. From this checkout, with b901e6c's
beside it:

    git worktree add /tmp/b901e6c b901e6c
    XLA_FLAGS=--xla_cpu_max_isa=AVX2 python \\
        benchmarks/results/zen5-2026-12-05f/old_new.py --old /tmp/b901e6c --beta 1.7
"""

import argparse
import importlib.util
import time
from pathlib import Path

import jax
import numpy as np

from jax_softplus import _kernels, softplus_backward
from jax_softplus.tools._common import machine_line, sample_data
from jax_softplus.tools.bench import parse_size


def _old_math(value):
    """The other checkout's `_math` module, loaded under another name."""
    path = Path(value) / "jax_softplus" / "_math.py"
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value!r} is not a jax_softplus checkout")
    spec = importlib.util.spec_from_file_location("old_math", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compiled(src, dd, beta, kernel=None):
    """Your jit of the backward op, compiled, with `kernel` as its float32 one."""
    fun = jax.jit(lambda s, d, b: softplus_backward(s, d, b))
    kept = _kernels.sigmoid_times_f32
    _kernels.sigmoid_times_f32 = kernel or kept
    try:
        return fun.lower(src, dd, beta).compile()
    finally:
        _kernels.sigmoid_times_f32 = kept


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=_old_math, help="the other checkout")
    parser.add_argument("--beta", type=float, default=1.7)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--size", type=parse_size, default=1 << 24, help="e.g. 4M")
    args = parser.parse_args()
    if args.rounds < 1 or args.size < 1:
        got = f"--rounds {args.rounds}, --size {args.size}"
        parser.error(f"--rounds and --size take positive integers, got {got}")
    if args.old is None:
        parser.error("--old: give the checkout to compare with")
    src, dd = sample_data(args.size, np.float32, 0)
    beta = np.float32(args.beta)
    new = _compiled(src, dd, beta)
    old = _compiled(src, dd, beta, args.old.sigmoid_times_f32)
    naive = jax.jit(lambda s, d, b: d * jax.nn.sigmoid(b * s))
    mul = jax.jit(lambda s, d: s * d)
    calls = {
        "this checkout": lambda: new(src, dd, beta),
        "--old": lambda: old(src, dd, beta),
        "naive": lambda: naive(src, dd, beta),
        "a*b": lambda: mul(src, dd),
    }
    same = np.array_equal(
        np.asarray(calls["this checkout"]()).view(np.uint32),
        np.asarray(calls["--old"]()).view(np.uint32),
    )
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
    print(machine_line())
    print(f"float32, {args.size} elements, beta {args.beta}, {args.rounds} rounds")
    base = np.array(times["naive"])
    for k, t in times.items():
        ratio = np.median(np.array(t) / base)
        print(f"{k:14s} {np.median(t) * 1e3:8.3f} ms  {ratio:.3f}x the naive formula")
    print(f"the same bits: {'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
