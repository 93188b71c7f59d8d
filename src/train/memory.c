/* What a training run needs in memory against what this process may use (include/lipt/train.h), for lipt train and
 * lipt bench to refuse a run too large for the machine (or for ulimit -v) with what to lower, instead of aborting in
 * its first step. A step's memory is not modelled by a formula: it is the arena's high-water mark of a real training
 * step (what lipt bench reports as train_arena_peak_mb), measured on a throwaway copy of the model at two small
 * batches and extrapolated to the batch (every activation, gradient and tape buffer is a sum over the batch's
 * sequences, so the mark is affine in the batch). */
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "lipt/train.h"

/* Room for --recompute's feed-forward pieces (1024 tokens) to fill: probe batches of at least this many tokens. */
#define PROBE_TOKENS 2048
/* Unaccounted allocations (library scratch, thread stacks, the evaluation's buffers): a margin on the estimate. */
#define MARGIN_BYTES ((double)(64 << 20))
#define MARGIN_FRACTION 0.05

/* A "Key:   N kB" line of a /proc file in bytes, or -1. */
static double proc_kb(const char *file, const char *key) {
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    const size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtod(line + kl + 1, NULL) * 1024.0;
            break;
        }
    fclose(f);
    return v;
}

/* What this process may still allocate: the tightest of the address-space and data limits (less what is in use) and
 * the machine's available memory (shared by the ranks on it); *what names it. INFINITY when nothing is known. */
static double memory_room(int local_ranks, const char **what) {
    double room = INFINITY;
    *what = "";
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        const double used = proc_kb("/proc/self/status", "VmSize");
        const double r = (double)rl.rlim_cur - (used > 0 ? used : 0);
        if (r < room) room = r, *what = "the address-space limit (ulimit -v, RLIMIT_AS) less what is mapped";
    }
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        const double used = proc_kb("/proc/self/status", "VmData");
        const double r = (double)rl.rlim_cur - (used > 0 ? used : 0);
        if (r < room) room = r, *what = "the data limit (ulimit -d, RLIMIT_DATA) less what is in use";
    }
    const double avail = proc_kb("/proc/meminfo", "MemAvailable");
    if (avail > 0 && avail / (local_ranks > 1 ? local_ranks : 1) < room) {
        room = avail / (local_ranks > 1 ? local_ranks : 1);
        *what = local_ranks > 1 ? "MemAvailable (/proc/meminfo) shared by the ranks on this machine"
                                : "the memory available on this machine (MemAvailable, /proc/meminfo)";
    }
    return room < 0 ? 0 : room;
}

/* The arena's high-water mark of one training step at each of the batches b[0..nb-1] (increasing) on a throwaway
 * model of cfg, into peak[]. LIPT_OK, or the reason (the probe's own allocations included). */
