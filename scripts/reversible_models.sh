# Sourced by scripts/reversible_{bench,paired,cap}.sh: the two reversible models they compare, by name (REPO set by
# the caller). fixed-point: the certified invertible model (ptb-contractive.cfg), inverted by fixed-point iteration;
# coupling: additive coupling blocks with unconstrained DP attention (e-coupling-dp.cfg), inverted exactly.
config() { [ "$1" = fixed-point ] && echo "$REPO/models/ptb-contractive.cfg" || echo "$REPO/models/ablation/e-coupling-dp.cfg"; }
extra() { [ "$1" = fixed-point ] && true || echo "--coupling_grid 16"; }
