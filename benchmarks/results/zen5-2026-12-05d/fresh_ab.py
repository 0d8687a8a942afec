"""The float32 backward op with a fresh output, 16M elements: the library's
jitted call and the op in a user's jit against the naive formula and
`a * b`, interleaved, medians of per-round ratios (more rounds than the
bench's fresh rows, whose page faults make them noisy).

    XLA_FLAGS=--xla_cpu_max_isa=AVX2 \
        python benchmarks/results/zen5-2026-12-05d/fresh_ab.py --beta 1.7
"""

import argparse
import time

import jax
import numpy as np

from jax_softplus import softplus_backward
from jax_softplus.tools._common import machine_line, sample_data


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--size", type=int, default=1 << 24)
    args = parser.parse_args()
    if args.rounds < 1 or args.size < 1:
        got = f"--rounds {args.rounds}, --size {args.size}"
        parser.error(f"--rounds and --size take positive integers, got {got}")
    src, dd = sample_data(args.size, np.float32, 0)
    beta = np.float32(args.beta)
    naive = jax.jit(lambda s, d, b: d * jax.nn.sigmoid(b * s))
    user = jax.jit(lambda s, d, b: softplus_backward(s, d, b))
    mul = jax.jit(lambda s, d: s * d)
    calls = {
        "library's jit": lambda: softplus_backward(src, dd, beta),
        "your jit": lambda: user(src, dd, beta),
        "naive": lambda: naive(src, dd, beta),
        "a*b": lambda: mul(src, dd),
    }
    for call in calls.values():
        for _ in range(3):
            call().block_until_ready()
    times = {k: [] for k in calls}
    for _ in range(args.rounds):
        for k, call in calls.items():
            start = time.perf_counter()
            out = call()
            out.block_until_ready()
            times[k].append(time.perf_counter() - start)
            del out
    print(machine_line())
    print(f"float32, {args.size} elements, beta {args.beta}, {args.rounds} rounds")
    base = np.array(times["naive"])
    for k, t in times.items():
        ratio = np.median(np.array(t) / base)
        print(f"{k:14s} {np.median(t) * 1e3:8.2f} ms  {ratio:.3f}x the naive formula")


if __name__ == "__main__":
    main()
