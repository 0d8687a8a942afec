"""The op inside other transformations: remat, scan, nested jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_softplus import softplus, softplus_backward, softplus_backward_inplace

X = jnp.linspace(-6.0, 6.0, 64)


@pytest.mark.slow
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


@pytest.mark.slow
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
    # The forward op's primitive compiles there too: a jitted call's bits.
    np.testing.assert_array_equal(np.asarray(fwd), np.asarray(softplus(X, 1.7)))


@pytest.mark.slow
def test_arrays_closed_over_by_a_traced_function():
    # Concrete arrays that a jitted (or scanned, or checkified) function
    # closes over are not tracers, but the call belongs to that trace: it
    # must not run the library's own top-level jits there (JAX refuses their
    # compiler options in a nested jit) nor donate the closed-over diff_dst.
    from jax.experimental import checkify

    x, g = jnp.linspace(-3.0, 3.0, 64), jnp.linspace(0.5, 1.5, 64)
    ops = {
        "softplus": lambda: softplus(x, 1.3),
        "softplus_backward": lambda: softplus_backward(x, g, 1.3),
        "softplus_backward_inplace": lambda: softplus_backward_inplace(x, g, 1.3),
    }
    wrappers = {
        "jit": lambda op: jax.jit(op)(),
        "scan": lambda op: jax.lax.scan(lambda c, _: (c, op()), 0, None, length=2)[1][
            1
        ],
        "cond": lambda op: jax.lax.cond(True, op, op),
        "vmap": lambda op: jax.vmap(lambda i: op() * i)(jnp.ones(2))[0],
        "checkify": lambda op: checkify.checkify(op, errors=checkify.float_checks)()[1],
    }
    want = {
        "softplus": softplus(x, 1.3),
        "softplus_backward": softplus_backward(x, g, 1.3),
    }
    want["softplus_backward_inplace"] = want["softplus_backward"]
    for wrap_name, wrap in wrappers.items():
        for op_name, op in ops.items():
            got = wrap(op)
            np.testing.assert_allclose(
                got, want[op_name], rtol=3e-7, err_msg=f"{op_name} in {wrap_name}"
            )
    assert not g.is_deleted()  # nothing was donated inside a trace
