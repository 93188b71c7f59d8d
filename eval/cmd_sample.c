/* lipt sample: text generation from a checkpoint (cached incremental decoding, or full recomputation per symbol
 * with --no-cache), greedy / temperature / top-k sampling, speed on stderr, optional JSON summary. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lipt/decode.h"
#include "run.h"

static const cli_opt sample_opts[] = {
    {"ckpt", CLI_STRING, "FILE", "checkpoint to sample from (required)", NULL},
    {"prompt", CLI_STRING, "TEXT",
     "start text (default: a newline if the vocabulary has one, else a space); PTB vocabularies: '_' is the word "
     "boundary, e.g. 'the_company_said' (spaces are read as '_')", NULL},
    {"length", CLI_INT, "N", "symbols to generate", "200"},
    {"temperature", CLI_FLOAT, "T", "softmax temperature; 0 = greedy (argmax)", "1.0"},
    {"top-k", CLI_INT, "K", "sample among the K most likely symbols only (0: off)", "0"},
    {"seed", CLI_INT, "S", "sampling seed", "0"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS (default LIPT_THREADS or all cores)", NULL},
    {"no-cache", CLI_FLAG, NULL, "recompute the whole window with the full forward pass for every symbol (for comparison)", NULL},
    {"json", CLI_FLAG, NULL,
     "print one JSON object on stdout instead of the text: prompt, text, length, seconds, tokens_per_s, cached, "
     "temperature, top_k, seed", NULL},
};
#define N_SAMPLE_OPTS ((int)(sizeof sample_opts / sizeof sample_opts[0]))

static const char *const sample_summary =
    "Generate text from a checkpoint: prints the prompt followed by the generated symbols on stdout, the speed on\n"
    "stderr. The context is the model's window of seq_len symbols; when it is full, the oldest half is dropped and\n"
    "the rest re-encoded at positions 0.. (the same with --no-cache, so both give the same text for a seed up to\n"
    "rounding). The unknown-symbol id, if the vocabulary has one, is never generated. PTB-style vocabularies\n"
    "(trained on ptb) have no space: words are joined by '_' in the prompt and in the output.";

/* The window policy of lipt_decoder (see lipt/decode.h), for the uncached path. */
static void window_push(int *win, int *len, int T, int tok, long *slides) {
    if (*len == T) {
        const int keep = lipt_decoder_keep(T);
        memmove(win, win + (T - keep), (size_t)keep * sizeof(int));
        *len = keep;
        (*slides)++;
    }
    win[(*len)++] = tok;
}

static int logits_finite(const float *lg, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(lg[i])) return 0;
    return 1;
}

