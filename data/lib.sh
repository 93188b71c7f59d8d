# shellcheck shell=bash
# data/lib.sh: the fetch / verify / temporary-file helpers the get_*.sh download scripts source (not run alone).
# The caller has `set -euo pipefail`. Messages start with the calling script's name.

me=$(basename "$0")

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
    else echo "$me: need sha256sum or shasum to verify the download" >&2; exit 1; fi
}

# fetch URL OUT [NOTE]: 0 ok, 2 no network, 1 other failure (messages on stderr, each ending with NOTE)
fetch() {
    local url=$1 out=$2 note=${3:-} rc=0 host
    host=$(printf '%s\n' "$url" | sed -E 's#^[a-z]+://([^/:]+).*#\1#')
    if command -v curl >/dev/null 2>&1; then
        local quiet=-sS
        [ -t 2 ] && quiet=--progress-bar  # a bar on a terminal, only errors in logs
        curl -fL $quiet --connect-timeout 20 --retry 2 --retry-delay 3 -o "$out" "$url" || rc=$?
        case $rc in
            0) return 0 ;;
            5|6|7|28|35|52|55|56) echo "$me: NO NETWORK: cannot reach $host (curl exit $rc)$note" >&2; return 2 ;;
            22) echo "$me: the server refused $url (HTTP error)$note" >&2; return 1 ;;
            *) echo "$me: download of $url failed (curl exit $rc)$note" >&2; return 1 ;;
        esac
    elif command -v wget >/dev/null 2>&1; then
        wget -q -T 20 -t 2 -O "$out" "$url" || rc=$?
        case $rc in
            0) return 0 ;;
            4) echo "$me: NO NETWORK: cannot reach $host (wget exit 4)$note" >&2; return 2 ;;
            *) echo "$me: download of $url failed (wget exit $rc)$note" >&2; return 1 ;;
        esac
    fi
    echo "$me: need curl or wget" >&2
    return 1
}

# temp_in DIR TEMPLATE [-d]: creates DIR and a hidden temporary file (folder with -d) in it, named in $tmp.
# On exit $tmp is removed, and DIR too if that leaves it empty. Globals, because the trap runs after we return.
temp_in() {
    tmp_dir=$1
    mkdir -p "$tmp_dir"
    tmp=$(mktemp ${3:+"$3"} "$tmp_dir/$2")
    trap 'rm -rf "$tmp"; rmdir "$tmp_dir" 2>/dev/null || true' EXIT
    trap 'exit 130' INT TERM HUP
}

# get_pinned_file URL SHA256 BYTES DIR NAME CORPUS: puts URL at DIR/NAME, but only if its size and sha256 both
# match; a wrong download is refused and nothing is left behind. Exits: 0 done, 1 refused or failed, 2 no network.
get_pinned_file() {
    local url=$1 sha=$2 bytes=$3 dir=$4 name=$5 corpus=$6 dest="$4/$5" rc=0 size got
    if [ -e "$dest" ]; then
        if [ "$(sha256_of "$dest")" = "$sha" ]; then
            echo "$me: $dest already present and verified (sha256 $sha)"
            exit 0
        fi
        echo "$me: $dest exists but its sha256 is not the published one; remove it and re-run" >&2
        exit 1
    fi

    temp_in "$dir" ".$name.part.XXXXXX"
    echo "$me: fetching $url"
    fetch "$url" "$tmp" ". Nothing was written." || rc=$?
    [ "$rc" -eq 0 ] || exit "$rc"

    size=$(wc -c <"$tmp" | tr -d ' ')
    if [ "$size" != "$bytes" ]; then
        echo "$me: got $size bytes from $url, expected $bytes; refusing the file" >&2
        exit 1
    fi
    got=$(sha256_of "$tmp")
    if [ "$got" != "$sha" ]; then
        echo "$me: sha256 of the download is $got, expected $sha; refusing the file" >&2
        exit 1
    fi
    mv -f "$tmp" "$dest"
    trap - EXIT
    echo "$me: $dest verified (sha256 $sha, $bytes bytes). Use: --data $corpus (standard 90M/5M/5M split)"
}
