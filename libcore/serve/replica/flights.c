/*
 * flights.c: the batches on their way through the live replica's
 * workers (flights.h), and each worker's link. A batch formed by the
 * core is copied into the ring with the ids its items carry (a prompt's
 * chunk, a decode's last token), the forks of cached prefixes and the
 * sampling parameters of a request's first item; each worker's held
 * call is answered with the next batch it was not sent (and the frees
 * due to it, seqs.c); its RESULT's tokens wait in the flight until
 * every worker has answered, then go to the core and to the clients
 * (out.c). Calls out.c, reqs.c, seqs.c and the core; called by
 * workers.c, which faults when a function here says so.
 */
#include "serve/replica/impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
rep_flights_init(struct medha_replica *r)
{
	struct rep_flights *fl = &r->fl;

	memset(fl, 0, sizeof(*fl));
	if ((fl->w = medha_calloc(r->cfg.workers, sizeof(*fl->w))) == NULL ||
	    (fl->peers.urls = medha_calloc(r->cfg.workers,
	         sizeof(*fl->peers.urls))) == NULL) {
		free(fl->w);
		fl->w = NULL;
		return MEDHA_ENOMEM;
	}
	return 0;
}

void
rep_flights_free(struct medha_replica *r)
{
	struct rep_flights *fl = &r->fl;

	for (int i = 0; fl->w != NULL && i < r->cfg.workers; i++)
		if (fl->w[i].call != NULL)
			medha_srv_drop(r->f.srv, fl->w[i].call);
	if (fl->ring != NULL)
		rep_flights_void(r);
	free(fl->ring);
	free(fl->peers.urls);
	free(fl->w);
	memset(fl, 0, sizeof(*fl));
}

static void
flight_clear(struct flight *f)
{
	free(f->b.items);
	free(f->mi);
	free(f->ids);
	free(f->fk);
	free(f->tok);
	for (int i = 0; f->lp != NULL && i < f->b.n_items; i++)
		free(f->lp[i]);
	free(f->lp);
	memset(f, 0, sizeof(*f));
}

/* The i-th flight from the head of the ring. */
static struct flight *
flight_at(const struct rep_flights *fl, int i)
{
	return &fl->ring[(fl->head + i) % fl->nring];
}

int
rep_flights_ring(struct medha_replica *r, int spp, int fresh)
{
	struct rep_flights *fl = &r->fl;

	/* the ring of batches in flight is h's spp with each core made
	   (nothing flies without one; a ring left by a core whose making
	   failed may be of another spp) */
	if (fresh) {
		free(fl->ring);
		fl->ring = NULL;
	}
	if (fl->ring == NULL) {
		if ((fl->ring = medha_calloc(spp, sizeof(*fl->ring))) == NULL)
			return MEDHA_ENOMEM;
		fl->nring = spp;
	}
	return 0;
}

void
rep_flights_void(struct medha_replica *r)
{
	struct rep_flights *fl = &r->fl;

	for (int i = 0; i < fl->n; i++)
		flight_clear(flight_at(fl, i));
	fl->n = 0;
	fl->head = 0;
	rep_seqs_void(&r->seqs);
}

/* The batch in flight of batch_seq seq, or NULL. */
static struct flight *
flight_of(const struct rep_flights *fl, uint64_t seq)
{
	for (int i = 0; i < fl->n; i++) {
		struct flight *f = flight_at(fl, i);
		if (f->seq == seq)
			return f;
	}
	return NULL;
}

/* ---- the workers' links ---- */

void
rep_flights_join(struct medha_replica *r, int i, const char *url)
{
	struct rep_link *w = &r->fl.w[i];

	memset(w, 0, sizeof(*w));
	w->seen = medha_now();
	w->sent = w->done = r->seqs.bseq;
	snprintf(r->fl.peers.urls[i], sizeof(r->fl.peers.urls[i]), "%s", url);
}

