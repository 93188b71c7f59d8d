/* lipt experiment depth / stability: grids of PTB training runs (SPEC §4.3 expressiveness by depth, §4.4 stability
 * without warmup). Each cell is a `lipt train` child process in its own run directory, so a cut-off grid resumes
 * where it stopped: finished cells are read back from the CSV, unfinished ones continue from their last.ckpt. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include "cli.h"
#include "exp_util.h"
#include "svg.h"

#define MAX_VARIANTS 7
#define MAX_DEPTHS 24
#define MAX_CELLS (MAX_VARIANTS * MAX_DEPTHS)
#define MAX_ARGS 80

/* models/ptb-<name>.cfg: "contractive" is the invertible model (clipped-dp), "contractive-l2" the paper's; the
 * "-post" ones are post-LN blocks (norm = post) */
static const char *const variant_names[MAX_VARIANTS] = {"dp",          "l2",      "l2-tied",     "contractive",
                                                        "contractive-l2", "dp-post", "l2-tied-post"};
#define VARIANT_LIST "dp, l2, l2-tied, contractive, contractive-l2, dp-post, l2-tied-post"

/* Index of a variant name in variant_names, -1 when unknown. */
static int variant_index(const char *name) {
    for (int i = 0; i < MAX_VARIANTS; i++)
        if (strcmp(name, variant_names[i]) == 0) return i;
    return -1;
}

/* "dp,l2-tied" -> indices into variant_names; -1 on an unknown name. */
static int parse_variants(const char *s, int *out, char *bad, size_t badn) {
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        const int k = variant_index(tok);
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
        int lg = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0666);
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

/* The number after "key": in a flat JSON object; NAN when absent or null. */
static double json_get(const char *js, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(js, pat);
    if (!p) return NAN;
    p += strlen(pat);
    if (strncmp(p, "null", 4) == 0) return NAN;
    char *end = NULL;
    double v = strtod(p, &end);
    return end == p ? NAN : v;
}

/* Does the file contain s? */
static int file_contains(const char *path, const char *s) {
    FILE *f = fopen(path, "r");
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
    FILE *f = fopen(p, "r");
    double s = 0, v;
    if (!f) return 0;
    while (fscanf(f, "%lf", &v) == 1) s += v;
    fclose(f);
    return s;
}
static void cell_add_seconds(const char *dir, double s) {
    char p[1200];
    snprintf(p, sizeof p, "%s/experiment_seconds.txt", dir);
    FILE *f = fopen(p, "a");
    if (f) {
        fprintf(f, "%.3f\n", s);
        fclose(f);
    }
}

/* Common model/recipe options of both grids. */
typedef struct {
    const char *data, *models, *runs, *out;
    long d_model, heads, d_ff, seq_len, steps, batch, warmup, seed, threads, save_every;
    double lr, clip;
    const char *schedule;
} grid_opts;

/* Every setting that changes a cell's result, as one token: it names the cell's run folder and is stored with its
 * CSV row, so results of other settings are never read back as this grid's. */
static void grid_key(const grid_opts *g, char *buf, size_t n) {
    snprintf(buf, n, "d%ld-h%ld-ff%ld-t%ld-b%ld-n%ld-lr%g-%s-w%ld-clip%g-seed%ld", g->d_model, g->heads, g->d_ff,
             g->seq_len, g->batch, g->steps, g->lr, g->schedule, g->warmup, g->clip, g->seed);
}

/* Trains one cell (fresh or resumed). Returns 0 done, 1 diverged, 2 interrupted, 3 failed (message printed). */
static int train_cell(const grid_opts *g, const char *variant, int depth, const char *dir, int log_every,
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
        arg(&a, "--data"); arg(&a, "%s", g->data);
        arg(&a, "--steps"); arg(&a, "%ld", g->steps);
        arg(&a, "--batch"); arg(&a, "%ld", g->batch);
        arg(&a, "--lr"); arg(&a, "%g", g->lr);
        arg(&a, "--schedule"); arg(&a, "%s", g->schedule);
        arg(&a, "--warmup"); arg(&a, "%ld", g->warmup);
        arg(&a, "--clip"); arg(&a, "%g", g->clip);
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
    fprintf(stderr, "lipt experiment: the training run in %s failed (exit %d); see %s\n", dir, rc, log_path);
    return 3;
}

/* The shared part of a grid cell: skipped when the CSV has it already, else trained in RUNS/<prefix><variant>-L<depth>.
 * Returns -1 skipped, 0 trained, 1 diverged (why says how); or 2 when the grid must stop, with *rc its exit status. */
