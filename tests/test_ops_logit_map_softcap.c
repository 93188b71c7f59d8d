/* The soft-cap logit map (src/ops/logit_map_softcap.c) through lipt_attention_dp_map: the checks every logit map
 * passes (tests/util/logit_map_check.h) at a cap of 1.5, where logits of inputs at unit scale reach the tanh's curve;
 * a cap of 1e6 is the identity on them. */
#include "logit_map_check.h"

#define MAP (&lipt_logit_map_softcap)

static double softcap_ref(double z, double p) { return p * tanh(z / p); }

START_TEST(test_forward) { lm_check_forward(MAP, 1.5f, softcap_ref); }
END_TEST
START_TEST(test_gradcheck) { lm_check_grad(MAP, 1.5f, 1e-3, 5e-3); }
END_TEST
START_TEST(test_decoder_rows) { lm_check_decoder_rows(MAP, 1.5f); }
END_TEST
START_TEST(test_identity) { lm_check_identity(MAP, 1e6f); }
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_logit_map_softcap");
    TCase *tc = tcase_create("logit_map_softcap");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_forward);
    tcase_add_test(tc, test_gradcheck);
    tcase_add_test(tc, test_decoder_rows);
    tcase_add_test(tc, test_identity);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
