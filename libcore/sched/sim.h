/*
 * sim.h: one replica in virtual time. Drives the scheduler core
 * (sched.h) with the runtime predictor as its clock: requests arrive at
 * their trace times, batches hold each pipeline stage for their predicted
 * stage time, tokens come out when a batch leaves the last stage.
 *
 *	struct medha_sim_hooks h = { .arg = out, .record = write_record };
 *	rc = medha_sim_run(&cfg, &pred, reqs, n, &h, &stats);
 */
#ifndef MEDHA_SIM_H
#define MEDHA_SIM_H

#include "sched/sched.h"

#include <stddef.h>

struct medha_sim_hooks {
	void *arg;
	/* Each finished request, once (required). Non-zero return stops. */
	int (*record)(void *arg, const struct medha_record *rec);
	/* Each batch as it is formed (optional). Non-zero return stops. */
	int (*batch)(void *arg, const struct medha_sched *s,
	    const struct medha_sched_batch *b);
	/* Called now and then with the virtual time and requests finished. */
	void (*progress)(void *arg, double now, size_t done, size_t total);
};

struct medha_sim_stats {
	int64_t iterations; /* batches formed */
	int64_t tokens;     /* tokens processed in all batches */
	double end;         /* virtual time of the last event, s */
	double busy;        /* time stage 0 held a batch, s */
	size_t records;     /* records delivered */
	struct medha_prefix_stats prefix;     /* the prefix cache's counters */
	struct medha_sched_progress progress; /* the progress guarantee's */
	int64_t preemptions;   /* requests preempted (sched.h) */
	int64_t preempt_below; /* the scheduler's threshold, tokens */
};

/*
 * Simulate requests reqs[0..n) (any order; they are taken by arrival
 * time). Every request yields exactly one record through h->record.
 * Returns 0, a hook's non-zero return, MEDHA_ENOMEM, MEDHA_EINVAL (bad
 * config, or a request the scheduler never finished: a bug, logged).
 */
int medha_sim_run(const struct medha_sched_config *c,
    const struct medha_pred *p, const struct medha_reqspec *reqs, size_t n,
    const struct medha_sim_hooks *h, struct medha_sim_stats *st);

#endif
