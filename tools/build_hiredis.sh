#!/usr/bin/env bash
# Builds a static, position-independent libhiredis from a pinned, checksummed release into
# $HIREDIS_PREFIX, for wheels that must not depend on a system libhiredis (setup.py links
# $HIREDIS_PREFIX/lib/libhiredis.a and hides its symbols).
#
# Runs in cibuildwheel's before-all (Linux containers, macOS), where the network is available.
# Never runs at `pip install` time.
#
#   HIREDIS_PREFIX=/tmp/hiredlock-hiredis tools/build_hiredis.sh
#
# Environment:
#   HIREDIS_PREFIX   where to install (required): include/hiredis/*.h, lib/libhiredis.a,
#                    lib/pkgconfig/hiredis.pc, share/licenses/hiredis/COPYING, share/hiredlock-hiredis.txt
#   HIREDIS_VERSION  release to build (default: the pinned one below; another needs HIREDIS_SHA256)
#   HIREDIS_SHA256   sha256 of the release tarball (default: the pinned one)
#   HIREDIS_URL      where to download it (default: the GitHub release tarball of HIREDIS_VERSION)
#   HIREDIS_SOURCE   use a local copy instead of downloading: a .tar.gz (checked against
#                    HIREDIS_SHA256 like a download, e.g. Debian's hiredis_1.2.0.orig.tar.gz, which is
#                    the same file as the GitHub tarball) or an unpacked source directory (no
#                    checksum possible; its version must be >= 1.2.0, e.g. vendor/hiredis of the
#                    PyPI hiredis sdist)
#   HIREDIS_ARCHS    macOS only: architectures of the (universal) archive, default "arm64 x86_64"
#   CC, CFLAGS, CPPFLAGS, AR: as usual. MACOSX_DEPLOYMENT_TARGET defaults to 10.13 on macOS.
set -euo pipefail

PINNED_VERSION=1.2.0
PINNED_SHA256=82ad632d31ee05da13b537c124f819eb88e18851d9cb0c30ae0552084811588c
MIN_VERSION=1.2.0
# alloc.c ... sockcompat.c: the library (async.c includes dict.c itself); no SSL, no adapters.
SOURCES="alloc.c async.c hiredis.c net.c read.c sds.c sockcompat.c"
HEADERS="hiredis.h async.h read.h sds.h alloc.h sockcompat.h"

die() { echo "build_hiredis.sh: error: $*" >&2; exit 1; }
say() { echo "build_hiredis.sh: $*" >&2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

[ -n "${HIREDIS_PREFIX:-}" ] || die "set HIREDIS_PREFIX to the directory to install into"
mkdir -p "$HIREDIS_PREFIX"
PREFIX="$(cd "$HIREDIS_PREFIX" && pwd)"

if [ -n "${HIREDIS_VERSION:-}" ] && [ "$HIREDIS_VERSION" != "$PINNED_VERSION" ]; then
  VERSION="$HIREDIS_VERSION"
  SHA256="${HIREDIS_SHA256:-}"
  # A directory source has no checksum to compare; a tarball (downloaded or local) always has.
  if [ -z "$SHA256" ] && ! [ -d "${HIREDIS_SOURCE:-/nonexistent}" ]; then
    die "HIREDIS_VERSION=$VERSION is not the pinned $PINNED_VERSION: set HIREDIS_SHA256 too"
  fi
else
  VERSION="$PINNED_VERSION"
  SHA256="${HIREDIS_SHA256:-$PINNED_SHA256}"
fi
URL="${HIREDIS_URL:-https://github.com/redis/hiredis/archive/refs/tags/v${VERSION}.tar.gz}"

case "$(uname -s)" in
  Darwin) OS=macos ;;
  Linux) OS=linux ;;
  *) OS="$(uname -s)" ;;
esac
[ "$OS" = linux ] || [ "$OS" = macos ] || die "unsupported system $OS (Windows is not built yet: docs/internals/wheels.md)"

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
  elif command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 "$1" | sed 's/.*= *//'
  else python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
  fi
}

