/* Corpus lookup (--data NAME|PATH), the standard and fraction splits, and the encoded dataset. */
#include "lipt/data.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* snprintf that truncates quietly: for names, notes and messages, which may be cut short (paths: path_fmt). */
__attribute__((format(printf, 3, 4))) static void sfmt(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

/* A path built into buf (cap bytes). One that does not fit is emptied, never cut: a cut path can name another file,
 * which would then be trained on (issue 38). 1 when it fit. */
__attribute__((format(printf, 3, 4))) static int path_fmt(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap) {
        buf[0] = 0; /* is_file and is_dir of "" are false: a candidate that does not fit is not there */
        return 0;
    }
    return 1;
}

#define STD_TOTAL 100000000u
#define STD_TRAIN 90000000u
#define STD_VALID 5000000u

const char *lipt_split_name(int s) {
    switch (s) {
    case LIPT_TRAIN: return "train";
    case LIPT_VALID: return "valid";
    case LIPT_TEST: return "test";
    }
    return "?";
}

static const char *kind_name(lipt_corpus_kind k) {
    switch (k) {
    case LIPT_CORPUS_PTB: return "PTB char";
    case LIPT_CORPUS_ENWIK8: return "enwik8";
    case LIPT_CORPUS_TEXT8: return "text8";
    case LIPT_CORPUS_TEXT: break;
    }
    return "text";
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}
static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}
static long long file_size(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}
static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}
static int starts_with(const char *s, const char *pre) { return strncmp(s, pre, strlen(pre)) == 0; }

/* 1234567 -> "1,234,567" */
static const char *commas(unsigned long long v, char *buf, size_t len) {
    char raw[32];
    sfmt(raw, sizeof raw, "%llu", v);
    size_t n = strlen(raw), k = 0;
    for (size_t i = 0; i < n && k + 2 < len; i++) {
        if (i && (n - i) % 3 == 0) buf[k++] = ',';
        buf[k++] = raw[i];
    }
    buf[k] = 0;
    return buf;
}

/* Where the library was built from: __FILE__ is absolute under CMake. */
static void default_repo_root(char *buf, size_t len) {
    const char *e = getenv("LIPT_REPO");
    if (e && *e) {
        path_fmt(buf, len, "%s", e); /* LIPT_REPO too long: no repo folder rather than a cut one */
        return;
    }
    const char *f = __FILE__, *suffix = "/src/data/corpus.c";
    size_t fl = strlen(f), sl = strlen(suffix);
    if (f[0] == '/' && fl > sl && strcmp(f + fl - sl, suffix) == 0) {
        sfmt(buf, len, "%.*s", (int)(fl - sl), f);
        if (is_dir(buf)) return;
    }
    sfmt(buf, len, ".");
}

static void append(char *buf, size_t cap, const char *fmt, const char *a, const char *b) {
    size_t l = strlen(buf);
    if (l + 1 >= cap) return;
    sfmt(buf + l, cap - l, fmt, a, b);
}

static void set_all_paths(lipt_corpus_loc *loc, const char *p) {
    for (int s = 0; s < 3; s++) path_fmt(loc->path[s], LIPT_PATH_MAX, "%s", p);
}

static int ptb_in_dir(const char *dir, lipt_corpus_loc *loc) {
    static const char *const f[3] = {"ptb.char.train.txt", "ptb.char.valid.txt", "ptb.char.test.txt"};
    char p[3][LIPT_PATH_MAX];
    for (int s = 0; s < 3; s++) {
        path_fmt(p[s], LIPT_PATH_MAX, "%s/%s", dir, f[s]);
        if (!is_file(p[s])) return 0;
    }
    loc->kind = LIPT_CORPUS_PTB;
    for (int s = 0; s < 3; s++) memcpy(loc->path[s], p[s], LIPT_PATH_MAX);
    sfmt(loc->note, sizeof loc->note, "PTB char files in %s", dir);
    return 1;
}

/* Files in a corpus folder that are not the corpus. */
static int is_metadata(const char *n) {
    if (n[0] == '.') return 1;
    static const char *const skip[] = {"PROVENANCE.md", "README.md", "SHA256SUMS", "LICENSE", NULL};
    for (int i = 0; skip[i]; i++)
        if (strcmp(n, skip[i]) == 0) return 1;
    size_t l = strlen(n);
    return (l > 3 && strcmp(n + l - 3, ".sh") == 0) || (l > 5 && strcmp(n + l - 5, ".part") == 0) ||
           (l > 4 && strcmp(n + l - 4, ".tmp") == 0);
}

