"""The exhaustive float32 run (maintainers/exhaustive.py) on a strided subset
of the bit patterns: the same code as the full run that writes
docs/tables/exhaustive.md, held to the bounds the README quotes."""

from __future__ import annotations

import json
from dataclasses import asdict

import exhaustive
import jax
import numpy as np
import pytest

from jax_softplus import softplus_backward

pytestmark = pytest.mark.exhaustive

# The README's float32 bounds (tests/test_figures.py checks the README
# against the full run's table).
BOUNDS = {"softplus_backward": 2.5, "softplus": 2.5}
FIRST_DERIVATIVES = 2.5
# Every 2**14-th bit pattern: 262,144 patterns per beta, about 255,000 finite.
STRIDE = 1 << 14


@pytest.fixture(scope="module")
def cells():
    return exhaustive.run(stride=STRIDE)


def test_every_cell_within_the_quoted_bounds(cells):
    assert set(cells) == {
        (q, b) for q in exhaustive.QUANTITIES for b in exhaustive.BETAS
    }
    for (quantity, beta), cell in cells.items():
        bound = BOUNDS.get(quantity, FIRST_DERIVATIVES)
        if quantity == "d softplus/dbeta" and abs(beta) > 9.2e18:
            # Below 1 / beta**2: never a normal float32.
            assert cell.count == 0, cell
            continue
        assert cell.count > 10_000, (quantity, beta, cell.count)
        assert cell.max_ulp <= bound, (quantity, beta, cell)


def test_diff_dst_chosen_against_the_backward_op_stays_within_its_bound():
    cells = exhaustive.adversarial(betas=(1.7, -3.7, 1e3), n=1 << 16, rounds=4)
    for cell in cells.values():
        assert cell.count > 200_000 and cell.max_ulp <= BOUNDS["softplus_backward"]
    # The pass reaches where random diff_dst rarely does: results with a
    # significand just below 2.
    worst = cells[(exhaustive.ADVERSARIAL, 1.7)]
    assert 1.99 < abs(worst.exact) / 2.0 ** np.floor(np.log2(abs(worst.exact))) < 2


