#!/usr/bin/python3
"""lipt against the same model in PyTorch: speed, memory, and agreement of the loss on exported weights.

Two parts (bench/README.md has the full description):

1. Speed and memory. Runs `lipt bench --json ARGS`, then the same benchmark in PyTorch in a fresh process, one
   after the other so they never compete for the cores: the identical model (python/lipt_torch.py: same
   variant, shapes, lipt's initialisation scheme), the same batch, runs, warm-up, steps per run and thread count
   (torch.set_num_threads), the same training step as `lipt train` (forward, zero_grad, backward, gradient-norm
   clipping at 1, AdamW lr 1e-3 betas (0.9, 0.98) eps 1e-8 weight decay 0 in lipt's two groups, power-iteration
   refresh), the no-grad evaluation forward with the loss, uncached sampling (a full forward over the window per
   token; the PyTorch model has no incremental cache) and torch.mm on N x N. Prints each figure for both and the
   ratio lipt/PyTorch.

2. Agreement, for every variant (dp, l2, l2-tied, contractive-l2 with the inf- and the 2-norm bound) at the sizes
   of models/tiny.cfg: `lipt train` runs 100 steps on a small synthetic text, `lipt export` writes its weights as
   safetensors, `lipt eval` gives the mean cross-entropy over the first B*T symbols of the training split (one batch
   of B non-overlapping windows of T); the PyTorch model loaded from the safetensors file must give the same loss
   on the same batch within 1e-4 (relative).

With --bf16 the speed comparison is the bf16 one: lipt bench runs with --precision bf16 (unless the bench arguments
choose another, e.g. -- --precision bf16-emulated on a CPU without AVX512_BF16) and PyTorch runs its forward passes
(training, evaluation, sampling) under torch.autocast(device_type="cpu", dtype=torch.bfloat16), its backward
following, and its GEMM reference on bf16 tensors.

Usage (bench/compare_pytorch.sh installs python3-torch and builds lipt first):
    /usr/bin/python3 bench/compare_pytorch.py --lipt build/lipt --threads 2 [--bf16] [--skip-agreement] [--skip-bench]
        [--json FILE] [-- LIPT BENCH ARGS, e.g. --config models/ptb-dp.cfg --batch 32]
"""
import contextlib
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source tree clean
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))

AGREE_TOL = 1e-4
AGREE_STEPS, AGREE_LR = 100, "1e-2"  # lipt train on the agreement text
TRAIN_LR, TRAIN_BETAS, TRAIN_EPS, TRAIN_WD, TRAIN_CLIP = 1e-3, (0.9, 0.98), 1e-8, 0.0, 1.0


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kilobytes


