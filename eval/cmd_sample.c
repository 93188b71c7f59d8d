/* lipt sample: text generation from a checkpoint (cached incremental decoding, or full recomputation per symbol
 * with --no-cache), greedy / temperature / top-k sampling, speed on stderr, optional JSON summary. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "lipt/decode.h"
#include "lipt/sample.h"
#include "run.h"

static const cli_opt sample_opts[] = {
    {"ckpt", CLI_STRING, "FILE", "checkpoint to sample from (required; or a run folder: its best.ckpt, else last.ckpt)", NULL},
    {"prompt", CLI_STRING, "TEXT",
     "start text (default: a newline if the vocabulary has one, else a space); PTB vocabularies: '_' is the word "
     "boundary, e.g. 'the_company_said' (spaces are read as '_')", NULL},
    {"prompt-file", CLI_STRING, "FILE", "the start text read from a file, its bytes exactly (instead of --prompt)", NULL},
    {"num-samples", CLI_INT, "K", "K texts from the same prompt, with seeds S, S+1, ..., S+K-1 (the text output "
     "separates them by a line ---; --json lists them in \"samples\")", "1"},
    {"length", CLI_INT, "N", "symbols to generate", "200"},
    {"temperature", CLI_FLOAT, "T", "softmax temperature; 0 = greedy (argmax)", "1.0"},
    {"top-k", CLI_INT, "K", "sample among the K most likely symbols only (0: off)", "0"},
    {"seed", CLI_INT, "S", "sampling seed", "0"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS (default LIPT_THREADS, else the cores other programs leave idle)", NULL},
    {"no-cache", CLI_FLAG, NULL, "recompute the whole window with the full forward pass for every symbol (for comparison)", NULL},
    CLI_OPT_PRECISION("the checkpoint's"),
    {"json", CLI_FLAG, NULL,
     "print one JSON object on stdout instead of the text: prompt, text (the first sample), samples (all), length, "
     "seconds, tokens_per_s, cached, temperature, top_k, seed, num_samples, precision", NULL},
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

/* The options, validated. */
typedef struct {
    long length, top_k, seed, num_samples;
    double temperature;
    int cached, json;
    const char *ckpt, *prompt; /* prompt NULL: the vocabulary's default */
    char *prompt_buf;          /* --prompt-file: its bytes (prompt points here) */
} sample_args;

/* --prompt-file FILE into o->prompt (a regular file of at most 100 MB without a NUL byte). 0, or the exit status. */
static int read_prompt_file(const char *C, const char *path, sample_args *o) {
    lipt_error err = {0};
    uint64_t size = 0;
    FILE *f = lipt_open_regular(path, &size, &err); /* a FIFO is refused, never waited on */
    if (!f) return cli_error(C, "--prompt-file %s", err.msg);
    if (size > 100000000) {
        fclose(f);
        return cli_error(C, "--prompt-file %s: %llu bytes, more than the 100000000 a prompt may have", path,
                         (unsigned long long)size);
    }
    o->prompt_buf = malloc((size_t)size + 1);
    const size_t got = o->prompt_buf ? fread(o->prompt_buf, 1, (size_t)size, f) : 0;
    const int bad = ferror(f);
    fclose(f);
    if (!o->prompt_buf || bad || got != size)
        return cli_error(C, "--prompt-file %s: %s", path, o->prompt_buf ? "could not read all of it" : "out of memory");
    o->prompt_buf[got] = 0;
    if (strlen(o->prompt_buf) != got)
        return cli_error(C, "--prompt-file %s: a NUL byte at offset %zu: a prompt is text", path, strlen(o->prompt_buf));
    o->prompt = o->prompt_buf;
    return 0;
}