/* enwik8/text8: pass 0 looks for the full file, pass 1 for the largest prefix <name>.head*. */
static int big_in_dir(const char *dir, const char *name, int pass, lipt_corpus_loc *loc) {
    char p[LIPT_PATH_MAX];
    if (pass == 0) {
        static const char *const ext[] = {"", ".zip", ".gz", NULL};
        for (int i = 0; ext[i]; i++) {
            path_fmt(p, sizeof p, "%s/%s%s", dir, name, ext[i]);
            if (is_file(p)) {
                set_all_paths(loc, p);
                sfmt(loc->note, sizeof loc->note, "%s from %s", name, p);
                return 1;
            }
        }
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d) return 0;
    char pre[80], best[LIPT_PATH_MAX] = "";
    long long best_size = -1;
    sfmt(pre, sizeof pre, "%s.head", name);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!starts_with(de->d_name, pre) || is_metadata(de->d_name)) continue;
        path_fmt(p, sizeof p, "%s/%s", dir, de->d_name);
        long long sz = file_size(p);
        if (is_file(p) && sz > best_size) {
            best_size = sz;
            memcpy(best, p, sizeof best);
        }
    }
    closedir(d);
    if (best_size < 0) return 0;
    set_all_paths(loc, best);
    loc->is_prefix = 1;
    char a[32], b[32];
    sfmt(loc->note, sizeof loc->note,
             "%s: only a PREFIX was found, %s (%s bytes of %s): the standard split cannot be formed and results are "
             "not comparable with published %s numbers; data/get_%s.sh fetches the full file",
             name, best, commas((unsigned long long)best_size, a, sizeof a), commas(STD_TOTAL, b, sizeof b), name, name);
    return 1;
}

/* A folder holding exactly one data file (tinyshakespeare/input.txt, warandpeace/warandpeace.txt, ...). */
static int single_in_dir(const char *dir, const char *name, lipt_corpus_loc *loc, char *why, size_t wl) {
    static const char *const pref[] = {"input.txt", NULL};
    char p[LIPT_PATH_MAX];
    path_fmt(p, sizeof p, "%s/%s.txt", dir, name);
    if (is_file(p)) goto found;
    for (int i = 0; pref[i]; i++) {
        path_fmt(p, sizeof p, "%s/%s", dir, pref[i]);
        if (is_file(p)) goto found;
    }
    DIR *d = opendir(dir);
    if (!d) {
        sfmt(why, wl, "cannot list it");
        return 0;
    }
    int count = 0;
    struct dirent *de;
    char q[LIPT_PATH_MAX];
    while ((de = readdir(d))) {
        if (is_metadata(de->d_name)) continue;
        path_fmt(q, sizeof q, "%s/%s", dir, de->d_name);
        if (!is_file(q)) continue;
        if (count++ == 0) memcpy(p, q, sizeof p);
    }
    closedir(d);
    if (count == 1) goto found;
    if (count) sfmt(why, wl, "%d candidate files, expected one (or %s.txt / input.txt)", count, name);
    else sfmt(why, wl, "no data file in it");
    return 0;
found:
    set_all_paths(loc, p);
    sfmt(loc->note, sizeof loc->note, "%s from %s", name, p);
    return 1;
}

static lipt_corpus_kind kind_of_name(const char *n) {
    if (strcmp(n, "ptb") == 0) return LIPT_CORPUS_PTB;
    if (strcmp(n, "enwik8") == 0) return LIPT_CORPUS_ENWIK8;
    if (strcmp(n, "text8") == 0) return LIPT_CORPUS_TEXT8;
    return LIPT_CORPUS_TEXT;
}

