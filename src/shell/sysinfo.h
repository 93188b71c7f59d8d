/* defines: the machine's description that lipt info --system and lipt bench print: the CPU, its features, the
 * kernels OpenBLAS and oneDNN run on it (lipt_cpuinfo), the thread count. */
#ifndef LIPT_SYSINFO_H
#define LIPT_SYSINFO_H

#include <stdio.h>

#include "cli.h"
#include "lipt/core.h"

/* Lines of text, each starting with `indent`: the CPU and its features; the kernels (OpenBLAS's core type, who
 * chose it, oneDNN's ISA) and the threads. */
void sysinfo_print(FILE *f, const lipt_cpuinfo *ci, const char *indent);
/* The same as an object "system" of j. */
void sysinfo_json(json_w *j, const lipt_cpuinfo *ci);

#endif
