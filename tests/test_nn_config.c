/* Model config: the shipped configs parse, every bad input is rejected with file:line and the accepted
 * keys or values, overrides work, and the text form round-trips exactly. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lipt/config.h"

static const char *models_dir(char *buf, size_t len) {
    const char *src = getenv("LIPT_SOURCE_DIR");
    snprintf(buf, len, "%s/models", src ? src : ".");
    return buf;
}

START_TEST(test_shipped_configs) {
    const char *names[] = {"ptb-dp.cfg", "ptb-l2.cfg", "ptb-l2-tied.cfg", "ptb-contractive.cfg", "enwik8.cfg", "tiny.cfg",
                           "ptb-contractive-l2.cfg"};
    const lipt_attn_kind attn[] = {LIPT_ATTN_DP, LIPT_ATTN_L2, LIPT_ATTN_L2_TIED, LIPT_ATTN_CLIPPED_DP, LIPT_ATTN_DP,
                                   LIPT_ATTN_CLIPPED_DP, LIPT_ATTN_CONTRACTIVE_L2};
    char dir[900], path[1024];
    models_dir(dir, sizeof dir);
    for (int i = 0; i < 7; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        lipt_config cfg;
        lipt_error err = {0};
        lipt_status st = lipt_config_load(&cfg, path, &err);
        ck_assert_msg(st == LIPT_OK, "%s: %s", path, err.msg);
        ck_assert_int_eq(cfg.attention, attn[i]);
        if (i < 4) {
            ck_assert_int_eq(cfg.vocab_size, 50);
            ck_assert_int_eq(cfg.d_model, 256);
            ck_assert_int_eq(cfg.n_layers, 4);
            ck_assert_int_eq(cfg.n_heads, 4);
            ck_assert_int_eq(cfg.d_ff, 1024);
            ck_assert_int_eq(cfg.seq_len, 128);
        }
        printf("config %-20s ok: attention %s ffn %s act %s D %d L %d\n", names[i], lipt_attn_name(cfg.attention),
               lipt_ffn_name(cfg.ffn), lipt_act_name(cfg.activation), cfg.d_model, cfg.n_layers);
    }
    lipt_config t;
    snprintf(path, sizeof path, "%s/tiny.cfg", dir);
    ck_assert(lipt_config_load(&t, path, NULL) == LIPT_OK);
    ck_assert(lipt_config_invertible(&t));
    ck_assert_int_eq(t.d_model, 64);
    ck_assert_int_eq(t.n_layers, 2);
    ck_assert_int_eq(t.seq_len, 32);
}
END_TEST

START_TEST(test_syntax) {
    const char *text = "# a comment\n"
                       "\n"
                       "   d_model=96   # trailing comment\n"
                       "n-heads = 3\n"         /* '-' spelling */
                       "\t attention = l2-tied\t\n"
                       "c = 0.5\n"
                       "dropout = 0.25\r\n"    /* CRLF */
                       "init_seed = 18446744073709551615\n"
                       "n_layers = 0"; /* no final newline */
    lipt_config cfg;
    lipt_error err = {0};
    ck_assert_msg(lipt_config_parse(&cfg, text, "mem.cfg", &err) == LIPT_OK, "%s", err.msg);
    ck_assert_int_eq(cfg.d_model, 96);
    ck_assert_int_eq(cfg.n_heads, 3);
    ck_assert_int_eq(cfg.attention, LIPT_ATTN_L2_TIED);
    ck_assert_float_eq(cfg.c, 0.5f);
    ck_assert_float_eq(cfg.dropout, 0.25f);
    ck_assert(cfg.init_seed == UINT64_MAX);
    ck_assert_int_eq(cfg.n_layers, 0);
    /* untouched keys keep their defaults */
    lipt_config def;
    lipt_config_default(&def);
    ck_assert_int_eq(cfg.vocab_size, def.vocab_size);
    ck_assert_float_eq(cfg.ln_eps, def.ln_eps);
    ck_assert_float_eq(def.c, 0.9f);
    ck_assert(lipt_config_validate(&def, NULL) == LIPT_OK);
}
END_TEST

