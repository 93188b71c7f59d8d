/* Names typed by a user and the names lipt knows: one spelling rule ('_' and '-' alike) and the "did you mean"
 * suggestion of every lookup by name (options, config keys, commands, corpora). */
#include <ctype.h>
#include <string.h>

#include "lipt/core.h"

static int fold(unsigned char c) { return c == '_' ? '-' : tolower(c); }

int lipt_name_eq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if ((*a == '_' ? '-' : *a) != (*b == '_' ? '-' : *b)) return 0;
    return !*a && !*b;
}

/* Edit distance with adjacent transpositions ("stpes" is one step from "steps"), case and '_'/'-' folded; names
 * longer than 63 characters are compared on their first 63. */
static int distance(const char *s, const char *t) {
    enum { M = 64 };
    int n = (int)strlen(s), m = (int)strlen(t);
    if (n > M - 1) n = M - 1;
    if (m > M - 1) m = M - 1;
    int d[M][M];
    for (int i = 0; i <= n; i++) d[i][0] = i;
    for (int j = 0; j <= m; j++) d[0][j] = j;
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= m; j++) {
            const int same = fold((unsigned char)s[i - 1]) == fold((unsigned char)t[j - 1]);
            int v = d[i - 1][j - 1] + !same;
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && fold((unsigned char)s[i - 1]) == fold((unsigned char)t[j - 2]) &&
                fold((unsigned char)s[i - 2]) == fold((unsigned char)t[j - 1]) && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

/* 1 when word (3 characters or more) starts name, case and '_'/'-' folded. */
static int is_prefix(const char *word, const char *name) {
    size_t i = 0;
    for (; word[i] && name[i]; i++)
        if (fold((unsigned char)word[i]) != fold((unsigned char)name[i])) return 0;
    return !word[i] && i >= 3;
}

const char *lipt_nearest_name(const char *word, const char *const *names, int n) {
    if (!word || !*word) return NULL;
    /* a third of the word's length, at least 1 and at most 3: a short word with 2 changes is another word */
    const int len = (int)strlen(word);
    const int limit = len < 3 ? 1 : len / 3 > 3 ? 3 : len / 3 < 1 ? 1 : len / 3;
    const char *best = NULL;
    int best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        if (!names[i]) continue;
        const int d = distance(word, names[i]);
        if (d < best_d) best = names[i], best_d = d;
    }
    if (best) return best;
    for (int i = 0; i < n; i++)
        if (names[i] && is_prefix(word, names[i])) return names[i];
    return NULL;
}