void
rep_flights_leave(struct medha_replica *r, int i)
{
	struct rep_link *w = &r->fl.w[i];

	if (w->call != NULL)
		medha_srv_drop(r->f.srv, w->call);
	memset(w, 0, sizeof(*w));
}

void
rep_flights_ready(struct medha_replica *r)
{
	r->fl.peers.gen++; /* the table the workers get next */
	r->fl.peers.n = r->cfg.workers;
	r->fl.peers.kvp_tokens = medha_sched_group_tokens(r->core.sched);
}

void
rep_flights_hold(struct medha_replica *r, int i, struct medha_srv_call *call)
{
	struct rep_link *w = &r->fl.w[i];

	if (w->call != NULL) /* a second request: the first ends */
		medha_srv_drop(r->f.srv, w->call);
	w->call = call;
	w->call_since = medha_now();
	w->talked = 1;
}

void
rep_flights_heard(struct medha_replica *r, int i)
{
	r->fl.w[i].seen = medha_now();
}

int
rep_flights_void_batch(const struct medha_replica *r, int i)
{
	const struct rep_link *w = &r->fl.w[i];

	return w->done < w->sent && flight_of(&r->fl, w->sent) == NULL;
}

int
rep_flights_talked(const struct medha_replica *r, int i)
{
	return r->fl.w[i].talked;
}

int
rep_flights_dropped(struct medha_replica *r, int i)
{
	struct rep_link *w = &r->fl.w[i];

	if (w->done >= w->sent)
		return 0;
	w->done = w->sent;
	/* a batch made void already is nothing more to recover */
	return flight_of(&r->fl, w->sent) != NULL;
}

/* ---- forming a batch ---- */

/*
 * Prefix caching and preemption: the core's ops of b, the core's names
 * turned into the workers' (seqs.h). A TRIM goes to every worker like
 * a free (before the items of the batch formed now, which is sent after
 * every batch formed before); a FORK waits with its request for the
 * request's first item. 0 or MEDHA_ENOMEM.
 */
static int
take_ops(struct medha_replica *r, const struct medha_sched_batch *b)
{
	for (int i = 0; i < b->n_ops; i++) {
		const struct medha_kvop *op = &b->ops[i];
		struct lreq *q;
		if (op->op == MEDHA_KVOP_TRIM) {
			rep_seqs_free_later(&r->seqs,
			    rep_seqs_name(&r->seqs, op->req), op->to);
			/* a name let go for good: a ghost's, or an ended
			   request's (a live one keeps its own) */
			if (op->to == 0 && (op->req >> 32 == 0 ||
			                       rep_lreq_get(r, op->req) == NULL))
				rep_seqs_forget(&r->seqs, op->req);
			continue;
		}
		if (op->op == MEDHA_KVOP_MOVE) {
			if (rep_seqs_move(&r->seqs, op) != 0)
				return MEDHA_ENOMEM;
			continue;
		}
		if ((q = rep_lreq_get(r, op->req)) == NULL)
			continue;
		if (q->n_forks == q->forks_cap) {
			int64_t ncap = q->forks_cap ? 2 * q->forks_cap : 4;
			void *p = medha_reallocarray(q->forks, (size_t)ncap,
			    sizeof(*q->forks));
			if (p == NULL)
				return MEDHA_ENOMEM;
			q->forks = p;
			q->forks_cap = ncap;
		}
		q->forks[q->n_forks++] = (struct medha_msg_fork){
		    rep_seqs_name(&r->seqs, op->src), op->from, op->to};
	}
	return 0;
}

/* The forks of items of b that start a forked sequence, copied into f
 * (their runs owned by f). 0 or MEDHA_ENOMEM. */
