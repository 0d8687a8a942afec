"""Gradients: check_grads, comparison with jax.grad of a plain-jnp reference,
the jaxpr of the backward pass, transposition and higher orders."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FORWARD_MODE
from jax.test_util import check_grads

from jax_softplus import softplus, softplus_backward, softplus_backward_p

X = jnp.array([-3.0, -0.5, 0.0, 0.7, 2.5])
G = jnp.array([0.3, -1.0, 2.0, 0.5, -0.25])
BETAS = (1.0, 0.5, 3.0, -1.0, -2.5, 1.7)


def reference_softplus(x, beta):
    return jax.nn.softplus(beta * x) / beta


def reference_backward(src, diff_dst, beta):
    return diff_dst * jax.nn.sigmoid(beta * src)


@pytest.mark.parametrize("beta", BETAS)
def test_softplus_check_grads_second_order(beta):
    check_grads(lambda x: softplus(x, beta), (X,), order=2, modes=["rev"])


@pytest.mark.parametrize("beta", BETAS)
def test_softplus_check_grads_with_beta(beta):
    check_grads(softplus, (X, beta), order=2, modes=["rev"])


@pytest.mark.parametrize("beta", (*BETAS, 0.0))
def test_backward_check_grads_both_modes(beta):
    check_grads(softplus_backward, (X, G, beta), order=2, modes=["fwd", "rev"])


@pytest.mark.parametrize("beta", BETAS)
def test_grads_match_jnp_reference(beta):
    for argnums in (0, 1, (0, 1)):
        ours = jax.grad(lambda x, b: softplus(x, b).sum(), argnums)(X, beta)
        ref = jax.grad(lambda x, b: reference_softplus(x, b).sum(), argnums)(X, beta)
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)
    for argnums in (0, 1, 2):
        ours = jax.grad(lambda *a: softplus_backward(*a).sum(), argnums)(X, G, beta)
        ref = jax.grad(lambda *a: reference_backward(*a).sum(), argnums)(X, G, beta)
        np.testing.assert_allclose(ours, ref, rtol=2e-6, atol=1e-7)


def test_beta_cotangent_formula():
    beta = 1.7
    got = jax.grad(lambda b: softplus(X, b).sum())(beta)
    x = np.asarray(X, np.float64)
    y = np.logaddexp(0.0, beta * x) / beta
    want = np.sum((x / (1 + np.exp(-beta * x)) - y) / beta)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _subjaxprs(value):
    """Jaxprs held in an equation's parameter (any JAX version)."""
    if hasattr(value, "eqns"):
        yield value
    elif hasattr(getattr(value, "jaxpr", None), "eqns"):
        yield value.jaxpr
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _subjaxprs(item)


def _count_primitive(jaxpr, name):
    count = 0
    for eqn in jaxpr.eqns:
        count += eqn.primitive.name == name
        for param in eqn.params.values():
            for sub in _subjaxprs(param):
                count += _count_primitive(sub, name)
    return count


def test_grad_binds_the_primitive_exactly_once():
    jaxpr = jax.make_jaxpr(jax.grad(lambda x: softplus(x, 1.7).sum()))(X)
    assert _count_primitive(jaxpr.jaxpr, softplus_backward_p.name) == 1


def test_unperturbed_beta_costs_nothing_under_jit():
    # With beta not differentiated, no beta cotangent is formed: the compiled
    # backward pass is one loop fusion and has no reduction.
    f = jax.jit(jax.grad(lambda x, b: softplus(x, b).sum()))
    hlo = f.lower(jnp.ones(1024), 1.7).compile().as_text()
    assert "reduce(" not in hlo
    jaxpr = jax.make_jaxpr(jax.grad(lambda x, b: softplus(x, b).sum()))(X, 1.7)
    assert _count_primitive(jaxpr.jaxpr, softplus_backward_p.name) == 1