static int grid_cell(const grid_opts *g, const char *C, int found, int cell, int total, int v, int depth,
                     const char *prefix, int log_every, const char *csv, char *dir, size_t dirn, double *secs, char *why,
                     size_t whyn, int *rc) {
    if (found) {
        fprintf(stderr, "[%d/%d] %s, %d layers: in %s already, skipped\n", cell, total, variant_names[v], depth, csv);
        return -1;
    }
    lipt_error err = {0};
    char key[256];
    grid_key(g, key, sizeof key);
    snprintf(dir, dirn, "%s/%s%s-L%d-%s", g->runs, prefix, variant_names[v], depth, key);
    if (run_mkdir(dir, &err) != LIPT_OK) {
        *rc = cli_fail(C, &err);
        return 2;
    }
    fprintf(stderr, "[%d/%d] %s, %d layers: training %ld steps at lr %g (log %s/experiment.log) ...\n", cell, total,
            variant_names[v], depth, g->steps, g->lr, dir);
    const int tr = train_cell(g, variant_names[v], depth, dir, log_every, secs, why, whyn);
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

/* ------------------------------------------------------------------------------------------- depth */

typedef struct {
    int variant, depth;
    long params, steps;
    double train_s, valid_bpc, test_bpc, valid_nll, test_nll;
    long valid_symbols, test_symbols;
    int diverged;
} depth_row;

#define DEPTH_HEADER                                                                                                   \
    "variant,depth,params,steps,train_seconds,valid_bpc,valid_symbols,valid_nll,test_bpc,test_symbols,test_nll,"      \
    "diverged,settings"

static int csv_split(char *line, char **f, int cap);

/* Rows of OUT/depth.csv; -1 (message printed) when it holds rows of other settings or an older format. */
static int read_depth_csv(const char *path, const char *key, depth_row *rows, int cap, const char *C) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[2048];
    int n = 0;
    if (!fgets(line, sizeof line, f)) { fclose(f); return 0; }
    line[strcspn(line, "\r\n")] = 0;
    if (strcmp(line, DEPTH_HEADER) != 0) {
        fclose(f);
        cli_error(C, "%s was written by an older lipt or another tool (its header is not the current one): move it "
                     "away or choose another --out", path);
        return -1;
    }
    while (n < cap && fgets(line, sizeof line, f)) {
        char *x[16];
        if (csv_split(line, x, 16) != 13) continue;
        if (strcmp(x[12], key) != 0) {
            fclose(f);
            cli_error(C, "%s holds results of other settings (%s, not %s): choose another --out for these", path, x[12],
                      key);
            return -1;
        }
        depth_row r;
        memset(&r, 0, sizeof r);
        r.variant = variant_index(x[0]);
        r.depth = atoi(x[1]);
        r.params = atol(x[2]);
        r.steps = atol(x[3]);
        r.train_s = strtod(x[4], NULL);
        r.valid_bpc = strtod(x[5], NULL);
        r.valid_symbols = atol(x[6]);
        r.valid_nll = strtod(x[7], NULL);
        r.test_bpc = strtod(x[8], NULL);
        r.test_symbols = atol(x[9]);
        r.test_nll = strtod(x[10], NULL);
        r.diverged = atoi(x[11]);
        if (r.variant >= 0) rows[n++] = r;
    }
    fclose(f);
    return n;
}

static int cmp_depth_row(const void *p, const void *q) {
    const depth_row *a = p, *b = q;
    if (a->variant != b->variant) return a->variant - b->variant;
    return a->depth - b->depth;
}

static lipt_status write_depth_outputs(const char *outdir, depth_row *rows, int n, const grid_opts *g, lipt_error *err) {
    qsort(rows, (size_t)n, sizeof *rows, cmp_depth_row);
    char path[1100];
    snprintf(path, sizeof path, "%s/depth.csv", outdir);
    out_file o;
    lipt_status st = open_file(&o, path, err);
    if (st != LIPT_OK) return st;
    char key[256];
    grid_key(g, key, sizeof key);
    fprintf(o.f, DEPTH_HEADER "\n");
    for (int i = 0; i < n; i++) {
        const depth_row *r = &rows[i];
        fprintf(o.f, "%s,%d,%ld,%ld,%.1f,%.5f,%ld,%.5f,%.5f,%ld,%.5f,%d,%s\n", variant_names[r->variant], r->depth,
                r->params, r->steps, r->train_s, r->valid_bpc, r->valid_symbols, r->valid_nll, r->test_bpc,
                r->test_symbols, r->test_nll, r->diverged, key);
    }
    if ((st = commit_file(&o, err)) != LIPT_OK) return st;
    /* BPC against depth: validation solid, test dashed, one colour per variant */
    double xs[MAX_VARIANTS][MAX_DEPTHS], yv[MAX_VARIANTS][MAX_DEPTHS], yt[MAX_VARIANTS][MAX_DEPTHS];
    int cnt[MAX_VARIANTS] = {0};
    for (int i = 0; i < n; i++) {
        int v = rows[i].variant, k = cnt[v];
        if (k >= MAX_DEPTHS) continue;
        xs[v][k] = rows[i].depth;
        yv[v][k] = rows[i].diverged ? NAN : rows[i].valid_bpc;
        yt[v][k] = rows[i].diverged ? NAN : rows[i].test_bpc;
        cnt[v]++;
    }
    svg_series s[2 * MAX_VARIANTS];
    char lab[2 * MAX_VARIANTS][64];
    int ns = 0;
    static const svg_marker marks[MAX_VARIANTS] = {SVG_MARK_CIRCLE, SVG_MARK_SQUARE, SVG_MARK_TRIANGLE, SVG_MARK_DIAMOND};
    for (int v = 0; v < MAX_VARIANTS; v++) {
        if (!cnt[v]) continue;
        snprintf(lab[ns], sizeof lab[0], "%s (validation)", variant_names[v]);
        s[ns] = (svg_series){lab[ns], xs[v], yv[v], cnt[v], svg_color(v), marks[v], 1, SVG_SOLID, 0};
        ns++;
        snprintf(lab[ns], sizeof lab[0], "%s (test)", variant_names[v]);
        s[ns] = (svg_series){lab[ns], xs[v], yt[v], cnt[v], svg_color(v), marks[v], 1, SVG_DASHED, 1.2};
        ns++;
    }
    char title[256];
    snprintf(title, sizeof title, "PTB characters: BPC vs depth (d_model %ld, %ld heads, seq %ld, %ld steps x batch %ld)",
             g->d_model, g->heads, g->seq_len, g->steps, g->batch);
    svg_plot p = svg_plot_defaults();
    p.title = title;
    p.xlabel = "layers";
    p.ylabel = "bits per character";
    p.width = 960;
    snprintf(path, sizeof path, "%s/depth.svg", outdir);
    return svg_write_file(path, &p, s, ns, err);
}

