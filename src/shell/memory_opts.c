/* --memory store|recompute|invert and the reconstruction knobs, shared by lipt train and lipt bench (cli.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *const names[] = {"store", "recompute", "invert"};

const char *cli_memory_name(int mode) { return mode >= 0 && mode <= CLI_MEMORY_INVERT ? names[mode] : "?"; }

int cli_apply_memory(const cli_args *a, const char *cmd, int *mode, lipt_reversible *rev) {
    lipt_reversible_defaults(rev);
    const char *m = cli_str(a, "memory");
    const int given = cli_has(a, "memory");
    *mode = -1;
    for (int i = 0; i <= CLI_MEMORY_INVERT; i++)
        if (m && strcmp(m, names[i]) == 0) *mode = i;
    if (*mode < 0) return cli_error(cmd, "--memory must be store, recompute or invert, got '%s'", m ? m : "");
    if (cli_has(a, "recompute")) {
        if (given && *mode != CLI_MEMORY_RECOMPUTE)
            return cli_error(cmd, "--recompute means --memory recompute, but --memory %s was given too", m);
        *mode = CLI_MEMORY_RECOMPUTE;
    }
    double tol = 0;
    long accel = 0, every = 0;
    if (cli_float(a, "invert-tol", &tol) || cli_int(a, "invert-accel", &accel) || cli_int(a, "keep-every", &every))
        return 2;
    if (!cli_has(a, "invert-tol")) tol = LIPT_REV_TOL;
    if (!(tol > 0 && tol < 1)) return cli_error(cmd, "--invert-tol must be in (0, 1), got %g", tol);
    if (accel < 0 || accel > 16) return cli_error(cmd, "--invert-accel must be in [0, 16], got %ld", accel);
    if (every < 0 || every > 1000000) return cli_error(cmd, "--keep-every must be >= 0, got %ld", every);
    if (*mode != CLI_MEMORY_INVERT && (cli_has(a, "invert-tol") || cli_has(a, "invert-accel") || cli_has(a, "keep-every")))
        return cli_error(cmd, "--invert-tol, --invert-accel and --keep-every tune --memory invert (this run: --memory %s)",
                         names[*mode]);
    rev->tol = tol;
    if (cli_has(a, "invert-tol")) rev->tol_lowp = tol; /* the user's bound, whatever the precision */
    rev->accel = (int)accel;
    rev->keep_every = (int)every;
    return 0;
}

static void fmt_bytes(double b, char *buf, size_t n) {
    if (b >= 1e9) snprintf(buf, n, "%.1f GB", b / 1e9);
    else snprintf(buf, n, "%.1f MB", b / 1e6);
}

int cli_memory_refuse(const char *cmd, const lipt_train_memory *m, long B, long T, int mode) {
    char total[32], model[32], arena[32], room[32], fit[64] = "";
    fmt_bytes(m->need, total, sizeof total);
    fmt_bytes(m->model, model, sizeof model);
    fmt_bytes(m->arena, arena, sizeof arena);
    fmt_bytes(m->room, room, sizeof room);
    if (m->most >= 1) snprintf(fit, sizeof fit, " (at most %ld fits)", m->most);
    lipt_error err = {0};
    if (m->ran_out) { /* the probe step itself did not fit: no estimate, only that it is more than the room */
        lipt_fail(&err, LIPT_ERR_NOMEM, "this run needs more memory than this process may use (%s more: %s): a "
                  "training step at seq_len %ld ran out of it while lipt measured it at a small batch; lower seq_len, "
                  "d_model, d_ff or n_layers%s", room, m->room_what, T, mode != CLI_MEMORY_STORE ? "" :
                  ", or pass --memory recompute (or invert, for an invertible model)");
        return cli_fail(cmd, &err);
    }
    lipt_fail(&err, LIPT_ERR_NOMEM,
              "this run needs about %s of memory (the model with its gradients and Adam state %s, a training step at "
              "batch %ld x seq_len %ld: %s) but this process may use %s more: %s; lower --batch%s, or seq_len, d_model, "
              "d_ff or n_layers%s", total, model, B, T, m->arena > 0 ? arena : "(not measured: the model alone does not "
              "fit)", room, m->room_what, fit, mode != CLI_MEMORY_STORE ? "" : ", or pass --memory recompute (or "
              "invert, for an invertible model)");
    return cli_fail(cmd, &err);
}
