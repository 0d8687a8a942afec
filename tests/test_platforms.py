"""Every platform's lowering: what each is given (`jax.export`), and the
other platforms' evaluations run on this CPU (`jax_softplus.testing`),
held to the CPU's standard at the points where they once failed."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FORWARD_MODE, seed_of
from jax import export

from jax_softplus import softplus, softplus_backward, softplus_backward_inplace
from jax_softplus import testing as jst
from tools import _references as references
from tools import _routes as routes

F32 = jnp.float32
SPEC = jax.ShapeDtypeStruct((8,), F32)
BETA = jax.ShapeDtypeStruct((), F32)


def _sum(f):
    return lambda *a: f(*a).sum()


# Each public route, as a function of (x, diff_dst, beta); whether its
# program holds the derivative families (evaluated in float64 where the
# platform has it).
ROUTES = {
    "softplus": (lambda x, d, b: softplus(x, b), False),
    "softplus_backward": (lambda x, d, b: softplus_backward(x, d, b), False),
    "softplus_backward_inplace": (
        lambda x, d, b: softplus_backward_inplace(x, d, b),
        False,
    ),
    "grad in x": (lambda x, d, b: jax.grad(_sum(softplus))(x, b), False),
    "grad in beta": (lambda x, d, b: jax.grad(_sum(softplus), 1)(x, b), True),
    "hessian in x": (
        lambda x, d, b: jax.hessian(lambda v: softplus(v, b).sum())(x),
        True,
    ),
    "hessian in beta": (
        lambda x, d, b: jax.hessian(lambda c: softplus(x, c).sum())(b),
        True,
    ),
    "grad of the backward op in beta": (
        lambda x, d, b: jax.grad(_sum(softplus_backward), 2)(x, d, b),
        True,
    ),
    "forward mode of the backward op": (
        lambda x, d, b: jax.jvp(
            lambda s: softplus_backward(s, d, b), (x,), (jnp.ones_like(x),)
        )[1],
        True,
    ),
}
if FORWARD_MODE:  # JAX 0.8's softplus has no forward mode
    ROUTES["forward mode in beta"] = (
        lambda x, d, b: jax.jvp(lambda c: softplus(x, c), (b,), (F32(1),))[1],
        True,
    )
_F64_OP = re.compile(r"tensor<[0-9x]*f64>")


def _without_locations(module):
    """A module's text without its source locations (they name the
    caller's line, and their numbering follows what was traced before)."""
    return re.sub(r"#loc\d+", "#loc", re.sub(r"^#loc.*\n", "", module, flags=re.M))


@pytest.mark.parametrize("route", ROUTES)
def test_each_route_exports_for_every_platform_with_its_evaluation(route):
    fun, families = ROUTES[route]
    for platform in ("cuda", "rocm", "tpu"):
        module = export.export(jax.jit(fun), platforms=(platform,))(
            SPEC, SPEC, BETA
        ).mlir_module()
        assert "custom_call" not in module, (route, platform)
        wide = bool(_F64_OP.search(module))
        # float32 data: the families in float64 on GPUs, never on TPUs
        # (no float64 there); the value kernels in float32 everywhere.
        assert wide == (families and platform != "tpu"), (route, platform)


def test_float64_data_exports_for_tpus_too():
    # TPUs have no float64 hardware, but XLA emulates it; the library
    # takes float64 data there as elsewhere.
    with jax.enable_x64(True):
        spec = jax.ShapeDtypeStruct((8,), jnp.float64)
        beta = jax.ShapeDtypeStruct((), jnp.float64)
        fun = jax.grad(_sum(softplus), 1)
        module = export.export(jax.jit(fun), platforms=("tpu",))(spec, beta)
        assert "custom_call" not in module.mlir_module()


def test_lowered_as_takes_the_platforms_it_names():
    with pytest.raises(ValueError, match="'cuda', 'rocm', 'tpu'"):
        with jst.lowered_as("metal"):
            pass
    assert jst.PLATFORMS == ("cpu", "cuda", "rocm", "tpu")


def test_lowered_as_changes_what_the_cpu_lowers_and_restores_it():
    fun = jax.jit(jax.grad(lambda b: softplus(jnp.float32(3.0), b)))

    def text():
        return fun.lower(F32(1.5)).as_text()

    here = text()
    assert "f64" in here
    with jst.lowered_as("tpu"):
        assert "f64" not in text()
        with jst.lowered_as("cuda"):  # the innermost wins
            assert "f64" in text()
        assert "f64" not in text()
    assert text() == here


@pytest.mark.slow
def test_lowered_as_leaves_other_platforms_lowerings_unchanged():
    # Each context changes what the CPU lowers, never what an export for
    # another platform gets: the derivative families and HIGHEST keep
    # float64 for CUDA and ROCm, and a TPU gets none.
    highest = jax.lax.AccuracyMode.HIGHEST

    def fun(x, d, b):
        return jax.grad(_sum(softplus), 1)(x, b) + softplus_backward(
            x, d, b, accuracy=highest
        )

    def modules():
        out = {
            p: export.export(jax.jit(fun), platforms=(p,))(SPEC, SPEC, BETA)
            for p in ("cuda", "rocm")
        }
        route = ROUTES["grad in beta"][0]
        out["tpu"] = export.export(jax.jit(route), platforms=("tpu",))(SPEC, SPEC, BETA)
        return {p: _without_locations(m.mlir_module()) for p, m in out.items()}

    outside = modules()
    for platform, module in outside.items():
        assert bool(_F64_OP.search(module)) == (platform != "tpu"), platform
    for context in jst.PLATFORMS:
        with jst.lowered_as(context):
            assert modules() == outside, context


