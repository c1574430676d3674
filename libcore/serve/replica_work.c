/*
 * replica_work.c: the replica's workers (replica.h). A worker says
 * HELLO with its place in the tp x spp x kvp grid (layout.h), then asks
 * for work with READY and brings the tokens it sampled with RESULT; each
 * batch the core forms goes to every worker as a flight, done when all
 * have answered (stage 0 is free for the next one when the first stage's
 * workers have: SPP pipelining). A worker that goes away or falls silent
 * fails the requests holding KV, and the replica serves again when one
 * of the same shape returns.
 */
#include "serve/replica_impl.h"

#include "engine/backend.h"
#include "layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- workers ---- */

static void dispatch(struct medha_replica *r, struct wslot *w, int idle_ok);

static struct wslot *
worker_of(struct medha_replica *r, uint32_t peer, int id)
{
	if (id < 0 || id >= r->cfg.workers || !r->w[id].present ||
	    r->w[id].peer != peer)
		return NULL;
	return &r->w[id];
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

/* Every batch in flight is void (the core was told). */
void
rep_flights_void(struct medha_replica *r)
{
	for (int i = 0; i < r->nfl; i++)
		flight_clear(&r->fl[(r->fl_head + i) % r->spp]);
	r->nfl = 0;
	r->fl_head = 0;
	r->bseq_void = r->bseq;
}

/* The batch in flight of batch_seq seq, or NULL. */
static struct flight *
flight_of(struct medha_replica *r, uint64_t seq)
{
	for (int i = 0; i < r->nfl; i++) {
		struct flight *f = &r->fl[(r->fl_head + i) % r->spp];
		if (f->seq == seq)
			return f;
	}
	return NULL;
}

/* The core fails (or, a worker lost, recomputes) what depended on the
 * workers; batches in flight void. */
static void
replica_fault_how(struct medha_replica *r, const char *reason, int lost)
{
	int n = 0;

	if (r->core != NULL) {
		n = lost ? medha_sched_worker_lost(r->core, reason, now_s(r))
		         : medha_sched_fault(r->core, reason, now_s(r));
		if (n > 0)
			rep_drain_records(r);
	}
	rep_flights_void(r);
	if (n > 0)
		medha_log(MEDHA_LOG_WARN, "%s: %d requests failed", reason, n);
	if (r->core != NULL && medha_sched_recovering(r->core) > 0)
		medha_log(MEDHA_LOG_WARN,
		    "%s: %lld requests to be recomputed once it is back",
		    reason, (long long)medha_sched_recovering(r->core));
}

static void
replica_fault(struct medha_replica *r, const char *reason)
{
	replica_fault_how(r, reason, 0);
}

void
rep_worker_lost(struct medha_replica *r, struct wslot *w, const char *why)
{
	int id = (int)(w - r->w);
	char reason[200];

	if (w->call != NULL)
		medha_srv_drop(r->f.srv, w->call);
	free(w->frees);
	free(w->frees_after);
	free(w->keeps);
	memset(w, 0, sizeof(*w));
	r->nworkers--;
	r->ready = 0;
	snprintf(reason, sizeof(reason), "worker %d lost: %s", id, why);
	replica_fault_how(r, reason, 1);
	medha_log(MEDHA_LOG_WARN, "worker %d lost (%s); degraded, %d of %d "
	    "workers", id, why, r->nworkers, r->cfg.workers);
}

/* Whether h's layout fits the replica's workers (the core's layout:
 * rep_layout_check) and, where n_layers > 0, the stages of a model of
 * n_layers; why says how it does not. */
static int
hello_fits(struct medha_replica *r, const struct medha_msg_hello *h,
    int n_layers, char *why, size_t whylen)
{
	int lo, hi;

	if ((int64_t)h->tp * h->spp * h->kvp != r->cfg.workers)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "layout tp %d x spp %d x kvp %d is not the replica's %d "
		    "workers",
		    h->tp, h->spp, h->kvp, r->cfg.workers);
	if (h->spp > MEDHA_PROTO_MAX_GROUPS || h->kvp > MEDHA_PROTO_MAX_GROUPS)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "spp %d, kvp %d: at most %d each", h->spp, h->kvp,
		    MEDHA_PROTO_MAX_GROUPS);
	if (r->cfg.workers > 1 && h->peer[0] == '\0')
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "no peer address: a replica of %d workers needs one",
		    r->cfg.workers);
	if (n_layers > 0) {
		medha_stage_layers(n_layers, h->spp, h->rank_spp, &lo, &hi);
		if (h->layer_lo != lo || h->layer_hi != hi)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "stage %d of %d runs layers [%d, %d), not the "
			    "worker's [%d, %d)",
			    h->rank_spp, h->spp, lo, hi, h->layer_lo,
			    h->layer_hi);
	}
	return 0;
}