static lipt_status locate_path(const char *spec, lipt_corpus_loc *loc, lipt_error *err) {
    const char *bn = base_name(spec);
    if (is_dir(spec)) {
        char why[128] = "";
        if (ptb_in_dir(spec, loc)) {
            sfmt(loc->name, sizeof loc->name, "ptb");
            return LIPT_OK;
        }
        char nm[LIPT_PATH_MAX];
        size_t l = strlen(spec);
        while (l > 1 && spec[l - 1] == '/') l--;
        sfmt(nm, sizeof nm, "%.*s", (int)l, spec);
        sfmt(loc->name, sizeof loc->name, "%s", base_name(nm));
        lipt_corpus_kind k = kind_of_name(loc->name);
        if (k == LIPT_CORPUS_ENWIK8 || k == LIPT_CORPUS_TEXT8) {
            for (int pass = 0; pass < 2; pass++)
                if (big_in_dir(spec, loc->name, pass, loc)) {
                    loc->kind = k;
                    return LIPT_OK;
                }
        }
        if (single_in_dir(spec, loc->name, loc, why, sizeof why)) {
            loc->kind = LIPT_CORPUS_TEXT;
            return LIPT_OK;
        }
        return lipt_fail(err, LIPT_ERR_IO,
                         "--data %s: a folder, but it holds neither ptb.char.{train,valid,test}.txt nor a single data "
                         "file (%s)",
                         spec, why);
    }
    if (!is_file(spec)) {
        struct stat st;
        if (stat(spec, &st) == 0) /* it exists: say what it is rather than "no such file" (and never open a FIFO) */
            return lipt_fail(err, LIPT_ERR_IO, "--data %s exists but is not a regular file or folder (%s)", spec,
                             S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                                                 : "a special file");
        return lipt_fail(err, LIPT_ERR_IO, "--data %s: no such file or folder", spec);
    }
    if (starts_with(bn, "ptb.char.")) {
        char dir[LIPT_PATH_MAX];
        sfmt(dir, sizeof dir, "%.*s", bn == spec ? 1 : (int)(bn - spec - 1), bn == spec ? "." : spec);
        if (ptb_in_dir(dir, loc)) {
            sfmt(loc->name, sizeof loc->name, "ptb");
            return LIPT_OK;
        }
        return lipt_fail(err, LIPT_ERR_IO, "--data %s: a PTB char file, but %s lacks one of ptb.char.{train,valid,test}.txt",
                         spec, dir);
    }
    set_all_paths(loc, spec);
    if (starts_with(bn, "enwik8") || starts_with(bn, "text8")) {
        loc->kind = starts_with(bn, "enwik8") ? LIPT_CORPUS_ENWIK8 : LIPT_CORPUS_TEXT8;
        sfmt(loc->name, sizeof loc->name, "%s", loc->kind == LIPT_CORPUS_ENWIK8 ? "enwik8" : "text8");
        loc->is_prefix = strstr(bn, ".head") != NULL;
        sfmt(loc->note, sizeof loc->note, "%s from %s%s", loc->name, spec,
                 loc->is_prefix ? " (a PREFIX: the standard split cannot be formed)" : "");
    } else {
        loc->kind = LIPT_CORPUS_TEXT;
        sfmt(loc->name, sizeof loc->name, "%s", bn);
        sfmt(loc->note, sizeof loc->note, "text from %s", spec);
    }
    return LIPT_OK;
}

/* The corpora found in the roots ("ptb, tinyshakespeare"; folders that hold one, first root first) into out, and the
 * one nearest to spec into near ("" if none): a typo names the corpus meant, and the message lists what is there. */
static void found_corpora(char roots[][LIPT_PATH_MAX], const int *have_root, int n_roots, const char *spec, char *out,
                          size_t cap, char *near, size_t near_cap) {
    char names[16][64];
    const char *list[16];
    int n = 0;
    out[0] = 0;
    for (int r = 0; r < n_roots; r++) {
        DIR *d = have_root[r] ? opendir(roots[r]) : NULL;
        for (struct dirent *de; d && n < 16 && (de = readdir(d));) {
            char dir[LIPT_PATH_MAX + 80], why[160];
            lipt_corpus_loc tmp;
            const lipt_corpus_kind k = kind_of_name(de->d_name);
            path_fmt(dir, sizeof dir, "%s/%s", roots[r], de->d_name);
            if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof names[0] || !is_dir(dir)) continue;
            const int ok = k == LIPT_CORPUS_PTB ? ptb_in_dir(dir, &tmp)
                           : k == LIPT_CORPUS_ENWIK8 || k == LIPT_CORPUS_TEXT8
                               ? big_in_dir(dir, de->d_name, 0, &tmp) || big_in_dir(dir, de->d_name, 1, &tmp)
                               : single_in_dir(dir, de->d_name, &tmp, why, sizeof why);
            int dup = 0;
            for (int i = 0; i < n; i++) dup |= strcmp(names[i], de->d_name) == 0;
            if (!ok || dup) continue;
            sfmt(names[n], sizeof names[n], "%s", de->d_name);
            int i = n++; /* kept in alphabetical order: the message does not depend on the order of readdir */
            for (; i > 0 && strcmp(list[i - 1], names[n - 1]) > 0; i--) list[i] = list[i - 1];
            list[i] = names[n - 1];
        }
        if (d) closedir(d);
    }
    for (int i = 0; i < n; i++) append(out, cap, "%s%s", i ? ", " : "", list[i]);
    const char *best = lipt_nearest_name(spec, list, n);
    sfmt(near, near_cap, "%s", best ? best : "");
}

