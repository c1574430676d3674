/*
 * req.c: an HTTP completion request's life (struct hreq, impl.h), as a
 * state changed in one function, hreq_move, which also does what every
 * change of state brings with it:
 *
 *   CONTINUE -> BODY -> QUEUED -> SUBMITTED -> LIVE -> STREAM
 *	("100 Continue" written, its body read, parsed and queued for the
 *	sender, its texts tokenized and its choices submitted, a choice
 *	accepted, a stream's connection taken over at its first token);
 *	nng's handler aio is held up to LIVE, let go from STREAM on;
 *   any of those -> ANSWERED: its answer is complete (replied whole, a
 *	stream's end queued, an error), and its choices not ended are
 *	cancelled upstream;
 *   QUEUED .. ANSWERED -> GONE: its client went away (a read or write
 *	on its connection failed): its choices are cancelled upstream and
 *	what was not written is dropped;
 *   ANSWERED or GONE -> REAPED, on h->reap for the sender to free,
 *	once nothing is owed: no answer or record to come from upstream,
 *	the sender done with it, a stream's bytes out, no watch read.
 *
 * Above stream.c (the bytes out), under what moves requests (conn.c,
 * nng's callbacks; up.c, the sender and taker; http.c, the close).
 */
#include "serve/http/impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t
http_mix(uint64_t z)
{
	return medha_mix64(z + 0x9e3779b97f4a7c15ULL);
}

static const char *const state_names[] = {"continue", "body", "queued",
    "submitted", "live", "stream", "answered", "gone", "reaped"};

/* Whether a request in state from may go to state to. */
static int
allowed(int from, int to)
{
	switch (to) {
	case HS_BODY: return from == HS_CONTINUE;
	case HS_QUEUED: return from == HS_BODY;
	case HS_SUBMITTED: return from == HS_QUEUED;
	case HS_LIVE: return from == HS_SUBMITTED;
	case HS_STREAM: return from == HS_LIVE;
	case HS_ANSWERED: return from < HS_ANSWERED;
	case HS_GONE: return from >= HS_QUEUED && from < HS_GONE;
	case HS_REAPED: return from == HS_ANSWERED || from == HS_GONE;
	default: return 0;
	}
}

/* Whether upstream still owes r something, or the sender holds it. */
static int
owes(const struct hreq *r)
{
	return r->sending || r->npend > 0 || r->nend < r->nup;
}

/* Cancel upstream r's choices accepted and not ended (mu held). */
static void
cancel_choices(struct medha_http *h, struct hreq *r)
{
	for (int i = 0; i < r->nch; i++)
		if (r->handles[i] != 0 && r->recs[i] == NULL)
			medha_pcli_cancel(h->pc, r->handles[i]);
}

/* A stream's head, and for chat each choice's first chunk (OpenAI's
 * role); 0 or MEDHA_ENOMEM. */
static int
stream_open(struct medha_http *h, struct hreq *r)
{
	int rc = http_put_head(h, r);

	for (int i = 0; rc == 0 && r->q.chat && i < r->nch; i++) {
		r->cur_idx = i;
		rc = http_put_chunk(r, "", 0, 1, 0, NULL);
	}
	r->cur_idx = 0;
	return rc;
}

/* r from h->all to h->reap, for the sender to free (mu held). */
static void
to_reap(struct medha_http *h, struct hreq *r)
{
	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		h->all = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
	r->qnext = h->reap;
	h->reap = r;
	pthread_cond_signal(&h->cv);
}

/*
 * r to state to (mu held), with what the change brings; a change the
 * life above does not have is refused (an error logged), a move to the
 * state r is in, or from GONE to ANSWERED, does nothing. Returns r's
 * state after it.
 */
