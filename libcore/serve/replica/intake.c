/*
 * intake.c: a request's arrival at the live replica (intake.h), and
 * its client's CANCEL or going away: its prompt (the ids given, a text
 * tokenized, a made-up one), its checks, the core's arrival and the
 * client's ACCEPTED, and its refusals. A text of up to
 * MEDHA_TOKQ_INLINE bytes is tokenized at once; a longer one is
 * acknowledged at once with a handle of the replica's own (PRE_SLOT's:
 * the core has no handle for it yet; TOKENIZING) and tokenized on
 * the tokenizer's thread, so that the loop, which forms batches and
 * answers heartbeats, never tokenizes a long text and a short prompt
 * never waits behind one; a refusal after that is the request's
 * "rejected" record, a CANCEL meanwhile its "cancelled" one. Calls
 * out.c, reqs.c and the core below them (and reads how many workers
 * are there); replica.c calls it.
 */
#include "serve/replica/impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A long text prompt on its way through the tokenizer's thread: its
 * SUBMIT was acknowledged already, and the main thread, which forms
 * batches and answers heartbeats, never tokenizes one.
 */
struct tok_job {
	struct medha_tokq_job tj; /* first: its text rs.prompt; its ids
	                             become q's */
	struct lreq *q; /* made at SUBMIT, TOKENIZING */
	uint32_t peer;
	struct medha_reqspec rs; /* taken over from the SUBMIT */
};

/*
 * min_tokens's ban (model/sample.h): the request's stop token ids in the
 * vocabulary and the end-of-generation tokens (up to MEDHA_BAN_MAX in
 * all), as vLLM's all_stop_token_ids, ignore_eos or not; none when
 * simulating (no logits to mask).
 */
static void
ban_ids(const struct medha_replica *r, struct lreq *q)
{
	struct medha_sampler_params *sp = &q->sp;

	sp->n_ban = 0;
	if (sp->min_tokens <= 0 || r->core.sim)
		return;
	for (int i = 0; i < q->n_stop_ids; i++)
		if (q->stop_ids[i] < r->core.vocab)
			sp->ban[sp->n_ban++] = q->stop_ids[i];
	for (int32_t id = 0; r->core.tok != NULL && id < r->core.vocab &&
	     sp->n_ban < MEDHA_BAN_MAX;
	     id++)
		if (medha_tok_is_eog(r->core.tok, id))
			sp->ban[sp->n_ban++] = id;
}


/* q into the core; its ids (none when made up) lent for the prefix
   cache */
static int
core_arrive(struct medha_replica *r, struct medha_reqspec *rs, struct lreq *q)
{
	int rc;

	rs->prompt_ids = q->ids;
	rc = medha_sched_arrive(r->core.sched, rs, rs->arrival, &q->handle);
	rs->prompt_ids = NULL; /* q's */
	return rc;
}

/*
 * q's prompt from rs: the ids given (taken over), the text tokenized,
 * or a made-up one of prompt_tokens; -1 after answering call with why
 * not.
 */
static int
prompt_of(struct medha_replica *r, struct medha_srv_call *call,
    struct medha_reqspec *rs, struct lreq *q)
{
	size_t n = 0;
	int rc;

	if (rs->prompt_ids != NULL) {
		q->ids = rs->prompt_ids;
		rs->prompt_ids = NULL;
		q->n_prompt = rs->prompt_tokens;
	} else if (rs->prompt != NULL) {
		if (r->core.tok == NULL) {
			medha_srv_error(r->f.srv, call, MEDHA_EUNSUP,
			    "no tokenizer for %s: send prompt_ids or "
			    "prompt_tokens",
			    r->core.model);
			return -1;
		}
		rc = medha_tok_encode(r->core.tok, rs->prompt, strlen(rs->prompt),
		    MEDHA_TOK_DEFAULT, &q->ids, &n);
		if (rc != 0) {
			medha_srv_error(r->f.srv, call, rc, "tokenizing: %s",
			    medha_strerror(rc));
			return -1;
		}
		q->n_prompt = (int64_t)n;
	} else {
		/* made up below, so never more than the KV cache holds: a
		 * bigger one could never run, and would cost its size */
		int64_t kv = medha_sched_group_capacity(r->core.sched) *
		    medha_sched_block_size(r->core.sched);
		q->n_prompt = rs->prompt_tokens;
		if (q->n_prompt / r->core.pred.kvp > kv) {
			medha_srv_error(r->f.srv, call, MEDHA_ERANGE,
			    "a prompt of %lld tokens: more than the replica's "
			    "KV cache holds (%lld per group)",
			    (long long)q->n_prompt, (long long)kv);
			return -1;
		}
		/* a made-up prompt keeps no ids (rep_prompt_ids): the
		   same ids for the same request id */
		uint64_t z = 1469598103934665603ULL;
		for (const char *s = rs->id; *s != '\0'; s++)
			z = (z ^ (unsigned char)*s) * 1099511628211ULL;
		q->made_up = z;
	}
	if (q->n_prompt < 1) {
		medha_srv_error(r->f.srv, call, MEDHA_EINVAL, "the prompt is empty");
		return -1;
	}
	return 0;
}

