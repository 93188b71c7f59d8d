/* The one description of a block's half-blocks (block_plan.h): which steps, in which order, for every model kind. */
#include "nn/block_plan.h"

#include <math.h>
#include <string.h>

static void push(lipt_half_desc *h, lipt_step_kind kind, int arg) {
    LIPT_CHECK(h->n_steps < LIPT_HALF_MAX_STEPS, "block plan: more than %d steps", LIPT_HALF_MAX_STEPS);
    if (kind == LIPT_STEP_ADD) h->add = h->n_steps;
    h->step[h->n_steps++] = (lipt_step){kind, arg};
}

lipt_half_desc lipt_block_half(const lipt_config *c, int layer, int which) {
    LIPT_CHECK(layer >= 0, "block plan: layer %d", layer);
    LIPT_CHECK(which == LIPT_BRANCH_ATTN || which == LIPT_BRANCH_FFN, "block plan: which = %d", which);
    const int attn = which == LIPT_BRANCH_ATTN, invertible = lipt_config_invertible(c);
    /* the half's own LayerNorm: ln1 for the attention, ln2 for the feed-forward; the invertible model has none */
    const int ln = attn ? 1 : 2, pre = !invertible && c->norm == LIPT_NORM_PRE, post = c->norm == LIPT_NORM_POST;
    lipt_half_desc h = {.which = which, .token_wise = !attn, .add = -1};
    if (attn && lipt_attn_info_of(c->attention)->contractive) {
        h.scale = LIPT_SCALE_WO;
        h.scale_c[0] = c->c;
    } else if (!attn && c->ffn == LIPT_FFN_CONTRACTIVE) {
        h.scale = LIPT_SCALE_W1W2; /* full budget: W1 to 1, W2 to c, so Lip <= c (else both to c: c²) */
        h.scale_c[0] = c->ffn_full_budget ? 1.0f : c->c;
        h.scale_c[1] = c->c;
    }
    h.inverse = c->coupling ? LIPT_INVERSE_SUBTRACT : invertible ? LIPT_INVERSE_FIXED_POINT : LIPT_INVERSE_NONE;
    /* additive coupling: the attention reads the second half and writes the first, the feed-forward reads the first
     * and writes the second, so each residual map is inverted exactly by one subtraction */
    if (c->coupling) push(&h, LIPT_STEP_KEEP_HALF, attn);
    if (pre) push(&h, LIPT_STEP_LN, ln);
    push(&h, LIPT_STEP_BRANCH, 0);
    if (c->coupling) push(&h, LIPT_STEP_KEEP_HALF, !attn);
    if (c->dropout > 0) push(&h, LIPT_STEP_DROPOUT, 0);
    if (c->coupling_grid) push(&h, LIPT_STEP_GRID, c->coupling_grid);
    push(&h, LIPT_STEP_ADD, 0);
    if (post) push(&h, LIPT_STEP_LN, ln); /* post-LN: LN1 after the attention's sum, LN2 after the feed-forward's */
    if (!attn && c->actnorm) push(&h, LIPT_STEP_ACTNORM, 0); /* ActNorm closes the block: exact inverse */
    return h;
}

void lipt_block_halves(const lipt_config *c, int layer, lipt_half_desc out[2]) {
    out[0] = lipt_block_half(c, layer, LIPT_BRANCH_ATTN);
    out[1] = lipt_block_half(c, layer, LIPT_BRANCH_FFN);
}

void lipt_half_undo_after(const lipt_layer *L, const lipt_half_desc *h, const float *y, float *z, size_t n, int D) {
    if (z != y) memcpy(z, y, n * sizeof(float));
    for (int i = h->n_steps - 1; i > h->add; i--) {
        LIPT_CHECK(h->step[i].kind == LIPT_STEP_ACTNORM, "block plan: step %d after the sum has no inverse",
                   (int)h->step[i].kind);
        /* ActNorm y = x exp(s) + b, undone exactly */
        for (size_t k = 0; k < n; k++) {
            const size_t c = k % (size_t)D;
            z[k] = (float)(((double)z[k] - L->an_b->data[c]) * exp(-(double)L->an_s->data[c]));
        }
    }
}