lipt_status lipt_corpus_locate(const char *spec, const char *repo_root, lipt_corpus_loc *loc, lipt_error *err) {
    memset(loc, 0, sizeof *loc);
    if (!spec || !*spec) return lipt_fail(err, LIPT_ERR_ARG, "--data: empty corpus name");
    if (strlen(spec) >= LIPT_PATH_MAX) /* it would be cut, and the cut path could name another file */
        return lipt_fail(err, LIPT_ERR_ARG, "--data: a corpus path of %zu characters; lipt takes at most %d",
                         strlen(spec), LIPT_PATH_MAX - 1);
    lipt_corpus_kind k = kind_of_name(spec);
    int known = k != LIPT_CORPUS_TEXT || strcmp(spec, "tinyshakespeare") == 0 || strcmp(spec, "warandpeace") == 0;
    int has_slash = strchr(spec, '/') != NULL;
    if (has_slash || (!known && (is_file(spec) || is_dir(spec)))) return locate_path(spec, loc, err);

    char repo[LIPT_PATH_MAX], roots[3][LIPT_PATH_MAX];
    const char *labels[3] = {"$LIPT_DATA", "<repo>/data", "<repo>/../shared/data"};
    if (repo_root) path_fmt(repo, sizeof repo, "%s", repo_root);
    else default_repo_root(repo, sizeof repo);
    const char *env = getenv("LIPT_DATA");
    int have_root[3] = {env && *env, 1, 1};
    path_fmt(roots[0], LIPT_PATH_MAX, "%s", have_root[0] ? env : "");
    path_fmt(roots[1], LIPT_PATH_MAX, "%s/data", repo);
    path_fmt(roots[2], LIPT_PATH_MAX, "%s/../shared/data", repo);

    char tried[1400] = "";
    sfmt(loc->name, sizeof loc->name, "%s", spec);
    int passes = (k == LIPT_CORPUS_ENWIK8 || k == LIPT_CORPUS_TEXT8) ? 2 : 1;
    for (int pass = 0; pass < passes; pass++)
        for (int r = 0; r < 3; r++) {
            char dir[LIPT_PATH_MAX + 80], why[160] = "";
            if (!have_root[r]) {
                if (pass == 0) append(tried, sizeof tried, "%s%s", tried[0] ? "; " : "", "$LIPT_DATA (not set)");
                continue;
            }
            path_fmt(dir, sizeof dir, "%s/%s", roots[r], spec);
            int ok = 0;
            if (!is_dir(dir)) {
                sfmt(why, sizeof why, "no such folder");
            } else if (k == LIPT_CORPUS_PTB) {
                ok = ptb_in_dir(dir, loc);
                if (!ok) sfmt(why, sizeof why, "missing one of ptb.char.{train,valid,test}.txt");
            } else if (passes == 2) {
                ok = big_in_dir(dir, spec, pass, loc);
                if (!ok) sfmt(why, sizeof why, "none of %s, %s.zip, %s.gz, %s.head*", spec, spec, spec, spec);
            } else {
                ok = single_in_dir(dir, spec, loc, why, sizeof why);
            }
            if (ok) {
                loc->kind = k;
                return LIPT_OK;
            }
            if (pass == passes - 1) {
                char item[LIPT_PATH_MAX + 400];
                sfmt(item, sizeof item, "%s%s = %s (%s)", tried[0] ? "; " : "", labels[r], dir, why);
                append(tried, sizeof tried, "%s%s", item, "");
            }
        }
    char found[600], near[64], hint[700];
    found_corpora(roots, have_root, 3, spec, found, sizeof found, near, sizeof near);
    if (near[0]) sfmt(hint, sizeof hint, "; did you mean '%s'? Found: %s", near, found);
    else sfmt(hint, sizeof hint, ". Found: %s", found[0] ? found : "no corpus");
    return lipt_fail(err, LIPT_ERR_IO, "corpus '%s' not found%s. Looked in: %s. Set LIPT_DATA, pass a path, or see "
                     "data/README.md", spec, hint, tried);
}

