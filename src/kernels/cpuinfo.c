/* What the CPU can run and which kernels the libraries picked for it (lipt_cpuinfo_get), and the start-up check that
 * keeps OpenBLAS off its generic kernels on a CPU that has better ones (lipt_blas_coretype_startup).
 *
 * OpenBLAS's DYNAMIC_ARCH build (Debian's) chooses its kernels once, in its library constructor, from a table of
 * known CPU models; a model newer than its release falls through to "Prescott" (SSE3) kernels: 0.3.21 on an Intel
 * Xeon of family 6, model 207 with AVX-512 and AMX ran the small products on SSE3. The environment variable
 * OPENBLAS_CORETYPE overrides the choice, but only when set before that constructor runs, that is before main. So
 * lipt_blas_coretype_startup, at the top of main, re-executes the program once with OPENBLAS_CORETYPE set to the
 * kernels the CPU's features allow, and says so on a terminal; a user's own OPENBLAS_CORETYPE is always left alone.
 * Those kernels are checked first (lipt_blas_verify, a GEMM self-test in a child, cached): some OpenBLAS releases
 * compute wrong results or crash with their AVX-512 kernels on CPUs newer than they are. A set that fails is neither
 * picked nor recommended. */
#include "lipt/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CPUINFO_X86 1
#endif

#ifdef LIPT_HAVE_OPENBLAS
/* Declared by OpenBLAS's cblas.h; repeated here so this file needs no BLAS header. */
char *openblas_get_corename(void);
char *openblas_get_config(void);
int openblas_get_parallel(void);
#endif

#ifdef LIPT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* The guard lipt_blas_coretype_startup leaves in the environment of the program it re-executes: the core type it set.
 * OPENBLAS_CORETYPE equal to it means lipt chose it, anything else the user did. */
#define GUARD_VAR "LIPT_OPENBLAS_CORETYPE"
/* The verdict of the self-test of the best core type, as the start-up check left it for lipt_cpuinfo_get: "CORE STATE
 * WHEN CACHED DETAIL". Set (or cleared) by every start-up check, kept through the re-execution. */
#define VERDICT_VAR "LIPT_OPENBLAS_SELFTEST"
/* Test hook (tests/cli_test.sh): treat OpenBLAS's own choice as the generic "Prescott" whatever it was, so the
 * re-execution runs on any CPU with AVX2. Only consulted when OPENBLAS_CORETYPE is unset. */
#define PRETEND_VAR "LIPT_TEST_PRETEND_GENERIC"

static void features(lipt_cpuinfo *ci) {
#ifdef CPUINFO_X86
    unsigned a, b, c, d;
    unsigned r[13] = {0};
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        const char *s = (const char *)r;
        while (*s == ' ') s++;
        snprintf(ci->cpu, sizeof ci->cpu, "%s", s);
        for (size_t k = strlen(ci->cpu); k > 0 && ci->cpu[k - 1] == ' '; k--) ci->cpu[k - 1] = 0;
    }
    const unsigned max = (unsigned)__get_cpuid_max(0, NULL);
    if (max < 1 || !__get_cpuid(1, &a, &b, &c, &d)) return;
    const unsigned fam = (a >> 8) & 0xf, model = (a >> 4) & 0xf;
    ci->family = (int)(fam == 0xf ? fam + ((a >> 20) & 0xff) : fam);
    ci->model = (int)(fam == 0x6 || fam == 0xf ? model | (((a >> 16) & 0xf) << 4) : model);
    ci->sse3 = (c >> 0) & 1u;
    const int fma = (c >> 12) & 1u, osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u;
    /* the OS must save the registers: XCR0 bits 1-2 (SSE, AVX) for ymm, 5-7 (opmask, zmm) for AVX-512, 17-18 (tile
     * config and data) for AMX */
    unsigned xcr0 = 0;
    if (osxsave) {
        unsigned hi;
        __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(hi) : "c"(0));
        (void)hi;
    }
    const int ymm = (xcr0 & 0x6u) == 0x6u, zmm = ymm && (xcr0 & 0xE0u) == 0xE0u,
              tiles = (xcr0 & 0x60000u) == 0x60000u;
    ci->avx = avx && ymm;
    ci->fma = fma && ymm;
    if (max < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned sub = a;
    ci->avx2 = ((b >> 5) & 1u) && ymm;
    ci->avx512f = ((b >> 16) & 1u) && zmm;
    ci->avx512dq = ((b >> 17) & 1u) && zmm;
    ci->avx512cd = ((b >> 28) & 1u) && zmm;
    ci->avx512bw = ((b >> 30) & 1u) && zmm;
    ci->avx512vl = ((b >> 31) & 1u) && zmm;
    ci->avx512_vnni = ((c >> 11) & 1u) && zmm;
    ci->avx512_fp16 = ((d >> 23) & 1u) && zmm;
    ci->amx_bf16 = ((d >> 22) & 1u) && tiles;
    ci->amx_tile = ((d >> 24) & 1u) && tiles;
    if (sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        ci->avx512_bf16 = ((a >> 5) & 1u) && zmm;
    }
#else
    (void)ci;
#endif
}