@pytest.mark.slow
def test_hessian_by_reverse_over_reverse():
    beta = 1.7
    hess = jax.jacrev(jax.jacrev(lambda x: softplus(x, beta).sum()))(X)
    s = 1 / (1 + np.exp(-beta * np.asarray(X, np.float64)))
    np.testing.assert_allclose(np.diag(hess), beta * s * (1 - s), rtol=2e-6)
    np.testing.assert_array_equal(hess - jnp.diag(jnp.diag(hess)), 0.0)


@pytest.mark.skipif(FORWARD_MODE, reason="forward mode supported")
def test_forward_mode_is_unsupported_on_jax_0_8():
    # JAX 0.8 has no HiPrim with lin: softplus is a jax.custom_vjp there,
    # and each forward-mode route fails as docs/sharp_bits.md says.
    ones = jnp.ones_like(X)
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(softplus, (X,), (ones,))
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jacfwd(softplus)(X[0])
    with pytest.raises(NotImplementedError, match="custom_lin"):
        jax.grad(lambda x: jax.jvp(softplus, (x,), (jnp.ones_like(x),))[1].sum())(X)
    _, f = jax.linearize(softplus, X)  # succeeds; applying it fails
    with pytest.raises(TypeError, match="custom_vjp"):
        f(ones)
    # What works: forward over the reverse pass (jvp of grad, jax.hessian).
    jax.jvp(jax.grad(lambda x: softplus(x).sum()), (X,), (ones,))


@pytest.mark.skipif(not FORWARD_MODE, reason="reverse mode only on JAX 0.8")
def test_reverse_mode_runs_the_custom_vjp_and_forward_mode_the_jvp(monkeypatch):
    # Observable: which of the op's rules ran (grad must not be a
    # transposed JVP), and one softplus_backward bind for the x cotangent.
    from jax_softplus import _softplus

    ran = []
    for rule in ("vjp_fwd", "vjp_bwd_retval", "jvp", "lin"):
        original = getattr(_softplus._Softplus, rule)

        def spy(self, *args, _original=original, _rule=rule):
            ran.append(_rule)
            return _original(self, *args)

        monkeypatch.setattr(_softplus._Softplus, rule, spy)
    f = lambda x: softplus(x, 1.7).sum()  # noqa: E731
    jaxpr = jax.make_jaxpr(jax.grad(f))(X)
    assert ran == ["vjp_fwd", "vjp_bwd_retval"]
    assert _count_primitive(jaxpr.jaxpr, softplus_backward_p.name) == 1
    ran.clear()
    jax.jvp(f, (X,), (jnp.ones_like(X),))
    assert ran == ["jvp"]
    ran.clear()
    jax.linearize(f, X)
    assert ran == ["lin"]


def test_linear_transpose_in_diff_dst():
    f = lambda d: softplus_backward(X, d, 1.7)  # noqa: E731
    ct = jnp.arange(5.0)
    (transposed,) = jax.linear_transpose(f, G)(ct)
    np.testing.assert_array_equal(transposed, softplus_backward(X, ct, 1.7))
    # Transposing twice gives the op back.
    g = jax.linear_transpose(lambda c: jax.linear_transpose(f, G)(c)[0], ct)
    np.testing.assert_array_equal(g(G)[0], f(G))


@pytest.mark.slow
def test_grad_at_edges():
    # tests/nn_test.py-style edges: 0, tiny, +-inf, nan.
    grad = jax.grad(softplus)
    assert grad(0.0) == 0.5
    assert grad(1e-8) == pytest.approx(0.5)
    assert grad(jnp.inf) == 1.0 and grad(-jnp.inf) == 0.0
    assert jnp.isnan(grad(jnp.nan))
    # softplus'''' = sigmoid''' = s(1-s)(1-6s+6s^2), -1/8 at 0.
    d4 = jax.grad(jax.grad(jax.grad(grad)))(1e-8)
    assert d4 == pytest.approx(-0.125, rel=1e-5)


def test_inputs_are_not_modified():
    x, g = jnp.array(X), jnp.array(G)
    jax.grad(lambda x: softplus(x, 1.7).sum())(x)
    jax.vjp(softplus_backward, x, g, 1.7)[1](g)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(g, G)
