"""`softplus` as a drop-in for `jax.nn.softplus`: what it accepts and the
types it returns, forward mode beside vmap, and the JAX tools around the
primitive (`.lower` with specs, `jax.experimental.jet`, direct binds)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FORWARD_MODE, SLOW_HIGHEST
from jax.experimental import jet

from jax_softplus import (
    _compat,
    softplus,
    softplus_backward,
    softplus_backward_inplace,
    softplus_backward_p,
)
from jax_softplus._forward import softplus_p
from jax_softplus._validate import BetaHints

forward_mode = pytest.mark.skipif(
    not FORWARD_MODE, reason="reverse mode only on JAX 0.8"
)

INPUTS = {
    "int8": lambda: jnp.int8(3),
    "int32": lambda: jnp.arange(-2, 3),
    "uint8": lambda: jnp.uint8(7),
    "int64-numpy": lambda: np.arange(3, dtype=np.int64),
    "bool": lambda: jnp.array([True, False]),
    "python-int": lambda: 3,
    "python-bool": lambda: True,
    "python-float": lambda: 0.5,
    "weak-array": lambda: jnp.asarray(0.5),
    "float16": lambda: jnp.float16(1.5),
    # np.float64 subclasses float: it was taken for a Python scalar (weak).
    "numpy-float64": lambda: np.float64(0.5),
    "numpy-float32": lambda: np.float32(0.5),
    "numpy-float32-array": lambda: np.linspace(-3, 3, 7, dtype=np.float32),
    "int4": lambda: jnp.asarray([-2, 0, 1, 3], jnp.int4),
    "uint4": lambda: jnp.asarray([0, 1, 2, 3], jnp.uint4),
}


def _weak(y):
    return jax.typeof(y).weak_type


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype")
@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("name", list(INPUTS))
def test_types_and_values_are_jax_nn_softplus(name, x64):
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", x64)
    try:
        with jax.numpy_dtype_promotion("standard"):  # JAX's default
            want = jax.nn.softplus(INPUTS[name]())
        for got in (softplus(INPUTS[name]()), jax.jit(softplus)(INPUTS[name]())):
            assert (got.dtype, _weak(got)) == (want.dtype, _weak(want)), name
            # Within 2 ulp (ours is the one within 2 ulp of the exact value).
            np.testing.assert_allclose(
                got, want, rtol=2 * float(jnp.finfo(want.dtype).eps)
            )
        # With a beta, checked against the promoted dtype's range before the
        # jit: 1e200 is a beta for float64 results, too large for float32.
        x = np.asarray(INPUTS[name](), np.float64)
        for beta in (2.0, 1e200) if want.dtype == np.float64 else (2.0,):
            got = softplus(INPUTS[name](), beta)
            assert (got.dtype, _weak(got)) == (want.dtype, _weak(want)), name
            np.testing.assert_allclose(
                got,
                np.logaddexp(beta * x, 0) / beta,
                rtol=2 * float(jnp.finfo(want.dtype).eps),
            )
    finally:
        jax.config.update("jax_enable_x64", previous)


NARROW = (
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e3m4",
    "float4_e2m1fn",
)


@pytest.mark.slow
@pytest.mark.parametrize("name", NARROW)
def test_float8_and_float4_in_give_them_out_correctly_rounded(name):
    # They were a TypeError; jax.nn.softplus takes them (float8 in, float8
    # out). Computed in float32 and rounded once: the correctly rounded value.
    dtype = getattr(jnp, name)
    x = jnp.asarray(np.random.default_rng(3).uniform(-6, 6, 256), dtype)
    want = jax.nn.softplus(x)
    exact = np.logaddexp(np.asarray(x.astype(jnp.float32), np.float64), 0.0)
    for got in (softplus(x), jax.jit(softplus)(x), softplus(x, 1.0)):
        assert got.dtype == want.dtype and not _weak(got)
        np.testing.assert_array_equal(got, jnp.asarray(exact, dtype))
    # Differentiable in x and beta; the beta gradient in float32.
    g = jax.grad(lambda v: softplus(v).astype(jnp.float32).sum())(x)
    assert g.dtype == dtype
    sig = 1 / (1 + np.exp(-np.asarray(x.astype(jnp.float32), np.float64)))
    np.testing.assert_array_equal(g, jnp.asarray(sig, dtype))
    gb = jax.grad(lambda b: softplus(x, b).astype(jnp.float32).sum())(1.5)
    assert gb.dtype == jnp.float32 and np.isfinite(gb)


def test_a_numpy_float64_scalar_is_strongly_typed_in_every_op():
    bf16 = jnp.ones(2, jnp.bfloat16)
    with jax.numpy_dtype_promotion("standard"):  # JAX's default
        assert (softplus(np.float64(0.5)) * bf16).dtype == jnp.float32
        assert (jax.nn.softplus(np.float64(0.5)) * bf16).dtype == jnp.float32
        out = softplus_backward(np.float64(0.5), np.float64(1.0))
        assert not _weak(out) and (out * bf16).dtype == jnp.float32
    assert _weak(softplus_backward(0.5, 1.0))


def test_a_weak_result_takes_the_other_operands_dtype():
    half = jnp.ones(2, jnp.bfloat16)
    assert (softplus(0.5) * half).dtype == jnp.bfloat16
    assert (softplus(jnp.asarray(0.5), 2.0) * half).dtype == jnp.bfloat16
    assert (softplus_backward(0.5, 1.0) * half).dtype == jnp.bfloat16
    # Strong where any data operand is.
    assert not _weak(softplus_backward(0.5, jnp.float32(1.0)))
    assert not _weak(softplus(jnp.float32(0.5)))


def test_weak_results_keep_their_gradients():
    g = jax.grad(lambda x: softplus(x, 1.7))(0.5)
    assert g == softplus_backward(jnp.float32(0.5), jnp.float32(1.0), 1.7)


def test_the_backward_ops_do_not_promote():
    with pytest.raises(TypeError, match="does not promote"):
        softplus_backward(jnp.arange(3), jnp.arange(3))
    with pytest.raises(TypeError, match="does not promote"):
        softplus_backward_inplace(jnp.ones(3), jnp.arange(3))


@pytest.mark.slow
@pytest.mark.parametrize(
    "value",
    [1j, -3 + 0.5j, jnp.array([1 + 2j, -3 + 0.5j, 40 - 3j], jnp.complex64)],
    ids=["py", "py2", "c64"],
)
def test_complex_is_jax_nn_softplus(value):
    # jax.nn.softplus takes complex x (jnp.logaddexp(x, 0)); so does ours,
    # with its bits, weak type, derivative, and beta.
    got, want = softplus(value), jax.nn.softplus(value)
    assert got.dtype == want.dtype and got.weak_type == want.weak_type
    np.testing.assert_array_equal(got, want)
    z = jnp.asarray(value)
    np.testing.assert_array_equal(jax.jit(softplus)(z), jax.nn.softplus(z))
    np.testing.assert_allclose(
        softplus(z, 2.0), jnp.logaddexp(2.0 * z, 0) / 2.0, rtol=1e-6
    )
    grad = jax.grad(lambda v: softplus(v, 1.5).real.sum())(z)
    ref = jax.grad(lambda v: (jnp.logaddexp(1.5 * v, 0) / 1.5).real.sum())(z)
    np.testing.assert_allclose(grad, ref, rtol=1e-6)
    with pytest.raises(ValueError, match="complex x .* has one evaluation"):
        softplus(z, accuracy=jax.lax.AccuracyMode.HIGHEST)


def test_a_complex_list_is_computed_as_its_array_is():
    # A list was refused as "complex128", by a message that listed complex
    # among the dtypes softplus accepts; a real list is converted.
    values = [1j, -3 + 0.5j]
    got, want = softplus(values), jax.nn.softplus(jnp.asarray(values))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_complex_infinities_with_a_traced_beta():
    # A traced beta was made complex (zero imaginary part) and multiplied x:
    # 0 * inf made softplus(-inf + 0j, b) NaN + NaNj where jax.nn.softplus
    # gives 0. Each part is scaled by the real beta now.
    z = jnp.array([-jnp.inf + 0j, jnp.inf + 0j, -jnp.inf + 2j, 1 - 2j], jnp.complex64)
    want = jax.nn.softplus(z)
    got = jax.jit(softplus)(z, jnp.float32(1))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(softplus(z[:1], jnp.float32(2.0)), 0)
    # Away from the infinities, the traced and concrete betas agree.
    np.testing.assert_allclose(
        jax.jit(softplus)(z[3:], jnp.float32(2.0)), softplus(z[3:], 2.0), rtol=1e-6
    )


@pytest.mark.slow
@forward_mode
def test_linearize_of_vmap_with_a_per_example_beta():
    x, betas = jnp.asarray([-1.0, 0.5, 2.0]), jnp.asarray([1.7, -0.5])
    f = jax.vmap(softplus, (None, 0))
    tangents = (jnp.asarray([1.0, -2.0, 0.5]), jnp.asarray([0.25, 3.0]))
    _, lin = jax.linearize(f, x, betas)
    np.testing.assert_array_equal(lin(*tangents), jax.jvp(f, (x, betas), tangents)[1])
    # Its transpose is reverse mode: the cotangents of jax.vjp, within a
    # rounding (the beta cotangent sums in another order).
    ct = jnp.arange(6.0).reshape(2, 3)
    got = jax.linear_transpose(lin, *tangents)(ct)
    want = jax.vjp(f, x, betas)[1](ct)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=4e-7)


@forward_mode
def test_jacfwd_inside_a_library_as_distrax_calls_it():
    # distrax's log_det_scalar: jnp.log(jnp.abs(jax.jacfwd(forward)(x))).
    x = jnp.float32(0.3)
    log_det = jnp.log(jnp.abs(jax.jacfwd(softplus)(x)))
    np.testing.assert_allclose(log_det, jnp.log(jax.nn.sigmoid(x)), rtol=1e-6)


def test_lower_takes_shape_dtype_structs():
    spec = jax.ShapeDtypeStruct((1024,), jnp.float32)
    beta = jax.ShapeDtypeStruct((), jnp.float32)
    for args in ((spec, spec, 1.7), (spec, spec, beta)):
        compiled = softplus_backward_inplace.lower(*args).compile()
        src, dd = jnp.linspace(-4, 4, 1024), jnp.ones(1024)
        want = softplus_backward(src, dd, 1.7)
        out = compiled(src, dd, jnp.float32(1.7))
        assert dd.is_deleted()
        np.testing.assert_array_equal(out, want)


def test_lower_checks_specs_as_arrays():
    spec = jax.ShapeDtypeStruct((8,), jnp.float32)
    with pytest.raises(TypeError, match="src and diff_dst must have one dtype"):
        softplus_backward_inplace.lower(spec, jax.ShapeDtypeStruct((8,), jnp.float16))
    with pytest.raises(ValueError, match="must have one shape"):
        softplus_backward_inplace.lower(spec, jax.ShapeDtypeStruct((4,), jnp.float32))


@pytest.mark.slow
def test_jet_gives_the_taylor_series_of_the_plain_formula(x64):
    x, dd, b = jnp.float64(0.3), jnp.float64(0.75), 1.7
    series = ((1.0, 0.5, -0.25),)  # order 3: 2**3 nested JVPs
    # Under jit: one compile instead of every nested JVP eagerly.
    got = jax.jit(
        lambda x: jet.jet(lambda x: softplus_backward(x, dd, b), (x,), series)
    )(x)
    want = jet.jet(lambda x: dd / (1 + jnp.exp(-b * x)), (x,), series)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-15)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13)
    # In every operand at once.
    got = jet.jet(softplus_backward, (x, dd, jnp.float64(b)), ((1.0,), (2.0,), (0.5,)))
    want = jet.jet(
        lambda x, dd, b: dd / (1 + jnp.exp(-b * x)),
        (x, dd, jnp.float64(b)),
        ((1.0,), (2.0,), (0.5,)),
    )
    np.testing.assert_allclose(got[1], want[1], rtol=1e-14)


@forward_mode
@pytest.mark.slow
def test_jet_of_softplus_gives_the_taylor_series_of_the_plain_formula(x64):
    # Its value's primitive takes the nested JVPs of softplus's own rules
    # (a KeyError before: jet has no rule for the kernel's barrier).
    x, b = jnp.float64(0.3), 1.7

    def formula(x, b):
        return jnp.log1p(jnp.exp(b * x)) / b

    series = ((1.0, 0.5, -0.25),)
    got = jax.jit(lambda x: jet.jet(lambda x: softplus(x, b), (x,), series))(x)
    want = jet.jet(lambda x: formula(x, b), (x,), series)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-15)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13)
    # In beta too, and at HIGHEST on float32 (its value correctly rounded).
    both = (x, jnp.float64(b)), ((1.0, 0.5), (0.5, 0.0))
    got, want = jet.jet(softplus, *both), jet.jet(formula, *both)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-14)
    highest = jax.lax.AccuracyMode.HIGHEST
    x32, series32 = jnp.float32(0.3), ((jnp.float32(1.0), jnp.float32(0.5)),)
    got = jet.jet(lambda x: softplus(x, b, accuracy=highest), (x32,), series32)
    want = jet.jet(lambda x: formula(x, jnp.float32(b)), (x32,), series32)
    assert got[0] == softplus(x32, b, accuracy=highest)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


BAD_BINDS = {
    "int32 data": (jnp.ones(3, jnp.int32), jnp.ones(3, jnp.int32), jnp.float32(1)),
    "bool data": (jnp.ones(3, bool), jnp.ones(3, bool), jnp.float32(1)),
    "complex data": (jnp.ones(3, jnp.complex64),) * 2 + (jnp.float32(1),),
    "int32 beta": (jnp.ones(3), jnp.ones(3), jnp.int32(1)),
    "mixed dtypes": (jnp.ones(3), jnp.ones(3, jnp.float16), jnp.float32(1)),
    "mixed shapes": (jnp.ones(3), jnp.ones(4), jnp.float32(1)),
    "beta shape": (jnp.ones(3), jnp.ones(3), jnp.ones(2)),
}


@pytest.mark.parametrize("name", list(BAD_BINDS))
def test_a_direct_bind_of_bad_operands_is_a_type_error(name):
    args = BAD_BINDS[name]
    for run in (softplus_backward_p.bind, jax.jit(softplus_backward_p.bind)):
        with pytest.raises(TypeError, match="softplus_backward_p: .*(dtype|shape)"):
            run(*args)


HIGHEST = {"hints": BetaHints(), "accuracy": "highest"}
DEFAULT = {"hints": BetaHints(), "accuracy": None}
BAD_FORWARD_BINDS = {
    "int32 x": (jnp.ones(3, jnp.int32), jnp.float32(1), DEFAULT),
    "complex x": (jnp.ones(3, jnp.complex64), jnp.float32(1), HIGHEST),
    "float8 x at HIGHEST": (jnp.ones(3, jnp.float8_e4m3fn), jnp.float32(1), HIGHEST),
    "bfloat16 beta": (jnp.ones(3), jnp.bfloat16(1), HIGHEST),
    "beta shape": (jnp.ones(3), jnp.ones(2), DEFAULT),
}


@pytest.mark.parametrize("name", list(BAD_FORWARD_BINDS))
def test_a_direct_bind_of_the_forward_primitive_is_a_type_error(name):
    # The forward op's primitive, as the backward one: JAX's own TypeError
    # from abstract eval, naming what it takes and what it got.
    x, beta, params = BAD_FORWARD_BINDS[name]
    for run in (
        softplus_p.bind,
        jax.jit(softplus_p.bind, static_argnames=tuple(params)),
    ):
        with pytest.raises(TypeError, match="softplus_p takes .* got x "):
            run(x, beta, **params)


@pytest.mark.slow
def test_a_direct_bind_gives_a_strongly_typed_result():
    # docs/primitive.md: the abstract eval returns src's aval, not weakly
    # typed; the public ops alone decide when a result is weak.
    weak, beta = _compat.weakly_typed(jnp.ones(3)), jnp.float32(1.5)
    assert weak.weak_type
    binds = [
        lambda: softplus_backward_p.bind(weak, weak, beta),
        lambda: softplus_p.bind(weak, beta, **HIGHEST),
    ]
    for bind in binds:
        for out in (bind(), jax.jit(bind)()):
            assert out.dtype == jnp.float32 and not _weak(out)


class _Wrapped:
    """A value JAX takes as an array through `__jax_array__`, as flax's
    `nnx.Param` is."""

    def __init__(self, value):
        self.value = value

    def __jax_array__(self):
        return self.value


def _wrappers():
    out = {"__jax_array__": _Wrapped}
    try:
        from flax import nnx
    except ImportError:  # the test extras install flax; a bare venv may not
        return out
    return {**out, "nnx.Param": nnx.Param}


@pytest.mark.parametrize("wrap", list(_wrappers().values()), ids=list(_wrappers()))
@pytest.mark.parametrize("accuracy", [None, SLOW_HIGHEST], ids=str)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=str)
def test_values_with_jax_array_are_taken_as_their_arrays(wrap, accuracy, dtype):
    # Whatever jnp.exp takes through __jax_array__ works as x, src,
    # diff_dst and beta, with the array's own bits, eagerly, under jit and
    # in grad; the in-place op donates the wrapped array itself.
    x = jnp.linspace(-4, 4, 9, dtype=dtype)
    dd = jnp.linspace(1, -1, 9, dtype=dtype)
    beta = jnp.float32(1.7)
    fwd = softplus(x, beta, accuracy=accuracy)
    back = softplus_backward(x, dd, beta, accuracy=accuracy)

    def same(got, want, what):
        assert got.dtype == want.dtype, what
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), what)

    same(softplus(wrap(x), wrap(beta), accuracy=accuracy), fwd, "softplus")
    same(softplus(wrap(x), accuracy=accuracy), softplus(x, accuracy=accuracy), "x")
    got = softplus_backward(wrap(x), wrap(dd), wrap(beta), accuracy=accuracy)
    same(got, back, "softplus_backward")
    same(
        jax.jit(lambda b: softplus(wrap(x), wrap(b), accuracy=accuracy))(beta),
        fwd,
        "jit",
    )
    grad = jax.grad(lambda b: softplus(wrap(x), wrap(b)).astype(jnp.float32).sum())
    same(
        grad(beta),
        jax.grad(lambda b: softplus(x, b).astype(jnp.float32).sum())(beta),
        "grad",
    )
    inner = dd * 1  # a buffer of its own, donated
    out = softplus_backward_inplace(wrap(x), wrap(inner), wrap(beta), accuracy=accuracy)
    same(out, back, "softplus_backward_inplace")
    assert inner.is_deleted()