/* Evaluates a checkpoint on a split; fills bpc, nll, symbols. */
static int eval_cell(const grid_opts *g, const char *dir, const char *split, long max_symbols, double *bpc, double *nll,
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
        fprintf(stderr, "lipt experiment: evaluating %s on %s failed (exit %d); see %s\n", ckpt, split, rc, log_path);
        return rc == 130 || rc == 143 ? 2 : 3;
    }
    *bpc = json_get(out, "bpc");
    *nll = json_get(out, "nll");
    *symbols = (long)json_get(out, "symbols");
    if (params) {
        double pv = json_get(out, "parameters");
        *params = isfinite(pv) ? (long)pv : 0;
    }
    return 0;
}

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
    {"json", CLI_FLAG, NULL, "print a JSON summary on stdout", NULL},
};

static int parse_grid_common(cli_args *a, grid_opts *g) {
    g->data = cli_str(a, "data");
    g->models = cli_str(a, "models");
    g->out = cli_str(a, "out");
    g->runs = cli_str(a, "runs");
    if (cli_int(a, "d-model", &g->d_model) || cli_int(a, "heads", &g->heads) || cli_int(a, "d-ff", &g->d_ff) ||
        cli_int(a, "seq-len", &g->seq_len) || cli_int(a, "batch", &g->batch) || cli_int(a, "seed", &g->seed) ||
        cli_int(a, "threads", &g->threads) || cli_int(a, "steps", &g->steps) || cli_float(a, "lr", &g->lr))
        return 2;
    return 0;
}

#define N_COMMON ((int)(sizeof grid_common / sizeof grid_common[0]))

static int build_opts(cli_opt *dst, const cli_opt *own, int n_own) {
    int n = 0;
    for (int i = 0; i < n_own; i++) dst[n++] = own[i];
    for (int i = 0; i < N_COMMON; i++) dst[n++] = grid_common[i];
    return n;
}

/* --variants and --depths of a grid, checked; the output and run folders created. 0, or the exit status. */
static int grid_select(cli_args *a, const char *C, const grid_opts *g, int *vars, int *nv, double *dl, int *nd) {
    char bad[64];
    lipt_error err = {0};
    *nv = parse_variants(cli_str(a, "variants"), vars, bad, sizeof bad);
    *nd = parse_list(cli_str(a, "depths"), dl, MAX_DEPTHS);
    if (*nv < 1) return cli_error(C, "--variants: unknown variant '%s' (" VARIANT_LIST ")", bad);
    if (*nd < 1) return cli_error(C, "--depths must be a comma list of layer counts, got '%s'", cli_str(a, "depths"));
    if (g->steps < 1 || g->batch < 1 || g->threads < 1) return cli_error(C, "--steps, --batch and --threads must be >= 1");
    for (int i = 0; i < *nd; i++)
        if (dl[i] < 1 || dl[i] > 64 || dl[i] != floor(dl[i])) return cli_error(C, "--depths: %g is not a layer count in [1, 64]", dl[i]);
    if (run_mkdir(g->out, &err) != LIPT_OK || run_mkdir(g->runs, &err) != LIPT_OK) return cli_fail(C, &err);
    return 0;
}