static void
hello_refuse(struct medha_replica *r, struct medha_srv_ev *ev, const char *why)
{
	char line[320];

	/* the same refusal again is counted, and said every 30 s (a
	   worker that retries would fill the log otherwise) */
	snprintf(line, sizeof(line), "worker refused: %s", why);
	medha_backoff_refused(&r->refused, line);
	medha_srv_error(r->f.srv, ev->call, MEDHA_EINVAL, "%s", why);
}

/*
 * A worker's HELLO: all of it is checked (backend, model, layout, layers,
 * KV shape) before anything is made from it or dropped for it, so that a
 * refused one leaves the replica as it was; then the first worker's (or
 * the first of another model's or layout's, with no worker there and
 * nothing in flight) makes the core.
 */
static void
on_hello(struct medha_replica *r, struct medha_srv_ev *ev,
    const struct medha_msg_hello *h)
{
	struct medha_msg m = {.type = MEDHA_MSG_WELCOME};
	char why[256];
	const struct medha_backend_kind *k;
	struct medha_layout lay = {h->tp, h->spp, h->kvp, 0, 0, 0, 0};
	int id = medha_layout_rank(&lay, h->rank_tp, h->rank_spp, h->rank_kvp);
	struct medha_pred_model pm;
	int change, relayout, fresh, n_layers = r->n_layers;

	/* the kinds built here: a kind the registry knows but cannot open
	   (cuda before its backend) has no workers to drive yet */
	k = medha_backend_find(h->backend);
	if (k == NULL || k->open == NULL) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_EUNSUP,
		    "backend %s: %s", h->backend,
		    k == NULL ? "unknown to this scheduler"
		              : "not built into this scheduler");
		return;
	}
	/* its model: the replica's, or one a core is to be made of */
	if ((change = rep_model_check(r, h, why, sizeof(why))) < 0) {
		hello_refuse(r, ev, why);
		return;
	}
	/* its layout: the core's, or one a core is to be made for */
	if ((relayout = rep_layout_check(r, h, why, sizeof(why))) < 0) {
		hello_refuse(r, ev, why);
		return;
	}
	fresh = change || relayout || r->core == NULL;
	if (fresh) {
		if (rep_core_model(r, h, &pm, why, sizeof(why)) != 0) {
			hello_refuse(r, ev, why);
			return;
		}
		n_layers = pm.c.n_layers;
	}
	/* the layout before its rank indexes r->w, and the layers */
	if (hello_fits(r, h, n_layers, why, sizeof(why)) != 0) {
		hello_refuse(r, ev, why);
		return;
	}
	if (r->w[id].present && r->w[id].peer != ev->peer) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOSPACE,
		    "rank %d (tp %d, spp %d, kvp %d) is connected already",
		    id, h->rank_tp, h->rank_spp, h->rank_kvp);
		return;
	}
	if (!fresh &&
	    (h->block_size != medha_sched_block_size(r->core) ||
	        h->n_blocks < medha_sched_group_capacity(r->core) ||
	        h->vocab != r->vocab || strcmp(h->backend, r->backend) != 0 ||
	        h->caps != r->caps)) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_EINVAL,
		    "worker does not match the replica (%s backend, blocks "
		    "of %d, %lld blocks, vocab %d, %s)",
		    r->backend, medha_sched_block_size(r->core),
		    (long long)medha_sched_group_capacity(r->core), r->vocab,
		    r->caps & MEDHA_HELLO_WINDOW_KV ? "--window-kv"
		                                    : "no --window-kv");
		return;
	}
	/* h is good: now the core (a failure here leaves none made) */
	if (change || relayout)
		rep_drop_core(r, h);
	/* the ring of batches in flight is h's spp with each core made
	   (nothing flies without one; a ring left by a core whose making
	   failed may be of another spp) */
	if (fresh) {
		free(r->fl);
		r->fl = NULL;
	}
	if (r->fl == NULL &&
	    (r->fl = medha_calloc(h->spp, sizeof(*r->fl))) == NULL) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM,
		    "out of memory");
		return;
	}
	if (fresh && rep_make_core(r, h, &pm, why, sizeof(why)) != 0) {
		hello_refuse(r, ev, why);
		if (r->have_pred) {
			medha_pred_free(&r->pred);
			r->have_pred = 0;
		}
		return;
	}
	if (r->w[id].present)
		rep_worker_lost(r, &r->w[id], "said HELLO again");
	r->tp = h->tp;
	r->spp = h->spp;
	r->kvp = h->kvp;
	memset(&r->w[id], 0, sizeof(r->w[id]));
	r->w[id].present = 1;
	r->w[id].peer = ev->peer;
	r->w[id].hello = *h;
	if (r->fp[0] == '\0')
		memcpy(r->fp, h->fingerprint, sizeof(r->fp));
	r->w[id].last_seen = medha_now();
	r->w[id].sent = r->w[id].done = r->bseq;
	snprintf(r->peers.urls[id], sizeof(r->peers.urls[id]), "%s", h->peer);
	r->nworkers++;
	m.worker_id = id;
	medha_srv_msg(r->f.srv, ev->call, &m);
	medha_log(MEDHA_LOG_INFO,
	    "worker %d (tp %d, spp %d, kvp %d): %s backend on %s, %s, "
	    "layers [%d, %d), pid %d, %d KV blocks of %d",
	    id, h->rank_tp, h->rank_spp, h->rank_kvp, h->backend, h->gpu,
	    h->model,
	    h->layer_lo, h->layer_hi, h->pid, h->n_blocks, h->block_size);
	if (r->nworkers == r->cfg.workers && !r->ready) {
		r->ready = 1;
		r->peers.gen++; /* the table the workers get next */
		r->peers.n = r->cfg.workers;
		r->peers.kvp_tokens = medha_sched_group_tokens(r->core);
		medha_log(MEDHA_LOG_INFO,
		    "ready: %d worker%s (tp %d x spp %d x kvp %d), %s "
		    "backend, model %s, %lld KV blocks of %d",
		    r->nworkers, r->nworkers > 1 ? "s" : "", r->tp, r->spp,
		    r->kvp, r->backend, r->model,
		    (long long)medha_sched_group_capacity(r->core),
		    medha_sched_block_size(r->core));
	}
}