def vm_hwm_mb():
    """VmHWM of /proc/self/status: the peak resident set of this process image (ru_maxrss also carries the parent's
    size at fork time across exec). None where /proc is not available."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def loaded_blas():
    """The BLAS libraries mapped into this process (what torch.mm runs on)."""
    try:
        with open("/proc/self/maps") as f:
            libs = {ln.split()[-1] for ln in f if "blas" in ln.rsplit("/", 1)[-1]}
        return sorted(libs)
    except OSError:
        return []


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


# ----------------------------------------------------------------------------- the PyTorch benchmark (worker)

def torch_bench(spec: dict) -> dict:
    """The benchmark of `lipt bench` in PyTorch; spec is lipt bench's JSON (config, sizes, what was measured)."""
    rss_start, hwm_start = rss_mb(), vm_hwm_mb()  # after `import torch` (done by the caller) and nothing else
    import numpy as np
    import torch
    from lipt_torch import LiptConfig, LiptTransformer

    threads = int(spec["threads"])
    torch.set_num_threads(threads)
    torch.manual_seed(int(spec["seed"]))
    cfg = LiptConfig(**spec["config"])
    B, T = int(spec["batch"]), int(spec["seq_len"])
    runs, warmup, steps = int(spec["runs"]), int(spec["warmup"]), int(spec["steps_per_run"])
    n_sample, gemm_n = int(spec["sample_tokens"]), int(spec["gemm_size"])
    wanted = {k: v is not None for k, v in spec["tokens_per_s"].items()}
    bf16 = bool(spec.get("torch_autocast_bf16"))
    # PyTorch's own bf16 mode on CPU: matmuls (and the ops autocast lists) in bf16, the rest float32
    amp = (lambda: torch.autocast(device_type="cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    model = LiptTransformer(cfg)
    model.init_weights(cfg.init_seed)
    rs = np.random.RandomState(int(spec["seed"]))
    toks = torch.as_tensor(rs.randint(0, cfg.vocab_size, size=(steps, B, T + 1)).astype(np.int64))
    batches = [(toks[s, :, :T].contiguous(), toks[s, :, 1:].contiguous()) for s in range(steps)]
    rss_model = rss_mb()
    out = {"torch_version": torch.__version__, "threads": torch.get_num_threads(), "tokens_per_s": {},
           "ms_per_step": {}, "ms_per_token": {}, "per_run": {}}

    def timed(one_run, n_units):
        secs = []
        for r in range(-warmup, runs):
            t0 = time.perf_counter()
            one_run()
            dt = time.perf_counter() - t0
            if r >= 0:
                secs.append(dt)
        rates = [n_units / s for s in secs]
        return median(rates), median(secs) / n_units, rates

    last_loss = [float("nan")]
    if wanted.get("train"):
        params = [p for p in model.parameters()]
        opt = torch.optim.AdamW(model.param_groups(TRAIN_WD), lr=TRAIN_LR, betas=TRAIN_BETAS, eps=TRAIN_EPS)
        model.train()

        def train_run():
            for ids, tg in batches:
                with amp():
                    _, loss = model(ids, tg)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, TRAIN_CLIP)
                opt.step()
                model.refresh_norms(cfg.power_iters)
            last_loss[0] = float(loss)

        med, sec, rates = timed(train_run, B * T * steps)
        out["tokens_per_s"]["train"], out["ms_per_step"]["train"] = med, 1e3 * sec * B * T
        out["per_run"]["train"] = rates
    rss_train = rss_mb()
    if wanted.get("eval"):
        model.eval()

        @torch.no_grad()
        def eval_run():
            for ids, tg in batches:
                with amp():
                    model(ids, tg)

        med, sec, rates = timed(eval_run, B * T * steps)
        out["tokens_per_s"]["eval"], out["ms_per_step"]["eval"] = med, 1e3 * sec * B * T
        out["per_run"]["eval"] = rates
    rss_eval = rss_mb()
    if wanted.get("sample_uncached"):
        model.eval()
        gen = torch.Generator().manual_seed(int(spec["seed"]) + 7)
        keep = T // 2  # lipt_decoder_keep: the window policy of lipt sample
        flat = toks.reshape(-1)
        run_no = [0]

        @torch.no_grad()
        def sample_run():
            win = [int(flat[run_no[0] % flat.numel()])]
            run_no[0] += 1
            for i in range(n_sample):
                with amp():
                    logits, _ = model(torch.tensor([win], dtype=torch.int64))
                logits = logits.float()
                tok = int(torch.multinomial(torch.softmax(logits[0, -1], -1), 1, generator=gen))
                if i + 1 == n_sample:
                    break
                if len(win) == T:
                    win = win[T - keep:]
                win.append(tok)

        med, sec, rates = timed(sample_run, n_sample)
        out["tokens_per_s"]["sample_uncached"], out["ms_per_token"]["sample_uncached"] = med, 1e3 * sec
        out["per_run"]["sample_uncached"] = rates
    rss_sample = rss_mb()
    hwm_peak = vm_hwm_mb()
    if gemm_n > 0:
        g = torch.Generator().manual_seed(11)
        dt = torch.bfloat16 if bf16 else torch.float32
        A = (torch.rand(gemm_n, gemm_n, generator=g) * 2 - 1).to(dt)
        Bm = (torch.rand(gemm_n, gemm_n, generator=g) * 2 - 1).to(dt)
        C = torch.empty(gemm_n, gemm_n, dtype=dt)
        torch.mm(A, Bm, out=C)
        t0 = time.perf_counter()
        torch.mm(A, Bm, out=C)
        reps = max(1, math.ceil(0.05 / max(time.perf_counter() - t0, 1e-9)))
        rates = []
        for r in range(-max(warmup, 1), runs):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(A, Bm, out=C)
            dt = (time.perf_counter() - t0) / reps
            if r >= 0:
                rates.append(2.0 * gemm_n ** 3 / dt * 1e-9)
        out["gemm_gflops"] = median(rates)
        out["per_run"]["gemm_gflops"] = rates
    out["final_train_loss"] = last_loss[0]
    out["autocast_bf16"] = bf16
    out["blas"] = loaded_blas()
    out["openblas_num_threads"] = os.environ.get("OPENBLAS_NUM_THREADS")
    out["peak_rss_mb"] = rss_sample
    out["vm_hwm_mb"] = {"start": hwm_start, "peak": hwm_peak}
    out["rss_high_water_mb"] = {"start": rss_start, "model": rss_model, "train": rss_train, "eval": rss_eval,
                                "sample": rss_sample}
    return out


# ----------------------------------------------------------------------------- speed comparison

def run_cmd(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit(f"error: {' '.join(cmd)} exited with {r.returncode}")
    return r.stdout


def compare_speed(lipt: str, threads: int, bench_args, bf16: bool = False) -> dict:
    bench_args = list(bench_args)
    if bf16 and not any(a == "--precision" or a.startswith("--precision=") for a in bench_args):
        bench_args += ["--precision", "bf16"]
    if bf16 and "--paired" not in bench_args:
        bench_args += ["--paired"]  # lipt's own float32 runs interleaved: its bf16 / float32 ratio seconds apart
    cmd = [lipt, "bench", "--json", "--threads", str(threads)] + bench_args
    print("== lipt:    " + " ".join(cmd), flush=True)
    lj = json.loads(run_cmd(cmd))
    print("== PyTorch: the same benchmark in a fresh process (%s)%s" % (
        sys.executable, ", under torch.autocast(device_type='cpu', dtype=torch.bfloat16)" if bf16 else ""), flush=True)
    lj["torch_autocast_bf16"] = bf16
    wcmd = [sys.executable, os.path.abspath(__file__), "--worker"]
    # torch.set_num_threads does not reach the pthread OpenBLAS that Debian's torch maps (it would run every GEMM
    # on all cores): its own variable must be set before the library loads
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    tj = json.loads(run_cmd(wcmd, input=json.dumps(lj), env=env))
    c = lj["config"]
    print("model: %s attention, %s ffn, %s, %d layers, d_model %d, %d heads, d_ff %d, seq_len %d, vocab %d; "
          "batch %d; %d threads (lipt) / %d (PyTorch %s); median of %d runs after %d warm-up, %d steps per run"
          % (c["attention"], c["ffn"], c["activation"], c["n_layers"], c["d_model"], c["n_heads"], c["d_ff"],
             c["seq_len"], c["vocab_size"], lj["batch"], lj["threads"], tj["threads"], tj["torch_version"],
             lj["runs"], lj["warmup"], lj["steps_per_run"]))
    print("precision: lipt %s; PyTorch %s" % (lj.get("precision", "float32"),
                                             "bf16 autocast" if tj.get("autocast_bf16") else "float32"))
    rows = []

    def row(name, a, b, unit, note=""):
        ratio = a / b if (a is not None and b) else None
        rows.append((name, a, b, ratio, unit, note))

    lt, tt = lj["tokens_per_s"], tj["tokens_per_s"]
    row("train tokens/s", lt["train"], tt.get("train"), "tok/s", "forward+backward+clip+AdamW+norm refresh")
    row("eval tokens/s", lt["eval"], tt.get("eval"), "tok/s", "no-grad forward with the loss")
    row("sample tokens/s, no cache", lt["sample_uncached"], tt.get("sample_uncached"), "tok/s",
        "full forward over the window per token")
    row("sample tokens/s, lipt cached", lt["sample_cached"], None, "tok/s", "PyTorch model has no cache")
    gf = lj["model_gflop_per_token"]
    for k in ("train", "eval"):
        a = lt[k] * gf[k] if lt[k] is not None else None
        b = tt[k] * gf[k] if tt.get(k) is not None else None
        row(f"achieved GFLOP/s, {k}", a, b, "GFLOP/s", "same FLOP count for both (bench/README.md)")
    if tj.get("autocast_bf16"):
        sgemm = "%.4g" % lj["gemm_gflops"] if lj["gemm_gflops"] is not None else "-"
        row("GEMM GFLOP/s, bf16", lj.get("gemm_precision_gflops"), tj.get("gemm_gflops"), "GFLOP/s",
            "lipt at its --precision, torch.mm on bf16 tensors; N = %d; lipt's SGEMM: %s" % (lj["gemm_size"], sgemm))
    else:
        row("SGEMM / torch.mm GFLOP/s", lj["gemm_gflops"], tj.get("gemm_gflops"), "GFLOP/s",
            "N = %d" % lj["gemm_size"])
    pf = lj.get("paired_float32") or {}
    if pf.get("train_ratio") is not None:
        print("lipt %s / lipt float32 (--paired: runs interleaved, median of the per-run ratios): train %.3f, eval %s"
              % (lj["precision"], pf["train_ratio"],
                 "%.3f" % pf["eval_ratio"] if pf.get("eval_ratio") is not None else "-"))
    lh, th = lj["vm_hwm_mb"], tj["vm_hwm_mb"]
    if lh["peak"] is not None and th["peak"] is not None:
        row("peak RSS (VmHWM)", lh["peak"], th["peak"], "MB", "whole process; PyTorch includes the torch import")
        row("peak RSS above baseline", lh["peak"] - lh["start"], th["peak"] - th["start"], "MB",
            "lipt: above its start; PyTorch: above the RSS after `import torch`")
    row("peak RSS (ru_maxrss)", lj["peak_rss_mb"], tj["peak_rss_mb"], "MB",
        "as each reports it; includes the parent's size at fork")
    fmt = lambda v: "-" if v is None else ("%.4g" % v)
    print("%-30s %12s %12s %12s  %s" % ("figure", "lipt", "PyTorch", "lipt/PyTorch", ""))
    for name, a, b, ratio, unit, note in rows:
        print("%-30s %12s %12s %12s  %s %s" % (name, fmt(a), fmt(b), fmt(ratio), unit, "(" + note + ")" if note else ""))
    print("PyTorch BLAS: %s (OPENBLAS_NUM_THREADS=%s); lipt: OpenBLAS, %s" % (
        ", ".join(tj["blas"]) or "?", tj["openblas_num_threads"],
        "OpenMP build" if lj["blas_openmp"] else "non-OpenMP build"))
    print("final training loss after the timed steps: lipt %.4f, PyTorch %.4f (random tokens: about ln V = %.4f)"
          % (lj["final_train_loss"] if lj["final_train_loss"] is not None else float("nan"),
             tj["final_train_loss"], math.log(c["vocab_size"])))
    return {"lipt": lj, "pytorch": tj,
            "ratio": {name: ratio for name, _, _, ratio, _, _ in rows}}


# ----------------------------------------------------------------------------- agreement of the loss

VARIANTS = [  # (label, config overrides of models/tiny.cfg)
    ("dp", {"attention": "dp", "ffn": "standard", "activation": "gelu"}),
    ("l2", {"attention": "l2", "ffn": "standard", "activation": "relu"}),
    ("l2-tied", {"attention": "l2-tied", "ffn": "standard", "activation": "lipswish"}),
    ("contractive-l2 (inf)", {"attention": "contractive-l2", "ffn": "contractive", "activation": "lipswish",
                              "lip_norm": "inf"}),
    ("contractive-l2 (2)", {"attention": "contractive-l2", "ffn": "contractive", "activation": "elu",
                            "lip_norm": "2", "power_iters": "2"}),
    ("clipped-dp (cholesky)", {"attention": "clipped-dp", "ffn": "contractive", "activation": "maxmin",
                               "lip_norm": "inf2", "ffn_full_budget": "1", "spectral_bound": "cholesky"}),
]


def check_agreement(lipt: str, threads: int, workdir: str, B: int = 4) -> list:
    import numpy as np
    import torch
    from lipt_torch import LiptTransformer

    torch.set_num_threads(threads)
    with open(os.path.join(REPO, "models", "tiny.cfg")) as f:
        base = f.read()
    # a small synthetic text with structure to learn (words of a 40-word lexicon, so the next letter depends on
    # the previous ones): the trained blocks then carry signal into the loss; printable bytes only, so that the
    # reader sees plain text (no gzip/zip magic)
    rs = np.random.RandomState(5)
    letters = "abcdefghijklmnopqrstuvwxyz"
    lexicon = ["".join(letters[i] for i in rs.randint(0, 26, size=rs.randint(2, 8))) for _ in range(40)]
    words, n = [], 0
    while n < 20000:
        w = lexicon[rs.randint(0, len(lexicon))] + (".\n" if rs.rand() < 0.08 else " ")
        words.append(w)
        n += len(w)
    text = "".join(words).encode("ascii")
    data = os.path.join(workdir, "text.txt")
    with open(data, "wb") as f:
        f.write(text)
    results = []
    print("== agreement: lipt train (%d steps) -> lipt export -> PyTorch loss vs lipt eval loss, tolerance %g" % (AGREE_STEPS, AGREE_TOL))
    print("%-22s %12s %12s %12s %9s %-4s %9s %9s" % ("variant", "lipt loss", "PyTorch f32", "PyTorch f64", "rel err",
                                                       "", "ctl:shift", "ctl:W^T"))
    for label, over in VARIANTS:
        d = os.path.join(workdir, label.replace(" ", "").replace("(", "_").replace(")", ""))
        os.makedirs(d, exist_ok=True)
        cfg_path = os.path.join(d, "model.cfg")
        lines = [ln for ln in base.splitlines() if ln.split("=")[0].strip() not in over]
        with open(cfg_path, "w") as f:
            f.write("\n".join(lines + ["%s = %s" % kv for kv in over.items()]) + "\n")
        run = os.path.join(d, "run")
        run_cmd([lipt, "train", "--config", cfg_path, "--data", data, "--vocab", "bytes", "--out", run, "--steps", str(AGREE_STEPS),
                 "--batch", str(B), "--lr", AGREE_LR, "--warmup", "0", "--eval-every", "0", "--final-eval", "none",
                 "--threads", str(threads), "--quiet"])
        st = os.path.join(d, "weights.safetensors")
        run_cmd([lipt, "export", "--ckpt", os.path.join(run, "last.ckpt"), "--out", st])
        m32 = LiptTransformer.from_safetensors(st)
        T = m32.cfg.seq_len
        N = B * T
        ev = json.loads(run_cmd([lipt, "eval", "--ckpt", os.path.join(run, "last.ckpt"), "--split", "train",
                                 "--max-symbols", str(N), "--batch", str(B), "--threads", str(threads), "--json",
                                 "--quiet"]))
        if ev["symbols"] != N:
            raise SystemExit(f"error: lipt eval scored {ev['symbols']} symbols, expected {N}")
        # lipt eval's batch: the training split with its context symbol in front ('\n', byte vocabulary), cut
        # into B non-overlapping windows of T: inputs seq[kT .. kT+T), targets one further
        seq = np.concatenate([[10], np.frombuffer(text[:N], dtype=np.uint8)]).astype(np.int64)
        ids = torch.as_tensor(seq[:-1].reshape(B, T))
        tg = torch.as_tensor(seq[1:].reshape(B, T))
        m32.eval()
        m64 = LiptTransformer.from_safetensors(st, dtype=torch.float64)
        m64.eval()
        # controls (that the comparison can fail): the batch without its context symbol (shifted by one), and
        # the attention's square matrices transposed (the nn.Linear [out, in] layout mistake)
        sh = np.frombuffer(text[:N + 1], dtype=np.uint8).astype(np.int64)
        with torch.no_grad():
            l32 = float(m32(ids, tg)[1])
            l64 = float(m64(ids, tg)[1])
            l_shift = float(m32(torch.as_tensor(sh[:-1].reshape(B, T)), torch.as_tensor(sh[1:].reshape(B, T)))[1])
            for name in m64.kinds:
                w = m64.p(name)
                if ".attn.w" in name and w.dim() == 2 and w.shape[0] == w.shape[1]:
                    w.copy_(w.t().clone())
            l_tr = float(m64(ids, tg)[1])
        rel = abs(ev["nll"] - l32) / abs(l32)
        c_shift, c_tr = abs(ev["nll"] - l_shift) / abs(l_shift), abs(ev["nll"] - l_tr) / abs(l_tr)
        ok = rel <= AGREE_TOL
        results.append({"variant": label, "lipt": ev["nll"], "torch_f32": l32, "torch_f64": l64, "rel_err": rel,
                        "ok": ok, "control_shifted_batch": c_shift, "control_transposed_attn": c_tr,
                        "control_fails": c_shift > AGREE_TOL})
        print("%-22s %12.8f %12.8f %12.8f %9.2e %-4s %9.2e %9.2e" % (label, ev["nll"], l32, l64, rel,
              "ok" if ok else "FAIL", c_shift, c_tr), flush=True)
    return results


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lipt", default=os.path.join(REPO, "build", "lipt"), help="the lipt binary")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for both (default: all cores)")
    ap.add_argument("--bf16", action="store_true", help="the bf16 comparison: lipt bench --precision bf16 (unless the "
                    "bench arguments set --precision) against PyTorch under torch.autocast(device_type='cpu', "
                    "dtype=torch.bfloat16)")
    ap.add_argument("--skip-bench", action="store_true", help="only the agreement check")
    ap.add_argument("--skip-agreement", action="store_true", help="only the speed comparison")
    ap.add_argument("--json", metavar="FILE", help="also write everything as JSON to FILE")
    ap.add_argument("--workdir", help="where the agreement runs go (default: a temporary directory, removed)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("bench_args", nargs="*", help="after --: arguments for lipt bench (config, --batch, --runs, ...)")
    a = ap.parse_args()
    if a.worker:  # the PyTorch side of the speed comparison, in its own process (clean ru_maxrss)
        import torch  # noqa: F401  (imported before the baseline memory reading)
        spec = json.loads(sys.stdin.read())
        json.dump(torch_bench(spec), sys.stdout)
        return 0
    if a.threads < 1:
        ap.error("--threads must be >= 1")
    lipt = os.path.abspath(a.lipt)
    if not os.access(lipt, os.X_OK):
        ap.error(f"{lipt} is not an executable lipt binary (build it, or use --lipt)")
    report, rc = {}, 0
    if not a.skip_bench:
        report["speed"] = compare_speed(lipt, a.threads, a.bench_args, a.bf16)
    if not a.skip_agreement:
        if a.workdir:
            os.makedirs(a.workdir, exist_ok=True)
            res = check_agreement(lipt, a.threads, a.workdir)
        else:
            with tempfile.TemporaryDirectory(prefix="lipt-agree-") as wd:
                res = check_agreement(lipt, a.threads, wd)
        report["agreement"] = res
        bad = [r["variant"] for r in res if not r["ok"]]
        blind = [r["variant"] for r in res if not r["control_fails"]]
        worst = max(r["rel_err"] for r in res)
        print("controls: the relative difference of lipt's loss from PyTorch's after a deliberate mistake on the "
              "PyTorch side.\n  ctl:shift = the batch shifted by one symbol (must exceed %g for every variant, else "
              "the check is blind and fails);\n  ctl:W^T = the attention's square matrices transposed (informative: "
              "in contractive-l2 (inf) the normalised attention is\n  about 1e-3 of the residual stream at these "
              "weights, so a wrong attention barely moves the loss)" % AGREE_TOL)
        if bad:
            print("agreement FAILED for: %s (worst relative error %.2e > %g)" % (", ".join(bad), worst, AGREE_TOL))
            rc = 1
        elif blind:
            print("agreement check is BLIND for: %s (a shifted batch gives the same loss)" % ", ".join(blind))
            rc = 1
        else:
            print("agreement: all %d variants within %g (worst relative error %.2e)" % (len(res), AGREE_TOL, worst))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
