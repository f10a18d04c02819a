#!/usr/bin/env bash
# Manual check of the native engine's Windows side from a Linux machine (not part of .ci/run):
#   1. downloads hiredis 1.2.0 and CPython's Windows headers (Include/ + PC/pyconfig.h) from Debian's
#      source packages, each checked against the sha256 recorded below;
#   2. cross-compiles hiredis as a static library with MinGW-w64 (its CMake, as build_hiredis.ps1
#      does with MSVC; a plain gcc line when CMake is missing);
#   3. translates _native/engine.pyx with Cython and compiles the C with x86_64-w64-mingw32-gcc
#      -Wall -Wextra against each CPython's Windows headers (any warning fails), checks that no
#      SOCKET/redisFD is squeezed into an int, and links it into a .pyd against hiredis and ws2_32
#      (python3XX.dll's import library is generated from the symbols the object needs);
#   4. builds tools/windows/platform_check.c (every hl_* call of _native/hl_platform.h on real
#      loopback sockets, plus the engine's sequence on a hiredis socket) for Windows and runs it
#      under wine, and builds and runs the same program natively (the POSIX branch).
# Needs: x86_64-w64-mingw32-gcc (Debian: apt-get install gcc-mingw-w64-x86-64), cython (3.x), gcc,
# curl or wget, tar with xz; optional: cmake, wine (apt-get install wine64 wine). Without wine the
# Windows programs are built but not run, and the script says so and exits 3 (--no-wine: exit 0).
# Variables: HL_CROSS_PYTHONS ("3.11 3.13": which CPython headers), HL_CROSS_CACHE (a directory
# that keeps the downloads between runs; they are checked every time), HL_WINE (the wine to use;
# empty: none), DEBIAN_MIRROR, KEEP=1 (keep the work directory). Nothing is written into the tree.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MIRROR="${DEBIAN_MIRROR:-https://deb.debian.org/debian}"
PYTHONS="${HL_CROSS_PYTHONS:-3.11 3.13}"
NO_WINE=0
for arg in "$@"; do
  case "$arg" in
    --no-wine) NO_WINE=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "windows_cross_check.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

# Debian source packages: file, pool path, sha256 (observed on deb.debian.org; for hiredis it is
# also the sha256 of the GitHub v1.2.0 tarball that build_hiredis.sh/.ps1 pin).
HIREDIS_FILE=hiredis_1.2.0.orig.tar.gz
HIREDIS_PATH=main/h/hiredis
HIREDIS_SHA256=82ad632d31ee05da13b537c124f819eb88e18851d9cb0c30ae0552084811588c
declare -A PY_FILE=(
  [3.11]=python3.11_3.11.2.orig.tar.gz          # bookworm
  [3.13]=python3.13_3.13.5.orig.tar.xz          # trixie
)
declare -A PY_SHA256=(
  [3.11]=2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849
  [3.13]=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
)

MINGW=x86_64-w64-mingw32
SUMMARY=()
FAILED=0
say() { echo "windows_cross_check.sh: $*" >&2; }
result() {  # status text
  SUMMARY+=("$(printf '%-8s %s' "$1" "$2")")
  [ "$1" = FAIL ] && FAILED=1
  say "$1: $2"
}
finish() {
  echo
  echo "== summary (work directory: ${WORK:-none}${KEEP:+, kept})"
  for line in "${SUMMARY[@]}"; do echo "  $line"; done
  if [ "$FAILED" != 0 ]; then echo "RESULT: FAILED"; exit 1; fi
  if [ "${NOT_RUN:-0}" != 0 ] && [ "$NO_WINE" = 0 ]; then
    echo "RESULT: built, but the Windows programs were NOT RUN (no wine; --no-wine accepts that)"
    exit 3
  fi
  echo "RESULT: ok"
  exit 0
}

# -- tools ---------------------------------------------------------------------------------------
if ! command -v "$MINGW-gcc" >/dev/null 2>&1; then
  say "MinGW-w64 is missing: no $MINGW-gcc on PATH. Debian/Ubuntu: apt-get install gcc-mingw-w64-x86-64"
  exit 2
fi
for tool in cython gcc tar; do
  command -v "$tool" >/dev/null 2>&1 || { say "$tool is missing (cython: pip install 'Cython>=3')"; exit 2; }
done
if [ -n "${HL_WINE+set}" ]; then
  WINE="$HL_WINE"   # a wine binary, or empty: do not run the Windows programs
