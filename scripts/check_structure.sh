#!/usr/bin/env bash
# The house rules that a script can check (issue 36, item 5; issue 50, item 3); scripts/test.sh runs it before the
# builds:
#   1. no source file of the product (*.c, *.h anywhere under src/, include/, train/, eval/; tests/ is not the
#      product) over 600 lines;
#   2. no C function in those files over 100 lines, counted from the line of its name to the line of its closing
#      brace;
#   3. no cycle between the library's folders (src/<folder>/), neither by includes nor by calls;
#   4. one writer of whole files (src/io/atomic_file.c: a fresh temporary, fsync of file and folder, rename): no
#      rename(), no fopen() for writing ("w", "w+") and no open() with O_CREAT but without O_NOFOLLOW anywhere else
#      (appends, a log or the run's lock, keep O_NOFOLLOW);
#   5. floors: every folder of src/ sits on a floor (FLOORS below, bottom first) and includes or calls only its own
#      floor or lower ones; a folder missing from FLOORS fails too, so that a new one gets a place;
#   6. private headers: a header of src/X included from src/Y (Y != X) must be one of PUBLIC_HEADERS below, the
#      interfaces a folder offers to the others (include/lipt/ is the library's public API and always allowed);
#   7. BLAS and oneDNN known only in src/kernels: elsewhere in src/, no cblas_, dnnl_, openblas_, Cblas*, CBLAS_*
#      identifier in code (a struct member such as lipt_cpuinfo.dnnl_isa after `.` or `->` is a name, not a call)
#      and no include of cblas.h, dnnl.h (oneapi/dnnl/...) or an OpenBLAS header;
#   8. the kernel floor knows no tape: no lipt_ctx, lipt_tensor or lipt_node in the code of src/kernels (the kernels
#      take raw pointers and a lipt_kctx; the ops pass LIPT_KC(ctx));
#   9. no call cycle between files of src/: a function's file is where it is defined (a .c with external linkage, or
#      a header's static inline); a use of its name in another file is an edge (calls only: a .c including the
#      header that declares it is no edge back). A circle of files has no bottom to test or read from.
# Method (source only, no build needed; approximate but conservative): comments, string and character literals and
# preprocessor lines are blanked (line numbers kept); a function definition is a `name(...)` followed by `{` at file
# scope. Includes: "<folder>/x.h" (resolved under src/) or a header in the including file's own folder; the public
# headers (include/lipt/) belong to no folder. Calls: every function defined with external linkage in src/<folder>/*.c,
# and every (static inline) function defined in a src/<folder>/*.h, belongs to that folder; any use of its name
# (call, address taken, table entry) in a file of another folder that does not define the name itself is an edge
# from that folder to the defining one. A cycle is a strongly connected set of more than one folder; the script
# prints one reference per edge of it. Not seen: names a macro pastes together (the op table in src/autograd/optable.c
# names every op's lipt_<op>_backward through LIPT_OP_LIST: the tape's dispatch to the ops' backward passes, the one
# deliberate upward reference), calls made inside macros of the public headers, and data objects (a const table such
# as lipt_logit_map_softcap named in another file is no edge: only functions are).
#   scripts/check_structure.sh [ROOT]       (ROOT: the source tree, default this repository); exits 1 on any violation.
#   scripts/check_structure.sh --self-test  each rule failing on a planted violation in a copy of this repository
#                                           and passing on the copy as it is (tests/structure_test.sh).
set -euo pipefail
if [ "${1:-}" = "--self-test" ]; then
  exec bash "$(dirname "$0")/../tests/structure_test.sh" "$(dirname "$0")/.."
fi
ROOT=${1:-"$(dirname "$0")/.."}
exec python3 - "$ROOT" <<'PY'
import bisect, os, re, sys

root = sys.argv[1]

