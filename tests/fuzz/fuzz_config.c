/* libFuzzer target: the model config parser (lipt_config_parse) on arbitrary text. What parses must round-trip:
 * lipt_config_to_text, parsed again, gives the same config and the same text. The parameter count of an accepted
 * config is computed too (lipt_config_param_floats: shapes only, nothing allocated), since a config fixes shapes.
 * Build and run: scripts/fuzz.sh config SECONDS. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/config.h"
#include "lipt/model.h"

/* Field by field, so that a failure names the field (struct padding makes memcmp unreliable). */
static void same_config(const lipt_config *a, const lipt_config *b, const char *text) {
#define SAME(f)                                                                                            \
    do {                                                                                                   \
        if (memcmp(&a->f, &b->f, sizeof a->f) != 0) {                                                      \
            fprintf(stderr, "fuzz_config: field %s does not round-trip; text:\n%s\n", #f, text);          \
            abort();                                                                                       \
        }                                                                                                  \
    } while (0)
    SAME(vocab_size); SAME(d_model); SAME(n_heads); SAME(d_ff); SAME(n_layers); SAME(seq_len); SAME(attention);
    SAME(ffn); SAME(activation); SAME(dropout); SAME(c); SAME(lip_norm); SAME(power_iters); SAME(init_seed);
    SAME(ln_eps); SAME(clip_radius); SAME(rel_bias); SAME(actnorm); SAME(gram_iters); SAME(coupling);
    SAME(head_hidden); SAME(ffn_full_budget); SAME(norm);
#undef SAME
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the parser takes a C string: the input up to its first NUL, as a checkpoint's CONF section would be */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    lipt_config cfg;
    lipt_error err = {0};
    if (lipt_config_parse(&cfg, text, "fuzz", &err) == LIPT_OK) {
        char out[4096], out2[4096];
        const size_t n = lipt_config_to_text(&cfg, out, sizeof out);
        if (n == 0 || n >= sizeof out) { fprintf(stderr, "fuzz_config: to_text needs %zu bytes\n", n); abort(); }
        lipt_config again;
        if (lipt_config_parse(&again, out, "fuzz-roundtrip", &err) != LIPT_OK) {
            fprintf(stderr, "fuzz_config: lipt_config_to_text output does not parse: %s\n%s\n", err.msg, out);
            abort();
        }
        same_config(&cfg, &again, out);
        lipt_config_to_text(&again, out2, sizeof out2);
        if (strcmp(out, out2) != 0) { fprintf(stderr, "fuzz_config: text differs:\n%s\n---\n%s\n", out, out2); abort(); }
        size_t n_train = 0, n_buf = 0;
        if (lipt_config_param_floats(&cfg, &n_train, &n_buf, &err) != LIPT_OK) {
            fprintf(stderr, "fuzz_config: a validated config has no parameter count: %s\n", err.msg);
            abort();
        }
    } else if (!err.msg[0]) {
        fprintf(stderr, "fuzz_config: a refused config without a message\n");
        abort();
    }
    free(text);
    return 0;
}
