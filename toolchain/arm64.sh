#!/usr/bin/env bash
# aarch64 for real, on this x86_64 machine: build, install and test the package
# as it would run on a board, under qemu-aarch64 (qemu-user, no binfmt, no chroot).
#
#   toolchain/arm64.sh [all]   the four stages below, in order (the default)
#   toolchain/arm64.sh sysroot 1. arm64 sysroot: mmdebstrap --variant=extract with
#                              python3.11, libpython3.11-dev and libstdc++6 (the
#                              wake word wheel's TFLite needs it; reused if present)
#   toolchain/arm64.sh wheel   2. cross-build homeagent-<v>-cp311-cp311-linux_aarch64.whl
#                              with aarch64-linux-gnu-gcc, checked with readelf, in
#                              a venv of PYTHON holding pyproject.toml's build
#                              requirements (setuptools>=77, cffi): ARM64_WORK/buildenv
#   toolchain/arm64.sh buildenv   only that venv
#   toolchain/arm64.sh site    3. install the aarch64 PyPI wheels of the dependencies
#                              (and the test and voice extras, bench peers that
#                              have one) and the wheel into a target dir;
#                              precompile bytecode
#   toolchain/arm64.sh test    4. the C tests and the whole pytest suite, emulated
#                              (runs stages 1-3 first if their output is missing),
#                              then bench/daemon_bench.py, bench/token_bench.py and
#                              bench/startup_bench.py emulated
#
# Everything lives under ARM64_WORK (default build/arm64 in the checkout).
# Environment: ARM64_WORK, HOMEAGENT_TEST_SCALE (0.2 in the emulated run),
# HOMEAGENT_TIMEOUT_SCALE (10), PYTHON (the host interpreter: .venv/bin/python
# if present, else python3; it makes the build venv and installs the site),
# PYTEST_ARGS (extra pytest arguments, e.g. "-x -k binding"), ARM64_WORKERS
# (emulated pytest processes, 2; 1 runs the suite in one process).
# Idempotent: the sysroot and the build venv are reused, the wheel and the
# site are rebuilt.
set -euo pipefail

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-all}" in
    all|sysroot|buildenv|wheel|site|test) job=${1:-all} ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
WORK=${ARM64_WORK:-$root/build/arm64}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
SYSROOT=$WORK/sysroot
BUILDENV=$WORK/buildenv
XCONF=$WORK/xconf
DIST=$WORK/dist
TSITE=$WORK/site
PYARM=$WORK/python3
TREE=$WORK/tree          # copies of tests/ and bench/, away from the source tree
SUITE=${SUITE:-Debian bookworm}
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$root/.venv/bin/python" ]; then PYTHON=$root/.venv/bin/python; else PYTHON=python3; fi
fi
VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' agent/__init__.py)

declare -A STAGE_TIME=()
stage() {   # stage NAME FUNCTION: run it, record its wall time
    local t0=$SECONDS
    echo "== arm64: $1"
    "$2"
    STAGE_TIME[$1]=$((SECONDS - t0))
    echo "== arm64: $1 done in ${STAGE_TIME[$1]} s"
}