# The floors, bottom first: a folder may include and call its own floor and those below. Derived from the calls of
# the tree (issue 50): core is the platform (errors, arena, tensors, RNG); kernels the tape-free numerics and the only
# code that knows OpenBLAS and oneDNN; then the services that need no tape (files, data, processes, the variant
# table); the tape; the differentiable ops and the inversion built on the tape; the certificates and the optimisers
# that use the ops; the model; the commands' shell and the training loop on top.
FLOORS = [("core",), ("kernels",), ("io", "data", "dist", "variants"), ("autograd",), ("ops", "invert"),
          ("lipschitz", "optim"), ("nn",), ("shell", "train")]
FLOOR_OF = {f: i for i, fs in enumerate(FLOORS) for f in fs}
# The private headers (src/X/*.h) that other folders may include: each folder's interface for the floors above.
PUBLIC_HEADERS = {
    "kernels/kernels.h": "the kernel floor's interface (it includes the rest of src/kernels/*.h)",
    "autograd/kctx.h": "LIPT_KC: a tape context's kernel context, for the floors that hold a lipt_ctx",
    "core/outward.h": "outward rounding of the certificates, shared by the ops' and lipschitz' bounds",
    "lipschitz/spectral_impl.h": "the spectral norms' warm-started iterations, which the model (nn) drives",
}
BLAS_IDENT = re.compile(r"(?<![\w.])(?<!->)(?:(?:cblas|dnnl|openblas)_\w*|Cblas[A-Z]\w*|CBLAS_\w+)")
BLAS_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"](?:[\w/]*/)?(?:cblas|dnnl|openblas\w*)\.h[>\"]")
MAX_FILE, MAX_FUNC = 600, 100
PRODUCT = ("src", "include", "train", "eval")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "defined", "_Static_assert",
            "_Generic", "__attribute__", "alignof", "_Alignof", "typeof", "__typeof__"}

LEXEME = re.compile(r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*',
                    re.S | re.M)

def blank(text):
    """Comments, string / char literals and preprocessor lines replaced by spaces (newlines and quotes kept)."""
    def space(m):
        t = m.group(0)
        if t[0] in "\"'":
            return t[0] + re.sub(r"[^\n]", " ", t[1:-1]) + t[-1]
        return re.sub(r"[^\n]", " ", t)
    return LEXEME.sub(space, text)

def functions(code):
    """(name, first line, last line, static) of each function defined at file scope in blanked code."""
    newlines = [i for i, c in enumerate(code) if c == "\n"]
    line_of = lambda pos: bisect.bisect_left(newlines, pos) + 1
    found, depth, head_start, m, start_line, body_start = [], 0, 0, None, 0, 0
    for tok in re.finditer(r"[{};]", code):
        c, i = tok.group(0), tok.start()
        if c == "{":
            if depth == 0:
                head = code[head_start:i]
                m = None
                if "=" not in head and not re.search(r"\b(struct|union|enum)\s*\w*\s*$", head):
                    m = re.search(r"\b([A-Za-z_]\w*)\s*\(", head)
                    if m and not re.search(r"\)\s*(__attribute__\s*\(\(.*\)\)\s*)?$", head, re.S):
                        m = None
                    if m and m.group(1) in KEYWORDS:
                        m = None
                start_line = line_of(head_start + (m.start(1) if m else 0))
                body_start = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced '}' at line %d" % line_of(i))
            if depth == 0:
                if m:
                    static = re.search(r"\bstatic\b", code[head_start:body_start]) is not None
                    found.append((m.group(1), start_line, line_of(i), static))
                head_start = i + 1
        elif depth == 0:
            head_start = i + 1
    if depth != 0:
        raise ValueError("unbalanced braces (%d open at the end)" % depth)
    return found

def product_files():
    for top in PRODUCT:
        for d, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(d, name), root)

problems = []
parsed = {}
for rel in sorted(product_files()):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if lines > MAX_FILE:
        problems.append("%s: %d lines (at most %d: split it by responsibility)" % (rel, lines, MAX_FILE))
    code = blank(text)
    try:
        funcs = functions(code)
    except ValueError as e:
        problems.append("%s: cannot parse: %s" % (rel, e))
        continue
    for name, a, b, _ in funcs:
        if b - a + 1 > MAX_FUNC:
            problems.append("%s:%d: function %s is %d lines (at most %d)" % (rel, a, name, b - a + 1, MAX_FUNC))
    parsed[rel] = (text, code, funcs)

