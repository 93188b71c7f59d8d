/* How many of the CPUs lipt may use are kept busy by other programs. The default thread count leaves those CPUs to
 * them: OpenMP and OpenBLAS threads that wait for each other by spinning lose most of their time slices when they
 * share a core with another busy program (ptb-demo ran 6.3x slower on 2 threads than on 1 beside two busy loops). */
#define _GNU_SOURCE
#include "lipt/core.h"

#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int lipt_cpus_usable(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int lipt_cpus_per_rank(int ranks) {
    /* the affinity mask, not the machine's CPUs: under taskset or a cpuset the ranks share only what they may use */
    const int n = lipt_cpus_usable() / (ranks > 1 ? ranks : 1);
    return n > 1 ? n : 1;
}

/* Runnable tasks on the whole system (/proc/stat's procs_running, which counts the reading thread); -1 if unknown. */
static int procs_running(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "procs_running ", 14) == 0) {
            n = atoi(line + 14);
            break;
        }
    fclose(f);
    return n;
}

/* This process's runnable threads (state R in /proc/self/task/TID/stat): its own spinning workers are not load. */
static int own_running(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return 1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char path[64], buf[256];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        const size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses; the state follows the last ')' */
        if (p && p[1] == ' ' && p[2] == 'R') n++;
    }
    closedir(d);
    return n > 0 ? n : 1;
}

double lipt_cpus_busy_elsewhere(void) {
    /* procs_running is system-wide: where lipt may use only part of the machine (a cpuset), load elsewhere cannot
     * be told from load on its own CPUs, so nothing is counted. */
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0 && lipt_cpus_usable() < online) return 0;
    /* instantaneous counts, averaged over 8 readings 1 ms apart */
    double sum = 0;
    int got = 0;
    for (int i = 0; i < 8; i++) {
        if (i) nanosleep(&(struct timespec){0, 1000000}, NULL);
        const int all = procs_running();
        if (all < 0) continue;
        const int other = all - own_running();
        sum += other > 0 ? other : 0;
        got++;
    }
    return got ? sum / got : 0;
}