static int
flight_forks(struct medha_replica *r, struct flight *f)
{
	int64_t n = 0;

	for (int i = 0; i < f->b.n_items; i++) {
		struct lreq *q = rep_lreq_get(r, f->b.items[i].req);
		if (q != NULL && q->n_forks > 0 && !f->b.items[i].decode)
			n += q->n_forks;
	}
	if (n == 0)
		return 0;
	if ((f->fk = medha_reallocarray(NULL, (size_t)n, sizeof(*f->fk))) ==
	    NULL)
		return MEDHA_ENOMEM;
	n = 0;
	for (int i = 0; i < f->b.n_items; i++) {
		struct lreq *q = rep_lreq_get(r, f->b.items[i].req);
		if (q == NULL || q->n_forks == 0 || f->b.items[i].decode)
			continue;
		memcpy(f->fk + n, q->forks, (size_t)q->n_forks * sizeof(*f->fk));
		f->mi[i].forks = f->fk + n;
		f->mi[i].n_forks = q->n_forks;
		n += q->n_forks;
		q->n_forks = 0; /* sent: the sequence exists from now on
		                   (the item made q RUNNING) */
	}
	return 0;
}

/* Item i of f as sent: its handle, position, ids, and with a request's
 * first item its sampling parameters (q RUNNING). */
static void
item_of(struct medha_replica *r, struct flight *f, int i, int32_t *ids)
{
	const struct medha_sched_item *it = &f->b.items[i];
	struct lreq *q = rep_lreq_get(r, it->req);
	struct medha_msg_item *mi = &f->mi[i];

	MEDHA_ASSERT(q != NULL);
	mi->handle = rep_seqs_name(&r->seqs, it->req);
	mi->pos = it->kv;
	mi->ids = ids;
	mi->n_ids = it->decode ? 1 : it->tokens;
	if (it->decode)
		mi->ids[0] = q->last;
	else
		rep_prompt_ids(r, q, it->kv, mi->n_ids, mi->ids);
	mi->sample = it->decode || it->last;
	if (r->core.kvp > 1) {
		/* KVP: the groups of the pieces up to the one the tokens
		   fall in (the core never cuts across one) */
		const struct medha_req *cr =
		    medha_sched_req(r->core.sched, it->req);
		int64_t P = medha_sched_group_tokens(r->core.sched);
		int k = (int)(it->kv / P);
		MEDHA_ASSERT(cr != NULL && k < cr->kv.n_groups);
		mi->n_groups = k + 1;
		for (int g = 0; g <= k; g++)
			mi->groups[g] = (uint8_t)cr->kv.groups[g];
	}
	/* a request's first item: at 0, or where its fork ends (a
	   preempted request's again: its queue time is the first) */
	if (!it->decode && (it->kv == 0 || q->n_forks > 0)) {
		mi->has_params = 1;
		mi->params = q->sp;
		/* resumed: its sampler goes on after the tokens it drew (a
		   request that forks from the cache alone has none yet) */
		mi->params.skip = (uint64_t)q->n_out;
		/* min_tokens: what is left after the tokens out already (a
		   preempted request's sampler is new) */
		if ((mi->params.min_tokens -= q->n_out) <= 0) {
			mi->params.min_tokens = 0;
			mi->params.n_ban = 0;
		}
		rep_req_move(r, q, REP_REQ_SEND);
	}
	f->tok[i] = -1;
}

/* A batch from the core into the ring: 1, 0 (nothing to run, or the
 * core could not form one: logged), or MEDHA_ENOMEM (it could not be
 * copied: the caller faults). */
