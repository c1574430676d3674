/*
 * prompt.c: a request's prompts made ready to go upstream (under up.c,
 * whose sender calls it): with the model (-m) each text becomes its
 * token ids here, once, a long one on the front door's tokenizer
 * thread (tok/tokq.h), and prompt and max_tokens are fitted to the
 * context; without it a text goes up as it is.
 */
#include "serve/http/impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A prompt (*text, or *ids of *n_ids) made ready to go upstream (0, or
 * 400): with the model (-m), a text becomes its ids here, once (the
 * router and the replica take them as they are; tok/tokq.h), and is
 * let go; then chat without max_tokens gets the room the context
 * leaves, and a prompt that with max_tokens cannot fit is refused here,
 * with the counts. Without the model a text goes up as it is (the
 * replica tokenizes it) and max_tokens is OpenAI's 16 by default.
 */
static int
fit_context(struct medha_http *h, struct hreq *r, char **text, int32_t **ids,
    int64_t *n_ids, struct medha_oai_error *e)
{
	struct medha_reqspec *rs = &r->q.spec;
	const char *field = r->q.chat ? "messages" : "prompt";
	size_t n = (size_t)*n_ids;
	int rc;

	if (!r->q.max_tokens_set && (h->tok == NULL || h->ctx_len <= 0)) {
		rs->max_tokens = 16;
		if ((rc = medha_oai_min_tokens_check(rs, e)) != 0)
			return rc;
	}
	if (h->tok == NULL)
		return 0; /* the replica tokenizes, and knows the context */
	if (*text != NULL) {
		rc = medha_tok_encode(h->tok, *text, strlen(*text),
		    MEDHA_TOK_DEFAULT, ids, &n);
		if (rc != 0)
			return medha_oai_error_set(e, 400,
			    "invalid_request_error", NULL, field,
			    "tokenizing the %s: %s", field, medha_strerror(rc));
		free(*text);
		*text = NULL;
		*n_ids = (int64_t)n;
		if (n == 0) /* as a replica refuses it */
			return medha_oai_error_set(e, 400,
			    "invalid_request_error", NULL, field,
			    "the prompt is empty");
	}
	if (h->ctx_len <= 0)
		return 0; /* the replica knows */
	if (!r->q.max_tokens_set) {
		if ((int64_t)n >= h->ctx_len)
			return medha_oai_error_set(e, 400,
			    "invalid_request_error", "context_length_exceeded",
			    field, "the %s are %zu tokens, the model's context "
			    "is %lld",
			    field, n, (long long)h->ctx_len);
		rs->max_tokens = h->ctx_len - (int64_t)n;
		return medha_oai_min_tokens_check(rs, e);
	}
	if (rs->max_tokens > h->ctx_len - (int64_t)n)
		return medha_oai_error_set(e, 400, "invalid_request_error",
		    "context_length_exceeded", NULL,
		    "%zu prompt + %lld output tokens exceed the model's "
		    "context of %lld",
		    n, (long long)rs->max_tokens, (long long)h->ctx_len);
	return 0;
}


/*
 * Every prompt of r made ready to go upstream (mu not held: the sender
 * alone touches r's prompts): 0, or an HTTP status with *e set (a text
 * the tokenizer's thread could not tokenize, an empty prompt, one that
 * does not fit the context).
 */
int
http_fit(struct medha_http *h, struct hreq *r, struct medha_oai_error *e)
{
	struct medha_reqspec *rs = &r->q.spec;
	int rc = 0;

	if (r->tok_rc != 0)
		return medha_oai_error_set(e, 400, "invalid_request_error",
		    NULL, r->q.chat ? "messages" : "prompt",
		    "tokenizing the %s: %s", r->q.chat ? "messages" : "prompt",
		    medha_strerror(r->tok_rc));
	if (r->q.n_prompts == 0)
		rc = fit_context(h, r, &rs->prompt, &rs->prompt_ids,
		    &rs->prompt_tokens, e);
	for (int p = 0; rc == 0 && p < r->q.n_prompts; p++)
		rc = fit_context(h, r, &r->q.prompts[p].text,
		    &r->q.prompts[p].ids, &r->q.prompts[p].n_ids, e);
	return rc;
}

