/* STUB: to be replaced by the real kernels. */
#include "lipt/ops.h"

lipt_tensor *lipt_add(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "add");
}
void lipt_add_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "add");
}

lipt_tensor *lipt_sub(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "sub");
}
void lipt_sub_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "sub");
}

lipt_tensor *lipt_mul(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "mul");
}
void lipt_mul_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "mul");
}

lipt_tensor *lipt_scale(lipt_ctx *ctx, lipt_tensor *a, float s) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "scale");
}
void lipt_scale_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "scale");
}

lipt_tensor *lipt_sum(lipt_ctx *ctx, lipt_tensor *a) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "sum");
}
void lipt_sum_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "sum");
}

lipt_tensor *lipt_mean(lipt_ctx *ctx, lipt_tensor *a) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "mean");
}
void lipt_mean_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "mean");
}

lipt_tensor *lipt_max(lipt_ctx *ctx, lipt_tensor *a) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "max");
}
void lipt_max_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "max");
}

lipt_tensor *lipt_sqrt(lipt_ctx *ctx, lipt_tensor *a) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "sqrt");
}
void lipt_sqrt_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "sqrt");
}

lipt_tensor *lipt_contract_factor(lipt_ctx *ctx, lipt_tensor *x, float c) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "contract_factor");
}
void lipt_contract_factor_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "contract_factor");
}