static int
flight_form(struct medha_replica *r)
{
	struct rep_flights *fl = &r->fl;
	struct medha_sched_batch b;
	struct flight *f;
	int64_t nids = 0;
	int rc;

	rc = medha_sched_next_batch(r->core.sched, now_s(r), &b);
	if (rc >= 0 && take_ops(r, &b) != 0)
		rc = MEDHA_ENOMEM;
	if (rc != 1) {
		if (rc < 0)
			medha_log(MEDHA_LOG_ERROR, "forming a batch: %s",
			    medha_strerror(rc));
		return 0;
	}
	f = flight_at(fl, fl->n);
	memset(f, 0, sizeof(*f));
	f->b = b;
	for (int i = 0; i < b.n_items; i++)
		nids += b.items[i].decode ? 1 : b.items[i].tokens;
	f->b.items = medha_reallocarray(NULL, b.n_items, sizeof(*b.items));
	f->mi = medha_calloc(b.n_items, sizeof(*f->mi));
	f->ids = medha_reallocarray(NULL, (size_t)nids, sizeof(int32_t));
	f->tok = medha_reallocarray(NULL, b.n_items, sizeof(int32_t));
	if (f->b.items == NULL || f->mi == NULL || f->ids == NULL ||
	    f->tok == NULL) {
		flight_clear(f);
		medha_log(MEDHA_LOG_ERROR, "out of memory sending a batch");
		return MEDHA_ENOMEM;
	}
	memcpy(f->b.items, b.items, b.n_items * sizeof(*b.items));
	nids = 0;
	for (int i = 0; i < b.n_items; i++) {
		item_of(r, f, i, f->ids + nids);
		nids += f->mi[i].n_ids;
	}
	if (flight_forks(r, f) != 0) {
		flight_clear(f);
		return MEDHA_ENOMEM;
	}
	f->seq = rep_seqs_next_batch(&r->seqs);
	f->left = r->cfg.workers;
	f->left0 = r->core.tp * r->core.kvp;
	fl->n++;
	fl->batches++;
	return 1;
}

int
rep_flights_fill(struct medha_replica *r)
{
	struct rep_flights *fl = &r->fl;
	int rc;

	if (r->core.sched == NULL || fl->n >= fl->nring)
		return 0;
	if (fl->n > 0 && flight_at(fl, fl->n - 1)->left0 > 0)
		return 0; /* stage 0 still runs the last one */
	for (int i = 0; i < r->cfg.workers; i++)
		if (!fl->w[i].talked)
			return 0; /* welcomed, its READY not come yet */
	if ((rc = flight_form(r)) == 1)
		for (int i = 0; i < r->cfg.workers; i++)
			if (fl->w[i].call != NULL)
				rep_flights_dispatch(r, i, 0);
	return rc == MEDHA_ENOMEM ? rc : 0;
}

/* ---- to the workers and back ---- */

void
rep_flights_dispatch(struct medha_replica *r, int i, int idle_ok)
{
	struct rep_flights *fl = &r->fl;
	struct rep_link *w = &fl->w[i];
	struct medha_msg m;
	struct flight *f = NULL;
	int64_t nf;

	if (w->call == NULL || w->done < w->sent)
		return;
	nf = rep_seqs_due(&r->seqs, i, w->sent, MEDHA_PROTO_MAX_ITEMS);
	for (int k = 0; k < fl->n && f == NULL; k++) {
		struct flight *g = flight_at(fl, k);
		if (g->seq > w->sent)
			f = g;
	}
	memset(&m, 0, sizeof(m));
	if (f != NULL) {
		m.type = MEDHA_MSG_BATCH;
		m.batch.seq = f->seq;
		m.batch.items = f->mi;
		m.batch.n_items = f->b.n_items;
		if (w->gen_sent != fl->peers.gen && r->cfg.workers > 1) {
			m.batch.peers = &fl->peers;
			w->gen_sent = fl->peers.gen;
		}
		w->sent = f->seq;
	} else if (idle_ok || nf > 0)
		m.type = MEDHA_MSG_IDLE;
	else
		return;
	m.batch.frees = r->seqs.q[i].h;
	m.batch.keeps = r->seqs.q[i].keep;
	m.batch.n_frees = nf;
	medha_srv_msg(r->f.srv, w->call, &m);
	w->call = NULL;
	rep_seqs_sent(&r->seqs, i, nf);
	w->seen = medha_now();
}

/* The batches at the head of the ring that every worker has answered:
 * 0, or MEDHA_ENOMEM (the caller faults). */
