"""The op inside other transformations: remat, scan, nested jit."""

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import softplus, softplus_backward, softplus_backward_inplace

X = jnp.linspace(-6.0, 6.0, 64)


def test_checkpoint_gives_the_same_gradients():
    def f(x):
        return jnp.sum(softplus(jnp.sin(x) * 3.0, 1.7) ** 2)

    plain = jax.grad(f)(X)
    remat = jax.grad(jax.checkpoint(f))(X)
    np.testing.assert_array_equal(plain, remat)
    policy = jax.checkpoint_policies.nothing_saveable
    np.testing.assert_array_equal(plain, jax.grad(jax.checkpoint(f, policy=policy))(X))


def test_inside_lax_scan_with_grad():
    def body(carry, beta):
        return softplus_backward(X, carry, beta), jnp.sum(carry)

    betas = jnp.linspace(0.5, 2.0, 5)
    final, sums = jax.lax.scan(body, jnp.ones_like(X), betas)
    want = jnp.ones_like(X)
    for b in betas:
        want = softplus_backward(X, want, b)
    np.testing.assert_array_equal(final, want)
    assert sums.shape == (5,)

    def loss(x):
        out, _ = jax.lax.scan(lambda c, b: (softplus(c, b), None), x, betas)
        return out.sum()

    g = jax.grad(loss)(X)
    assert np.all(np.isfinite(g)) and np.all(np.asarray(g) > 0)


def test_nested_jit_and_eval_shape():
    f = jax.jit(lambda x: jax.jit(softplus)(x, 2.0))
    np.testing.assert_array_equal(f(X), softplus(X, 2.0))
    shape = jax.eval_shape(softplus_backward, X, X, 1.0)
    assert shape.shape == X.shape and shape.dtype == X.dtype


def test_disable_jit_runs_every_entry_point():
    # Under jax.disable_jit() the primitive's impl still compiles, as JAX's
    # own apply_primitive does: its jit would otherwise run bind op by op,
    # and bind would come back to the impl until RecursionError.
    g = jnp.linspace(0.5, 1.5, X.size)

    def grad(x):
        return jax.grad(lambda x: jnp.sum(softplus(x, 1.7) * g))(x)

    with jax.disable_jit():
        bwd = softplus_backward(X, g, 1.7)
        inplace = softplus_backward_inplace(X, jnp.array(g), 1.7)
        dx = grad(X)
        fwd = softplus(X, 1.7)
    want = softplus_backward(X, g, 1.7)
    for got in (bwd, inplace, dx):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # The forward kernel runs op by op there (no fusion, no FMA contraction):
    # the same values up to its rounding.
    np.testing.assert_allclose(fwd, softplus(X, 1.7), rtol=3e-7)
