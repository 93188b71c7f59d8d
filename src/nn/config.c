/* Model config: defaults, the `key = value` parser with file:line errors, overrides, validation, text output. */
#include "lipt/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/ops.h" /* LIPT_SPECTRAL_CHOLESKY */

/* Every key, in file order (also the order of lipt_config_to_text). */
enum {
    K_VOCAB, K_DMODEL, K_HEADS, K_DFF, K_LAYERS, K_SEQ, K_ATTN, K_FFN, K_ACT, K_DROPOUT, K_C, K_LIPNORM,
    K_POWER, K_SEED, K_LNEPS, K_CLIPR, K_RELB, K_ACTNORM, K_GRAM, K_FFNB, K_COUPLING, K_HEADH, K_NORM, K_PRECISION,
    K_SPECB, K_GRID, K_PROJ, K_COUNT
};
static const char *const key_names[K_COUNT] = {
    "vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "seq_len", "attention", "ffn", "activation",
    "dropout", "c", "lip_norm", "power_iters", "init_seed", "ln_eps", "clip_radius", "rel_bias", "actnorm",
    "gram_iters", "ffn_full_budget", "coupling", "head_hidden", "norm", "precision", "spectral_bound",
    "coupling_grid", "weight_projection"};
#define ACCEPTED_KEYS \
    "vocab_size, d_model, n_heads, d_ff, n_layers, seq_len, attention, ffn, activation, dropout, c, lip_norm, " \
    "power_iters, init_seed, ln_eps, clip_radius, rel_bias, actnorm, gram_iters, " \
    "ffn_full_budget, coupling, head_hidden, norm, precision, spectral_bound, coupling_grid, " \
    "weight_projection"

static const char *const ffn_names[] = {"standard", "contractive"};
static const char *const act_names[] = {"gelu", "relu", "elu", "lipswish", "maxmin"};
static const char *const lipnorm_names[] = {"inf", "2", "inf2"};
static const char *const norm_names[] = {"pre", "post"};
static const char *const specb_names[] = {"gram", "cholesky"};
#define NAMES(a) (int)(sizeof(a) / sizeof((a)[0]))
/* one name per enum value (a new value without its name fails to compile; attention names: attn_variants.c) */
_Static_assert(NAMES(ffn_names) == LIPT_FFN_CONTRACTIVE + 1, "ffn_names matches lipt_ffn_kind");
_Static_assert(NAMES(act_names) == LIPT_ACT_MAXMIN + 1, "act_names matches lipt_act_kind");
_Static_assert(NAMES(lipnorm_names) == LIPT_LIPNORM_INF2 + 1, "lipnorm_names matches lipt_lipnorm_kind");
_Static_assert(NAMES(norm_names) == LIPT_NORM_POST + 1, "norm_names matches lipt_norm_kind");
_Static_assert(NAMES(specb_names) == LIPT_SPECTRAL_BOUND_CHOLESKY + 1, "specb_names matches lipt_spectral_bound_kind");

const char *lipt_ffn_name(lipt_ffn_kind k) { return (unsigned)k < NAMES(ffn_names) ? ffn_names[k] : "?"; }
const char *lipt_act_name(lipt_act_kind k) { return (unsigned)k < NAMES(act_names) ? act_names[k] : "?"; }
const char *lipt_lipnorm_name(lipt_lipnorm_kind k) { return (unsigned)k < NAMES(lipnorm_names) ? lipnorm_names[k] : "?"; }
const char *lipt_norm_name(lipt_norm_kind k) { return (unsigned)k < NAMES(norm_names) ? norm_names[k] : "?"; }
const char *lipt_spectral_bound_name(lipt_spectral_bound_kind k) {
    return (unsigned)k < NAMES(specb_names) ? specb_names[k] : "?";
}
int lipt_config_gram_arg(const lipt_config *cfg) {
    return cfg->gram_iters | (cfg->spectral_bound == LIPT_SPECTRAL_BOUND_CHOLESKY ? LIPT_SPECTRAL_CHOLESKY : 0);
}