static const cli_opt depth_own[] = {
    {"variants", CLI_STRING, "LIST", "attention variants: dp,l2,l2-tied,contractive (the invertible model),contractive-l2 (the paper's)",
     "dp,l2,l2-tied,contractive"},
    {"depths", CLI_STRING, "LIST", "numbers of layers", "1,2,4,8,12"},
    {"steps", CLI_INT, "N", "optimizer steps of every cell (the same budget for all)", "1000"},
    {"lr", CLI_FLOAT, "LR", "peak learning rate (warmup then 1/sqrt decay)", "2e-3"},
    {"warmup", CLI_INT, "N", "linear warmup steps", "100"},
    {"clip", CLI_FLOAT, "NORM", "gradient-norm clipping", "1"},
    {"valid-symbols", CLI_INT, "N", "validation symbols scored per cell (0: the whole split)", "0"},
    {"out", CLI_STRING, "DIR", "CSV and SVG folder", "runs/experiments/depth"},
    {"runs", CLI_STRING, "DIR", "run directories of the cells (checkpoints, logs)", "runs/depth"},
};

int exp_depth(int argc, char **argv) {
    const char *C = "experiment depth";
    cli_opt opts[32];
    int nopt = build_opts(opts, depth_own, (int)(sizeof depth_own / sizeof depth_own[0]));
    cli_args a;
    int pr = cli_parse(&a, C,
                       "Expressiveness by depth (paper Fig. 4, SPEC §4.3): trains every attention variant at every depth on the\n"
                       "same budget (steps x batch x context, same data order), then scores validation and test BPC in\n"
                       "non-overlapping windows of seq-len. Writes OUT/depth.csv and OUT/depth.svg after every cell.\n"
                       "Resumable: cells in the CSV are skipped, an unfinished cell continues from its checkpoint.",
                       opts, nopt, argc, argv, 0, 0);
    if (pr) {
        cli_free(&a);
        return pr > 0 ? 0 : 2;
    }
    grid_opts g = {0};
    long valid_symbols;
    int rc = parse_grid_common(&a, &g);
    if (!rc && (cli_int(&a, "warmup", &g.warmup) || cli_float(&a, "clip", &g.clip) ||
                cli_int(&a, "valid-symbols", &valid_symbols)))
        rc = 2;
    if (rc) {
        cli_free(&a);
        return rc;
    }
    g.schedule = "invsqrt";
    g.save_every = 100;
    int vars[MAX_VARIANTS], nv, nd;
    double dl[MAX_DEPTHS];
    lipt_error err = {0};
    rc = grid_select(&a, C, &g, vars, &nv, dl, &nd);
    if (rc) {
        cli_free(&a);
        return rc;
    }
    char csv[1100];
    snprintf(csv, sizeof csv, "%s/depth.csv", g.out);
    depth_row rows[MAX_CELLS];
    char key[256];
    grid_key(&g, key, sizeof key);
    int n = read_depth_csv(csv, key, rows, MAX_CELLS, C);
    if (n < 0) {
        cli_free(&a);
        return 1;
    }
    const int total = nv * nd;
    int cell = 0;
    double t_start = cli_now();
    for (int vi = 0; vi < nv && !rc; vi++)
        for (int di = 0; di < nd && !rc; di++) {
            const int v = vars[vi], depth = (int)dl[di];
            cell++;
            int found = 0;
            for (int i = 0; i < n; i++) found |= rows[i].variant == v && rows[i].depth == depth;
            char dir[1100], why[128] = "";
            double secs = 0;
            const int tr = grid_cell(&g, C, found, cell, total, v, depth, "", 10, csv, dir, sizeof dir, &secs, why, sizeof why, &rc);
            if (tr < 0) continue;
            if (tr == 2) break;
            depth_row r;
            memset(&r, 0, sizeof r);
            r.variant = v;
            r.depth = depth;
            r.steps = g.steps;
            r.train_s = secs;
            r.diverged = tr == 1;
            r.valid_bpc = r.test_bpc = r.valid_nll = r.test_nll = NAN;
            if (!r.diverged) {
                int e = eval_cell(&g, dir, "valid", valid_symbols, &r.valid_bpc, &r.valid_nll, &r.valid_symbols, &r.params);
                if (!e) e = eval_cell(&g, dir, "test", 0, &r.test_bpc, &r.test_nll, &r.test_symbols, NULL);
                if (e == 2) { rc = 130; break; }
                if (e) { rc = 1; break; }
            }
            rows[n++] = r;
            if (write_depth_outputs(g.out, rows, n, &g, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
            if (r.diverged) fprintf(stderr, "[%d/%d] %s, %d layers: diverged (%s) after %.0f s\n", cell, total, variant_names[v], depth, why, secs);
            else
                fprintf(stderr, "[%d/%d] %s, %d layers: valid %.4f, test %.4f BPC (%.0f s of training; %.0f s so far)\n",
                        cell, total, variant_names[v], depth, r.valid_bpc, r.test_bpc, secs, cli_now() - t_start);
        }
    if (!rc) {
        qsort(rows, (size_t)n, sizeof *rows, cmp_depth_row);
        printf("%-12s %6s %10s %9s %10s %10s\n", "variant", "layers", "params", "train_s", "valid_bpc", "test_bpc");
        for (int i = 0; i < n; i++)
            printf("%-12s %6d %10ld %9.0f %10.4f %10.4f%s\n", variant_names[rows[i].variant], rows[i].depth, rows[i].params,
                   rows[i].train_s, rows[i].valid_bpc, rows[i].test_bpc, rows[i].diverged ? "  (diverged)" : "");
        fprintf(stderr, "wrote %s/depth.csv and %s/depth.svg\n", g.out, g.out);
    }
    cli_free(&a);
    return rc;
}

/* ------------------------------------------------------------------------------------------- stability */

typedef struct {
    int variant, depth;
    long steps_done;
    double first_loss, min_loss, final_loss, valid_bpc, max_gnorm, max_spread;
    int diverged;          /* 0 stable, 1 non-finite, 2 blow-up (smoothed loss rose by > rise above its minimum) */
    long diverge_step;
} stab_row;

#define STAB_HEADER                                                                                                    \
    "variant,depth,steps_done,first_loss,min_loss,final_loss,final_train_bpc,valid_bpc,max_grad_norm,"               \
    "max_attn_logit_spread,outcome,diverge_step,settings"

/* Splits a CSV line in place into at most cap fields; returns the count. */
static int csv_split(char *line, char **f, int cap) {
    int n = 0;
    line[strcspn(line, "\r\n")] = 0;
    for (char *p = line; n < cap;) {
        f[n++] = p;
        char *c = strchr(p, ',');
        if (!c) break;
        *c = 0;
        p = c + 1;
    }
    return n;
}

static const char *stab_kind(int d) { return d == 0 ? "stable" : d == 1 ? "non-finite" : "blow-up"; }

/* Rows of OUT/stability.csv; -1 (message printed) when it holds rows of other settings. */
static int read_stab_csv(const char *path, const char *key, stab_row *rows, int cap, const char *C) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[2048];
    int n = 0;
    if (!fgets(line, sizeof line, f)) { fclose(f); return 0; }
    line[strcspn(line, "\r\n")] = 0;
    if (strcmp(line, STAB_HEADER) != 0) {
        fclose(f);
        cli_error(C, "%s was written by an older lipt or another tool (its header is not the current one): move it "
                     "away or choose another --out", path);
        return -1;
    }
    while (n < cap && fgets(line, sizeof line, f)) {
        char *x[16];
        if (csv_split(line, x, 16) != 13) continue;
        if (strcmp(x[12], key) != 0) {
            fclose(f);
            cli_error(C, "%s holds results of other settings (%s, not %s): choose another --out for these", path, x[12],
                      key);
            return -1;
        }
        stab_row r;
        memset(&r, 0, sizeof r);
        r.variant = variant_index(x[0]);
        r.depth = atoi(x[1]);
        r.steps_done = atol(x[2]);
        r.first_loss = strtod(x[3], NULL);
        r.min_loss = strtod(x[4], NULL);
        r.final_loss = strtod(x[5], NULL);
        r.valid_bpc = strtod(x[7], NULL);
        r.max_gnorm = strtod(x[8], NULL);
        r.max_spread = strtod(x[9], NULL);
        r.diverged = strcmp(x[10], "stable") == 0 ? 0 : strcmp(x[10], "non-finite") == 0 ? 1 : 2;
        r.diverge_step = atol(x[11]);
        if (r.variant >= 0) rows[n++] = r;
    }
    fclose(f);
    return n;
}

static int cmp_stab_row(const void *p, const void *q) {
    const stab_row *a = p, *b = q;
    if (a->variant != b->variant) return a->variant - b->variant;
    return a->depth - b->depth;
}

/* Loss curve of a run from its metrics.jsonl (training lines only); the largest gradient norm and attention logit
 * spread logged go to *gmax, *smax when given. */
static int read_curve(const char *dir, double *step, double *loss, int cap, double *gmax, double *smax) {
    char p[1200];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = fopen(p, "r");
    if (gmax) *gmax = NAN;
    if (smax) *smax = NAN;
    if (!f) return 0;
    char line[1024];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        if (strstr(line, "\"eval\"")) continue;
        double s = json_get(line, "step"), l = json_get(line, "loss");
        if (!isfinite(s)) continue;
        const double gn = json_get(line, "grad_norm"), sp = json_get(line, "attn_logit_spread");
        if (gmax && isfinite(gn) && !(gn <= *gmax)) *gmax = gn;
        if (smax && isfinite(sp) && !(sp <= *smax)) *smax = sp;
        step[n] = s;
        loss[n] = l;
        n++;
    }
    fclose(f);
    return n;
}