need() {
    local miss=()
    for c in "$@"; do command -v "$c" >/dev/null || miss+=("$c"); done
    if [ ${#miss[@]} -gt 0 ]; then
        echo "arm64.sh: missing commands: ${miss[*]} (apt-get install gcc-aarch64-linux-gnu qemu-user mmdebstrap binutils)" >&2
        exit 1
    fi
}

# ---------------------------------------------------------------- 1. sysroot
do_sysroot() {
    need mmdebstrap
    if [ -x "$SYSROOT/usr/bin/python3.11" ] && [ -f "$SYSROOT/usr/include/python3.11/Python.h" ] \
            && [ -e "$SYSROOT/usr/lib/aarch64-linux-gnu/libstdc++.so.6" ]; then
        echo "sysroot present: $SYSROOT (remove it to rebuild)"
    else
        rm -rf "$SYSROOT" "$SYSROOT.tmp"
        # libstdc++6: the voice extra's libtensorflowlite_c.so links it, and
        # under qemu -L a library missing here is not found at all
        mmdebstrap --quiet --variant=extract --arch=arm64 \
            --include=python3.11,libpython3.11-dev,libstdc++6 bookworm "$SYSROOT.tmp"
        mv "$SYSROOT.tmp" "$SYSROOT"
    fi
    # its /dev nodes would shadow the host's under qemu -L (openpty() fails)
    rm -rf "${SYSROOT:?}"/dev/*
}

# The host job's pinned versions where it has them (dev.sh's venv), for the
# build venv (the cffi that writes the C source) and the site (the cffi it runs).
write_constraints() {
    : >"$WORK/constraints.txt"
    if [ -x "$root/.venv/bin/python" ]; then
        "$root/.venv/bin/python" -m pip freeze --exclude-editable 2>/dev/null \
            | grep '==' >"$WORK/constraints.txt" || true
    fi
}

# --------------------------------------------------------- 2. the build venv
# The wheel is built without isolation, so the build needs pyproject.toml's
# build requirements in the interpreter that runs it. A fresh venv of
# Debian 12's Python has setuptools 65 (the project needs 77): the build runs
# in a venv of its own, whatever PYTHON holds.
do_buildenv() {
    [ -x "$BUILDENV/bin/python" ] || "$PYTHON" -m venv "$BUILDENV"
    write_constraints
    local requires cons=$WORK/buildenv-constraints.txt
    mapfile -t requires < <("$BUILDENV/bin/python" -c 'import tomllib
for r in tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]: print(r)')
    # the host job's cffi, not its pip, setuptools or wheel, which may be too old
    grep -Eiv '^(pip|setuptools|wheel)==' "$WORK/constraints.txt" >"$cons" || true
    if ! "$BUILDENV/bin/python" -m pip install -q --disable-pip-version-check -c "$cons" \
            "${requires[@]}" >"$WORK/buildenv.log" 2>&1; then
        cat "$WORK/buildenv.log" >&2
        echo "arm64.sh: installing the build requirements into $BUILDENV failed (log above)" >&2
        exit 1
    fi
    echo "build venv: $BUILDENV ($("$BUILDENV/bin/python" -m pip list --format=freeze 2>/dev/null \
        | grep -Ei '^(setuptools|cffi|wheel)==' | paste -sd ' '))"
}

# ------------------------------------------------------------------ 2. wheel
do_wheel() {
    need aarch64-linux-gnu-gcc readelf
    [ -x "$SYSROOT/usr/bin/python3.11" ] || do_sysroot
    do_buildenv
    mkdir -p "$XCONF"
    cp "$SYSROOT"/usr/lib/python3.11/_sysconfigdata__aarch64-linux-gnu.py "$XCONF"/
    rm -rf "$DIST" "$WORK/build-tmp"
    mkdir -p "$DIST"
    # A clean copy of the source: the checkout's build/ and in-place x86 _core*.so
    # stay out of the wheel, and nothing is written into the checkout.
    local src=$WORK/build-tmp/src
    mkdir -p "$src"
    git ls-files -z --cached --others --exclude-standard -- agent csrc setup.py pyproject.toml README.md LICENSE \
        | xargs -0 -I{} cp --parents {} "$src"/
    find "$src" -name '*.so' -delete
    # setuptools' own build_wheel (what `python -m build --no-isolation` calls):
    # host cffi writes the C source, the target sysconfigdata names the cross gcc.
    local log=$WORK/wheel.log
    if ! (cd "$src" && env _PYTHON_HOST_PLATFORM=linux-aarch64 \
            _PYTHON_SYSCONFIGDATA_NAME=_sysconfigdata__aarch64-linux-gnu \
            PYTHONPATH="$XCONF" \
            CPPFLAGS="-I$SYSROOT/usr/include/python3.11 -idirafter $SYSROOT/usr/include" \
            "$BUILDENV/bin/python" -c 'import sys; from setuptools import build_meta as b; print(b.build_wheel(sys.argv[1]))' "$DIST") \
            >"$log" 2>&1; then
        cat "$log" >&2
        echo "arm64.sh: the cross build failed (log above, also in $log)" >&2
        exit 1
    fi
    local whl=$DIST/homeagent-$VERSION-cp311-cp311-linux_aarch64.whl
    if [ ! -f "$whl" ]; then
        echo "arm64.sh: expected $whl, got: $(ls "$DIST")" >&2
        exit 1
    fi
    rm -rf "$WORK/build-tmp/unz" && mkdir -p "$WORK/build-tmp/unz"
    "$PYTHON" -m zipfile -e "$whl" "$WORK/build-tmp/unz"
    local so n=0
    while IFS= read -r so; do
        n=$((n + 1))
        local machine
        machine=$(readelf -h "$so" | sed -n 's/^ *Machine: *//p')
        echo "readelf: ${so#"$WORK/build-tmp/unz/"}: Machine: $machine"
        [ "$machine" = AArch64 ] || { echo "arm64.sh: $so is not AArch64" >&2; exit 1; }
    done < <(find "$WORK/build-tmp/unz" -name '*.so')
    [ "$n" -gt 0 ] || { echo "arm64.sh: no extension module in $whl" >&2; exit 1; }
    echo "wheel: $(basename "$whl") ($(stat -c %s "$whl") bytes)"
}

# ------------------------------------------------------------------- 3. site
PIP_PLATFORMS=(--platform linux_aarch64 --platform manylinux2014_aarch64)
# the sysroot is Debian 12: glibc 2.36, so every manylinux_2_17..2_36 wheel fits
for v in $(seq 17 36); do PIP_PLATFORMS+=(--platform "manylinux_2_${v}_aarch64"); done

pip_target() {
    "$PYTHON" -m pip install -q --disable-pip-version-check --no-compile --target "$TSITE" \
        "${PIP_PLATFORMS[@]}" --python-version 3.11 --implementation cp --abi cp311 \
        --only-binary=:all: --upgrade "$@"
}

do_site() {
    local whl=$DIST/homeagent-$VERSION-cp311-cp311-linux_aarch64.whl
    [ -f "$whl" ] || do_wheel
    rm -rf "$TSITE"
    mkdir -p "$TSITE"
    write_constraints
    local cons=$WORK/constraints.txt
    local log=$WORK/site.log
    : >"$log"
    # the package, its dependencies, its test extra and its voice extra
    # (pyproject.toml's pins): the voice tests run emulated too
    if ! pip_target -c "$cons" "$whl[test,voice]" >>"$log" 2>&1; then
        cat "$log" >&2
        echo "arm64.sh: installing the aarch64 wheels failed (log above)" >&2
        exit 1
    fi
    # bench peers: only those that publish an aarch64 wheel; the smoke test
    # skips a missing peer as "not installed"
    : >"$WORK/missing-peers.txt"
    local peer
    for peer in msgspec==0.23.0 orjson==3.13.0; do
        if pip_target --no-deps "$peer" >>"$log" 2>&1; then
            echo "bench peer $peer: aarch64 wheel installed"
        else
            echo "bench peer $peer: no aarch64 wheel, left out" | tee -a "$WORK/missing-peers.txt"
        fi
    done
    echo "site: $TSITE ($(du -sh "$TSITE" | cut -f1)); $(ls "$TSITE" | grep -c '\.dist-info$') distributions"
    # bytecode on the host: imports are about 3x faster under qemu
    "$PYTHON" -m compileall -q -j0 "$SYSROOT"/usr/lib/python3.11 "$TSITE" >/dev/null 2>&1 || true
}

# ------------------------------------------------------------------- 4. test
write_wrapper() {
    cat >"$PYARM" <<EOF
#!/bin/sh
# aarch64 python3.11 of the sysroot under qemu-user (written by toolchain/arm64.sh)
exec qemu-aarch64 -L "$SYSROOT" "$SYSROOT/usr/bin/python3.11" "\$@"
EOF
    chmod +x "$PYARM"
}

do_test() {
    need qemu-aarch64 make
    [ -x "$SYSROOT/usr/bin/python3.11" ] || do_sysroot
    [ -f "$TSITE/agent/__init__.py" ] || do_site
    write_wrapper

    # C contract tests, cross-built, run under qemu with the sysroot's libc
    local jts=()
    [ -d "$root/../shared/jsontestsuite/test_parsing" ] && jts=(JSONTESTSUITE="$root/../shared/jsontestsuite/test_parsing")
    local t0=$SECONDS
    make -s -C csrc qemu OUT="$WORK/csrc" AARCH64_LIBC="$SYSROOT" "${jts[@]}"
    STAGE_TIME[c-tests]=$((SECONDS - t0))

    # The suite runs from a copy: tests/, bench/, docs/ and the C headers (the
    # cdef parity tests read them) under $TREE/main, ../shared as a link beside
    # it (the tests find fixtures at parents[2]/shared). No agent/ there, so the
    # package comes from the installed wheel in $TSITE only.
    rm -rf "$TREE"
    mkdir -p "$TREE/main/csrc"
    cp -r tests bench docs pyproject.toml "$TREE/main"/
    cp csrc/*.h "$TREE/main/csrc"/
    find "$TREE/main" -name __pycache__ -prune -exec rm -rf {} +
    [ -d "$root/../shared" ] && ln -sfn "$(cd "$root/../shared" && pwd)" "$TREE/shared"

    # the package must come from the installed wheel, never from the checkout
    local core
    core=$(cd "$TREE/main" && env QEMU_LD_PREFIX="$SYSROOT" PYTHONPATH="$TSITE" "$PYARM" -c \
        'import platform, agent.stream._core as c; print(platform.machine(), c.__file__)')
    echo "imported: $core"
    case "$core" in
        "aarch64 $TSITE/"*) ;;
        *) echo "arm64.sh: agent.stream._core does not come from $TSITE" >&2; exit 1 ;;
    esac

    # Two emulated pytest workers (pytest-xdist, each a whole test file at a
    # time, so that module fixtures start once): the suite is most of the
    # CI's time, and one process leaves a core idle once the host suite and
    # the VM runs beside it are done.
    local workers=()
    if [ "${ARM64_WORKERS:-2}" -gt 1 ]; then
        workers=(--dist loadfile --tx "${ARM64_WORKERS:-2}*popen//python=$PYARM")
    fi
    local out=$WORK/pytest.log
    t0=$SECONDS
    set +e
    (cd "$TREE/main" && env -u PYTHONDONTWRITEBYTECODE -u PYTHONHOME \
        QEMU_LD_PREFIX="$SYSROOT" PYTHONPATH="$TSITE" \
        HOMEAGENT_EMULATED=1 HOMEAGENT_PYTHON_WRAPPER="$PYARM" \
        HOMEAGENT_TEST_SCALE="${HOMEAGENT_TEST_SCALE:-0.2}" \
        HOMEAGENT_TIMEOUT_SCALE="${HOMEAGENT_TIMEOUT_SCALE:-10}" \
        "$PYARM" -m pytest -p no:cacheprovider -q -ra --junitxml="$WORK/pytest.xml" \
        "${workers[@]}" ${PYTEST_ARGS:-} tests) 2>&1 | tee "$out"
    local rc=${PIPESTATUS[0]}
    set -e
    STAGE_TIME[pytest]=$((SECONDS - t0))

    # The daemon's memory and the latency it adds, emulated (qemu's own
    # memory is in the RSS figures: read them as an upper bound).
    t0=$SECONDS
    echo "== arm64: daemon bench, emulated"
    (cd "$TREE/main" && env QEMU_LD_PREFIX="$SYSROOT" PYTHONPATH="$TSITE" \
        "$PYARM" bench/daemon_bench.py --python "$PYARM" --rounds 40 --warmup 5 \
        --clients 20 --waves 2) 2>&1 | tee "$WORK/daemon-bench.txt" || rc=1
    STAGE_TIME[bench]=$((SECONDS - t0))

    # CPU per streamed token, the daemon against its peers, emulated: a short
    # stream and one round (about 3 minutes); read the ratios, not the times.
    t0=$SECONDS
    echo "== arm64: token bench, emulated"
    (cd "$TREE/main" && env QEMU_LD_PREFIX="$SYSROOT" PYTHONPATH="$TSITE" \
        "$PYARM" bench/token_bench.py --tokens 300 --rounds 1) 2>&1 \
        | tee "$WORK/token-bench.txt" || rc=1
    STAGE_TIME[token-bench]=$((SECONDS - t0))

    # Exec to READY=1, the idle RSS and the first ask after a start,
    # emulated: three starts (about a minute).
    t0=$SECONDS
    echo "== arm64: start-up bench, emulated"
    (cd "$TREE/main" && env QEMU_LD_PREFIX="$SYSROOT" PYTHONPATH="$TSITE" \
        "$PYARM" bench/startup_bench.py --python "$PYARM" --rounds 3) 2>&1 \
        | tee "$WORK/startup-bench.txt" || rc=1
    STAGE_TIME[startup-bench]=$((SECONDS - t0))

    "$PYTHON" - "$WORK/pytest.xml" "$WORK/missing-peers.txt" <<'EOF'
import sys, xml.etree.ElementTree as ET
from collections import Counter
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
run = skipped = 0
reasons = Counter()
for s in suites:
    for case in s.iter("testcase"):
        sk = case.find("skipped")
        if sk is not None:
            skipped += 1
            reasons[(sk.get("message") or sk.get("type") or "?").strip()] += 1
        else:
            run += 1
print(f"emulated: {run} tests run, {skipped} skipped")
for why, n in sorted(reasons.items()):
    print(f"  skipped {n}: {why}")
try:
    for line in open(sys.argv[2]):
        print("  " + line.strip())
except FileNotFoundError:
    pass
EOF
    echo "arm64 stage times (s): $(for k in "${!STAGE_TIME[@]}"; do printf '%s=%s ' "$k" "${STAGE_TIME[$k]}"; done)"
    # pytest's closing line of the emulated run ends the log (again, verbatim)
    echo "emulated pytest (qemu-aarch64), closing line:"
    grep -E '^=* *[0-9]+ (passed|failed|skipped|error|deselected).* in [0-9.]+s' "$out" | tail -n 1 || tail -n 1 "$out"
    return "$rc"
}

case "$job" in
    sysroot) stage sysroot do_sysroot ;;
    buildenv) stage buildenv do_buildenv ;;
    wheel) stage wheel do_wheel ;;
    site) stage site do_site ;;
    test) do_test ;;
    all)
        stage sysroot do_sysroot
        stage wheel do_wheel
        stage site do_site
        do_test
        ;;
esac
