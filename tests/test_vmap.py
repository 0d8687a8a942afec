"""Batching: every combination of mapped operands, any axis, nested, and
mixed with grad."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ULP_BOUND, max_ulp, softplus_ref

from jax_softplus import softplus, softplus_backward

B, M, K = 3, 4, 5
RNG = np.random.default_rng(0)
SRC = jnp.asarray(RNG.uniform(-6, 6, (B, M, K)).astype(np.float32))
DD = jnp.asarray(RNG.standard_normal((B, M, K)).astype(np.float32))
BETA = jnp.asarray([0.5, -1.7, 3.0], jnp.float32)


def reference(src, dd, beta):
    return dd * jax.nn.sigmoid(beta * src)


def _args(in_axes):
    """Operands laid out for in_axes (None: unbatched, else the batch axis)."""
    src_ax, dd_ax, beta_ax = in_axes
    src = SRC[0] if src_ax is None else jnp.moveaxis(SRC, 0, src_ax)
    dd = DD[0] if dd_ax is None else jnp.moveaxis(DD, 0, dd_ax)
    beta = BETA[0] if beta_ax is None else BETA
    return src, dd, beta


AXES = [
    axes
    for axes in itertools.product((None, 0, 1, 2), (None, 0, 2), (None, 0))
    if axes != (None, None, None)
]


def _per_example(args, in_axes, out_axes):
    """The unbatched op applied example by example, stacked along out_axes."""
    outs = []
    for i in range(B):
        sliced = [
            a if ax is None else jnp.take(a, i, axis=ax)
            for a, ax in zip(args, in_axes, strict=True)
        ]
        outs.append(softplus_backward(*sliced))
    return jnp.stack(outs, axis=out_axes)


@pytest.mark.parametrize("in_axes", AXES, ids=str)
@pytest.mark.parametrize("out_axes", (0, 2))
def test_every_combination_matches_per_example_calls(in_axes, out_axes):
    args = _args(in_axes)
    got = jax.vmap(softplus_backward, in_axes, out_axes)(*args)
    np.testing.assert_array_equal(got, _per_example(args, in_axes, out_axes))
    want = jax.vmap(reference, in_axes, out_axes)(*args)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-30)


def test_nested_vmap_with_per_example_beta():
    betas = jnp.asarray(RNG.uniform(-3, 3, (B, M)).astype(np.float32))
    inner = jax.vmap(softplus_backward, in_axes=(0, 0, 0))
    got = jax.vmap(inner, in_axes=(0, 0, 0))(SRC, DD, betas)
    want = reference(SRC, DD, betas[..., None])
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-30)
    got = jax.vmap(jax.vmap(softplus_backward, (1, 1, None)), (2, 2, None))(
        SRC, DD, 1.5
    )
    np.testing.assert_allclose(
        got, reference(SRC, DD, 1.5).transpose(2, 1, 0), rtol=2e-6
    )


def test_vmap_under_jit_and_of_jit():
    f = jax.vmap(softplus_backward, (0, 0, 0))
    np.testing.assert_array_equal(jax.jit(f)(SRC, DD, BETA), f(SRC, DD, BETA))
    g = jax.vmap(jax.jit(softplus_backward), (0, 0, 0))
    np.testing.assert_array_equal(g(SRC, DD, BETA), f(SRC, DD, BETA))


@pytest.mark.slow
def test_vmap_of_grad_with_per_example_beta():
    def loss(x, beta):
        return softplus(x, beta).sum()

    got_x, got_b = jax.vmap(jax.grad(loss, (0, 1)))(SRC, BETA)

    def ref_loss(x, beta):
        return (jax.nn.softplus(beta * x) / beta).sum()

    want_x, want_b = jax.vmap(jax.grad(ref_loss, (0, 1)))(SRC, BETA)
    np.testing.assert_allclose(got_x, want_x, rtol=2e-6)
    np.testing.assert_allclose(got_b, want_b, rtol=2e-5)


def test_grad_of_vmap():
    def loss(src, dd, beta):
        return jax.vmap(softplus_backward, (0, 0, 0))(src, dd, beta).sum()

    got = jax.grad(loss, (0, 1, 2))(SRC, DD, BETA)
    # Float64 analytic gradients (jax.nn.sigmoid's 1 - s cancels in f32).
    src, dd = np.asarray(SRC, np.float64), np.asarray(DD, np.float64)
    beta = np.asarray(BETA, np.float64)[:, None, None]
    s = 1 / (1 + np.exp(-beta * src))
    ds = s * (1 - s)
    want = (dd * beta * ds, s, (dd * src * ds).sum(axis=(1, 2)))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-12)


def test_vmap_of_forward_softplus():
    got = jax.vmap(softplus, (1, None), 1)(SRC, 1.7)
    np.testing.assert_array_equal(got, softplus(SRC, 1.7))


def test_vmap_of_forward_softplus_with_per_example_beta():
    # XLA turns a division by a broadcast vector into a multiplication by
    # its reciprocal, so a per-example beta rounds the forward's division
    # twice: not bit-identical to per-example calls, but within the bound.
    betas = np.float32([1.0, 1.7, -0.3, 7.3])
    rng = np.random.default_rng(3)
    x = jnp.asarray(
        (rng.uniform(-30, 30, (4, 1 << 15)) / betas[:, None]).astype(np.float32)
    )
    got = jax.jit(jax.vmap(softplus))(x, jnp.asarray(betas))
    for i, beta in enumerate(betas):
        err = max_ulp(got[i], softplus_ref(x[i], float(beta)), jnp.float32)
        assert err <= ULP_BOUND[np.dtype(jnp.float32)], (beta, err)
