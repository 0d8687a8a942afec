"""In place: softplus_backward_inplace donates diff_dst under jax.jit."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import DTYPES, SLOW_HIGHEST, dtype_id

from jax_softplus import (
    _dispatch,
    _validate,
    softplus,
    softplus_backward,
    softplus_backward_inplace,
)

N = 1 << 16


def _inputs(dtype):
    rng = np.random.default_rng(0)
    src = jnp.asarray(rng.uniform(-10, 10, N).astype(np.float32), dtype)
    dd = jnp.asarray(rng.standard_normal(N).astype(np.float32), dtype)
    return src, dd


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("keyword", (False, True))
def test_diff_dst_is_donated_and_reused(dtype, keyword):
    src, dd = _inputs(dtype)
    host = np.asarray(dd)
    want = softplus_backward(src, host, 1.7)
    # A fresh device buffer that no computation has read: a buffer still in
    # use by an earlier call, or sharing memory with a NumPy array (CPU
    # device_put can be zero-copy), is copied rather than reused.
    dd = jnp.copy(jnp.asarray(host)).block_until_ready()
    pointer = dd.unsafe_buffer_pointer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "donated buffers were not usable"
        if keyword:
            out = softplus_backward_inplace(src, diff_dst=dd, beta=1.7)
        else:
            out = softplus_backward_inplace(src, dd, 1.7)
    assert dd.is_deleted()
    assert not src.is_deleted()
    assert out.unsafe_buffer_pointer() == pointer
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_one_array_as_src_and_diff_dst(dtype):
    # Donating a buffer that the same call also reads is refused by the
    # runtime (JaxRuntimeError at execution); the wrapper passes it once.
    src, _ = _inputs(dtype)
    want = softplus_backward(src, src, 1.7)
    x = jnp.copy(src).block_until_ready()
    pointer = x.unsafe_buffer_pointer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = softplus_backward_inplace(x, x, 1.7)
    assert x.is_deleted()
    assert out.unsafe_buffer_pointer() == pointer
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))


@pytest.mark.parametrize("same_src", [False, True], ids=["src", "src is diff_dst"])
def test_a_0d_diff_dst_as_beta_too_is_donated(same_src):
    # beta is diff_dst: the call must not pass the donated array as beta as
    # well (the runtime refuses to donate a buffer the call also reads).
    g = jnp.copy(jnp.float32(2.0)).block_until_ready()
    src = g if same_src else jnp.float32(0.5)
    want = softplus_backward(np.float32(2.0 if same_src else 0.5), np.float32(2.0), 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "could not donate" is a warning
        out = softplus_backward_inplace(src, g, g)
    assert g.is_deleted()
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_memory_analysis_shows_alias_and_no_temporary(dtype):
    src, dd = _inputs(dtype)
    compiled = softplus_backward_inplace.lower(src, dd, 1.7).compile()
    stats = compiled.memory_analysis()
    assert stats.alias_size_in_bytes == dd.nbytes
    assert stats.temp_size_in_bytes < dd.nbytes
    hlo = compiled.as_text()
    assert "input_output_alias" in hlo


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("beta", [1.7, np.float32(-0.5), 2], ids=repr)
@pytest.mark.parametrize("accuracy", [None, SLOW_HIGHEST], ids=str)
def test_eager_calls_check_two_arrays_alike_once(dtype, beta, accuracy, monkeypatch):
    # Two live JAX arrays of one dtype, shape and layout and a number: the
    # operands' checks ran on every call (8.6 us per call at 1K float32
    # elements against 5.1 for a donated jit of the naive formula, Zen 5);
    # now the jit's trace checks them, with the same bits and the same
    # buffer written over on every call.
    src, dd = _inputs(dtype)
    want = softplus_backward(src, dd, beta, accuracy=accuracy)
    checks = []
    for name in ("check_operands", "check_forward_operand"):
        check = getattr(_validate, name)
        monkeypatch.setattr(
            _validate,
            name,
            lambda *a, check=check, **k: checks.append(a) or check(*a, **k),
        )
    for turn in range(3):
        g = jnp.copy(dd).block_until_ready()
        pointer = g.unsafe_buffer_pointer()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = softplus_backward_inplace(src, g, beta, accuracy=accuracy)
        assert g.is_deleted(), turn
        np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
        assert out.unsafe_buffer_pointer() == pointer, turn
        assert not (turn and checks), f"checked again on call {turn + 1}"
        del checks[:]


def test_new_beta_does_not_recompile():
    src, _ = _inputs(jnp.float32)
    before = _dispatch.cache_sizes()["inplace"]
    for beta in (0.5, 1.0, -2.0, 1.7, 0.0, 0.3, 3.1):
        softplus_backward_inplace(src, jnp.ones(N), beta).block_until_ready()
    # One compilation for powers of two (and 0), one for the other betas.
    assert _dispatch.cache_sizes()["inplace"] - before <= 2
    for beta in (3e38, -1e-30, 2.0**70, 7e35):
        softplus_backward_inplace(src, jnp.ones(N), beta).block_until_ready()
    # Extreme betas (beyond 2**+-64) add the other two combinations of the
    # two static hints, power of two or not: four at most, whatever beta.
    assert _dispatch.cache_sizes()["inplace"] - before <= 4
    jitted = jax.jit(lambda s, d, b: softplus_backward(s, d, b))
    for beta in (0.5, 1.0, -2.0):
        jitted(src, src, beta)
    assert jitted._cache_size() == 1


def test_donated_array_cannot_be_reused():
    src, dd = _inputs(jnp.float32)
    softplus_backward_inplace(src, dd)
    with pytest.raises(ValueError, match="diff_dst is a deleted array"):
        softplus_backward(src, dd)
    with pytest.raises(ValueError, match="deleted"):
        softplus_backward_inplace(src, dd)
    # The library is still usable afterwards.
    out = softplus_backward(src, jnp.ones(N))
    assert out.shape == (N,)


@pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="np.asarray copies off the CPU"
)
def test_a_diff_dst_with_a_numpy_view_is_not_donated_and_says_so():
    # The runtime keeps a buffer that a NumPy view shares (np.asarray on the
    # CPU), silently; the library warns, and the result is still right.
    src, dd = _inputs(jnp.float32)
    want = softplus_backward(src, dd, 1.7)
    view = np.asarray(dd)
    before = view.copy()
    with pytest.warns(UserWarning, match="could not donate diff_dst"):
        out = softplus_backward_inplace(src, dd, 1.7)
    np.testing.assert_array_equal(out, want)
    assert not dd.is_deleted()
    np.testing.assert_array_equal(view, before)
    del view  # with the view gone, the same array is donated
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        softplus_backward_inplace(src, dd, 1.7)
    assert dd.is_deleted()


@pytest.mark.parametrize("size", [None, 1000], ids=["0-d", "1000"])
def test_a_weakly_typed_diff_dst_is_donated(size):
    # It was converted to a strongly typed copy, and the copy donated: the
    # caller's array stayed alive, with no warning.
    from jax_softplus import _compat

    shape = () if size is None else (size,)
    src = jnp.linspace(-3.0, 3.0, size or 1).reshape(shape)
    dd = _compat.weakly_typed(jnp.full(shape, 2.0))
    assert dd.weak_type
    want = softplus_backward(src, jnp.full(shape, 2.0), 1.7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = softplus_backward_inplace(src, dd, 1.7)
    assert dd.is_deleted() and not out.weak_type
    np.testing.assert_array_equal(out, want)
    # One weak array as src, diff_dst and beta (beta read before donation).
    a = _compat.weakly_typed(jnp.asarray(2.0))
    out = softplus_backward_inplace(a, a, a)
    assert a.is_deleted()
    np.testing.assert_array_equal(out, softplus_backward(2.0, 2.0, 2.0))


def test_numpy_diff_dst_is_accepted():
    # Copied to a buffer of its own, which is donated: on the CPU jnp.asarray
    # may share an aligned NumPy array's memory, and the runtime declined to
    # donate that (a UserWarning, depending on the array's alignment).
    src = np.zeros(4096, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dd in (np.ones(4096, np.float32), np.ones(8192, np.float32)[:4096]):
            out = softplus_backward_inplace(src, dd)
            np.testing.assert_array_equal(out, np.full(4096, 0.5, np.float32))
            np.testing.assert_array_equal(dd, 1.0)  # the user's array is kept


def test_inside_an_outer_transformation_it_is_the_plain_op():
    # No buffer can be donated inside jit or vmap; the call still works.
    src, dd = _inputs(jnp.float32)
    want = softplus_backward(src, dd, 1.7)
    got = jax.jit(lambda s, d: softplus_backward_inplace(s, d, 1.7))(src, dd)
    np.testing.assert_array_equal(got, want)
    assert not dd.is_deleted()
    mapped = jax.vmap(softplus_backward_inplace, (0, 0, None))(
        src.reshape(16, -1), dd.reshape(16, -1), 1.7
    )
    np.testing.assert_array_equal(mapped.reshape(-1), want)


def test_own_jits_compile_wide_vectors_with_the_same_bits():
    # The library's top-level jits ask XLA:CPU for 512-bit vectors; a user's
    # plain jit does not. Both give the same bits.
    src, dd = _inputs(jnp.float32)
    plain = jax.jit(lambda s, d, b: softplus_backward(s, d, b))(src, dd, 1.7)
    ours = softplus_backward_inplace(src, jnp.array(dd, copy=True), 1.7)
    np.testing.assert_array_equal(np.asarray(plain).view(np.uint32),
                                  np.asarray(ours).view(np.uint32))  # fmt: skip


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU options")
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_tuned_cpu_options_drop_the_fwd_bwd_copy_with_the_same_bits(dtype):
    # A donated x read by the backward and overwritten by the forward output:
    # XLA's default copy insertion copies x into a temporary; with region
    # analysis it orders the backward first instead (docs/benchmarks.md).
    from jax_softplus import TUNED_CPU_OPTIONS

    def fwd_bwd(x, g, b):
        y, vjp = jax.vjp(lambda x: softplus(x, b), x)
        return y, vjp(g)[0]

    x, g = _inputs(dtype)
    plain = jax.jit(fwd_bwd, donate_argnums=(0, 1))
    tuned = jax.jit(fwd_bwd, donate_argnums=(0, 1), compiler_options=TUNED_CPU_OPTIONS)
    copies = {}
    for name, f in (("plain", plain), ("tuned", tuned)):
        compiled = f.lower(x, g, 1.7).compile()
        entry = compiled.as_text().split("ENTRY", 1)[1]
        copies[name] = (
            entry.count(" copy("),
            compiled.memory_analysis().temp_size_in_bytes,
        )
    assert copies["tuned"][0] == 0 and copies["tuned"][1] < x.nbytes, copies
    assert copies["plain"][0] >= 1, copies  # what the option is for
    want = plain(jnp.array(x, copy=True), jnp.array(g, copy=True), 1.7)
    x_in = jnp.array(x, copy=True)
    got = tuned(x_in, jnp.array(g, copy=True), 1.7)
    assert x_in.is_deleted()
    bits = np.uint32 if dtype == jnp.float32 else np.uint16
    for w, o in zip(want, got, strict=True):
        np.testing.assert_array_equal(
            np.asarray(o).view(bits), np.asarray(w).view(bits)
        )


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("accuracy", [None, SLOW_HIGHEST], ids=str)
@pytest.mark.parametrize(
    "beta", [1.5, np.float32(1.5), jnp.float32(1.5)], ids=["python", "numpy", "jax"]
)
def test_two_array_objects_on_one_buffer_are_one_operand(dtype, accuracy, beta):
    # jax.device_put(a, a.sharding) is a new object on a's buffer: the call
    # compares buffers, not objects, and computes as for one array passed
    # twice (the runtime refuses to donate a buffer the call also reads).
    src, _ = _inputs(dtype)
    want = softplus_backward(src, src, beta, accuracy=accuracy)
    alias = jax.device_put(src, src.sharding)
    assert alias is not src and alias.unsafe_buffer_pointer() == (
        src.unsafe_buffer_pointer()
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = softplus_backward_inplace(src, alias, beta, accuracy=accuracy)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
    assert alias.is_deleted() and src.is_deleted()
