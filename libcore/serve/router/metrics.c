/*
 * metrics.c: the router's figures (router.h, medha_router_metrics(): what
 * /metrics of the HTTP front door shows). The main thread keeps them as
 * requests end and after each pass, under a mutex of their own, so that
 * a snapshot from any thread never waits for the loop. Calls nothing of
 * the router's: it reads the replicas' table and the held count.
 */
#include "serve/router/impl.h"

#include <string.h>

const double medha_router_ttft_le[MEDHA_HIST_BUCKETS] = {0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const double medha_router_tpot_le[MEDHA_HIST_BUCKETS] = {0.001, 0.0025,
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5};
const double medha_router_e2e_le[MEDHA_HIST_BUCKETS] = {0.1, 0.25, 0.5, 1,
    2.5, 5, 10, 20, 40, 60, 120, 300};

void
medha_hist_add(struct medha_hist *h, const double *le, double v)
{
	int i = 0;

	while (i < MEDHA_HIST_BUCKETS && v > le[i])
		i++;
	h->n[i]++;
	h->count++;
	h->sum += v;
}

/* A request ended with rec (from a replica) or with status (made here). */
void
rt_count_end(struct medha_router *r, const struct medha_record *rec, int status)
{
	pthread_mutex_lock(&r->mmu);
	if (rec == NULL) {
		r->met.requests[status]++;
	} else {
		if (rec->status >= 0 && rec->status < MEDHA_STATUS_COUNT)
			r->met.requests[rec->status]++;
		r->met.prompt_tokens += rec->prompt_tokens;
		r->met.generation_tokens += rec->output_tokens;
		r->met.cached_tokens += rec->cached_tokens;
		r->met.cache_hits += rec->cached_tokens > 0;
		r->met.preemptions += rec->preemptions;
		if (rec->status == MEDHA_STATUS_OK && rec->output_tokens > 0)
			medha_hist_add(&r->met.ttft, medha_router_ttft_le,
			    rec->ttft);
		if (rec->status == MEDHA_STATUS_OK && rec->output_tokens > 1)
			medha_hist_add(&r->met.tpot, medha_router_tpot_le,
			    rec->tpot_mean);
		if (rec->queue_time > 0)
			medha_hist_add(&r->met.queue, medha_router_ttft_le,
			    rec->queue_time);
		if (rec->status == MEDHA_STATUS_OK) {
			medha_hist_add(&r->met.e2e, medha_router_e2e_le,
			    rec->finish - rec->arrival);
			if (rec->finish_reason >= 0 &&
			    rec->finish_reason < MEDHA_FINISH_COUNT)
				r->met.finished[rec->finish_reason]++;
		}
	}
	pthread_mutex_unlock(&r->mmu);
}

void
rt_count_refused(struct medha_router *r)
{
	pthread_mutex_lock(&r->mmu);
	r->met.refused++;
	pthread_mutex_unlock(&r->mmu);
}

/* The replicas' states and the gauges, after a pass. */
void
rt_count_gauges(struct medha_router *r)
{
	const char *model = NULL;

	pthread_mutex_lock(&r->mmu);
	r->met.cache_evictions = 0;
	r->met.progress_batches = 0;
	r->met.n_experts = 0;
	memset(r->met.experts, 0, sizeof(r->met.experts));
	for (int i = 0; i < r->nup; i++) {
		const struct up *u = &r->up[i];
		struct medha_router_replica_stat *st = &r->met.rep[i];
		st->url = u->url;
		st->up = u->alive;
		st->ready = u->ready;
		st->workers = u->now.workers;
		st->workers_wanted = u->now.workers_wanted;
		st->pending = u->now.pending;
		st->queue = u->now.queue;
		st->kv_blocks = u->now.kv_blocks;
		st->kv_used = u->now.kv_used;
		st->block_size = u->now.block_size;
		st->live = u->live;
		r->met.cache_evictions += u->evicted_sum;
		r->met.progress_batches += u->progress_sum;
		for (int e = 0; e < u->nx; e++)
			r->met.experts[e] += u->xsum[e];
		if (u->nx > r->met.n_experts)
			r->met.n_experts = u->nx;
		if (u->alive && u->now.model[0] != '\0' &&
		    (model == NULL || u->ready))
			model = u->now.model;
	}
	if (model != NULL)
		memcpy(r->met.model, model, sizeof(r->met.model));
	r->met.ready = r->ready && !r->f.drain.on;
	r->met.draining = r->f.drain.on;
	r->met.in_flight = r->f.live;
	r->met.held = r->nheld;
	pthread_mutex_unlock(&r->mmu);
}

int
medha_router_metrics(struct medha_router *r, struct medha_router_metrics *m)
{
	struct medha_router_replica_stat *rep =
	    medha_calloc((size_t)r->nup, sizeof(*rep));

	if (rep == NULL)
		return MEDHA_ENOMEM;
	pthread_mutex_lock(&r->mmu);
	*m = r->met;
	memcpy(rep, r->met.rep, (size_t)r->nup * sizeof(*rep));
	pthread_mutex_unlock(&r->mmu);
	m->rep = rep;
	m->nreplicas = r->nup;
	m->uptime = medha_now() - r->t0;
	return 0;
}