void lipt_config_default(lipt_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->vocab_size = 256;
    cfg->d_model = 128;
    cfg->n_heads = 4;
    cfg->d_ff = 512;
    cfg->n_layers = 2;
    cfg->seq_len = 128;
    cfg->attention = LIPT_ATTN_DP;
    cfg->ffn = LIPT_FFN_STANDARD;
    cfg->activation = LIPT_ACT_GELU;
    cfg->dropout = 0.0f;
    cfg->c = 0.9f;
    cfg->lip_norm = LIPT_LIPNORM_INF;
    cfg->power_iters = 1;
    cfg->init_seed = 1234;
    cfg->ln_eps = 1e-5f;
    cfg->clip_radius = 0.0f;
    cfg->rel_bias = 1;
    cfg->actnorm = 0;
    cfg->gram_iters = 8;
}

/* '-' and '_' are the same in keys (flags are often spelled --d-model). */
static int key_index(const char *key) {
    for (int k = 0; k < K_COUNT; k++) {
        const char *a = key_names[k], *b = key;
        while (*a && *b && (*a == *b || (*a == '_' && *b == '-'))) a++, b++;
        if (!*a && !*b) return k;
    }
    return -1;
}

static lipt_status parse_int(const char *where, const char *key, const char *v, long lo, long hi, int *out,
                             lipt_error *err) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return lipt_fail(err, LIPT_ERR_ARG, "%s%s = '%s': expected an integer in [%ld, %ld]", where, key, v, lo, hi);
    *out = (int)x;
    return LIPT_OK;
}

/* A float in the interval lo..hi, each end open or closed. */
static lipt_status parse_float(const char *where, const char *key, const char *v, double lo, int lo_open, double hi,
                               int hi_open, float *out, lipt_error *err) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    int ok = *v && !*end && !errno && isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
    if (!ok)
        return lipt_fail(err, LIPT_ERR_ARG, "%s%s = '%s': expected a number in %c%g, %g%c", where, key, v,
                         lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
    /* the value is stored as a float32: check it again as stored (1e-50 becomes 0, 0.99999999999 becomes 1) */
    const double f = (double)(float)x;
    if (!(isfinite(f) && (lo_open ? f > lo : f >= lo) && (hi_open ? f < hi : f <= hi)))
        return lipt_fail(err, LIPT_ERR_ARG, "%s%s = '%s' becomes %.9g as a float32, outside %c%g, %g%c", where, key, v,
                         f, lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
    *out = (float)x;
    return LIPT_OK;
}

static lipt_status parse_enum(const char *where, const char *key, const char *v, const char *const *names, int n,
                              int *out, lipt_error *err) {
    for (int i = 0; i < n; i++)
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return LIPT_OK;
        }
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, names[i], sizeof list - strlen(list) - 1);
        if (i + 1 < n) strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return lipt_fail(err, LIPT_ERR_ARG, "%s%s = '%s' is not one of: %s", where, key, v, list);
}

