#!/usr/bin/env bash
# The documentation rules that a script can check; run it after editing README.md or docs/*.md:
#   1. README.md has at most 150 lines and mentions `scripts/demo.sh` within its first 40 lines;
#   2. no line of prose over 120 characters in README.md and docs/*.md (table rows, which start with `|`, fenced code
#      blocks and lines that are only a link or a URL are not prose);
#   3. no commit hash (7 to 40 hexadecimal characters, at least one digit and one letter) outside a section whose
#      heading says "Changelog" or "History" (the section runs to the next heading of the same or a higher level);
#   4. no "acceptance recipe" (name a recipe by what it is: "the 1,500-step PTB recipe") and no "issue <number>"
#      (the documents speak of the product, not of how it was made);
#   5. every relative link [text](path) or [text](path#anchor) in those files names a file that exists and, with an
#      anchor, a heading of that file (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens).
#   scripts/check_docs.sh [ROOT]   (ROOT: the repository, default this one); prints file:line: message for every
#   violation and exits 1 if there is any.
set -euo pipefail
ROOT=${1:-"$(dirname "$0")/.."}
exec python3 - "$ROOT" <<'PY'
import glob, os, re, sys

root = sys.argv[1]
MAX_README, DEMO_WITHIN, MAX_PROSE = 150, 40, 120
errors = []

def err(path, line, msg):
    errors.append(f"{os.path.relpath(path, root)}:{line}: {msg}")

HASH = re.compile(r"(?<![0-9A-Za-z_./-])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.I)
ONLY_LINK = re.compile(r"^\s*(?:[-*]\s+)?(?:<?https?://\S+>?|\[[^\]]*\]\([^)\s]*\))\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")

def slug(title):
    t = re.sub(r"`", "", title.strip().lower())
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")

def anchors(path):
    out, fence = set(), False
    try:
        lines = open(path, encoding="utf-8").read().split("\n")
    except OSError:
        return out
    seen = {}
    for ln in lines:
        if ln.lstrip().startswith("```"):
            fence = not fence
            continue
        m = None if fence else HEADING.match(ln)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out

files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
for path in files:
    if not os.path.exists(path):
        err(path, 0, "missing")
        continue
    lines = open(path, encoding="utf-8").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if os.path.basename(path) == "README.md" and os.path.dirname(os.path.abspath(path)) == os.path.abspath(root):
        if len(lines) > MAX_README:
            err(path, len(lines), f"README.md has {len(lines)} lines (at most {MAX_README})")
        if not any("scripts/demo.sh" in ln for ln in lines[:DEMO_WITHIN]):
            err(path, 1, f"scripts/demo.sh not mentioned in the first {DEMO_WITHIN} lines")
    fence = False
    history_level = 0  # > 0 while inside a Changelog / History section of that heading level
    for no, ln in enumerate(lines, 1):
        if ln.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        m = HEADING.match(ln)
        if m:
            level = len(m.group(1))
            if history_level and level <= history_level:
                history_level = 0
            if re.search(r"changelog|history", m.group(2), re.I):
                history_level = level
        is_table = ln.lstrip().startswith("|")
        if not is_table and len(ln) > MAX_PROSE and not ONLY_LINK.match(ln):
            err(path, no, f"prose line of {len(ln)} characters (at most {MAX_PROSE})")
        if not history_level:
            for h in HASH.finditer(ln):
                s = h.group(0)
                if re.search(r"[0-9]", s) and re.search(r"[a-f]", s):
                    err(path, no, f"commit hash '{s}' outside a Changelog or History section")
        if re.search(r"acceptance recipe", ln, re.I):
            err(path, no, "'acceptance recipe': name the recipe by what it is")
        for i in ISSUE.finditer(ln):
            err(path, no, f"'{i.group(0)}': no issue numbers in the documents")
        for lm in LINK.finditer(ln):
            target = lm.group(1) or lm.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(dest):
                err(path, no, f"link to '{target}': no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                err(path, no, f"link to '{target}': no such heading")

for e in errors:
    print(e)
if errors:
    print(f"check_docs: {len(errors)} violation(s)", file=sys.stderr)
    sys.exit(1)
print("check_docs: README.md and docs/*.md follow the rules")
PY