/* ---- long texts: the tokenizer's thread (tok/tokq.h) ---- */

/* A text of up to MEDHA_TOKQ_INLINE bytes is tokenized on the sender's
 * thread; a longer one on the tokenizer's, so that the requests after
 * it are submitted meanwhile (9 MB/s: a body of 32 MB would hold them
 * 3.5 s). */

/* A long text of r's: prompt p's (-1: the request's one prompt). */
struct hjob {
	struct medha_tokq_job tj; /* first */
	struct hreq *r;           /* stays while r->ntok > 0 */
	int p;
};

/* The tokenizer's thread finished a job: the sender takes it. */
static void
tok_wake(void *arg)
{
	struct medha_http *h = arg;

	pthread_mutex_lock(&h->mu);
	h->tok_news = 1;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

/* Text p of r (-1: its one prompt): where it is, and its ids go. */
static char **
text_of(struct hreq *r, int p)
{
	return p < 0 ? &r->q.spec.prompt : &r->q.prompts[p].text;
}

/*
 * r's long texts to the tokenizer's thread (mu held): how many went; r
 * is the sender's to submit when their ids are back (http_tok_take).
 * One that cannot go is tokenized on the sender's thread, as a short
 * one is.
 */
int
http_tok_push(struct medha_http *h, struct hreq *r)
{
	int np = r->q.n_prompts > 0 ? r->q.n_prompts : 1;

	if (h->tok == NULL)
		return 0;
	for (int i = 0; i < np; i++) {
		int p = r->q.n_prompts > 0 ? i : -1;
		char *text = *text_of(r, p);
		struct hjob *j;
		if (text == NULL || strlen(text) <= MEDHA_TOKQ_INLINE)
			continue;
		if ((h->tokq == NULL &&
		        medha_tokq_open(&h->tokq, tok_wake, h) != 0) ||
		    (j = calloc(1, sizeof(*j))) == NULL)
			break;
		j->r = r;
		j->p = p;
		if (medha_tokq_push(h->tokq, &j->tj, h->tok, text,
		        strlen(text), MEDHA_TOK_DEFAULT) != 0) {
			free(j);
			break;
		}
		r->ntok++;
	}
	return r->ntok;
}

/*
 * The jobs the tokenizer's thread finished (mu held): each text's ids
 * in its place, until a request's texts are all back: that request,
 * for the sender to submit; NULL when none is left (h->tok_news
 * cleared).
 */
struct hreq *
http_tok_take(struct medha_http *h)
{
	struct medha_tokq_job *tj;

	while (h->tokq != NULL && (tj = medha_tokq_take(h->tokq)) != NULL) {
		struct hjob *j = (struct hjob *)tj;
		struct hreq *r = j->r;
		char **text = text_of(r, j->p);
		if (tj->rc != 0 && r->tok_rc == 0)
			r->tok_rc = tj->rc;
		if (tj->rc == 0) {
			free(*text);
			*text = NULL;
			if (j->p < 0) {
				r->q.spec.prompt_ids = tj->ids;
				r->q.spec.prompt_tokens = (int64_t)tj->n;
			} else {
				r->q.prompts[j->p].ids = tj->ids;
				r->q.prompts[j->p].n_ids = (int64_t)tj->n;
			}
		}
		free(j);
		if (--r->ntok == 0)
			return r;
	}
	h->tok_news = 0;
	return NULL;
}

/* A job never taken back (closing): its request is freed after. */
static void
tok_drop(void *arg, struct medha_tokq_job *tj)
{
	(void)arg;
	free(tj);
}

void
http_tok_stop(struct medha_http *h)
{
	medha_tokq_close(h->tokq, tok_drop, NULL);
	h->tokq = NULL;
}