/*
 * q's SUBMIT refused with code and why: an ERROR on call or, when it was
 * acknowledged already (call NULL), a "rejected" record (rep_pre_end)
 * that carries the same code, so that a router can tell a refusal of
 * this replica's own (full, out of memory, shutting down) from one every
 * replica would give. q is let go.
 */
static void refuse(struct medha_replica *r, struct medha_srv_call *call,
    struct lreq *q, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void
refuse(struct medha_replica *r, struct medha_srv_call *call, struct lreq *q,
    int code, const char *fmt, ...)
{
	char why[MEDHA_PROTO_REASON_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (call != NULL) {
		medha_srv_error(r->f.srv, call, code, "%s", why);
		rep_req_move(r, q, REP_REQ_DROP);
	} else
		rep_pre_end(r, q, MEDHA_STATUS_REJECTED, code, why);
}

/*
 * The rest of a SUBMIT once q has its prompt: its checks, the core's
 * arrival and ACCEPTED on call (call NULL: acknowledged already, and
 * counted live then); q is let go on a refusal.
 */
static void
submit_finish(struct medha_replica *r, struct medha_srv_call *call,
    uint32_t peer, struct medha_reqspec *rs, struct lreq *q)
{
	struct medha_msg m = {.type = MEDHA_MSG_ACCEPTED};
	int rc;

	if (medha_clients_find(&r->f.clients, peer, 1) == NULL) {
		refuse(r, call, q, MEDHA_ENOMEM, "out of memory");
		return;
	}
	/* the ids a client gave (or a text made) are held while the
	   request lives: bounded in bytes as well as in count */
	q->held = q->ids != NULL ? q->n_prompt * (int64_t)sizeof(*q->ids) : 0;
	if (q->held > r->cfg.max_queue_bytes - r->reqs.held) {
		refuse(r, call, q, MEDHA_ENOSPACE,
		    "overloaded: a prompt of %lld bytes of ids, %lld held "
		    "for requests in flight (at most %lld)",
		    (long long)q->held, (long long)r->reqs.held,
		    (long long)r->cfg.max_queue_bytes);
		return;
	}
	for (int64_t i = 0; q->ids != NULL && i < q->n_prompt; i++)
		if (q->ids[i] < 0 || q->ids[i] >= r->core.vocab) {
			refuse(r, call, q, MEDHA_EINVAL,
			    "prompt_ids[%lld] = %d: outside the vocabulary "
			    "(%d)",
			    (long long)i, q->ids[i], r->core.vocab);
			return;
		}
	if (r->core.ctx_len > 0 &&
	    rs->max_tokens > r->core.ctx_len - q->n_prompt) {
		refuse(r, call, q, MEDHA_ERANGE,
		    "%lld prompt + %lld output tokens exceed the model's "
		    "context of %lld",
		    (long long)q->n_prompt, (long long)rs->max_tokens,
		    (long long)r->core.ctx_len);
		return;
	}
	memcpy(q->id, rs->id, sizeof(q->id));
	q->peer = peer;
	q->sp = rs->sampling;
	q->ignore_eos = rs->ignore_eos;
	q->no_stream = rs->no_stream;
	for (int i = 0; i < rs->n_stop; i++) {
		q->stop[i] = rs->stop[i];
		rs->stop[i] = NULL;
		if (strlen(q->stop[i]) > q->stop_max)
			q->stop_max = strlen(q->stop[i]);
	}
	q->n_stop = rs->n_stop;
	rs->n_stop = 0;
	q->n_stop_ids = rs->n_stop_ids;
	memcpy(q->stop_ids, rs->stop_ids, sizeof(q->stop_ids));
	ban_ids(r, q);
	rs->prompt_tokens = q->n_prompt;
	rs->arrival = now_s(r);
	if ((rc = core_arrive(r, rs, q)) != 0) {
		refuse(r, call, q, rc, "%s", medha_strerror(rc));
		return;
	}
	if (rep_req_move(r, q, REP_REQ_ARRIVE) != 0) {
		medha_sched_cancel(r->core.sched, q->handle, "out of memory",
		    now_s(r));
		refuse(r, call, q, MEDHA_ENOMEM, "out of memory");
		rep_drain_records(r);
		return;
	}
	if (call != NULL) {
		memcpy(m.accepted.id, q->id, sizeof(m.accepted.id));
		m.accepted.handle = q->handle;
		medha_srv_msg(r->f.srv, call, &m);
	}
	rep_drain_records(r); /* rejected at once: its record follows */
}


/* ---- the tokenizer's thread ---- */

#define TOK_PENDING_MAX 256 /* text prompts waiting for the tokenizer */

/*
 * Whether a text prompt's bytes may fit what the context holds: no
 * token is longer than the longest piece, so a text longer than the
 * room's worth of them cannot, and is refused before any tokenizing
 * (a 60 MiB SUBMIT held the replica 5.3 s). 0, or -1 after answering.
 */
static int
text_fits(struct medha_replica *r, struct medha_srv_call *call,
    const struct medha_reqspec *rs)
{
	size_t len = strlen(rs->prompt);
	int64_t room = r->core.ctx_len > 0
	    ? r->core.ctx_len - rs->max_tokens
	    : medha_sched_group_capacity(r->core.sched) *
	        medha_sched_block_size(r->core.sched) * r->core.pred.kvp;

	if (room < 1)
		room = 1;
	if ((double)len <= (double)room * (double)r->core.max_piece + 64)
		return 0;
	medha_srv_error(r->f.srv, call, MEDHA_ERANGE,
	    "a text prompt of %zu bytes cannot fit: room for %lld prompt "
	    "tokens of at most %zu bytes each",
	    len, (long long)room, r->core.max_piece);
	return -1;
}

/* The tokenizer's thread has news: the loop collects it. */
static void
tok_wake(void *arg)
{
	medha_srv_wake(arg);
}

/* q's text (from rs, taken over) to the tokenizer's thread: 0, or
 * MEDHA_ENOMEM. */
static int
tok_queue(struct medha_replica *r, uint32_t peer, struct medha_reqspec *rs,
    struct lreq *q)
{
	struct tok_job *j = calloc(1, sizeof(*j));

	if (j == NULL ||
	    (r->in.tokq == NULL &&
	        medha_tokq_open(&r->in.tokq, tok_wake, r->f.srv) != 0))
		goto fail;
	j->q = q;
	j->peer = peer;
	if (medha_tokq_push(r->in.tokq, &j->tj, r->core.tok, rs->prompt,
	        strlen(rs->prompt), MEDHA_TOK_DEFAULT) != 0)
		goto fail;
	j->rs = *rs; /* taken over: the caller clears what is left */
	rs->prompt = NULL;
	rs->prompt_ids = NULL;
	for (int i = 0; i < MEDHA_STOP_MAX; i++)
		rs->stop[i] = NULL;
	rs->n_stop = 0;
	return 0;
fail:
	free(j);
	return MEDHA_ENOMEM;
}

/*
 * A long text's SUBMIT: acknowledged at once with a handle of the
 * client's (PRE_SLOT's), its text to the tokenizer's thread; the rest
 * (the checks, the core) when the ids come back, and a refusal then is
 * a "rejected" record. 0, or -1 after answering call (q let go).
 */
static int
pre_accept(struct medha_replica *r, struct medha_srv_ev *ev,
    struct medha_reqspec *rs, struct lreq *q)
{
	struct medha_msg m = {.type = MEDHA_MSG_ACCEPTED};
	struct medha_client *c = medha_clients_find(&r->f.clients, ev->peer, 1);

	q->ch = rep_reqs_pre_handle(r);
	memcpy(q->id, rs->id, sizeof(q->id));
	q->peer = ev->peer;
	q->t_sub = now_s(r);
	if (c == NULL || rep_req_move(r, q, REP_REQ_ACK) != 0) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM,
		    "out of memory");
		rep_req_move(r, q, REP_REQ_DROP);
		return -1;
	}
	if (tok_queue(r, ev->peer, rs, q) != 0) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM,
		    "out of memory");
		rep_req_move(r, q, REP_REQ_DROP);
		return -1;
	}
	memcpy(m.accepted.id, q->id, sizeof(m.accepted.id));
	m.accepted.handle = q->ch;
	medha_srv_msg(r->f.srv, ev->call, &m);
	return 0;
}

