"""The benchmark runs end to end (tiny sizes: this checks the tool, not speed)."""

import json

import pytest
from helpers import FORWARD_MODE

from tools import bench


@pytest.mark.tools
def test_cli_runs_every_section(tmp_path, capsys):
    out = tmp_path / "bench.json"
    bench.main(
        [
            "--sizes", "4K", "--dtypes", "f32,bf16", "--betas", "1.7",
            "--repeats", "2", "--no-torch", "--fwd-bwd", "--train-step",
            "--scaling", "1K,2K", "--json", str(out),
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    text = captured.out
    # The progress lines count every section: 2 backward, 2 fwd+bwd, scaling
    # and train step (--user-jit: tests below), one line each in a log.
    steps = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert len(steps) == 6 and steps[-1].startswith("[6/6")
    assert steps[-1].endswith("train step") and "[7/" not in captured.err
    for needle in ("donated", "fresh", "fwd+bwd", "scaling", "train step"):
        assert needle in text
    rows = json.loads(out.read_text())["rows"]
    modes = {r["mode"] for r in rows}
    assert {"donated", "fresh", "fwd+bwd", "fwd+bwd donated", "scaling"} <= modes
    # What the ratios are made of is printed with them.
    assert "x floor: the median over rounds of (time / time of a*b" in text
    assert "fwd+bwd tuned" in modes  # the CPU-only section
    assert all(r["median_s"] > 0 and r["ratio"] > 0 for r in rows)
    # A train step is no stream: no bandwidth, an empty cell in the table.
    steps = [bench.Row(**r) for r in rows if r["mode"] == "train step"]
    assert steps and all(r.gbps == 0 for r in steps)
    assert all(
        "| 0.0 |" not in line for line in bench.markdown_table(steps).split("\n")
    )
    floors = [r for r in rows if r["method"] == "a*b (floor)"]
    assert floors and all(r["ratio"] == 1.0 for r in floors)
    # Every backward row is also compared with the naive formula (itself at
    # exactly 1); without PyTorch nothing is compared with it.
    backward = [
        r for r in rows if r["mode"] in ("donated", "fresh") or "user" in r["mode"]
    ]
    assert all(r["vs_naive"] > 0 for r in backward)
    assert all(r["vs_naive"] == 1.0 for r in backward if r["method"] == "naive XLA")
    assert all(r["vs_torch"] is None for r in rows)
    # Without PyTorch, no PyTorch column: not in the table, not in Markdown.
    assert "vs naive" in text and "vs torch" not in text
    assert "vs torch" not in bench.markdown_table([bench.Row(**r) for r in rows])


def test_sizes_parse():
    assert bench.parse_size("16M") == 16 << 20
    assert bench.parse_size("1K") == 1024
    assert bench.format_size(64 << 20) == "64M"


def test_dtype_names_long_and_short():
    assert [bench.parse_dtype(d) for d in ("float32", "BF16", " f16")] == [
        "f32",
        "bf16",
        "f16",
    ]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--dtypes", "int8"], "unknown dtype 'int8'"),
        (["--sizes", "lots"], "bad size 'LOTS'"),
        (["--sizes", "0"], "at least 1"),
        (["--betas", "x"], "beta 'x' is not a finite nonzero number"),
        (["--scaling", "1K,big"], "bad size 'BIG'"),
        (["--repeats", "0"], "'0' is not an integer of at least 1"),
    ],
)
def test_bad_options_are_usage_errors(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_the_machine_is_named(capsys):
    # Figures move between CPUs (1.2x or 1.7x a donated a*b): every table
    # says which one it was measured on.
    m = bench.machine()
    assert m["cpu"] and m["cores"] >= 1 and m["jax"]
    bench.main(["--sizes", "1K", "--repeats", "1", "--dtypes", "f32", "--betas", "1.0"])
    out = capsys.readouterr().out.splitlines()
    line = next(row for row in out if row.startswith("machine:"))
    assert m["cpu"] in line and "cores" in line and m["jax"] in line


def test_default_sizes_reach_past_the_last_level_cache(capsys):
    # 128M float32 elements are 512 MiB per array, past any current L3.
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "default: 16M,128M" in help_text


@pytest.mark.tools
def test_a_plot_without_scaling_has_one_panel_and_no_warning(tmp_path, recwarn):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    rows = bench.main(
        ["--sizes", "1K", "--repeats", "1", "--dtypes", "f32", "--betas", "1.0",
         "--no-torch", "--plot", str(tmp_path / "b.png")]
    )  # fmt: skip
    assert (tmp_path / "b.png").stat().st_size > 0
    assert not [w for w in recwarn if "No artists" in str(w.message)]
    assert rows and len(plt.gcf().axes) == 1


def test_the_docs_tables_lead_with_the_users_jit_and_name_the_machine(tmp_path):
    rows = bench.main(
        ["--sizes", "1K", "--repeats", "1", "--dtypes", "f32", "--betas", "1.7",
         "--no-torch", "--user-jit", "--tables", str(tmp_path)]
    )  # fmt: skip
    summary = (tmp_path / "bench-summary.md").read_text()
    assert summary.startswith("Measured on ") and bench.machine()["cpu"] in summary
    lines = [line for line in summary.splitlines() if line.startswith("| your jit")]
    assert [line.split("|")[1].strip() for line in lines] == [
        "your jit, donated",
        "your jit, fresh",
    ]
    # The op in the user's own jit, beside the naive formula jitted the same.
    for mode in ("user jit donated", "user jit fresh"):
        methods = {r.method for r in rows if r.mode == mode}
        assert methods == {"a*b (floor)", "jax_softplus", "naive XLA"}
    ours = {
        r.mode: r.vs_naive for r in rows if r.method == "jax_softplus"
    }  # the cells are these ratios
    assert f"{ours['user jit donated']:.2f}" in lines[0]
    assert "x floor: the median over rounds" in (tmp_path / "bench.md").read_text()
    assert json.loads((tmp_path / "bench.json").read_text())["machine"]["jax"]


@pytest.mark.tools
def test_the_derivative_and_eager_sections(tmp_path, capsys):
    bench.main(
        ["--sizes", "1K", "--repeats", "1", "--dtypes", "f32", "--betas", "1.7",
         "--no-torch", "--derivatives", "2K", "--eager", "--tables", str(tmp_path)]
    )  # fmt: skip
    data = json.loads((tmp_path / "bench.json").read_text())
    routes = {r["route"] for r in data["derivatives"]}
    assert routes == set(bench.DERIVATIVE_ROUTES)
    for r in data["derivatives"]:
        assert r["median_s"] > 0 and r["formula_s"] > 0 and r["ratio"] > 0
        assert r["compile_s"] > 0 and r["formula_compile_s"] > 0
        assert r["temps"] >= 0 and r["formula_temps"] > 0  # the formula's loops
    calls = {r["call"] for r in data["eager"]}
    assert calls == set(bench._eager_cases())
    assert "softplus, Python float" in calls
    # Forward mode through softplus needs JAX 0.9 (sharp bits).
    assert ("jax.jvp of softplus, float32[1000]" in calls) == (FORWARD_MODE)
    assert all(r["median_us"] > 0 and r["ratio"] > 0 for r in data["eager"])
    table = (tmp_path / "bench-derivatives.md").read_text()
    assert (
        table.startswith("Measured on ")
        and "| jax.hessian in beta | f32 | 2K |" in table
    )
    assert "| softplus, Python float |" in (tmp_path / "bench-eager.md").read_text()
    # One progress line per step in a log, with the time left.
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("[")]
    assert len(lines) == len(set(lines)) and any("min left" in line for line in lines)


