#!/usr/bin/env bash
# Downloads enwik8.zip (the Hutter Prize file: first 10^8 bytes of the English Wikipedia dump of 2006-03-03)
# and verifies its sha256. lipt reads the zip directly (no unzip needed): `lipt ... --data enwik8`.
#
# Usage: data/get_enwik8.sh [DEST_ROOT]      file goes to DEST_ROOT/enwik8/enwik8.zip
#        DEST_ROOT defaults to this script's folder (<repo>/data), which lipt searches after $LIPT_DATA.
#
# Pinned hash: sha256 547994d9...534bc, 36,445,475 bytes. It matches /work/shared/data/enwik8/PROVENANCE.md
# and several independent public download scripts (DataDeps registrations and benchmark fetchers) that
# found it the same way. The member `enwik8` (100,000,000 bytes) has sha256 2b49720e...c024a8. lipt checks
# the member's CRC-32 when it reads it.
# The download goes to a hidden temporary file that is removed on any failure or interrupt. Only a file
# whose size and sha256 both match is moved into place, so no partial file is ever left behind.
set -euo pipefail

URL="${LIPT_ENWIK8_URL:-http://mattmahoney.net/dc/enwik8.zip}"
SHA256=547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc
BYTES=36445475
ROOT="${1:-$(cd "$(dirname "$0")" && pwd)}"
DIR="$ROOT/enwik8"
DEST="$DIR/enwik8.zip"
me=$(basename "$0")

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
    else echo "$me: need sha256sum or shasum to verify the download" >&2; exit 1; fi
}

# fetch URL OUT: 0 ok, 2 no network, 1 other failure (messages on stderr)
fetch() {
    local url=$1 out=$2 rc=0 host
    host=$(printf '%s\n' "$url" | sed -E 's#^[a-z]+://([^/:]+).*#\1#')
    if command -v curl >/dev/null 2>&1; then
        local quiet=-sS
        [ -t 2 ] && quiet=--progress-bar  # a bar on a terminal, only errors in logs
        curl -fL $quiet --connect-timeout 20 --retry 2 --retry-delay 3 -o "$out" "$url" || rc=$?
        case $rc in
            0) return 0 ;;
            5|6|7|28|35|52|55|56) echo "$me: NO NETWORK: cannot reach $host (curl exit $rc). Nothing was written." >&2; return 2 ;;
            22) echo "$me: the server refused $url (HTTP error). Nothing was written." >&2; return 1 ;;
            *) echo "$me: download of $url failed (curl exit $rc). Nothing was written." >&2; return 1 ;;
        esac
    elif command -v wget >/dev/null 2>&1; then
        wget -q -T 20 -t 2 -O "$out" "$url" || rc=$?
        case $rc in
            0) return 0 ;;
            4) echo "$me: NO NETWORK: cannot reach $host (wget exit 4). Nothing was written." >&2; return 2 ;;
            *) echo "$me: download of $url failed (wget exit $rc). Nothing was written." >&2; return 1 ;;
        esac
    fi
    echo "$me: need curl or wget" >&2
    return 1
}

if [ -e "$DEST" ]; then
    if [ "$(sha256_of "$DEST")" = "$SHA256" ]; then
        echo "$me: $DEST already present and verified (sha256 $SHA256)"
        exit 0
    fi
    echo "$me: $DEST exists but its sha256 is not the published one; remove it and re-run" >&2
    exit 1
fi

mkdir -p "$DIR"
tmp=$(mktemp "$DIR/.enwik8.zip.part.XXXXXX")
trap 'rm -f "$tmp"; rmdir "$DIR" 2>/dev/null || true' EXIT  # rmdir: only if we left it empty
trap 'exit 130' INT TERM HUP

echo "$me: fetching $URL"
rc=0
fetch "$URL" "$tmp" || rc=$?
[ "$rc" -eq 0 ] || exit "$rc"

size=$(wc -c <"$tmp" | tr -d ' ')
if [ "$size" != "$BYTES" ]; then
    echo "$me: got $size bytes from $URL, expected $BYTES; refusing the file" >&2
    exit 1
fi
got=$(sha256_of "$tmp")
if [ "$got" != "$SHA256" ]; then
    echo "$me: sha256 of the download is $got, expected $SHA256; refusing the file" >&2
    exit 1
fi
mv -f "$tmp" "$DEST"
trap - EXIT
echo "$me: $DEST verified (sha256 $SHA256, $BYTES bytes). Use: --data enwik8 (standard 90M/5M/5M split)"
