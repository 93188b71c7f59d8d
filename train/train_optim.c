/* lipt train's optimizer: --optimizer adamw|muon and --muon-lr, checked against a resumed run's, Muon's set-up and its
 * learning rate at a step. */
#include <string.h>

#include "run.h"
#include "train_run.h"

int train_optim_settings(cli_args *ap, train_settings *s, int resume, const char *stored_opts,
                         const char *resume_path) {
    const char *C = "train", *name = cli_str(ap, "optimizer");
    if (strcmp(name, "adamw") == 0) s->muon = 0;
    else if (strcmp(name, "muon") == 0) s->muon = 1;
    else return cli_error(C, "--optimizer must be adamw or muon, got '%s'%s", name, cli_origin(ap, "optimizer"));
    /* Muon keeps its momenta where AdamW keeps its first moments (and no second moments): a checkpoint's optimizer
     * state means something only to the optimizer that wrote it. Checkpoints from before the option are AdamW's. */
    char was[32] = "adamw";
    if (resume && stored_opts) run_opt_get(stored_opts, "optimizer", was, sizeof was);
    if (resume && strcmp(was, name) != 0)
        return cli_error(C, "%s was trained with --optimizer %s and its optimizer state is that optimizer's: it cannot "
                         "continue under --optimizer %s (drop the flag, or start a new run from its weights: lipt "
                         "train --init-from %s --optimizer %s)", resume_path, was, name, resume_path, name);
    s->muon_lr = s->lr; /* --lr's own range is checked with it: only a --muon-lr given is checked here */
    if (!cli_has(ap, "muon-lr")) return 0;
    if (cli_float(ap, "muon-lr", &s->muon_lr)) return 2;
    if (!(s->muon_lr >= 0) || s->muon_lr > 1e6)
        return cli_error(C, "--muon-lr must be in [0, 1e6], got %g%s", s->muon_lr, cli_origin(ap, "muon-lr"));
    return 0;
}

int train_optim_init(trainer *t, const train_settings *s) {
    if (!s->muon) return 0;
    lipt_error err = {0};
    lipt_muon_config mc = lipt_muon_defaults();
    mc.weight_decay = s->wd; /* --weight-decay, decoupled as AdamW's (Muon's scale matches AdamW's update RMS) */
    if (lipt_muon_init(&t->muon, &mc, &t->model.params, &err) != LIPT_OK) return cli_fail("train", &err);
    t->muon_ok = 1;
    return 0;
}

double train_muon_lr_at(const train_settings *s, int64_t step) {
    /* the schedule's shape at peak 1: Muon's rate follows AdamW's as a ratio, --muon-lr at the peak */
    lipt_lr_schedule unit = s->sched;
    unit.lr = 1.0;
    unit.min_lr = s->sched.lr > 0 ? s->sched.min_lr / s->sched.lr : 0.0;
    return s->muon_lr * lipt_lr_at(&unit, step);
}