# The points where the TPU evaluation (float32 compute in float32) and the
# float64 one were off: (platform, dtype, function, (p, q, r), src, beta,
# diff_dst, the error in ulps they had).
ONCE_WRONG = [
    ("tpu", np.float32, "backward", (0, 2, 0), 0.0042315614, 5.5, -5.075175e-16, 5.25),
    ("tpu", np.float32, "backward", (2, 0, 0), -0.19143808, -7.3, -2.5576245e13, 5.06),
    ("tpu", np.float32, "softplus", (0, 1, 0), -1.764529e27, 1e-25, 1.0, 2**24),
    (
        "tpu",
        np.float32,
        "backward",
        (1, 1, 0),
        1.3382985e-35,
        1e35,
        2.2289646e-17,
        2290,
    ),
    ("tpu", np.float32, "softplus", (0, 2, 0), 1.1608346e23, -1.4953792e-21, 1, 192177),
    ("tpu", np.float32, "backward", (0, 2, 0), -3.225e31, 8.0646e-30, -4.79e33, 2**24),
    (
        "tpu",
        np.float32,
        "backward",
        (2, 0, 0),
        1.20979e-28,
        2.2394e30,
        3.0758e36,
        2**24,
    ),
    ("cpu", np.float64, "softplus", (0, 1, 0), -1.4175e203, 1e-200, 1.0, 5.2e15),
    (
        "cpu",
        np.float64,
        "softplus",
        (0, 2, 0),
        -1.4168568772914663e153,
        1e-150,
        1,
        1e13,
    ),
]


@pytest.mark.parametrize(
    "platform, dtype, fun, pqr, src, beta, dd, was",
    ONCE_WRONG,
    ids=[
        f"{p}-{np.dtype(d).name}-{f}-d{''.join(map(str, q))}-{i}"
        for i, (p, d, f, q, *_) in enumerate(ONCE_WRONG)
    ],  # fmt: skip
)
def test_the_points_once_off_are_within_half_an_ulp_or_so(
    x64, platform, dtype, fun, pqr, src, beta, dd, was
):
    x, b, d = dtype(src), dtype(beta), dtype(dd)
    with jst.lowered_as(platform):
        got = jax.jit(routes.derivative(fun, pqr, "grad"))(x, b, d)
    exact, scale = references.mp_derivative(fun, pqr, x, b, d)
    err = references.derivative_error(
        np.array([float(got)]),
        np.array([references._pair(exact)]),
        np.array([float(scale)]),
        dtype,
    )
    assert err[0] <= 0.75, (float(got), float(exact), was)


def test_gpus_can_take_the_float32_evaluation_where_float64_is_slow(monkeypatch):
    fun, _ = ROUTES["grad in beta"]

    def module():
        exported = export.export(jax.jit(fun), platforms=("cuda",))
        return exported(SPEC, SPEC, BETA).mlir_module()

    assert _F64_OP.search(module())
    monkeypatch.setenv("JAX_SOFTPLUS_GPU_FLOAT32_DERIVATIVES", "1")
    jax.clear_caches()
    try:
        assert not _F64_OP.search(module())
    finally:
        monkeypatch.delenv("JAX_SOFTPLUS_GPU_FLOAT32_DERIVATIVES")
        jax.clear_caches()


@pytest.mark.exhaustive
def test_the_derivative_search_holds_each_platforms_level():
    # maintainers/derivative_search.py at a few random betas: the TPU
    # evaluation within the level tests/test_higher_order.py holds it to.
    import derivative_search

    rng = np.random.default_rng(seed_of("derivative search"))
    found = derivative_search.search("tpu", 2, 512, rng, None)
    assert len(found) == len(derivative_search.QUANTITIES) + len(
        derivative_search.ROUTES["hessian"]
    )
    for (route, name), (err, *_) in found.items():
        kernel = name in ("softplus d100", "backward d001")
        assert err <= (2.0 if kernel else 1.5), (route, name, err)


@pytest.mark.slow
def test_a_call_made_before_lowered_as_runs_the_emulated_program_inside_it():
    # One jit runs every in-place call, and lowered_as clears JAX's caches:
    # a call inside it runs the emulated platform's program, a call after it
    # the CPU's again. At HIGHEST the CPU evaluates in float64, the TPU in
    # float32 words; both write over diff_dst (in two passes).
    highest = jax.lax.AccuracyMode.HIGHEST
    src = jnp.linspace(-3.0, 3.0, 64, dtype=jnp.float32)

    def program():
        dd = jnp.ones(64, jnp.float32) * 1  # a buffer of its own
        pointer = dd.unsafe_buffer_pointer()
        out = softplus_backward_inplace(src, dd, 1.5, accuracy=highest)
        assert dd.is_deleted()
        assert out.unsafe_buffer_pointer() == pointer
        spec = jax.ShapeDtypeStruct((64,), jnp.float32)
        lowered = softplus_backward_inplace.lower(src, spec, 1.5, accuracy=highest)
        return "f64" in lowered.as_text()

    assert program()
    with jst.lowered_as("tpu"):
        assert not program()
    assert program()