/* Set key k from the string v; `where` prefixes messages ("file:line: " or ""). */
static lipt_status set_key(lipt_config *cfg, int k, const char *v, const char *where, lipt_error *err) {
    const char *key = key_names[k];
    int e = 0;
    lipt_status st = LIPT_OK;
    switch (k) {
    case K_VOCAB: return parse_int(where, key, v, 2, 1 << 24, &cfg->vocab_size, err);
    case K_DMODEL: return parse_int(where, key, v, 1, 1 << 16, &cfg->d_model, err);
    case K_HEADS: return parse_int(where, key, v, 1, 1 << 12, &cfg->n_heads, err);
    case K_DFF: return parse_int(where, key, v, 1, 1 << 18, &cfg->d_ff, err);
    case K_LAYERS: return parse_int(where, key, v, 0, 1024, &cfg->n_layers, err);
    case K_SEQ: return parse_int(where, key, v, 1, 1 << 20, &cfg->seq_len, err);
    case K_POWER: return parse_int(where, key, v, 0, 10000, &cfg->power_iters, err);
    case K_RELB: return parse_int(where, key, v, 0, 1, &cfg->rel_bias, err);
    case K_ACTNORM: return parse_int(where, key, v, 0, 1, &cfg->actnorm, err);
    case K_GRAM: return parse_int(where, key, v, 1, 30, &cfg->gram_iters, err);
    case K_FFNB: return parse_int(where, key, v, 0, 1, &cfg->ffn_full_budget, err);
    case K_COUPLING: return parse_int(where, key, v, 0, 1, &cfg->coupling, err);
    case K_GRID: return parse_int(where, key, v, 0, 20, &cfg->coupling_grid, err);
    case K_PROJ: return parse_int(where, key, v, 0, 2, &cfg->weight_projection, err);
    case K_HEADH: return parse_int(where, key, v, 0, 1 << 18, &cfg->head_hidden, err);
    case K_CLIPR: return parse_float(where, key, v, 0.0, 0, 1e6, 0, &cfg->clip_radius, err);
    case K_ATTN: {
        const char *attn_names[LIPT_ATTN_KIND_COUNT];
        for (int i = 0; i < LIPT_ATTN_KIND_COUNT; i++) attn_names[i] = lipt_attn_name((lipt_attn_kind)i);
        if ((st = parse_enum(where, key, v, attn_names, LIPT_ATTN_KIND_COUNT, &e, err)) == LIPT_OK)
            cfg->attention = (lipt_attn_kind)e;
        return st;
    }
    case K_FFN:
        if ((st = parse_enum(where, key, v, ffn_names, NAMES(ffn_names), &e, err)) == LIPT_OK)
            cfg->ffn = (lipt_ffn_kind)e;
        return st;
    case K_ACT:
        if ((st = parse_enum(where, key, v, act_names, NAMES(act_names), &e, err)) == LIPT_OK)
            cfg->activation = (lipt_act_kind)e;
        return st;
    case K_LIPNORM:
        if ((st = parse_enum(where, key, v, lipnorm_names, NAMES(lipnorm_names), &e, err)) == LIPT_OK)
            cfg->lip_norm = (lipt_lipnorm_kind)e;
        return st;
    case K_NORM:
        if ((st = parse_enum(where, key, v, norm_names, NAMES(norm_names), &e, err)) == LIPT_OK)
            cfg->norm = (lipt_norm_kind)e;
        return st;
    case K_PRECISION: {
        const char *precision_names[LIPT_PRECISION_COUNT]; /* core's names (src/core/precision.c) */
        for (int k = 0; k < LIPT_PRECISION_COUNT; k++) precision_names[k] = lipt_precision_name((lipt_precision)k);
        if ((st = parse_enum(where, key, v, precision_names, LIPT_PRECISION_COUNT, &e, err)) == LIPT_OK)
            cfg->precision = (lipt_precision)e;
        return st;
    }
    case K_SPECB:
        if ((st = parse_enum(where, key, v, specb_names, NAMES(specb_names), &e, err)) == LIPT_OK)
            cfg->spectral_bound = (lipt_spectral_bound_kind)e;
        return st;
    case K_DROPOUT: return parse_float(where, key, v, 0.0, 0, 1.0, 1, &cfg->dropout, err);
    case K_C: return parse_float(where, key, v, 0.0, 1, 1.0, 1, &cfg->c, err);
    case K_LNEPS: return parse_float(where, key, v, 0.0, 1, 1.0, 1, &cfg->ln_eps, err);
    case K_SEED: {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *end || errno || v[0] == '-')
            return lipt_fail(err, LIPT_ERR_ARG, "%s%s = '%s': expected a non-negative integer below 2^64", where, key,
                             v);
        cfg->init_seed = (uint64_t)x;
        return LIPT_OK;
    }
    }
    return lipt_fail(err, LIPT_ERR_INTERNAL, "config key %d without a setter", k);
}

const char *lipt_config_key_name(int k) { return k >= 0 && k < K_COUNT ? key_names[k] : NULL; }

