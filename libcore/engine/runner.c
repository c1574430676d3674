/*
 * runner.c: a model, tokenizer and backend (engine/backend_cpu.h, or
 * the registry's) for one sequence (runner.h): whole-model forward calls
 * through the backend interface, one sequence in a cache sized for it.
 */
#include "engine/runner.h"

#include "engine/backend_cpu.h"
#include "batch.h"
#include "model/gguf.h"

#include <stdlib.h>
#include <string.h>

struct medha_runner {
	struct medha_gguf *g;
	struct medha_tok *tok;
	struct medha_model *m;
	struct medha_backend *be; /* cpu: on m, borrowed; NULL before start */
	const char *path;         /* the GGUF, for another backend */
	struct medha_runner_opts o;
	int seq;
	int64_t len, max; /* tokens held, room (0 before start) */
	int64_t peak;     /* most KV blocks held after a forward call */
};

int
medha_runner_open(struct medha_runner **rp, const char *path,
    const struct medha_runner_opts *o, char *why, size_t whylen)
{
	struct medha_runner *r;
	int rc;

	*rp = NULL;
	if (o->n_threads < 1)
		return medha_why(why, whylen, MEDHA_EINVAL, "need a thread");
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	r->o = *o;
	r->path = path;
	if ((rc = medha_gguf_open(&r->g, path, why, whylen)) != 0 ||
	    (rc = medha_tok_open(&r->tok, r->g, why, whylen)) != 0 ||
	    (rc = medha_model_load(&r->m, r->g, why, whylen)) != 0) {
		medha_runner_close(r);
		return rc;
	}
	*rp = r;
	return 0;
}

int
medha_runner_start(struct medha_runner *r, int64_t max_tokens, char *why,
    size_t whylen)
{
	struct medha_backend_cpu_opts bo = {0};
	int rc;

	if (r->be != NULL || max_tokens < 1)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "started twice, or no room asked for");
	if (r->m->c.ctx_len > 0 && max_tokens > r->m->c.ctx_len)
		return medha_why(why, whylen, MEDHA_ERANGE,
		    "%lld tokens (prompt and output) exceed the model's "
		    "context of %lld",
		    (long long)max_tokens, (long long)r->m->c.ctx_len);
	bo.n_threads = r->o.n_threads;
	bo.max_seqs = 1;
	bo.kv_blocks = (max_tokens + MEDHA_KV_BLOCK - 1) / MEDHA_KV_BLOCK;
	bo.kv_type = r->o.kv_f16 ? MEDHA_KV_F16 : MEDHA_KV_F32;
	bo.ref = r->o.ref;
	bo.llama_compat = r->o.llama_compat;
	bo.window_kv = 1; /* one sequence, never forked */
	if (r->o.backend != NULL && strcmp(r->o.backend, "cpu") != 0) {
		/* the same file opened by the kind, its cache as the cpu's */
		struct medha_backend_params p = {0};
		if (r->o.bp != NULL)
			p = *r->o.bp;
		p.model = r->path;
		p.max_seqs = 1;
		p.kv_blocks = bo.kv_blocks;
		rc = medha_backend_open(&r->be, r->o.backend, &p, why, whylen);
		if (rc == 0 && (r->be->info.shape.vocab != r->m->c.vocab ||
		                   r->be->info.layer_lo != 0 ||
		                   r->be->info.layer_hi != r->m->c.n_layers)) {
			medha_backend_close(r->be);
			r->be = NULL;
			rc = medha_why(why, whylen, MEDHA_EINVAL,
			    "backend %s: not the whole model of the file",
			    r->o.backend);
		}
	} else
		rc = medha_backend_cpu_init(&r->be, r->m, &bo, why, whylen);
	if (rc != 0)
		return rc;
	if ((rc = medha_backend_seq_alloc(r->be, &r->seq)) != 0)
		return medha_why(why, whylen, rc, "KV cache: no sequence");
	r->max = max_tokens;
	return 0;
}

void
medha_runner_close(struct medha_runner *r)
{
	if (r == NULL)
		return;
	medha_backend_close(r->be);
	medha_model_free(r->m);
	medha_tok_close(r->tok);
	medha_gguf_close(r->g);
	free(r);
}

const struct medha_model *
medha_runner_model(const struct medha_runner *r)
{
	return r->m;
}

const struct medha_tok *
medha_runner_tok(const struct medha_runner *r)
{
	return r->tok;
}

int64_t
medha_runner_len(const struct medha_runner *r)
{
	return r->len;
}

static int
run(struct medha_runner *r, const int32_t *ids, int32_t n, int logits_mode,
    float *logits, char *why, size_t whylen)
{
	struct medha_batch_seq s = {r->seq, r->len, n, logits_mode};
	struct medha_batch b = {ids, n, &s, 1};
	struct medha_fwd f = {.b = &b,
	    .layer_lo = 0,
	    .layer_hi = r->m->c.n_layers,
	    .logits = logits};
	int rc;

	if (r->be == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL, "not started");
	if (r->len + n > r->max)
		return medha_why(why, whylen, MEDHA_ENOSPACE,
		    "%lld tokens exceed the room of %lld asked for",
		    (long long)(r->len + n), (long long)r->max);
	for (int32_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= r->m->c.vocab)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "token id %d out of range [0, %d)", ids[i],
			    r->m->c.vocab);
	if ((rc = medha_backend_forward(r->be, &f, why, whylen)) != 0)
		return rc;
	r->len += n;
	if (r->be->info.n_blocks - medha_backend_free_blocks(r->be) > r->peak)
		r->peak = r->be->info.n_blocks - medha_backend_free_blocks(r->be);
	return 0;
}

int64_t
medha_runner_kv_peak(const struct medha_runner *r)
{
	return r->peak;
}

int
medha_runner_prefill(struct medha_runner *r, const int32_t *ids, int64_t n,
    int64_t chunk, float *logits, char *why, size_t whylen)
{
	int rc;

	if (n < 1)
		return medha_why(why, whylen, MEDHA_EINVAL, "empty prompt");
	if (chunk <= 0 || chunk > n)
		chunk = n;
	if (chunk > INT32_MAX)
		chunk = INT32_MAX;
	for (int64_t i = 0; i < n; i += chunk) {
		int32_t c = (int32_t)(n - i < chunk ? n - i : chunk);
		int last = i + c == n;
		if ((rc = run(r, ids + i, c,
		         last ? MEDHA_LOGITS_LAST : MEDHA_LOGITS_NONE,
		         last ? logits : NULL, why, whylen)) != 0)
			return rc;
	}
	return 0;
}

int
medha_runner_decode(struct medha_runner *r, int32_t id, float *logits,
    char *why, size_t whylen)
{
	return run(r, &id, 1, MEDHA_LOGITS_LAST, logits, why, whylen);
}
