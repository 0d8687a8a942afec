"""Per-example gradients, and a learnable per-example beta.

`jax.vmap(jax.grad(...))` gives one gradient per example; because `beta` is
an operand of the primitive (not a static argument), it can differ per
example, be batched by vmap, and be learned with `jax.grad`.

Run: python examples/per_example_grads.py [--quick]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
from _extras import require

from jax_softplus import softplus

(optax,) = require("optax")


def model(w, beta, x):
    """A one-layer softplus model: softplus(x @ w, beta), summed."""
    return jnp.sum(softplus(x @ w, beta))


def main(quick: bool = False):
    n, d, k = (8, 4, 3) if quick else (256, 32, 16)
    kx, kw, kb = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(kx, (n, d))
    w = jax.random.normal(kw, (d, k)) * 0.5
    betas = jax.random.uniform(kb, (n,), minval=0.5, maxval=3.0)

    # One gradient of w per example, each with its own beta.
    per_example = jax.vmap(jax.grad(model), in_axes=(None, 0, 0))(w, betas, x)
    assert per_example.shape == (n, d, k)
    batched = jax.vmap(model, in_axes=(None, 0, 0))
    summed = jax.grad(lambda w: batched(w, betas, x).sum())(w)
    err = float(jnp.max(jnp.abs(per_example.sum(0) - summed)))
    print(f"per-example grads {per_example.shape}; sum matches full grad to {err:.1e}")

    # Learn one beta per example: given z_i and y_i = softplus(z_i, beta_i)
    # for unknown beta_i, recover every beta_i at once with Adam.
    true_betas = jnp.linspace(0.5, 2.0, n)
    z = 2.0 * jax.random.normal(kx, (n, 64))
    y = jax.vmap(softplus)(z, true_betas)

    def loss(betas):
        fit = jax.vmap(softplus)(z, betas)
        return jnp.sum(jnp.mean((fit - y) ** 2, axis=1))

    tx = optax.adam(0.05)

    @jax.jit
    def step(betas, opt_state):
        updates, opt_state = tx.update(jax.grad(loss)(betas), opt_state)
        return optax.apply_updates(betas, updates), opt_state

    learned = jnp.ones(n)
    opt_state = tx.init(learned)
    for _ in range(200 if quick else 500):
        learned, opt_state = step(learned, opt_state)
    err = float(jnp.max(jnp.abs(learned - true_betas)))
    print(f"learned {n} betas; the largest |learned - true beta| is {err:.1e}")
    return per_example, learned, true_betas


if __name__ == "__main__":
    from _devices import MORE_DEVICES

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=MORE_DEVICES
    )
    parser.add_argument("--quick", action="store_true", help="tiny problem")
    main(parser.parse_args().quick)
