#!/usr/bin/env bash
# The service on a booted Debian 12 (systemd 252 as PID 1) under qemu-system
# with TCG, x86_64 and aarch64: install from this build's wheel as the README
# says, offline, and check the shipped units for real.
#
#   toolchain/vm.sh [ARCH...]     image, wheels and the checks for each ARCH
#                                 (x86_64, aarch64; default both, in turn)
#   toolchain/vm.sh image ARCH... only build (or find cached) the images
#
# Per architecture: (1) the image, built with mmdebstrap and cached under
# VM_CACHE keyed by a hash of its recipe (toolchain/vm/image.sh and
# toolchain/vm/guest/), built from nothing when absent; (2) the homeagent
# wheel (x86_64: from this checkout; aarch64: toolchain/arm64.sh wheel, unless
# build/arm64/dist has one newer than the sources), a copy with a bumped local version for the upgrade
# check, and the dependencies' wheels for that architecture; (3) qemu boots the
# image (snapshot=on: the image is never changed) with the wheels and
# toolchain/vm/checks.py on a 9p share; the guest runs the checks at boot, the
# host plays the serial boards on ptys (a platform UART, and a USB serial
# adapter hot-plugged through QMP when the guest asks) and prints one line
# per check; the guest powers off. A run longer than VM_TIMEOUT is killed.
# Closing line: "N passed, N failed"; the exit status is 1 when any failed.
#
# Environment: VM_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/homeagent-vm),
# VM_WORK (default build/vm in the checkout: shares, logs), VM_TIMEOUT
# (seconds per boot-to-poweroff run, default 2700), PYTHON (host interpreter
# with the package installed: .venv/bin/python if present), VM_PGID_FILE
# (where to write this run's process group, for toolchain/dev.sh). Needs root
# (mmdebstrap --mode=root) and the Debian packages dev.sh installs.
set -euo pipefail

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; }
job=run
case "${1:-}" in
    -h|--help) usage; exit 0 ;;
    image) job=image; shift ;;
esac
arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(x86_64 aarch64)
for a in "${arches[@]}"; do
    case "$a" in
        x86_64|aarch64) ;;
        *) usage >&2; exit 2 ;;
    esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
VM_DIR=$root/toolchain/vm
CACHE=${VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/homeagent-vm}
WORK=${VM_WORK:-$root/build/vm}
TIMEOUT=${VM_TIMEOUT:-2700}
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$root/.venv/bin/python" ]; then PYTHON=$root/.venv/bin/python; else PYTHON=python3; fi
fi
VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' agent/__init__.py)
# shellcheck source=vm/image.sh
. "$VM_DIR/image.sh"

if [ "$(id -u)" -ne 0 ]; then
    echo "vm.sh: run as root: mmdebstrap --mode=root builds the image" >&2
    exit 1
fi
# dev.sh runs this in a session of its own and stops it through this file
[ -z "${VM_PGID_FILE:-}" ] || ps -o pgid= $$ | tr -d ' ' >"$VM_PGID_FILE"

# The cache key: the recipe's text, the guest files and the architecture.
image_key() {
    { echo "$1"; cat "$VM_DIR/image.sh"
      (cd "$VM_DIR/guest" && find . -type f | LC_ALL=C sort | xargs sha256sum); } \
        | sha256sum | cut -c1-16
}

image() {   # image ARCH: the cached image's directory, built if absent
    local arch=$1 dir
    dir=$CACHE/image-$arch-$(image_key "$arch")
    if [ -f "$dir/root.img" ]; then
        echo "vm: $arch image cached: $dir" >&2
    else
        local t0=$SECONDS
        echo "vm: building the $arch image (mmdebstrap)" >&2
        mkdir -p "$CACHE"
        # a build killed midway may have left mounts in its tree: never
        # remove through them
        if grep -qF " $CACHE/image-$arch-" /proc/mounts; then
            echo "vm.sh: mounts left under $CACHE (see /proc/mounts): unmount them first" >&2
            exit 1
        fi
        # older images of this architecture are stale now
        rm -rf "$CACHE/image-$arch-"*
        build_image "$arch" "$dir.tmp" >&2
        mv "$dir.tmp" "$dir"
        echo "vm: $arch image built in $((SECONDS - t0)) s" >&2
    fi
    echo "$dir"
}

case "$job" in
image)
    for a in "${arches[@]}"; do image "$a" >/dev/null; done
    exit 0
    ;;
esac

