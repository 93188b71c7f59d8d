/* The op table, generated from LIPT_OP_LIST so that enum, name and backward cannot drift apart. */
#include "lipt/autograd.h"

#define LIPT_X_DECL(E, n) void lipt_##n##_backward(lipt_ctx *ctx, lipt_node *node);
LIPT_OP_LIST(LIPT_X_DECL)
#undef LIPT_X_DECL

const lipt_op_info lipt_ops[LIPT_OP_COUNT] = {
#define LIPT_X_ROW(E, n) [LIPT_OP_##E] = {#n, lipt_##n##_backward},
    LIPT_OP_LIST(LIPT_X_ROW)
#undef LIPT_X_ROW
};

_Static_assert(sizeof lipt_ops / sizeof lipt_ops[0] == LIPT_OP_COUNT, "op table size matches the op enum");
