"""Host devices for the examples, asked for before JAX starts.

XLA gives a CPU one device unless `XLA_FLAGS` asks for more
(`--xla_force_host_platform_device_count=N`), and reads the flag once, when
JAX first starts. The sharded examples call `ask_for_host_devices` before
they import JAX, so that run bare on a CPU they show data parallelism; a
count of your own in `XLA_FLAGS` wins. GPUs are not affected.
"""

from __future__ import annotations

import os
import sys

FLAG = "--xla_force_host_platform_device_count"
MORE_DEVICES = (
    "More devices: on a CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N "
    "before running (one process; see examples/multiprocess.py for several). "
    "On GPUs every local GPU is used."
)


def ask_for_host_devices(count: int = 8) -> str | None:
    """Add the flag for `count` host devices to XLA_FLAGS unless it names a
    count already, and return a line saying so (None where nothing was
    changed: the user chose, or JAX has started and it is too late)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if FLAG in flags or "jax" in sys.modules:
        return None
    os.environ["XLA_FLAGS"] = f"{flags} {FLAG}={count}".strip()
    return (
        f"XLA_FLAGS named no host device count, so this example asked XLA for "
        f"{count} ({FLAG}={count}); set XLA_FLAGS yourself to choose."
    )