@pytest.mark.tools
def test_the_float64_section_times_float64_with_x64_on_only_there(tmp_path):
    import jax

    before = jax.config.jax_enable_x64
    rows = bench.main(
        ["--sizes", "1K", "--repeats", "1", "--dtypes", "f32", "--betas", "1.7",
         "--no-torch", "--float64", "2K", "--tables", str(tmp_path)]
    )  # fmt: skip
    assert jax.config.jax_enable_x64 == before
    f64 = [r for r in rows if r.dtype == "f64"]
    modes = {r.mode for r in f64}
    assert {"user jit donated", "user jit fresh", "fwd+bwd", "fwd+bwd donated"} <= modes
    assert all(r.size == 2048 and r.median_s > 0 for r in f64)
    # Without x64 the arrays would be float32: the section refuses that.
    with pytest.raises(ValueError, match="jax_enable_x64"):
        bench.bench_user_jit(1024, "f64", 1.7, 1, lambda i: None)
    summary = (tmp_path / "bench-summary.md").read_text()
    assert "f64 1.7" in summary and "f64 2K" in summary


@pytest.mark.tools
def test_the_highest_section_times_highest_beside_default_and_naive(tmp_path, capsys):
    bench.main(
        ["--sizes", "none", "--dtypes", "f32,bf16", "--repeats", "2", "--no-torch",
         "--highest", "4K", "--tables", str(tmp_path)]
    )  # fmt: skip
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    modes = {r["mode"] for r in rows}
    assert modes == {
        "highest, your jit donated",
        "highest, your jit fresh",
        "highest, in place",
        "highest, softplus fresh",
        "highest, train step",
    }
    steps = {r["method"]: r for r in rows if r["mode"] == "highest, train step"}
    assert set(steps) == {"jax_softplus", "jax_softplus, HIGHEST", "naive XLA"}
    assert all(r["size"] == 512 and r["median_s"] > 0 for r in steps.values())
    methods = {r["method"] for r in rows}
    assert {"jax_softplus", "jax_softplus, HIGHEST", "naive XLA"} <= methods
    table = (tmp_path / "bench-highest.md").read_text()
    assert table.startswith("Measured on ")
    assert "| your jit donated | f32 | 4K |" in table
    assert "| softplus fresh | bf16 | 4K |" in table
    assert "| in place | bf16 | 4K |" in table
    assert "| train step | f32 | 512 |" in table
    assert "HIGHEST in a user's jit and in place" in capsys.readouterr().out


