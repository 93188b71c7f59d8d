/* Next-token sampling from a row of logits: greedy argmax, or softmax at a temperature, optionally restricted to the
 * top k logits (the k-th found by quickselect). */
#include "lipt/sample.h"

#include <math.h>
#include <string.h>

/* The k-th largest (k in [1, n]) of a[0..n) by quickselect; reorders a. */
static float kth_largest(float *a, int n, int k) {
    int lo = 0, hi = n - 1;
    const int target = k - 1;
    while (lo < hi) {
        const float pivot = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                const float t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (target <= j) hi = j;
        else if (target >= i) lo = i;
        else break;
    }
    return a[target];
}

int lipt_sample_next(const float *logits, int n, double temperature, int top_k, lipt_rng *rng, float *work) {
    LIPT_CHECK(n >= 1, "sample: %d allowed ids", n);
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    if (!(temperature > 0)) return best;
    float thr = -INFINITY;
    if (top_k > 0 && top_k < n) {
        memcpy(work, logits, (size_t)n * sizeof(float));
        thr = kth_largest(work, n, top_k);
    }
    const double mx = logits[best], invt = 1.0 / temperature;
    double sum = 0;
    for (int i = 0; i < n; i++)
        if (logits[i] >= thr) sum += exp((logits[i] - mx) * invt);
    const double u = lipt_rng_uniform(rng) * sum;
    double cum = 0;
    int last = best;
    for (int i = 0; i < n; i++)
        if (logits[i] >= thr) {
            cum += exp((logits[i] - mx) * invt);
            last = i;
            if (u < cum) return i;
        }
    return last; /* rounding: u landed at the very end */
}
