"""Every public op under every JAX transformation and tool, on every kind of
input a user passes: the composability matrix.

Each cell computes one quantity (the value, a reverse-mode derivative, a
forward-mode derivative or a second derivative) with one transformation,
from inputs of one kind, and must give the same bits as that quantity
computed eagerly from float32 arrays: forward-mode cells give the bits of the
matching reverse-mode quantity (`jvp` = `grad`, `jacfwd` = `jacrev`). Where
the installed JAX has no `HiPrim` (0.8), `softplus` is a `jax.custom_vjp` and
its forward-mode cells raise JAX's documented error instead.
`docs/sharp_bits.md` lists the same facts.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FORWARD_MODE, SLOW_HIGHEST, ULP_BOUND, backward_ref, max_ulp
from jax import lax
from jax.experimental import checkify
from jax.test_util import check_grads

from jax_softplus import softplus, softplus_backward, softplus_backward_inplace

X, DD, BETA = -1.25, 0.75, 1.7
XS, DDS = (-1.25, 0.5, 3.0), (0.75, -2.0, 1.5)


# Inputs: a function of (value, default dtype), so that each cell gets fresh
# operands (the in-place op deletes a donated diff_dst).
KINDS = {
    "python": lambda v, dt: v,
    "numpy": lambda v, dt: np.asarray(v, dt)[()],
    "0d": lambda v, dt: jnp.asarray(v, dt),
    "weak": lambda v, dt: jnp.asarray(v),  # weak-typed, as Python floats in jit
    "array": None,  # three elements; beta stays a 0-d array
}


def _inputs(kind, dtype=jnp.float32):
    if kind == "array":
        return jnp.asarray(XS, dtype), jnp.asarray(DDS, dtype), jnp.asarray(BETA, dtype)
    make = KINDS[kind]
    return make(X, dtype), make(DD, dtype), make(BETA, dtype)


OPS = {
    "softplus": lambda x, dd, b: softplus(x, b),
    "softplus_backward": softplus_backward,
    "softplus_backward_inplace": softplus_backward_inplace,
}


def _total(op):
    """The op as a function of x with a scalar result (a sum over arrays)."""
    return lambda x, dd, b: jnp.sum(op(x, dd, b))


def _diag(y):
    """Per-element second derivatives from a Hessian of a sum (diagonal)."""
    return jnp.diagonal(y) if jnp.ndim(y) == 2 else y


# Each transformation: the quantity it computes, and how.
def _value(op, x, dd, b):
    return op(x, dd, b)


def _grad(op, x, dd, b):
    return jax.grad(_total(op))(x, dd, b)


def _jvp(op, x, dd, b):
    return jax.jvp(lambda x: op(x, dd, b), (x,), (jnp.ones_like(x),))[1]


def _hessian(op, x, dd, b):
    return _diag(jax.hessian(_total(op))(x, dd, b))


def _with(context, op, x, dd, b):
    with context():
        return op(x, dd, b)


def _checkify(op, x, dd, b):
    err, out = checkify.checkify(
        lambda x, dd, b: op(x, dd, b), errors=checkify.float_checks
    )(x, dd, b)
    assert err.get() is None, err.get()
    return out


def _aot(op, x, dd, b):
    if op is softplus_backward_inplace:  # its own .lower (donating)
        lowered = softplus_backward_inplace.lower(x, dd, b)
    else:
        lowered = jax.jit(op).lower(x, dd, b)
    return lowered.compile()(x, dd, b)


def _export(op, x, dd, b):
    exported = jax.export.export(jax.jit(op))(x, dd, b)
    return jax.export.deserialize(exported.serialize()).call(x, dd, b)


def _jit(op, x, dd, b):
    return jax.jit(op)(x, dd, b)


def _vmap(op, x, dd, b):
    # Over beta: x and dd stay unbatched, of the kind under test.
    return jax.vmap(op, (None, None, 0))(x, dd, jnp.stack([b, b]))[1]


def _jacrev(op, x, dd, b):
    return _diag(jax.jacrev(lambda x: op(x, dd, b))(x))


def _jacfwd(op, x, dd, b):
    return _diag(jax.jacfwd(lambda x: op(x, dd, b))(x))


def _linearize(op, x, dd, b):
    return jax.linearize(lambda x: op(x, dd, b), x)[1](jnp.ones_like(x))


def _checkpoint(op, x, dd, b):
    return jax.grad(jax.checkpoint(_total(op)))(x, dd, b)


def _scan(op, x, dd, b):
    return lax.scan(lambda c, _: (c, op(x, dd, b)), 0.0, None, length=2)[1][1]


def _jvp_of_grad(op, x, dd, b):
    # Forward over reverse, one row of the Hessian of a sum: its diagonal.
    grad = lambda x: jax.grad(_total(op))(x, dd, b)  # noqa: E731
    return jax.jvp(grad, (x,), (jnp.ones_like(x),))[1]


def _shard_map(op, x, dd, b):
    # Without jit: shard_map's own eager interpreter, on a one-device mesh.
    mesh = jax.make_mesh((1,), ("d",))
    spec = jax.sharding.PartitionSpec()
    run = jax.shard_map(
        lambda x, dd, b: op(x, dd, b), mesh=mesh, in_specs=spec, out_specs=spec
    )
    return run(x, dd, b)


def _shard_map_grad(op, x, dd, b):
    return _grad(lambda x, dd, b: _shard_map(op, x, dd, b), x, dd, b)


def _custom_vjp3(op, x, dd, b):
    # JAX's next custom_vjp (off by default in 0.9-0.11): gradients unchanged.
    previous = jax.config.jax_custom_vjp3
    jax.config.update("jax_custom_vjp3", True)
    try:
        return _grad(op, x, dd, b)
    finally:
        jax.config.update("jax_custom_vjp3", previous)


def _cond(op, x, dd, b):
    def other():
        return jnp.zeros_like(op(x, dd, b))

    return lax.cond(jnp.bool_(True), lambda: op(x, dd, b), other)


TRANSFORMS = {
    "eager": ("value", _value),
    "jit": ("value", _jit),
    "vmap": ("value", _vmap),
    "grad": ("grad", _grad),
    "jacrev": ("grad", _jacrev),
    "hessian": ("hessian", _hessian),
    "jvp": ("jvp", _jvp),
    "jacfwd": ("jvp", _jacfwd),
    "linearize": ("jvp", _linearize),
    "checkpoint": ("grad", _checkpoint),
    "jvp_of_grad": ("hessian", _jvp_of_grad),
    "shard_map": ("value", _shard_map),
    "shard_map_grad": ("grad", _shard_map_grad),
    "scan": ("value", _scan),
    "cond": ("value", _cond),
    "checkify": ("value", _checkify),
    "debug_nans": ("value", functools.partial(_with, lambda: jax.debug_nans(True))),
    "debug_infs": ("value", functools.partial(_with, lambda: jax.debug_infs(True))),
    "disable_jit": ("value", functools.partial(_with, jax.disable_jit)),
    "aot": ("value", _aot),
    "export": ("value", _export),
}

QUANTITIES = {"value": _value, "grad": _grad, "jvp": _jvp, "hessian": _hessian}

if hasattr(jax.config, "jax_custom_vjp3"):  # JAX 0.9+
    TRANSFORMS["custom_vjp3"] = ("grad", _custom_vjp3)

# Forward mode through a custom_vjp function (JAX 0.8): JAX's own TypeError.
FORWARD_TRANSFORMS = ("jvp", "jacfwd", "linearize")
RAISES = {}
if not FORWARD_MODE:
    RAISES = {
        ("softplus", t): "can't apply forward-mode autodiff" for t in FORWARD_TRANSFORMS
    }


@functools.cache
def _reference(op_name, quantity, kind):
    """The quantity, eagerly, from 0-d float32 arrays (per element)."""
    op, fn = OPS[op_name], QUANTITIES[quantity]
    values = zip(XS, DDS, strict=True) if kind == "array" else [(X, DD)]
    beta = jnp.float32(BETA)
    out = [fn(op, jnp.float32(x), jnp.float32(dd), beta) for x, dd in values]
    return np.stack([np.asarray(o) for o in out]).reshape(np.shape(_inputs(kind)[0]))


# Python and NumPy scalars that scan and cond close over are constants of the
# program, and XLA:CPU evaluates the backward kernel on them when it
# compiles, one rounding per multiply and add, without the FMA that the
# error-free product of beta and src takes on CPUs (`docs/sharp_bits.md`).
# Such a value is within the naive formula's error (|t| ulp more than the
# bound) and its bits are not an eager call's: 34 of 40 random scalars
# differed, with this kernel and with the one before it.
FOLDED = {
    (op, transform, kind)
    for op in ("softplus_backward", "softplus_backward_inplace")
    for transform in ("scan", "cond")
    for kind in ("python", "numpy")
}


# NumPy and 0-d array inputs behave as Python scalars and arrays do in
# every transformation: the slow tier runs their cells.
_SLOW_KINDS = ("numpy", "0d")


@pytest.mark.parametrize(
    "kind",
    [pytest.param(k, marks=pytest.mark.slow) if k in _SLOW_KINDS else k for k in KINDS],
)
@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("op_name", list(OPS))
def test_matrix(op_name, transform, kind):
    quantity, run = TRANSFORMS[transform]
    op = OPS[op_name]
    expected_error = RAISES.get((op_name, transform))
    if expected_error:
        with pytest.raises(TypeError, match=expected_error):
            run(op, *_inputs(kind))
        return
    got = np.asarray(run(op, *_inputs(kind)))
    assert got.dtype == np.float32, got.dtype
    want = _reference(op_name, quantity, kind)
    if (op_name, transform, kind) in FOLDED:
        # The one cell whose bits are not an eager call's: see FOLDED.
        t = abs(np.float32(BETA) * np.float32(X))
        ref = backward_ref(jnp.float32(X), jnp.float32(DD), BETA)
        assert max_ulp(got, ref, jnp.float32) <= ULP_BOUND[np.dtype(np.float32)] + t
        return
    np.testing.assert_array_equal(
        got.view(np.uint32), want.view(np.uint32), err_msg=f"{got} != {want}"
    )


X64_TRANSFORMS = ("grad", "jacrev", "hessian", "jvp", "jacfwd", "linearize", "vmap")


@pytest.mark.parametrize(
    ("op_name", "transform"),
    [(o, t) for o in OPS for t in X64_TRANSFORMS if (o, t) not in RAISES],
)
def test_python_scalars_under_x64(x64, op_name, transform):
    # With x64 on, Python floats are float64: the rules see float64 literals
    # and weak-typed scalars, and must match 0-d float64 arrays bit for bit.
    quantity, run = TRANSFORMS[transform]
    op = OPS[op_name]
    got = run(op, X, DD, BETA)
    assert got.dtype == np.float64, got.dtype
    f64 = jnp.float64
    want = QUANTITIES[quantity](op, f64(X), f64(DD), f64(BETA))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_hessian_of_softplus_matches_reverse_over_reverse():
    # The same math, associated differently: within one rounding.
    x = jnp.asarray(XS)
    f = _total(OPS["softplus"])
    np.testing.assert_allclose(
        jax.hessian(f)(x, None, BETA),
        jax.jacrev(jax.jacrev(f))(x, None, BETA),
        rtol=2 * np.finfo(np.float32).eps,
        atol=0,
    )


def test_the_mechanism_is_the_one_this_jax_offers():
    # HiPrim (or VJPHiPrimitive) with lin and nonzeros: JAX 0.9 and newer.
    from jax.experimental import hijax

    base = getattr(hijax, "HiPrim", None) or getattr(hijax, "VJPHiPrimitive", None)
    expected = "hiprim" if base is not None and hasattr(base, "lin") else "custom_vjp"
    assert FORWARD_MODE == (expected == "hiprim")


@pytest.mark.skipif(FORWARD_MODE, reason="forward mode supported")
def test_check_grads_of_softplus_needs_reverse_mode_on_jax_0_8():
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        check_grads(softplus, (0.5,), order=1)
    check_grads(softplus, (0.5,), order=2, modes=["rev"])


@pytest.mark.slow
@pytest.mark.skipif(not FORWARD_MODE, reason="reverse mode only on JAX 0.8")
@pytest.mark.parametrize("beta", (1.7, -0.5, 4.0))
def test_check_grads_of_softplus_in_its_default_modes(beta):
    # Both modes, to order 2, in x and in beta.
    x = jnp.asarray(XS)
    check_grads(softplus, (x, jnp.float32(beta)), order=2, atol=2e-2, rtol=2e-2)
    check_grads(lambda x: softplus(x, beta), (x,), order=2)


@pytest.mark.skipif(not FORWARD_MODE, reason="reverse mode only on JAX 0.8")
def test_jvp_of_jvp_is_grad_of_grad_within_one_rounding():
    def f(x):
        return softplus(x, BETA)

    def tangent(x):
        return jax.jvp(f, (x,), (1.0,))[1]

    for x in XS:
        x = jnp.float32(x)
        fwd = jax.jvp(tangent, (x,), (1.0,))[1]
        rev = jax.grad(jax.grad(f))(x)
        np.testing.assert_allclose(fwd, rev, rtol=2 * np.finfo(np.float32).eps)


# A float64 beta in (1.17549428e-38, tiny) rounds to float32's smallest
# normal: every route sees that normal number, as a traced beta does, not 0.
@pytest.mark.parametrize("accuracy", [None, SLOW_HIGHEST], ids=str)
@pytest.mark.parametrize(
    "beta", [1.17549432e-38, 1.1754943e-38, np.float64(1.1754943e-38)]
)
def test_a_beta_that_rounds_to_the_smallest_normal_is_that_normal(beta, accuracy):
    tiny = np.finfo(np.float32).tiny
    assert np.float32(beta) == tiny and float(beta) < float(tiny)
    src = jnp.asarray([1e38, -1e38, 3e38], jnp.float32)
    dd = jnp.ones(3, jnp.float32)
    back = functools.partial(softplus_backward, accuracy=accuracy)
    fwd = functools.partial(softplus, accuracy=accuracy)
    want = np.asarray(jax.jit(back)(src, dd, jnp.float32(tiny)))
    want_fwd = np.asarray(jax.jit(fwd)(src, jnp.float32(tiny)))
    ref = backward_ref(src, dd, float(tiny))
    assert max_ulp(want, ref, jnp.float32) <= ULP_BOUND[np.dtype(np.float32)]
    routes = {
        "eager": lambda: back(src, dd, beta),
        "jit, constant beta": lambda: jax.jit(lambda s, d: back(s, d, beta))(src, dd),
        "vmap": lambda: jax.vmap(back, (0, 0, None))(src, dd, beta),
        "in place": lambda: softplus_backward_inplace(
            src, jnp.ones(3, jnp.float32), beta, accuracy=accuracy
        ),
    }
    for name, run in routes.items():
        got = np.asarray(run())
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), name)
    for name, got in {
        "eager": fwd(src, beta),
        "jit, constant beta": jax.jit(lambda s: fwd(s, beta))(src),
    }.items():
        np.testing.assert_array_equal(np.asarray(got), want_fwd, f"softplus {name}")