/* Reads and checks the options (and applies --threads); returns 0 or the exit status. */
static int parse_sample_args(cli_args *a, const char *C, sample_args *o) {
    if (!cli_has(a, "ckpt")) return cli_error(C, "--ckpt FILE is required");
    if (run_ckpt_option(a, C)) return 2; /* a run folder: its best.ckpt, else last.ckpt */
    if (cli_int(a, "length", &o->length) || cli_int(a, "top-k", &o->top_k) || cli_int(a, "seed", &o->seed) ||
        cli_float(a, "temperature", &o->temperature) || cli_int(a, "num-samples", &o->num_samples))
        return 2;
    if (o->num_samples < 1 || o->num_samples > 10000)
        return cli_error(C, "--num-samples must be in [1, 10000], got %ld", o->num_samples);
    if (cli_has(a, "prompt") && cli_has(a, "prompt-file")) return cli_error(C, "give --prompt or --prompt-file, not both");
    if (o->length < 0 || o->length > 100000000L)
        return cli_error(C, "--length must be in [0, 100000000], got %ld", o->length);
    if (o->temperature < 0) return cli_error(C, "--temperature must be >= 0 (0: greedy), got %g", o->temperature);
    if (o->top_k < 0) return cli_error(C, "--top-k must be >= 0 (0: off), got %ld", o->top_k);
    const int trc = cli_apply_threads(a, C);
    if (trc) return trc;
    lipt_precision p = LIPT_PRECISION_FLOAT32; /* an explicit --precision is checked before the model is read */
    const int prc = cli_has(a, "precision") ? cli_apply_precision(a, C, &p) : 0;
    if (prc) return prc;
    o->cached = !cli_has(a, "no-cache");
    o->json = cli_has(a, "json");
    o->ckpt = cli_str(a, "ckpt");
    o->prompt = cli_str(a, "prompt");
    return cli_has(a, "prompt-file") ? read_prompt_file(C, cli_str(a, "prompt-file"), o) : 0;
}

/* One sampling run: the model, the prompt in its two forms, the output buffers and what the run measured. */
typedef struct {
    const sample_args *o;
    lipt_model m;
    lipt_vocab vocab;
    int32_t *pids;     /* the prompt's ids (PTB vocabularies: a space read as '_', lipt_vocab_text_symbol) */
    size_t np;
    char *ptext_out;   /* the prompt as the model sees it (symbol form), plen bytes + NUL */
    size_t plen;
    char *gen;         /* length generated symbols + NUL */
    float *work;       /* the sampler's scratch, vocab.size floats */
    int tty;           /* text on a terminal: flushed symbol by symbol */
    double seconds;
    long slides;
    char **samples;    /* --json with --num-samples: each sample's text (malloc'd), n_done of them */
    long n_done;
} sample_run;

/* prompt -> ids, then the buffers of the generation; returns 0 or the exit status. */
static int prepare_prompt(const char *C, sample_run *r, const char *prompt, lipt_error *err) {
    const lipt_vocab *vocab = &r->vocab;
    const size_t np = r->np = strlen(prompt);
    const char *opt = r->o->prompt_buf ? "--prompt-file" : "--prompt";
    if (np == 0) return cli_error(C, "%s is empty: give at least one symbol", opt);
    if (np > 100000000) return cli_error(C, "%s is too long (%zu bytes)", opt, np);
    r->pids = malloc(np * sizeof *r->pids);
    if (!r->pids) return cli_error(C, "out of memory for a prompt of %zu bytes", np);
    if (lipt_vocab_encode_text(vocab, (const uint8_t *)prompt, np, r->pids, opt, err) != LIPT_OK)
        return cli_fail(C, err); /* names the symbol and lists the ones the model reads */
    r->plen = lipt_vocab_decode(vocab, r->pids, np, 0, NULL, 0);
    r->ptext_out = malloc(r->plen + 1);
    r->gen = malloc((size_t)r->o->length + 1);
    r->work = malloc((size_t)vocab->size * sizeof(float));
    if (!r->ptext_out || !r->gen || !r->work) return cli_error(C, "out of memory for %ld symbols", r->o->length);
    lipt_vocab_decode(vocab, r->pids, np, 0, r->ptext_out, r->plen + 1);
    return 0;
}

/* The generation loop: the logits of the next symbol from the decoder's cache, or from a full forward pass over
 * the window with --no-cache; every symbol printed as it comes (text mode). Returns 0 or the exit status. */
