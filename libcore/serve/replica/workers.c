/*
 * workers.c: the replica's workers (workers.h). A worker says HELLO
 * with its place in the tp x spp x kvp grid (layout.h), then asks for
 * work with READY and brings the tokens it sampled with RESULT; the
 * batches go out and come back through flights.c. A worker that goes
 * away or falls silent fails the requests holding KV (or has them
 * recomputed once one of the same shape is back), and the replica
 * serves again when one returns. Calls flights.c and the files below
 * it (core.c: the core made from a HELLO); replica.c calls it.
 */
#include "serve/replica/impl.h"

#include "engine/backend.h"
#include "layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
rep_workers_init(struct medha_replica *r)
{
	memset(&r->ws, 0, sizeof(r->ws));
	if ((r->ws.w = medha_calloc(r->cfg.workers, sizeof(*r->ws.w))) ==
	    NULL)
		return MEDHA_ENOMEM;
	return 0;
}

void
rep_workers_free(struct medha_replica *r)
{
	free(r->ws.w);
	memset(&r->ws, 0, sizeof(r->ws));
}

/* ---- faults ---- */

/* The core fails (or, a worker lost, recomputes) what depended on the
 * workers; batches in flight void. */
static void
fault(struct medha_replica *r, const char *reason, int lost)
{
	struct medha_sched *core = r->core.sched;
	int n = 0;

	if (core != NULL) {
		n = lost ? medha_sched_worker_lost(core, reason, now_s(r))
		         : medha_sched_fault(core, reason, now_s(r));
		if (n > 0)
			rep_drain_records(r);
	}
	rep_flights_void(r);
	rep_reqs_drop_forks(r);
	if (n > 0)
		medha_log(MEDHA_LOG_WARN, "%s: %d requests failed", reason, n);
	if (core != NULL && medha_sched_recovering(core) > 0)
		medha_log(MEDHA_LOG_WARN,
		    "%s: %lld requests to be recomputed once it is back",
		    reason, (long long)medha_sched_recovering(core));
}

static void
worker_lost(struct medha_replica *r, int id, const char *why)
{
	struct rep_workers *ws = &r->ws;
	char reason[200];

	rep_flights_leave(r, id);
	rep_seqs_leave(&r->seqs, id);
	memset(&ws->w[id], 0, sizeof(ws->w[id]));
	ws->n--;
	ws->ready = 0;
	snprintf(reason, sizeof(reason), "worker %d lost: %s", id, why);
	fault(r, reason, 1);
	medha_log(MEDHA_LOG_WARN, "worker %d lost (%s); degraded, %d of %d "
	    "workers", id, why, ws->n, r->cfg.workers);
}

/* The next batch formed, once all the workers are there. */
static void
fill(struct medha_replica *r)
{
	if (r->ws.ready && rep_flights_fill(r) != 0)
		fault(r, "out of memory", 0);
}

/* ---- HELLO ---- */

/* Whether h's layout fits the replica's workers (the core's layout:
 * rep_core_layout_check) and, where n_layers > 0, the stages of a model
 * of n_layers; why says how it does not. */
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
	medha_backoff_refused(&r->ws.refused, line);
	medha_srv_error(r->f.srv, ev->call, MEDHA_EINVAL, "%s", why);
}

