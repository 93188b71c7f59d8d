#!/usr/bin/env bash
# The installed library as another program uses it: `cmake --install` into a temporary prefix, then a small C
# program compiled with `pkg-config --cflags --libs lipt` trains a tiny model (loss must fall) through the public API.
#   tests/install_test.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: install_test.sh BUILD_DIR}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/x" >/dev/null
PC=$(dirname "$(find "$TMP/x" -name lipt.pc | head -n 1)")
[ -n "$PC" ] || { echo "FAIL: no lipt.pc installed"; exit 1; }
cat > "$TMP/prog.c" <<'C'
#include <lipt/lipt.h>
#include <stdio.h>
int main(void) {
    lipt_config cfg; lipt_config_default(&cfg); cfg.vocab_size = 8; cfg.d_model = 16; cfg.d_ff = 32; cfg.seq_len = 8;
    lipt_model m; lipt_error err = {0}; lipt_adamw opt; lipt_ctx ctx; lipt_step_result r; double first = 0;
    if (lipt_model_init(&m, &cfg, &err) != LIPT_OK) { fprintf(stderr, "%s\n", err.msg); return 1; }
    lipt_adamw_config ac = lipt_adamw_defaults(); ac.lr = 1e-2; lipt_adamw_init(&opt, &ac); lipt_ctx_init(&ctx, 1 << 20, 1);
    int in[16], tg[16]; for (int i = 0; i < 16; i++) in[i] = i % 8, tg[i] = (i + 1) % 8;
    lipt_step_opts so = {1e-2, 1.0, cfg.power_iters, NULL, 0, 0};
    for (int s = 0; s < 60; s++) { if (lipt_train_step(&ctx, &m, &opt, in, tg, 2, 8, &so, &r, &err)) return 1; if (!s) first = r.loss; }
    printf("loss %.4f -> %.4f\n", first, r.loss); lipt_ctx_free(&ctx); lipt_model_free(&m); return r.loss < 0.5 * first ? 0 : 1;
}
C
export PKG_CONFIG_PATH="$PC"
# shellcheck disable=SC2046
cc -std=c11 -O2 "$TMP/prog.c" -o "$TMP/prog" $(pkg-config --cflags --libs lipt)
"$TMP/prog"
echo "ok   installed library: headers, liblipt and lipt.pc under $TMP/x; a program built with pkg-config trains"