/* Divergence, detected: a non-finite loss (training stops itself), or the loss averaged over `win` logged steps rising
 * more than `rise` nats above the lowest such average seen before. */
static void detect(stab_row *r, const double *step, const double *loss, int n, int win, double rise) {
    r->steps_done = n ? (long)step[n - 1] : 0;
    r->first_loss = n ? loss[0] : NAN;
    r->min_loss = INFINITY;
    r->diverge_step = -1;
    double best = INFINITY, sum = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(loss[i])) break;
        if (loss[i] < r->min_loss) r->min_loss = loss[i];
        sum += loss[i];
        if (i >= win) sum -= loss[i - win];
        if (i + 1 < win) continue;
        const double avg = sum / win;
        if (avg < best) best = avg;
        if (r->diverged == 0 && avg > best + rise) {
            r->diverged = 2;
            r->diverge_step = (long)step[i];
        }
    }
    int w = n < win ? n : win;
    double s = 0;
    for (int i = n - w; i < n; i++) s += loss[i];
    r->final_loss = w ? s / w : NAN;
}

static void stab_dir(const grid_opts *g, int v, int depth, char *dir, size_t n) {
    char key[256];
    grid_key(g, key, sizeof key);
    snprintf(dir, n, "%s/stab-%s-L%d-%s", g->runs, variant_names[v], depth, key);
}