else
  WINE=""
  for candidate in wine wine64 /usr/lib/wine/wine64; do
    if command -v "$candidate" >/dev/null 2>&1; then WINE="$(command -v "$candidate")"; break; fi
  done
fi
if [ -z "$WINE" ]; then
  say "wine is missing: the Windows programs will be built but NOT RUN. Debian/Ubuntu: apt-get install wine64 wine"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hl-windows-check.XXXXXX")"
if [ -z "${KEEP:-}" ]; then trap 'rm -rf "$WORK"' EXIT; fi
CACHE="${HL_CROSS_CACHE:-$WORK/downloads}"
mkdir -p "$CACHE" "$WORK/src"
LOG="$WORK/logs"
mkdir -p "$LOG"

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
fetch() {  # file pool-path sha256
  local dest="$CACHE/$1" url="$MIRROR/pool/$2/$1" got
  if [ ! -f "$dest" ]; then
    say "downloading $url"
    if command -v curl >/dev/null 2>&1; then curl -fsSL --retry 3 -o "$dest.part" "$url"
    else wget -q -O "$dest.part" "$url"; fi || { rm -f "$dest.part"; return 1; }
    mv "$dest.part" "$dest"
  fi
  got="$(sha256_of "$dest")"
  if [ "$got" != "$3" ]; then
    say "sha256 mismatch for $1: expected $3, got $got"
    return 1
  fi
}

# -- 1. sources ----------------------------------------------------------------------------------
if fetch "$HIREDIS_FILE" "$HIREDIS_PATH" "$HIREDIS_SHA256"; then
  tar -xzf "$CACHE/$HIREDIS_FILE" -C "$WORK/src"
  HIREDIS_SRC="$WORK/src/hiredis-1.2.0"
  result ok "hiredis 1.2.0 from Debian ($HIREDIS_FILE, sha256 $HIREDIS_SHA256)"
else
  result FAIL "hiredis download/checksum ($MIRROR/pool/$HIREDIS_PATH/$HIREDIS_FILE)"
  finish
fi
PY_INCLUDES=()
for v in $PYTHONS; do
  file="${PY_FILE[$v]:-}"
  [ -n "$file" ] || { result FAIL "no Debian source recorded for Python $v (have: ${!PY_FILE[*]})"; continue; }
  if ! fetch "$file" "main/p/python$v" "${PY_SHA256[$v]}"; then
    result FAIL "Python $v download/checksum ($file)"
    continue
  fi
  dir="$WORK/src/py$v"
  mkdir -p "$dir"
  tar -xf "$CACHE/$file" -C "$dir" --strip-components=1 --wildcards '*/Include/*' '*/PC/pyconfig.h*'
  # 3.13+ ships PC/pyconfig.h.in (only Py_GIL_DISABLED is substituted, and it is left undefined).
  if [ -f "$dir/PC/pyconfig.h" ]; then cp "$dir/PC/pyconfig.h" "$dir/Include/pyconfig.h"
  else cp "$dir/PC/pyconfig.h.in" "$dir/Include/pyconfig.h"; fi
  PY_INCLUDES+=("$v:$dir/Include")
  result ok "CPython $v Windows headers ($file, sha256 ${PY_SHA256[$v]})"
done

# -- 2. hiredis for Windows (static) -------------------------------------------------------------
HIREDIS_WIN="$WORK/hiredis-mingw"
if command -v cmake >/dev/null 2>&1; then
  how="CMake (BUILD_SHARED_LIBS=OFF, as build_hiredis.ps1)"
  cmake -S "$HIREDIS_SRC" -B "$WORK/hiredis-build" -DCMAKE_SYSTEM_NAME=Windows \
    -DCMAKE_C_COMPILER="$MINGW-gcc" -DCMAKE_RC_COMPILER="$MINGW-windres" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DENABLE_SSL=OFF -DDISABLE_TESTS=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DCMAKE_INSTALL_PREFIX="$HIREDIS_WIN" >"$LOG/hiredis-cmake.log" 2>&1 \
    && cmake --build "$WORK/hiredis-build" -j 2 >>"$LOG/hiredis-cmake.log" 2>&1 \
    && cmake --install "$WORK/hiredis-build" >>"$LOG/hiredis-cmake.log" 2>&1
  rc=$?
  HIREDIS_LIB="$HIREDIS_WIN/lib/libhiredis.a"   # MSVC's CMake names the same library hiredis.lib