/* The instruction-set class of an OpenBLAS core name (0.3.21's corename table; "Cooperlake" cannot be forced there,
 * but OpenBLAS reports it): 3 AVX-512, 2 AVX2, 1 AVX, 0 SSE (the generic kernels), -1 a name lipt does not know
 * (a newer OpenBLAS's: assumed not generic). */
static int core_class(const char *name) {
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const avx2[] = {"Haswell", "Zen", "Excavator"};
    static const char *const avx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"};
    static const char *const sse[] = {"Unknown", "Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom",
                                      "Core2", "Penryn", "Dunnington", "Nehalem", "Athlon", "Opteron",
                                      "Opteron_SSE3", "Barcelona", "Nano", "Bobcat"};
#define IN(list, cls)                                                                                              \
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)                                                      \
        if (strcasecmp(name, list[i]) == 0) return cls;
    IN(avx512, 3)
    IN(avx2, 2)
    IN(avx, 1)
    IN(sse, 0)
#undef IN
    return -1;
}

/* The best OpenBLAS core type the CPU's features allow, as OPENBLAS_CORETYPE spells it for 0.3.21's DYNAMIC_ARCH
 * build (its own test for SkylakeX is AVX512VL with the zmm state; its kernels use F, BW, DQ and VL), and its class;
 * "" and -1 below AVX. */
static const char *best_core(const lipt_cpuinfo *ci, int *cls) {
    if (ci->avx512f && ci->avx512bw && ci->avx512dq && ci->avx512vl && ci->avx2 && ci->fma) {
        *cls = 3;
        return "SkylakeX";
    }
    if (ci->avx2 && ci->fma) {
        *cls = 2;
        return "Haswell";
    }
    if (ci->avx) {
        *cls = 1;
        return "Sandybridge";
    }
    *cls = -1;
    return "";
}


#ifdef LIPT_HAVE_DNNL
static const char *dnnl_isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_all: return "all";
    default: return "unknown";
    }
}
#endif

static void put_verdict(const lipt_blas_verdict *v) {
    char buf[LIPT_BLAS_DETAIL_MAX + 96];
    snprintf(buf, sizeof buf, "%s %d %lld %d %s", v->core, v->state, v->when, v->cached, v->detail);
    if (v->core[0]) setenv(VERDICT_VAR, buf, 1);
    else unsetenv(VERDICT_VAR);
}

static void get_verdict(lipt_blas_verdict *v) {
    memset(v, 0, sizeof *v);
    const char *s = getenv(VERDICT_VAR);
    int used = 0;
    if (!s || sscanf(s, "%31s %d %lld %d %n", v->core, &v->state, &v->when, &v->cached, &used) != 4 || !used) {
        memset(v, 0, sizeof *v);
        return;
    }
    snprintf(v->detail, sizeof v->detail, "%s", s + used);
}