/* One plot per variant of every depth's loss curve, and their CSV. */
static lipt_status write_stab_curves(const grid_opts *g, const stab_row *rows, int n, lipt_error *err) {
    char path[1100];
    snprintf(path, sizeof path, "%s/stability_curves.csv", g->out);
    out_file o;
    lipt_status st = open_file(&o, path, err);
    if (st != LIPT_OK) return st;
    fprintf(o.f, "variant,depth,step,loss\n");
    enum { CAP = 20000 };
    double *sx = malloc(sizeof(double) * CAP * MAX_DEPTHS), *sy = malloc(sizeof(double) * CAP * MAX_DEPTHS);
    if (!sx || !sy) {
        free(sx); free(sy);
        fclose(o.f);
        return lipt_fail(err, LIPT_ERR_NOMEM, "stability curves");
    }
    for (int v = 0; v < MAX_VARIANTS && st == LIPT_OK; v++) {
        svg_series s[MAX_DEPTHS];
        char lab[MAX_DEPTHS][48];
        int ns = 0;
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < n && ns < MAX_DEPTHS; i++) {
            if (rows[i].variant != v) continue;
            char dir[1100];
            stab_dir(g, v, rows[i].depth, dir, sizeof dir);
            double *x = sx + (size_t)ns * CAP, *y = sy + (size_t)ns * CAP;
            int m = read_curve(dir, x, y, CAP, NULL, NULL);
            for (int k = 0; k < m; k++) {
                fprintf(o.f, "%s,%d,%.0f,%.5f\n", variant_names[v], rows[i].depth, x[k], y[k]);
                if (isfinite(y[k])) { lo = fmin(lo, y[k]); hi = fmax(hi, y[k]); }
            }
            snprintf(lab[ns], sizeof lab[0], "%d layers%s", rows[i].depth, rows[i].diverged ? " (diverged)" : "");
            s[ns] = (svg_series){lab[ns], x, y, m, svg_color(ns), SVG_MARK_NONE, 1, SVG_SOLID, 1.2};
            ns++;
        }
        if (!ns) continue;
        char title[200];
        snprintf(title, sizeof title, "%s: training loss, Adam lr %g constant, no warmup, clip %g, d_model %ld", variant_names[v],
                 g->lr, g->clip, g->d_model);
        svg_plot p = svg_plot_defaults();
        p.title = title;
        p.xlabel = "step";
        p.ylabel = "training loss (nats per symbol)";
        p.width = 960;
        if (isfinite(lo)) { /* fitted to the curves, the first steps' loss (about ln V) included */
            p.ymin = fmax(0, lo - 0.05 * (hi - lo));
            p.ymax = hi + 0.05 * (hi - lo);
        }
        snprintf(path, sizeof path, "%s/stability_%s.svg", g->out, variant_names[v]);
        st = svg_write_file(path, &p, s, ns, err);
    }
    free(sx);
    free(sy);
    if (st != LIPT_OK) { fclose(o.f); return st; }
    return commit_file(&o, err);
}