/* ---- command-line helpers ---- */

lipt_status lipt_data_parse_split(const char *text, lipt_data_opts *o, lipt_error *err) {
    if (!text || !*text) return lipt_fail(err, LIPT_ERR_ARG, "--split: empty; expected auto, standard or F0,F1[,F2]");
    if (strcmp(text, "auto") == 0 || strcmp(text, "standard") == 0) {
        o->split = text[0] == 'a' ? LIPT_SPLIT_AUTO : LIPT_SPLIT_STANDARD;
        return LIPT_OK;
    }
    double f[3] = {0, 0, 0};
    int k = 0;
    const char *p = text;
    while (k < 3) {
        char *end;
        double v = strtod(p, &end);
        if (end == p) break;
        f[k++] = v;
        p = end;
        if (*p != ',') break;
        p++;
    }
    if (*p != 0 || k < 2)
        return lipt_fail(err, LIPT_ERR_ARG, "--split %s: expected auto, standard or fractions F0,F1[,F2] such as 0.9,0.05,0.05",
                         text);
    if (k == 2) f[2] = 1 - f[0] - f[1];
    if (f[2] < 0 && f[2] > -1e-12) f[2] = 0;
    o->split = LIPT_SPLIT_FRACTIONS;
    memcpy(o->frac, f, sizeof f);
    return LIPT_OK;
}

lipt_status lipt_data_parse_vocab(const char *text, lipt_data_opts *o, lipt_error *err) {
    if (text && strcmp(text, "auto") == 0) o->vocab = LIPT_VOCAB_AUTO;
    else if (text && strcmp(text, "bytes") == 0) o->vocab = LIPT_VOCAB_BYTES;
    else if (text && strcmp(text, "built") == 0) o->vocab = LIPT_VOCAB_BUILT;
    else if (text && strcmp(text, "whole") == 0) o->vocab = LIPT_VOCAB_WHOLE;
    else return lipt_fail(err, LIPT_ERR_ARG, "--vocab %s: expected auto, bytes, built or whole", text ? text : "(null)");
    return LIPT_OK;
}

/* ---- dataset ---- */

void lipt_dataset_free(lipt_dataset *ds) {
    if (!ds) return;
    free(ds->buf_);
    memset(ds, 0, sizeof *ds);
}

const lipt_tok *lipt_dataset_eval_tokens(const lipt_dataset *ds, int split, size_t *n) {
    *n = ds->len[split] + 1;
    return ds->tok[split] - 1;
}

/* Vocabulary, encoding and the one array [boundary][train][valid][test]. */
static lipt_status assemble(lipt_dataset *ds, const uint8_t *seg[3], const size_t len[3], const char *labels[3],
                            const lipt_data_opts *o, lipt_error *err) {
    if (len[LIPT_TRAIN] == 0) return lipt_fail(err, LIPT_ERR_ARG, "%s: the training split is empty", labels[0]);
    if (o->use_vocab) {
        ds->vocab = *o->use_vocab;
    } else {
        lipt_vocab_kind vk = o->vocab;
        /* plain text: the whole text's bytes, as nanoGPT does, so that a byte first seen in valid or test does not
         * stop the run; PTB and text8 keep their published training-split vocabularies, enwik8 its 256 bytes */
        const lipt_corpus_kind ck = ds->loc.kind;
        if (vk == LIPT_VOCAB_AUTO)
            vk = ck == LIPT_CORPUS_ENWIK8 ? LIPT_VOCAB_BYTES : ck == LIPT_CORPUS_TEXT ? LIPT_VOCAB_WHOLE : LIPT_VOCAB_BUILT;
        if (vk == LIPT_VOCAB_BYTES) lipt_vocab_init_bytes(&ds->vocab);
        else lipt_vocab_build_parts(&ds->vocab, seg, len, vk == LIPT_VOCAB_WHOLE ? 3 : 1);
        ds->vocab_whole = vk == LIPT_VOCAB_WHOLE;
        if (o->unk) lipt_vocab_enable_unk(&ds->vocab);
        ds->vocab.ptb_form = ds->loc.kind == LIPT_CORPUS_PTB;
    }
    size_t total = 1 + len[0] + len[1] + len[2];
    ds->buf_ = malloc(total * sizeof(lipt_tok));
    if (!ds->buf_) return lipt_fail(err, LIPT_ERR_NOMEM, "%s: cannot allocate %zu token ids", labels[0], total);
    const lipt_vocab *v = &ds->vocab;
    int boundary = v->id_of['\n'] >= 0 ? v->id_of['\n'] : v->id_of[' '] >= 0 ? v->id_of[' '] : 0;
    ds->buf_[0] = (lipt_tok)boundary;
    size_t at = 1;
    for (int s = 0; s < 3; s++) {
        ds->tok[s] = ds->buf_ + at;
        ds->len[s] = len[s];
        lipt_status st = lipt_vocab_encode_tok(v, seg[s], len[s], ds->tok[s], labels[s], err);
        if (st) {
            free(ds->buf_);
            ds->buf_ = NULL;
            return st;
        }
        at += len[s];
    }
    return LIPT_OK;
}

