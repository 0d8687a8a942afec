#!/usr/bin/env bash
# The test suite on a JAX that needs a newer Python than this machine's 3.11:
# JAX 0.11 and later need Python 3.12+, so a Debian trixie root (Python 3.13)
# is made with debootstrap and the suite runs there against this checkout.
# Needs root, debootstrap (installed if missing) and Debian's mirror.
#   sudo bash .ci/newer-jax.sh [JAX_VERSION [JAXLIB_VERSION]]   # 0.11.2 by default
# NEWER_JAX_STEP=setup makes the root and installs, =test runs the tests in
# a root made before (.ci/run overlaps the setup with its own tests); both
# by default.
# Exit status: pytest's, or 3 when the root or its packages could not be set
# up (no root, no mirror), so that .ci/run can tell that apart from failures.
set -uo pipefail
cd "$(dirname "$0")/.."
jax_version="${1:-0.11.2}"
jaxlib_version="${2:-$jax_version}"
root="${NEWER_JAX_ROOT:-/tmp/jax-softplus-trixie}"
step="${NEWER_JAX_STEP:-all}"

cannot() {
    echo "newer-jax: cannot set up: $*" >&2
    exit 3
}

[ "$(id -u)" = 0 ] || cannot "needs root (debootstrap, chroot, mount)"
if [ ! -x "$root/usr/bin/python3" ]; then
    command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >/dev/null ||
        cannot "debootstrap is not installed and apt-get could not install it"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        trixie "$root" http://deb.debian.org/debian >/dev/null ||
        cannot "debootstrap of Debian trixie failed"
fi
# The host's name resolution and certificates (a proxy's CA included); gloo's
# CPU collectives (the multi-process test) resolve this machine's hostname.
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp /etc/hosts "$root/etc/hosts"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
# XLA's CPU runtime reads /proc (cpuinfo, memory); mounted for this run only.
if ! mountpoint -q "$root/proc"; then
    mount -t proc proc "$root/proc" || cannot "mounting /proc in $root failed"
    trap 'umount "$root/proc"' EXIT
fi
if [ "$step" != test ]; then
    rm -rf "$root/src"
    mkdir -p "$root/src"
    git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$root/src"
    chroot "$root" /bin/sh -euc "
        rm -rf /opt/venv && python3 -m venv /opt/venv
        cd /src && /opt/venv/bin/pip install -q -e '.[test]' \
            'jax==$jax_version' 'jaxlib==$jaxlib_version'
    " || cannot "installing jax $jax_version and the test extras failed"
fi
[ "$step" = setup ] && exit 0
[ -x "$root/opt/venv/bin/python" ] || cannot "no root set up at $root (NEWER_JAX_STEP=setup first)"
chroot "$root" /bin/sh -euc "
    cd /src
    /opt/venv/bin/python -c 'import jax, sys; print(\"jax\", jax.__version__, \"python\", sys.version.split()[0])'
    HOME=/root /opt/venv/bin/python -m pytest -q -p no:cacheprovider -n 2
    HOME=/root /opt/venv/bin/python -m pytest -q -p no:cacheprovider -n 2 \
        -m 'not bigmem' ${VERSION_SENSITIVE:-tests/test_lowering.py}
"
