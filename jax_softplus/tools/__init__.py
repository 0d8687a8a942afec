"""Measurement tools beside the op, not part of it.

- `python -m jax_softplus.tools.bench`: time the op against an XLA `a * b`,
  the naive formula, `jax.nn.softplus` autodiff and PyTorch (if installed).
- `python -m jax_softplus.tools.accuracy`: error in ulps of every value and
  derivative against float64 and mpmath references.
- `derivatives` and `references`: the routes of JAX autodiff and the
  exact values (mpmath) both tools and the tests measure with.

Their plots and the mpmath references need the `[bench]` extra. The
maintainers' tools (the roofline of the compiled loop, the polynomial fits
behind the kernels' constants) live in the repository's `maintainers/`.
"""
