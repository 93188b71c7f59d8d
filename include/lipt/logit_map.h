/* defines: logit maps, the elementwise functions a dot-product attention may apply to its logits before the softmax
 * (lipt_attention_dp_map; an attention kind names its map in the variant table, lipt_attn_info.logit_map), and the
 * maps lipt has. A map is its two row functions, in one file of src/ops/ (logit_map_<name>.c); the attention
 * kernels (materialising, tiled, and the decoder's one-query row) call them, so a new map touches no kernel. */
#ifndef LIPT_LOGIT_MAP_H
#define LIPT_LOGIT_MAP_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lipt_logit_map {
    const char *name; /* as `lipt info --variants` and `lipt export` write it, and the PyTorch module reads it */
    /* z[0..n) <- f(z), in place, for the map's parameter p */
    void (*forward_row)(float *z, int n, float p);
    /* g[0..n) *= f'(x) at the logits x BEFORE the map. The pre-map value rather than f(x): the backward recomputes
     * the logits from q and k anyway (the probabilities it keeps do not determine them), and f' of every map is a
     * function of x, not always of f(x) (a clamp's f(x) = c does not tell x = c from x > c). */
    void (*grad_row)(const float *x, float *g, int n, float p);
    /* whether p is a parameter of the map (the op checks it; NULL: any finite p) */
    int (*param_ok)(float p);
    const char *param_rule; /* what param_ok accepts, for the op's message: "a cap > 0" */
} lipt_logit_map;

/* The maps (one line each; src/ops/logit_map_<name>.c). */
extern const lipt_logit_map lipt_logit_map_softcap; /* "softcap": p tanh(z / p), p > 0 (Gemma 2's logit soft cap) */

#ifdef __cplusplus
}
#endif
#endif
