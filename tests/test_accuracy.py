"""The accuracy bounds of the numerics issue, on a sample that runs in CI,
with the same tool that produces docs/accuracy.md."""

import numpy as np
import pytest

from tools import _references as references
from tools import accuracy

BOUND = {"f32": 2.5, "bf16": 1.0, "f16": 1.0}


@pytest.fixture(scope="module")
def results():
    return accuracy.measure(n=20_000, seed=123)


@pytest.mark.tools
def test_every_cell_is_within_its_bound(results):
    ours = [r for r in results if r.impl == "jax_softplus"]
    # 8 betas x (f32 and bf16: 3 backward + 2 forward regions; f16: 2 x 1).
    assert len(ours) == 8 * (5 + 5 + 2)
    bad = [r for r in ours if r.max_ulp > BOUND[r.dtype]]
    assert not bad, bad


@pytest.mark.tools
def test_ahead_of_every_anchor_in_float32(results):
    # Worst case over the regions, per op and beta: the bound of the issue.
    worst = {}
    for r in results:
        if r.dtype == "f32":
            key = (r.op, r.beta, r.impl)
            worst[key] = max(worst.get(key, 0.0), r.max_ulp)
    anchors = [k for k in worst if not k[2].startswith("jax_softplus")]
    assert anchors
    for op, beta, impl in anchors:
        assert worst[(op, beta, "jax_softplus")] <= worst[(op, beta, impl)], (
            op,
            beta,
            impl,
        )
    # The correctly rounded evaluation is ahead of the default too.
    for op, beta, impl in worst:
        if impl == "jax_softplus, HIGHEST":
            assert worst[(op, beta, impl)] <= 0.5 < worst[(op, beta, "jax_softplus")]


@pytest.mark.tools
def test_the_naive_formula_loses_to_the_product_rounding(results):
    # The anchors' error at beta != 1 is the rounding of beta * src.
    naive = [
        r.max_ulp
        for r in results
        if r.impl == "naive XLA"
        and r.dtype == "f32"
        and r.beta == 1.7
        and r.region.startswith("core")
    ]
    assert naive and min(naive) > 20


def test_float64_reference_agrees_with_mpmath():
    worst = accuracy.mpmath_spot_check(n=40)
    assert worst["backward: float64 reference"] < 0.01
    assert worst["forward: float64 reference"] < 0.01
    assert worst["backward: jax_softplus"] <= 2.5
    assert worst["forward: jax_softplus"] <= 2.5


