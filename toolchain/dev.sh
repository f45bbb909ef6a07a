#!/usr/bin/env bash
# Set up a development checkout and run its main jobs. Idempotent: what is
# already there is not installed again.
#
#   toolchain/dev.sh demo   Python venv + the package, then `homeagent demo`
#   toolchain/dev.sh test   also the C toolchains and qemu-system, then every
#                           test: C contract tests (gcc, clang), sanitizers, the
#                           pytest suite, toolchain/arm64.sh (the aarch64 wheel,
#                           the C tests and the whole pytest suite under
#                           qemu-aarch64) and, beside them, toolchain/vm.sh (the
#                           service on a booted Debian 12, x86_64 then aarch64)
#   toolchain/dev.sh fuzz   the libFuzzer targets, FUZZ_SECONDS each (60)
#   toolchain/dev.sh vm     only toolchain/vm.sh, in the foreground
#
# Debian packages are installed with apt-get (through sudo when not root).
# The venv is .venv in the checkout; PYTHON picks the interpreter (python3).
# VM=x86_64 or VM=aarch64 runs the VM checks on one architecture only,
# VM=skip leaves them out (the job says so at its end).
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
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

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# toolchain/vm.sh in the background beside the rest of the test job: under
# TCG it keeps a core busy for most of the job (one VM at a time), beside
# the host suite and the emulated one's two workers. It runs in a session of its own
# (setsid: vm.sh's pid is its process group), so that a test job that ends
# early stops it and its qemu with it. Its output goes to build/vm/vm.log;
# vm_wait prints its summary.
VM_LOG=$root/build/vm/vm.log
vm_pid=
vm_start() {
    local arches=(x86_64 aarch64)
    case "${VM:-}" in
        skip) return 0 ;;
        x86_64|aarch64) arches=("$VM") ;;
        ""|all) ;;
        *) echo "dev.sh: VM=$VM: x86_64, aarch64, skip or unset (both)" >&2; exit 2 ;;
    esac
    setup_vm
    mkdir -p "$(dirname "$VM_LOG")"
    rm -f "$VM_LOG.pgid"
    echo "== vm: toolchain/vm.sh ${arches[*]} in the background, log: build/vm/vm.log"
    as_root env PYTHON="$VENV/bin/python" VM_PGID_FILE="$VM_LOG.pgid" \
        setsid bash toolchain/vm.sh "${arches[@]}" >"$VM_LOG" 2>&1 </dev/null &
    vm_pid=$!
}
# tests/test_homeassistant_tool.py's Home Assistant: its venv under build/,
# built once (minutes of downloads; kept while tests/homeassistant.py's
# VERSION stays), in the background beside the C tests. Without a registry
# the build fails and those tests skip, saying why.
ha_pid=
ha_start() {
    echo "== Home Assistant venv (tests/homeassistant.py build) in the background"
    "$VENV/bin/python" tests/homeassistant.py build >"$root/build/homeassistant.log" 2>&1 &
    ha_pid=$!
}
# The host suite waits for it (in its own background job: the emulated
# suite does not need it and starts at once).
ha_poll() {
    while [ -n "$ha_pid" ] && kill -0 "$ha_pid" 2>/dev/null; do sleep 2; done
}
ha_wait() {
    wait "$ha_pid" || echo "dev.sh: no Home Assistant venv, its tests skipped:" >&2
    ha_pid=
    echo "== Home Assistant venv: $(tail -n 1 "$root/build/homeassistant.log")"
}
host_pid=
# a test job that ends early stops what it started in the background
stop_background() {
    if [ -n "$ha_pid" ] && kill -0 "$ha_pid" 2>/dev/null; then
        kill -TERM "$ha_pid" 2>/dev/null || true
    fi
    if [ -n "$host_pid" ] && kill -0 "$host_pid" 2>/dev/null; then
        kill -TERM "$host_pid" 2>/dev/null || true
    fi
    if [ -n "$vm_pid" ] && kill -0 "$vm_pid" 2>/dev/null && [ -s "$VM_LOG.pgid" ]; then
        echo "== vm: stopping toolchain/vm.sh (the test job ended before it)" >&2
        as_root kill -TERM -- "-$(cat "$VM_LOG.pgid")" 2>/dev/null || true
    fi
}
trap stop_background EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
vm_wait() {
    if [ -z "$vm_pid" ]; then
        echo "== vm: skipped (VM=skip): the booted-Debian checks did not run"
        return 0
    fi
    local t0=$SECONDS rc=0
    wait "$vm_pid" || rc=$?
    echo "== vm: toolchain/vm.sh ended with status $rc ($((SECONDS - t0)) s waited for it)"
    sed -n '/^== vm summary$/,$p' "$VM_LOG"
    if [ "$rc" -ne 0 ] && ! grep -q '^== vm summary$' "$VM_LOG"; then
        tail -n 40 "$VM_LOG"
    fi
    return "$rc"
}

case "$job" in
demo)
    setup_python ""
    "$VENV/bin/homeagent" demo
    ;;
test)
    setup_c
    setup_python test,bench,voice
    mkdir -p "$root/build"
    ha_start
    # the aarch64 wheel first: the VM's aarch64 run installs it, and from
    # here on nothing builds it again while that run may read it
    PYTHON="$VENV/bin/python" bash toolchain/arm64.sh sysroot
    PYTHON="$VENV/bin/python" bash toolchain/arm64.sh wheel
    vm_start
    suite=()
    if [ -d "$SHARED/jsontestsuite/test_parsing" ]; then
        suite=(JSONTESTSUITE="$SHARED/jsontestsuite/test_parsing")
    fi
    make -C csrc compilers sanitize "${suite[@]}"
    # what the device and service tests run for real: espeak-ng (a command
    # device, the Wyoming TTS servers), aplay (a stop kills it),
    # systemd-analyze and systemd-socket-activate, mosquitto (the MQTT tests' broker)
    apt_install espeak-ng alsa-utils systemd mosquitto mosquitto-clients
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
    rc=0
    PYTHON="$VENV/bin/python" bash toolchain/arm64.sh site
    # The host suite runs beside the emulated one (with the VM, the two
    # cores of a CI machine stay busy), once the Home Assistant venv is
    # built. Its own temporary directory, and its output shown whole when
    # it is done.
    host_log=$root/build/host-pytest.log
    host_tmp=$(mktemp -d "${TMPDIR:-/tmp}/homeagent-host.XXXXXX")
    echo "== host pytest in the background, log: build/host-pytest.log"
    { ha_poll; HOMEAGENT_WHEELHOUSE=$local_wheels "$VENV/bin/python" -m pytest -q \
        --basetemp="$host_tmp/t" tests; } >"$host_log" 2>&1 </dev/null &
    host_pid=$!
    PYTHON="$VENV/bin/python" bash toolchain/arm64.sh test || rc=1
    wait "$host_pid" || rc=1
    host_pid=
    ha_wait
    rm -rf "$host_tmp"
    echo "== host pytest (x86_64):"
    cat "$host_log"
    vm_wait || rc=1
    # pytest's closing line of the emulated run ends the log
    echo "emulated pytest (qemu-aarch64), closing line:"
    grep -E '^=* *[0-9]+ (passed|failed|skipped|error|deselected).* in [0-9.]+s' \
        build/arm64/pytest.log | tail -n 1
    exit "$rc"
    ;;
vm)
    setup_c
    setup_python test
    setup_vm
    as_root env PYTHON="$VENV/bin/python" bash toolchain/vm.sh
    ;;
fuzz)
    setup_c
    make -C csrc -j2 --output-sync=target fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
    ;;
esac