/*
 * A preempted request's sequence, kept to [0, to) for the cache, is the
 * core's ghost's from now on (MEDHA_KVOP_MOVE): the workers keep it
 * under its name, the ghost is called so, and the request gets a new
 * name for the sequence of its prefill again. 0 or MEDHA_ENOMEM.
 */
static int
move_op(struct medha_replica *r, const struct medha_kvop *op)
{
	uint64_t old = rep_wname(r, op->req), fresh;

	rep_free_later(r, old, op->to);
	/* generation 0, as no request's handle; a name made here is never
	   a key (the core's ghosts are keys, never sent) */
	if (++r->wname_next > 0xffffffffu)
		r->wname_next = 1;
	fresh = r->wname_next;
	if (medha_map_put(&r->wname, op->src, (void *)(uintptr_t)old) != 0 ||
	    medha_map_put(&r->wname, op->req, (void *)(uintptr_t)fresh) != 0)
		return MEDHA_ENOMEM;
	return 0;
}

/*
 * Prefix caching and preemption: the core's ops of b, the core's names
 * turned into the workers' (rep_wname). A TRIM goes to every worker like
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
			rep_free_later(r, rep_wname(r, op->req), op->to);
			/* a name let go for good: a ghost's, or an ended
			   request's (a live one keeps its own) */
			if (op->to == 0 && (op->req >> 32 == 0 ||
			                       rep_lreq_get(r, op->req) == NULL))
				medha_map_del(&r->wname, op->req);
			continue;
		}
		if (op->op == MEDHA_KVOP_MOVE) {
			if (move_op(r, op) != 0)
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
		    rep_wname(r, op->src), op->from, op->to};
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
		q->n_forks = 0; /* sent: the sequence exists from now on */
		q->started = 1;
	}
	return 0;
}

