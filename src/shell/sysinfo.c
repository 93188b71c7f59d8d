/* lipt info --system and the header of lipt bench: what a run's speed and bits depend on besides lipt itself. */
#include "sysinfo.h"

#include <strings.h>
#include <time.h>

/* "chosen by OpenBLAS" / "set by lipt: ..." / "OPENBLAS_CORETYPE=... set by the user" */
static void core_source(const lipt_cpuinfo *ci, char *out, size_t n) {
    if (ci->coretype_source[0] == 'l')
        snprintf(out, n, "set by lipt (OPENBLAS_CORETYPE=%s: OpenBLAS's own choice was below what the CPU runs)",
                 ci->coretype_env);
    else if (ci->coretype_source[0] == 'u') snprintf(out, n, "OPENBLAS_CORETYPE=%s, set by the user", ci->coretype_env);
    else snprintf(out, n, "chosen by OpenBLAS");
}

/* "passed" / "FAILED" / "not tested", with when and whether this command ran it */
static void verdict_words(const lipt_blas_verdict *v, char *out, size_t n) {
    if (v->state == 0) {
        snprintf(out, n, "not tested");
        return;
    }
    char when[32] = "at an unknown time";
    const time_t t = (time_t)v->when;
    struct tm tm;
    if (v->when > 0 && gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    snprintf(out, n, "%s (%s, %s)", v->state > 0 ? "passed" : "FAILED", when,
             v->cached ? "cached verdict" : "tested by this command");
}

/* The self-test line: the verdict on the kernels lipt picked, or on the better ones it recommends or declined. */
static void print_selftest(FILE *f, const lipt_cpuinfo *ci, const char *indent) {
    const lipt_blas_verdict *v = &ci->selftest;
    char words[96];
    verdict_words(v, words, sizeof words);
    if (ci->coretype_source[0] == 'l')
        fprintf(f, "%s  self-test of the %s kernels lipt picked: %s: %s\n", indent, ci->blas_core, words,
                v->state ? v->detail : "(checked by the process that picked them)");
    else if (v->state > 0 && ci->recommend[0])
        fprintf(f, "%s  self-test of the %s kernels: %s; note: the CPU runs %s kernels, faster here "
                "(OPENBLAS_CORETYPE=%s)\n", indent, v->core, words, ci->recommend, ci->recommend);
    else if (v->state < 0)
        fprintf(f, "%s  self-test of the %s kernels: %s: %s; not %s: OpenBLAS's own choice stays\n", indent,
                v->core, words, v->detail, ci->coretype_source[0] == 'u' ? "recommended" : "used, not recommended");
    else if (ci->blas_generic)
        fprintf(f, "%s  the CPU runs %s kernels, but they were not self-tested here: not recommended\n", indent,
                ci->best_core);
    else fprintf(f, "%s  not self-tested by lipt (it tests the kernel sets it would pick or recommend)\n", indent);
}

void sysinfo_print(FILE *f, const lipt_cpuinfo *ci, const char *indent) {
    char feat[256], src[160];
    lipt_cpuinfo_features(ci, feat, sizeof feat);
    core_source(ci, src, sizeof src);
    fprintf(f, "%scpu: %s (family %d, model %d): %s\n", indent, ci->cpu, ci->family, ci->model,
            feat[0] ? feat : "no SIMD features detected");
    if (ci->blas_core[0]) {
        fprintf(f, "%sOpenBLAS: %s kernels, %s; %s threading (%s)\n", indent, ci->blas_core, src, ci->blas_threading,
                ci->blas_config);
        print_selftest(f, ci, indent);
    }
    if (ci->dnnl_isa[0]) fprintf(f, "%soneDNN %s: ISA %s\n", indent, ci->dnnl_version, ci->dnnl_isa);
    else fprintf(f, "%soneDNN: not in this build\n", indent);
    char how[192];
    lipt_threads_describe(how, sizeof how);
    fprintf(f, "%sthreads: %s\n", indent, how);
}

void sysinfo_json(json_w *j, const lipt_cpuinfo *ci) {
    char feat[256];
    lipt_cpuinfo_features(ci, feat, sizeof feat);
    json_obj_open(j, "system");
    json_str(j, "cpu", ci->cpu);
    json_int(j, "cpu_family", ci->family);
    json_int(j, "cpu_model", ci->model);
    json_str(j, "cpu_features", feat);
    json_str(j, "openblas_core", ci->blas_core);
    json_str(j, "openblas_core_source", ci->coretype_source); /* "OpenBLAS", "user" or "lipt" */
    json_str(j, "openblas_coretype_env", ci->coretype_env);
    json_str(j, "openblas_best_core", ci->best_core);
    json_bool(j, "openblas_generic", ci->blas_generic);
    /* the self-test of openblas_best_core: "passed", "failed" or "not tested"; its time (Unix seconds, 0 when not
     * tested), whether it was the cached verdict; the one kernel set recommended ("" when none) */
    const lipt_blas_verdict *v = &ci->selftest;
    json_str(j, "openblas_selftest_core", v->core);
    json_str(j, "openblas_selftest", v->state > 0 ? "passed" : v->state < 0 ? "failed" : "not tested");
    json_int(j, "openblas_selftest_time", v->when);
    json_bool(j, "openblas_selftest_cached", v->cached);
    json_str(j, "openblas_selftest_detail", v->detail);
    json_str(j, "openblas_recommended", ci->recommend);
    json_bool(j, "openblas_core_selftested", v->state > 0 && strcasecmp(v->core, ci->blas_core) == 0);
    json_str(j, "openblas_config", ci->blas_config);
    json_str(j, "openblas_threading", ci->blas_threading);
    json_str(j, "onednn_version", ci->dnnl_version);
    json_str(j, "onednn_isa", ci->dnnl_isa);
    json_int(j, "threads", lipt_get_threads());
    double busy = 0;
    json_bool(j, "threads_default", lipt_threads_default(&busy)); /* false: LIPT_THREADS or --threads */
    json_int(j, "cpus_usable", lipt_cpus_usable());
    json_num(j, "cpus_busy_elsewhere", busy); /* counted when the default was chosen */
    json_obj_close(j);
}
