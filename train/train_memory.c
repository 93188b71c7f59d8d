/* lipt train's memory check, before the model and the step's arena are allocated: what the run needs against what
 * this process may use (lipt_train_memory_estimate, src/train/memory.c), refused with what to lower. */
#include "lipt/train.h"
#include "train_setup.h"

int train_check_memory(trainer *t, const train_settings *s, size_t *arena_bytes) {
    lipt_error err = {0};
    lipt_train_memory m;
    if (lipt_train_memory_estimate(&t->cfg, s->batch, t->K, t->dist->local_size, s->recompute,
                                   s->memory == CLI_MEMORY_INVERT ? &s->rev : NULL, &m, &err) != LIPT_OK)
        return cli_fail("train", &err);
    *arena_bytes = (size_t)m.reserve;
    return m.need <= m.room ? 0 : cli_memory_refuse("train", &m, s->batch, t->cfg.seq_len, s->memory);
}
