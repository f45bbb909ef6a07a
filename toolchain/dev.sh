#!/usr/bin/env bash
# Set up a development checkout and run its main jobs. Idempotent: what is
# already there is not installed again.
#
#   toolchain/dev.sh demo   Python venv + the package, then `homeagent demo`
#   toolchain/dev.sh test   also the C toolchains, then every test: C contract
#                           tests (gcc, clang), sanitizers, the pytest suite,
#                           then toolchain/arm64.sh: the aarch64 wheel, and the
#                           C tests and the whole pytest suite under qemu-aarch64
#   toolchain/dev.sh fuzz   the libFuzzer targets, FUZZ_SECONDS each (60)
#   toolchain/dev.sh vm     also qemu-system, then toolchain/vm.sh: the service
#                           on a booted Debian 12, x86_64 and aarch64 (as root)
#
# Debian packages are installed with apt-get (through sudo when not root).
# The venv is .venv in the checkout; PYTHON picks the interpreter (python3).
set -euo pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
    demo|test|fuzz|vm) job=$1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PYTHON=${PYTHON:-python3}
VENV=$root/.venv
SHARED=$root/../shared

apt_install() {
    local missing=()
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    echo "installing Debian packages: ${missing[*]}"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

setup_python() {
    apt_install python3 python3-venv python3-dev gcc libc6-dev
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV"
    fi
    local log=$VENV/install.log
    # No build isolation: the build uses the venv's cffi and setuptools, and
    # the editable install compiles agent/stream/_core in place. The build's
    # chatter goes to a log, shown only if something fails.
    if ! { "$VENV/bin/python" -m pip install -q --upgrade pip "setuptools>=77" wheel "cffi>=1.17" &&
           "$VENV/bin/python" -m pip install -q --no-build-isolation -e ".${1:+[$1]}"; } >"$log" 2>&1; then
        cat "$log" >&2
        echo "dev.sh: installing the Python package failed (log above, also in $log)" >&2
        exit 1
    fi
}

setup_c() {
    apt_install make clang libclang-rt-14-dev gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
        binutils qemu-user mmdebstrap
}

# toolchain/vm.sh: qemu-system for both architectures, and for the arm64
# image's maintainer scripts qemu-user-static (binfmt_misc) and arch-test
setup_vm() {
    apt_install qemu-system-x86 qemu-system-arm qemu-utils seabios ipxe-qemu \
        qemu-user-static arch-test mmdebstrap e2fsprogs
}

case "$job" in
demo)
    setup_python ""
    "$VENV/bin/homeagent" demo
    ;;
test)
    setup_c
    setup_python test,bench
    suite=()
    if [ -d "$SHARED/jsontestsuite/test_parsing" ]; then
        suite=(JSONTESTSUITE="$SHARED/jsontestsuite/test_parsing")
    fi
    make -C csrc compilers sanitize "${suite[@]}"
    # what the device and service tests run for real: espeak-ng (a command
    # device), systemd-analyze and systemd-socket-activate
    apt_install espeak-ng systemd
    # This build's wheel and its dependencies' wheels: `homeagent install
    # --wheel` creates a venv from them offline in tests/test_install.py.
    local_wheels=$root/build/wheelhouse
    rm -rf "$local_wheels"
    if ! "$VENV/bin/python" -m pip wheel -q --no-build-isolation -w "$local_wheels" . \
            >"$VENV/wheelhouse.log" 2>&1; then
        cat "$VENV/wheelhouse.log" >&2
        echo "dev.sh: building the wheelhouse failed" >&2
        exit 1
    fi
    HOMEAGENT_WHEELHOUSE=$local_wheels "$VENV/bin/python" -m pytest -q tests
    PYTHON="$VENV/bin/python" bash toolchain/arm64.sh
    ;;
vm)
    setup_c
    setup_python test
    setup_vm
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    "${sudo[@]}" env PYTHON="$VENV/bin/python" bash toolchain/vm.sh
    ;;
fuzz)
    setup_c
    make -C csrc fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
    ;;
esac