/* "unknown key 'x'": with the nearest key when there is one, else the accepted keys. */
static lipt_status unknown_key(const char *where, const char *what, const char *key, lipt_error *err) {
    const char *near = lipt_nearest_name(key, key_names, K_COUNT);
    if (near) return lipt_fail(err, LIPT_ERR_ARG, "%sunknown %s '%s'; did you mean '%s'?", where, what, key, near);
    return lipt_fail(err, LIPT_ERR_ARG, "%sunknown %s '%s' (accepted: %s)", where, what, key, ACCEPTED_KEYS);
}

lipt_status lipt_config_set(lipt_config *cfg, const char *key, const char *value, lipt_error *err) {
    int k = key_index(key);
    if (k < 0) return unknown_key("", "config key", key, err);
    return set_key(cfg, k, value, "", err);
}

/* The attention kinds that are (contractive = 1) or are not contractive, in alphabetical order: "a, b or c". */
static void kind_list(int contractive, char *buf, size_t len) {
    const char *names[LIPT_ATTN_KIND_COUNT];
    int n = 0;
    for (int k = 0; k < LIPT_ATTN_KIND_COUNT; k++) {
        const lipt_attn_info *ai = lipt_attn_info_of((lipt_attn_kind)k);
        if (!ai->contractive != !contractive) continue;
        int i = n++;
        for (; i > 0 && strcmp(names[i - 1], ai->name) > 0; i--) names[i] = names[i - 1];
        names[i] = ai->name;
    }
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        strncat(buf, names[i], len - strlen(buf) - 1);
        if (i + 1 < n) strncat(buf, i + 2 < n ? ", " : " or ", len - strlen(buf) - 1);
    }
}

/* The message names the line of the later of the keys involved (the one that made the pair wrong); line[k] > 0 is
 * the line that set key k (then messages say "source:line: "). */
#define WHERE2(a, b)                                                                                   \
    do {                                                                                               \
        int l_ = line ? (line[a] > line[b] ? line[a] : line[b]) : 0;                                   \
        if (source && l_ > 0) snprintf(where, sizeof where, "%s:%d: ", source, l_);                    \
        else if (source) snprintf(where, sizeof where, "%s: ", source);                                \
        else where[0] = 0;                                                                             \
    } while (0)

/* The block options' checks (coupling, its grid, weight_projection, post-LN): validate's second half. */
static lipt_status validate_blocks(const lipt_config *cfg, const char *source, const int *line, lipt_error *err) {
    char where[300] = "", contractive_kinds[128], plain_kinds[128];
    kind_list(1, contractive_kinds, sizeof contractive_kinds);
    kind_list(0, plain_kinds, sizeof plain_kinds);
    /* coupling blocks: the pre-LN variants (a control without certificate), or the invertible model's certified
     * branches (bi-Lipschitz: forward and inverse of each half-block <= 1 + its certificate) */
    const int plain = !lipt_attn_contractive(cfg->attention) && cfg->ffn == LIPT_FFN_STANDARD;
    if (cfg->coupling && (!(plain || lipt_config_invertible(cfg)) || cfg->d_model % 2 != 0)) {
        WHERE2(K_COUPLING, K_ATTN);
        return lipt_fail(err, LIPT_ERR_ARG,
                         "%scoupling = 1 needs an even d_model and either a pre-LN variant (attention %s, ffn = "
                         "standard) or the invertible model's certified branches (attention %s, ffn = contractive) "
                         "(got attention = %s, ffn = %s, d_model = %d)",
                         where, plain_kinds, contractive_kinds, lipt_attn_name(cfg->attention),
                         lipt_ffn_name(cfg->ffn), cfg->d_model);
    }
    if (cfg->coupling_grid && !cfg->coupling) {
        WHERE2(K_GRID, K_COUPLING);
        return lipt_fail(err, LIPT_ERR_ARG, "%scoupling_grid = %d rounds the residual stream of coupling blocks so that "
                         "they invert bit for bit: it needs coupling = 1", where, cfg->coupling_grid);
    }
    if (cfg->weight_projection && !lipt_config_invertible(cfg)) {
        WHERE2(K_PROJ, K_ATTN);
        return lipt_fail(err, LIPT_ERR_ARG,
                         "%sweight_projection = %d rescales the certified branches' weights to their Lipschitz budget "
                         "after each optimizer step: it needs the invertible model (attention = %s with ffn = "
                         "contractive; got attention = %s, ffn = %s)",
                         where, cfg->weight_projection, contractive_kinds, lipt_attn_name(cfg->attention), lipt_ffn_name(cfg->ffn));
    }
    if (cfg->norm == LIPT_NORM_POST && (lipt_config_invertible(cfg) || cfg->coupling)) {
        WHERE2(K_NORM, cfg->coupling ? K_COUPLING : K_ATTN);
        return lipt_fail(err, LIPT_ERR_ARG,
                         "%snorm = post puts a LayerNorm after each residual sum, so a block is no longer x + g(x): it is "
                         "an option of the non-invertible variants without coupling (got attention = %s, coupling = %d)",
                         where, lipt_attn_name(cfg->attention), cfg->coupling);
    }
    return LIPT_OK;
}