PIP_TAGS() {   # PIP_TAGS ARCH: pip's --platform options for Debian 12 (glibc 2.36)
    local v
    printf -- '--platform\nlinux_%s\n--platform\nmanylinux2014_%s\n' "$1" "$1"
    for v in $(seq 17 36); do printf -- '--platform\nmanylinux_2_%s_%s\n' "$v" "$1"; done
}

# wheels ARCH SHARE: this build's wheel, its upgrade copy and the
# dependencies' wheels for ARCH, in SHARE/wheels and SHARE/upgrade
wheels() {
    local arch=$1 share=$2 whl
    rm -rf "$share/wheels" "$share/upgrade"
    mkdir -p "$share/wheels" "$share/upgrade"
    if [ "$arch" = x86_64 ]; then
        "$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$share/wheels" . \
            >"$WORK/$arch/wheel.log" 2>&1 || { cat "$WORK/$arch/wheel.log" >&2; exit 1; }
        whl=$share/wheels/homeagent-$VERSION-cp311-cp311-linux_x86_64.whl
    else
        whl=$root/build/arm64/dist/homeagent-$VERSION-cp311-cp311-linux_aarch64.whl
        # built again when absent or older than a source file
        local newest
        newest=$(git ls-files -z agent csrc setup.py pyproject.toml | xargs -0 stat -c %Y | sort -n | tail -n 1)
        if [ ! -f "$whl" ] || [ "$newest" -gt "$(stat -c %Y "$whl")" ]; then
            PYTHON="$PYTHON" bash toolchain/arm64.sh wheel >&2
        fi
        cp "$whl" "$share/wheels/"
        whl=$share/wheels/$(basename "$whl")
    fi
    # the versions the host job tests, where it pins them
    "$PYTHON" -m pip freeze --exclude-editable 2>/dev/null | grep '==' >"$WORK/$arch/constraints.txt" || true
    local tags
    mapfile -t tags < <(PIP_TAGS "$arch")
    "$PYTHON" -m pip download -q --disable-pip-version-check --only-binary=:all: "${tags[@]}" \
        --python-version 3.11 --implementation cp --abi cp311 -c "$WORK/$arch/constraints.txt" \
        -d "$share/wheels" "$whl" >"$WORK/$arch/download.log" 2>&1 ||
        { cat "$WORK/$arch/download.log" >&2; exit 1; }
    "$PYTHON" "$VM_DIR/bump_wheel.py" "$whl" vm1 "$share/upgrade" >/dev/null
    echo "vm: $arch wheels: $(cd "$share/wheels" && ls | paste -sd ' ')" >&2
}

run_arch() {   # run_arch ARCH: one boot-to-poweroff run; its lines on stdout
    local arch=$1 t0=$SECONDS dir
    local share=$WORK/$arch/share
    dir=$(image "$arch")
    rm -rf "$WORK/$arch"
    mkdir -p "$share"
    wheels "$arch" "$share"
    cp "$VM_DIR/checks.py" "$VM_DIR/figures.py" "$share/"
    local uart=/dev/ttyS1
    [ "$arch" = aarch64 ] && uart=/dev/ttyAMA0
    printf '{"arch": "%s", "uart": "%s", "wheel": "%s", "upgrade_wheel": "%s", "upgrade_version": "%s"}\n' \
        "$arch" "$uart" "$(cd "$share/wheels" && ls homeagent-*.whl)" \
        "$(cd "$share/upgrade" && ls)" "$VERSION+vm1" >"$share/vm.json"
    echo "vm: $arch: booting (TCG); console log: $WORK/$arch/console.log" >&2
    local rc=0
    "$PYTHON" "$VM_DIR/host.py" --arch "$arch" --image "$dir" --share "$share" \
        --log "$WORK/$arch/console.log" --timeout "$TIMEOUT" | tee "$WORK/$arch/result.txt" || rc=1
    echo "$arch: run took $((SECONDS - t0)) s (image, wheels, boot to poweroff)" | tee -a "$WORK/$arch/result.txt"
    return "$rc"
}

rc=0
for a in "${arches[@]}"; do
    run_arch "$a" || rc=1
done
# the summary: every check of every architecture, then the totals
echo "== vm summary"
passed=0 failed=0
for a in "${arches[@]}"; do
    grep -E "^$a (pass|fail) " "$WORK/$a/result.txt" || true
    grep -E "^$a (figure|run:)|^$a: run took" "$WORK/$a/result.txt" || true
    passed=$((passed + $(grep -cE "^$a pass " "$WORK/$a/result.txt" || true)))
    failed=$((failed + $(grep -cE "^$a fail " "$WORK/$a/result.txt" || true)))
done
[ "$failed" -eq 0 ] || rc=1
echo "$passed passed, $failed failed"
exit "$rc"
