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
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

get_pinned_file "$URL" "$SHA256" "$BYTES" "${1:-$here}/enwik8" enwik8.zip enwik8
