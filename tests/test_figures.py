"""One set of figures: the bounds the README and docs/accuracy.md quote
hold for the tables the accuracy tool wrote (docs/tables/accuracy.json).

A bound below a measured maximum fails here: rerun
`python -m jax_softplus.tools.accuracy --tables docs/tables` and quote what
it measured.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLES = json.loads((ROOT / "docs" / "tables" / "accuracy.json").read_text())
OURS = "jax_softplus"


def _bounds_table(path):
    """{row label: {column: cell}} of the table whose header starts with
    '| quantity | float32 | float64 |'."""
    lines = path.read_text().splitlines()
    start = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("| quantity | float32 | float64 |")
    )
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return rows


def _number(cell):
    m = re.match(r"([0-9.]+(?:e-?[0-9]+)?) (ulp|relative)", cell)
    return (float(m.group(1)), m.group(2)) if m else None


def _measured(label, column):
    """The largest error the tables measured for a bound's row and column,
    or None where the tables do not measure it."""
    dtypes = {
        "float32": ("f32",),
        "float64": ("f64",),
        "bfloat16 / float16": ("bf16", "f16"),
    }[column]
    if label.startswith(("`softplus_backward`", "`softplus`")):
        op = "backward" if "backward" in label else "forward"
        rows = [
            r["max_ulp"]
            for r in TABLES["results"]
            if r["op"] == op and r["impl"] == OURS and r["dtype"] in dtypes
        ]
    else:
        order = {"first": ("d ",), "second": ("d2 ",), "third": ("d3 ", "d4 ")}[
            label.split()[0]
        ]
        rows = [
            r["max_error"]
            for r in TABLES["derivatives"]
            if r["impl"] == OURS
            and r["dtype"] in dtypes
            and r["quantity"].startswith(order)
        ]
    return max(rows) if rows else None


DOCS = (ROOT / "README.md", ROOT / "docs" / "accuracy.md")


def test_the_readme_and_the_docs_quote_one_table():
    tables = [_bounds_table(p) for p in DOCS]
    assert tables[0] == tables[1]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_quoted_bound_holds_for_the_measured_tables(doc):
    checked = 0
    for label, row in _bounds_table(doc).items():
        for column, cell in row.items():
            if column == "bfloat16 / float16" and "correctly rounded" in cell:
                bound = (
                    1.0  # within 1 ulp of it: at most 1 ulp from the exact value here
                )
            elif _number(cell) is not None:
                bound = _number(cell)[0]
            else:
                continue
            measured = _measured(label, column)
            if measured is None:
                continue  # float64 values: tests/test_derivatives.py
            assert measured <= bound, (
                f"{doc.name}: {label} / {column}: {measured} > {bound}"
            )
            checked += 1
    assert checked >= 9


def test_the_tables_name_their_machine():
    machine = TABLES["machine"]
    assert machine["cpu"] and machine["jax"]
    for name in ("accuracy.md", "derivatives.md"):
        assert "Measured on " in (ROOT / "docs" / "tables" / name).read_text()


def test_the_docs_are_plain_text():
    # A backspace once stood where "\beta" was meant (a Python string's
    # escape): the page still built, with wrong math.
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        bad = sorted({c for c in text if ord(c) < 32 and c != "\n"})
        assert not bad, f"{path.relative_to(ROOT)} has control characters {bad}"


def test_the_tables_measure_every_derivative_in_both_dtypes_and_beta_ranges():
    from jax_softplus.tools import accuracy

    cells = {
        (r["quantity"], r["dtype"], r["betas"])
        for r in TABLES["derivatives"]
        if r["impl"] == OURS and r["count"] > 0
    }
    want = {
        (d[0], dt, b)
        for d in accuracy.DERIVATIVES
        for dt in ("f32", "f64")
        for b in accuracy.BETA_RANGES
    }
    assert want <= cells, sorted(want - cells)[:5]