int cmd_sample(int argc, char **argv) {
    const char *C = "sample";
    cli_args a;
    int pr = cli_parse(&a, C, sample_summary, sample_opts, N_SAMPLE_OPTS, argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    if (!cli_has(&a, "ckpt")) return cli_error(C, "--ckpt FILE is required");
    long length, top_k, seed;
    double temperature;
    if (cli_int(&a, "length", &length) || cli_int(&a, "top-k", &top_k) || cli_int(&a, "seed", &seed) ||
        cli_float(&a, "temperature", &temperature))
        return 2;
    if (length < 0 || length > 100000000L) return cli_error(C, "--length must be in [0, 100000000], got %ld", length);
    if (temperature < 0) return cli_error(C, "--temperature must be >= 0 (0: greedy), got %g", temperature);
    if (top_k < 0) return cli_error(C, "--top-k must be >= 0 (0: off), got %ld", top_k);
    {
        int trc = cli_apply_threads(&a, C);
        if (trc) return trc;
    }
    const int cached = !cli_has(&a, "no-cache"), json = cli_has(&a, "json");
    const char *ckpt = cli_str(&a, "ckpt");
    lipt_error err = {0};
    lipt_model m;
    lipt_vocab vocab;
    if (run_load_model(ckpt, &m, &vocab, NULL, &err) != LIPT_OK) return cli_fail(C, &err);

    /* ---- prompt -> ids ---- */
    char dflt[2] = {0, 0};
    const char *prompt = cli_str(&a, "prompt");
    if (!prompt) {
        dflt[0] = vocab.id_of['\n'] >= 0 ? '\n' : vocab.id_of[' '] >= 0 ? ' ' : (char)vocab.sym[0];
        prompt = dflt;
    }
    const size_t np = strlen(prompt);
    int rc = 0;
    uint8_t *ptext = NULL;
    int32_t *pids = NULL, *win = NULL;
    char *ptext_out = NULL, *gen = NULL;
    float *work = NULL;
    lipt_decoder *dec = NULL;
    lipt_ctx ctx;
    int ctx_ok = 0;
    if (np == 0) { rc = cli_error(C, "--prompt is empty: give at least one symbol"); goto out; }
    if (np > 100000000) { rc = cli_error(C, "--prompt is too long (%zu bytes)", np); goto out; }
    ptext = malloc(np);
    pids = malloc(np * sizeof *pids);
    if (!ptext || !pids) { rc = cli_error(C, "out of memory for a prompt of %zu bytes", np); goto out; }
    memcpy(ptext, prompt, np);
    const int ptb_spaces = vocab.ptb_form && vocab.id_of[' '] < 0 && vocab.id_of['_'] >= 0;
    if (ptb_spaces)
        for (size_t i = 0; i < np; i++)
            if (ptext[i] == ' ') ptext[i] = '_';
    if (lipt_vocab_encode(&vocab, ptext, np, pids, "--prompt", &err) != LIPT_OK) {
        /* the encoder's message advises on training options; here list what the model can read instead */
        size_t i = 0;
        while (i < np && vocab.id_of[ptext[i]] >= 0) i++;
        if (i == np) { rc = cli_fail(C, &err); goto out; }
        int32_t all[256];
        for (int k = 0; k < vocab.n_sym; k++) all[k] = k;
        char syms[1100];
        lipt_vocab_decode(&vocab, all, (size_t)vocab.n_sym, LIPT_DECODE_ESCAPE, syms, sizeof syms);
        char bad[24];
        if (ptext[i] >= 32 && ptext[i] < 127) snprintf(bad, sizeof bad, "'%c' (byte 0x%02x)", ptext[i], ptext[i]);
        else snprintf(bad, sizeof bad, "byte 0x%02x", ptext[i]);
        rc = cli_error(C, "--prompt: symbol %s at position %zu is not in the vocabulary of %s (%d symbols: %s)", bad, i,
                       ckpt, vocab.n_sym, syms);
        goto out;
    }
    /* the prompt as the model sees it (symbol form) */
    size_t plen = lipt_vocab_decode(&vocab, pids, np, 0, NULL, 0);
    ptext_out = malloc(plen + 1);
    gen = malloc((size_t)length + 1);
    work = malloc((size_t)vocab.size * sizeof(float));
    if (!ptext_out || !gen || !work) { rc = cli_error(C, "out of memory for %ld symbols", length); goto out; }
    lipt_vocab_decode(&vocab, pids, np, 0, ptext_out, plen + 1);

    /* ---- generation ---- */
    const int V = m.cfg.vocab_size, T = m.cfg.seq_len, n_allowed = vocab.n_sym; /* the unknown id is n_sym */
    lipt_rng rng;
    lipt_rng_seed(&rng, (uint64_t)seed);
    const int tty = !json && isatty(1);
    if (!json) {
        fwrite(ptext_out, 1, plen, stdout);
        if (tty) fflush(stdout);
    }
    long slides = 0;
    int wlen = 0;
    double t0 = cli_now();
    const float *lg = NULL;
    if (cached) {
        if (lipt_decoder_create(&m, 1, &dec, &err) != LIPT_OK ||
            lipt_decoder_append(dec, pids, (int)np, &lg, &err) != LIPT_OK) {
            rc = cli_fail(C, &err);
            goto out;
        }
    } else {
        win = malloc((size_t)T * sizeof *win);
        if (!win) { rc = cli_error(C, "out of memory"); goto out; }
        for (size_t i = 0; i < np; i++) window_push(win, &wlen, T, pids[i], &slides);
        lipt_ctx_init(&ctx, (size_t)1 << 20, (uint64_t)seed);
        ctx_ok = 1;
        lipt_no_grad_push(&ctx);
    }
    for (long i = 0; i < length; i++) {
        if (!cached) {
            lipt_tensor *out = NULL;
            lipt_ctx_reset(&ctx);
            if (lipt_model_forward(&ctx, &m, win, 1, wlen, NULL, &out, NULL, &err) != LIPT_OK) {
                rc = cli_fail(C, &err);
                goto out;
            }
            lg = out->data + (size_t)(wlen - 1) * V;
        }
        if (!logits_finite(lg, V)) {
            rc = cli_error(C, "the model's logits are not finite at generated symbol %ld (a diverged checkpoint?)", i);
            goto out;
        }
        int tok = lipt_sample_next(lg, n_allowed, temperature, (int)(top_k < V ? top_k : 0), &rng, work);
        const int32_t t32 = tok;
        char sym[8];
        lipt_vocab_decode(&vocab, &t32, 1, 0, sym, sizeof sym); /* one byte: tok < n_sym */
        gen[i] = sym[0];
        if (!json) {
            fputc((unsigned char)sym[0], stdout);
            if (tty) fflush(stdout);
        }
        if (i + 1 < length) {
            if (cached) {
                if (lipt_decoder_append(dec, &tok, 1, &lg, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto out; }
            } else {
                window_push(win, &wlen, T, tok, &slides);
            }
        }
    }
    double seconds = cli_now() - t0, rate = seconds > 0 ? (double)length / seconds : 0;
    if (cached) slides = lipt_decoder_slides(dec);
    gen[length] = 0;
    if (json) {
        json_w j;
        json_begin(&j, stdout);
        json_str(&j, "prompt", ptext_out);
        json_str(&j, "text", gen);
        json_int(&j, "length", length);
        json_num(&j, "seconds", seconds);
        json_num(&j, "tokens_per_s", rate);
        json_bool(&j, "cached", cached);
        json_num(&j, "temperature", temperature);
        json_int(&j, "top_k", top_k);
        json_int(&j, "seed", seed);
        json_end(&j);
    } else {
        if (tty && (length > 0 ? gen[length - 1] : ptext_out[plen ? plen - 1 : 0]) != '\n') fputc('\n', stdout);
        fflush(stdout);
    }
    fprintf(stderr, "lipt sample: %ld symbols in %.3f s: %.1f symbols/s (%s, %d threads; prompt %zu symbols, "
                    "window %d, %ld slides)\n",
            length, seconds, rate, cached ? "cached" : "no cache", lipt_get_threads(), np, T, slides);
out:
    if (ctx_ok) lipt_ctx_free(&ctx);
    lipt_decoder_free(dec);
    free(win);
    free(work);
    free(gen);
    free(ptext_out);
    free(pids);
    free(ptext);
    lipt_model_free(&m);
    return rc;
}