/* Cross-key checks. */
static lipt_status validate(const lipt_config *cfg, const char *source, const int *line, lipt_error *err) {
    char where[300] = "";
    if (cfg->d_model % cfg->n_heads != 0) {
        WHERE2(K_HEADS, K_DMODEL);
        return lipt_fail(err, LIPT_ERR_ARG, "%sn_heads = %d must divide d_model = %d", where, cfg->n_heads,
                         cfg->d_model);
    }
    if ((unsigned)cfg->attention >= LIPT_ATTN_KIND_COUNT) {
        WHERE2(K_ATTN, K_ATTN);
        return lipt_fail(err, LIPT_ERR_ARG, "%sattention = %d is not a lipt_attn_kind", where, (int)cfg->attention);
    }
    if ((unsigned)cfg->precision >= LIPT_PRECISION_COUNT) {
        WHERE2(K_PRECISION, K_PRECISION);
        return lipt_fail(err, LIPT_ERR_ARG, "%sprecision = %d is not a lipt_precision", where, (int)cfg->precision);
    }
    if ((unsigned)cfg->spectral_bound > LIPT_SPECTRAL_BOUND_CHOLESKY) {
        WHERE2(K_SPECB, K_SPECB);
        return lipt_fail(err, LIPT_ERR_ARG, "%sspectral_bound = %d is not a lipt_spectral_bound_kind", where,
                         (int)cfg->spectral_bound);
    }
    if (cfg->spectral_bound != LIPT_SPECTRAL_BOUND_GRAM && cfg->ffn != LIPT_FFN_CONTRACTIVE) {
        WHERE2(K_SPECB, K_FFN);
        return lipt_fail(err, LIPT_ERR_ARG,
                         "%sspectral_bound = %s sets how the invertible model certifies its spectral norms: it needs "
                         "ffn = contractive (got ffn = %s)",
                         where, lipt_spectral_bound_name(cfg->spectral_bound), lipt_ffn_name(cfg->ffn));
    }
    const lipt_attn_info *ai = lipt_attn_info_of(cfg->attention);
    char contractive_kinds[128], plain_kinds[128];
    kind_list(1, contractive_kinds, sizeof contractive_kinds);
    kind_list(0, plain_kinds, sizeof plain_kinds);
    if (ai->contractive && cfg->ffn != LIPT_FFN_CONTRACTIVE) {
        WHERE2(K_ATTN, K_FFN);
        return lipt_fail(err, LIPT_ERR_ARG,
                         "%sattention = %s is an invertible model's attention and needs ffn = contractive (got ffn = %s)",
                         where, lipt_attn_name(cfg->attention), lipt_ffn_name(cfg->ffn));
    }
    if (cfg->ffn == LIPT_FFN_CONTRACTIVE && !ai->contractive) {
        WHERE2(K_ATTN, K_FFN);
        return lipt_fail(err, LIPT_ERR_ARG,
                         "%sffn = contractive is the invertible model's feed-forward and needs attention = "
                         "%s (got attention = %s)",
                         where, contractive_kinds, lipt_attn_name(cfg->attention));
    }
    if (ai->token_norm_only && cfg->lip_norm != LIPT_LIPNORM_INF2) {
        WHERE2(K_ATTN, K_LIPNORM);
        return lipt_fail(err, LIPT_ERR_ARG,
                         "%sattention = %s is certified in the token-wise norm only: set lip_norm = inf2 "
                         "(got lip_norm = %s)",
                         where, ai->name, lipt_lipnorm_name(cfg->lip_norm));
    }
    if (cfg->actnorm && !lipt_config_invertible(cfg)) {
        WHERE2(K_ACTNORM, K_ATTN);
        return lipt_fail(err, LIPT_ERR_ARG, "%sactnorm = 1 is an option of the invertible model (attention = %s "
                         "with ffn = contractive)", where, contractive_kinds);
    }
    if (cfg->ffn == LIPT_FFN_CONTRACTIVE && cfg->activation == LIPT_ACT_GELU) {
        WHERE2(K_ACT, K_FFN);
        return lipt_fail(err, LIPT_ERR_ARG,
                         "%sactivation = gelu is not 1-Lipschitz (its Lipschitz constant is about 1.13), so ffn = "
                         "contractive cannot use it: accepted activations are relu, elu, lipswish, maxmin",
                         where);
    }
    if (cfg->activation == LIPT_ACT_MAXMIN && cfg->d_ff % 2 != 0) {
        WHERE2(K_ACT, K_DFF);
        return lipt_fail(err, LIPT_ERR_ARG, "%sactivation = maxmin pairs the hidden units: d_ff = %d must be even", where,
                         cfg->d_ff);
    }
    return validate_blocks(cfg, source, line, err);
}
#undef WHERE2