int
hreq_move(struct medha_http *h, struct hreq *r, int to)
{
	int from = r->state;

	if (to == from || (to == HS_ANSWERED && from == HS_GONE))
		return from; /* nothing to do: a gone client's answer is
		                over too (a write failed while it was made) */
	if (!allowed(from, to)) {
		medha_log(MEDHA_LOG_ERROR, "http: %s: no way from %s to %s",
		    r->id, state_names[from], state_names[to]);
		return from;
	}
	r->state = to;
	switch (to) {
	case HS_QUEUED: /* the sender's until it lets go (up.c) */
		r->sending = 1;
		r->qnext = NULL;
		if (h->sq_tail != NULL)
			h->sq_tail->qnext = r;
		else
			h->sq = r;
		h->sq_tail = r;
		pthread_cond_signal(&h->cv);
		return to;
	case HS_STREAM:
		if (stream_open(h, r) != 0) {
			medha_log(MEDHA_LOG_ERROR, "http: %s: out of memory",
			    r->id);
			return hreq_move(h, r, HS_GONE);
		}
		return to;
	case HS_ANSWERED:
		cancel_choices(h, r);
		break;
	case HS_GONE:
		r->out.n = 0;
		cancel_choices(h, r);
		medha_log(MEDHA_LOG_INFO, "http: %s: client went away", r->id);
		break;
	case HS_REAPED:
		to_reap(h, r);
		return to;
	default:
		return to;
	}
	hreq_reap(h, r);
	return r->state;
}

/*
 * Hand r to the sender to be freed if it is done with and nothing
 * refers to it any more (mu held).
 */
void
hreq_reap(struct medha_http *h, struct hreq *r)
{
	if ((r->state != HS_ANSWERED && r->state != HS_GONE) || owes(r) ||
	    (r->hijacked && r->state != HS_GONE &&
	        (r->tx_busy || r->out.n > 0)) ||
	    (r->watching && r->rx_busy)) /* freeing rx would close the
	                                    connection under the answer */
		return;
	hreq_move(h, r, HS_REAPED);
}

/* Queue n bytes of p on r's stream (mu held); its client counts as gone
 * when they cannot be. */
void
hreq_send(struct medha_http *h, struct hreq *r, const char *p, size_t n)
{
	if (http_put(r, p, n) != 0) {
		medha_log(MEDHA_LOG_ERROR, "http: %s: out of memory", r->id);
		hreq_move(h, r, HS_GONE);
	}
}

/* Likewise a chunk (medha_oai_chunk's arguments). */
void
hreq_send_chunk(struct medha_http *h, struct hreq *r, const char *text,
    size_t len, int role, int finish, const struct medha_record *usage)
{
	if (http_put_chunk(r, text, len, role, finish, usage) != 0) {
		medha_log(MEDHA_LOG_ERROR, "http: %s: out of memory", r->id);
		hreq_move(h, r, HS_GONE);
	}
}

/*
 * Every request not reaped yet to h->reap, whatever its state (mu
 * held): at close, once the sender and taker are gone, what is left is
 * ours alone but for nng's callbacks, which leave a reaped one alone.
 */
void
hreq_reap_all(struct medha_http *h)
{
	struct hreq *r;

	while ((r = h->all) != NULL) {
		r->state = HS_REAPED; /* from any state: its life ends here */
		to_reap(h, r);
	}
}

/* Free r: on the sender's thread (or at close), never in a callback. */
void
hreq_free(struct medha_http *h, struct hreq *r)
{
	if (r->hijacked && r->conn != NULL)
		nng_http_conn_close(r->conn); /* ends the reads and writes */
	if (r->rx != NULL)
		nng_aio_free(r->rx); /* waits for its callback */
	if (r->tx != NULL)
		nng_aio_free(r->tx);
	if (r->hijacked && r->nreq != NULL)
		nng_http_req_free(r->nreq);
	pthread_mutex_lock(&h->mu);
	h->st.in_progress--;
	if (r->hijacked)
		h->st.streams--;
	pthread_mutex_unlock(&h->mu);
	for (int i = 0; i < MEDHA_OAI_MAX_CHOICES; i++)
		if (r->recs[i] != NULL) {
			medha_record_clear(r->recs[i]);
			free(r->recs[i]);
		}
	medha_oai_req_clear(&r->q);
	free(r->body);
	free(r->out.p);
	free(r->wr.p);
	free(r);
}
