"""Quick start: the forward op, its gradient, vmap over a batch, in place.

Run: python examples/quickstart.py [--quick]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from jax_softplus import softplus, softplus_backward, softplus_backward_inplace


def main(quick: bool = False) -> dict[str, jax.Array]:
    n = 8 if quick else 1 << 20
    x = jnp.linspace(-4.0, 4.0, n)

    # Forward: (1/beta) log(1 + exp(beta x)), stable for any beta x.
    y = softplus(x, beta=2.0)

    # Gradient: a custom_vjp whose backward pass is the SoftPlusBackward
    # primitive, so jax.grad gives dy/dx = sigmoid(beta x).
    dydx = jax.grad(lambda x: softplus(x, 2.0).sum())(x)

    # The backward op itself, as oneDNN defines it.
    diff_dst = jnp.ones_like(x)
    diff_src = softplus_backward(x, diff_dst, beta=2.0)
    assert bool(jnp.all(diff_src == dydx))

    # vmap over a batch, with one beta per example.
    batch = jnp.stack([x, -x, 0.5 * x])
    betas = jnp.array([0.5, 1.0, 4.0])
    per_example = jax.vmap(softplus_backward)(batch, jnp.ones_like(batch), betas)

    # In place: diff_dst is donated and the result reuses its buffer.
    grad_buffer = jnp.ones_like(x)
    inplace = softplus_backward_inplace(x, grad_buffer, 2.0)
    assert grad_buffer.is_deleted()

    print(f"softplus(x, 2)[:4]        = {y[:4]}")
    print(f"d softplus / dx [:4]      = {dydx[:4]}")
    print(f"vmap, per-example beta    : shape {per_example.shape}")
    print(f"in place, input deleted   : {grad_buffer.is_deleted()}")
    return {"y": y, "dydx": dydx, "per_example": per_example, "inplace": inplace}


if __name__ == "__main__":
    from _devices import MORE_DEVICES

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=MORE_DEVICES
    )
    parser.add_argument("--quick", action="store_true", help="tiny arrays")
    main(parser.parse_args().quick)
