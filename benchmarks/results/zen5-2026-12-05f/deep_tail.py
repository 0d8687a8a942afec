"""What the float32 backward kernel's deep tail costs: the op in your jit
against the same kernel with its deep tail (`_math._deep_tail`) cut out,
the naive formula and `a * b`, each with a fresh output, the order
rotating every round, medians of per-round ratios; then an input the cut
kernel gets wrong. The cut kernel is for timing only: below t = -175.7 it
loses results that are normal. With `--code`, the hot loops' instructions
(needs objdump). A kernel without a `_deep_tail` call is refused.

    XLA_FLAGS=--xla_cpu_max_isa=AVX2 \
        python benchmarks/results/zen5-2026-12-05f/deep_tail.py --beta 1.7
"""

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

import jax_softplus._math as _math
from jax_softplus import softplus_backward
from jax_softplus.tools._common import machine_line, sample_data
from jax_softplus.tools.bench import parse_size

ROOT = Path(__file__).resolve().parents[3]


def _compiled(src, dd, beta, *, cut):
    """Your jit of the backward op, compiled; `cut`: with `_deep_tail` a no-op."""
    fun = jax.jit(lambda s, d, b: softplus_backward(s, d, b))
    kept = _math._deep_tail
    if cut:
        _math._deep_tail = lambda k, deep, src, dd, beta: (k, dd)
    try:
        lowered = fun.lower(src, dd, beta)
        return lowered, lowered.compile()
    finally:
        _math._deep_tail = kept


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beta", type=float, default=1.7)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--size", type=parse_size, default=1 << 24, help="e.g. 4M")
    parser.add_argument("--code", action="store_true", help="count loop instructions")
    args = parser.parse_args()
    if args.rounds < 1 or args.size < 1:
        got = f"--rounds {args.rounds}, --size {args.size}"
        parser.error(f"--rounds and --size take positive integers, got {got}")
    if args.beta == 0:
        parser.error("--beta: the deep tail needs a nonzero beta, got 0")
    src, dd = sample_data(args.size, np.float32, 0)
    beta = np.float32(args.beta)
    kernels = {cut: _compiled(src, dd, beta, cut=cut) for cut in (False, True)}
    if kernels[False][0].as_text() == kernels[True][0].as_text():
        raise SystemExit("deep_tail.py: this kernel has no _deep_tail call to cut")
    naive = jax.jit(lambda s, d, b: d * jax.nn.sigmoid(b * s))
    mul = jax.jit(lambda s, d: s * d)
    calls = {
        "your jit": lambda: kernels[False][1](src, dd, beta),
        "deep tail cut": lambda: kernels[True][1](src, dd, beta),
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
    print(machine_line())
    print(f"float32, {args.size} elements, beta {args.beta}, {args.rounds} rounds")
    base = np.array(times["naive"])
    for k, t in times.items():
        ratio = np.median(np.array(t) / base)
        print(f"{k:14s} {np.median(t) * 1e3:8.3f} ms  {ratio:.3f}x the naive formula")
    # t = -175.9 with diff_dst near float32's largest: a normal result that
    # needs 2**-k = 2**-254, which the deep tail's third factor provides.
    x, g = np.array(src), np.array(dd)  # the shape the kernels were compiled for
    x[0], g[0] = -175.9 / args.beta, np.finfo(np.float32).max
    exact = float(g[0]) / (1 + np.exp(-float(np.float32(args.beta)) * float(x[0])))
    got = {cut: kernels[cut][1](x, g, beta)[0] for cut in (False, True)}
    print(f"t = -175.9, diff_dst = {g[0]:.7g}: exact {exact:.7g},")
    print(f"  kernel {got[False]:.7g}, deep tail cut {got[True]:.7g}")
    if args.code:
        sys.path.insert(0, str(ROOT / "maintainers"))
        from roofline import hot_loop  # noqa: PLC0415

        for cut in (False, True):
            n = len(hot_loop(kernels[cut][0], 4).instructions)
            name = "deep tail cut" if cut else "your jit"
            print(f"{name}: {n} instructions in the loop")
        n = len(hot_loop(naive.lower(src, dd, beta), 4).instructions)
        print(f"naive: {n} instructions in the loop")


if __name__ == "__main__":
    main()