static lipt_status probe_steps(const lipt_config *cfg, int recompute, const lipt_reversible *rev_in, const long *b,
                               int nb, double *peak, lipt_error *err) {
    lipt_model m;
    lipt_status st = lipt_model_init(&m, cfg, err);
    if (st != LIPT_OK) return st;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 4096, 1);
    ctx.training = 1;
    ctx.recompute = recompute;
    lipt_reversible rev;
    if (rev_in) rev = *rev_in;
    ctx.rev = rev_in ? &rev : NULL;
    const lipt_adamw_config acfg = {1e-3, 0.9, 0.98, 1e-8, 0}; /* Adam's state is the same size at any setting */
    lipt_adamw opt;
    lipt_adamw_init(&opt, &acfg);
    const size_t n = (size_t)b[nb - 1] * (size_t)cfg->seq_len;
    int32_t *ids = calloc(n, sizeof *ids); /* symbol 0 in and out: any valid ids do */
    if (!ids) st = lipt_fail(err, LIPT_ERR_NOMEM, "out of memory for %zu probe tokens", n);
    if (st == LIPT_OK) st = lipt_ctx_set_precision(&ctx, cfg->precision, err);
    if (st == LIPT_OK) st = lipt_arena_reserve(&ctx.arena, (size_t)64 << 20, err);
    /* a step the system cannot hold (its arena refused to grow: a data limit, a small machine) is an answer, "more
     * than there is", not an abort: the arena longjmps here, the step left half done on this throwaway model */
    jmp_buf out_of_memory;
    if (st == LIPT_OK && setjmp(out_of_memory)) {
        st = lipt_fail(err, LIPT_ERR_NOMEM, "a training step at seq_len %d ran out of memory while it was measured",
                       cfg->seq_len);
    } else {
        ctx.arena.grow_fail = &out_of_memory;
        for (int i = 0; i < nb && st == LIPT_OK; i++) {
            const lipt_step_opts so = {1e-3, 1, cfg->power_iters, NULL, 0, 0, NULL, 0};
            lipt_step_result sr;
            st = lipt_train_step(&ctx, &m, &opt, ids, ids, (int)b[i], cfg->seq_len, &so, &sr, err);
            if (st == LIPT_ERR_NUMERIC) st = LIPT_OK; /* the memory was used all the same */
            peak[i] = (double)ctx.arena.peak;
        }
    }
    ctx.arena.grow_fail = NULL;
    free(ids);
    lipt_ctx_free(&ctx);
    lipt_model_free(&m);
    return st;
}

lipt_status lipt_train_memory_estimate(const lipt_config *cfg, long B, int ranks, int local_ranks, int recompute,
                                       const lipt_reversible *rev, lipt_train_memory *out, lipt_error *err) {
    memset(out, 0, sizeof *out);
    const long T = cfg->seq_len;
    size_t n_train = 0, n_buf = 0;
    lipt_status st = lipt_config_param_floats(cfg, &n_train, &n_buf, err);
    if (st != LIPT_OK) return st;
    const double model = (4.0 * (double)n_train + (double)n_buf) * sizeof(float); /* weights, gradients, Adam */
    const double batch = 2.0 * sizeof(int32_t) * (double)ranks * (double)B * (double)T; /* the global batch's ids */
    const double room = memory_room(local_ranks, &out->room_what);
    /* two probe batches past --recompute's pieces, or the batch itself when it is that small (then exact) */
    long b[2] = {recompute ? (PROBE_TOKENS + T - 1) / T : 1, 0};
    b[1] = 2 * b[0];
    const int exact = B <= b[1];
    if (exact) b[0] = B;
    double peak[2] = {0, 0}, arena = 0, per_seq = 0;
    /* the probe itself needs a model: when even that does not fit, the estimate is the model alone */
    if (model + MARGIN_BYTES < room) {
        st = probe_steps(cfg, recompute, rev, b, exact ? 1 : 2, peak, err);
        if (st == LIPT_ERR_NOMEM) { /* even the probe's small batch does not fit: the run needs more than the room */
            out->ran_out = 1;
            out->room = room;
            out->model = model;
            out->need = INFINITY;
            out->reserve = (double)(64 << 20);
            return LIPT_OK;
        }
        if (st != LIPT_OK) return st;
        per_seq = exact ? 0 : (peak[1] - peak[0]) / (double)(b[1] - b[0]);
        arena = peak[0] + per_seq * (double)(B - b[0]);
    }
    /* the arena is reserved with an eighth more, as it resizes after a step that outgrew it */
    out->reserve = fmax(arena * 1.125, (double)(64 << 20));
    out->need = (model + out->reserve + batch) * (1 + MARGIN_FRACTION) + MARGIN_BYTES;
    out->room = room;
    out->model = model;
    out->arena = arena;
    const double per_batch = per_seq * 1.125 + 2.0 * sizeof(int32_t) * (double)ranks * (double)T;
    const double fixed = out->need - per_batch * (double)B * (1 + MARGIN_FRACTION);
    if (per_seq > 0 && room > fixed) out->most = (long)((room - fixed) / (per_batch * (1 + MARGIN_FRACTION)));
    return LIPT_OK;
}