def test_a_strided_run_thins_the_second_pass_too():
    # --stride 100003 ran the second pass over 47 million inputs per beta
    # while its header said every 100003-th bit pattern.
    assert exhaustive.adversarial_size(1) == (1 << 20, 48)
    n, rounds = exhaustive.adversarial_size(100003)
    assert n * rounds == 1 << 14
    assert exhaustive.adversarial_size(64) == ((48 << 20) // 64, 1)


def test_the_worst_input_replays(cells):
    # The recorded input gives the recorded result when computed again.
    cell = cells[("softplus_backward", 1.7)]
    got = exhaustive._ours(
        np.float32([cell.src]), np.float32([cell.diff_dst]), np.float32(1.7)
    )[0]
    assert float(got[0]) == cell.got


def test_the_reference_reads_subnormal_src_as_the_cpu_does():
    ref = exhaustive._Reference(2)
    out = ref(np.float32([1e-40, 0.0]), np.float32([1.0, 1.0]), 3e30)
    assert out[0][0] == out[0][1] == 0.5


def test_the_tables(cells, tmp_path):
    exhaustive.write_tables(tmp_path, cells, STRIDE, 1.0)
    text = (tmp_path / "exhaustive.md").read_text()
    assert text.startswith("Measured on ") and "every 16384-th bit pattern" in text
    data = json.loads((tmp_path / "exhaustive.json").read_text())
    assert data["stride"] == STRIDE and len(data["cells"]) == len(cells)
    assert data["machine"]["cpu"]


def test_softplus_between_the_tables_betas_stays_within_its_bound():
    worst = exhaustive.random_betas(4, n=1 << 16)
    assert set(worst) == {"softplus", "under vmap"}
    for err, beta, src in worst.values():
        assert 0.5 < err <= BOUNDS["softplus"]
        assert np.isfinite(beta) and np.isfinite(src)


def test_highest_is_correctly_rounded_on_a_stride(tmp_path):
    # The same run as the docs' exhaustive-highest table (every finite src
    # at eleven betas), on every 2**15-th bit pattern at four of them, with
    # diff_dst near rounding midpoints, and every bfloat16/float16 src.
    betas = (1.0, -2.5, 1e-3, 3e30)
    cells = exhaustive.run_highest(betas=betas, stride=1 << 15, near=60)
    assert {q for q, _ in cells} == set(exhaustive.HIGHEST_QUANTITIES) | {
        f"{op}, {half}"
        for op in ("softplus_backward", "softplus")
        for half in ("bfloat16", "float16")
    }
    for cell in cells.values():
        assert cell.wrong == 0, cell
        assert cell.count > 0, cell
    near = [c for (q, _), c in cells.items() if q == exhaustive.HIGHEST_QUANTITIES[1]]
    assert sum(c.count for c in near) > 40
    assert sum(c.long_double for c in near) > 20  # float64 could not decide
    exhaustive.write_highest_tables(tmp_path, cells, 1 << 15, 1.0)
    text = (tmp_path / "exhaustive-highest.md").read_text()
    assert (
        text.startswith("Measured on ")
        and "| softplus_backward | 0 | 0 | 0 | 0 |" in text
    )


def test_highest_counts_where_the_exact_value_is_normal():
    # The full run's one bfloat16 result off at beta 0.5: the exact value is
    # 0.99867 * 2**-126 (not normal), which rounds up to 2**-126, and the
    # CPU, which flushes subnormals, returns -0.0; just above 2**-126, the
    # same rounding is counted (and given).
    bf16 = np.dtype("bfloat16")
    src = np.full(3, -231.0, bf16)
    dd = np.array([-1.7008e12, -1.7094e12, -1.718e12], bf16)
    f32 = np.float32
    ref = exhaustive.correctly_rounded(src.astype(f32), dd.astype(f32), 0.5, 8)
    want, _, approx = ref["backward"]
    tiny = float(np.finfo(np.float32).tiny)
    np.testing.assert_array_equal(want[:2], -tiny)
    assert exhaustive.exact_is_normal(want, approx).tolist() == [False, True, True]
    got = softplus_backward(src, dd, 0.5, accuracy=jax.lax.AccuracyMode.HIGHEST)
    np.testing.assert_array_equal(np.asarray(got[1:], np.float64), want[1:])


@pytest.mark.parametrize("beta", [1e-38, -3e38])
def test_near_midpoint_inputs_at_the_ends_of_the_beta_range(beta):
    # t / beta overflowed float32 at tiny betas (the random-beta search).
    src, dd = exhaustive.near_midpoint_diff_dst(beta, 20, np.random.default_rng(0))
    assert src.size and np.isfinite(src).all() and np.isfinite(dd).all()


def test_parts_of_a_highest_run_add_up(tmp_path, monkeypatch):
    # Parts 0 and 1 of a stride-2**16 run: part 1 takes the odd multiples
    # of the offset only (no half-type or near-midpoint pass), and the
    # table adds both parts' counts; a part run again replaces itself.
    monkeypatch.setattr(exhaustive, "_commit", lambda: "abc1234")
    betas, stride = (1.7,), 1 << 16
    parts = [
        exhaustive.run_highest(betas=betas, stride=stride, near=8, offset=k)
        for k in (0, 1)
    ]
    assert set(parts[1]) == {(q, 1.7) for q in ("softplus_backward", "softplus")}
    assert len(parts[0]) > len(parts[1])
    for k in (0, 1, 1):
        exhaustive.write_highest_tables(
            tmp_path, parts[k], stride, 60.0 * (k + 1), "tpu", offset=k
        )
    data = json.loads((tmp_path / "exhaustive-highest-tpu.json").read_text())
    assert [r["offset"] for r in data["runs"]] == [0, 1]
    text = (tmp_path / "exhaustive-highest-tpu.md").read_text()
    counted = parts[0][("softplus", 1.7)].count + parts[1][("softplus", 1.7)].count
    assert f"| softplus | 0 | {counted:,} |" in text
    assert text.startswith("Measured on ") and "; 2 parts, each written" in text
    assert "(part 0: commit abc1234, in 1 minutes; part 1: commit" in text
    assert "in 2 minutes)" in text
    assert "2 of the 65536 parts" in text
    again = tmp_path / "again"
    exhaustive.main(
        ["--accuracy", "highest", "--platform", "tpu", "--tables", str(again),
         "--render", str(tmp_path / "exhaustive-highest-tpu.json")]
    )  # fmt: skip
    rendered = (again / "exhaustive-highest-tpu.md").read_text()
    assert rendered == text.replace(str(tmp_path), str(again))
    assert exhaustive.coverage(4, (3, 1, 0, 2)) == "every finite float32 src"
    assert exhaustive.coverage(4) == "every 4-th bit pattern"
    assert exhaustive.coverage(4, (3,)).endswith("equal to 3 mod 4")
    assert exhaustive.coverage(8, (2, 0, 1)).endswith("equal to 0, 1 or 2 mod 8")


def test_a_table_from_before_parts_is_part_0(tmp_path):
    cell = exhaustive.HighestCell("softplus", 1.0, count=5)
    old = {"machine": exhaustive.machine(), "commit": "0ld", "stride": 4,
           "seconds": 60.0, "cells": [asdict(cell)]}  # fmt: skip
    (tmp_path / "exhaustive-highest.json").write_text(json.dumps(old))
    new = {("softplus", 1.0): exhaustive.HighestCell("softplus", 1.0, count=7)}
    exhaustive.write_highest_tables(tmp_path, new, 4, 120.0, offset=3)
    text = (tmp_path / "exhaustive-highest.md").read_text()
    assert "(part 0: commit 0ld, in 1 minutes; part 3: commit " in text
    assert "| softplus | 0 | 12 |" in text
    assert "2 of the 4 parts: the bit patterns equal to 0 or 3 mod 4" in text