static lipt_status fraction_bounds(const lipt_data_opts *o, size_t n, const char *label, size_t b[3], lipt_error *err) {
    double f[3] = {o->frac[0], o->frac[1], o->frac[2]};
    if (f[0] == 0 && f[1] == 0 && f[2] == 0) {
        f[0] = 0.9;
        f[1] = f[2] = 0.05;
    }
    double sum = f[0] + f[1] + f[2];
    for (int i = 0; i < 3; i++)
        if (!(f[i] >= 0 && f[i] <= 1))
            return lipt_fail(err, LIPT_ERR_ARG, "%s: split fraction %g for %s is not in [0, 1]", label, f[i], lipt_split_name(i));
    if (!(f[0] > 0) || sum > 1 + 1e-9)
        return lipt_fail(err, LIPT_ERR_ARG, "%s: split fractions %g, %g, %g: train must be > 0 and the sum at most 1",
                         label, f[0], f[1], f[2]);
    /* the 1e-6 keeps 0.7+0.2 (= 0.8999...) from losing a symbol to rounding */
    b[0] = (size_t)floor((double)n * f[0] + 1e-6);
    b[1] = (size_t)floor((double)n * (f[0] + f[1]) + 1e-6);
    b[2] = fabs(sum - 1) < 1e-9 ? n : (size_t)floor((double)n * sum + 1e-6);
    for (int i = 0; i < 3; i++)
        if (b[i] > n) b[i] = n;
    return LIPT_OK;
}

static lipt_status from_buffer(lipt_dataset *ds, const uint8_t *text, size_t n, const char *label,
                               const lipt_data_opts *o, lipt_error *err) {
    size_t b[3];
    char num[32], lab[3][LIPT_PATH_MAX + 160];
    int standard = (ds->loc.kind == LIPT_CORPUS_ENWIK8 || ds->loc.kind == LIPT_CORPUS_TEXT8) &&
                   o->split != LIPT_SPLIT_FRACTIONS;
    if (standard) {
        if (n != STD_TOTAL)
            return lipt_fail(err, LIPT_ERR_ARG,
                             "%s: %s holds %s bytes%s; the standard %s split needs exactly 100,000,000 (train 90M, "
                             "valid 5M, test 5M). Ask for a fraction split (e.g. --data-split 0.9,0.05,0.05) or fetch the "
                             "full file with data/get_%s.sh",
                             ds->loc.name, label, commas(n, num, sizeof num),
                             n < STD_TOTAL ? " (a prefix)" : " (more than the corpus)", ds->loc.name, ds->loc.name);
        b[0] = STD_TRAIN;
        b[1] = STD_TRAIN + STD_VALID;
        b[2] = STD_TOTAL;
    } else {
        if (o->split == LIPT_SPLIT_STANDARD)
            return lipt_fail(err, LIPT_ERR_ARG, "%s: a standard split exists only for ptb, enwik8 and text8; use fractions",
                             label);
        lipt_status s = fraction_bounds(o, n, label, b, err);
        if (s) return s;
    }
    const uint8_t *seg[3] = {text, text + b[0], text + b[1]};
    size_t len[3] = {b[0], b[1] - b[0], b[2] - b[1]};
    const char *labs[3];
    for (int s = 0; s < 3; s++) {
        ds->offset[s] = s == 0 ? 0 : b[s - 1];
        sfmt(lab[s], sizeof lab[s], "%s split of %s (%s, from byte %zu)", lipt_split_name(s), ds->loc.name, label,
                 ds->offset[s]);
        labs[s] = lab[s];
    }
    return assemble(ds, seg, len, labs, o, err);
}

