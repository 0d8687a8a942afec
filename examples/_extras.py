"""The examples' third-party packages: a missing one is named, with the
extra that installs them, instead of a bare ModuleNotFoundError."""

from __future__ import annotations

import importlib
import sys

INSTALL = 'pip install -e ".[examples]"'


def require(*modules: str) -> list:
    """The modules, imported; or an exit that names the missing one and
    how to install the examples' packages (from a checkout)."""
    out = []
    for name in modules:
        try:
            out.append(importlib.import_module(name))
        except ImportError as err:
            script = sys.argv[0] or "this example"
            sys.exit(
                f"{script} needs {err.name or name}, which is not installed: "
                f"{INSTALL} from a checkout installs the examples' packages "
                "(flax, optax, scikit-learn, tqdm)."
            )
    return out
