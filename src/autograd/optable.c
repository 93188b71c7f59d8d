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

/* The table is declared with LIPT_OP_COUNT rows, so its size says nothing: count the rows of LIPT_OP_LIST instead.
 * An op added to the enum by hand, not through the list, has no name and no backward, and fails here. */
enum {
#define LIPT_X_ONE(E, n) +1
    LIPT_OP_NAMED = 0 LIPT_OP_LIST(LIPT_X_ONE)
#undef LIPT_X_ONE
};
_Static_assert((int)LIPT_OP_NAMED == (int)LIPT_OP_COUNT, "every op of lipt_op_id needs its row in LIPT_OP_LIST");
