"""GPU check: softplus_backward against the device's copy bandwidth.

Run by benchmarks/gpu.sh on one GPU (an H200 here), from the checkout with
PYTHONPATH=. (no install needed: the package is pure Python). For each dtype
at `--size` elements it times, interleaved:

- a device-to-device copy (`-x` under jit, read n, write n), whose
  bytes/second is the ceiling;
- a donated `a * b` (read 2n, write n): the floor of the CPU benchmark;
- `softplus_backward_inplace` (read 2n, write n), beta traced.

It prints each one's effective GB/s and the op's fraction of the copy
bandwidth. `--json` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import softplus_backward_inplace

DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16}


def _timed(fn, iters):
    jax.block_until_ready(fn())
    t0 = time.perf_counter()
    for _ in range(iters):
        out = fn()
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / iters


def _run_dtype(name, size, iters, rounds):
    dtype = DTYPES[name]
    key = jax.random.PRNGKey(0)
    src = jax.random.uniform(key, (size,), jnp.float32, -8, 8).astype(dtype)
    state = {k: jnp.ones(size, dtype) for k in ("copy", "mul", "op")}
    copy = jax.jit(lambda x: -x, donate_argnums=0)  # x + 0 is folded away
    mul = jax.jit(lambda a, b: a * b, donate_argnums=1)
    beta = jnp.float32(1.7)

    def step_copy():
        state["copy"] = copy(state["copy"])
        return state["copy"]

    def step_mul():
        state["mul"] = mul(src, state["mul"])
        return state["mul"]

    def step_op():
        state["op"] = softplus_backward_inplace(src, state["op"], beta)
        return state["op"]

    steps = {"copy": step_copy, "a*b": step_mul, "softplus_backward_inplace": step_op}
    times = {k: [] for k in steps}
    for _ in range(rounds):
        for k, fn in steps.items():
            times[k].append(_timed(fn, iters))
    item = jnp.dtype(dtype).itemsize
    moved = {"copy": 2 * size * item}
    moved["a*b"] = moved["softplus_backward_inplace"] = 3 * size * item
    copy_gbps = moved["copy"] / np.median(times["copy"]) / 1e9
    rows = []
    for method, ts in times.items():
        med = float(np.median(ts))
        gbps = moved[method] / med / 1e9
        rows.append(
            {
                "dtype": name,
                "size": size,
                "method": method,
                "median_ms": med * 1e3,
                "gbps": gbps,
                "fraction_of_copy": gbps / copy_gbps,
            }
        )
    return rows


def run(size, dtypes, iters, rounds):
    return [r for name in dtypes for r in _run_dtype(name, size, iters, rounds)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=256 << 20)
    p.add_argument("--dtypes", default="f32,bf16,f16")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    print("devices:", jax.devices(), "jax", jax.__version__)
    rows = run(args.size, args.dtypes.split(","), args.iters, args.rounds)
    print(f"{'dtype':5} {'method':26} {'median ms':>10} {'GB/s':>8} {'of copy':>8}")
    for r in rows:
        print(
            f"{r['dtype']:5} {r['method']:26} {r['median_ms']:10.3f} "
            f"{r['gbps']:8.0f} {r['fraction_of_copy']:8.1%}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"jax": jax.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
