"""Durations, dates and machines the docs quote are the ones the tables or
run logs hold: `docs/tables/*.md` (each names its machine and, where a tool
records it, how long it ran), `docs/tables/timings.md` (commands timed by
`maintainers/timed.py`), and the folders of `benchmarks/results/`.

The sibling of test_figures.py, which holds ratios and errors: a page that
says the exhaustive run takes 75 minutes where its table says 48, or names
a Zen 5 where the table was measured on a Zen 4, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "docs" / "tables"
# Where the docs speak: pages, the maintainers' README, the tools' help
# (docstrings and epilogs), the GPU script's header. The CHANGELOG is
# history, each entry naming its own machine.
PAGES = [
    ROOT / "README.md",
    ROOT / "maintainers" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "jax_softplus" / "tools").glob("*.py")),
    *sorted((ROOT / "maintainers").glob("*.py")),
    *sorted((ROOT / "benchmarks").glob("*.py")),
    ROOT / "benchmarks" / "gpu.sh",
]
# A measured duration: "48 minutes", "about 8 minutes", "2.5 min". A limit
# ("within 10 minutes", "under 10 minutes") is not a measurement.
_DURATION = re.compile(r"(?<!within )(?<!under )\b(\d+(?:\.\d+)?) (?:minutes|min)\b")
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_CPU = re.compile(r"\b(Zen \d\w?|Xeon|Sapphire Rapids|Ice Lake|Granite Rapids)\b")


def _records():
    """What the tables and logs hold: their text, all of it."""
    texts = [p.read_text() for p in sorted(TABLES.glob("*.md"))]
    texts += [p.read_text() for p in sorted(TABLES.glob("*/*.md"))]
    names = [p.name for p in (ROOT / "benchmarks" / "results").iterdir()]
    return "\n".join(texts + names)


def _durations(text):
    """Minutes that the records hold (a table's "in N minutes", a timed
    command's row), and each rounded to a whole minute."""
    held = {float(m.group(1)) for m in re.finditer(r"\bin (\d+(?:\.\d+)?) min", text)}
    timings = TABLES / "timings.md"
    if timings.exists():
        for line in timings.read_text().splitlines():
            if line.startswith("| `"):
                held.add(float(line.split("|")[2]))
    return held | {float(round(v)) for v in held}


def _quoted(pattern):
    for path in PAGES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for m in pattern.finditer(line):
                yield path.relative_to(ROOT), number, m


RECORDS = _records()


def test_every_quoted_duration_is_a_recorded_one():
    held = _durations(RECORDS)
    bad = [
        f"{path}:{number}: {m.group(0)}"
        for path, number, m in _quoted(_DURATION)
        if float(m.group(1)) not in held
    ]
    assert not bad, "durations no table or log holds:\n" + "\n".join(bad)


def test_every_quoted_date_is_a_recorded_one():
    bad = [
        f"{path}:{number}: {m.group(0)}"
        for path, number, m in _quoted(_DATE)
        if m.group(0) not in RECORDS
    ]
    assert not bad, "dates no table, log or results folder holds:\n" + "\n".join(bad)


def test_every_named_cpu_is_one_a_table_was_measured_on():
    bad = [
        f"{path}:{number}: {m.group(0)}"
        for path, number, m in _quoted(_CPU)
        if m.group(0) not in RECORDS and path.suffix == ".md"
    ]
    assert not bad, "machines no table names:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "text, held",
    [
        ("takes about 75 minutes", False),
        ("in 48 minutes", True),
        ("within 10 minutes", None),
        ("2.5 min on", False),
    ],
)
def test_the_duration_check_can_fail(text, held):
    found = list(_DURATION.finditer(text))
    if held is None:
        assert not found
        return
    assert bool(found) and (float(found[0].group(1)) in {48.0}) == held


def test_timed_records_a_row_per_command(tmp_path):
    import timed

    timed.record(tmp_path, "pytest -q", 12.34, 3.21, "a machine", "2026-12-03")
    timed.record(tmp_path, "bench", 5.0, None, "a machine", "2026-12-03")
    timed.record(tmp_path, "pytest -q", 11.0, 3.0, "a machine", "2026-12-04")
    text = (tmp_path / "timings.md").read_text()
    assert text.count("`pytest -q`") == 1 and "| 11.0 | 3.0 GiB |" in text
    assert "| 5.0 | not measured |" in text
    assert {11.0, 5.0} <= _durations_of(text)


def _durations_of(text):
    return {
        float(line.split("|")[2])
        for line in text.splitlines()
        if line.startswith("| `")
    }


def test_a_page_names_the_machines_of_the_tables_it_shows():
    # A page that includes a table says, in its own words, which machines
    # measured it: a vendor or GPU the table names is named on the page.
    vendors = ("Xeon", "EPYC", "H100", "H200")
    bad = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text()
        own = re.sub(r'--8<-- "[^"]+"', "", text)
        for name in re.findall(r'--8<-- "(tables/[^"]+\.md)"', text):
            table = (ROOT / "docs" / name).read_text()
            for v in vendors:
                if v in table and v not in own:
                    bad.append(f"{page.name} shows {name}, measured on {v}")
    assert not bad, "\n".join(bad)


def test_the_public_docstrings_claim_highest_on_every_platform():
    # README: HIGHEST is correctly rounded on CPUs, GPUs and TPUs (on TPUs
    # in float32 double words); no docstring may say otherwise.
    import jax_softplus

    for name in ("softplus", "softplus_backward", "softplus_backward_inplace"):
        doc = getattr(jax_softplus, name).__doc__
        assert "not on TPUs" not in doc and "error at lowering" not in doc, name