/* A batch from the core into the ring: 1, 0 (nothing to run) or < 0. */
static int
flight_form(struct medha_replica *r)
{
	struct medha_sched_batch b;
	struct flight *f;
	int64_t nids = 0;
	int rc;

	rc = medha_sched_next_batch(r->core, now_s(r), &b);
	if (rc >= 0 && take_ops(r, &b) != 0)
		rc = MEDHA_ENOMEM;
	if (rc != 1) {
		if (rc < 0)
			medha_log(MEDHA_LOG_ERROR, "forming a batch: %s",
			    medha_strerror(rc));
		return rc;
	}
	f = &r->fl[(r->fl_head + r->nfl) % r->spp];
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
		replica_fault(r, "out of memory");
		return MEDHA_ENOMEM;
	}
	memcpy(f->b.items, b.items, b.n_items * sizeof(*b.items));
	nids = 0;
	for (int i = 0; i < b.n_items; i++) {
		const struct medha_sched_item *it = &b.items[i];
		struct lreq *q = rep_lreq_get(r, it->req);
		struct medha_msg_item *mi = &f->mi[i];

		MEDHA_ASSERT(q != NULL);
		mi->handle = rep_wname(r, it->req);
		mi->pos = it->kv;
		mi->ids = f->ids + nids;
		mi->n_ids = it->decode ? 1 : it->tokens;
		if (it->decode)
			mi->ids[0] = q->last;
		else
			rep_prompt_ids(r, q, it->kv, mi->n_ids, mi->ids);
		nids += mi->n_ids;
		mi->sample = it->decode || it->last;
		if (r->kvp > 1) {
			/* KVP: the groups of the pieces up to the one the
			   tokens fall in (the core never cuts across one) */
			const struct medha_req *cr =
			    medha_sched_req(r->core, it->req);
			int64_t P = medha_sched_group_tokens(r->core);
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
			/* resumed: its sampler goes on after the tokens it
			   drew (a request that forks from the cache alone
			   has none yet) */
			mi->params.skip = (uint64_t)q->n_out;
			/* min_tokens: what is left after the tokens out
			   already (a preempted request's sampler is new) */
			if ((mi->params.min_tokens -= q->n_out) <= 0) {
				mi->params.min_tokens = 0;
				mi->params.n_ban = 0;
			}
			if (!q->started)
				q->first_batch = now_s(r);
			q->started = 1;
		}
		f->tok[i] = -1;
	}
	if (flight_forks(r, f) != 0) {
		flight_clear(f);
		replica_fault(r, "out of memory");
		return MEDHA_ENOMEM;
	}
	f->seq = ++r->bseq;
	f->left = r->cfg.workers;
	f->left0 = r->tp * r->kvp;
	r->nfl++;
	r->batches++;
	return 1;
}

/* Form the next batch when stage 0 is free and fewer than spp fly. */
static void
flights_fill(struct medha_replica *r)
{
	if (!r->ready || r->core == NULL || r->nfl >= r->spp)
		return;
	if (r->nfl > 0 &&
	    r->fl[(r->fl_head + r->nfl - 1) % r->spp].left0 > 0)
		return; /* stage 0 still runs the last one */
	if (flight_form(r) == 1)
		for (int i = 0; i < r->cfg.workers; i++)
			if (r->w[i].present && r->w[i].call != NULL)
				dispatch(r, &r->w[i], 0);
}

/* Answer w's held call with its next batch, or with IDLE when asked
 * to or when it has sequences to free. A free goes out once w has been
 * sent every batch that was formed before its request ended: the
 * worker frees before it runs the batch of the same message, and a
 * request cancelled while its prompt chunks fly still has items in the
 * batches it was not sent yet; not for batches made void (bseq_void),
 * which it never will be. */
