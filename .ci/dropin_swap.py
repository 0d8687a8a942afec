"""pytest plugin for the drop-in stage: `jax.nn.softplus = jax_softplus.softplus`
before any test module (or the library it tests) is imported.

Loaded with `-p dropin_swap`, so it runs before the suite's conftest files.
The session fails if the swapped function was never called: a stage that
tested nothing of ours must not pass.
"""

import functools

import jax

import jax_softplus

_calls = 0


@functools.wraps(jax_softplus.softplus)
def _softplus(x, *args, **kwargs):
    global _calls
    _calls += 1
    return jax_softplus.softplus(x, *args, **kwargs)


jax.nn.softplus = _softplus


def pytest_sessionfinish(session, exitstatus):
    print(f"\ndrop-in: jax.nn.softplus is jax_softplus.softplus; {_calls} calls")
    if _calls == 0:
        session.exitstatus = 1
