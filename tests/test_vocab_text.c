/* vocab_text: the one mapping from typed text to a vocabulary's symbols (issue 37): a PTB-style vocabulary reads a
 * space as '_' in every encoder; other vocabularies read every byte as itself; the typed-text error lists the
 * symbols the model reads instead of advising to retrain. */
#include "testutil.h"

#include <string.h>

#include "lipt/data.h"

/* The vocabulary a PTB char corpus gives: its symbols, no space, marked ptb_form as lipt_dataset_load marks it. */
static void ptb_vocab(lipt_vocab *v) {
    const char *train = "the_company_said\nmr._<unk>_is_N_years_old\n";
    lipt_vocab_build(v, (const uint8_t *)train, strlen(train));
    v->ptb_form = 1;
}

START_TEST(test_text_symbol_rule) {
    lipt_vocab v;
    ptb_vocab(&v);
    ck_assert_int_eq(lipt_vocab_text_symbol(&v, ' '), '_');
    for (int b = 0; b < 256; b++)
        if (b != ' ') ck_assert_int_eq(lipt_vocab_text_symbol(&v, (uint8_t)b), b);
    /* not PTB-style: the same symbols without the PTB mark, a PTB vocabulary with a space or without '_' */
    v.ptb_form = 0;
    ck_assert_int_eq(lipt_vocab_text_symbol(&v, ' '), ' ');
    const char *spaced = "the company_said";
    lipt_vocab_build(&v, (const uint8_t *)spaced, strlen(spaced));
    v.ptb_form = 1;
    ck_assert_int_eq(lipt_vocab_text_symbol(&v, ' '), ' ');
    lipt_vocab_build(&v, (const uint8_t *)"abc\n", 4);
    v.ptb_form = 1;
    ck_assert_int_eq(lipt_vocab_text_symbol(&v, ' '), ' ');
    lipt_vocab_init_bytes(&v);
    for (int b = 0; b < 256; b++) ck_assert_int_eq(lipt_vocab_text_symbol(&v, (uint8_t)b), b);
}
END_TEST

START_TEST(test_encoders_map_spaces) {
    lipt_vocab v;
    ptb_vocab(&v);
    lipt_error err = {0};
    const char *typed = "the company said ";
    const char *symbols = "the_company_said_";
    const size_t n = strlen(typed);
    int32_t a[32], b[32], c[32];
    lipt_tok t[32];
    ck_assert_int_eq(lipt_vocab_encode_text(&v, (const uint8_t *)typed, n, a, "--prompt", &err), LIPT_OK);
    ck_assert_int_eq(lipt_vocab_encode(&v, (const uint8_t *)typed, n, b, "x", &err), LIPT_OK);
    ck_assert_int_eq(lipt_vocab_encode_tok(&v, (const uint8_t *)typed, n, t, "x", &err), LIPT_OK);
    ck_assert_int_eq(lipt_vocab_encode(&v, (const uint8_t *)symbols, n, c, "x", &err), LIPT_OK);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(a[i], c[i]);
        ck_assert_int_eq(b[i], c[i]);
        ck_assert_int_eq(t[i], c[i]);
    }
    char out[32];
    lipt_vocab_decode(&v, a, n, 0, out, sizeof out);
    ck_assert_str_eq(out, symbols); /* decoding gives the symbol form */
    /* a checkpoint's PTB vocabulary reading plain text (lipt eval --data FILE) maps it too */
    lipt_dataset ds;
    lipt_data_opts o = {.frac = {0.5, 0.5, 0}, .use_vocab = &v};
    const char *text = "the company said\nthe company said\n";
    ck_assert_int_eq(lipt_dataset_from_text((const uint8_t *)text, strlen(text), "plain.txt", &o, &ds, &err), LIPT_OK);
    ck_assert_int_eq(ds.tok[0][3], v.id_of['_']);
    lipt_dataset_free(&ds);
    /* without the PTB mark a space stays a space, and is unseen here */
    v.ptb_form = 0;
    ck_assert_int_eq(lipt_vocab_encode_text(&v, (const uint8_t *)typed, n, a, "--prompt", &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "position 3"));
}
END_TEST

START_TEST(test_typed_text_error) {
    lipt_vocab v;
    ptb_vocab(&v);
    lipt_error err = {0};
    const char *typed = "the Quick fox";
    int32_t ids[32];
    ck_assert_int_eq(lipt_vocab_encode_text(&v, (const uint8_t *)typed, strlen(typed), ids, "--text", &err),
                     LIPT_ERR_FORMAT);
    printf("vocab_text: typed: %s\n", err.msg);
    ck_assert_ptr_nonnull(strstr(err.msg, "--text"));
    ck_assert_ptr_nonnull(strstr(err.msg, "'Q'"));
    ck_assert_ptr_nonnull(strstr(err.msg, "position 4"));
    ck_assert_ptr_nonnull(strstr(err.msg, "symbols: \\n . < > N _ a c..e h i k..p r..u y (")); /* runs shortened */
    ck_assert_ptr_nonnull(strstr(err.msg, "a space is read as '_'"));
    ck_assert_ptr_null(strstr(err.msg, "--unk"));                    /* no advice to retrain */
    /* a corpus keeps the training advice */
    ck_assert_int_eq(lipt_vocab_encode(&v, (const uint8_t *)typed, strlen(typed), ids, "valid split", &err),
                     LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "--unk"));
    /* a long listing is cut, never overflows: 120 symbols without runs */
    uint8_t many[120];
    for (int i = 0; i < 120; i++) many[i] = (uint8_t)(2 * i + 1);
    lipt_vocab_build(&v, many, sizeof many);
    ck_assert_int_eq(lipt_vocab_encode_text(&v, (const uint8_t *)"\xff", 1, ids, "--prompt", &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "..."));
    ck_assert_ptr_nonnull(strstr(err.msg, "byte 0xff"));
    /* with an unknown id, typed text never fails */
    lipt_vocab_enable_unk(&v);
    ck_assert_int_eq(lipt_vocab_encode_text(&v, (const uint8_t *)"\xff", 1, ids, "--prompt", &err), LIPT_OK);
    ck_assert_int_eq(ids[0], v.unk_id);
}
END_TEST

int main(void) {
    Suite *s = suite_create("vocab_text");
    TCase *tc = tcase_create("vocab_text");
    tcase_add_test(tc, test_text_symbol_rule);
    tcase_add_test(tc, test_encoders_map_spaces);
    tcase_add_test(tc, test_typed_text_error);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