static int generate(const char *C, sample_run *r, lipt_error *err) {
    const sample_args *o = r->o;
    const lipt_model *m = &r->m;
    const int cached = o->cached, json = o->json;
    const int V = m->cfg.vocab_size, T = m->cfg.seq_len, n_allowed = r->vocab.n_sym; /* the unknown id is n_sym */
    lipt_rng rng;
    lipt_rng_seed(&rng, (uint64_t)o->seed);
    r->tty = !json && isatty(1);
    if (!json) {
        fwrite(r->ptext_out, 1, r->plen, stdout);
        if (r->tty) fflush(stdout);
    }
    int rc = 0, wlen = 0, ctx_ok = 0;
    int32_t *win = NULL;
    lipt_decoder *dec = NULL;
    lipt_ctx ctx;
    long slides = 0;
    double t0 = cli_now();
    const float *lg = NULL;
    if (cached) {
        if (lipt_decoder_create(m, 1, &dec, err) != LIPT_OK ||
            lipt_decoder_append(dec, r->pids, (int)r->np, &lg, err) != LIPT_OK) {
            rc = cli_fail(C, err);
            goto out;
        }
    } else {
        win = malloc((size_t)T * sizeof *win);
        if (!win) { rc = cli_error(C, "out of memory"); goto out; }
        for (size_t i = 0; i < r->np; i++) window_push(win, &wlen, T, r->pids[i], &slides);
        lipt_ctx_init(&ctx, (size_t)1 << 20, (uint64_t)o->seed);
        ctx_ok = 1;
        if (lipt_ctx_set_precision(&ctx, m->cfg.precision, err) != LIPT_OK) {
            rc = cli_fail(C, err);
            goto out;
        }
        lipt_no_grad_push(&ctx);
    }
    for (long i = 0; i < o->length; i++) {
        if (!cached) {
            lipt_tensor *out = NULL;
            lipt_ctx_reset(&ctx);
            if (lipt_model_forward(&ctx, m, win, 1, wlen, NULL, &out, NULL, err) != LIPT_OK) {
                rc = cli_fail(C, err);
                goto out;
            }
            lg = out->data + (size_t)(wlen - 1) * V;
        }
        if (!logits_finite(lg, V)) {
            rc = cli_error(C, "the model's logits are not finite at generated symbol %ld (a diverged checkpoint?)", i);
            goto out;
        }
        int tok = lipt_sample_next(lg, n_allowed, o->temperature, (int)(o->top_k < V ? o->top_k : 0), &rng, r->work);
        const int32_t t32 = tok;
        char sym[8];
        lipt_vocab_decode(&r->vocab, &t32, 1, 0, sym, sizeof sym); /* one byte: tok < n_sym */
        r->gen[i] = sym[0];
        if (!json) {
            fputc((unsigned char)sym[0], stdout);
            if (r->tty) fflush(stdout);
        }
        if (i + 1 < o->length) {
            if (cached) {
                if (lipt_decoder_append(dec, &tok, 1, &lg, err) != LIPT_OK) { rc = cli_fail(C, err); goto out; }
            } else {
                window_push(win, &wlen, T, tok, &slides);
            }
        }
    }
    r->seconds = cli_now() - t0;
    r->slides = cached ? lipt_decoder_slides(dec) : slides;
    r->gen[o->length] = 0;
out:
    if (ctx_ok) lipt_ctx_free(&ctx);
    lipt_decoder_free(dec);
    free(win);
    return rc;
}

/* --num-samples K: generate K times, seeds S .. S+K-1 (o->seed left at the last); the texts separated by a line ---,
 * or kept for the JSON. Seconds and slides summed. Returns 0 or the exit status. */
static int generate_all(const char *C, sample_run *r, sample_args *o, lipt_error *err) {
    r->samples = calloc((size_t)o->num_samples, sizeof *r->samples);
    if (!r->samples) return cli_error(C, "out of memory for %ld samples", o->num_samples);
    double seconds = 0;
    long slides = 0;
    for (long k = 0; k < o->num_samples; k++) {
        if (k && !o->json) fputs(r->gen[o->length ? o->length - 1 : 0] == '\n' ? "---\n" : "\n---\n", stdout);
        if (k) o->seed++;
        const int rc = generate(C, r, err);
        if (rc) return rc;
        seconds += r->seconds;
        slides += r->slides;
        r->samples[k] = strdup(r->gen);
        if (!r->samples[k]) return cli_error(C, "out of memory for %ld samples", o->num_samples);
        r->n_done = k + 1;
    }
    r->seconds = seconds;
    r->slides = slides;
    return 0;
}

