/* Training batcher (seeded random windows, checkpointable state) and the evaluation window iterator. */
#include "lipt/data.h"

#include <string.h>

lipt_status lipt_batcher_init(lipt_batcher *b, const lipt_tok *tok, size_t n, int B, int T, uint64_t seed,
                              lipt_error *err) {
    memset(b, 0, sizeof *b);
    if (B < 1 || T < 1) return lipt_fail(err, LIPT_ERR_ARG, "batcher: batch size %d and context %d must be >= 1", B, T);
    if (n < (size_t)T + 1)
        return lipt_fail(err, LIPT_ERR_ARG, "batcher: the split has %zu tokens, a training window needs T+1 = %d", n, T + 1);
    b->tok = tok;
    b->n = n;
    b->B = B;
    b->T = T;
    b->st.seed = seed;
    lipt_rng_seed(&b->st.rng, seed);
    return LIPT_OK;
}

void lipt_batcher_next(lipt_batcher *b, int32_t *inputs, int32_t *targets, size_t *starts) {
    const size_t T = (size_t)b->T;
    for (int i = 0; i < b->B; i++) {
        size_t s = (size_t)lipt_rng_below(&b->st.rng, (uint64_t)(b->n - T)); /* s + T <= n - 1 */
        const lipt_tok *w = b->tok + s;
        int32_t *in = inputs + (size_t)i * T, *tg = targets + (size_t)i * T;
        for (size_t t = 0; t < T; t++) {
            in[t] = w[t];
            tg[t] = w[t + 1];
        }
        if (starts) starts[i] = s;
    }
    b->st.batches++;
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void lipt_batcher_state_pack(const lipt_batcher_state *st, uint8_t out[LIPT_BATCHER_STATE_BYTES]) {
    memcpy(out, "LBS1", 4);
    put64(out + 4, st->seed);
    put64(out + 12, st->batches);
    for (int i = 0; i < 4; i++) put64(out + 20 + 8 * i, st->rng.s[i]);
}

lipt_status lipt_batcher_state_unpack(lipt_batcher_state *st, const uint8_t *in, size_t n, lipt_error *err) {
    if (n != LIPT_BATCHER_STATE_BYTES || memcmp(in, "LBS1", 4) != 0)
        return lipt_fail(err, LIPT_ERR_FORMAT, "batcher state: expected %d bytes starting with LBS1, got %zu bytes",
                         LIPT_BATCHER_STATE_BYTES, n);
    lipt_batcher_state t;
    t.seed = get64(in + 4);
    t.batches = get64(in + 12);
    for (int i = 0; i < 4; i++) t.rng.s[i] = get64(in + 20 + 8 * i);
    if ((t.rng.s[0] | t.rng.s[1] | t.rng.s[2] | t.rng.s[3]) == 0)
        return lipt_fail(err, LIPT_ERR_FORMAT, "batcher state: all-zero generator state (xoshiro would be stuck)");
    *st = t;
    return LIPT_OK;
}

lipt_status lipt_eval_iter_init(lipt_eval_iter *it, size_t n, int T, int stride, lipt_error *err) {
    memset(it, 0, sizeof *it);
    if (T < 1 || stride < 1 || stride > T)
        return lipt_fail(err, LIPT_ERR_ARG, "evaluation: window %d and stride %d must satisfy 1 <= stride <= window", T,
                         stride);
    it->n = n;
    it->T = T;
    it->stride = stride;
    it->next = 1; /* token 0 is context only */
    return LIPT_OK;
}

int lipt_eval_iter_next(lipt_eval_iter *it, lipt_eval_window *w) {
    const size_t n = it->n, T = (size_t)it->T, S = (size_t)it->stride, u = it->next;
    if (n < 2 || u >= n) return 0;
    size_t start, len;
    if (S == T || u == 1) {
        /* non-overlapping, or the first sliding window: score everything from token u on */
        start = u - 1;
        len = n - 1 - start < T ? n - 1 - start : T;
    } else {
        /* sliding: end stride targets on, reach back as far as the window allows */
        size_t e = u + S - 1 < n - 1 ? u + S - 1 : n - 1;
        len = e < T ? e : T;
        start = e - len;
    }
    w->start = start;
    w->len = (int)len;
    w->score_from = (int)(u - start - 1);
    it->next = start + len + 1;
    return 1;
}

size_t lipt_eval_iter_count(const lipt_eval_iter *it) {
    lipt_eval_iter c = *it;
    lipt_eval_window w;
    size_t k = 0;
    while (lipt_eval_iter_next(&c, &w)) k++;
    return k;
}

void lipt_eval_window_fill(const lipt_tok *tok, const lipt_eval_window *w, int32_t *inputs, int32_t *targets) {
    const lipt_tok *p = tok + w->start;
    for (int t = 0; t < w->len; t++) {
        inputs[t] = p[t];
        targets[t] = p[t + 1];
    }
}