/* Worker id (h) is there: WELCOME; with the last, the replica is ready. */
static void
hello_join(struct medha_replica *r, struct medha_srv_ev *ev,
    const struct medha_msg_hello *h, int id)
{
	struct rep_workers *ws = &r->ws;
	const struct rep_core *c = &r->core;
	struct medha_msg m = {.type = MEDHA_MSG_WELCOME};

	ws->w[id].present = 1;
	ws->w[id].peer = ev->peer;
	ws->w[id].hello = *h;
	rep_seqs_join(&r->seqs, id);
	rep_flights_join(r, id, h->peer);
	ws->n++;
	m.worker_id = id;
	medha_srv_msg(r->f.srv, ev->call, &m);
	medha_log(MEDHA_LOG_INFO,
	    "worker %d (tp %d, spp %d, kvp %d): %s backend on %s, %s, "
	    "layers [%d, %d), pid %d, %d KV blocks of %d",
	    id, h->rank_tp, h->rank_spp, h->rank_kvp, h->backend, h->gpu,
	    h->model,
	    h->layer_lo, h->layer_hi, h->pid, h->n_blocks, h->block_size);
	if (ws->n == r->cfg.workers && !ws->ready) {
		ws->ready = 1;
		rep_flights_ready(r);
		medha_log(MEDHA_LOG_INFO,
		    "ready: %d worker%s (tp %d x spp %d x kvp %d%s), %s "
		    "backend, model %s, %lld KV blocks of %d",
		    ws->n, ws->n > 1 ? "s" : "", c->tp, c->spp, c->kvp,
		    c->caps & MEDHA_HELLO_EP ? ", experts split whole" : "",
		    c->backend, c->model,
		    (long long)medha_sched_group_capacity(c->sched),
		    medha_sched_block_size(c->sched));
	}
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
	struct rep_workers *ws = &r->ws;
	struct rep_core *c = &r->core;
	char why[256];
	const struct medha_backend_kind *k;
	struct medha_layout lay = {h->tp, h->spp, h->kvp, 0, 0, 0, 0};
	int id = medha_layout_rank(&lay, h->rank_tp, h->rank_spp, h->rank_kvp);
	struct medha_pred_model pm;
	int change, relayout, fresh, n_layers = c->n_layers;
	/* nothing holds state on the core: no worker connected, no
	   request in flight (waiting for workers, or for the tokenizer),
	   no batch */
	int64_t waiting = r->f.live + rep_reqs_tokenizing(r);
	int idle = ws->n == 0 && waiting == 0 && r->fl.n == 0;

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
	if ((change = rep_core_model_check(c, h, idle, why, sizeof(why))) <
	    0) {
		hello_refuse(r, ev, why);
		return;
	}
	/* its layout: the core's, or one a core is to be made for */
	if ((relayout = rep_core_layout_check(c, h, ws->n, idle, waiting, why,
	         sizeof(why))) < 0) {
		hello_refuse(r, ev, why);
		return;
	}
	fresh = change || relayout || c->sched == NULL;
	if (fresh) {
		if (rep_core_model(&r->cfg, h, &pm, why, sizeof(why)) != 0) {
			hello_refuse(r, ev, why);
			return;
		}
		n_layers = pm.c.n_layers;
	}
	/* the layout before its rank indexes ws->w, and the layers */
	if (hello_fits(r, h, n_layers, why, sizeof(why)) != 0) {
		hello_refuse(r, ev, why);
		return;
	}
	if (ws->w[id].present && ws->w[id].peer != ev->peer) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOSPACE,
		    "rank %d (tp %d, spp %d, kvp %d) is connected already",
		    id, h->rank_tp, h->rank_spp, h->rank_kvp);
		return;
	}
	if (ws->w[id].present && !rep_flights_talked(r, id) &&
	    ws->w[id].hello.pid == h->pid) {
		/* its HELLO again before a word in session: one it sent
		   again while the WELCOME was on its way (a link cut off
		   for a while delivers them all at once). It was sent
		   nothing since, so nothing is lost: welcomed again */
		struct medha_msg m = {.type = MEDHA_MSG_WELCOME};

		m.worker_id = id;
		medha_srv_msg(r->f.srv, ev->call, &m);
		rep_flights_heard(r, id);
		return;
	}
	if (!fresh &&
	    (h->block_size != medha_sched_block_size(c->sched) ||
	        h->n_blocks < medha_sched_group_capacity(c->sched) ||
	        h->vocab != c->vocab || strcmp(h->backend, c->backend) != 0 ||
	        h->caps != c->caps)) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_EINVAL,
		    "worker does not match the replica (%s backend, blocks "
		    "of %d, %lld blocks, vocab %d, %s, %s)",
		    c->backend, medha_sched_block_size(c->sched),
		    (long long)medha_sched_group_capacity(c->sched), c->vocab,
		    c->caps & MEDHA_HELLO_WINDOW_KV ? "--window-kv"
		                                    : "no --window-kv",
		    c->caps & MEDHA_HELLO_EP ? "--ep" : "no --ep");
		return;
	}
	/* h is good: now the core (a failure here leaves none made); the
	   workers' names of the old core's sequences (its ghosts') go with
	   it: the next core's handles start over */
	if (change || relayout) {
		rep_core_drop(c, h);
		rep_seqs_forget_all(&r->seqs);
	}
	if (rep_flights_ring(r, h->spp, fresh) != 0) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM,
		    "out of memory");
		return;
	}
	if (fresh && rep_core_make(c, &r->cfg, h, &pm, why, sizeof(why)) != 0) {
		hello_refuse(r, ev, why);
		return;
	}
	if (ws->w[id].present)
		worker_lost(r, id, "said HELLO again");
	hello_join(r, ev, h, id);
}