# ---- one writer of whole files ----
WRITER = os.path.join("src", "io", "atomic_file.c")
for rel, (text, code, _) in parsed.items():
    if rel == WRITER:
        continue
    raw = text.split("\n")
    for no, line in enumerate(code.split("\n"), 1):
        if re.search(r"(?<![\w.>])rename\s*\(", line):
            problems.append("%s:%d: rename(): files are replaced through lipt_output (%s) only" % (rel, no, WRITER))
        if re.search(r"\bfopen\s*\(", line) and re.search(r'\bfopen\s*\([^;]*,\s*"w', raw[no - 1]):
            problems.append("%s:%d: fopen() for writing: write a whole file through lipt_output (%s)" % (rel, no, WRITER))
        if re.search(r"\bO_CREAT\b", line) and not re.search(r"\bO_NOFOLLOW\b", line):
            problems.append("%s:%d: open() with O_CREAT but without O_NOFOLLOW" % (rel, no))

# ---- cycles between the library's folders ----
def folder_of(rel):
    parts = rel.split(os.sep)
    return parts[1] if parts[0] == "src" and len(parts) > 2 else None

edges = {}  # (from, to) -> first evidence
def edge(a, b, why):
    if a and b and a != b:
        edges.setdefault((a, b), why)

owner, local = {}, {}
for rel, (_, _, funcs) in parsed.items():
    fol = folder_of(rel)
    if not fol:
        continue
    for name, line, _, static in funcs:
        local.setdefault(fol, set()).add(name)
        if rel.endswith(".h") or not static:
            owner.setdefault(name, (fol, "%s:%d" % (rel, line)))
def quoted_includes(rel, text):
    """(line number, the include as written, the file it names relative to the root or None) of each #include "..."
    of rel: relative to rel's folder first, then to src/."""
    out = []
    for no, line in enumerate(text.split("\n"), 1):
        m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
        if not m:
            continue
        target = os.path.normpath(os.path.join(os.path.dirname(rel), m.group(1)))
        if not os.path.isfile(os.path.join(root, target)):
            target = os.path.normpath(os.path.join("src", m.group(1)))
        out.append((no, m.group(1), target if os.path.isfile(os.path.join(root, target)) else None))
    return out
includes = {rel: quoted_includes(rel, text) for rel, (text, _, _) in parsed.items() if folder_of(rel)}

for rel, (text, code, _) in parsed.items():
    fol = folder_of(rel)
    if not fol:
        continue
    for no, inc, _ in includes[rel]:
        if "/" in inc and os.path.isfile(os.path.join(root, "src", inc)):
            edge(fol, inc.split("/")[0], "%s:%d includes %s" % (rel, no, inc))
    for no, line in enumerate(code.split("\n"), 1):
        for ident in re.findall(r"[A-Za-z_]\w*", line):
            o = owner.get(ident)
            if o and o[0] != fol and ident not in local.get(fol, ()):
                edge(fol, o[0], "%s:%d uses %s (%s)" % (rel, no, ident, o[1]))

# ---- floors, private headers, BLAS and oneDNN only in src/kernels ----
for fol in sorted({folder_of(rel) for rel in parsed} - {None}):
    if fol not in FLOOR_OF:
        problems.append("src/%s: a folder on no floor (add it to FLOORS in scripts/check_structure.sh)" % fol)
for (a, b), why in sorted(edges.items()):
    if a in FLOOR_OF and b in FLOOR_OF and FLOOR_OF[a] < FLOOR_OF[b]:
        problems.append("floor: %s (floor %d) reaches up to %s (floor %d): %s" % (a, FLOOR_OF[a], b, FLOOR_OF[b], why))
