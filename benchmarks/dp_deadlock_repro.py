"""Reproduce a jaxlib hazard that is not jax_softplus's: a jitted
data-parallel step on 8 forced host devices of a 2-core CPU can deadlock in
the all-reduce rendezvous when several steps are in flight at once.

It uses plain jax.nn.softplus, to show the library is not involved. Each
trial is a fresh subprocess; a trial that does not finish within `--timeout`
seconds, or aborts, counts as a failure. With `--block`, each step is
blocked on before the next is dispatched, which is the workaround.

    python benchmarks/dp_deadlock_repro.py --trials 8          # no blocking
    python benchmarks/dp_deadlock_repro.py --trials 8 --block  # workaround

Measured with jaxlib 0.10.2 on the 2-core development machine: see
docs/sharp_bits.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

TRIAL = """
import sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

block = sys.argv[1] == "1"
mesh = Mesh(np.array(jax.devices()), ("data",))
data, rep = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
x = jax.device_put(jnp.ones((1024, 64)), data)
w = jax.device_put(jnp.ones((64, 64)) * 0.01, rep)

@jax.jit
def step(w, x):
    loss, g = jax.value_and_grad(lambda w: jnp.mean(jax.nn.softplus(x @ w)))(w)
    return w - 0.1 * g, loss

for _ in range(200):
    w, loss = step(w, x)
    if block:
        jax.block_until_ready(loss)
jax.block_until_ready(w)
print("ok")
"""


def main(argv=None):
    from tools._common import positive_float, positive_int

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=positive_int, default=8, help="subprocesses")
    p.add_argument(
        "--block", action="store_true", help="block on each step (the workaround)"
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=120.0,
        help="seconds after which a trial counts as hung (jaxlib aborts a "
        "deadlocked one after about a minute)",
    )
    args = p.parse_args(argv)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    clean = 0
    for i in range(args.trials):
        try:
            r = subprocess.run(
                [sys.executable, "-c", TRIAL, "1" if args.block else "0"],
                env=env,
                capture_output=True,
                text=True,
                timeout=args.timeout,
                check=False,
            )
            ok = r.returncode == 0 and r.stdout.strip() == "ok"
            status = "ok" if ok else f"failed (exit {r.returncode})"
            if r.returncode == -6:
                status = "aborted (SIGABRT: the rendezvous deadlocked)"
        except subprocess.TimeoutExpired:
            ok, status = False, f"hung for {args.timeout:.0f} s"
        clean += ok
        print(f"trial {i + 1}: {status}", flush=True)
    print(f"{clean}/{args.trials} clean runs (block={args.block})")


if __name__ == "__main__":
    main()
