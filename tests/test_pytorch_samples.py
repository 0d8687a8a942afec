"""maintainers/pytorch_samples.py: float64 against PyTorch on its own
samples, per element (needs torch and expecttest; skipped without them)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")
pytest.importorskip("mpmath")

import pytorch_samples  # noqa: E402


def test_never_worse_than_pytorch_by_more_than_one_ulp(tmp_path):
    rows = pytorch_samples.summary(pytorch_samples.compare(draws=2))
    assert set(rows) == {"softplus", "softplus_backward"}
    for _op, (n, ours, _theirs, worse, excess) in rows.items():
        assert n > 100 and worse == 0 and excess <= 1.0 and ours <= 1.0
    text = pytorch_samples.markdown(rows, 2, "x")
    assert text.startswith("Measured on ") and "| `softplus` |" in text