lipt_status lipt_config_validate(const lipt_config *cfg, lipt_error *err) { return validate(cfg, NULL, NULL, err); }

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

lipt_status lipt_config_parse(lipt_config *cfg, const char *text, const char *source, lipt_error *err) {
    lipt_config_default(cfg);
    if (!source) source = "<config>";
    int line_of[K_COUNT] = {0};
    char buf[1024], where[300];
    int lineno = 0;
    const char *p = text;
    while (*p) {
        /* a line ends at \n, \r\n or a lone \r (old Mac files): read as one line, a file of CR-only lines would be a
         * single comment and the defaults would train unasked */
        const size_t n = strcspn(p, "\r\n");
        lineno++;
        if (n >= sizeof buf)
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s:%d: line longer than %zu characters", source, lineno,
                             sizeof buf - 1);
        memcpy(buf, p, n);
        buf[n] = 0;
        p += n;
        if (*p == '\r' && p[1] == '\n') p += 2;
        else if (*p) p++;
        char *hash = strchr(buf, '#');
        if (hash) *hash = 0;
        char *s = trim(buf);
        if (!*s) continue;
        snprintf(where, sizeof where, "%s:%d: ", source, lineno);
        char *eq = strchr(s, '=');
        if (!eq)
            return lipt_fail(err, LIPT_ERR_ARG, "%sexpected 'key = value', got '%s'", where, s);
        *eq = 0;
        char *key = trim(s), *val = trim(eq + 1);
        if (!*key) return lipt_fail(err, LIPT_ERR_ARG, "%smissing key before '='", where);
        int k = key_index(key);
        if (k < 0) return unknown_key(where, "key", key, err);
        if (!*val) return lipt_fail(err, LIPT_ERR_ARG, "%s%s has no value", where, key_names[k]);
        if (line_of[k])
            return lipt_fail(err, LIPT_ERR_ARG, "%s%s set twice (first at line %d)", where, key_names[k], line_of[k]);
        lipt_status st = set_key(cfg, k, val, where, err);
        if (st != LIPT_OK) return st;
        line_of[k] = lineno;
    }
    return validate(cfg, source, line_of, err);
}

