/* lipt data: find a corpus and describe it (files, split sizes, vocabulary), or fail saying where it looked. */
#include <stdio.h>

#include "cli.h"
#include "lipt/data.h"

static const cli_opt data_opts[] = {
    {"data", CLI_STRING, "NAME|PATH", "corpus: ptb, enwik8, text8, tinyshakespeare, warandpeace, a folder or a file", "ptb"},
    {"data-split", CLI_STRING, "HOW", "auto, standard (PTB files; enwik8/text8 90M/5M/5M) or fractions F0,F1,F2", "auto"},
    {"vocab", CLI_STRING, "KIND", "auto, bytes or built", "auto"},
    {"json", CLI_FLAG, NULL, "one JSON object: name, kind (ptb, enwik8, text8 or text), train/valid/test symbols, vocab_size, "
     "files, note", NULL},
};

/* The kind of corpus as --json names it. */
static const char *kind_json(lipt_corpus_kind k) {
    switch (k) {
    case LIPT_CORPUS_PTB: return "ptb";
    case LIPT_CORPUS_ENWIK8: return "enwik8";
    case LIPT_CORPUS_TEXT8: return "text8";
    case LIPT_CORPUS_TEXT: break;
    }
    return "text";
}

int cmd_data(int argc, char **argv) {
    const char *C = "data";
    cli_args a;
    int pr = cli_parse(&a, C, "Locate a corpus and print its splits and vocabulary.", data_opts, 4, argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    lipt_error err = {0};
    lipt_data_opts o = {0};
    if (lipt_data_parse_split(cli_str(&a, "data-split"), &o, &err) != LIPT_OK ||
        lipt_data_parse_vocab(cli_str(&a, "vocab"), &o, &err) != LIPT_OK)
        return cli_fail(C, &err);
    lipt_dataset ds;
    if (lipt_dataset_load(cli_str(&a, "data"), &o, &ds, &err) != LIPT_OK) return cli_fail(C, &err);
    if (cli_has(&a, "json")) {
        json_w j;
        json_begin(&j, stdout);
        json_str(&j, "name", ds.loc.name);
        json_str(&j, "kind", kind_json(ds.loc.kind));
        json_int(&j, "train", (long long)ds.len[LIPT_TRAIN]);
        json_int(&j, "valid", (long long)ds.len[LIPT_VALID]);
        json_int(&j, "test", (long long)ds.len[LIPT_TEST]);
        json_int(&j, "vocab_size", ds.vocab.size);
        json_arr_open(&j, "files");
        for (int s = 0; s < 3; s++) json_str(&j, NULL, ds.loc.path[s]);
        json_arr_close(&j);
        json_str(&j, "note", ds.loc.note);
        json_end(&j);
    } else {
        char desc[2048];
        lipt_dataset_describe(&ds, desc, sizeof desc);
        printf("%s\n", cli_shown(desc));
    }
    lipt_dataset_free(&ds);
    return 0;
}
