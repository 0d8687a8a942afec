"""Bad input: a clear TypeError or ValueError at trace time, naming the
argument, what it got and what is accepted; the same under jit, vmap, grad."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_softplus import (
    _validate,
    softplus,
    softplus_backward,
    softplus_backward_inplace,
)

X = jnp.ones(4)

# Each public entry point, run eagerly and through a transformation.
BACKWARD_CALLS = {
    "eager": softplus_backward,
    "jit": jax.jit(softplus_backward),
    "inplace": softplus_backward_inplace,
}


@pytest.mark.parametrize("call", BACKWARD_CALLS.values(), ids=BACKWARD_CALLS.keys())
@pytest.mark.parametrize(
    "src, dd, exc, pattern",
    [
        (jnp.ones(4, jnp.int32), X, TypeError, r"src has dtype int32; .*float32"),
        (X, jnp.ones(4, bool), TypeError, r"diff_dst has dtype bool"),
        (X, jnp.ones(4, jnp.complex64), TypeError, r"diff_dst has dtype complex64"),
        (X.astype(jnp.float16), X, TypeError, r"src float16 and diff_dst float32"),
        (X, jnp.ones(3), ValueError, r"src \(4,\) and diff_dst \(3,\)"),
        (X, jnp.ones((4, 1)), ValueError, r"no broadcasting"),
    ],
)
def test_operand_errors(call, src, dd, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call(src, dd, 1.0)


@pytest.mark.parametrize(
    "src, exc, pattern",
    [
        ("abc", TypeError, r"src must be an array .* got str"),
        (None, TypeError, r"src must be an array .* got NoneType"),
        ([[1.0, 2.0], [3.0]], ValueError, r"src is a nested sequence"),
        ([1, 2, 3, 4], TypeError, r"src has dtype int64"),
    ],
)
def test_non_array_operands(src, exc, pattern):
    with pytest.raises(exc, match=pattern):
        softplus_backward(src, X)


@pytest.mark.parametrize(
    "beta, exc, pattern",
    [
        (jnp.ones(2), ValueError, r"beta must be a scalar \(0-d\), got shape \(2,\)"),
        ([1.0], ValueError, r"got shape \(1,\)"),
        (1 + 2j, TypeError, r"beta must be a real scalar.* got complex"),
        (jnp.complex64(1), TypeError, r"dtype complex64"),
        ("2", TypeError, r"beta must be a real scalar .* got str"),
        (None, TypeError, r"got NoneType"),
        (True, TypeError, r"got bool"),
        (float("nan"), ValueError, r"beta must be finite .* got nan"),
        (float("inf"), ValueError, r"got inf"),
        (-float("inf"), ValueError, r"got -inf"),
        (1e40, ValueError, r"representable in float32 .* got 1e\+40"),
    ],
)
@pytest.mark.parametrize("fn", (softplus_backward, softplus_backward_inplace))
def test_beta_errors(fn, beta, exc, pattern):
    with pytest.raises(exc, match=pattern):
        fn(X, X, beta)


def test_softplus_beta_zero_is_an_error_but_backward_accepts_it():
    with pytest.raises(ValueError, match="beta = 0.0 diverges"):
        softplus(X, 0.0)
    np.testing.assert_array_equal(softplus_backward(X, X, 0.0), 0.5 * X)


@pytest.mark.parametrize("beta", (10**400, -(10**400)))
def test_python_int_beta_beyond_float64_is_a_value_error(beta):
    # float(10**400) raises OverflowError; the contract is ValueError.
    for op in (lambda: softplus_backward(X, X, beta), lambda: softplus(X, beta)):
        with pytest.raises(ValueError, match="got an integer of 401 digits"):
            op()


def test_subnormal_beta_is_flushed_to_zero():
    # As XLA:CPU would; done at validation so every backend agrees.
    np.testing.assert_array_equal(softplus_backward(X, X, 1e-42), 0.5 * X)
    with pytest.raises(ValueError, match="subnormal"):
        softplus(X, -1e-42)


def test_softplus_errors():
    with pytest.raises(TypeError, match="x has dtype <U1; softplus accepts"):
        softplus(np.array(["a"]))
    with pytest.raises(ValueError, match="beta must be finite"):
        softplus(X, float("nan"))


def test_errors_are_the_same_under_vmap_and_grad():
    with pytest.raises(TypeError, match="src float16 and diff_dst float32"):
        jax.vmap(softplus_backward)(X.astype(jnp.float16), X)
    with pytest.raises(ValueError, match="beta must be finite"):
        jax.grad(lambda x: softplus_backward(x, x, float("inf")).sum())(X)
    with pytest.raises(ValueError, match="beta must be finite"):
        jax.vmap(lambda x: softplus(x, float("nan")))(X)


def test_float64_without_x64_is_canonicalised_like_jax():
    out = softplus_backward(np.ones(3), np.ones(3))
    assert out.dtype == jnp.float32


def test_library_state_survives_errors():
    for bad in (jnp.ones(4, jnp.int32), "x", None):
        with pytest.raises((TypeError, ValueError)):
            softplus_backward(bad, X)
    np.testing.assert_allclose(softplus_backward(X, X), 1 / (1 + np.exp(-1.0)))


def test_remembered_betas_are_checked_as_before():
    # A Python float is checked once per value and a device array once per
    # array; what is checked does not change.
    for _ in range(2):  # errors are raised every time, never remembered
        with pytest.raises(ValueError, match="got nan"):
            softplus_backward(X, X, float("nan"))
        with pytest.raises(ValueError, match="got inf"):
            softplus_backward(X, X, jnp.float32(np.inf))
    # New arrays may reuse a freed array's id: each is read anew.
    for value in (0.5, 2.0, -1.0, 3.0, 0.5, 1e-42):
        beta = jnp.float32(value)
        got = softplus_backward(X, X, beta)
        np.testing.assert_array_equal(got, softplus_backward(X, X, value))
        del beta


NUMPY_BETAS = [
    np.float32(1.7),
    np.float64(-0.3),
    np.float16(0.5),
    np.int32(2),
    np.uint8(3),
]


@pytest.mark.slow
@pytest.mark.parametrize("beta", NUMPY_BETAS, ids=repr)
def test_a_numpy_beta_is_checked_once_and_gives_a_python_numbers_results(
    beta, monkeypatch
):
    # A NumPy scalar beta went through every check on every call (2.3x the
    # time of a Python float's call at 1K elements); now it is checked once
    # per value, as a Python number is, and gives that number's results.
    highest = jax.lax.AccuracyMode.HIGHEST
    xs = {
        "jax float32": jnp.linspace(-3, 3, 7, dtype=jnp.float32),
        "jax bfloat16": jnp.linspace(-3, 3, 7, dtype=jnp.bfloat16),
        "NumPy float64": np.linspace(-3, 3, 7),
        "NumPy int": np.arange(5),
        "Python float": 0.3,
    }
    calls = {
        "softplus": lambda x, b, a: softplus(x, b, accuracy=a),
        "softplus_backward": lambda x, b, a: softplus_backward(x, x, b, accuracy=a),
    }
    checks = []
    check = _validate._concrete_beta
    monkeypatch.setattr(
        _validate, "_concrete_beta", lambda *a, **k: checks.append(a) or check(*a, **k)
    )
    for (name, call), (kind, x), accuracy in itertools.product(
        calls.items(), xs.items(), [None, highest]
    ):
        if name == "softplus_backward" and kind == "NumPy int":
            continue  # integer operands are an error there
        where = f"{name}, {kind} x, {accuracy}"
        want = call(x, beta.item(), accuracy)
        del checks[:]
        for _ in range(2):
            got = call(x, beta, accuracy)
        assert not checks, f"{where}: beta checked again ({len(checks)} times)"
        assert (got.dtype, got.weak_type) == (want.dtype, want.weak_type), where
        np.testing.assert_array_equal(got, want, err_msg=where)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=str)
def test_a_jax_beta_skips_the_operands_checks_after_the_first_call(dtype, monkeypatch):
    # A concrete JAX scalar beta sent every call down the checked path
    # (the operands checked again: 9.3 against 4.8 us with a Python float
    # at 1K float32 elements, Zen 5); the array is still read once.
    x = jnp.linspace(-3, 3, 7, dtype=dtype)
    beta = jnp.float32(-1.3)
    calls = {
        "softplus": lambda b: softplus(x, b),
        "softplus_backward": lambda b: softplus_backward(x, x, b),
        "softplus_backward_inplace": lambda b: softplus_backward_inplace(
            x, jnp.copy(x), b
        ),
    }
    checks = []
    for name in ("check_operands", "check_forward_operand"):
        check = getattr(_validate, name)
        monkeypatch.setattr(
            _validate,
            name,
            lambda *a, check=check, **k: checks.append(a) or check(*a, **k),
        )
    for name, call in calls.items():
        want = call(float(beta))
        call(beta)
        del checks[:]
        got = call(beta)
        assert not checks, f"{name}: operands checked again"
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize("op", ["softplus", "softplus_backward"])
def test_float64_host_data_without_x64_is_float32_data(op):
    # Without x64, NumPy float64 operands and Python floats are float32 data:
    # beta is checked against float32's range and HIGHEST applies.
    x = np.linspace(-3.0, 3.0, 9)
    assert x.dtype == np.float64 and not jax.config.jax_enable_x64
    call = {
        "softplus": lambda b, **k: softplus(x, b, **k),
        "softplus_backward": lambda b, **k: softplus_backward(x, x, b, **k),
    }[op]
    with pytest.raises(ValueError, match="representable in float32"):
        call(1e39)
    highest = jax.lax.AccuracyMode.HIGHEST
    x32 = x.astype(np.float32)
    want = (
        softplus(x32, 1.7, accuracy=highest)
        if op == "softplus"
        else softplus_backward(x32, x32, 1.7, accuracy=highest)
    )
    got = call(1.7, accuracy=highest)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_bad_numpy_betas_are_refused_on_every_call():
    for _ in range(2):
        with pytest.raises(ValueError, match="got nan"):
            softplus_backward(X, X, np.float32("nan"))
        with pytest.raises(ValueError, match="got inf"):
            softplus(X, np.float64("inf"))
        with pytest.raises(ValueError, match="beyond the range|representable"):
            softplus(X, np.float64(1e39))
        with pytest.raises(ValueError, match="beta = 0.0 diverges"):
            softplus(X, np.float32(0))
        with pytest.raises(TypeError, match="beta must be a real scalar"):
            softplus(X, np.bool_(True))


def test_deleted_beta_is_refused():
    beta = jnp.float32(1.5)
    want = softplus_backward(X, X, 1.5)
    np.testing.assert_array_equal(softplus_backward(X, X, beta), want)
    beta.delete()  # after it was checked and remembered
    calls = {
        "softplus_backward": lambda: softplus_backward(X, X, beta),
        "softplus_backward_inplace": lambda: softplus_backward_inplace(X, X + 1, beta),
        "softplus": lambda: softplus(X, beta),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="beta is a deleted array"):
            call()
            pytest.fail(f"{name} accepted a deleted beta")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16], ids=str)
def test_lists_of_jax_scalars_are_arrays_of_their_dtype(dtype):
    # A list of bfloat16 arrays raised "TypeError: expected number, got
    # ArrayImpl" (NumPy cannot hold them), naming no argument.
    xs = [jnp.asarray(1.0, dtype), jnp.asarray(2.0, dtype)]
    got = softplus(xs)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, softplus(jnp.asarray([1.0, 2.0], dtype)))
    assert softplus_backward(xs, xs).dtype == dtype


def test_a_list_that_is_no_array_names_the_argument():
    with pytest.raises(TypeError, match="^x "):
        softplus([jnp.asarray(1.0, jnp.bfloat16), "a"])


def test_the_backward_op_keeps_onednns_dtypes_and_says_softplus_takes_float8():
    x = jnp.ones(3, jnp.float8_e4m3fn)
    with pytest.raises(TypeError, match="float8 and float4 data: softplus takes"):
        softplus_backward(x, x)


def test_an_array_your_own_jit_donated_is_named_with_both_causes():
    # Deleted by a user's donating jit, not by the library: the message
    # does not blame softplus_backward_inplace alone.
    a = jnp.linspace(-1.0, 1.0, 8)
    jax.jit(lambda v: v * 2, donate_argnums=0)(a)
    assert a.is_deleted()
    with pytest.raises(ValueError, match="x is a deleted array") as err:
        softplus(a)
    assert "donate_argnums" in str(err.value)


@pytest.mark.parametrize("kwargs", [{}, {"beta": 2.0}], ids=["default", "beta"])
def test_a_deleted_complex_x_is_named_too(kwargs):
    # Complex x takes jax.nn.softplus's formula; it reached JAX's
    # RuntimeError ("Array has been deleted") before any check of ours.
    z = jnp.array([1 + 2j, -3 + 0.5j], jnp.complex64)
    z.delete()
    with pytest.raises(ValueError, match="x is a deleted array"):
        softplus(z, **kwargs)


def test_a_device_beta_is_checked_for_the_op_that_asks():
    # A subnormal beta: softplus_backward takes it as 0, softplus refuses it
    # for what it is. One array checked by one op is not taken as checked by
    # the other (which would refuse it as 0.0, not as the subnormal given).
    x = jnp.linspace(-1.0, 1.0, 4)
    for first, second in (("backward", "forward"), ("forward", "backward")):
        beta = jnp.asarray(np.float32(1e-40))  # a new array each time
        calls = {
            "backward": lambda b=beta: softplus_backward(x, x, b),
            "forward": lambda b=beta: softplus(x, b),
        }
        for name in (first, second):
            if name == "forward":
                with pytest.raises(ValueError, match="below float32's smallest"):
                    calls[name]()
            else:
                np.testing.assert_array_equal(calls[name](), 0.5 * x)


def test_eager_calls_follow_an_x64_switch_between_them():
    # A cached eager path is keyed by the x64 state: the same call before,
    # inside and after jax.enable_x64 gives the checked path's dtype and bits.
    x = jnp.linspace(-3.0, 3.0, 8)
    for beta in (1.7, np.float64(1.7), np.float32(1.7)):
        outs = []
        for x64 in (False, True, False, True):
            with jax.enable_x64(x64):
                got = softplus(x, beta), softplus_backward(x, x, beta)
                host = softplus(np.asarray(x), beta)
                want = (
                    jax.jit(softplus)(x, beta),
                    jax.jit(softplus_backward)(x, x, beta),
                    jax.jit(softplus)(np.asarray(x), beta),
                )
                for g, w in zip((*got, host), want, strict=True):
                    assert g.dtype == w.dtype, (beta, x64)
                    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
                outs.append([np.asarray(g) for g in got])
        for a, b in zip(outs[0], outs[2], strict=True):
            np.testing.assert_array_equal(a, b)
