/* lipt train: the command (its parts in train_options.c, train_setup.c, train_resume.c, train_record.c; the loop and
 * the final report in train_loop.c: AdamW, schedules, clipping, periodic evaluation, best and last checkpoints,
 * SIGINT/SIGTERM/SIGHUP save, divergence stop, JSONL metrics). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lipt/checkpoint.h"
#include "run.h"
#include "train_run.h"
#include "train_setup.h"

static void trainer_free(trainer *t) {
    if (t->log) fclose(t->log);
    free(t->gin);
    free(t->gtg);
    if (t->lock_fd >= 0) close(t->lock_fd); /* releases the lock */
    if (t->ctx_ok) lipt_ctx_free(&t->ctx);
    if (t->muon_ok) lipt_muon_free(&t->muon);
    if (t->model_ok) lipt_model_free(&t->model);
    if (t->ds_ok) lipt_dataset_free(&t->ds);
    free(t->stored_opts);
    if (t->init_open) lipt_ckpt_close(&t->init_ck);
    free(t->changes);
}

static int train_main(cli_args *ap, lipt_dist *dist, int *agreed, int argc, char **argv) {
    const char *C = "train";
    int n_opts;
    const cli_opt *opts = train_options(&n_opts);
    int pr = cli_parse_aliased(ap, C, "Train a character-level Transformer (any attention variant) on a corpus.\nnanoGPT's option names "
                               "(--max_iters, --batch_size, --block_size, --n_layer, --n_head, --n_embd, --learning_rate,\n"
                               "--out_dir, --eval_interval, --warmup_iters, --grad_clip, --init_from, --log_interval) are "
                               "accepted, each with a note\nof lipt's name.", opts,
                               n_opts, train_nanogpt_names(), argc, argv, 1, 0);
    if (pr) return pr > 0 ? 0 : 2;
    if (dist->rank == 0) cli_print_notes(ap);
    lipt_error terr = {0}; /* the watchdog's timeout (src/dist/dist.c) */
    if (cli_has(ap, "mpi-timeout") && lipt_dist_set_timeout(dist, cli_str(ap, "mpi-timeout"), "--mpi-timeout", &terr))
        return cli_fail(C, &terr);
    trainer t;
    memset(&t, 0, sizeof t);
    t.dist = dist;
    t.lead = dist->rank == 0;
    t.K = dist->size;
    t.lock_fd = -1;
    t.agreed = agreed;
    char out_buf[1100];
    int rc = train_default_out(ap, out_buf, sizeof out_buf, &t.out);
    if (rc) return rc;
    snprintf(t.last_path, sizeof t.last_path, "%s/last.ckpt", t.out);
    snprintf(t.best_path, sizeof t.best_path, "%s/best.ckpt", t.out);
    snprintf(t.metrics_path, sizeof t.metrics_path, "%s/metrics.jsonl", t.out);
    rc = train_setup_threads(ap, dist);
    if (rc) return rc;
    int resume = cli_has(ap, "resume"); /* 1: resuming with ck open; 2: ck closed after use; 3: ck failed to open */
    const char *resume_path = cli_has(ap, "ckpt") ? cli_str(ap, "ckpt") : t.last_path;
    if (cli_has(ap, "ckpt") && !resume) return cli_error(C, "--ckpt is for --resume (use lipt eval to evaluate a checkpoint)");
    if (cli_has(ap, "init-from") && resume)
        return cli_error(C, "--init-from starts a new run from a checkpoint's weights; --resume continues a run: choose one");
    lipt_ckpt ck;
    memset(&ck, 0, sizeof ck);
    run_extra rx;
    memset(&rx, 0, sizeof rx);
    train_settings s;
    memset(&s, 0, sizeof s);
    s.quiet = cli_has(ap, "quiet") || !t.lead;
    const int batch_given = cli_has(ap, "batch"); /* before the checkpoint's stored options fill in the rest */
    rc = train_merge_config(ap, &t, &resume, resume_path, &ck, &rx);
    if (!rc) rc = train_apply_precision(ap, &t, resume, resume_path, s.quiet);
    if (!rc) rc = train_parse_settings(ap, &t, resume, &rx, resume_path, batch_given, &s);
    if (!rc) rc = train_setup_model(&t, &s, cli_str(ap, "data"), &resume, &ck, &rx, resume_path, cli_has(ap, "force"),
                                   cli_origin(ap, "data"));
    if (!rc && t.resumed) rc = train_resume_changes(ap, &t);
    if (!rc) rc = train_setup_files(&t, cli_has(ap, "force"), s.quiet);
    if (!rc && !cli_has(ap, "out") && !s.quiet) fprintf(stderr, "run folder: %s (--out to choose one)\n", cli_shown(t.out));
    if (!rc) rc = train_setup_batches(&t, &s);
    if (!rc) {
        train_install_signals();
        rc = train_finish(&t, &s, cli_has(ap, "json"), train_loop(&t, &s));
    }
    if (resume == 1) lipt_ckpt_close(&ck);
    trainer_free(&t);
    return rc;
}

int cmd_train(int argc, char **argv) {
    lipt_dist dist;
    lipt_error err = {0};
    if (lipt_dist_init(&dist, &argc, &argv, &err) != LIPT_OK) return cli_fail("train", &err);
    cli_args a;
    int agreed = 0; /* every rank ends the same way (done, signal, divergence): a normal exit */
    int rc = train_main(&a, &dist, &agreed, argc, argv);
    cli_free(&a);
    if (rc != 0 && !agreed && dist.size > 1) {
        /* this rank failed alone (a file it could not write, a flag it rejected): the others would wait forever */
        fflush(stderr);
        lipt_dist_abort(&dist, rc);
    }
    lipt_dist_finalize(&dist);
    return rc;
}
