"""Data-parallel training across devices with Mesh and NamedSharding.

Run bare on a CPU, it asks XLA for 8 host devices before JAX starts (and
says so); a count of your own wins:

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python examples/sharded.py

The batch is sharded over the devices, the parameters are replicated, and
JAX's SPMD partitioner runs softplus and its SoftPlusBackward primitive where
the data lies; only the gradient all-reduce communicates.

Each step is blocked on before the next is dispatched: with several steps in
flight, jaxlib 0.10.2 on a 2-core host can deadlock in the all-reduce
rendezvous (see the sharp-bits page of the docs; not specific to this op).

Run: python examples/sharded.py [--quick]
"""

from __future__ import annotations

if __name__ == "__main__":
    # Before JAX starts: on a CPU, 8 host devices unless XLA_FLAGS says.
    from _devices import MORE_DEVICES, ask_for_host_devices

    DEVICE_NOTE = ask_for_host_devices()

import argparse  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from jax_softplus import softplus  # noqa: E402


def init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        (jax.random.normal(k, (a, b)) / np.sqrt(a), jnp.zeros(b))
        for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)
    ]


def loss_fn(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = softplus(h @ w + b[None, :], 1.5)
    w, b = params[-1]
    return jnp.mean((h @ w + b[None, :] - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads), loss


def main(quick: bool = False):
    devices = np.array(jax.devices())
    mesh = Mesh(devices, ("data",))
    data = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    n = 64 * len(devices) if quick else 1024 * len(devices)

    key = jax.random.PRNGKey(0)
    kx, kp = jax.random.split(key)
    x = jax.random.normal(kx, (n, 16))
    y = jnp.tanh(x[:, :4].sum(axis=1, keepdims=True))
    x, y = jax.device_put(x, data), jax.device_put(y, data)
    params = jax.device_put(init(kp, [16, 64, 64, 1]), replicated)

    steps = 20 if quick else 300
    losses = []
    for _ in range(steps):
        params, loss = train_step(params, x, y)
        losses.append(float(jax.block_until_ready(loss)))
    print(f"{len(devices)} devices, batch sharded as {x.sharding.spec}")
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} in {steps} steps")
    return losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=MORE_DEVICES
    )
    parser.add_argument("--quick", action="store_true", help="20 small steps")
    args = parser.parse_args()
    if DEVICE_NOTE:
        print(DEVICE_NOTE)
    main(args.quick)
