"""maintainers/same_bits.py: its routes hash every output bit, and its
options refuse what they cannot take. (The sweep itself is 7.3 minutes at
`--stride 256`; here its routes run on a few hundred elements.)"""

from __future__ import annotations

import numpy as np
import pytest
import same_bits

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


@pytest.mark.parametrize(
    "argv", [["--stride", "0"], ["--near", "x"], ["--compare", "/no/such.json"]]
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
