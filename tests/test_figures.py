"""One set of figures: the bounds the README and docs/accuracy.md quote
hold for the tables the tools wrote (docs/tables/accuracy.json,
exhaustive.json), and every measured figure quoted in prose (a ratio, a
share, an error in ulps, a time) is one the tables hold.

A bound below a measured maximum fails here: rerun
`python -m tools.accuracy --tables docs/tables` and quote what
it measured. A figure no table holds fails too: include the table's
fragment, or quote the table.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLE_DIR = ROOT / "docs" / "tables"
TABLES = json.loads((TABLE_DIR / "accuracy.json").read_text())
EXHAUSTIVE = json.loads((TABLE_DIR / "exhaustive.json").read_text())
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


def _ours(row, highest=False):
    """jax_softplus's columns (every platform's lowering), at HIGHEST or not."""
    impl = row["impl"]
    return impl.startswith(OURS) and ("HIGHEST" in impl) == highest


def _measured(label, column):
    """The largest error the tables measured for a bound's row and column,
    or None where the tables do not measure it."""
    dtypes = {
        "float32": ("f32",),
        "float64": ("f64",),
        "bfloat16 / float16": ("bf16", "f16"),
    }[column]
    if "HIGHEST" in label:
        rows = [
            r["max_ulp"]
            for r in TABLES["results"]
            if _ours(r, highest=True) and r["dtype"] in dtypes
        ]
        if column == "float64":  # the default kernel (HIGHEST is float32's)
            rows = [
                r["max_ulp"]
                for r in TABLES["results"]
                if _ours(r) and r["dtype"] == "f64"
            ]
        return max(rows) if rows else None
    if label.startswith(("`softplus_backward`", "`softplus`")):
        op = "backward" if "backward" in label else "forward"
        rows = [
            r["max_ulp"]
            for r in TABLES["results"]
            if r["op"] == op and _ours(r) and r["dtype"] in dtypes
        ]
        if column == "float32":  # every finite float32 src at 11 betas
            from exhaustive import ADVERSARIAL

            names = {"backward": ("softplus_backward", ADVERSARIAL)}.get(
                op, ("softplus",)
            )
            rows += [
                c["max_ulp"] for c in EXHAUSTIVE["cells"] if c["quantity"] in names
            ]
    else:
        order = {"first": ("d ",), "second": ("d2 ",), "third": ("d3 ", "d4 ")}[
            label.split()[1] if label.startswith("float32") else label.split()[0]
        ]
        # float64's evaluation is the same on every platform; float32's
        # differs on TPUs, which a row of their own bounds, and which the
        # first derivatives' row covers too.
        if "on TPUs" in label:
            platforms = ("tpu",)
        elif order == ("d ",) or column == "float64":
            platforms = ("cpu", "cuda", "tpu")
        else:
            platforms = ("cpu", "cuda")
        rows = [
            r["max_error"]
            for r in TABLES["derivatives"]
            if _ours(r)
            and r["count"] > 0
            and r["dtype"] in dtypes
            and r["platform"] in platforms
            and r["quantity"].startswith(order)
        ]
        if column == "float32" and order == ("d ",):
            rows += [
                c["max_ulp"]
                for c in EXHAUSTIVE["cells"]
                if c["quantity"].startswith("d ")
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
            if cell.startswith("1 ulp of the correctly rounded"):
                # A result 1 ulp from the exact value is at most 1 ulp from
                # its correct rounding (2 ulp away would be 1.5 from it).
                bound = 1.0
            elif _number(cell) is not None:
                bound = _number(cell)[0]
            else:
                continue
            measured = _measured(label, column)
            assert measured is not None, f"no table measures {label} / {column}"
            assert measured <= bound, (
                f"{doc.name}: {label} / {column}: {measured} > {bound}"
            )
            checked += 1
    assert checked >= 12


def test_the_tables_name_their_machine():
    for data in (TABLES, EXHAUSTIVE):
        assert data["machine"]["cpu"] and data["machine"]["jax"]
    for path in sorted(TABLE_DIR.glob("*.md")):
        assert path.read_text().startswith(("Measured on ", "Checked on ")), path.name


def test_the_exhaustive_run_covered_every_finite_float32_src():
    assert EXHAUSTIVE["stride"] == 1
    from exhaustive import ADVERSARIAL, BETAS, QUANTITIES

    cells = {(c["quantity"], c["beta"]) for c in EXHAUSTIVE["cells"]}
    assert cells == {(q, b) for q in (*QUANTITIES, ADVERSARIAL) for b in BETAS}
    # Every finite float32 src is counted once per cell, less those whose
    # exact value is not a normal number: at |beta| > 9.2e18 that is every
    # d softplus / d beta (below 1 / beta**2), and no other cell.
    for c in EXHAUSTIVE["cells"]:
        if c["quantity"] == ADVERSARIAL:
            assert c["count"] > 40_000_000, c  # the second pass: random t
            continue
        never = c["quantity"] == "d softplus/dbeta" and abs(c["beta"]) > 9.2e18
        assert (c["count"] == 0) == never, c
        assert c["count"] <= 4_278_190_080


# A measured figure in prose: a number (or a range of two) and its unit.
_UNIT = r"(?:\s?(?:ulps?\b|%|ms\b|µs|us\b|GB/s|TB/s|cycles\b)|(?:×|x)(?![\w]))"
_NUM = r"(?<![\w.^*])(\d+(?:\.\d+)?)"
_FIGURE = re.compile(_NUM + r"(?:(?:-|–| to )(\d+(?:\.\d+)?))?" + _UNIT)


def _prose(path):
    """The lines of a page outside fenced code and snippet includes."""
    fenced = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith("--8<--"):
            yield line


def _table_numbers():
    numbers = set()
    for path in TABLE_DIR.glob("*.md"):
        numbers |= set(re.findall(r"\d+(?:\.\d+)?", path.read_text()))
    return numbers


def _held(value, numbers, bounds):
    """A figure is held by the tables if one of their numbers rounds to it
    at the figure's precision (integers: only the same integer), or it is a
    bound the bounds table states."""
    if value in bounds:
        return True
    decimals = len(value.partition(".")[2])
    v = float(value)
    for t in numbers:
        if decimals == 0:
            if float(t) == v:
                return True
        elif len(t.partition(".")[2]) >= decimals and round(float(t), decimals) == v:
            return True
    return False


PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_figure_in_prose_is_one_the_tables_hold(page):
    numbers = _table_numbers()
    bounds = {
        str(_number(cell)[0]).removesuffix(".0")
        for doc in DOCS
        for row in _bounds_table(doc).values()
        for cell in row.values()
        if _number(cell)
    }
    missing = []
    for line in _prose(page):
        for m in _FIGURE.finditer(line):
            for value in filter(None, m.groups()):
                if not _held(value, numbers, bounds):
                    missing.append(f"{m.group(0)!r} in: {line.strip()[:100]}")
    assert not missing, "figures no table holds:\n" + "\n".join(missing)


def test_the_figure_check_can_fail():
    numbers = {"0.93", "1.26", "4271", "99.4"}
    assert _held("0.93", numbers, set()) and _held("1.3", numbers, set())
    assert _held("4271", numbers, set()) and _held("2", numbers, {"2"})
    assert not _held("0.57", numbers, set()) and not _held("4", numbers, set())
    found = [m.groups() for m in _FIGURE.finditer("0.83-0.93x, 99.4% and 2x2, 2**-24")]
    assert found == [("0.83", "0.93"), ("99.4", None)]


def test_the_docs_are_plain_text():
    # A backspace once stood where "\beta" was meant (a Python string's
    # escape): the page still built, with wrong math.
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        bad = sorted({c for c in text if ord(c) < 32 and c != "\n"})
        assert not bad, f"{path.relative_to(ROOT)} has control characters {bad}"


def test_the_tables_measure_every_derivative_in_both_dtypes_and_beta_ranges():
    from tools import accuracy

    want = {
        (d[0], dt, b, platform)
        for d in accuracy.DERIVATIVES
        for dt in ("f32", "f64")
        for b in accuracy.BETA_RANGES[dt]
        for platform in accuracy.PLATFORMS
    }
    assert want <= {c[:4] for c in _cells()}, sorted(want - {c[:4] for c in _cells()})
    # A cell may count nothing only at the extreme ranges of |beta|, where a
    # derivative scaled by a power of beta is normal nowhere (d3 softplus /
    # dx3 = beta**2 s''(t) below |beta| = 1e-19, d softplus / d beta below
    # 1 / beta**2 above 9.2e18); every quantity counts in the others.
    middle = (
        list(accuracy.BETA_RANGES["f32"])[1:-1]
        + list(accuracy.BETA_RANGES["f64"])[1:-1]
    )
    for q, dt, b, _, count in _cells():
        assert count or b not in middle, (q, dt, b)


def _cells():
    return {
        (r["quantity"], r["dtype"], r["betas"], r["platform"], r["count"])
        for r in TABLES["derivatives"]
        if _ours(r)
    }


def test_the_tables_measure_highest_on_every_platform_with_float64():
    from tools import accuracy

    measured = {
        (r["op"], r["dtype"], r["platform"])
        for r in TABLES["results"]
        if _ours(r, highest=True) and r["count"] > 0
    }
    want = {
        (op, dt, platform)
        for op in ("backward", "forward")
        for dt in ("f32", "bf16", "f16")
        for platform in accuracy.PLATFORMS
        if platform != "tpu"
    }
    assert want <= measured, sorted(want - measured)


def _cells_of(line):
    """The cells of a Markdown table row; an escaped pipe is text."""
    return re.split(r"(?<!\\)\|", line.strip())[1:-1]


def test_every_table_row_has_its_headers_cells():
    # A route's label with unescaped pipes ("|grad_x|^2") once split its
    # rows into eight cells under a six-cell header: the figures shifted
    # columns in the built page.
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        header = None
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.startswith("|"):
                header = None
                continue
            if header is None:
                header = len(_cells_of(line))
                continue
            assert len(_cells_of(line)) == header, f"{path.name}:{number}: {line}"


def test_the_table_check_can_fail():
    assert len(_cells_of("| gradient penalty (|grad_x|^2) | f32 |")) == 4
    assert len(_cells_of("| gradient penalty (\\|grad_x\\|^2) | f32 |")) == 2
