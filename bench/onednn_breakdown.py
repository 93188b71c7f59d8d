#!/usr/bin/env python3
"""Where oneDNN's time goes in a lipt run: reads ONEDNN_VERBOSE=1 output (stdin or a file) and sums the execution
times oneDNN itself reports, per implementation (e.g. brg:avx512_core_amx_bf16, gemm:jit) and per problem shape.

    ONEDNN_VERBOSE=1 build/lipt bench --config models/ptb-dp.cfg --precision bf16 --skip-eval --skip-sample \
        --gemm-size 0 --runs 1 --warmup 1 > /tmp/v.log
    bench/onednn_breakdown.py /tmp/v.log [--steps N] [--top K]

--steps N divides the sums by the number of training steps the log covers (warm-up and timed: (warmup + runs) x
steps-per-run), so the figures read as milliseconds per step. Only `exec` lines are counted (primitive creation is
reported apart)."""
import argparse
import collections
import sys


def parse(lines):
    """Yields (kind, impl, shape, ms) for every exec line of oneDNN 2.x/3.x verbose output."""
    for line in lines:
        if not line.startswith("onednn_verbose,") and not line.startswith("dnnl_verbose,"):
            continue
        f = line.rstrip("\n").split(",")
        # 2.x: onednn_verbose,exec,cpu,KIND,IMPL,PROP,MEMORY,ATTRS,AUX,SHAPE,MS
        # 3.x adds a timestamp and "primitive" after the prefix; find "exec" and count from there
        try:
            i = f.index("exec")
        except ValueError:
            continue
        rest = f[i + 1:]
        if rest and rest[0] not in ("cpu", "gpu"):
            continue
        if len(rest) < 9:
            continue
        try:
            ms = float(rest[-1])
        except ValueError:
            continue
        yield rest[1], rest[2], rest[-2], ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log", nargs="?", help="verbose log (default: stdin)")
    ap.add_argument("--steps", type=float, default=1.0, help="training steps the log covers (default 1)")
    ap.add_argument("--top", type=int, default=12, help="shapes to list (default 12)")
    a = ap.parse_args()
    src = open(a.log, encoding="utf-8", errors="replace") if a.log else sys.stdin
    by_impl = collections.defaultdict(lambda: [0, 0.0])
    by_shape = collections.defaultdict(lambda: [0, 0.0])
    for kind, impl, shape, ms in parse(src):
        by_impl[(kind, impl)][0] += 1
        by_impl[(kind, impl)][1] += ms
        by_shape[(impl, shape)][0] += 1
        by_shape[(impl, shape)][1] += ms
    total = sum(v[1] for v in by_impl.values())
    if not by_impl:
        sys.exit("no oneDNN exec lines found: was ONEDNN_VERBOSE=1 set, and does the build use oneDNN?")
    s = a.steps
    print(f"oneDNN exec time: {total / s:.2f} ms per step ({sum(v[0] for v in by_impl.values()) / s:.0f} calls)")
    print("\nper implementation           calls/step   ms/step   share")
    for (kind, impl), (n, ms) in sorted(by_impl.items(), key=lambda kv: -kv[1][1]):
        print(f"  {kind + ' ' + impl:<28} {n / s:10.0f} {ms / s:9.2f} {100 * ms / total:6.1f} %")
    print(f"\ntop {a.top} shapes                                    calls/step   ms/step   GFLOP/s (matmul shapes)")
    for (impl, shape), (calls, ms) in sorted(by_shape.items(), key=lambda kv: -kv[1][1])[:a.top]:
        mnk = matmul_dims(shape)
        rate = f"{2.0 * mnk[0] * mnk[1] * mnk[2] * calls / (ms * 1e-3) / 1e9:9.1f}" if mnk and ms > 0 else ""
        print(f"  {impl:<26} {shape:<28} {calls / s:10.0f} {ms / s:9.2f} {rate}")


def matmul_dims(shape):
    """(M, N, K) of a matmul shape "[b x]MxK:[b x]KxN:MxN" or a gemm shape "m2048n192k704"; None otherwise."""
    try:
        if ":" in shape:
            a, b = shape.split(":")[:2]
            m, k = (int(x) for x in a.split("x")[-2:])
            n = int(b.split("x")[-1])
            return m, n, k
        if shape.startswith("m") and "n" in shape and "k" in shape:
            m, rest = shape[1:].split("n", 1)
            n, k = rest.split("k", 1)
            return int(m), int(n), int(k.split("_")[0])
    except ValueError:
        pass
    return None


if __name__ == "__main__":
    main()
