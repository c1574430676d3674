/*
 * reqs.c: the live replica's requests (reqs.h): the table that finds
 * one by the core's handle or the client's, and the one function that
 * moves a request from state to state, with what each move changes
 * (the table, the live counts, the workers' frees). Calls seqs.c and
 * reads the core (core.h); every file above it calls it.
 */
#include "serve/replica/impl.h"

#include <stdlib.h>
#include <string.h>

static void lreq_free(struct lreq *q);

void
rep_reqs_drop_forks(struct medha_replica *r)
{
	/* a fork not sent yet (its request admitted, its first item in no
	   batch yet) is of KV gone now: re-admitted, it is forked anew,
	   and the two would make one item's runs overlap */
	for (size_t i = 0; i < r->reqs.slots; i++)
		if (r->reqs.by_slot[i] != NULL)
			r->reqs.by_slot[i]->n_forks = 0;
}

void
rep_reqs_free(struct medha_replica *r)
{
	struct rep_reqs *t = &r->reqs;

	for (size_t s = 0; s < t->slots; s++)
		if (t->by_slot[s] != NULL)
			lreq_free(t->by_slot[s]);
	free(t->by_slot);
	medha_map_free(&t->by_ch);
	memset(t, 0, sizeof(*t));
}

struct lreq *
rep_req_new(void)
{
	return calloc(1, sizeof(struct lreq));
}

static void
lreq_free(struct lreq *q)
{
	free(q->ids);
	free(q->out);
	free(q->lps);
	free(q->text);
	free(q->forks);
	for (int i = 0; i < q->n_stop; i++)
		free(q->stop[i]);
	free(q);
}

struct lreq *
rep_lreq_get(const struct medha_replica *r, uint64_t h)
{
	const struct rep_reqs *t = &r->reqs;
	size_t slot = (size_t)(h & 0xffffffffu);

	if (slot == PRE_SLOT)
		return medha_map_get(&t->by_ch, h);
	if (slot >= t->slots || t->by_slot[slot] == NULL ||
	    t->by_slot[slot]->handle != h)
		return NULL;
	return t->by_slot[slot];
}

uint64_t
rep_reqs_pre_handle(struct medha_replica *r)
{
	if (++r->reqs.pre_seq == 0)
		r->reqs.pre_seq = 1;
	return (uint64_t)r->reqs.pre_seq << 32 | PRE_SLOT;
}

int64_t
rep_reqs_tokenizing(const struct medha_replica *r)
{
	return r->reqs.n[REP_REQ_TOKENIZING] + r->reqs.n[REP_REQ_CANCELLING];
}

/* q in the core's slot of its handle: 0 or MEDHA_ENOMEM. */
static int
slot_put(struct rep_reqs *t, struct lreq *q)
{
	size_t slot = (size_t)(q->handle & 0xffffffffu);

	if (slot >= t->slots) {
		size_t ns = t->slots ? t->slots : 256;
		while (ns <= slot)
			ns *= 2;
		void *p = medha_reallocarray(t->by_slot, ns,
		    sizeof(*t->by_slot));
		if (p == NULL)
			return MEDHA_ENOMEM;
		t->by_slot = p;
		memset(t->by_slot + t->slots, 0,
		    (ns - t->slots) * sizeof(*t->by_slot));
		t->slots = ns;
	}
	t->by_slot[slot] = q;
	return 0;
}

/* q counts as live, on the front and for its client, or no more. */
static void
live(struct medha_replica *r, const struct lreq *q, int d)
{
	struct medha_client *c = medha_clients_find(&r->f.clients, q->peer, 0);

	if (c != NULL)
		c->live += d;
	r->f.live += d;
}

