/* defines: export of a lipt_params set as a .safetensors file (F32, registration order, string metadata). */
#ifndef LIPT_SAFETENSORS_H
#define LIPT_SAFETENSORS_H

#include "lipt/core.h"
#include "lipt/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *key;    /* UTF-8; "__metadata__" keys must be unique */
    const char *value;  /* UTF-8, any characters (JSON-escaped on output), e.g. the config text */
} lipt_st_meta;

/* Writes every tensor (trainable values and buffers) of a finalized params set, in registration order,
 * as dtype "F32" with its shape and data_offsets; meta (n_meta pairs, may be 0) goes into "__metadata__".
 * The header is space-padded so the data starts 8-byte aligned. Written atomically (PATH.tmp + rename). */
lipt_status lipt_safetensors_save(const char *path, const lipt_params *p, const lipt_st_meta *meta, int n_meta,
                                  lipt_error *err);

#ifdef __cplusplus
}
#endif
#endif