/* Everything but oneDNN's part (whose first ISA query fixes the ISA it will dispatch to: not at start-up). */
static void cpu_and_blas(lipt_cpuinfo *ci) {
    memset(ci, 0, sizeof *ci);
    snprintf(ci->cpu, sizeof ci->cpu, "unknown CPU");
    features(ci);
    ci->best_core = best_core(ci, &ci->best_class);
#ifdef LIPT_HAVE_OPENBLAS
    const char *core = openblas_get_corename(), *cfg = openblas_get_config();
    snprintf(ci->blas_core, sizeof ci->blas_core, "%s", core ? core : "");
    snprintf(ci->blas_config, sizeof ci->blas_config, "%s", cfg ? cfg : "");
    for (char *p = ci->blas_config; *p; p++) /* OpenBLAS ends it with a space */
        if (p[0] == ' ' && p[1] == 0) *p = 0;
    ci->blas_dynamic = cfg && strstr(cfg, "DYNAMIC_ARCH") != NULL;
    const int par = openblas_get_parallel();
    ci->blas_threading = par == 2 ? "OpenMP" : par == 1 ? "pthreads" : "none";
#else
    ci->blas_threading = "";
#endif
    ci->blas_class = ci->blas_core[0] ? core_class(ci->blas_core) : -1;
    ci->blas_generic = ci->blas_class >= 0 && ci->blas_class < ci->best_class;
    const char *env = getenv("OPENBLAS_CORETYPE"), *guard = getenv(GUARD_VAR);
    snprintf(ci->coretype_env, sizeof ci->coretype_env, "%s", env ? env : "");
    ci->coretype_source = !env || !*env ? "OpenBLAS" : guard && strcmp(guard, env) == 0 ? "lipt" : "user";
    get_verdict(&ci->selftest);
    ci->recommend = ci->blas_generic && ci->selftest.state > 0 && strcasecmp(ci->selftest.core, ci->best_core) == 0
                        ? ci->best_core : "";
    ci->dnnl_isa = "";
}

void lipt_cpuinfo_get(lipt_cpuinfo *ci) {
    cpu_and_blas(ci);
#ifdef LIPT_HAVE_DNNL
    const dnnl_version_t *v = dnnl_version();
    snprintf(ci->dnnl_version, sizeof ci->dnnl_version, "%d.%d.%d", v->major, v->minor, v->patch);
    ci->dnnl_isa = dnnl_isa_name(dnnl_get_effective_cpu_isa());
#endif
}

void lipt_cpuinfo_features(const lipt_cpuinfo *ci, char *out, size_t n) {
    const struct {
        int on;
        const char *name;
    } f[] = {{ci->sse3, "sse3"},
             {ci->avx, "avx"},
             {ci->fma, "fma"},
             {ci->avx2, "avx2"},
             {ci->avx512f, "avx512f"},
             {ci->avx512cd, "avx512cd"},
             {ci->avx512bw, "avx512bw"},
             {ci->avx512dq, "avx512dq"},
             {ci->avx512vl, "avx512vl"},
             {ci->avx512_vnni, "avx512_vnni"},
             {ci->avx512_bf16, "avx512_bf16"},
             {ci->avx512_fp16, "avx512_fp16"},
             {ci->amx_tile, "amx_tile"},
             {ci->amx_bf16, "amx_bf16"}};
    size_t k = 0;
    if (n) out[0] = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].on && k + strlen(f[i].name) + 2 < n)
            k += (size_t)snprintf(out + k, n - k, "%s%s", k ? " " : "", f[i].name);
}

#ifdef LIPT_HAVE_OPENBLAS
static const char *isa_words(int cls) {
    return cls == 3 ? "AVX-512" : cls == 2 ? "AVX2" : cls == 1 ? "AVX" : "SSE";
}

