/* The training-grid machinery shared by lipt experiment depth and stability (SPEC §4.3, §4.4). Each cell is a
 * `lipt train` child process in its own run directory, so a cut-off grid resumes where it stopped: finished cells are
 * read back from the CSV, unfinished ones continue from their last.ckpt. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exp_grid.h"
#include "metrics_read.h" /* metrics_number: the number after a JSON key */

#define MAX_ARGS 80

/* Variant v's name into buf ("" when it has none): see exp_grid.h. */
static void variant_name(int v, char *buf, size_t n) {
    const lipt_attn_info *ai = lipt_attn_info_of((lipt_attn_kind)(v % LIPT_ATTN_KIND_COUNT));
    const int post = v >= LIPT_ATTN_KIND_COUNT;
    if (post && ai->contractive) buf[0] = 0; /* norm = post is refused for the invertible model */
    else snprintf(buf, n, "%s%s", ai->model ? ai->model : ai->name, post ? "-post" : "");
}

int exp_variant_index(const exp_grid *g, const char *name) {
    for (int i = 0; i < MAX_VARIANTS; i++)
        if (g->variant[i][0] && strcmp(name, g->variant[i]) == 0) return i;
    return -1;
}

int exp_variant_list(char *buf, size_t n) {
    size_t k = 0;
    int count = 0;
    buf[0] = 0;
    for (int v = 0; v < MAX_VARIANTS && k < n; v++) {
        char name[48];
        variant_name(v, name, sizeof name);
        if (!name[0]) continue;
        count++;
        const lipt_attn_info *ai = lipt_attn_info_of((lipt_attn_kind)(v % LIPT_ATTN_KIND_COUNT));
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", name);
        if (v < LIPT_ATTN_KIND_COUNT && ai->model && k < n) k += (size_t)snprintf(buf + k, n - k, " (%s)", ai->name);
    }
    return count;
}

/* "dp,l2-tied" -> indices into g->variant; -1 on an unknown name. */
static int parse_variants(const exp_grid *g, const char *s, int *out, char *bad, size_t badn) {
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        const int k = exp_variant_index(g, tok);
        if (k < 0 || n >= MAX_VARIANTS) {
            snprintf(bad, badn, "%s", tok);
            return -1;
        }
        out[n++] = k;
    }
    return n;
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Runs this binary with argv (argv[0] ignored) as a child: stdout captured into out (cap bytes, NUL-terminated), stderr
 * appended to log_path. Returns the exit status (128 + signal when killed), or -1 when it could not start. */
static int run_self(char **argv, const char *log_path, char *out, size_t cap) {
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    int fd[2];
    if (pipe(fd) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        lipt_signals_unblock(); /* this thread's mask (main's: asynchronous signals blocked) survives exec */
        int lg = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK, 0666);
        if (lg >= 0) dup2(lg, 2);
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        argv[0] = exe;
        execv(exe, argv);
        _exit(127);
    }
    close(fd[1]);
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd[0], out + len, cap - 1 - len > 0 ? cap - 1 - len : 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0 || len >= cap - 1) {
                /* drain what does not fit */
                char sink[512];
                while (read(fd[0], sink, sizeof sink) > 0) {}
            }
            break;
        }
        len += (size_t)r;
        if (len >= cap - 1) {
            char sink[512];
            while (read(fd[0], sink, sizeof sink) > 0) {}
            break;
        }
    }
    out[len] = 0;
    close(fd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

/* Does the file contain s? */
static int file_contains(const char *path, const char *s) {
    FILE *f = lipt_open_regular(path, NULL, NULL); /* regular files only: never waits on a FIFO */
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, s) != NULL;
    fclose(f);
    return found;
}