/* ---- READY, RESULT, HEARTBEAT ---- */

/* The rank of the worker at peer that says it is id, or -1. */
static int
worker_of(const struct medha_replica *r, uint32_t peer, int id)
{
	if (id < 0 || id >= r->cfg.workers || !r->ws.w[id].present ||
	    r->ws.w[id].peer != peer)
		return -1;
	return id;
}

/* A worker's message: READY, RESULT or HEARTBEAT (after its HELLO). */
static void
on_worker(struct medha_replica *r, struct medha_srv_ev *ev,
    const struct medha_msg *m)
{
	int i = worker_of(r, ev->peer,
	    m->type == MEDHA_MSG_RESULT ? m->result.worker_id : m->worker_id);
	char why[300];

	if (i < 0) {
		medha_log(MEDHA_LOG_WARN,
		    "peer %u: message refused: %s from a peer that is not a "
		    "worker of this replica",
		    ev->peer, medha_msg_type_name(m->type));
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOTFOUND,
		    "not a worker of this replica: say HELLO");
		return;
	}
	rep_flights_heard(r, i);
	if (m->type == MEDHA_MSG_HEARTBEAT) {
		/* the batch it runs made void by a loss: IDLE, and the
		   worker drops it rather than wait for the lost peer */
		answer_type(r, ev->call, rep_flights_void_batch(r, i)
		        ? MEDHA_MSG_IDLE
		        : MEDHA_MSG_OK);
		return;
	}
	rep_flights_hold(r, i, ev->call);
	/* the next batch goes out before the tokens of this one */
	medha_clients_hold(&r->f.clients);
	if (m->type == MEDHA_MSG_RESULT) {
		if (rep_flights_result(r, i, r->ws.w[i].hello.rank_spp == 0,
		        &m->result, why, sizeof(why)) != 0)
			fault(r, why, 0);
	} else if (rep_flights_dropped(r, i)) {
		/* READY with a batch out: the worker started over. What
		   the replica held is recomputed, as a lost worker's */
		snprintf(why, sizeof(why), "worker %d dropped its batch", i);
		fault(r, why, 1);
	}
	fill(r);
	rep_flights_dispatch(r, i, 0);
	medha_clients_release(&r->f.clients);
}

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

int
rep_on_peer_gone(void *arg, uint32_t peer)
{
	struct medha_replica *r = arg;

	for (int i = 0; i < r->cfg.workers; i++)
		if (r->ws.w[i].present && r->ws.w[i].peer == peer) {
			worker_lost(r, i, "connection closed");
			return 1;
		}
	return 0;
}

void
rep_workers_tick(struct medha_replica *r, double t)
{
	for (int i = 0; i < r->cfg.workers; i++) {
		const struct rep_link *l = &r->fl.w[i];
		if (!r->ws.w[i].present)
			continue;
		if (t - l->seen > DEAD) {
			worker_lost(r, i, "silent for too long");
			continue;
		}
		rep_flights_dispatch(r, i,
		    l->call != NULL && t - l->call_since >= HB);
	}
	/* a lost worker's requests not recomputed in time fail */
	if (r->core.sched != NULL &&
	    medha_sched_recover_expire(r->core.sched, now_s(r)) > 0)
		rep_drain_records(r);
	fill(r);
}