/* The MPI rank a launcher gave this process (0 when none): only rank 0 prints the note. */
static int launcher_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

#endif

void lipt_blas_coretype_startup(char *const *argv, lipt_blas_verify_fn verify) {
#ifdef LIPT_HAVE_OPENBLAS
    const char *env = getenv("OPENBLAS_CORETYPE"), *guard = getenv(GUARD_VAR);
    lipt_cpuinfo ci;
    if (env && *env && guard && strcmp(guard, env) == 0) {
        /* lipt's own choice (the re-executed program, its kernels self-tested before): checked to have taken */
        cpu_and_blas(&ci);
        if (strcasecmp(ci.blas_core, env) != 0 && launcher_rank() == 0)
            fprintf(stderr, "lipt: note: OPENBLAS_CORETYPE=%s did not take: OpenBLAS runs its %s kernels (%s)\n",
                    env, ci.blas_core, ci.blas_config);
        return;
    }
    unsetenv(VERDICT_VAR); /* only this process's own check counts */
    cpu_and_blas(&ci);
    const int user = env && *env;
    const char *pretend = user ? NULL : getenv(PRETEND_VAR);
    const char *core = ci.blas_core;
    int cls = ci.blas_class;
    if (pretend && strcmp(pretend, "1") == 0) core = "Prescott", cls = 0;
    /* only a DYNAMIC_ARCH build reads OPENBLAS_CORETYPE, and only a known lower class is corrected or recommended */
    if (!ci.blas_dynamic || cls < 0 || cls >= ci.best_class) return;
    /* before lipt picks or recommends the better kernels, they are checked on this CPU (once: the verdict is cached) */
    lipt_blas_verdict v;
    memset(&v, 0, sizeof v);
    if (verify) verify(&ci, ci.best_core, &v);
    put_verdict(&v);
    if (user) return; /* the user's choice stands: the verdict only decides what lipt info recommends */
    /* the notes go to a terminal (rank 0's): where stderr is a file or a pipe, a script's checks keep lipt's one-line
     * errors, and lipt info --system and lipt bench say who chose the kernels anyway */
    const int say = launcher_rank() == 0 && (isatty(STDERR_FILENO) || (pretend && strcmp(pretend, "1") == 0));
    if (v.state <= 0) { /* failed (or not tested): OpenBLAS's own choice stays */
        if (say && v.state < 0 && !v.cached)
            fprintf(stderr, "lipt: note: OpenBLAS's %s kernels failed lipt's self-test on this CPU (%s); staying on "
                    "OpenBLAS's own %s kernels (lipt info --system)\n", ci.best_core, v.detail, core);
        return;
    }
    if (!argv || !argv[0]) return;
    if (setenv("OPENBLAS_CORETYPE", ci.best_core, 1) != 0 || setenv(GUARD_VAR, ci.best_core, 1) != 0) return;
    if (say)
        fprintf(stderr, "lipt: OpenBLAS chose %s kernels (%s) on a CPU with %s; using %s kernels (set "
                "OPENBLAS_CORETYPE to override)\n", cls == 0 ? "generic" : "slower", core,
                isa_words(ci.best_class), ci.best_core);
    fflush(NULL);
    /* no signal may meet its default action between the exec and the new image's handlers */
    lipt_signals_hold_for_exec();
    execv("/proc/self/exe", argv);
    /* still here: the kernels stay as they are, for this run, which is worth a note wherever stderr goes */
    const int e = errno;
    lipt_signals_release_after_failed_exec();
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(GUARD_VAR);
    if (launcher_rank() == 0)
        fprintf(stderr, "lipt: note: could not restart with OPENBLAS_CORETYPE=%s (%s); running on the %s kernels: "
                "set OPENBLAS_CORETYPE=%s yourself for the faster ones\n", ci.best_core, strerror(e), core,
                ci.best_core);
#else
    (void)argv;
#endif
}
