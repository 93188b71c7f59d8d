#!/usr/bin/env bash
# Fetches the Penn Treebank character-level files ptb.char.{train,valid,test}.txt (Mikolov's preprocessing)
# and verifies each one's sha256. Use them with `lipt ... --data ptb`.
#
# Usage: data/get_ptb.sh [DEST_ROOT]         files go to DEST_ROOT/ptb/ (default: <repo>/data)
#
# Sources, tried in order:
#   1. Mikolov's simple-examples.tgz (http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz). The three
#      char files are taken out of data/ in the archive. We pin no hash for the archive itself: we could not
#      confirm a published one.
#   2. The same files in the GitHub repository arthurdehgan/IFT6135_assignment_2, at a fixed commit.
# Either way, each file must match the sha256 below. These hashes are the ones in
# /work/shared/data/ptb/PROVENANCE.md. There they were checked against public git blob ids, and the char
# files were rebuilt from the word-level files whose md5s torchtext pins.
# Temporary files live in a hidden folder that is removed on exit. Files are moved into place only after all
# three have verified, so no partial file is left.
set -euo pipefail

TGZ_URL="${LIPT_PTB_TGZ_URL:-http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz}"
GH_BASE="${LIPT_PTB_GH_BASE:-https://raw.githubusercontent.com/arthurdehgan/IFT6135_assignment_2/191820cabc95c8d8af11d0bf3679207dd3b97e08/data}"
SPLITS="train valid test"
sha_for() {
    case $1 in
        train) echo e313d91425e06c4f0a8fb6e881dcce0c291f2a0e9f4dda54833069b122f91da9 ;;
        valid) echo 21661f63ec355085879458b6524644d4add5573541b4be14fb52ab2e2e995eb8 ;;
        test)  echo 1ef5607ac3c463b16e38bfe7900dd3bfc91de5a96e0f21e7eab5188b465b8ebe ;;
    esac
}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
DIR="${1:-$here}/ptb"

# Already there?
present=0
for s in $SPLITS; do
    f="$DIR/ptb.char.$s.txt"
    if [ -e "$f" ]; then
        if [ "$(sha256_of "$f")" != "$(sha_for "$s")" ]; then
            echo "$me: $f exists but its sha256 is not the expected one; remove it and re-run" >&2
            exit 1
        fi
        present=$((present + 1))
    fi
done
if [ "$present" -eq 3 ]; then
    echo "$me: $DIR/ptb.char.{train,valid,test}.txt already present and verified"
    exit 0
fi

temp_in "$DIR" ".get_ptb.XXXXXX" -d
work=$tmp

verify_all() { # dir with the three files
    for s in $SPLITS; do
        local f="$1/ptb.char.$s.txt" got
        [ -f "$f" ] || { echo "$me: $2 gave no ptb.char.$s.txt" >&2; return 1; }
        got=$(sha256_of "$f")
        if [ "$got" != "$(sha_for "$s")" ]; then
            echo "$me: ptb.char.$s.txt from $2 has sha256 $got, expected $(sha_for "$s"); refusing it" >&2
            return 1
        fi
    done
}

ok=0 offline=0
echo "$me: fetching $TGZ_URL"
rc=0
fetch "$TGZ_URL" "$work/simple-examples.tgz" || rc=$?
if [ "$rc" -eq 0 ]; then
    mkdir -p "$work/tgz"
    members=$(tar -tzf "$work/simple-examples.tgz" 2>/dev/null | grep -E '(^|/)data/ptb\.char\.(train|valid|test)\.txt$' || true)
    # shellcheck disable=SC2086  # member names have no spaces; one word each
    if [ -n "$members" ] && tar -xzf "$work/simple-examples.tgz" -C "$work/tgz" $members 2>/dev/null; then
        for m in $members; do mv -f "$work/tgz/$m" "$work/$(basename "$m")"; done
        verify_all "$work" "simple-examples.tgz" && ok=1
    else
        echo "$me: simple-examples.tgz is unreadable or lacks data/ptb.char.*.txt" >&2
    fi
elif [ "$rc" -eq 2 ]; then
    offline=1
fi

if [ "$ok" -eq 0 ]; then
    echo "$me: trying $GH_BASE"
    rm -f "$work"/ptb.char.*.txt
    got_all=1
    for s in $SPLITS; do
        rc=0
        fetch "$GH_BASE/ptb.char.$s.txt" "$work/ptb.char.$s.txt" || rc=$?
        if [ "$rc" -ne 0 ]; then
            got_all=0
            [ "$rc" -eq 2 ] && offline=$((offline + 1))
            break
        fi
    done
    if [ "$got_all" -eq 1 ] && verify_all "$work" "$GH_BASE"; then ok=1; fi
fi

if [ "$ok" -eq 0 ]; then
    if [ "$offline" -ge 2 ]; then
        echo "$me: NO NETWORK: neither source could be reached. Nothing was written." >&2
        echo "$me: (a verified copy may already exist in ../shared/data/ptb, which lipt also searches)" >&2
        exit 2
    fi
    echo "$me: no verified copy could be obtained. Nothing was written." >&2
    exit 1
fi
for s in $SPLITS; do mv -f "$work/ptb.char.$s.txt" "$DIR/ptb.char.$s.txt"; done
echo "$me: $DIR/ptb.char.{train,valid,test}.txt verified (sha256). Use: --data ptb"
