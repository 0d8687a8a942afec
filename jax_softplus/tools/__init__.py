"""Measurement tools beside the op, not part of it.

- `python -m jax_softplus.tools.bench`: time the op against an XLA `a * b`,
  the naive formula, `jax.nn.softplus` autodiff and PyTorch (if installed).
- `python -m jax_softplus.tools.accuracy`: error in ulps of every value and
  derivative against float64 and mpmath references.
- `python -m jax_softplus.tools.roofline`: the loop XLA:CPU compiles, read
  from its object code, against the core's measured throughput.
- `python -m jax_softplus.tools.fit`: regenerate the kernels' polynomial
  coefficients (weighted minimax fits).

Their plots, the mpmath check and the fits need the `[bench]` extra.
"""