int
rep_req_move(struct medha_replica *r, struct lreq *q, enum rep_req_event ev)
{
	struct rep_reqs *t = &r->reqs;
	enum rep_req_state from = q->state, to = from;

	switch (ev) {
	case REP_REQ_ACK:
		MEDHA_ASSERT(from == REP_REQ_NEW);
		if (medha_map_get(&t->by_ch, q->ch) != NULL ||
		    medha_map_put(&t->by_ch, q->ch, q) != 0)
			return MEDHA_ENOMEM;
		live(r, q, 1);
		to = REP_REQ_TOKENIZING;
		break;
	case REP_REQ_ARRIVE:
		MEDHA_ASSERT(from == REP_REQ_NEW || from == REP_REQ_TOKENIZING);
		if (slot_put(t, q) != 0)
			return MEDHA_ENOMEM;
		t->held += q->held;
		if (from == REP_REQ_NEW) { /* acknowledged now */
			q->ch = q->handle;
			live(r, q, 1);
		}
		to = REP_REQ_QUEUED;
		break;
	case REP_REQ_CANCEL:
		MEDHA_ASSERT(from == REP_REQ_TOKENIZING ||
		    from == REP_REQ_CANCELLING);
		to = REP_REQ_CANCELLING;
		break;
	case REP_REQ_SEND:
		MEDHA_ASSERT(from == REP_REQ_QUEUED || from == REP_REQ_RUNNING);
		if (from == REP_REQ_QUEUED)
			q->first_batch = now_s(r);
		to = REP_REQ_RUNNING;
		break;
	case REP_REQ_END:
		MEDHA_ASSERT(from != REP_REQ_NEW);
		live(r, q, -1);
		/* with the prefix cache, the core's TRIM ops let its
		   sequence go */
		if (from == REP_REQ_RUNNING && !r->core.prefix)
			rep_seqs_free_later(&r->seqs,
			    rep_seqs_name(&r->seqs, q->handle), 0);
		if (from == REP_REQ_QUEUED || from == REP_REQ_RUNNING) {
			t->by_slot[q->handle & 0xffffffffu] = NULL;
			t->held -= q->held;
		}
		if (q->ch != q->handle)
			medha_map_del(&t->by_ch, q->ch);
		t->n[from]--;
		lreq_free(q);
		return 0;
	case REP_REQ_DROP:
		MEDHA_ASSERT(from == REP_REQ_NEW || from == REP_REQ_TOKENIZING ||
		    from == REP_REQ_CANCELLING);
		if (from != REP_REQ_NEW) {
			live(r, q, -1);
			medha_map_del(&t->by_ch, q->ch);
			t->n[from]--;
		}
		lreq_free(q);
		return 0;
	}
	if (from != REP_REQ_NEW)
		t->n[from]--;
	t->n[to]++;
	q->state = to;
	return 0;
}

/*
 * A made-up prompt's ids are computed where they are sent, from its
 * seed (made of the request id: the same ids for the same id), so that
 * a SUBMIT of 60 bytes that asks for a long prompt costs no memory
 * while it waits; a mix of seed and position, so that any piece comes
 * without the ones before it.
 */
void
rep_prompt_ids(const struct medha_replica *r, const struct lreq *q,
    int64_t at, int64_t n, int32_t *out)
{
	if (at + n > q->n_prompt) { /* a preempted request's output */
		int64_t k = at > q->n_prompt ? at : q->n_prompt;
		MEDHA_ASSERT(at + n - q->n_prompt <= q->n_out);
		for (int64_t p = k; p < at + n; p++)
			out[p - at] = q->out[p - q->n_prompt];
		if ((n = q->n_prompt - at) <= 0)
			return;
	}
	if (q->ids != NULL) {
		memcpy(out, q->ids + at, (size_t)n * sizeof(*out));
		return;
	}
	for (int64_t i = 0; i < n; i++) {
		uint64_t z = medha_mix64(q->made_up + (uint64_t)(at + i) *
		    0x9e3779b97f4a7c15ULL);
		out[i] = (int32_t)(z % (uint64_t)r->core.vocab);
	}
}