download() {  # url dest
  if command -v curl >/dev/null 2>&1; then curl -fsSL --retry 3 --retry-delay 2 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then wget -q -O "$2" "$1"
  else python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$1" "$2"
  fi
}

version_ge() {  # a >= b, both X.Y.Z
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -t. -k1,1n -k2,2n -k3,3n | head -n1)" = "$2" ]
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hiredis-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# -- 1. the sources ------------------------------------------------------------------------------
if [ -n "${HIREDIS_SOURCE:-}" ] && [ -d "$HIREDIS_SOURCE" ]; then
  SRC="$(cd "$HIREDIS_SOURCE" && pwd)"
  ORIGIN="directory $SRC (no checksum: a directory has none)"
  say "using the source directory $SRC; no checksum can be checked for a directory"
else
  TARBALL="$WORK/hiredis.tar.gz"
  if [ -n "${HIREDIS_SOURCE:-}" ]; then
    [ -f "$HIREDIS_SOURCE" ] || die "HIREDIS_SOURCE=$HIREDIS_SOURCE is neither a file nor a directory"
    cp "$HIREDIS_SOURCE" "$TARBALL"
    ORIGIN="$HIREDIS_SOURCE"
  else
    say "downloading $URL"
    download "$URL" "$TARBALL" || die "download of $URL failed"
    ORIGIN="$URL"
  fi
  GOT="$(sha256_of "$TARBALL")"
  [ "$GOT" = "$SHA256" ] || die "sha256 mismatch for $ORIGIN: expected $SHA256, got $GOT"
  say "sha256 OK ($SHA256) for $ORIGIN"
  ORIGIN="$ORIGIN sha256:$SHA256"
  mkdir "$WORK/src"
  tar -xzf "$TARBALL" -C "$WORK/src"
  # The release tarball has hiredis-X.Y.Z/hiredis.c; the PyPI hiredis sdist has */vendor/hiredis/.
  SRC=""
  for candidate in $(find "$WORK/src" -maxdepth 4 -name hiredis.c | awk '{ print length($0) " " $0 }' | sort -n | cut -d' ' -f2-); do
    if [ -f "$(dirname "$candidate")/sockcompat.c" ]; then SRC="$(dirname "$candidate")"; break; fi
  done
  [ -n "$SRC" ] || die "no hiredis sources (hiredis.c, sockcompat.c) in $ORIGIN"
fi

for f in $SOURCES $HEADERS COPYING; do
  [ -f "$SRC/$f" ] || die "$SRC/$f is missing: not a hiredis >= $MIN_VERSION source tree"
done
hdr_num() { awk -v name="$1" '$1 == "#define" && $2 == name { print $3; exit }' "$SRC/hiredis.h"; }
FOUND="$(hdr_num HIREDIS_MAJOR).$(hdr_num HIREDIS_MINOR).$(hdr_num HIREDIS_PATCH)"
version_ge "$FOUND" "$MIN_VERSION" || die "hiredis $FOUND is older than $MIN_VERSION"
if [ -z "${HIREDIS_SOURCE:-}" ] || [ -f "${HIREDIS_SOURCE:-}" ]; then
  [ "$FOUND" = "$VERSION" ] || die "the tarball holds hiredis $FOUND, expected $VERSION"
fi
say "hiredis $FOUND from $SRC"

# The notice shipped in the wheels (LICENSE-hiredis) must be the one of the code linked into them.
if [ -f "$ROOT/LICENSE-hiredis" ] && ! cmp -s "$SRC/COPYING" "$ROOT/LICENSE-hiredis"; then
  diff -u "$ROOT/LICENSE-hiredis" "$SRC/COPYING" >&2 || true
  die "hiredis $FOUND's COPYING differs from LICENSE-hiredis: update LICENSE-hiredis"
fi

