"""HIGHEST's two passes at 16M float32 elements, donated (beta 1.7): the
in-place op, the op in a user's jit, and `softplus` in a user's jit, with
each call's temporaries. Run it on two checkouts to compare them.

    python benchmarks/results/zen5-2026-12-05d/flags_ab.py --rounds 15
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import softplus, softplus_backward, softplus_backward_inplace
from jax_softplus.tools._common import machine_line, sample_data

HIGHEST = jax.lax.AccuracyMode.HIGHEST


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error(f"--rounds takes an integer of at least 3, got {args.rounds}")
    n = 1 << 24
    src, dd = sample_data(n, np.float32, 0)
    user = jax.jit(
        lambda s, d: softplus_backward(s, d, 1.7, accuracy=HIGHEST), donate_argnums=1
    )
    forward = jax.jit(lambda x: softplus(x, 1.7, accuracy=HIGHEST), donate_argnums=0)
    calls = {
        "in place": lambda d: softplus_backward_inplace(src, d, 1.7, accuracy=HIGHEST),
        "your jit, donated": lambda d: user(src, d),
        "softplus, donated": forward,
    }
    arg = jax.ShapeDtypeStruct((n,), np.float32)
    temps = {
        "in place": softplus_backward_inplace.lower(src, dd, 1.7, accuracy=HIGHEST),
        "your jit, donated": user.lower(arg, arg),
        "softplus, donated": forward.lower(arg),
    }
    times = {k: [] for k in calls}
    for _ in range(args.rounds):
        for k, call in calls.items():
            d = jnp.array(dd, copy=True).block_until_ready()
            start = time.perf_counter()
            call(d).block_until_ready()
            times[k].append(time.perf_counter() - start)
    print(machine_line())
    print(f"float32, {n} elements, beta 1.7, {args.rounds} rounds (2 left out)")
    for k, t in times.items():
        temp = temps[k].compile().memory_analysis().temp_size_in_bytes
        print(f"{k:18s} {np.median(t[2:]) * 1e3:7.2f} ms  temporaries {temp:,} bytes")


if __name__ == "__main__":
    main()
