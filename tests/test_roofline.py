"""The roofline tool reads XLA's object code right (tiny sizes: this checks
the tool and the shape of the compiled loop, not speed)."""

import functools
import math
import platform
import shutil

import jax
import jax.numpy as jnp
import pytest
import roofline

from jax_softplus import softplus_backward_inplace
from tools._common import naive_backward

x86 = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64")
    or jax.default_backend() != "cpu"
    or not (shutil.which("objdump") or shutil.which("llvm-objdump")),
    reason="reads x86-64 object code of XLA:CPU with objdump",
)


@pytest.mark.parametrize(
    "body, itemsize, elements",
    [
        # Indexed by elements ([rax+rdx*4]), 16 float32 per iteration.
        ([("vmovups", "zmm1,ZMMWORD PTR [rax+rdx*4]"), ("add", "rdx,0x10"),
          ("cmp", "rdx,0x80000"), ("jne", "200 <f+0x200>")], 4, 16),
        # Indexed by bytes, stepping down: 128 bytes of float16.
        ([("vcvtph2ps", "ymm0,XMMWORD PTR [rax+rsi*1]"),
          ("sub", "rsi,0xffffffffffffff80"), ("jne", "40 <f+0x40>")], 2, 64),
        # No indexed access: unknown.
        ([("vmovups", "zmm1,ZMMWORD PTR [rax]"), ("jne", "40 <f+0x40>")], 4, 0),
    ],
)  # fmt: skip
def test_elements_per_iteration_from_the_induction_variable(body, itemsize, elements):
    assert roofline._elements(body, itemsize) == elements


@x86
def test_the_float32_kernel_is_one_loop_with_one_division_and_no_calls():
    src = jnp.linspace(-5.0, 5.0, 1 << 16)
    lowered = softplus_backward_inplace.lower(src, src, jnp.float32(1.7))
    loop = roofline.hot_loop(lowered, 4)
    ops = [op for op, _ in loop.instructions]
    # One division per vector of float32; LLVM unrolls by the host's tuning
    # (one vector a turn on the Xeons measured, two on Zen 4).
    vectors = loop.elements * 32 // loop.width
    assert vectors in (1, 2) and loop.elements * 32 == vectors * loop.width
    assert loop.divides == vectors
    assert not any(op.startswith("call") for op in ops)  # no libm, all inline
    # The float k of the exponent reduction is one subtraction, not the
    # integer-to-float convert it replaced. (Without the barrier in
    # _nearest_k XLA folds the subtraction away: the numerics tests catch that.)
    assert not any(op.startswith("vcvtdq2ps") for op in ops), ops
    # The naive formula, for comparison: also one division per vector.
    naive = jax.jit(naive_backward, donate_argnums=1).lower(src, src, jnp.float32(1.7))
    naive = roofline.hot_loop(naive, 4)
    assert naive.divides == naive.elements * 32 // naive.width


@x86
def test_the_clock_is_measured():
    hz = roofline.clock_hz(iterations=2_000_000, repeats=2)
    if hz is None:
        pytest.skip("no executable pages here")
    assert 0.3e9 < hz < 8e9


@pytest.mark.tools
@x86
def test_cli_prints_the_table(capsys, monkeypatch):
    fast = functools.partial(roofline.seconds_per_call, budget=0.01, rounds=1)
    monkeypatch.setattr(roofline, "seconds_per_call", fast)
    # A clock that moved between runs is reported, with its range.
    monkeypatch.setattr(roofline, "clock_samples", lambda: [4.46e9, 2.21e9, 4.4e9])
    rows, cal = roofline.main(["--dtypes", "f32", "--sizes", "16K,32K,64K"])
    out = capsys.readouterr().out
    assert "machine:" in out and "per divide" in out
    assert "2.21-4.46 over 3 runs" in out and "warning: the clock moved by 50%" in out
    assert [r.kernel for r in rows] == [
        "jax_softplus in place",
        "jax_softplus, your jit",
        "naive XLA",
        "a*b (floor)",
    ]
    # At these sizes the timings are noise (the marginal one may even be
    # negative); the table is what is checked.
    values = [v for r in rows for v in (r.bound, r.in_l3, r.past_l3, r.far_past)]
    assert all(math.isfinite(v) for v in values)
    assert all(r.insns > r.vector > 0 and r.elements > 0 for r in rows)
    assert set(cal["per_vector"]) == set(cal["per_divide"]) == {256, 512}


def test_bad_sizes_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        roofline.main(["--sizes", "1M,16M"])
    assert exc.value.code == 2
    assert "three sizes" in capsys.readouterr().err


def test_a_bound_lost_in_noise_reads_nan_not_a_crash():
    row = roofline.Row("f32", "k", 10, 8, 0, 16, 512, 0.0, 1.0, 1.0, 1.0)
    assert math.isnan(row.gap)


def test_a_calibration_lost_in_noise_is_retried_then_refused(monkeypatch):
    # One run of four printed "256-bit: -2.126 per vector instruction".
    loop = roofline.Loop([("vmulps", "zmm0,zmm1,zmm2")] * 4, 16, 512)
    monkeypatch.setattr(roofline, "hot_loop", lambda *a, **k: loop)
    times = iter([-1.0, 0.5])
    monkeypatch.setattr(roofline, "_cycles", lambda *a, **k: next(times))
    got = roofline._per_instruction(
        roofline._mixed, 1024, 3e9, 1, lambda lp: lp.vector, 256
    )
    assert got == 0.5 * 16 / loop.vector
    monkeypatch.setattr(roofline, "_cycles", lambda *a, **k: -2.0)
    with pytest.raises(RuntimeError, match="at or below 0 three times"):
        roofline._per_instruction(
            roofline._mixed, 1024, 3e9, 1, lambda lp: lp.vector, 256
        )


def test_an_unstable_clock_is_reported_with_its_spread():
    # The clock read 2.21 to 4.46 GHz across runs on one machine.
    assert (
        roofline.clock_spread([4.46e9, 2.21e9, 4.4e9]) > roofline.CLOCK_SPREAD_WARNING
    )
    assert roofline.clock_spread([4.16e9, 4.15e9]) < 0.01