@pytest.mark.tools
def test_cli_prints_a_table(capsys, tmp_path):
    out = tmp_path / "acc.json"
    accuracy.main(
        [
            "-n",
            "2000",
            "--dtypes",
            "f32",
            "--betas",
            "1.7",
            "--no-mpmath",
            "--no-derivatives",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert "jax_softplus" in text and "naive XLA" in text
    assert out.exists()


def test_ulp_error_ignores_subnormal_and_infinite_references():
    ref = np.array([1.0, 1e-40, np.inf, np.nan, 2.0])
    got = np.array([1.0 + 2**-23, 0.0, np.inf, np.nan, 2.0])
    err = references.ulp_error(got.astype(np.float32), ref, np.float32)
    np.testing.assert_allclose(err, [1.0, 0.0])


def test_ulp_error_counts_from_lowest_ulps_above_the_smallest_normal():
    # A flushing platform may return 0 for an exact value a hair above the
    # smallest normal: the bounds count from LOWEST_ULPS above it.
    tiny, eps = float(np.finfo(np.float32).tiny), 2.0**-23
    steps = np.array([0.01, references.LOWEST_ULPS - 1, references.LOWEST_ULPS, 100])
    ref = tiny * (1 + steps * eps)
    err = references.ulp_error(np.zeros(4, np.float32), ref, np.float32)
    np.testing.assert_allclose(err, ref[2:] / (tiny * eps))


@pytest.mark.tools
def test_the_cli_takes_the_long_dtype_names(capsys):
    # `--dtypes float32` ended in a bare KeyError; the bench accepted it.
    accuracy.main(
        ["-n", "500", "--dtypes", "float32", "--betas", "1.0"]
        + ["--no-mpmath", "--no-derivatives"]
    )
    assert "jax_softplus" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        accuracy.main(["--dtypes", "int8"])
    assert "unknown dtype 'int8'" in capsys.readouterr().err


@pytest.mark.tools
def test_the_cli_measures_every_derivative():
    # float32, few points: tests/test_higher_order.py bounds every order.
    # A quantity of each order and route (tests/test_figures.py checks that
    # the docs' tables have every one).
    some = ("d softplus/dbeta", "d bwd/dbeta, diff_dst >= 1e30", "d2 bwd/dsrc dbeta",
            "d2 softplus/dbeta2, hessian", "d4 softplus/dbeta4")  # fmt: skip
    rows = accuracy.measure_derivatives(
        n=64, dtypes=("f32",), betas=("0.1..10",), quantities=some
    )
    ours = {r.quantity: r for r in rows if r.impl == "jax_softplus"}
    assert set(ours) == set(some)
    for r in ours.values():
        assert r.count > 0
        bound = 4.0 if r.unit == "ulp" else 1e-5
        assert r.max_error <= bound, r
    naive = [r.max_error for r in rows if r.impl == "naive formula"]
    assert max(naive) > 1e6  # the anchor fails in the tails: the sample reaches them
    table = accuracy.derivatives_markdown(rows)
    assert (
        "| d2 softplus/dbeta2, hessian |" in table and "| d4 softplus/dbeta4 |" in table
    )
    assert "0.1..10" in accuracy.derivatives_markdown(rows, by_range=True)


@pytest.mark.tools
def test_the_derivative_cells_run_each_platforms_lowering_on_the_same_inputs():
    some = ("d bwd/dsrc", "d2 softplus/dbeta2")
    rows = accuracy.measure_derivatives(
        n=64,
        dtypes=("f32",),
        betas=("10..1e5",),
        quantities=some,
        platforms=("cpu", "tpu"),
    )
    cpu = {r.quantity: r for r in rows if r.impl == "jax_softplus"}
    tpu = {r.quantity: r for r in rows if r.impl == "jax_softplus, TPU lowering"}
    assert set(cpu) == set(tpu) == set(some)
    for q in some:
        assert tpu[q].platform == "tpu" and cpu[q].platform == "cpu"
        assert tpu[q].count == cpu[q].count > 0  # one sample, one reference
        assert tpu[q].max_error <= 2.0, tpu[q]
    # The anchors run once, as users run them.
    assert {r.platform for r in rows if r.impl == "naive formula"} == {"cpu"}


def test_the_cli_measures_the_derivatives_of_the_dtypes_it_is_given(monkeypatch):
    # `--dtypes f32` measured the float64 derivative cells too (two thirds
    # of the run).
    calls = []
    monkeypatch.setattr(accuracy, "measure", lambda **kw: [])
    monkeypatch.setattr(
        accuracy, "measure_derivatives", lambda **kw: calls.append(kw) or []
    )
    accuracy.main(["--dtypes", "f32", "--no-mpmath"])
    accuracy.main(["--dtypes", "bf16", "--no-mpmath"])
    assert [c["dtypes"] for c in calls] == [["f32"]]


def test_quick_mode_takes_its_defaults_and_leaves_explicit_options(monkeypatch):
    seen = []
    monkeypatch.setattr(accuracy, "measure", lambda **kw: seen.append(kw) or [])
    accuracy.main(["--quick", "--no-derivatives", "--no-mpmath", "-n", "123"])
    (kw,) = seen
    assert kw["n"] == 123 and kw["n64"] == accuracy.QUICK["n64"]
    assert kw["platforms"] == ["cpu"]


def _without(monkeypatch, missing):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == missing else real(name, *a),
    )


def test_a_plot_without_matplotlib_is_refused_before_any_work(monkeypatch, capsys):
    _without(monkeypatch, "matplotlib")
    called = []
    monkeypatch.setattr(accuracy, "measure", lambda **kw: called.append(kw) or [])
    with pytest.raises(SystemExit):
        accuracy.main(["--dtypes", "f32", "--plot", "x.png"])
    assert not called
    assert 'pip install -e ".[bench]" from a checkout' in capsys.readouterr().err


def test_a_base_install_runs_what_it_can_and_says_what_it_skipped(monkeypatch, capsys):
    # It stopped twice: first asking for --no-mpmath, then --no-derivatives.
    _without(monkeypatch, "mpmath")
    monkeypatch.setattr(accuracy, "measure", lambda **kw: [])
    monkeypatch.setattr(
        accuracy, "measure_derivatives", lambda **kw: pytest.fail("needs mpmath")
    )
    accuracy.main(["--dtypes", "f32"])
    out = capsys.readouterr()
    note = "skipped the mpmath check and the derivatives table: they need mpmath"
    assert note in out.err and note in out.out
    assert 'pip install -e ".[bench]" from a checkout' in out.out


def test_the_plot_is_drawn_at_a_beta_the_run_measured(monkeypatch, capsys):
    drawn = []
    monkeypatch.setattr(accuracy, "require", lambda *a: None)  # no matplotlib needed
    monkeypatch.setattr(accuracy, "measure", lambda **kw: [])
    monkeypatch.setattr(accuracy, "plot", lambda path, beta: drawn.append(beta))
    accuracy.main(
        [
            "--dtypes",
            "f32",
            "--betas",
            "1.0",
            "--no-mpmath",
            "--no-derivatives",
            "--plot",
            "x.png",
        ]
    )
    assert drawn == [1.0]
    assert "plot (beta = 1)" in capsys.readouterr().out


@pytest.mark.tools
def test_float64_cells_with_the_search(capsys, x64):
    # `--dtypes f64` answered "unknown dtype 'f64'". The cells measure
    # against mpmath, a share of the inputs near the kernels' switch points,
    # and report where the maximum is.
    rows = accuracy.measure(n64=300, dtypes=("f64",), betas=(1.7, 1e200), seed=5)
    ours = [r for r in rows if r.impl == "jax_softplus"]
    regions = accuracy.REGIONS_F64
    assert len(ours) == 2 * (len(regions["backward"]) + len(regions["forward"]))
    assert all(r.worst.startswith("src=") for r in ours)
    assert max(r.max_ulp for r in ours) <= 1.0
    naive = [r for r in rows if r.impl == "naive XLA" and r.region.startswith("tail")]
    assert min(r.max_ulp for r in naive) > 1e6  # exp(-t) underflows there


def test_the_local_search_walks_to_a_worse_neighbour():
    # A planted error that grows towards src = 1 + 2**20 ulps: the search
    # from a point 2**20 ulps away finds the peak's neighbourhood.
    from tools import _search

    peak = _search.step(np.float64([1.0]), 1 << 21, np.float64)[0]

    def errors(inputs):
        distance = np.abs(inputs["src"] - peak) / np.spacing(1.0)
        return 1.0 / (1.0 + distance)

    start = {"src": np.float64([1.0, 3.0]), "beta": np.float64(1.0)}
    found, at = _search.refine(errors, start, np.float64, rounds=4, keep=2)
    assert found > errors(start).max() * 100
    assert abs(at["src"] - peak) < 1e-9


@pytest.mark.parametrize("flag", ["-n", "--n64", "--nd"])
def test_an_empty_sample_is_refused(flag, capsys):
    # `-n 0` printed an empty table and exited 0.
    with pytest.raises(SystemExit):
        accuracy.main([flag, "0"])
    assert "is not an integer of at least 1" in capsys.readouterr().err


def test_a_float64_error_near_the_smallest_normal_is_against_the_exact_value():
    pytest.importorskip("mpmath")
    # softplus(-1417.969350442082, 0.5) is 2.47e-308, just above the smallest
    # normal: its exact value lies nearly halfway between two floats, and
    # either is 0.50 ulp from it. The reference's low part, as a float64,
    # would be subnormal there and rounded away (the error read 1.000).
    x = np.float64([-1417.969350442082])
    exact = references.exact_values("forward", x, 0.5)
    below, above = (
        np.float64(2.4711425182404475e-308),
        np.float64(2.471142518240448e-308),
    )
    for got in (below, above):
        err = references.derivative_error(
            np.float64([got]), exact, np.abs(exact.real), np.float64
        )
        assert 0.49 < err[0] < 0.51, (got, err)
    # Far from the bottom of the range the pair is as exact as before.
    x = np.float64([-0.2780735057321637])
    exact = references.exact_values("forward", x, 3.0)
    err = references.derivative_error(exact.real, exact, np.abs(exact.real), np.float64)
    assert err[0] <= 0.5