def test_quick_mode_is_a_first_look(monkeypatch):
    seen = []
    monkeypatch.setattr(bench, "bench_backward", lambda *a, **k: seen.append(a) or [])
    monkeypatch.setattr(bench, "bench_user_jit", lambda *a, **k: seen.append(a) or [])
    bench.main(["--quick"])
    assert [(n, dt) for n, dt, *_ in seen] == [(1 << 20, "f32")] * 4
    seen.clear()
    bench.main(["--quick", "--dtypes", "bf16", "--betas", "1.0"])
    assert [(n, dt) for n, dt, *_ in seen] == [(1 << 20, "bf16")] * 2


def test_outputs_go_into_folders_made_for_them(tmp_path):
    # A long run must not end in FileNotFoundError for a folder not made yet.
    out = tmp_path / "new" / "deeper"
    bench.main(
        ["--sizes", "1K", "--repeats", "1", "--dtypes", "f32", "--betas", "1.0",
         "--no-torch", "--json", str(out / "b.json"), "--markdown", str(out / "b.md"),
         "--tables", str(out / "tables"), "--plot", str(out / "img" / "b.png")]
    )  # fmt: skip
    for path in ("b.json", "b.md", "tables/bench.md", "img/b.png"):
        assert (out / path).stat().st_size > 0, path


def test_avx2_reruns_the_measurement_with_avx2_code(tmp_path):
    # An AVX-512 machine measures what AVX2-only CPUs run, in one command.
    if "avx512f" not in bench.machine()["isa"].split():
        pytest.skip("no AVX-512 here to cap")
    bench.main(
        ["--sizes", "1K", "--dtypes", "f32", "--repeats", "1", "--no-torch",
         "--avx2", "--tables", str(tmp_path)]
    )  # fmt: skip
    native = (tmp_path / "bench.md").read_text().splitlines()[0]
    capped = (tmp_path / "avx2" / "bench.md").read_text().splitlines()[0]
    assert "AVX-512 code" in native
    assert "AVX2 (XLA_FLAGS --xla_cpu_max_isa=AVX2) code" in capped


@pytest.mark.tools
def test_compile_section_times_each_program_beside_the_formula(tmp_path, capsys):
    bench.main(
        ["--sizes", "none", "--compile", "--repeats", "1", "--no-torch",
         "--tables", str(tmp_path)]
    )  # fmt: skip
    rows = json.loads((tmp_path / "bench.json").read_text())["compile"]
    programs = {r["program"] for r in rows}
    assert programs == {
        "MLP train step",
        "softplus_backward, float32[1K]",
        "softplus, float32[1K]",
    }
    assert len(rows) == 9
    for r in rows:
        assert min(r["trace_ms"], r["lower_ms"], r["compile_ms"]) > 0
        # The formula is the reference of its own ratio.
        assert r["ratio"] > 0 and (r["method"] != bench.NAIVE or r["ratio"] == 1.0)
    # HIGHEST lowers to more operations than the default, which lowers to
    # more than the formula, for each op alone.
    for program in programs - {"MLP train step"}:
        ops = {r["method"]: r["ops"] for r in rows if r["program"] == program}
        assert ops[bench.NAIVE] < ops["jax_softplus"] < ops["jax_softplus, HIGHEST"]
    table = (tmp_path / "bench-compile.md").read_text()
    assert table.startswith("Measured on ") and table.count("\n| ") == 10
    assert "Trace, lower and compile" in capsys.readouterr().out