for rel, (text, code, _) in parsed.items():
    fol = folder_of(rel)
    if not fol:
        continue
    for no, _, target in includes[rel]:
        tf = folder_of(target) if target else None
        if tf and tf != fol and os.path.relpath(target, "src") not in PUBLIC_HEADERS:
            problems.append("%s:%d: includes %s, a private header of src/%s (not in PUBLIC_HEADERS)"
                            % (rel, no, os.path.relpath(target, "src"), tf))
    for no, line in enumerate(text.split("\n"), 1):
        if fol != "kernels" and BLAS_INCLUDE.match(line):
            problems.append("%s:%d: includes a BLAS / oneDNN header outside src/kernels" % (rel, no))
    if fol == "kernels":
        for no, line in enumerate(code.split("\n"), 1):
            for m in re.finditer(r"\b(lipt_ctx|lipt_tensor|lipt_node)\b", line):
                problems.append("%s:%d: %s in the kernel floor (take raw pointers and a lipt_kctx)" % (rel, no, m.group(1)))
        continue
    for no, line in enumerate(code.split("\n"), 1):
        for m in BLAS_IDENT.finditer(line):
            problems.append("%s:%d: %s: BLAS / oneDNN outside src/kernels (call a kernel)" % (rel, no, m.group(0)))

# ---- call cycles between files of src/ ----
fowner = {}
for rel, (_, _, funcs) in parsed.items():
    if folder_of(rel):
        for name, line, _, static in funcs:
            if rel.endswith(".h") or not static:
                fowner.setdefault(name, rel)
def inside_braces(code):
    """code with everything at file scope (brace depth 0) blanked: prototypes there declare, they do not use."""
    out, depth = [], 0
    for c in code:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        out.append(c if depth > 0 or c == "\n" else " ")
    return "".join(out)

fedges = {}
for rel, (_, code, funcs) in parsed.items():
    if not folder_of(rel):
        continue
    own = {f[0] for f in funcs}
    for no, line in enumerate(inside_braces(code).split("\n"), 1):
        for ident in re.findall(r"[A-Za-z_]\w*", line):
            o = fowner.get(ident)
            if o and o != rel and ident not in own:
                fedges.setdefault((rel, o), "%s:%d uses %s" % (rel, no, ident))

def components(nodes, succ):
    """Strongly connected components (Tarjan, iterative), sinks first."""
    index, low, st, on, out, counter = {}, {}, [], set(), [], [0]
    for root_v in sorted(nodes):
        if root_v in index:
            continue
        work = [(root_v, iter(sorted(succ.get(root_v, ()))))]
        index[root_v] = low[root_v] = counter[0]; counter[0] += 1
        st.append(root_v); on.add(root_v)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    st.append(w); on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = st.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out

fsucc = {}
for a, b in fedges:
    fsucc.setdefault(a, set()).add(b)
file_cycles = [c for c in components({f for e in fedges for f in e}, fsucc) if len(c) > 1]
for comp in file_cycles:
    problems.append("call cycle between files: %s" % ", ".join(comp))
    for (a, b), why in sorted(fedges.items()):
        if a in comp and b in comp:
            problems.append("  %s -> %s: %s" % (a, b, why))

graph = {}
for a, b in edges:
    graph.setdefault(a, set()).add(b)
    graph.setdefault(b, set())
index, low, stack, on, sccs = {}, {}, [], set(), []
def strong(v):  # Tarjan
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in sorted(graph[v]):
        if w not in index:
            strong(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        sccs.append(sorted(comp))
for v in sorted(graph):
    if v not in index:
        strong(v)
for comp in sccs:
    if len(comp) > 1:
        problems.append("cycle between src/ folders %s:" % ", ".join(comp))
        for (a, b), why in sorted(edges.items()):
            if a in comp and b in comp:
                problems.append("  %s -> %s: %s" % (a, b, why))

if problems:
    print("check_structure: %d problem(s) in %s" % (sum(not p.startswith("  ") for p in problems), root))
    for p in problems:
        print("  " + p)
    sys.exit(1)
print("check_structure: ok (%d files; %d file-level call edges, no cycle; floors: %s)" % (len(parsed), len(fedges),
      " < ".join("/".join(fs) for fs in FLOORS)))
PY