else
  how="$MINGW-gcc (no cmake)"
  mkdir -p "$HIREDIS_WIN/include/hiredis" "$HIREDIS_WIN/lib" "$WORK/hiredis-obj"
  rc=0
  for f in alloc.c async.c hiredis.c net.c read.c sds.c sockcompat.c; do
    "$MINGW-gcc" -std=c99 -O2 -DWIN32_LEAN_AND_MEAN -D_CRT_SECURE_NO_WARNINGS -c "$HIREDIS_SRC/$f" \
      -o "$WORK/hiredis-obj/${f%.c}.o" >>"$LOG/hiredis-gcc.log" 2>&1 || rc=1
  done
  [ $rc = 0 ] && "$MINGW-ar" rcs "$HIREDIS_WIN/lib/libhiredis.a" "$WORK"/hiredis-obj/*.o || rc=1
  cp "$HIREDIS_SRC"/{hiredis,async,read,sds,alloc,sockcompat}.h "$HIREDIS_WIN/include/hiredis/"
  HIREDIS_LIB="$HIREDIS_WIN/lib/libhiredis.a"
fi
if [ $rc = 0 ] && [ -f "$HIREDIS_LIB" ]; then
  result ok "hiredis 1.2.0 cross-compiled with $how -> static libhiredis.a"
else
  result FAIL "hiredis cross-compile with $how (see $LOG)"
  finish
fi

# -- 3. the engine: Cython -> C -> MinGW, each CPython's headers ----------------------------------
if cython -3 "$ROOT/_native/engine.pyx" -I "$ROOT/_native" -I "$ROOT/src" \
    --module-name hiredlock._native \
    -o "$WORK/engine.c" >"$LOG/cython.log" 2>&1; then
  result ok "cython $(cython --version 2>&1 | sed 's/.* //') translated _native/engine.pyx"
else
  result FAIL "cython _native/engine.pyx (see $LOG/cython.log)"
  finish
fi
for entry in "${PY_INCLUDES[@]}"; do
  v="${entry%%:*}"; inc="${entry#*:}"
  flags=(-O2 -Wall -Wextra -I "$ROOT/_native" -I "$HIREDIS_WIN/include" -I "$inc")
  # CPython before 3.12's PC/pyconfig.h sets MS_WIN64 for MSVC only: MinGW needs it said.
  extra="pyconfig.h as is"
  grep -q '__MINGW32__' "$inc/pyconfig.h" || { flags+=(-DMS_WIN64); extra="-DMS_WIN64 added"; }
  obj="$WORK/engine-$v.o"
  "$MINGW-gcc" "${flags[@]}" -c "$WORK/engine.c" -o "$obj" >"$LOG/engine-$v.log" 2>&1
  rc=$?
  warnings="$(grep -c 'warning:' "$LOG/engine-$v.log")"
  if [ $rc = 0 ] && [ "$warnings" = 0 ]; then
    result ok "engine.c compiles for Windows against CPython $v headers: -Wall -Wextra, no warning ($extra)"
  else
    grep -E 'warning:|error:' "$LOG/engine-$v.log" | head -20 >&2
    result FAIL "engine.c for Windows, CPython $v: rc $rc, $warnings warnings (see $LOG/engine-$v.log)"
    continue
  fi
  # A SOCKET (64-bit) must not pass through an int on its way to hl_* or WSAPOLLFD.
  "$MINGW-gcc" "${flags[@]}" -Wconversion -c "$WORK/engine.c" -o /dev/null >"$LOG/engine-$v-conversion.log" 2>&1
  narrowed="$(grep -E "warning: conversion (from|to) .*(redisFD|SOCKET|hl_socket)" "$LOG/engine-$v-conversion.log" | sort -u)"
  if [ -z "$narrowed" ]; then
    result ok "no SOCKET/redisFD <-> int conversion in engine.c (-Wconversion), CPython $v"
  else
    echo "$narrowed" | head -10 >&2
    result FAIL "engine.c passes SOCKETs through int (-Wconversion, CPython $v): use hl_socket/hl_context_fd() in engine.pyx"
  fi
  # Link: hiredis, ws2_32 and an import library for python3X.dll made from what the object needs.
  dll="python${v/./}"
  { echo "LIBRARY $dll.dll"; echo "EXPORTS"
    "$MINGW-nm" -u "$obj" | awk '{ print $2 }' | sed 's/^__imp_//' | grep -E '^_?Py' | sort -u; } > "$WORK/$dll.def"
  pyd="$WORK/_native.cp${v/./}-win_amd64.pyd"
  if "$MINGW-dlltool" -d "$WORK/$dll.def" -l "$WORK/lib$dll.dll.a" -D "$dll.dll" >"$LOG/link-$v.log" 2>&1 \
    && "$MINGW-gcc" -shared -static-libgcc -o "$pyd" "$obj" "$HIREDIS_LIB" -L"$WORK" -l"$dll.dll" \
      -lws2_32 -lcrypt32 -Wl,--no-undefined >>"$LOG/link-$v.log" 2>&1; then
    exports="$("$MINGW-objdump" -p "$pyd" | sed -n '/\[Ordinal\/Name Pointer\] Table/,/^$/p' | awk '/\]/ && NR > 1 { print $NF }' | tr '\n' ' ')"
    dlls="$("$MINGW-objdump" -p "$pyd" | awk '/DLL Name:/ { print $3 }' | tr '\n' ' ')"
    if [ "$exports" = "PyInit__native " ]; then
      result ok "links into $(basename "$pyd"): exports only PyInit__native; imports $dlls"
    else
      result FAIL "$(basename "$pyd") exports: $exports"
    fi
  else
    result FAIL "link of the .pyd for CPython $v (see $LOG/link-$v.log)"
  fi
done

# -- 4. platform_check: Windows (MinGW, run under wine) and POSIX (gcc, run here) ----------------
CHECK_SRC="$ROOT/tools/windows/platform_check.c"
build_and_run() {  # label compiler-and-args... ; runs with $RUNNER
  local label="$1"; shift
  local exe="$WORK/platform_check-$label"
  [ "$RUNNER" = wine ] && exe="$exe.exe"
  if ! "$@" -o "$exe" >"$LOG/build-$label.log" 2>&1 || grep -q 'warning:' "$LOG/build-$label.log"; then
    cat "$LOG/build-$label.log" >&2
    result FAIL "platform_check ($label) does not build cleanly (-Wall -Wextra)"
    return
  fi
  if [ "$RUNNER" = wine ]; then
    if [ -z "$WINE" ]; then
      result "NOT RUN" "platform_check ($label): built, wine is missing"
      NOT_RUN=1
      return
    fi
    WINEPREFIX="$WORK/wineprefix" WINEDEBUG=-all timeout 600 "$WINE" "$exe" >"$LOG/run-$label.log" 2>"$LOG/run-$label.stderr"
  else
    timeout 600 "$exe" >"$LOG/run-$label.log" 2>&1
  fi
  local rc=$?
  local tally
  tally="$(tail -n 1 "$LOG/run-$label.log")"
  if [ $rc = 0 ]; then
    result ok "platform_check ($label): $tally"
  else
    grep -E 'FAIL|FATAL' "$LOG/run-$label.log" >&2
    result FAIL "platform_check ($label): exit $rc, $tally (see $LOG/run-$label.log)"
  fi
}
# hiredis for the native build: its sources compiled in, under an include/hiredis/ layout.
mkdir -p "$WORK/hiredis-native-include"
ln -s "$HIREDIS_SRC" "$WORK/hiredis-native-include/hiredis"
HIREDIS_C=()
for f in alloc.c async.c hiredis.c net.c read.c sds.c sockcompat.c; do HIREDIS_C+=("$HIREDIS_SRC/$f"); done

RUNNER=wine
build_and_run windows "$MINGW-gcc" -Wall -Wextra -O2 -I "$ROOT/_native" "$CHECK_SRC" -lws2_32
build_and_run windows-hiredis "$MINGW-gcc" -Wall -Wextra -O2 -DHL_CHECK_HIREDIS -I "$ROOT/_native" \
  -I "$HIREDIS_WIN/include" "$CHECK_SRC" "$HIREDIS_LIB" -lws2_32 -lcrypt32
RUNNER=native
build_and_run posix gcc -Wall -Wextra -O2 -I "$ROOT/_native" "$CHECK_SRC"
# hiredis's own sources are compiled without -Wextra (their warnings are not ours to fix).
(cd "$WORK" && gcc -std=c99 -O2 -c "${HIREDIS_C[@]}" >"$LOG/hiredis-native.log" 2>&1)
build_and_run posix-hiredis gcc -Wall -Wextra -O2 -DHL_CHECK_HIREDIS -I "$ROOT/_native" \
  -I "$WORK/hiredis-native-include" "$CHECK_SRC" "$WORK"/alloc.o "$WORK"/async.o "$WORK"/hiredis.o \
  "$WORK"/net.o "$WORK"/read.o "$WORK"/sds.o "$WORK"/sockcompat.o

finish