lipt_status lipt_config_load(lipt_config *cfg, const char *path, lipt_error *err) {
    FILE *f = lipt_open_regular(path, NULL, err); /* a FIFO or device is refused, never waited on */
    if (!f) return err ? err->status : LIPT_ERR_IO;
    size_t cap = 4096, n = 0;
    char *text = lipt_xmalloc(cap);
    size_t got;
    while ((got = fread(text + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            if (cap >= (1u << 24)) {
                fclose(f);
                free(text);
                return lipt_fail(err, LIPT_ERR_FORMAT, "%s: config larger than 16 MiB", path);
            }
            cap *= 2;
            char *t = realloc(text, cap);
            if (!t) {
                fclose(f);
                free(text);
                return lipt_fail(err, LIPT_ERR_NOMEM, "%s: out of memory reading config", path);
            }
            text = t;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(text);
        return lipt_fail(err, LIPT_ERR_IO, "%s: read error", path);
    }
    text[n] = 0;
    if (memchr(text, 0, n)) {
        free(text);
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: NUL byte in config (not a text file?)", path);
    }
    lipt_status st = lipt_config_parse(cfg, text, path, err);
    free(text);
    return st;
}

/* The shortest %g form (6 to 9 digits) that strtod + (float) turns back into v exactly: 0.9, not 0.899999976. */
static const char *float_text(float v, char buf[32]) {
    for (int p = 6; p <= 9; p++) {
        snprintf(buf, 32, "%.*g", p, (double)v);
        if ((float)strtod(buf, NULL) == v) break;
    }
    return buf;
}

size_t lipt_config_to_text(const lipt_config *cfg, char *buf, size_t len) {
    char fd[32], fc[32], fe[32], fr[32], grid[80] = "";
    if (cfg->coupling_grid) snprintf(grid, sizeof grid, "coupling_grid = %d\n", cfg->coupling_grid);
    if (cfg->weight_projection) /* only when set, as the keys below: older readers keep reading the others' files */
        snprintf(grid + strlen(grid), sizeof grid - strlen(grid), "weight_projection = %d\n", cfg->weight_projection);
    int n = snprintf(buf, len,
                     "vocab_size = %d\nd_model = %d\nn_heads = %d\nd_ff = %d\nn_layers = %d\nseq_len = %d\n"
                     "attention = %s\nffn = %s\nactivation = %s\ndropout = %s\nc = %s\nlip_norm = %s\n"
                     "power_iters = %d\ninit_seed = %" PRIu64 "\nln_eps = %s\nclip_radius = %s\nrel_bias = %d\n"
                     "actnorm = %d\ngram_iters = %d\nffn_full_budget = %d\ncoupling = %d\nhead_hidden = %d\nnorm = %s\n"
                     "%s%s%s%s%s%s%s",
                     cfg->vocab_size, cfg->d_model, cfg->n_heads, cfg->d_ff, cfg->n_layers, cfg->seq_len,
                     lipt_attn_name(cfg->attention), lipt_ffn_name(cfg->ffn), lipt_act_name(cfg->activation),
                     float_text(cfg->dropout, fd), float_text(cfg->c, fc), lipt_lipnorm_name(cfg->lip_norm),
                     cfg->power_iters, cfg->init_seed, float_text(cfg->ln_eps, fe), float_text(cfg->clip_radius, fr),
                     cfg->rel_bias, cfg->actnorm,
                     cfg->gram_iters, cfg->ffn_full_budget, cfg->coupling, cfg->head_hidden, lipt_norm_name(cfg->norm),
                     /* only when not the default: a float32 run's run.cfg and checkpoints stay readable by lipt
                      * binaries from before the key existed */
                     cfg->precision ? "precision = " : "", cfg->precision ? lipt_precision_name(cfg->precision) : "",
                     cfg->precision ? "\n" : "", cfg->spectral_bound ? "spectral_bound = " : "",
                     cfg->spectral_bound ? lipt_spectral_bound_name(cfg->spectral_bound) : "",
                     cfg->spectral_bound ? "\n" : "", grid);
    return n < 0 ? 0 : (size_t)n;
}