static void
dispatch(struct medha_replica *r, struct wslot *w, int idle_ok)
{
	struct medha_msg m;
	struct flight *f = NULL;
	int64_t nf = 0;

	if (w->call == NULL || w->done < w->sent)
		return;
	while (nf < w->nfrees && nf < MEDHA_PROTO_MAX_ITEMS &&
	    (w->frees_after[nf] <= w->sent ||
	        w->frees_after[nf] <= r->bseq_void))
		nf++; /* the rest go with the next message */
	for (int i = 0; i < r->nfl && f == NULL; i++) {
		struct flight *g = &r->fl[(r->fl_head + i) % r->spp];
		if (g->seq > w->sent)
			f = g;
	}
	memset(&m, 0, sizeof(m));
	if (f != NULL) {
		m.type = MEDHA_MSG_BATCH;
		m.batch.seq = f->seq;
		m.batch.items = f->mi;
		m.batch.n_items = f->b.n_items;
		if (w->gen_sent != r->peers.gen && r->cfg.workers > 1) {
			m.batch.peers = &r->peers;
			w->gen_sent = r->peers.gen;
		}
		w->sent = f->seq;
	} else if (idle_ok || nf > 0)
		m.type = MEDHA_MSG_IDLE;
	else
		return;
	m.batch.frees = w->frees;
	m.batch.keeps = w->keeps;
	m.batch.n_frees = nf;
	medha_srv_msg(r->f.srv, w->call, &m);
	w->call = NULL;
	w->nfrees -= nf;
	if (w->nfrees > 0) { /* (frees may be NULL when there are none) */
		memmove(w->frees, w->frees + nf,
		    (size_t)w->nfrees * sizeof(*w->frees));
		memmove(w->frees_after, w->frees_after + nf,
		    (size_t)w->nfrees * sizeof(*w->frees_after));
		memmove(w->keeps, w->keeps + nf,
		    (size_t)w->nfrees * sizeof(*w->keeps));
	}
	w->last_seen = medha_now();
}

/* The batches at the head of the ring that every worker has answered. */
static void
flights_land(struct medha_replica *r)
{
	while (r->nfl > 0 && r->fl[r->fl_head].left == 0) {
		struct flight *f = &r->fl[r->fl_head];
		struct medha_sched_result *out =
		    medha_calloc(f->b.n_items, sizeof(*out));

		if (out == NULL) {
			replica_fault(r, "out of memory");
			return;
		}
		for (int i = 0; i < f->b.n_items; i++) {
			const struct medha_sched_item *it = &f->b.items[i];
			struct lreq *q = rep_lreq_get(r, it->req);
			const struct medha_req *cr = medha_sched_req(r->core,
			    it->req);

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
		medha_sched_batch_done(r->core, &f->b, out, now_s(r));
		free(out);
		flight_clear(f);
		r->fl_head = (r->fl_head + 1) % r->spp;
		r->nfl--;
		rep_drain_records(r);
	}
}

static void
on_result(struct medha_replica *r, struct wslot *w,
    const struct medha_msg_result *res)
{
	struct flight *f;
	int64_t k = 0;

	/* the work its experts did, whatever becomes of the batch */
	for (int e = 0; e < res->n_experts; e++)
		r->experts[e] += res->experts[e];
	if (res->n_experts > r->n_experts)
		r->n_experts = res->n_experts;
	if (res->seq <= w->done || res->seq > w->sent) {
		medha_log(MEDHA_LOG_WARN,
		    "worker %d: result of batch %llu, expected %llu",
		    (int)(w - r->w), (unsigned long long)res->seq,
		    (unsigned long long)w->sent);
		return;
	}
	w->done = res->seq;
	if ((f = flight_of(r, res->seq)) == NULL)
		return; /* a batch made void by a fault */
	if (res->error[0] != '\0') {
		char reason[300];
		snprintf(reason, sizeof(reason),
		    "batch failed on worker %d: %s", (int)(w - r->w),
		    res->error);
		medha_log(MEDHA_LOG_ERROR, "%s", reason);
		replica_fault(r, reason);
		return;
	}
	/* a token outside the vocabulary is a worker gone wrong (or one
	   that is not ours): its batch fails, no client gets the id */
	for (int64_t j = 0; j < res->n_tokens; j++)
		if (res->tokens[j].token < 0 ||
		    res->tokens[j].token >= r->vocab) {
			char reason[200];
			snprintf(reason, sizeof(reason),
			    "worker %d sent token %d, outside the vocabulary "
			    "(%d)",
			    (int)(w - r->w), res->tokens[j].token, r->vocab);
			medha_log(MEDHA_LOG_ERROR, "%s", reason);
			replica_fault(r, reason);
			return;
		}
	/* tokens come in item order; each item's from one worker */
	for (int i = 0; i < f->b.n_items && k < res->n_tokens; i++)
		if (f->mi[i].handle == res->tokens[k].handle) {
			const struct medha_token_lp *lp = res->tokens[k].lp;
			if (lp != NULL && f->lp == NULL)
				f->lp = medha_calloc(f->b.n_items,
				    sizeof(*f->lp));
			if (lp != NULL && f->lp != NULL &&
			    (f->lp[i] = malloc(sizeof(*lp))) != NULL)
				*f->lp[i] = *lp;
			f->tok[i] = res->tokens[k++].token;
		}
	if (k < res->n_tokens)
		medha_log(MEDHA_LOG_WARN,
		    "worker %d: %lld tokens of batch %llu for no item",
		    (int)(w - r->w), (long long)(res->n_tokens - k),
		    (unsigned long long)res->seq);
	f->left--;
	if (w->hello.rank_spp == 0)
		f->left0--;
	flights_land(r);
}

/* A worker's connection closed: 1, or 0 if peer is no worker's. */
int
rep_on_peer_gone(void *arg, uint32_t peer)
{
	struct medha_replica *r = arg;

	for (int i = 0; i < r->cfg.workers; i++)
		if (r->w[i].present && r->w[i].peer == peer) {
			rep_worker_lost(r, &r->w[i], "connection closed");
			return 1;
		}
	return 0;
}

/* A worker's message: READY, RESULT or HEARTBEAT (after its HELLO). */
static void
on_worker(struct medha_replica *r, struct medha_srv_ev *ev,
    const struct medha_msg *m)
{
	struct wslot *w = worker_of(r, ev->peer,
	    m->type == MEDHA_MSG_RESULT ? m->result.worker_id : m->worker_id);

	if (w == NULL) {
		medha_log(MEDHA_LOG_WARN,
		    "peer %u: message refused: %s from a peer that is not a "
		    "worker of this replica",
		    ev->peer, medha_msg_type_name(m->type));
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOTFOUND,
		    "not a worker of this replica: say HELLO");
		return;
	}
	w->last_seen = medha_now();
	if (m->type == MEDHA_MSG_HEARTBEAT) {
		/* the batch it runs made void by a loss: IDLE, and the
		   worker drops it rather than wait for the lost peer */
		answer_type(r, ev->call, w->done < w->sent &&
		        flight_of(r, w->sent) == NULL ? MEDHA_MSG_IDLE
		                                      : MEDHA_MSG_OK);
		return;
	}
	if (w->call != NULL) /* a second request: the first ends */
		medha_srv_drop(r->f.srv, w->call);
	w->call = ev->call;
	w->call_since = medha_now();
	/* the next batch goes out before the tokens of this one */
	medha_clients_hold(&r->f.clients);
	if (m->type == MEDHA_MSG_RESULT)
		on_result(r, w, &m->result);
	else if (w->done < w->sent) {
		/* READY with a batch out: the worker started over */
		w->done = w->sent;
		replica_fault(r, "worker dropped its batch");
	}
	flights_fill(r);
	dispatch(r, w, 0);
	medha_clients_release(&r->f.clients);
}