/* The text's end (a newline on a terminal) or the JSON summary on stdout, the speed on stderr. */
static void report(const sample_run *r) {
    const sample_args *o = r->o;
    const long length = o->length * r->n_done; /* every sample's symbols, in r->seconds in all */
    const double rate = r->seconds > 0 ? (double)length / r->seconds : 0;
    if (o->json) {
        json_w j;
        json_begin(&j, stdout);
        json_str(&j, "prompt", r->ptext_out);
        json_str(&j, "text", r->samples[0]);
        json_arr_open(&j, "samples");
        for (long k = 0; k < r->n_done; k++) json_str(&j, NULL, r->samples[k]);
        json_arr_close(&j);
        json_int(&j, "num_samples", r->n_done);
        json_int(&j, "length", o->length); /* per sample */
        json_num(&j, "seconds", r->seconds);
        json_num(&j, "tokens_per_s", rate);
        json_bool(&j, "cached", o->cached);
        json_num(&j, "temperature", o->temperature);
        json_int(&j, "top_k", o->top_k);
        json_int(&j, "seed", o->seed - (r->n_done - 1)); /* the first sample's */
        json_str(&j, "precision", lipt_precision_name(r->m.cfg.precision));
        json_end(&j);
    } else {
        const char last = length > 0 ? r->gen[length - 1] : r->ptext_out[r->plen ? r->plen - 1 : 0];
        /* the speed line below starts a line of its own wherever it lands after the text: on a terminal, and in a
         * file or pipe that stderr shares (> out 2>&1); a text redirected alone keeps its exact bytes */
        struct stat so, se;
        const int shared = fstat(1, &so) == 0 && fstat(2, &se) == 0 && so.st_dev == se.st_dev && so.st_ino == se.st_ino;
        if ((r->tty || shared) && last != '\n') fputc('\n', stdout);
        fflush(stdout);
    }
    const int threads = lipt_get_threads();
    fprintf(stderr, "lipt sample: %ld symbols%s in %.3f s: %.1f symbols/s (%s, %d thread%s, %s; prompt %zu symbols, "
                    "window %d, %ld slides)\n",
            length, r->n_done > 1 ? " (all samples)" : "", r->seconds, rate, o->cached ? "cached" : "no cache", threads,
            threads == 1 ? "" : "s",
            lipt_precision_name(r->m.cfg.precision), r->np, r->m.cfg.seq_len, r->slides);
}

int cmd_sample(int argc, char **argv) {
    const char *C = "sample";
    cli_args a;
    int pr = cli_parse(&a, C, sample_summary, sample_opts, N_SAMPLE_OPTS, argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    sample_args o;
    memset(&o, 0, sizeof o);
    int rc = parse_sample_args(&a, C, &o);
    if (rc) return rc;
    lipt_error err = {0};
    sample_run r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    if (run_load_model(o.ckpt, &r.m, &r.vocab, NULL, &err) != LIPT_OK) return cli_fail(C, &err);
    rc = cli_apply_precision(&a, C, &r.m.cfg.precision); /* the checkpoint's, unless --precision */
    if (rc) {
        lipt_model_free(&r.m);
        return rc;
    }
    /* default: a newline if the vocabulary has one, else a space, else its first symbol */
    char dflt[2] = {0, 0};
    const char *prompt = o.prompt;
    if (!prompt) {
        dflt[0] = r.vocab.id_of['\n'] >= 0 ? '\n' : r.vocab.id_of[' '] >= 0 ? ' ' : (char)r.vocab.sym[0];
        prompt = dflt;
    }
    rc = prepare_prompt(C, &r, prompt, &err);
    if (!rc) rc = generate_all(C, &r, &o, &err);
    if (!rc) report(&r);
    for (long k = 0; k < r.n_done && r.samples; k++) free(r.samples[k]);
    free(r.samples);
    free(o.prompt_buf);
    free(r.work);
    free(r.gen);
    free(r.ptext_out);
    free(r.pids);
    lipt_model_free(&r.m);
    return rc;
}