/* text, the line the message must name, and fragments it must contain */
typedef struct { const char *text; int line; const char *must[3]; } bad_case;

static const bad_case bad_cases[] = {
    {"d_model = 64\nwidth = 3\n", 2, {"unknown key 'width'", "vocab_size", "ln_eps"}},
    {"attention = softmax\n", 1, {"attention = 'softmax'", "dp, l2, l2-tied, contractive-l2", NULL}},
    {"\nffn = big\n", 2, {"ffn = 'big'", "standard, contractive", NULL}},
    {"activation = tanh\n", 1, {"activation = 'tanh'", "gelu, relu, elu, lipswish", NULL}},
    {"lip_norm = 1\n", 1, {"lip_norm = '1'", "inf, 2", NULL}},
    {"d_model = abc\n", 1, {"d_model = 'abc'", "integer", NULL}},
    {"d_model = 12abc\n", 1, {"d_model = '12abc'", "integer", NULL}},
    {"d_model = 0\n", 1, {"d_model = '0'", "[1, ", NULL}},
    {"vocab_size = 1\n", 1, {"vocab_size", "[2, ", NULL}},
    {"n_layers = -1\n", 1, {"n_layers", "[0, 1024]", NULL}},
    {"seq_len = 99999999999999999999\n", 1, {"seq_len", "integer", NULL}},
    {"c = 1\n", 1, {"c = '1'", "(0, 1)", NULL}},
    {"c = 0\n", 1, {"c = '0'", "(0, 1)", NULL}},
    {"c = nan\n", 1, {"c = 'nan'", "(0, 1)", NULL}},
    {"dropout = 1\n", 1, {"dropout = '1'", "[0, 1)", NULL}},
    {"dropout = -0.1\n", 1, {"dropout", "[0, 1)", NULL}},
    {"ln_eps = 0\n", 1, {"ln_eps", "(0, 1)", NULL}},
    {"power_iters = x\n", 1, {"power_iters", "integer", NULL}},
    {"init_seed = -5\n", 1, {"init_seed = '-5'", "non-negative", NULL}},
    {"# ok\nd_model 64\n", 2, {"expected 'key = value'", NULL, NULL}},
    {"d_model =\n", 1, {"d_model has no value", NULL, NULL}},
    {" = 3\n", 1, {"missing key", NULL, NULL}},
    {"d_model = 64\nd_model = 32\n", 2, {"set twice", "line 1", NULL}},
    {"d_model = 64\nn_heads = 3\n", 2, {"n_heads = 3 must divide d_model = 64", NULL, NULL}},
    {"n_heads = 5\n\nd_model = 64\n", 3, {"must divide", NULL, NULL}},
    {"attention = contractive-l2\nactivation = relu\n", 1, {"needs ffn = contractive", NULL, NULL}},
    {"ffn = contractive\nactivation = relu\n", 1, {"needs attention = clipped-dp or contractive-l2", NULL, NULL}},
    {"attention = contractive-l2\nffn = contractive\n", 2, {"gelu is not 1-Lipschitz", "relu, elu, lipswish", NULL}},
    {"attention = contractive-l2\n# x\nactivation = gelu\nffn = contractive\n", 4, {"gelu", "1.13", NULL}},
    {"norm = middle\n", 1, {"norm = 'middle'", "pre, post", NULL}},
    /* range-checked as stored: a float32 */
    {"c = 1e-50\n", 1, {"c = '1e-50'", "float32", "(0, 1)"}},
    {"c = 0.99999999999\n", 1, {"c = '0.99999999999'", "becomes 1", NULL}},
    {"dropout = 0.99999999999\n", 1, {"dropout", "becomes 1", "[0, 1)"}},
    {"ln_eps = 1e-50\n", 1, {"ln_eps", "becomes 0", NULL}},
    {"attention = clipped-dp\nffn = contractive\nactivation = relu\nlip_norm = inf2\nnorm = post\n", 5,
     {"norm = post", "non-invertible", "clipped-dp"}},
    {"d_model = 64\nnorm = post\ncoupling = 1\n", 3, {"norm = post", "coupling = 1", NULL}},
    {"spectral_bound = lanczos\n", 1, {"spectral_bound = 'lanczos'", "gram, cholesky", NULL}},
    {"spectral_bound = cholesky\nd_model = 64\n", 1, {"spectral_bound = cholesky", "ffn = contractive", NULL}},
    {"weight_projection = 3\n", 1, {"weight_projection = '3'", "[0, 2]", NULL}},
    {"weight_projection = yes\n", 1, {"weight_projection = 'yes'", "integer", NULL}},
    {"d_model = 64\n\nweight_projection = 2\n", 3, {"weight_projection = 2", "needs the invertible model", "dp"}},
};

