/*
 * runner.h: one model, its tokenizer and a backend (the cpu backend,
 * backend_cpu.h, or another of the registry opened on the same file),
 * with a KV cache for one sequence, opened together from a GGUF file to
 * run one sequence at a time: the engine behind medha-worker's one-shot
 * mode. The prompt is prefilled in chunks; each decode step appends one
 * token and yields the logits of the next.
 *
 *	struct medha_runner *r;
 *	struct medha_runner_opts o = { .n_threads = 2 };
 *	if (medha_runner_open(&r, "model.gguf", &o, why, sizeof(why)) != 0 ||
 *	    medha_runner_start(r, n_prompt + n_out, why, sizeof(why)) != 0)
 *		...;
 *	medha_runner_prefill(r, ids, n, 512, logits, why, sizeof(why));
 *	medha_runner_decode(r, next_id, logits, why, sizeof(why));
 *	medha_runner_close(r);
 */
#ifndef MEDHA_RUNNER_H
#define MEDHA_RUNNER_H

#include "medha.h"
#include "engine/backend.h"
#include "model/model.h"
#include "tok/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

struct medha_runner_opts {
	int n_threads;    /* threads in all (1) */
	int kv_f16;       /* f16 KV cache instead of f32 (0) */
	int ref;          /* f32 reference numerics (0) */
	int llama_compat; /* llama.cpp's attention order (0; cpu.h) */
	/* the registry's kind to run on (NULL or "cpu": the cpu backend on
	   the model loaded here, with the fields above); another ("cuda")
	   is opened on the same file with *bp (borrowed until start), whose
	   model, max_seqs and kv_blocks the runner sets */
	const char *backend;
	const struct medha_backend_params *bp;
};

struct medha_runner; /* opaque */

/*
 * Open path: the model and its tokenizer. On success *r is the caller's,
 * for medha_runner_close(). On failure *r is NULL and why says what is
 * wrong (a truncated file, a missing tensor, an unsupported tokenizer).
 * Returns 0 or a MEDHA_E* code.
 */
int medha_runner_open(struct medha_runner **r, const char *path,
    const struct medha_runner_opts *o, char *why, size_t whylen);
/*
 * Make room for max_tokens tokens (prompt and output) and start the
 * backend; call once, before prefill. MEDHA_ERANGE if that passes the
 * model's context length.
 */
int medha_runner_start(struct medha_runner *r, int64_t max_tokens, char *why,
    size_t whylen);
void medha_runner_close(struct medha_runner *r);

/* Borrowed views, valid until medha_runner_close(). */
const struct medha_model *medha_runner_model(const struct medha_runner *r);
const struct medha_tok *medha_runner_tok(const struct medha_runner *r);
/* Tokens held in the cache so far. */
int64_t medha_runner_len(const struct medha_runner *r);
/* The most KV blocks the backend held after a forward call (the cpu
 * backend: its window layers keep only the blocks their window sees,
 * backend_cpu.h window_kv, so a window model holds fewer). */
int64_t medha_runner_kv_peak(const struct medha_runner *r);

/*
 * Append n prompt tokens in chunks of at most chunk (0: all at once);
 * logits (vocab floats, the caller's) get the last position's. Returns
 * 0, MEDHA_EINVAL (an id out of range), MEDHA_ENOSPACE (past
 * max_tokens) or MEDHA_ENOMEM, with why.
 */
int medha_runner_prefill(struct medha_runner *r, const int32_t *ids, int64_t n,
    int64_t chunk, float *logits, char *why, size_t whylen);
/* Append one token; logits get the next position's. */
int medha_runner_decode(struct medha_runner *r, int32_t id, float *logits,
    char *why, size_t whylen);

#endif