static const lipt_data_opts default_opts = {0};

lipt_status lipt_dataset_from_text(const uint8_t *text, size_t n, const char *label, const lipt_data_opts *opts,
                                   lipt_dataset *ds, lipt_error *err) {
    memset(ds, 0, sizeof *ds);
    const lipt_data_opts *o = opts ? opts : &default_opts;
    if (!label) label = "text";
    ds->loc.kind = LIPT_CORPUS_TEXT;
    sfmt(ds->loc.name, sizeof ds->loc.name, "%s", base_name(label));
    set_all_paths(&ds->loc, label);
    sfmt(ds->loc.note, sizeof ds->loc.note, "text from %s", label);
    return from_buffer(ds, text, n, label, o, err);
}

lipt_status lipt_dataset_load(const char *spec, const lipt_data_opts *opts, lipt_dataset *ds, lipt_error *err) {
    memset(ds, 0, sizeof *ds);
    const lipt_data_opts *o = opts ? opts : &default_opts;
    lipt_status s = lipt_corpus_locate(spec, o->repo_root, &ds->loc, err);
    if (s) return s;
    if (ds->loc.kind == LIPT_CORPUS_PTB) {
        if (o->split == LIPT_SPLIT_FRACTIONS)
            return lipt_fail(err, LIPT_ERR_ARG, "ptb: the corpus comes as three files (%s, ...); a fraction split does not apply",
                             ds->loc.path[0]);
        lipt_bytes sym[3] = {{0}};
        for (int i = 0; i < 3 && !s; i++) {
            lipt_bytes raw;
            s = lipt_read_auto(ds->loc.path[i], &raw, err);
            if (!s) s = lipt_ptb_parse(raw.data, raw.len, ds->loc.path[i], &sym[i], err);
            lipt_bytes_free(&raw);
        }
        if (!s) {
            const uint8_t *seg[3] = {sym[0].data, sym[1].data, sym[2].data};
            size_t len[3] = {sym[0].len, sym[1].len, sym[2].len};
            char lab[3][LIPT_PATH_MAX + 40];
            const char *labs[3];
            for (int i = 0; i < 3; i++) {
                sfmt(lab[i], sizeof lab[i], "%s split of ptb (%s)", lipt_split_name(i), ds->loc.path[i]);
                labs[i] = lab[i];
            }
            s = assemble(ds, seg, len, labs, o, err);
        }
        for (int i = 0; i < 3; i++) lipt_bytes_free(&sym[i]);
        if (s) lipt_dataset_free(ds);
        return s;
    }
    lipt_bytes raw;
    s = lipt_read_auto(ds->loc.path[0], &raw, err);
    if (s) return s;
    lipt_corpus_loc keep = ds->loc;
    s = from_buffer(ds, raw.data, raw.len, ds->loc.path[0], o, err);
    lipt_bytes_free(&raw);
    if (s) {
        lipt_dataset_free(ds);
        ds->loc = keep; /* so a caller can still print what was found */
    }
    return s;
}

void lipt_dataset_describe(const lipt_dataset *ds, char *out, size_t cap) {
    char a[32], b[32], c[32];
    const lipt_vocab *v = &ds->vocab;
    sfmt(out, cap, "%s (%s): train %s, valid %s, test %s symbols; vocabulary %d ids (%s%s); %s", ds->loc.name,
             kind_name(ds->loc.kind), commas(ds->len[0], a, sizeof a), commas(ds->len[1], b, sizeof b),
             commas(ds->len[2], c, sizeof c), v->size,
             v->kind == LIPT_VOCAB_BYTES ? "bytes" : ds->vocab_whole ? "the bytes of the whole text"
                                                                     : "built from the training split",
             v->unk_id >= 0 ? ", with <unk>" : "", ds->loc.note);
}
