"""Train a softplus MLP on scikit-learn's digits with Flax (nnx) and Optax.

The activation is `jax_softplus.softplus`, so every backward pass runs the
SoftPlusBackward primitive inside XLA's fused training step. The data set
ships inside scikit-learn: nothing is downloaded. The training state (model
parameters and optimizer state) is donated to each jitted step.

Run: python examples/train_mlp.py [--quick] [--epochs N] [--beta B]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from _extras import require

from jax_softplus import softplus

optax, nnx_module, datasets, selection, tqdm_module = require(
    "optax", "flax.nnx", "sklearn.datasets", "sklearn.model_selection", "tqdm"
)
nnx = nnx_module
load_digits = datasets.load_digits
train_test_split = selection.train_test_split
tqdm = tqdm_module.tqdm


class MLP(nnx.Module):
    def __init__(self, sizes, beta, *, rngs):
        self.layers = nnx.List(
            [
                nnx.Linear(a, b, rngs=rngs)
                for a, b in zip(sizes[:-1], sizes[1:], strict=True)
            ]
        )
        self.beta = beta

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = softplus(layer(x), self.beta)
        return self.layers[-1](x)


def load_data(seed=0):
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    return train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)


def make_step(graphdef, tx):
    @partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, x, y):
        def loss_fn(params):
            model = nnx.merge(graphdef, params)
            logits = model(x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def accuracy(graphdef, params, x, y):
    logits = jax.jit(lambda p, x: nnx.merge(graphdef, p)(x))(params, x)
    return float(jnp.mean(jnp.argmax(logits, axis=-1) == y))


def main(quick=False, epochs=None, beta=1.0, seed=0):
    epochs = epochs or (3 if quick else 40)
    x_train, x_test, y_train, y_test = load_data(seed)
    model = MLP([64, 128, 128, 10], beta, rngs=nnx.Rngs(seed))
    graphdef, params = nnx.split(model, nnx.Param)
    tx = optax.adam(3e-3)
    opt_state = tx.init(params)
    step = make_step(graphdef, tx)

    batch = 64
    rng = np.random.default_rng(seed)
    n = len(x_train)
    # A progress bar on a terminal; one line per epoch in a log or a pipe.
    tty = sys.stderr.isatty()
    bar = tqdm(range(epochs), desc="training", unit="epoch") if tty else range(epochs)
    loss = float("nan")
    for epoch in bar:
        order = rng.permutation(n)
        for start in range(0, n - batch + 1, batch):
            idx = order[start : start + batch]
            params, opt_state, loss = step(
                params, opt_state, x_train[idx], y_train[idx]
            )
        if tty:
            bar.set_postfix(loss=f"{float(loss):.4f}")
        else:
            print(f"epoch {epoch + 1}/{epochs}: loss {float(loss):.4f}", flush=True)
    acc = accuracy(graphdef, params, x_test, y_test)
    print(f"test accuracy after {epochs} epochs: {acc:.2%}")
    return acc


if __name__ == "__main__":
    from _devices import MORE_DEVICES

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=MORE_DEVICES
    )
    parser.add_argument("--quick", action="store_true", help="3 epochs")
    parser.add_argument(
        "--epochs", type=int, default=None, help="training epochs (default: 40)"
    )
    parser.add_argument(
        "--beta", type=float, default=1.0, help="softplus's beta (default: 1.0)"
    )
    args = parser.parse_args()
    if args.epochs is not None and args.epochs < 1:
        parser.error(f"--epochs must be at least 1, got {args.epochs}")
    # float32's range: softplus refuses a beta that overflows it or that is
    # below its smallest normal (1.2e-38), which the CPU flushes to 0.
    with np.errstate(over="ignore"):
        rounded = abs(float(np.float32(args.beta)))
    if not (np.finfo(np.float32).tiny <= rounded < float("inf")):
        parser.error(
            "--beta must be a nonzero float32 number, 1.2e-38 <= |beta| <= "
            f"3.4e38, got {args.beta}"
        )
    main(args.quick, args.epochs, args.beta)