static lipt_status write_stab_outputs(const grid_opts *g, stab_row *rows, int n, lipt_error *err) {
    qsort(rows, (size_t)n, sizeof *rows, cmp_stab_row);
    char path[1100], key[256];
    grid_key(g, key, sizeof key);
    snprintf(path, sizeof path, "%s/stability.csv", g->out);
    out_file o;
    lipt_status st = open_file(&o, path, err);
    if (st != LIPT_OK) return st;
    fprintf(o.f, STAB_HEADER "\n");
    for (int i = 0; i < n; i++) {
        const stab_row *r = &rows[i];
        fprintf(o.f, "%s,%d,%ld,%.5f,%.5f,%.5f,%.5f,%.5f,%.5g,%.5g,%s,%ld,%s\n", variant_names[r->variant], r->depth,
                r->steps_done, r->first_loss, r->min_loss, r->final_loss, r->final_loss / log(2.0), r->valid_bpc,
                r->max_gnorm, r->max_spread, stab_kind(r->diverged), r->diverge_step, key);
    }
    if ((st = commit_file(&o, err)) != LIPT_OK) return st;
    if ((st = write_stab_curves(g, rows, n, err)) != LIPT_OK) return st;
    /* final loss against depth */
    double xs[MAX_VARIANTS][MAX_DEPTHS], ys[MAX_VARIANTS][MAX_DEPTHS];
    int cnt[MAX_VARIANTS] = {0};
    for (int i = 0; i < n; i++) {
        int v = rows[i].variant, k = cnt[v];
        if (k >= MAX_DEPTHS) continue;
        xs[v][k] = rows[i].depth;
        ys[v][k] = rows[i].diverged == 1 ? NAN : rows[i].final_loss / log(2.0);
        cnt[v]++;
    }
    svg_series s[MAX_VARIANTS];
    int ns = 0;
    for (int v = 0; v < MAX_VARIANTS; v++)
        if (cnt[v]) {
            s[ns] = (svg_series){variant_names[v], xs[v], ys[v], cnt[v], svg_color(v), SVG_MARK_CIRCLE, 1, SVG_SOLID, 0};
            ns++;
        }
    char title[256];
    snprintf(title, sizeof title, "final training BPC vs depth: Adam lr %g constant, no warmup, %ld steps, d_model %ld "
             "(gaps: non-finite loss)", g->lr, g->steps, g->d_model);
    svg_plot p = svg_plot_defaults();
    p.title = title;
    p.xlabel = "layers";
    p.ylabel = "training BPC (mean of the last logged steps)";
    p.width = 960;
    snprintf(path, sizeof path, "%s/stability.svg", g->out);
    return svg_write_file(path, &p, s, ns, err);
}

static const cli_opt stab_own[] = {
    {"variants", CLI_STRING, "LIST", "variants: " VARIANT_LIST, "dp,l2-tied,contractive"},
    {"depths", CLI_STRING, "LIST", "numbers of layers", "2,4,6,8,10,12,14,16,18"},
    {"steps", CLI_INT, "N", "optimizer steps per run", "300"},
    {"lr", CLI_FLOAT, "LR", "fixed Adam learning rate (no warmup, no decay)", "1e-3"},
    {"clip", CLI_FLOAT, "NORM", "gradient-norm clipping (0: off, as in plain Adam)", "0"},
    {"window", CLI_INT, "N", "logged steps averaged by the divergence test", "20"},
    {"rise", CLI_FLOAT, "NATS", "divergence: the averaged loss rises this far above its minimum", "0.5"},
    {"valid-symbols", CLI_INT, "N", "validation symbols scored per finished cell (0: skip)", "32768"},
    {"out", CLI_STRING, "DIR", "CSV and SVG folder", "runs/experiments/stability"},
    {"runs", CLI_STRING, "DIR", "run directories", "runs/stability"},
};

/* Trains, scores and records one stability cell. 0 done, 1 skipped, or the exit status | 0x100 to stop. */
static int stab_cell(const grid_opts *g, const char *C, stab_row *rows, int *n, int v, int depth, int cell, int total,
                     long win, double rise, long valid_symbols, double t_start) {
    int found = 0, rc = 0;
    for (int i = 0; i < *n; i++) found |= rows[i].variant == v && rows[i].depth == depth;
    char dir[1100], why[128] = "", csv[1100];
    snprintf(csv, sizeof csv, "%s/stability.csv", g->out);
    double secs = 0;
    const int tr = grid_cell(g, C, found, cell, total, v, depth, "stab-", 1, csv, dir, sizeof dir, &secs, why, sizeof why, &rc);
    if (tr < 0) return 1;
    if (tr == 2) return rc | 0x100;
    enum { CAP = 20000 };
    double *cs = malloc(sizeof(double) * CAP), *cl = malloc(sizeof(double) * CAP);
    if (!cs || !cl) {
        free(cs); free(cl);
        return cli_error(C, "out of memory") | 0x100;
    }
    stab_row r;
    memset(&r, 0, sizeof r);
    r.variant = v;
    r.depth = depth;
    r.valid_bpc = NAN;
    int m = read_curve(dir, cs, cl, CAP, &r.max_gnorm, &r.max_spread);
    detect(&r, cs, cl, m, (int)win, rise);
    free(cs);
    free(cl);
    if (tr == 1) {
        r.diverged = 1;
        r.diverge_step = r.steps_done + 1; /* the step whose loss was not finite (it is not logged) */
    } else if (valid_symbols > 0) {
        double nll;
        long sym;
        const int e = eval_cell(g, dir, "valid", valid_symbols, &r.valid_bpc, &nll, &sym, NULL);
        if (e) return (e == 2 ? 130 : 1) | 0x100;
    }
    rows[(*n)++] = r;
    lipt_error err = {0};
    if (write_stab_outputs(g, rows, *n, &err) != LIPT_OK) return cli_fail(C, &err) | 0x100;
    fprintf(stderr, "[%d/%d] %s, %d layers: %s%s, loss %.3f -> min %.3f -> final %.3f, valid %.3f BPC, max |g| %.3g, "
            "max logit spread %.3g (%.0f s; %.0f s so far)\n", cell, total, variant_names[v], depth, stab_kind(r.diverged),
            r.diverged ? " detected" : "", r.first_loss, r.min_loss, r.final_loss, r.valid_bpc, r.max_gnorm, r.max_spread,
            secs, cli_now() - t_start);
    return 0;
}

