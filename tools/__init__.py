"""Measurement tools beside the op, not part of it: the wheel holds
`jax_softplus` only. Run them from a checkout's root (an editable install,
`pip install -e ".[bench]"`, has them on the path anywhere).

- `python -m tools.bench`: time the op against an XLA `a * b`,
  the naive formula, `jax.nn.softplus` autodiff and PyTorch (if installed),
  each derivative route against the formula, and eager calls.
- `python -m tools.accuracy`: error in ulps of every value and
  derivative against float64 and mpmath references, float64 by a search.
- `python -m tools.specials`: what every derivative returns at
  infinities, NaN, -0.0, beta = 0 and subnormal betas, each cell checked.

Private helpers: `_routes` (the routes of JAX autodiff), `_references` (the
exact values both tools and the tests measure against) and `_search` (the
worst-case search). The plots and the mpmath references need the `[bench]`
extra. The maintainers' tools
(the roofline of the compiled loop, the polynomial fits behind the kernels'
constants, the exhaustive float32 run) live in the repository's
`maintainers/`.
"""