/* The messages of workers; the rest are refused. */
int
rep_on_other(void *arg, struct medha_srv_ev *ev, struct medha_msg *m)
{
	struct medha_replica *r = arg;

	switch (m->type) {
	case MEDHA_MSG_HELLO: on_hello(r, ev, &m->hello); return 0;
	case MEDHA_MSG_READY:
	case MEDHA_MSG_RESULT:
	case MEDHA_MSG_HEARTBEAT: on_worker(r, ev, m); return 0;
	default: return MEDHA_EUNSUP;
	}
}

/* Held calls answered, dead workers noticed, batches sent. */
void
rep_housekeeping(void *arg)
{
	struct medha_replica *r = arg;
	double t = medha_now();

	rep_tok_collect(r);
	uint32_t deaf = medha_clients_tick(&r->f.clients, t);
	if (deaf != 0) {
		medha_log(MEDHA_LOG_WARN,
		    "client %u has not collected its events for %d s: "
		    "cancelling its requests", deaf, MEDHA_CLIENT_STALL_S);
		medha_front_gone(&r->f, deaf);
	}
	for (int i = 0; i < r->cfg.workers; i++) {
		struct wslot *w = &r->w[i];
		if (!w->present)
			continue;
		if (t - w->last_seen > DEAD) {
			rep_worker_lost(r, w, "silent for too long");
			continue;
		}
		dispatch(r, w, w->call != NULL && t - w->call_since >= HB);
	}
	/* a lost worker's requests not recomputed in time fail */
	if (r->core != NULL &&
	    medha_sched_recover_expire(r->core, now_s(r)) > 0)
		rep_drain_records(r);
	flights_fill(r);
}