static int
flights_land(struct medha_replica *r)
{
	struct rep_flights *fl = &r->fl;

	while (fl->n > 0 && fl->ring[fl->head].left == 0) {
		struct flight *f = &fl->ring[fl->head];
		struct medha_sched_result *out =
		    medha_calloc(f->b.n_items, sizeof(*out));

		if (out == NULL)
			return MEDHA_ENOMEM;
		for (int i = 0; i < f->b.n_items; i++) {
			const struct medha_sched_item *it = &f->b.items[i];
			struct lreq *q = rep_lreq_get(r, it->req);
			const struct medha_req *cr =
			    medha_sched_req(r->core.sched, it->req);

			out[i].token = -1;
			if (!(it->decode || it->last) || f->tok[i] < 0)
				continue;
			out[i].token = f->tok[i];
			/* max_tokens 0: a prefill alone, its token no output */
			if (q != NULL && cr != NULL && cr->max_tokens > 0) {
				out[i].stop = rep_on_token(r, q, out[i].token,
				    f->lp != NULL ? f->lp[i] : NULL);
				rep_send_tokens(r, q, 0);
			}
		}
		medha_sched_batch_done(r->core.sched, &f->b, out, now_s(r));
		free(out);
		flight_clear(f);
		fl->head = (fl->head + 1) % fl->nring;
		fl->n--;
		rep_drain_records(r);
	}
	return 0;
}

int
rep_flights_result(struct medha_replica *r, int i, int stage0,
    const struct medha_msg_result *res, char *why, size_t whylen)
{
	struct rep_link *w = &r->fl.w[i];
	struct flight *f;
	int64_t k = 0;

	/* the work its experts did, whatever becomes of the batch */
	for (int e = 0; e < res->n_experts; e++)
		r->fl.experts[e] += res->experts[e];
	if (res->n_experts > r->fl.n_experts)
		r->fl.n_experts = res->n_experts;
	if (res->seq <= w->done || res->seq > w->sent) {
		medha_log(MEDHA_LOG_WARN,
		    "worker %d: result of batch %llu, expected %llu", i,
		    (unsigned long long)res->seq, (unsigned long long)w->sent);
		return 0;
	}
	w->done = res->seq;
	if ((f = flight_of(&r->fl, res->seq)) == NULL)
		return 0; /* a batch made void by a fault */
	if (res->error[0] != '\0') {
		snprintf(why, whylen, "batch failed on worker %d: %s", i,
		    res->error);
		medha_log(MEDHA_LOG_ERROR, "%s", why);
		return -1;
	}
	/* a token outside the vocabulary is a worker gone wrong (or one
	   that is not ours): its batch fails, no client gets the id */
	for (int64_t j = 0; j < res->n_tokens; j++)
		if (res->tokens[j].token < 0 ||
		    res->tokens[j].token >= r->core.vocab) {
			snprintf(why, whylen,
			    "worker %d sent token %d, outside the vocabulary "
			    "(%d)",
			    i, res->tokens[j].token, r->core.vocab);
			medha_log(MEDHA_LOG_ERROR, "%s", why);
			return -1;
		}
	/* tokens come in item order; each item's from one worker */
	for (int n = 0; n < f->b.n_items && k < res->n_tokens; n++)
		if (f->mi[n].handle == res->tokens[k].handle) {
			const struct medha_token_lp *lp = res->tokens[k].lp;
			if (lp != NULL && f->lp == NULL)
				f->lp = medha_calloc(f->b.n_items,
				    sizeof(*f->lp));
			if (lp != NULL && f->lp != NULL &&
			    (f->lp[n] = malloc(sizeof(*lp))) != NULL)
				*f->lp[n] = *lp;
			f->tok[n] = res->tokens[k++].token;
		}
	if (k < res->n_tokens)
		medha_log(MEDHA_LOG_WARN,
		    "worker %d: %lld tokens of batch %llu for no item", i,
		    (long long)(res->n_tokens - k),
		    (unsigned long long)res->seq);
	f->left--;
	if (stage0)
		f->left0--;
	if (flights_land(r) != 0) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	return 0;
}
