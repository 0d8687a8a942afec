"""SoftPlus and oneDNN's SoftPlusBackward as a JAX primitive.

`softplus_backward(src, diff_dst, beta)` computes
`diff_dst * sigmoid(beta * src)` through the primitive `softplus_backward_p`;
`softplus(x, beta)` is the forward op (a drop-in for `jax.nn.softplus`), whose
custom VJP binds that primitive; `softplus_backward_inplace` donates
`diff_dst` under `jax.jit`.
"""

from jax_softplus._backward import softplus_backward, softplus_backward_inplace
from jax_softplus._dispatch import TUNED_CPU_OPTIONS
from jax_softplus._primitive import softplus_backward_p
from jax_softplus._softplus import softplus

__all__ = [
    "TUNED_CPU_OPTIONS",
    "softplus",
    "softplus_backward",
    "softplus_backward_inplace",
    "softplus_backward_p",
]
__version__ = "0.5.0"
