#!/usr/bin/env bash
# lipt plot (issue 51, item 6): values a diverged run logs (+-1e308, null) are left out with a note, never drawn as
# "nan" (the range between two finite extremes overflowed to inf); --out FILE.png and --png write a PNG lipt encodes
# itself (checked here chunk by chunk: signature, IHDR, CRC-32s, the IDAT's rows inflated, no converter needed).
# Usage: plot_test.sh LIPT_BINARY
set -u
. "$(dirname "$0")/util/e2e.sh" plot "${1:-}"

mkdir -p "$TMP/run"
for i in $(seq 1 40); do echo "{\"step\":$i,\"loss\":2,\"bpc\":$(awk -v i="$i" 'BEGIN { print 3 - i / 40 }')}"; done \
  > "$TMP/run/metrics.jsonl"
{ echo '{"step":41,"loss":1,"bpc":1e308}'; echo '{"step":42,"loss":1,"bpc":-1e308}'
  echo '{"step":43,"loss":1,"bpc":null}'; echo '{"step":20,"eval":"valid","bpc":2.4}'
  echo '{"step":30,"eval":"valid","bpc":1e308}'; } >> "$TMP/run/metrics.jsonl"

# ---- huge and non-finite values
if "$LIPT" plot "$TMP/run" --out "$TMP/a.svg" 2> "$TMP/err"; then
  if grep -qi nan "$TMP/a.svg"; then fail "plot: 'nan' in the SVG: $(grep -io '.\{30\}nan.\{10\}' "$TMP/a.svg" | head -2)"
  else pass "plot: no nan in the SVG of a run that logged +-1e308 and null"; fi
  grep -q "4 points not drawn" "$TMP/err" && pass "plot: the points left out are said: $(head -1 "$TMP/err")" ||
    fail "plot: no note of the points left out: $(cat "$TMP/err")"
else
  fail "plot of +-1e308: $(cat "$TMP/err")"
fi

# ---- PNG, by the name and by --png; a name neither .svg nor .png is refused
check_png() { # the file is a PNG of the given size whose chunks' CRCs hold and whose rows inflate to w*3+1 bytes each
  python3 - "$1" "$2" "$3" <<'PY'
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n", "signature"
pos, chunks = 8, []
while pos < len(d):
    n, = struct.unpack(">I", d[pos:pos + 4])
    t, body, crc = d[pos + 4:pos + 8], d[pos + 8:pos + 8 + n], struct.unpack(">I", d[pos + 8 + n:pos + 12 + n])[0]
    assert zlib.crc32(t + body) == crc, "CRC of %r" % t
    chunks.append((t, body))
    pos += 12 + n
assert [c[0] for c in chunks] == [b"IHDR", b"IDAT", b"IEND"], [c[0] for c in chunks]
w, h, depth, kind = struct.unpack(">IIBB", chunks[0][1][:10])
assert (w, h, depth, kind) == (int(sys.argv[2]), int(sys.argv[3]), 8, 2), (w, h, depth, kind)
raw = zlib.decompress(chunks[1][1])
assert len(raw) == h * (3 * w + 1), len(raw)
rows = [raw[y * (3 * w + 1) + 1:(y + 1) * (3 * w + 1)] for y in range(h)]
assert len(set(rows)) > 10, "a blank picture"
PY
}
if "$LIPT" plot "$TMP/run" --out "$TMP/b.png" 2> "$TMP/err" && check_png "$TMP/b.png" 960 480 2>> "$TMP/err"; then
  pass "plot --out b.png: a valid 960 x 480 PNG ($(wc -c < "$TMP/b.png") bytes)"
else fail "plot --out b.png: $(cat "$TMP/err")"; fi
if "$LIPT" plot "$TMP/run" --out "$TMP/c.svg" --png 2> "$TMP/err" && [ -s "$TMP/c.svg" ] &&
   check_png "$TMP/c.png" 960 480 2>> "$TMP/err"; then pass "plot --png: c.svg and c.png"
else fail "plot --png: $(cat "$TMP/err")"; fi
"$LIPT" plot "$TMP/run" --out "$TMP/d.jpg" 2> "$TMP/err" && fail "plot --out d.jpg accepted" ||
  pass "plot --out d.jpg refused: $(cat "$TMP/err")"

e2e_done
