"""The float32 backward op where its data stay in the caches, so that the
loop's instructions, not memory, set its time (as on a CPU whose cores are
slow for its memory): donated calls chained back to back, `--calls` per
timing, the library's in-place op and the op in your jit against the naive
formula and `a * b`; the order rotates every round, medians of per-round
ratios.

    XLA_FLAGS=--xla_cpu_max_isa=AVX2 \
        python benchmarks/results/zen5-2026-12-05e/in_cache_ab.py --size 1M
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import softplus_backward, softplus_backward_inplace
from jax_softplus.tools._common import machine_line, sample_data
from jax_softplus.tools.bench import parse_size


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beta", type=float, default=1.7)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--size", type=parse_size, default=1 << 20, help="e.g. 256K")
    parser.add_argument("--calls", type=int, default=40, help="calls per timing")
    args = parser.parse_args()
    if min(args.rounds, args.size, args.calls) < 1:
        got = f"--rounds {args.rounds}, --size {args.size}, --calls {args.calls}"
        parser.error(f"--rounds, --size and --calls take positive integers, got {got}")
    src, dd = sample_data(args.size, np.float32, 0)
    beta = jnp.float32(args.beta)
    donate = lambda f: jax.jit(f, donate_argnums=1)  # noqa: E731
    calls = {
        "library's in place": softplus_backward_inplace,
        "your jit": donate(lambda s, d, b: softplus_backward(s, d, b)),
        "naive": donate(lambda s, d, b: d * jax.nn.sigmoid(b * s)),
        "a*b": donate(lambda s, d, b: s * d),
    }
    # Each method chains its own buffer: every call donates the last result.
    bufs = {k: jnp.array(dd, copy=True) for k in calls}

    def timed(k, count):
        d = bufs[k]
        start = time.perf_counter()
        for _ in range(count):
            d = calls[k](src, d, beta)
        d.block_until_ready()
        bufs[k] = d
        return (time.perf_counter() - start) / count

    for k in calls:
        timed(k, 3)
    names = list(calls)
    times = {k: [] for k in names}
    for i in range(args.rounds):
        j = i % len(names)
        for k in names[j:] + names[:j]:
            times[k].append(timed(k, args.calls))
    print(machine_line())
    print(
        f"float32, {args.size} elements, beta {args.beta}, donated, "
        f"{args.calls} calls per timing, {args.rounds} rounds"
    )
    base = np.array(times["naive"])
    for k, t in times.items():
        ratio = np.median(np.array(t) / base)
        print(f"{k:18s} {np.median(t) * 1e6:8.1f} us  {ratio:.3f}x the naive formula")


if __name__ == "__main__":
    main()