START_TEST(test_bad_cases) {
    const int n = (int)(sizeof bad_cases / sizeof bad_cases[0]);
    for (int i = 0; i < n; i++) {
        const bad_case *b = &bad_cases[i];
        lipt_config cfg;
        lipt_error err = {0};
        lipt_status st = lipt_config_parse(&cfg, b->text, "bad.cfg", &err);
        ck_assert_msg(st != LIPT_OK, "case %d accepted: %s", i, b->text);
        ck_assert_int_eq(err.status, st);
        char where[32];
        snprintf(where, sizeof where, "bad.cfg:%d: ", b->line);
        ck_assert_msg(strncmp(err.msg, where, strlen(where)) == 0, "case %d: message '%s' does not start with '%s'", i,
                      err.msg, where);
        for (int j = 0; j < 3; j++)
            if (b->must[j])
                ck_assert_msg(strstr(err.msg, b->must[j]), "case %d: message '%s' lacks '%s'", i, err.msg, b->must[j]);
        printf("rejected: %s\n", err.msg);
    }
}
END_TEST

START_TEST(test_files) {
    char path[] = "/tmp/lipt_cfg_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    const char *text = "# bad file\nd_model = 64\nn_heads = 2\nattention = fast\n";
    ck_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    lipt_config cfg;
    lipt_error err = {0};
    ck_assert(lipt_config_load(&cfg, path, &err) == LIPT_ERR_ARG);
    char want[64];
    snprintf(want, sizeof want, "%s:4: ", path);
    ck_assert_msg(strncmp(err.msg, want, strlen(want)) == 0, "message '%s'", err.msg);
    printf("file error: %s\n", err.msg);
    unlink(path);
    ck_assert(lipt_config_load(&cfg, "/nonexistent/dir/x.cfg", &err) == LIPT_ERR_IO);
    ck_assert(strstr(err.msg, "/nonexistent/dir/x.cfg"));
    printf("file error: %s\n", err.msg);
}
END_TEST

