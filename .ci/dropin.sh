#!/usr/bin/env bash
# The drop-in stage: numpyro's own tests, unmodified from its released sdist,
# with jax.nn.softplus replaced by jax_softplus.softplus before they import
# (.ci/dropin_swap.py), in a venv of their own with pinned versions.
# DROPIN_STEP=setup makes the venv and unpacks the suites, =test runs them
# (.ci/run overlaps the setup with its own tests); both by default.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$root/.ci-venv-dropin
work=$root/.ci-dropin
step="${DROPIN_STEP:-all}"
if [ "$step" != test ]; then
    rm -rf "$venv" "$work"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q . "jax==0.10.2" "jaxlib==0.10.2" \
        "numpyro==0.21.0" "pytest==9.0.3" "numpy==2.4.6"
    "$venv/bin/python" -m pip download -q --no-deps --no-binary :all: \
        "numpyro==0.21.0" -d "$work"
    tar -xzf "$work"/numpyro-0.21.0.tar.gz -C "$work"
fi
[ "$step" = setup ] && exit 0
cd "$work/numpyro-0.21.0"
PYTHONPATH="$root/.ci" "$venv/bin/python" -m pytest -q -p dropin_swap \
    -p no:cacheprovider test/test_transforms.py test/test_nn.py test/test_flows.py
cd "$root"
rm -rf "$venv" "$work"
