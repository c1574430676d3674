/*
 * text.c: text becomes token ids at the router (cfg.model; impl.h:
 * below router.c, above life.c). A text of up to MEDHA_TOKQ_INLINE bytes
 * is tokenized on the main loop, tens of microseconds; a longer one on
 * the tokenizer's thread (tok/tokq.h), its request accepted meanwhile
 * (TOKENIZING) and placed when its ids come, so that a 16 MB prompt
 * holds back no other request. Its ids are checked against the model's
 * context (what every replica would refuse) and only they go on.
 */
#include "serve/router/impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_PENDING_MAX 256 /* texts waiting for the tokenizer */
#define TOK_BYTES_MAX ((size_t)256 << 20) /* and their bytes */

/*
 * q's prompt is n ids (taken over) in place of its text: 0, or a code
 * with why (an empty prompt, or one that with max_tokens exceeds the
 * model's context: what every replica would refuse).
 */
static int
prompt_ids(struct medha_router *r, struct rreq *q, int32_t *ids, size_t n,
    char *why, size_t whylen)
{
	struct medha_reqspec *rs = &q->spec;

	free(rs->prompt);
	rs->prompt = NULL;
	free(rs->prompt_ids);
	rs->prompt_ids = ids;
	rs->prompt_tokens = q->prompt = (int64_t)n;
	if (n == 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "the prompt is empty");
	if (r->ctx_len > 0 && rs->max_tokens > r->ctx_len - (int64_t)n)
		return medha_why(why, whylen, MEDHA_ERANGE,
		    "%lld prompt + %lld output tokens exceed the model's "
		    "context of %lld",
		    (long long)n, (long long)rs->max_tokens,
		    (long long)r->ctx_len);
	return 0;
}

/* q's text to the tokenizer's thread: 0, or MEDHA_ENOMEM. */
static int
tok_push(struct medha_router *r, struct rreq *q)
{
	struct rjob *j = calloc(1, sizeof(*j));

	if (j == NULL || (r->tokq == NULL &&
	                     medha_tokq_open(&r->tokq, rt_wake, r->f.srv) != 0))
		goto fail;
	j->handle = q->handle;
	j->text = q->spec.prompt;
	if (medha_tokq_push(r->tokq, &j->tj, r->tok, j->text, strlen(j->text),
	        MEDHA_TOK_DEFAULT) != 0)
		goto fail;
	r->tok_bytes += j->tj.len;
	q->spec.prompt = NULL;
	q->job = j;
	return 0;
fail:
	free(j);
	return MEDHA_ENOMEM;
}

void
rt_text_collect(struct medha_router *r)
{
	struct medha_tokq_job *tj;
	char why[MEDHA_PROTO_REASON_MAX];

	while (r->tokq != NULL && (tj = medha_tokq_take(r->tokq)) != NULL) {
		struct rjob *j = (struct rjob *)tj;
		struct rreq *q = medha_map_get(&r->reqs, j->handle);
		r->tok_bytes -= tj->len;
		free(j->text);
		if (q == NULL || q->job != j) { /* ended meanwhile */
			free(tj->ids);
			free(j);
			continue;
		}
		q->job = NULL;
		if (tj->rc != 0) {
			free(tj->ids);
			snprintf(why, sizeof(why), "tokenizing: %s",
			    medha_strerror(tj->rc));
			rt_move(r, q, RQ_EV_END, &(struct rq_news){
			    .status = MEDHA_STATUS_REJECTED, .why = why});
		} else if (q->stop == RQ_STOP_GONE) {
			free(tj->ids);
			rt_move(r, q, RQ_EV_END, &(struct rq_news){
			    .status = MEDHA_STATUS_CANCELLED,
			    .why = "client went away"});
		} else if (prompt_ids(r, q, tj->ids, tj->n, why,
		               sizeof(why)) != 0) {
			rt_move(r, q, RQ_EV_END, &(struct rq_news){
			    .status = MEDHA_STATUS_REJECTED, .why = why});
		} else
			rt_move(r, q, RQ_EV_PLACE, NULL);
		free(j);
	}
}

int
rt_text_tokenize(struct medha_router *r, struct rreq *q, char *why,
    size_t whylen)
{
	struct medha_reqspec *rs = &q->spec;
	size_t len = strlen(rs->prompt), n = 0;
	int32_t *ids;
	int rc;

	if (len > MEDHA_TOKQ_INLINE) {
		if (r->tokq != NULL &&
		    (medha_tokq_pending(r->tokq) >= TOK_PENDING_MAX ||
		        r->tok_bytes + len > TOK_BYTES_MAX))
			return medha_why(why, whylen, MEDHA_ENOSPACE,
			    "overloaded: %zu text prompts of %zu bytes wait "
			    "for the tokenizer (at most %d, %zu bytes)",
			    medha_tokq_pending(r->tokq), r->tok_bytes,
			    TOK_PENDING_MAX, TOK_BYTES_MAX);
		if (tok_push(r, q) != 0)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		rt_move(r, q, RQ_EV_TEXT, NULL);
		return 0;
	}
	if ((rc = medha_tok_encode(r->tok, rs->prompt, len, MEDHA_TOK_DEFAULT,
	         &ids, &n)) != 0)
		return medha_why(why, whylen, rc, "tokenizing: %s",
		    medha_strerror(rc));
	return prompt_ids(r, q, ids, n, why, whylen);
}

/* A job the thread never gave back (closing): its text let go. */
static void
tok_drop(void *arg, struct medha_tokq_job *tj)
{
	struct rjob *j = (struct rjob *)tj;

	(void)arg;
	free(j->text);
	free(j);
}

void
rt_text_close(struct medha_router *r)
{
	medha_tokq_close(r->tokq, tok_drop, NULL);
	r->tokq = NULL;
}
