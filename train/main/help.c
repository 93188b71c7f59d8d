/* lipt help TOPIC: the commands' help, and topics that belong to no one command (config keys, run folders, data). */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "lipt/variants.h"

static const char *const topic_config_head =
    "Model config keys (a --config file holds `key = value` lines, # comments; every key is also --key VALUE):\n"
    "  vocab_size       ids (set from the corpus by lipt train)         d_model, n_heads, d_ff, n_layers, seq_len\n";
/* then the attention line, generated from the variant table (config_topic) */
static const char *const topic_config =
    "  ffn              standard | contractive (spectrally normalised, with an invertible attention)\n"
    "  activation       gelu | relu | elu | lipswish | maxmin              norm  pre | post (LayerNorm placement)\n"
    "  dropout          in [0, 1)                                         c     contraction of each branch, (0, 1)\n"
    "  lip_norm         inf | 2 | inf2: the norm the contractive attention is certified in\n"
    "  power_iters, gram_iters, init_seed, ln_eps, clip_radius, rel_bias, actnorm, ffn_full_budget, coupling,\n"
    "  head_hidden      see models/README.md for each\n"
    "  spectral_bound   gram | cholesky: how the invertible model certifies its spectral norms (Gram iteration,\n"
    "                   or a Lanczos estimate proven by a Cholesky factorisation: tighter and faster)\n"
    "  precision        float32 | bf16 | bf16-emulated: the model's matrix products (also --precision on train,\n"
    "                   eval, sample, bench); bf16 needs oneDNN and AVX512_BF16, bf16-emulated is bf16's numerics\n"
    "Training keys in the same file: data, steps, batch, lr, schedule, warmup, min-lr, beta1, beta2, adam-eps,\n"
    "  weight-decay, clip, seed, eval-every, eval-symbols, final-eval, final-from, patience, save-every,\n"
    "  save-minutes, log-every, vocab, data-split, unk, optimizer, muon-lr, sample-every, sample-length. A run\n"
    "  folder's run.cfg holds all of them: lipt train --config RUN/run.cfg repeats the run.\n"
    "  patience N       early stopping: stop after N periodic validation evaluations in a row without a new best\n"
    "                   validation BPC (0: off); the count is stored in every checkpoint, so --resume goes on as the\n"
    "                   uninterrupted run would\n"
    "  final-from       last | best: the weights of the final evaluation (--final-eval): the last step's, or\n"
    "                   best.ckpt's (the lowest periodic validation BPC)\n";

static const char *const topic_files =
    "A run folder (lipt train --out DIR; default runs/YYYYMMDD-HHMMSS):\n"
    "  run.cfg        every setting (model, training, the corpus by absolute path), lipt version and git revision\n"
    "  metrics.jsonl  a line per --log-every steps (step, loss, bpc, lr, grad_norm, tok_per_s, attn_logit_spread,\n"
    "                 elapsed_s), per evaluation (\"eval\": valid | valid_full | test_full, nll, bpc, accuracy,\n"
    "                 symbols; weights, weights_step when --final-from best scored best.ckpt) and per event\n"
    "                 (\"event\": early_stop, patience, best_step, best_valid_bpc)\n"
    "  last.ckpt      the newest state (every --save-every steps, --save-minutes minutes, evaluation and the end;\n"
    "                 on SIGINT/SIGTERM/SIGHUP too): lipt train --out DIR --resume continues on the identical loss\n"
    "                 curve\n"
    "  best.ckpt      the state with the best validation BPC\n"
    "A checkpoint carries its model, vocabulary, optimizer state, training options and its corpus (absolute path,\n"
    "size, CRC-32): lipt eval|lipschitz|sample --ckpt FILE use that corpus by default. lipt info --ckpt FILE shows it.\n"
    "A run folder is append-only history: a fresh run into a folder holding another run, a --resume into another\n"
    "run's folder or from a checkpoint older than the folder's newest are refused unless --force, which keeps the\n"
    "files it would replace aside (last.ckpt as last.step200.ckpt, metrics past the resume point in\n"
    "metrics.afterN.jsonl, another run's metrics.jsonl and run.cfg under its run id); lipt export never writes a\n"
    "checkpoint or a run's record. Each run has an id (run-id in run.cfg and its checkpoints).\n"
    "lipt train --init-from CKPT|DIR --data TEXT starts a new run from a checkpoint's weights (fine-tuning).\n";

static const char *const topic_data =
    "Corpora (--data): ptb, enwik8, text8, tinyshakespeare, warandpeace (looked up in $LIPT_DATA, data/,\n"
    "../shared/data), a folder, or a file: plain text, .gz or .zip (xz, zstd, bzip2: decompress first).\n"
    "Splits: PTB's three files; enwik8/text8 90M/5M/5M; other text 0.9/0.05/0.05 (--data-split F0,F1[,F2]).\n"
    "Vocabulary (--vocab auto): plain text: the bytes of the whole text, all three splits, as nanoGPT builds\n"
    "its (a byte first seen in valid or test has an id; BPC stays comparable between runs on the same text and\n"
    "split); PTB and text8: the training split's (their published 50 and 27); enwik8: all 256 bytes.\n"
    "--vocab built: the training split's bytes; --vocab whole: all three splits'; --vocab bytes: all 256.\n"
    "lipt data --data NAME prints what was found.\n";

/* The attention kinds of the variant table, "dp | l2 | ...", and the contractive ones (the invertible model's). */
static void config_topic(void) {
    char all[256] = "", inv[256] = "";
    for (int k = 0; k < LIPT_ATTN_KIND_COUNT; k++) {
        const lipt_attn_info *ai = lipt_attn_info_of((lipt_attn_kind)k);
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", k ? " | " : "", ai->name);
        if (ai->contractive) snprintf(inv + strlen(inv), sizeof inv - strlen(inv), "%s%s", inv[0] ? ", " : "", ai->name);
    }
    fputs(topic_config_head, stdout);
    printf("  attention        %s  (%s: the invertible model)\n", all, inv);
    fputs(topic_config, stdout);
}

int help_topic(const char *topic) {
    const struct { const char *name, *text; } topics[] = {
        {"config", NULL}, {"files", topic_files}, {"data", topic_data}};
    for (int i = 0; i < (int)(sizeof topics / sizeof topics[0]); i++)
        if (strcmp(topic, topics[i].name) == 0) {
            if (topics[i].text) fputs(topics[i].text, stdout);
            else config_topic();
            return 0;
        }
    for (int i = 0; i < lipt_n_commands; i++)
        if (strcmp(topic, lipt_commands[i].name) == 0) {
            char *argv[] = {"--help", NULL};
            return lipt_commands[i].run(1, argv);
        }
    fprintf(stderr, "lipt help: no topic '%s' (topics: config, files, data, or a command name)\n", topic);
    return 2;
}