START_TEST(test_set_and_roundtrip) {
    lipt_config cfg;
    lipt_error err = {0};
    lipt_config_default(&cfg);
    ck_assert(lipt_config_set(&cfg, "d-model", "48", &err) == LIPT_OK);
    ck_assert(lipt_config_set(&cfg, "n_heads", "6", &err) == LIPT_OK);
    ck_assert(lipt_config_set(&cfg, "attention", "contractive-l2", &err) == LIPT_OK);
    ck_assert(lipt_config_set(&cfg, "ffn", "contractive", &err) == LIPT_OK);
    /* gelu (the default) with the contractive ffn: the value alone is fine, validation catches the pair */
    ck_assert(lipt_config_validate(&cfg, &err) == LIPT_ERR_ARG);
    ck_assert(strstr(err.msg, "gelu"));
    ck_assert(lipt_config_set(&cfg, "activation", "elu", &err) == LIPT_OK);
    ck_assert(lipt_config_set(&cfg, "c", "0.123456789", &err) == LIPT_OK);
    ck_assert(lipt_config_set(&cfg, "dropout", "0.1", &err) == LIPT_OK);
    ck_assert(lipt_config_set(&cfg, "ln_eps", "3.3e-7", &err) == LIPT_OK);
    ck_assert(lipt_config_set(&cfg, "lip_norm", "2", &err) == LIPT_OK);
    ck_assert(lipt_config_set(&cfg, "init_seed", "987654321987654321", &err) == LIPT_OK);
    ck_assert(lipt_config_set(&cfg, "power_iters", "7", &err) == LIPT_OK);
    ck_assert(lipt_config_validate(&cfg, &err) == LIPT_OK);
    ck_assert(lipt_config_gram_arg(&cfg) == 8);
    ck_assert(lipt_config_set(&cfg, "spectral-bound", "cholesky", &err) == LIPT_OK);
    ck_assert(lipt_config_gram_arg(&cfg) == (8 | LIPT_SPECTRAL_CHOLESKY));
    ck_assert(lipt_config_set(&cfg, "weight-projection", "1", &err) == LIPT_OK);
    ck_assert(lipt_config_set(&cfg, "heads", "2", &err) == LIPT_ERR_ARG);
    ck_assert(strstr(err.msg, "unknown config key 'heads'") && strstr(err.msg, "n_heads"));
    printf("override error: %s\n", err.msg);
    ck_assert(lipt_config_set(&cfg, "c", "2", &err) == LIPT_ERR_ARG);
    ck_assert(strstr(err.msg, "(0, 1)"));
    ck_assert(lipt_config_set(&cfg, "n_heads", "5", &err) == LIPT_OK);
    ck_assert(lipt_config_validate(&cfg, &err) == LIPT_ERR_ARG && strstr(err.msg, "must divide"));
    ck_assert(lipt_config_set(&cfg, "n_heads", "6", &err) == LIPT_OK);

    char buf[1024];
    size_t need = lipt_config_to_text(&cfg, buf, sizeof buf);
    ck_assert(need > 0 && need < sizeof buf);
    char small[16];
    ck_assert(lipt_config_to_text(&cfg, small, sizeof small) == need); /* reports the full length */
    lipt_config back;
    ck_assert_msg(lipt_config_parse(&back, buf, "ckpt", &err) == LIPT_OK, "%s", err.msg);
    ck_assert_msg(memcmp(&back, &cfg, sizeof cfg) == 0, "round trip differs:\n%s", buf);
    ck_assert(back.c == cfg.c && back.ln_eps == cfg.ln_eps && back.dropout == cfg.dropout);
    /* floats as given: the shortest text that reads back exactly (0.1, not 0.100000001) */
    ck_assert_msg(strstr(buf, "dropout = 0.1\n") && strstr(buf, "ln_eps = 3.3e-07\n") && strstr(buf, "c = 0.12345679\n"),
                  "floats not in their shortest form:\n%s", buf);
    /* every key appears */
    const char *keys[] = {"vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "seq_len", "attention", "ffn",
                          "activation", "dropout", "c =", "lip_norm", "power_iters", "init_seed", "ln_eps"};
    for (int i = 0; i < 15; i++) ck_assert_msg(strstr(buf, keys[i]), "text lacks %s", keys[i]);
    ck_assert_msg(strstr(buf, "spectral_bound = cholesky\n"), "text lacks spectral_bound:\n%s", buf);
    ck_assert_msg(strstr(buf, "weight_projection = 1\n"), "text lacks weight_projection:\n%s", buf);
    /* the defaults round-trip too, without the keys that only non-default values write (older readers) */
    lipt_config def;
    lipt_config_default(&def);
    lipt_config_to_text(&def, buf, sizeof buf);
    ck_assert(lipt_config_parse(&back, buf, "ckpt", &err) == LIPT_OK);
    ck_assert(memcmp(&back, &def, sizeof def) == 0);
    ck_assert(!strstr(buf, "spectral_bound") && !strstr(buf, "precision") && !strstr(buf, "weight_projection"));
    printf("round trip ok (%zu chars)\n", need);
}
END_TEST

int main(void) {
    Suite *s = suite_create("nn_config");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, test_shipped_configs);
    tcase_add_test(tc, test_syntax);
    tcase_add_test(tc, test_bad_cases);
    tcase_add_test(tc, test_files);
    tcase_add_test(tc, test_set_and_roundtrip);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