static void stab_summary(const stab_row *rows, int n, const int *vars, int nv) {
    printf("%-13s %6s %7s %10s %9s %10s %9s %10s %11s %-11s %s\n", "variant", "layers", "steps", "first_loss", "min_loss",
           "final_loss", "valid_bpc", "max_gnorm", "max_spread", "outcome", "at_step");
    for (int i = 0; i < n; i++)
        printf("%-13s %6d %7ld %10.4f %9.4f %10.4f %9.4f %10.4g %11.4g %-11s %ld\n", variant_names[rows[i].variant],
               rows[i].depth, rows[i].steps_done, rows[i].first_loss, rows[i].min_loss, rows[i].final_loss,
               rows[i].valid_bpc, rows[i].max_gnorm, rows[i].max_spread, stab_kind(rows[i].diverged), rows[i].diverge_step);
    for (int vi = 0; vi < nv; vi++) {
        int first = -1;
        for (int i = 0; i < n; i++)
            if (rows[i].variant == vars[vi] && rows[i].diverged && (first < 0 || rows[i].depth < first)) first = rows[i].depth;
        if (first > 0) printf("%s first diverges at %d layers\n", variant_names[vars[vi]], first);
        else printf("%s: stable at every depth tried\n", variant_names[vars[vi]]);
    }
}

int exp_stability(int argc, char **argv) {
    const char *C = "experiment stability";
    cli_opt opts[32];
    int nopt = build_opts(opts, stab_own, (int)(sizeof stab_own / sizeof stab_own[0]));
    cli_args a;
    int pr = cli_parse(&a, C,
                       "Training stability without warmup (paper Fig. 11, SPEC §4.4): Adam at a fixed learning rate from step 1,\n"
                       "depth growing, for each variant; records every loss curve, the largest gradient norm and attention logit\n"
                       "spread logged, and detects divergence (a non-finite loss, or the loss averaged over --window logged steps\n"
                       "rising --rise nats above its minimum); finished cells are scored on --valid-symbols validation symbols.\n"
                       "Writes OUT/stability.csv, OUT/stability_curves.csv, OUT/stability.svg and OUT/stability_<variant>.svg.\n"
                       "Resumable; the CSV is tied to its settings (another --lr, --steps or width needs another --out).",
                       opts, nopt, argc, argv, 0, 0);
    if (pr) {
        cli_free(&a);
        return pr > 0 ? 0 : 2;
    }
    grid_opts g = {0};
    long win, valid_symbols;
    double rise;
    int rc = parse_grid_common(&a, &g);
    if (!rc && (cli_float(&a, "clip", &g.clip) || cli_int(&a, "window", &win) || cli_float(&a, "rise", &rise) ||
                cli_int(&a, "valid-symbols", &valid_symbols)))
        rc = 2;
    if (rc) {
        cli_free(&a);
        return rc;
    }
    g.schedule = "constant";
    g.warmup = 0;
    g.save_every = 50;
    int vars[MAX_VARIANTS], nv, nd;
    double dl[MAX_DEPTHS];
    if (win < 1 || rise <= 0 || valid_symbols < 0) rc = cli_error(C, "--window must be >= 1, --rise > 0, --valid-symbols >= 0");
    else rc = grid_select(&a, C, &g, vars, &nv, dl, &nd);
    if (rc) {
        cli_free(&a);
        return rc;
    }
    char csv[1100], key[256];
    snprintf(csv, sizeof csv, "%s/stability.csv", g.out);
    grid_key(&g, key, sizeof key);
    stab_row rows[MAX_CELLS];
    int n = read_stab_csv(csv, key, rows, MAX_CELLS, C);
    if (n < 0) {
        cli_free(&a);
        return 1;
    }
    const int total = nv * nd;
    int cell = 0;
    double t_start = cli_now();
    for (int vi = 0; vi < nv && !rc; vi++)
        for (int di = 0; di < nd && !rc; di++) {
            const int r = stab_cell(&g, C, rows, &n, vars[vi], (int)dl[di], ++cell, total, win, rise, valid_symbols, t_start);
            if (r & 0x100) rc = r & 0xff;
        }
    if (!rc) {
        qsort(rows, (size_t)n, sizeof *rows, cmp_stab_row);
        stab_summary(rows, n, vars, nv);
        fprintf(stderr, "wrote %s/stability.csv, stability_curves.csv, stability.svg, stability_<variant>.svg\n", g.out);
    }
    cli_free(&a);
    return rc;
}