void
rep_tok_collect(struct medha_replica *r)
{
	struct medha_tokq_job *tj;

	while (r->in.tokq != NULL &&
	    (tj = medha_tokq_take(r->in.tokq)) != NULL) {
		struct tok_job *done = (struct tok_job *)tj;
		struct lreq *q = done->q;
		q->ids = tj->ids;
		if (q->state == REP_REQ_CANCELLING) {
			rep_pre_end(r, q, MEDHA_STATUS_CANCELLED, 0,
			    "cancelled by its client");
		} else if (tj->rc != 0) {
			refuse(r, NULL, q, tj->rc, "tokenizing: %s",
			    medha_strerror(tj->rc));
		} else if (r->f.drain.on || r->core.sched == NULL) {
			refuse(r, NULL, q, MEDHA_EUNSUP,
			    "shutting down: not accepting requests");
		} else if ((q->n_prompt = (int64_t)tj->n) < 1) {
			refuse(r, NULL, q, MEDHA_EINVAL, "the prompt is empty");
		} else {
			submit_finish(r, NULL, done->peer, &done->rs, q);
		}
		medha_reqspec_clear(&done->rs);
		free(done);
	}
}

/* A job the thread never gave back (closing): its request let go. */
static void
tok_drop(void *arg, struct medha_tokq_job *tj)
{
	struct medha_replica *r = arg;
	struct tok_job *j = (struct tok_job *)tj;

	rep_req_move(r, j->q, REP_REQ_DROP);
	medha_reqspec_clear(&j->rs);
	free(j);
}