# -- 2. compile: static, position-independent, symbols hidden ------------------------------------
CC="${CC:-cc}"
AR="${AR:-ar}"
ARCHFLAGS_HIREDIS=""
if [ "$OS" = macos ]; then
  export MACOSX_DEPLOYMENT_TARGET="${MACOSX_DEPLOYMENT_TARGET:-10.13}"
  for arch in ${HIREDIS_ARCHS:-arm64 x86_64}; do ARCHFLAGS_HIREDIS="$ARCHFLAGS_HIREDIS -arch $arch"; done
fi
# -fvisibility=hidden: nothing of hiredis is exported from the extension, on any platform (setup.py
# adds -Wl,--exclude-libs,ALL on Linux and -exported_symbol on macOS on top).
# shellcheck disable=SC2086
FLAGS="-std=c99 -O2 -g0 -fPIC -fvisibility=hidden -Wall -Wno-missing-field-initializers $ARCHFLAGS_HIREDIS ${CPPFLAGS:-} ${CFLAGS:-}"
mkdir -p "$WORK/obj"
OBJS=""
for f in $SOURCES; do
  obj="$WORK/obj/${f%.c}.o"
  # shellcheck disable=SC2086
  (cd "$SRC" && $CC $FLAGS -c "$f" -o "$obj")
  OBJS="$OBJS $obj"
done
rm -f "$WORK/libhiredis.a"
if [ "$OS" = macos ]; then
  # shellcheck disable=SC2086
  xcrun libtool -static -o "$WORK/libhiredis.a" $OBJS
else
  # shellcheck disable=SC2086
  $AR rcs "$WORK/libhiredis.a" $OBJS
fi

# -- 3. install ----------------------------------------------------------------------------------
mkdir -p "$PREFIX/include/hiredis/adapters" "$PREFIX/lib/pkgconfig" "$PREFIX/share/licenses/hiredis"
for h in $HEADERS; do cp "$SRC/$h" "$PREFIX/include/hiredis/"; done
cp "$SRC"/adapters/*.h "$PREFIX/include/hiredis/adapters/" 2>/dev/null || true
cp "$WORK/libhiredis.a" "$PREFIX/lib/libhiredis.a"
# Only the static library: setup.py must not find a shared one next to it.
rm -f "$PREFIX"/lib/libhiredis.so* "$PREFIX"/lib/libhiredis*.dylib
cp "$SRC/COPYING" "$PREFIX/share/licenses/hiredis/COPYING"
cat > "$PREFIX/lib/pkgconfig/hiredis.pc" <<EOF
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include
pkgincludedir=\${includedir}/hiredis

Name: hiredis
Description: Minimalistic C client library for Redis (static, from hiredlock's tools/build_hiredis.sh)
Version: $FOUND
Libs: -L\${libdir} -lhiredis
Cflags: -I\${pkgincludedir} -I\${includedir} -D_FILE_OFFSET_BITS=64
EOF
printf 'hiredis %s\nsource: %s\nflags: %s\n' "$FOUND" "$ORIGIN" "$FLAGS" > "$PREFIX/share/hiredlock-hiredis.txt"

# -- 4. check: the archive links and reports the version we built -------------------------------
cat > "$WORK/probe.c" <<'EOF'
#include <stdio.h>
#include <hiredis/hiredis.h>
int main(void) {
    redisContext *c = redisConnectNonBlock("127.0.0.1", 1);
    if (c != NULL) redisFree(c);
    printf("%d.%d.%d\n", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
    return 0;
}
EOF
# shellcheck disable=SC2086
$CC $ARCHFLAGS_HIREDIS -I"$PREFIX/include" "$WORK/probe.c" "$PREFIX/lib/libhiredis.a" -o "$WORK/probe" \
  || die "a program does not link against the new $PREFIX/lib/libhiredis.a"
RAN="$("$WORK/probe")" || die "the probe program linked against libhiredis.a does not run"
[ "$RAN" = "$FOUND" ] || die "the probe reports hiredis $RAN, expected $FOUND"
say "installed static hiredis $FOUND into $PREFIX"
