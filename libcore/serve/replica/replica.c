/*
 * replica.c: the live replica (replica.h), the top of serve/replica/.
 * One thread runs everything (serve/front.c's loop): each request
 * message and each closed connection is answered at once or held (a
 * client's POLL until there are events, a worker's READY or RESULT
 * until there is a batch), and each pass answers what has been held too
 * long. The scheduler core decides what runs; the replica only moves
 * tokens between the core, the workers (workers.c, flights.c) and the
 * clients (a request's arrival: intake.c; its output: out.c).
 *
 * Per request (struct lreq, reqs.h) it keeps what the core does not:
 * the prompt's token ids, the client's connection, the sampling
 * parameters and stop strings, and the output so far (ids, and text for
 * stop strings and the record).
 *
 * Calls go one way, down: replica.c -> intake.c -> workers.c ->
 * flights.c -> out.c -> reqs.c -> seqs.c, core.c (impl.h).
 */
#include "serve/replica/impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
medha_replica_config_default(struct medha_replica_config *c)
{
	memset(c, 0, sizeof(*c));
	c->workers = 1;
	medha_sched_config_default(&c->sched);
	c->cpu_threads = 2;
	c->target_auto = 1;
	c->drain_timeout = 30;
	c->max_queue = 100000;
	c->max_queue_bytes = (int64_t)1 << 30;
}

/* ---- the front's ops ---- */

static void
on_status(void *arg, struct medha_msg_status *s)
{
	struct medha_replica *r = arg;
	struct medha_sched *core = r->core.sched;

	s->workers = r->ws.n;
	s->workers_wanted = r->cfg.workers;
	s->ready = r->ws.ready;
	if (core != NULL) {
		int64_t waiting = 0;
		for (int i = 0; i < medha_sched_pending(core); i++)
			waiting += medha_sched_active(core, i)->state ==
			    MEDHA_REQ_WAITING;
		s->queue = waiting;
		/* all KVP groups' (group_used says -1 past the last): the
		   cached blocks its requests share too, as the prefix they
		   share is in use, once */
		int64_t u;
		s->kv_blocks = s->kv_used = 0;
		for (int g = 0; (u = medha_sched_group_used(core, g)) >= 0;
		     g++) {
			s->kv_blocks += medha_sched_group_capacity(core);
			s->kv_used += u;
		}
		s->block_size = medha_sched_block_size(core);
		s->work = medha_sched_pending_work(core, &s->prefill);
		{
			struct medha_sched_progress pg;
			medha_sched_progress(core, &pg);
			s->progress = pg.batches;
		}
		if (r->core.prefix) {
			struct medha_prefix_stats ps;
			medha_sched_prefix_stats(core, &ps);
			s->evicted = ps.evictions;
		}
	}
	s->n_experts = r->fl.n_experts;
	memcpy(s->experts, r->fl.experts,
	    sizeof(int64_t) * (size_t)r->fl.n_experts);
	snprintf(s->model, sizeof(s->model), "%s", r->core.model);
	snprintf(s->backend, sizeof(s->backend), "%s", r->core.backend);
}

static int64_t
activity(void *arg)
{
	const struct medha_replica *r = arg;

	return r->fl.batches + r->served;
}

/* The loop's pass: texts tokenized, clients that stopped collecting
 * their events cut off, the workers' (held calls answered, dead ones
 * noticed, batches sent). */
static void
housekeeping(void *arg)
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
	rep_workers_tick(r, t);
}

static const struct medha_front_ops ops = {
    .name = "scheduler",
    .take_at_once = TAKE_AT_ONCE,
    .submit = rep_on_submit,
    .cancel = rep_on_cancel,
    .status = on_status,
    .other = rep_on_other,
    .peer_gone = rep_on_peer_gone,
    .client_gone = rep_on_client_gone,
    .cancel_all = rep_cancel_all,
    .pass = housekeeping,
    .activity = activity,
};

/* ---- life cycle ---- */

/* r's parts freed, whatever was made (calloc'd r). */
static void
replica_free(struct medha_replica *r)
{
	rep_tok_stop(r);
	rep_flights_free(r);
	rep_seqs_free(&r->seqs);
	if (r->f.srv != NULL)
		medha_front_free(&r->f);
	rep_reqs_free(r);
	rep_workers_free(r);
	rep_core_free(&r->core);
	free(r);
}

int
medha_replica_open(struct medha_replica **rp,
    const struct medha_replica_config *c, char *why, size_t whylen)
{
	struct medha_replica *r;
	struct medha_srv *srv;
	int rc;

	*rp = NULL;
	if (c->listen == NULL || c->workers < 1 || c->workers > 4096 ||
	    c->cpu_threads < 1 || c->drain_timeout < 0 || c->max_queue < 1 ||
	    c->max_queue_bytes < 1)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "bad replica configuration");
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	r->cfg = *c;
	r->t0 = medha_now();
	if (rep_workers_init(r) != 0 || rep_flights_init(r) != 0 ||
	    rep_seqs_init(&r->seqs, c->workers) != 0) {
		replica_free(r);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	if ((rc = rep_core_init(&r->core, c, why, whylen)) != 0 ||
	    (rc = medha_srv_open(&srv, c->listen, why, whylen)) != 0) {
		replica_free(r);
		return rc;
	}
	medha_front_init(&r->f, &ops, r, srv, c->drain_timeout);
	*rp = r;
	return 0;
}

int
medha_replica_run(struct medha_replica *r, volatile sig_atomic_t *stop)
{
	int rc;

	medha_log(MEDHA_LOG_INFO, "listening at %s for %d worker%s",
	    r->cfg.listen, r->cfg.workers, r->cfg.workers > 1 ? "s" : "");
	if ((rc = medha_front_run(&r->f, stop)) != 0)
		return rc;
	medha_log(MEDHA_LOG_INFO, "stopped: %lld requests served, %lld batches",
	    (long long)r->served, (long long)r->fl.batches);
	return 0;
}

void
medha_replica_close(struct medha_replica *r)
{
	if (r != NULL)
		replica_free(r);
}
