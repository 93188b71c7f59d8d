#!/usr/bin/env bash
# Downloads text8.zip (Mahoney's wikifil.pl output of enwik9, first 10^8 characters: a-z and space)
# and verifies its sha256. lipt reads the zip directly: `lipt ... --data text8`.
#
# Usage: data/get_text8.sh [DEST_ROOT]       file goes to DEST_ROOT/text8/text8.zip (default: <repo>/data)
#
# Pinned hash: sha256 a6640522...a38e5232, 31,344,016 bytes. Several independent public projects pin the
# same sha256 for http://mattmahoney.net/dc/text8.zip, and TensorFlow's word2vec tutorial pins the same size.
# We have not downloaded it ourselves (there was no network here).
# The download goes to a hidden temporary file that is removed on failure or interrupt. Nothing is moved
# into place unless its size and sha256 both match.
set -euo pipefail

URL="${LIPT_TEXT8_URL:-http://mattmahoney.net/dc/text8.zip}"
SHA256=a6640522afe85d1963ad56c05b0ede0a0c000dddc9671758a6cc09b7a38e5232
BYTES=31344016
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

get_pinned_file "$URL" "$SHA256" "$BYTES" "${1:-$here}/text8" text8.zip text8
