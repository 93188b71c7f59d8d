/* libFuzzer target: the training options stored in a checkpoint, as lipt train --resume, eval and info read them
 * (src/shell/run.c, src/shell/train_keys.c). The input is the checkpoint's training-state blob ("LRX1", the batcher
 * state, the best BPC and its step, then the "key=value\n" options text): when its first byte is 'L' the input is
 * the blob as stored; otherwise a valid head is put before input[1..] so that the options text itself is fuzzed.
 * Then: run_extra_unpack; the options filled into lipt train's own option table (train_keys_from_ckpt, what --resume
 * does) and read back as the command does; every stored option lipt looks up (run_opt_get) into buffers of the sizes
 * the commands use; the "global-batch" value; info's listing; a pack / unpack round trip. The checkpoint's CRCs and
 * sections are fuzz_checkpoint's; this one starts where they have been passed.
 * Build and run: scripts/fuzz.sh ckpt_opts SECONDS. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "run.h"
#include "train_keys.h"
#include "use_train_options.h"

static FILE *devnull;
static unsigned char head[4 + LIPT_BATCHER_STATE_BYTES + 16];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    devnull = fopen("/dev/null", "w");
    /* a valid head: what lipt train writes for a fresh batcher */
    run_extra x;
    memset(&x, 0, sizeof x);
    x.best_step = -1;
    x.batcher.seed = 3;
    for (int i = 0; i < 4; i++) x.batcher.rng.s[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1); /* never all zero */
    size_t len = 0;
    unsigned char *blob = run_extra_pack(&x, &len);
    memcpy(head, blob, sizeof head);
    free(blob);
    return 0;
}

/* Every key the commands look up, with the buffer each gives run_opt_get (train/cmd_train.c, src/shell/run.c). */
static const struct { const char *key; size_t n; } LOOKUPS[] = {
    {"data-abs", 1100}, {"data", 1100}, {"data-split", 64}, {"data-crc32", 32}, {"data-bytes", 32}, {"data-bytes", 64},
    {"data-crc32-before", 512}, {"global-batch", 32}, {"steps", 2}, {"", 8}, {"=", 8}, {"data", 1},
};

static void lookups(const char *opts) {
    for (size_t i = 0; i < sizeof LOOKUPS / sizeof LOOKUPS[0]; i++) {
        char *out = malloc(LOOKUPS[i].n); /* exact size, so ASan sees a write past it */
        if (run_opt_get(opts, LOOKUPS[i].key, out, LOOKUPS[i].n) == 0) {
            const size_t vl = strlen(out);
            if (vl == 0 || vl >= LOOKUPS[i].n || memchr(out, '\n', vl)) abort(); /* a value is one line, non-empty */
        }
        free(out);
    }
    /* lipt train's global batch on --resume */
    const char *g = strstr(opts, "global-batch=");
    if (g) (void)atol(g + 13);
}

/* lipt info: the [training] listing and the JSON string */
static void info_listing(const char *opts) {
    for (const char *p = opts; *p;) {
        const char *nl = strchr(p, '\n');
        const int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (strncmp(p, "data-", 5) != 0 || strncmp(p, "data-split", 10) == 0) fprintf(devnull, "%.*s\n", len, p);
        p += len + (nl ? 1 : 0);
    }
    json_w j;
    json_begin(&j, devnull);
    json_str(&j, "training", opts);
    json_end(&j);
}

/* What train_keys_from_ckpt promises: an option it filled holds the value after '=' of a line naming it. */
static void check_filled(const cli_args *a, const char *opts) {
    for (int k = 0; k < a->n_opts; k++) {
        if (a->set[k] != CLI_SET_BY_CKPT) continue;
        const char *v = a->val[k], *name = a->opts[k].name;
        if (!v || strchr(v, '\n')) abort();
        char line[1200];
        const int w = snprintf(line, sizeof line, "%s=%s\n", name, v);
        if (w > 0 && (size_t)w < sizeof line && strncmp(opts, line, (size_t)w) != 0 && !strstr(opts, line)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 65536) return 0;
    unsigned char *blob;
    size_t len;
    if (data[0] == 'L') {
        len = size;
        blob = malloc(len);
        memcpy(blob, data, len);
    } else {
        len = sizeof head + size; /* head, input[1..], NUL */
        blob = malloc(len);
        memcpy(blob, head, sizeof head);
        memcpy(blob + sizeof head, data + 1, size - 1);
        blob[len - 1] = 0;
    }
    run_extra x;
    lipt_error err = {0};
    if (run_extra_unpack(&x, blob, len, &err) != LIPT_OK) {
        if (!err.msg[0]) abort();
        free(blob);
        return 0;
    }
    const char *opts = x.opts_text;
    if (!opts || (const unsigned char *)opts + strlen(opts) >= blob + len) abort(); /* NUL-terminated inside */

    cli_args a;
    char *argv[] = {"--resume", NULL};
    int n_topts;
    const cli_opt *topts = train_options(&n_topts);
    if (cli_parse(&a, "fuzz", "", topts, n_topts, 1, argv, 1, 0) != 0) abort();
    train_keys_from_ckpt(&a, opts);
    check_filled(&a, opts);
    use_train_options(&a);
    cli_free(&a);

    lookups(opts);
    info_listing(opts);

    /* pack / unpack / pack: the same state, the same bytes */
    size_t plen = 0, plen2 = 0;
    unsigned char *packed = run_extra_pack(&x, &plen);
    run_extra y;
    if (run_extra_unpack(&y, packed, plen, &err) != LIPT_OK) abort();
    if (strcmp(y.opts_text, opts) != 0 || y.best_step != x.best_step || memcmp(&y.best_bpc, &x.best_bpc, 8) != 0)
        abort();
    unsigned char *packed2 = run_extra_pack(&y, &plen2);
    if (plen2 != plen || memcmp(packed, packed2, plen) != 0) abort();
    free(packed2);
    free(packed);
    free(blob);
    return 0;
}
