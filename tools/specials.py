"""Special inputs: `python -m tools.specials`.

What every derivative returns where the answer is a limit or a convention.

Each row of the table is an input where the answer is a limit, a
convention or a sign: an infinite `src` (or `x`), NaN, -0.0, beta = 0, a
subnormal beta (read as 0, concrete or traced) and a tiny beta, an infinite
`diff_dst`. Each cell is the exact value there (0 exactly, never NaN, where
the exact derivative is 0; NaN where it is 0 * inf or NaN). The tool
evaluates every cell in float32 and float64, at the default accuracy and at
HIGHEST, with beta concrete (where the quantity leaves it so) and traced,
and prints the table with a check mark per cell that holds in every one of
those; `--tables DIR` writes it for the
docs. A cell holds when the value is the expected special (0 of either
sign, inf of the expected sign, NaN) or within 4 ulp of an expected finite
value.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from tools import _references as references
from tools import _routes as derivatives
from tools._common import machine, machine_line, output_dir, require, x64

INF, NAN = math.inf, math.nan
LN2 = math.log(2.0)

# (p, q, r): d^p/dsrc^p d^q/dbeta^q d^r/ddiff_dst^r, and the column's title.
BACKWARD = (
    ((0, 0, 0), "value"),
    ((1, 0, 0), "d/d src"),
    ((0, 1, 0), "d/d beta"),
    ((0, 0, 1), "d/d diff_dst"),
    ((2, 0, 0), "d2/d src2"),
    ((1, 1, 0), "d2/d src d beta"),
    ((0, 2, 0), "d2/d beta2"),
    ((0, 3, 0), "d3/d beta3"),
    ((4, 0, 0), "d4/d src4"),
)
FORWARD = (
    ((0, 0, 0), "value"),
    ((1, 0, 0), "d/dx"),
    ((0, 1, 0), "d/d beta"),
    ((2, 0, 0), "d2/dx2"),
    ((1, 1, 0), "d2/dx d beta"),
    ((0, 2, 0), "d2/d beta2"),
    ((0, 3, 0), "d3/d beta3"),
)

DTYPES = (np.float32, np.float64)
ZERO = ("0", 0.0)
NAN_ = ("NaN", NAN)
# A cell whose value is mpmath's at the row's input (a limit row's).
EXACT = object()


@dataclass(frozen=True)
class Row:
    label: str  # the input, as the table shows it
    x: float  # src or x
    dd: float  # diff_dst (backward only)
    beta: float
    # One (text, value) per column: value a float (inf and NaN included),
    # or None where the quantity diverges (any non-finite value holds).
    cells: tuple
    # The concrete beta is refused (softplus at beta = 0): ValueError.
    refused: bool = False


DD = 2.0
B = 1.5
X = 0.7
SUB = {np.dtype(np.float32): 1e-40, np.dtype(np.float64): 1e-310}

_BACKWARD_ROWS = (
    Row("src = +inf", INF, DD, B, (("dd", DD), ZERO, ZERO, ("1", 1.0)) + (ZERO,) * 5),
    Row("src = -inf", -INF, DD, B, (ZERO,) * 9),
    Row("src = +inf, beta < 0", INF, DD, -B, (ZERO,) * 9),
    Row("src = NaN", NAN, DD, B, (NAN_,) * 9),
    Row(
        "src = -0.0",
        -0.0,
        DD,
        B,
        (
            ("dd / 2", DD / 2),
            ("dd beta / 4", DD * B / 4),
            ZERO,
            ("1/2", 0.5),
            ZERO,
            ("dd / 4", DD / 4),
            ZERO,
            ZERO,
            ZERO,
        ),
    ),
    Row(
        "beta = 0 (and subnormal beta)",
        X,
        DD,
        0.0,
        (
            ("dd / 2", DD / 2),
            ZERO,
            ("dd src / 4", DD * X / 4),
            ("1/2", 0.5),
            ZERO,
            ("dd / 4", DD / 4),
            ZERO,
            ("-dd src^3 / 8", -DD * X**3 / 8),
            ZERO,
        ),
    ),
    Row(
        "beta = -0.0 (and negative subnormal beta)",
        X,
        DD,
        -0.0,
        (
            ("dd / 2", DD / 2),
            ZERO,
            ("dd src / 4", DD * X / 4),
            ("1/2", 0.5),
            ZERO,
            ("dd / 4", DD / 4),
            ZERO,
            ("-dd src^3 / 8", -DD * X**3 / 8),
            ZERO,
        ),
    ),
    Row("beta = 0, src = +-inf", INF, DD, 0.0, (NAN_,) * 9),
    Row(
        "beta = 1e-30 (tends to beta = 0)",
        X,
        DD,
        1e-30,
        tuple(
            (text, EXACT)
            for text in (
                "dd / 2",
                "dd beta / 4",
                "dd src / 4",
                "1/2",
                "-dd beta^3 src / 8",
                "dd / 4",
                "-dd beta src^3 / 8",
                "-dd src^3 / 8",
                "dd beta^5 src / 4",
            )
        ),
    ),
    Row(
        "diff_dst = +inf",
        X,
        INF,
        B,
        (
            ("inf", INF),
            ("inf", INF),
            ("inf", INF),
            ("s(t)", 1 / (1 + math.exp(-B * X))),
            ("-inf", -INF),
            ("inf", INF),
            ("-inf", -INF),
            ("-inf", -INF),
            ("inf", INF),
        ),
    ),
    Row(
        "diff_dst = +inf, src = -inf",
        -INF,
        INF,
        B,
        (NAN_, NAN_, NAN_, ZERO, NAN_, NAN_, NAN_, NAN_, NAN_),
    ),
)

_FORWARD_ROWS = (
    Row("x = +inf", INF, 1.0, B, (("inf", INF), ("1", 1.0)) + (ZERO,) * 5),
    Row("x = -inf", -INF, 1.0, B, (ZERO,) * 7),
    Row("x = +inf, beta < 0", INF, 1.0, -B, (ZERO,) * 7),
    Row(
        "x = -inf, beta < 0", -INF, 1.0, -B, (("-inf", -INF), ("1", 1.0)) + (ZERO,) * 5
    ),
    Row("x = NaN", NAN, 1.0, B, (NAN_,) * 7),
    Row(
        "x = -0.0",
        -0.0,
        1.0,
        B,
        (
            ("ln2 / beta", LN2 / B),
            ("1/2", 0.5),
            ("-ln2 / beta^2", -LN2 / B**2),
            ("beta / 4", B / 4),
            ZERO,
            ("2 ln2 / beta^3", 2 * LN2 / B**3),
            ("-6 ln2 / beta^4", -6 * LN2 / B**4),
        ),
    ),
    Row(
        "beta = 0 (and subnormal beta), traced",
        X,
        1.0,
        0.0,
        (
            ("inf", INF),
            ("1/2", 0.5),
            ("-inf", -INF),
            ZERO,
            ("x / 4", X / 4),
            ("diverges", None),
            ("diverges", None),
        ),
        refused=True,
    ),
    # ln 2 / beta: the limit from beta's side of 0.
    Row(
        "beta = -0.0 (and negative subnormal beta), traced",
        X,
        1.0,
        -0.0,
        (
            ("-inf", -INF),
            ("1/2", 0.5),
            ("-inf", -INF),
            ZERO,
            ("x / 4", X / 4),
            ("diverges", None),
            ("diverges", None),
        ),
        refused=True,
    ),
    Row(
        "beta = 0, x = +-inf, traced",
        INF,
        1.0,
        0.0,
        (NAN_, NAN_, NAN_, NAN_, NAN_, ("diverges", None), ("diverges", None)),
        refused=True,
    ),
)


# Each cell is checked at both accuracies: the rules are the same.
ACCURACIES = (None, "HIGHEST")


@functools.cache
def _functions(accuracy):
    import jax_softplus

    level = None if accuracy is None else getattr(jax.lax.AccuracyMode, accuracy)
    return (
        (
            "backward",
            lambda s, b, d: jax_softplus.softplus_backward(s, d, b, accuracy=level),
        ),
        ("softplus", lambda x, b, d: jax_softplus.softplus(x, b, accuracy=level)),
    )


def _evaluate(fun, columns, xs, dds, beta, dtype, traced, accuracy=None):
    """{column index: values or the exception's name} for the elements
    (xs, dds) at one beta: one jit for every column that can be compiled
    together, beta its argument (traced) or a constant closed over."""
    specs = tuple((str(k), fun, pqr) for k, (pqr, _) in enumerate(columns))
    x = jnp.asarray(np.asarray(xs, dtype))
    d = jnp.asarray(np.asarray(dds, dtype))

    def run(names):
        f = derivatives.compiled("grad", names, _functions(accuracy))
        if traced:
            return f(x, jnp.asarray(beta, dtype), d)
        return jax.jit(lambda x, d: f.__wrapped__(x, beta, d))(x, d)

    try:
        got = run(specs)
    except ValueError:
        # A concrete beta refused by some column (softplus at beta = 0): each
        # column alone, so that the others are still checked.
        got = {}
        for spec in specs:
            try:
                got.update(run((spec,)))
            except ValueError as err:
                got[spec[0]] = type(err).__name__
    return {int(k): v if isinstance(v, str) else np.asarray(v) for k, v in got.items()}


def _exact(fun, pqr, row, dtype):
    """The value of a cell marked EXACT: mpmath's, at the dtype's inputs."""
    v, _ = references.mp_derivative(
        fun, pqr, dtype(row.x), dtype(row.beta), dtype(row.dd)
    )
    return float(v)


def _holds(got, expected, dtype):
    if isinstance(got, str):
        return False
    if expected is None:
        return not math.isfinite(got)
    if math.isnan(expected):
        return math.isnan(got)
    if abs(expected) < jnp.finfo(dtype).tiny:  # 0, or flushed to it
        return got == 0
    if math.isinf(expected):
        return got == expected
    ulp = float(np.spacing(np.asarray(abs(expected), dtype)))
    return abs(got - expected) <= 4 * ulp


def _betas(row, dtype):
    """The betas a row stands for: a zero stands for the subnormal betas of
    its sign too."""
    if row.beta == 0.0:
        sign = math.copysign(1.0, row.beta)
        return (row.beta, sign * SUB[np.dtype(dtype)])
    return (row.beta,)


def check(
    fun,
    columns,
    rows,
    log: Callable | None = None,
    dtypes=DTYPES,
    accuracies=ACCURACIES,
):
    """[(row, [(text, holds, failures)])]: each cell checked in each of
    `dtypes` and `accuracies` (None, "HIGHEST"), with beta concrete and
    traced (a refused concrete beta must raise ValueError)."""
    fails: dict = {(row.label, k): [] for row in rows for k in range(len(columns))}
    for dtype, accuracy in itertools.product(dtypes, accuracies):
        with x64(dtype == np.float64):
            groups: dict = {}
            for row in rows:
                for beta in _betas(row, dtype):
                    # -0.0 == 0.0: grouped by the sign of zero too.
                    groups.setdefault((beta, math.copysign(1, beta)), []).append(row)
            for (beta, _), group in groups.items():
                for traced in (False, True):
                    mode = "traced" if traced else "concrete"
                    if accuracy:
                        mode += f", accuracy {accuracy}"
                    if log:
                        log(f"{fun} {np.dtype(dtype).name} beta={beta!r} {mode}")
                    got = _evaluate(
                        fun,
                        columns,
                        [r.x for r in group],
                        [r.dd for r in group],
                        beta,
                        dtype,
                        traced,
                        accuracy,
                    )
                    for i, row in enumerate(group):
                        for k, (pqr, _) in enumerate(columns):
                            value = (
                                got[k] if isinstance(got[k], str) else float(got[k][i])
                            )
                            if row.refused and not traced and pqr[1] == 0:
                                ok = value == "ValueError"  # d/d beta traces it
                            else:
                                expected = row.cells[k][1]
                                if expected is EXACT:
                                    expected = _exact(fun, pqr, row, dtype)
                                ok = _holds(value, expected, dtype)
                            if not ok:
                                fails[(row.label, k)].append(
                                    f"{np.dtype(dtype).name} beta={beta!r} "
                                    f"{mode}: {value!r}"
                                )
    return [
        (
            row,
            [
                (row.cells[k][0], not fails[(row.label, k)], fails[(row.label, k)])
                for k in range(len(columns))
            ],
        )
        for row in rows
    ]


def markdown(title, columns, checked) -> str:
    head = f"| {title} | " + " | ".join(c for _, c in columns) + " |"
    lines = [head, "|---|" + "---|" * len(columns)]
    for row, cells in checked:
        text = [t if ok else f"**{t} (fails)**" for t, ok, _ in cells]
        label = row.label + (" (a concrete one: `ValueError`)" if row.refused else "")
        lines.append(f"| {label} | " + " | ".join(text) + " |")
    return "\n".join(lines) + "\n"


# (function, title, columns, rows, what the other inputs are)
TABLES = (
    (
        "backward",
        "`softplus_backward(src, dd, beta)`",
        BACKWARD,
        _BACKWARD_ROWS,
        f"dd = {DD:g} and beta = {B:g} unless the row says otherwise, "
        f"src = {X:g} where finite",
    ),
    (
        "softplus",
        "`softplus(x, beta)`",
        FORWARD,
        _FORWARD_ROWS,
        f"beta = {B:g} unless the row says otherwise, x = {X:g} where finite",
    ),
)
HEADER = (
    "in float32 and float64, at the default accuracy and at "
    "`accuracy=jax.lax.AccuracyMode.HIGHEST` alike, with beta concrete and "
    "traced (a subnormal beta of the zero's sign included where a row says "
    "beta = 0 or -0.0); a 0 cell is 0 of either sign, and NaN is NaN of any "
    "sign. s(t) is the sigmoid at t = beta src."
)


def tables(log=None, dtypes=DTYPES):
    """The checked tables as markdown, and the cells that fail."""
    parts, failures = [], []
    started = time.perf_counter()
    for k, (fun, title, columns, rows, where) in enumerate(TABLES, 1):
        spent = time.perf_counter() - started
        print(
            f"[{k}/{len(TABLES)}, {spent / 60:.1f} min] {fun}: {len(rows)} rows",
            file=sys.stderr,
            flush=True,
        )
        checked = check(fun, columns, rows, log, dtypes)
        parts.append(f"{where}:\n\n" + markdown(title, columns, checked))
        for row, cells in checked:
            for (_, name), (_, ok, fails) in zip(columns, cells, strict=True):
                if not ok:
                    failures.append(f"{fun} {row.label}, {name}: {'; '.join(fails)}")
    return "\n".join(parts), failures


def expected_tables():
    """The tables as they read when every cell holds (no evaluation)."""
    parts = []
    for _, title, columns, rows, where in TABLES:
        checked = [(row, [(text, True, []) for text, _ in row.cells]) for row in rows]
        parts.append(f"{where}:\n\n" + markdown(title, columns, checked))
    return "\n".join(parts)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m tools.specials",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--tables", type=output_dir, metavar="DIR", help="write specials.md into DIR"
    )
    args = p.parse_args(argv)
    # Every EXACT cell is mpmath's value: nothing runs without it.
    require("mpmath", "the specials table", p)
    text, failures = tables()
    where = (
        f"Checked on {machine_line(machine())} by `python -m tools.specials`, {HEADER}"
    )
    print(where + "\n\n" + text)
    if args.tables:
        os.makedirs(args.tables, exist_ok=True)
        with open(os.path.join(args.tables, "specials.md"), "w") as f:
            f.write(where + "\n\n" + text)
        print(f"written to {os.path.join(args.tables, 'specials.md')}")
    for line in failures:
        print("FAILS:", line, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