/* argv builder */
typedef struct {
    char *v[MAX_ARGS + 1];
    char store[MAX_ARGS][256];
    int n;
} args_b;
static void arg(args_b *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(args_b *a, const char *fmt, ...) {
    if (a->n >= MAX_ARGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->store[a->n], sizeof a->store[0], fmt, ap);
    va_end(ap);
    a->v[a->n] = a->store[a->n];
    a->n++;
    a->v[a->n] = NULL;
}

/* Seconds of training recorded by earlier invocations of a cell (a resumed cell adds up its parts). */
static double cell_seconds(const char *dir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/experiment_seconds.txt", dir);
    FILE *f = lipt_open_regular(p, NULL, NULL);
    double s = 0, v;
    if (!f) return 0;
    while (fscanf(f, "%lf", &v) == 1) s += v;
    fclose(f);
    return s;
}
static void cell_add_seconds(const char *dir, double s) {
    char p[1200];
    snprintf(p, sizeof p, "%s/experiment_seconds.txt", dir);
    FILE *f = lipt_open_append(p, NULL); /* never through a planted symlink */
    if (f) {
        fprintf(f, "%.3f\n", s);
        fclose(f);
    }
}

/* Every setting that changes a cell's result, as one token: it names the cell's run folder and is stored with its
 * CSV row, so results of other settings are never read back as this grid's. */
void exp_grid_key(const exp_grid *g, char *buf, size_t n) {
    const int w = snprintf(buf, n, "d%ld-h%ld-ff%ld-t%ld-b%ld-n%ld-lr%g-%s-w%ld-clip%g-seed%ld", g->d_model, g->heads,
                           g->d_ff, g->seq_len, g->batch, g->steps, g->lr, g->schedule, g->warmup, g->clip, g->seed);
    /* beta2 joined the key later: the default leaves earlier keys (and their results) valid */
    if (g->beta2 != 0.98 && w > 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, "-beta2-%g", g->beta2);
}

/* Trains one cell (fresh or resumed). Returns 0 done, 1 diverged, 2 interrupted, 3 failed (message printed). */
static int train_cell(const exp_grid *g, const char *variant, int depth, const char *dir, int log_every,
                      double *seconds, char *why, size_t whyn) {
    char ckpt[1200], log_path[1200], out[8192];
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
    snprintf(log_path, sizeof log_path, "%s/experiment.log", dir);
    args_b a = {0};
    arg(&a, "lipt");
    arg(&a, "train");
    if (file_exists(ckpt)) {
        arg(&a, "--out"); arg(&a, "%s", dir);
        arg(&a, "--resume");
        arg(&a, "--steps"); arg(&a, "%ld", g->steps);
    } else {
        arg(&a, "--config"); arg(&a, "%s/ptb-%s.cfg", g->models, variant);
        arg(&a, "--out"); arg(&a, "%s", dir);
        arg(&a, "--force"); /* a cell cut off before its first checkpoint starts over */
        arg(&a, "--data"); arg(&a, "%s", g->data);
        arg(&a, "--steps"); arg(&a, "%ld", g->steps);
        arg(&a, "--batch"); arg(&a, "%ld", g->batch);
        arg(&a, "--lr"); arg(&a, "%g", g->lr);
        arg(&a, "--schedule"); arg(&a, "%s", g->schedule);
        arg(&a, "--warmup"); arg(&a, "%ld", g->warmup);
        arg(&a, "--clip"); arg(&a, "%g", g->clip);
        arg(&a, "--beta2"); arg(&a, "%g", g->beta2);
        arg(&a, "--seed"); arg(&a, "%ld", g->seed);
        arg(&a, "--eval-every"); arg(&a, "0");
        arg(&a, "--final-eval"); arg(&a, "none");
        arg(&a, "--save-every"); arg(&a, "%ld", g->save_every);
        arg(&a, "--log-every"); arg(&a, "%d", log_every);
        arg(&a, "--n_layers"); arg(&a, "%d", depth);
        arg(&a, "--d_model"); arg(&a, "%ld", g->d_model);
        arg(&a, "--n_heads"); arg(&a, "%ld", g->heads);
        arg(&a, "--d_ff"); arg(&a, "%ld", g->d_ff);
        arg(&a, "--seq_len"); arg(&a, "%ld", g->seq_len);
        arg(&a, "--dropout"); arg(&a, "0");
    }
    arg(&a, "--threads"); arg(&a, "%ld", g->threads);
    arg(&a, "--json");
    arg(&a, "--quiet");
    double t0 = cli_now();
    int rc = run_self(a.v, log_path, out, sizeof out);
    double dt = cli_now() - t0;
    cell_add_seconds(dir, dt);
    *seconds = cell_seconds(dir);
    if (rc == 0) return 0;
    if (rc == 130 || rc == 143 || rc == 128 + SIGINT || rc == 128 + SIGTERM) return 2;
    if (rc == 1 && file_contains(log_path, "training diverged")) {
        snprintf(why, whyn, "non-finite loss or gradient");
        return 1;
    }
    fprintf(stderr, "lipt experiment: the training run in %s failed (exit %d); see %s\n", cli_shown(dir), rc,
            cli_shown(log_path));
    return 3;
}

/* The shared part of a grid cell: skipped when the CSV has it already, else trained in RUNS/<prefix><variant>-L<depth>.
 * Returns -1 skipped, 0 trained, 1 diverged (why says how); or 2 when the grid must stop, with *rc its exit status. */
int exp_grid_cell(const exp_grid *g, const char *C, int found, int cell, int total, int v, int depth, const char *prefix,
              int log_every, const char *csv, char *dir, size_t dirn, double *secs, char *why, size_t whyn, int *rc) {
    if (found) {
        fprintf(stderr, "[%d/%d] %s, %d layers: in %s already, skipped\n", cell, total, g->variant[v], depth, cli_shown(csv));
        return -1;
    }
    lipt_error err = {0};
    char key[256];
    exp_grid_key(g, key, sizeof key);
    snprintf(dir, dirn, "%s/%s%s-L%d-%s", g->runs, prefix, g->variant[v], depth, key);
    if (run_mkdir(dir, &err) != LIPT_OK) {
        *rc = cli_fail(C, &err);
        return 2;
    }
    fprintf(stderr, "[%d/%d] %s, %d layers: training %ld steps at lr %g (log %s/experiment.log) ...\n", cell, total,
            g->variant[v], depth, g->steps, g->lr, dir);
    const int tr = train_cell(g, g->variant[v], depth, dir, log_every, secs, why, whyn);
    if (tr == 2) {
        *rc = 130;
        fprintf(stderr, "lipt experiment: interrupted; run the same command again to continue\n");
        return 2;
    }
    if (tr == 3) {
        *rc = 1;
        return 2;
    }
    return tr;
}

/* Evaluates a checkpoint on a split; fills bpc, nll, symbols. */
int exp_eval_cell(const exp_grid *g, const char *dir, const char *split, long max_symbols, double *bpc, double *nll,
              long *symbols, long *params) {
    char ckpt[1200], log_path[1200], out[8192];
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
    snprintf(log_path, sizeof log_path, "%s/experiment.log", dir);
    args_b a = {0};
    arg(&a, "lipt");
    arg(&a, "eval");
    arg(&a, "--ckpt"); arg(&a, "%s", ckpt);
    arg(&a, "--data"); arg(&a, "%s", g->data);
    arg(&a, "--split"); arg(&a, "%s", split);
    if (max_symbols > 0) { arg(&a, "--max-symbols"); arg(&a, "%ld", max_symbols); }
    arg(&a, "--threads"); arg(&a, "%ld", g->threads);
    arg(&a, "--json");
    arg(&a, "--quiet");
    int rc = run_self(a.v, log_path, out, sizeof out);
    if (rc != 0) {
        fprintf(stderr, "lipt experiment: evaluating %s on %s failed (exit %d); see %s\n", cli_shown(ckpt), split, rc, cli_shown(log_path));
        return rc == 130 || rc == 143 ? 2 : 3;
    }
    *bpc = metrics_number(out, "bpc");
    *nll = metrics_number(out, "nll");
    *symbols = (long)metrics_number(out, "symbols");
    if (params) {
        double pv = metrics_number(out, "parameters");
        *params = isfinite(pv) ? (long)pv : 0;
    }
    return 0;
}

/* The options both grids take, after each grid's own (exp_grid_opts). */
static const cli_opt grid_common[] = {
    {"data", CLI_STRING, "NAME|PATH", "corpus", "ptb"},
    {"models", CLI_STRING, "DIR", "folder of the ptb-<variant>.cfg configs", "models"},
    {"d-model", CLI_INT, "D", "width of every model", "128"},
    {"heads", CLI_INT, "H", "attention heads", "4"},
    {"d-ff", CLI_INT, "F", "feed-forward width", "512"},
    {"seq-len", CLI_INT, "T", "context length", "64"},
    {"batch", CLI_INT, "B", "sequences per step", "16"},
    {"seed", CLI_INT, "S", "data order seed (the same for every cell)", "0"},
    {"threads", CLI_INT, "N", "threads of each training run", "2"},
    {"beta2", CLI_FLOAT, "B2", "Adam beta2 of every cell", "0.98"},
    {"json", CLI_FLAG, NULL, "print a JSON summary on stdout", NULL},
};

/* The common options, plus --out, --runs, --steps and --lr (each grid has its own defaults for those), into g. */
static int exp_grid_parse(cli_args *a, exp_grid *g) {
    g->data = cli_str(a, "data");
    g->models = cli_str(a, "models");
    g->out = cli_str(a, "out");
    g->runs = cli_str(a, "runs");
    if (cli_int(a, "d-model", &g->d_model) || cli_int(a, "heads", &g->heads) || cli_int(a, "d-ff", &g->d_ff) ||
        cli_int(a, "seq-len", &g->seq_len) || cli_int(a, "batch", &g->batch) || cli_int(a, "seed", &g->seed) ||
        cli_int(a, "threads", &g->threads) || cli_int(a, "steps", &g->steps) || cli_float(a, "lr", &g->lr) ||
        cli_float(a, "beta2", &g->beta2))
        return 2;
    for (int v = 0; v < MAX_VARIANTS; v++) variant_name(v, g->variant[v], sizeof g->variant[v]);
    if (!(g->beta2 >= 0 && g->beta2 < 1)) return cli_error("experiment", "--beta2 must be in [0, 1), got %g", g->beta2);
    return 0;
}

#define N_COMMON ((int)(sizeof grid_common / sizeof grid_common[0]))

/* own, then the options common to both grids, into dst (room for n_own + 11). Returns the count. */
int exp_grid_opts(cli_opt *dst, const cli_opt *own, int n_own, char *vhelp, size_t vn) {
    int n = 0;
    for (int i = 0; i < n_own; i++) {
        dst[n] = own[i];
        if (strcmp(own[i].name, "variants") == 0) { /* generated: a new attention kind is listed without an edit here */
            char list[512];
            exp_variant_list(list, sizeof list);
            snprintf(vhelp, vn, "%s%s", own[i].help, list);
            dst[n].help = vhelp;
        }
        n++;
    }
    for (int i = 0; i < N_COMMON; i++) dst[n++] = grid_common[i];
    return n;
}

/* --variants and --depths of a grid, checked; the output and run folders created. 0, or the exit status. */
static int exp_grid_select(cli_args *a, const char *C, const exp_grid *g, int *vars, int *nv, double *dl, int *nd) {
    char bad[64], list[512];
    lipt_error err = {0};
    *nv = parse_variants(g, cli_str(a, "variants"), vars, bad, sizeof bad);
    *nd = exp_parse_list(cli_str(a, "depths"), dl, MAX_DEPTHS);
    exp_variant_list(list, sizeof list);
    if (*nv < 1) return cli_error(C, "--variants: unknown variant '%s' (%s)", bad, list);
    if (*nd < 1) return cli_error(C, "--depths must be a comma list of layer counts, got '%s'", cli_str(a, "depths"));
    if (g->steps < 1 || g->batch < 1 || g->threads < 1) return cli_error(C, "--steps, --batch and --threads must be >= 1");
    /* checked here, in the grid's own flags: the training runs would reject them in their logs under config key names
     * (d_model, n_heads) the user never typed, after creating a run folder for each cell */
    if (g->d_model < 1 || g->d_model > 65536 || g->heads < 1 || g->heads > 4096 || g->d_ff < 1 || g->d_ff > (1 << 18) ||
        g->seq_len < 1 || g->seq_len > (1 << 20))
        return cli_error(C, "--d-model must be in [1, 65536], --heads in [1, 4096], --d-ff in [1, 262144], "
                            "--seq-len in [1, 1048576]");
    if (g->d_model % g->heads) return cli_error(C, "--heads %ld must divide --d-model %ld", g->heads, g->d_model);
    for (int i = 0; i < *nd; i++)
        if (dl[i] < 1 || dl[i] > 64 || dl[i] != floor(dl[i])) return cli_error(C, "--depths: %g is not a layer count in [1, 64]", dl[i]);
    if (run_mkdir(g->out, &err) != LIPT_OK || run_mkdir(g->runs, &err) != LIPT_OK) return cli_fail(C, &err);
    return 0;
}

int exp_grid_setup(cli_args *a, const char *C, exp_grid *g, exp_grid_sel *s, const exp_grid_csv *csv, void *rows, int *n) {
    *n = 0;
    int rc = exp_grid_parse(a, g);
    if (!rc) rc = exp_grid_select(a, C, g, s->vars, &s->nv, s->dl, &s->nd);
    if (rc) return rc;
    exp_grid_key(g, g->key, sizeof g->key);
    snprintf(g->csv, sizeof g->csv, "%s/%s.csv", g->out, csv->name);
    const exp_csv spec = {g->csv, csv->header, csv->ncols, g->key, csv->row_size, csv->take, g};
    *n = exp_read_csv(&spec, C, rows, MAX_CELLS);
    return *n < 0 ? 1 : 0;
}
