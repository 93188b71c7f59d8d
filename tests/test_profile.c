/* The step profile (lipt_profile, lipt bench --profile): timing changes no bit of a training run (losses, weights
 * after AdamW steps); the phases add up to no more than the steps' wall time and cover most of it; the ops' forward
 * times fit inside the forward phase and their backward times inside the backward phase; every op the model runs is
 * counted once per call (the loss once a step) and its backward timed; with --recompute the ops a backward reruns are
 * not counted as forward calls. For the DP model and the invertible model (certificates in the forward). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


enum { STEPS = 3 };

typedef struct {
    double loss[STEPS];
    float *slab; /* parameters after the steps */
    size_t n;
    double wall; /* seconds spent in lipt_train_step */
} run_out;

static void run_steps(const lipt_config *cfg, lipt_profile *prof, int recompute, run_out *o) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 4096, 7);
    ctx.profile = prof;
    ctx.recompute = recompute;
    tu_train_steps(cfg, &ctx, STEPS, o->loss, &o->slab, NULL, &o->n, &o->wall);
    lipt_ctx_free(&ctx);
}

static void small(lipt_config *cfg, const char *path) {
    lipt_error err = {0};
    lipt_config_default(cfg);
    ck_assert_msg(lipt_config_load(cfg, path, &err) == LIPT_OK, "%s: %s", path, err.msg);
    const char *shrink[] = {"d_model", "32", "n_heads", "2", "d_ff", "64", "n_layers", "2", "seq_len", "24", NULL};
    for (int i = 0; shrink[i]; i += 2)
        ck_assert_msg(lipt_config_set(cfg, shrink[i], shrink[i + 1], &err) == LIPT_OK, "%s: %s", shrink[i], err.msg);
    ck_assert_msg(lipt_config_validate(cfg, &err) == LIPT_OK, "%s: %s", path, err.msg);
}

START_TEST(test_profile_step) {
    static const char *const cfgs[] = {"models/ptb-dp.cfg", "models/ptb-contractive.cfg"};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++)
        for (int recompute = 0; recompute < 2; recompute++) {
            lipt_config cfg;
            small(&cfg, cfgs[ci]);
            run_out plain, timed;
            lipt_profile prof;
            memset(&prof, 0, sizeof prof);
            run_steps(&cfg, NULL, recompute, &plain);
            run_steps(&cfg, &prof, recompute, &timed);
            ck_assert_uint_eq(plain.n, timed.n);
            ck_assert_msg(memcmp(plain.loss, timed.loss, sizeof plain.loss) == 0 &&
                              memcmp(plain.slab, timed.slab, sizeof(float) * plain.n) == 0,
                          "%s recompute %d: the profile changed the run", cfgs[ci], recompute);
            ck_assert_int_eq(prof.steps, STEPS);
            ck_assert_int_eq(prof.in_backward, 0);
            double phases = 0, fwd = 0, bwd = 0;
            for (int k = 0; k < LIPT_PHASE_COUNT; k++) {
                ck_assert(prof.phase[k] >= 0);
                phases += prof.phase[k];
            }
            for (int op = 0; op < LIPT_OP_COUNT; op++) {
                ck_assert(prof.fwd[op] >= 0 && prof.bwd[op] >= 0 && prof.calls[op] >= 0);
                fwd += prof.fwd[op], bwd += prof.bwd[op];
            }
            ck_assert_msg(phases <= timed.wall + 1e-6 && phases >= 0.5 * timed.wall,
                          "%s: phases %.6f s of %.6f s in the steps", cfgs[ci], phases, timed.wall);
            ck_assert_msg(fwd <= prof.phase[LIPT_PHASE_FORWARD] + 1e-6 && fwd > 0, "%s: ops' forward %.6f s, phase "
                          "%.6f s", cfgs[ci], fwd, prof.phase[LIPT_PHASE_FORWARD]);
            ck_assert_msg(bwd <= prof.phase[LIPT_PHASE_BACKWARD] + 1e-6 && bwd > 0, "%s: ops' backward %.6f s, phase "
                          "%.6f s", cfgs[ci], bwd, prof.phase[LIPT_PHASE_BACKWARD]);
            /* the loss once a step; the embedding twice with dropout off (tokens, positions) or once */
            ck_assert_int_eq(prof.calls[LIPT_OP_CROSS_ENTROPY], STEPS);
            ck_assert(prof.bwd[LIPT_OP_CROSS_ENTROPY] > 0);
            ck_assert(prof.calls[LIPT_OP_EMBEDDING] >= STEPS && prof.calls[LIPT_OP_EMBEDDING] % STEPS == 0);
            /* the feed-forward's input projection, fused (linear + GELU or MaxMin) */
            const int ffn = cfg.ffn == LIPT_FFN_STANDARD ? LIPT_OP_LINEAR_GELU : LIPT_OP_LINEAR_MAXMIN;
            if (!recompute)
                ck_assert_msg(prof.calls[ffn] == (long)STEPS * cfg.n_layers && prof.bwd[ffn] > 0,
                              "%s: %s %ld calls", cfgs[ci], lipt_ops[ffn].name, prof.calls[ffn]);
            else /* recorded once inside the recompute segments (their rerun in the backward is not a forward) */
                ck_assert_msg(prof.calls[ffn] == (long)STEPS * cfg.n_layers && prof.calls[LIPT_OP_RECOMPUTE] > 0,
                              "%s recompute: %s %ld calls, recompute %ld", cfgs[ci], lipt_ops[ffn].name,
                              prof.calls[ffn], prof.calls[LIPT_OP_RECOMPUTE]);
            free(plain.slab);
            free(timed.slab);
        }
    printf("lipt_profile: the same bits with and without it; phases within the steps' wall time, ops within their "
           "phases (dp and invertible, with and without recompute)\n");
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("profile");
    TCase *tc = tcase_create("profile");
    tcase_add_test(tc, test_profile_step);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
