/* lipt info --system and the header of lipt bench: what a run's speed and bits depend on besides lipt itself. */
#include "sysinfo.h"

/* "chosen by OpenBLAS" / "set by lipt: ..." / "OPENBLAS_CORETYPE=... set by the user" */
static void core_source(const lipt_cpuinfo *ci, char *out, size_t n) {
    if (ci->coretype_source[0] == 'l')
        snprintf(out, n, "set by lipt (OPENBLAS_CORETYPE=%s: OpenBLAS's own choice was below what the CPU runs)",
                 ci->coretype_env);
    else if (ci->coretype_source[0] == 'u') snprintf(out, n, "OPENBLAS_CORETYPE=%s, set by the user", ci->coretype_env);
    else snprintf(out, n, "chosen by OpenBLAS");
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
        if (ci->blas_generic)
            fprintf(f, "%s  note: the CPU runs %s kernels, faster here (OPENBLAS_CORETYPE=%s)\n", indent,
                    ci->best_core, ci->best_core);
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