/* Stop the thread; jobs not done are dropped, their calls unanswered. */
void
rep_tok_stop(struct medha_replica *r)
{
	medha_tokq_close(r->in.tokq, tok_drop, r);
	r->in.tokq = NULL;
}

void
rep_on_submit(void *arg, struct medha_srv_ev *ev, struct medha_reqspec *rs)
{
	struct medha_replica *r = arg;
	struct lreq *q;

	if (r->f.drain.on) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_EUNSUP,
		    "shutting down: not accepting requests");
		return;
	}
	if (r->core.sched == NULL) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOSPACE,
		    "not ready: %d of %d workers connected", r->ws.n,
		    r->cfg.workers);
		return;
	}
	if (r->f.live >= r->cfg.max_queue) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOSPACE,
		    "overloaded: %lld requests in flight", (long long)r->f.live);
		return;
	}
	if ((q = rep_req_new()) == NULL) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM, "out of memory");
		return;
	}
	if (rs->prompt != NULL && r->core.tok != NULL &&
	    strlen(rs->prompt) > MEDHA_TOKQ_INLINE) {
		if (rep_reqs_tokenizing(r) >= TOK_PENDING_MAX)
			medha_srv_error(r->f.srv, ev->call, MEDHA_ENOSPACE,
			    "overloaded: %d text prompts wait for the "
			    "tokenizer", TOK_PENDING_MAX);
		else if (text_fits(r, ev->call, rs) == 0) {
			pre_accept(r, ev, rs, q); /* q its, or let go */
			return;
		}
		rep_req_move(r, q, REP_REQ_DROP);
		return;
	}
	if (prompt_of(r, ev->call, rs, q) != 0) {
		rep_req_move(r, q, REP_REQ_DROP);
		return;
	}
	submit_finish(r, ev->call, ev->peer, rs, q);
}

/* ---- cancelling ---- */

/* The requests of peer (all: of every peer) whose text is being
 * tokenized: cancelled, as that ends; how many. */
static int
pre_cancel(struct medha_replica *r, uint32_t peer, int all)
{
	size_t it = 0;
	uint64_t k;
	void *v;
	int n = 0;

	while (medha_map_next(&r->reqs.by_ch, &it, &k, &v)) {
		struct lreq *q = v;
		if ((q->state == REP_REQ_TOKENIZING ||
		        q->state == REP_REQ_CANCELLING) &&
		    (all || q->peer == peer)) {
			rep_req_move(r, q, REP_REQ_CANCEL);
			n++;
		}
	}
	return n;
}

int
rep_on_cancel(void *arg, uint32_t peer, uint64_t h)
{
	struct medha_replica *r = arg;
	struct lreq *q = rep_lreq_get(r, h);

	if (q == NULL || q->peer != peer)
		return MEDHA_ENOTFOUND;
	if (q->state == REP_REQ_TOKENIZING || q->state == REP_REQ_CANCELLING) {
		/* tokenizing: it ends when that is over */
		rep_req_move(r, q, REP_REQ_CANCEL);
		return 0;
	}
	medha_sched_cancel(r->core.sched, q->handle, "cancelled by its client",
	    now_s(r));
	rep_drain_records(r);
	return 0;
}

int
rep_on_client_gone(void *arg, uint32_t peer)
{
	struct medha_replica *r = arg;
	int n = 0;

	for (size_t s = 0; s < r->reqs.slots; s++) {
		struct lreq *q = r->reqs.by_slot[s];
		if (q == NULL || q->peer != peer)
			continue;
		medha_sched_cancel(r->core.sched, q->handle,
		    "client went away", now_s(r));
		n++;
	}
	n += pre_cancel(r, peer, 0);
	rep_drain_records(r);
	return n;
}

void
rep_cancel_all(void *arg)
{
	struct medha_replica *r = arg;

	for (size_t s = 0; s < r->reqs.slots; s++)
		if (r->reqs.by_slot[s] != NULL)
			medha_sched_cancel(r->core.sched,
			    r->reqs.by_slot[s]->handle, "scheduler stopped",
			    now_s(r));
	pre_cancel(r, 0, 1);
	rep_drain_records(r);
}
