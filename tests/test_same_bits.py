"""maintainers/same_bits.py: its routes hash every output bit, and its
options refuse what they cannot take. (The sweep itself is 7.3 minutes at
`--stride 256`; here its routes run on a few hundred elements.)"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
import same_bits
from exhaustive import bit_patterns, near_midpoint_diff_dst

from jax_softplus import _highest, _math, softplus_backward

pytestmark = pytest.mark.tools


def _tables(src, dd):
    cells = same_bits.Cells()

    def data():
        return iter([("t", src, dd, (1.7,))])

    same_bits.default_routes(cells, data, lambda msg: None)
    same_bits.highest_routes(cells, data, [], lambda msg: None)
    return cells.table()


def test_one_bit_of_one_input_changes_its_routes_cells():
    rng = np.random.default_rng(0)
    src = (rng.standard_normal(300) * 8).astype(np.float32)
    dd = rng.standard_normal(300).astype(np.float32)
    before = _tables(src, dd)
    # Every route: seven quantities, two ops with a constant beta, two at
    # HIGHEST on each of three platforms' lowerings.
    assert len(before) == 7 + 2 + 2 * 3
    assert all(count == 300 for count, _ in before.values())
    assert not same_bits.compare(before, _tables(src, dd))
    nudged = src.copy()
    nudged[123] = np.nextafter(nudged[123], np.float32(np.inf))
    differ = same_bits.compare(before, _tables(nudged, dd))
    assert len(differ) == len(before)  # every route reads src


def test_the_float32_chunks_are_every_pattern_in_order(monkeypatch):
    monkeypatch.setattr(same_bits, "_CHUNK", 1000)
    chunks = list(same_bits._float32_chunks(1 << 16))
    assert [c.size for c in chunks[:-1]] == [1000] * (len(chunks) - 1)
    assert np.array_equal(np.concatenate(chunks), bit_patterns(0, 1 << 32, 1 << 16))


def _exact_steps(src, dd):
    jax.clear_caches()  # the steps' traces, for a monkeypatched step
    cells = same_bits.Cells()
    same_bits.exact_steps(
        cells, lambda: iter([("t", src, dd, (1.7,))]), [], lambda msg: None
    )
    return cells.table()


def test_the_exact_steps_cells_hold_the_double_double_steps_values(monkeypatch):
    src, dd = near_midpoint_diff_dst(1.7, 40, np.random.default_rng(0))
    before = _exact_steps(src, dd)
    name = "t backward in doubt beta=1.7"
    n = before[f"{name}: double-double step"][0]
    assert n > 0 and before[f"{name}: HIGHEST"][0] == n
    assert before[f"{name}: elements"][0] == 3 * n  # src, diff_dst, beta
    step = _highest._dd_backward

    def nudged(s, d, b):  # 2**-40 off: across the midpoints (within 2**-46)
        hi, lo = step(s, d, b)
        return hi, lo + hi * 2.0**-40

    monkeypatch.setattr(_highest, "_dd_backward", nudged)
    differ = same_bits.compare(before, _exact_steps(src, dd))
    assert {line.split(": [")[0] for line in differ} == {  # "name: [old] -> [new]"
        f"{name}: double-double step",
        f"{name}: HIGHEST",
    }


def test_the_programs_cells_change_with_an_operation(monkeypatch):
    def cases():
        x = jax.ShapeDtypeStruct((8,), np.float32)
        b = jax.ShapeDtypeStruct((), np.float32)
        for name, fn, args in same_bits._program_cases():
            if name.startswith("float32[1024] HIGHEST backward"):
                yield name, fn, (x, x, b)[: len(args)]

    def table():
        cells = same_bits.Cells()
        same_bits.programs(cells, lambda msg: None, cases)
        return cells.table()

    before = table()
    assert len(before) == 2 * len(same_bits.PLATFORMS)  # traced, constant beta
    assert not same_bits.compare(before, table())
    monkeypatch.setitem(_highest.ERROR, "backward", 2.0**-49)
    differ = same_bits.compare(before, table())
    # TPUs take another evaluation, with its own bound.
    assert len(differ) == 2 * (len(same_bits.PLATFORMS) - 1)


def test_the_compiled_cells_see_operations_not_how_they_were_built(monkeypatch):
    x = jax.ShapeDtypeStruct((8,), np.float32)
    b = jax.ShapeDtypeStruct((), np.float32)
    named = jax.jit(softplus_backward)  # the same op inside a named call

    def table(op, compiled):
        def cases():
            yield "backward", lambda s, d, b: op(s, d, b), (x, x, b)

        cells = same_bits.Cells()
        same_bits.programs(cells, lambda msg: None, cases, compiled=compiled)
        return cells.table()

    # A call around the op: other StableHLO, the same compiled programs.
    assert same_bits.compare(table(softplus_backward, False), table(named, False))
    before = table(softplus_backward, True)
    assert not same_bits.compare(before, table(named, True))
    # Dataflow, not text without names: operands swapped are another program.
    a = jax.ShapeDtypeStruct((8,), np.float32)

    def dataflow(f):
        return same_bits._dataflow(jax.jit(f).lower(a, a).compile().as_text())

    assert dataflow(lambda u, v: u - v) != dataflow(lambda u, v: v - u)
    # A coefficient of exp's polynomial nudged: every platform's program.
    q = _math._EXPM1_Q
    monkeypatch.setattr(_math, "_EXPM1_Q", (*q[:-1], q[-1] * np.float32(1 + 2**-20)))
    differ = same_bits.compare(before, table(softplus_backward, True))
    assert len(differ) == len(same_bits.PLATFORMS)


def test_compiled_runs_from_the_command_line(tmp_path, capsys, monkeypatch):
    x = jax.ShapeDtypeStruct((8,), np.float32)
    b = jax.ShapeDtypeStruct((), np.float32)
    case = ("backward", lambda s, d, b: softplus_backward(s, d, b), (x, x, b))
    monkeypatch.setattr(same_bits, "_program_cases", lambda: [case])
    out = tmp_path / "compiled.json"
    argv = ["--compiled", "--near", "4"]
    assert same_bits.main([*argv, "--out", str(out)]) == 0
    assert same_bits.main([*argv, "--compare", str(out)]) == 0
    n = len(same_bits.PLATFORMS)
    assert f"0 of {n} cells differ" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["compiled_only"] and len(written["cells"]) == n
    # The compiled programs, not the StableHLO: --programs hashes otherwise.
    assert same_bits.main(["--programs", "--near", "4", "--compare", str(out)]) == 1


def test_exact_steps_runs_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "steps.json"
    argv = ["--exact-steps", "--stride", str(1 << 24), "--near", "4"]
    assert same_bits.main([*argv, "--out", str(out)]) == 0
    assert same_bits.main([*argv, "--compare", str(out)]) == 0
    assert "0 of " in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--stride", "0"],
        ["--near", "x"],
        ["--compare", "/no/such.json"],
        ["--programs", "--exact-steps"],
        ["--compiled", "--programs"],
    ],
)
def test_a_bad_option_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as e:
        same_bits.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "error:" in err[-1] and argv[0] in err[-1]


def test_second_derivatives_cover_every_dtype_platform_and_beta():
    cells = same_bits.Cells()
    same_bits.second_derivatives(cells, 64, lambda msg: None)
    table = cells.table()
    per_beta = 2 * len(same_bits.PLATFORMS) * len(same_bits.SECOND)
    assert len(table) == per_beta * len(same_bits.BETAS)
    assert all(count == 64 for count, _ in table.values())
    again = same_bits.Cells()
    same_bits.second_derivatives(again, 64, lambda msg: None)
    assert again.table() == table
