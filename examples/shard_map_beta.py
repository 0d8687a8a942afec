"""Data-parallel training under jax.shard_map, with a learnable softplus beta.

Run bare on a CPU, it asks XLA for 8 host devices before JAX starts (and
says so); a count of your own wins:

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python examples/shard_map_beta.py

Each device sees its slice of the batch; the weights and beta are replicated.
Inside shard_map JAX types every value with the mesh axes it varies over, and
the gradient of a replicated parameter comes back already summed over the
mesh, for beta too: softplus treats a replicated beta as JAX's own ops do. The
first step is checked against the same model written with jax.nn.softplus.

Run: python examples/shard_map_beta.py [--quick]
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
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from jax_softplus import softplus  # noqa: E402

try:
    from jax import shard_map
except ImportError:  # JAX before 0.7
    from jax.experimental.shard_map import shard_map


def loss_fn(params, x, y, act):
    h = act(x @ params["w1"] + params["b1"], params["beta"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def make_step(mesh, act, lr=0.1):
    shards = mesh.shape["data"]

    def step(params, x, y):  # per device: its slice of x and y
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, act)
        # Gradients of the replicated parameters arrive summed over the mesh.
        grads = jax.tree.map(lambda g: g / shards, grads)
        new = jax.tree.map(lambda p, g: p - lr * g, params, grads)
        return new, jax.lax.pmean(loss, "data")

    specs = dict(in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))
    return jax.jit(shard_map(step, mesh=mesh, **specs))


def reference_softplus(x, beta):
    return jax.nn.softplus(beta * x) / beta


def main(quick: bool = False):
    mesh = Mesh(np.array(jax.devices()), ("data",))
    n = 32 * mesh.size if quick else 256 * mesh.size
    kx, kw = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(kx, (n, 8))
    y = jnp.abs(x[:, :1]) + 0.1 * x[:, 1:2]  # softplus-like target
    params = {
        "w1": jax.random.normal(kw, (8, 32)) / np.sqrt(8.0),
        "b1": jnp.zeros(32),
        "w2": jnp.full((32, 1), 0.05),
        "beta": jnp.float32(1.0),
    }
    step, reference = make_step(mesh, softplus), make_step(mesh, reference_softplus)

    ours, _ = step(params, x, y)
    theirs, _ = reference(params, x, y)
    pairs = zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True)
    gap = max(float(jnp.max(jnp.abs(a - b))) for a, b in pairs)
    print(f"{mesh.size} devices; first step vs jax.nn.softplus: max |diff| {gap:.1e}")

    losses = []
    for _ in range(30 if quick else 300):
        params, loss = step(params, x, y)
        losses.append(float(jax.block_until_ready(loss)))
    beta = float(params["beta"])
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, beta 1.0 -> {beta:.3f}")
    return losses, beta, gap


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=MORE_DEVICES
    )
    parser.add_argument("--quick", action="store_true", help="30 small steps")
    args = parser.parse_args()
    if DEVICE_NOTE:
        print(DEVICE_NOTE)
    main(args.quick)
