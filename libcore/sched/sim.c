/*
 * sim.c: discrete-event simulation of one replica. Events are arrivals,
 * stage 0 becoming free, and batches leaving the last stage. A batch
 * formed at time t enters stage 0 at t; stage k starts when the batch
 * has left stage k-1 and stage k has finished the previous batch. At most
 * spp batches are in flight. With the predictor's links (netcost.h) the
 * batch reaches stage 0 a message later, each stage the previous one's
 * hand-off later, and the scheduler hears of stage 0 (to form the next
 * batch) and of the last stage (the batch done) an answer later.
 * Nothing here decides what runs: that is the scheduler core's job,
 * called exactly as the live scheduler calls it.
 */
#include "sched/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct flight {
	struct medha_sched_batch b;
	struct medha_sched_item *items; /* private copy */
	int cap;
	double done; /* leaves the last stage */
};

static int
by_arrival(const void *a, const void *b)
{
	const struct medha_reqspec *const *x = a, *const *y = b;

	if ((*x)->arrival < (*y)->arrival)
		return -1;
	if ((*x)->arrival > (*y)->arrival)
		return 1;
	return (*x > *y) - (*x < *y); /* stable: keep trace order */
}

static int
drain(struct medha_sched *s, const struct medha_sim_hooks *h,
    struct medha_sim_stats *st)
{
	struct medha_record rec;
	int rc;

	while (medha_sched_pop_record(s, &rec) == 1) {
		rc = h->record(h->arg, &rec);
		medha_record_clear(&rec);
		if (rc != 0)
			return rc;
		st->records++;
	}
	return 0;
}

/*
 * Batch b, formed at t, through the stages (stage_free: when each can
 * take it, updated); returns when the scheduler hears it is done. The
 * links (netcost.h; all zero without): the batch reaches the workers,
 * each stage hands on to the next, stage 0's answer frees it for the
 * scheduler, the last stage's ends the batch.
 */
static double
fly(const struct medha_pred *p, const struct medha_sched *s,
    const struct medha_sched_batch *b, double t, double *stage_free)
{
	struct medha_netcost nc;
	double end;

	medha_net_batch(p, s, b, &nc);
	end = t + nc.dispatch;
	for (int k = 0; k < p->spp; k++) {
		double in = k > 0 ? end + nc.hop : end;
		double start = in > stage_free[k] ? in : stage_free[k];
		end = start + nc.stage +
		    (k < p->spp - 1 ? b->stage_time : b->last_time);
		stage_free[k] = k == 0 ? end + nc.answer : end;
	}
	return end + nc.answer;
}

int
medha_sim_run(const struct medha_sched_config *c, const struct medha_pred *p,
    const struct medha_reqspec *reqs, size_t n, const struct medha_sim_hooks *h,
    struct medha_sim_stats *st)
{
	struct medha_sched *s = NULL;
	const struct medha_reqspec **order = NULL;
	struct flight *fl = NULL;
	double *stage_free = NULL, t = 0;
	int spp = p->spp, nfl = 0, rc;
	size_t ai = 0;
	int64_t next_progress = 0;

	memset(st, 0, sizeof(*st));
	if ((rc = medha_sched_init(&s, c, p)) != 0)
		return rc;
	order = medha_calloc(n, sizeof(*order));
	fl = medha_calloc(spp, sizeof(*fl));
	stage_free = medha_calloc(spp, sizeof(*stage_free));
	if (order == NULL || fl == NULL || stage_free == NULL) {
		rc = MEDHA_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		order[i] = &reqs[i];
	qsort(order, n, sizeof(*order), by_arrival);

	for (;;) {
		double tn = INFINITY;
		int first;

		while (ai < n && order[ai]->arrival <= t) {
			if ((rc = medha_sched_arrive(s, order[ai],
			         order[ai]->arrival, NULL)) != 0)
				goto out;
			ai++;
		}
		if ((rc = drain(s, h, st)) != 0)
			goto out;

		if (stage_free[0] <= t && nfl < spp) {
			struct medha_sched_batch b;
			rc = medha_sched_next_batch(s, t, &b);
			if (rc < 0)
				goto out;
			if (rc == 1) {
				struct flight *f = &fl[nfl++];
				if (f->cap < b.n_items) {
					void *m = medha_reallocarray(f->items,
					    b.n_items, sizeof(*f->items));
					if (m == NULL) {
						rc = MEDHA_ENOMEM;
						goto out;
					}
					f->items = m;
					f->cap = b.n_items;
				}
				memcpy(f->items, b.items,
				    b.n_items * sizeof(*f->items));
				f->b = b;
				f->b.items = f->items;
				f->done = fly(p, s, &b, t, stage_free);
				st->iterations++;
				st->tokens += b.n_tokens;
				st->busy += stage_free[0] - t;
				if (h->batch != NULL &&
				    (rc = h->batch(h->arg, s, &b)) != 0)
					goto out;
				if (h->progress != NULL &&
				    st->iterations >= next_progress) {
					h->progress(h->arg, t, st->records, n);
					next_progress = st->iterations + 2000;
				}
				continue;
			}
		}

		if (ai < n)
			tn = order[ai]->arrival;
		first = -1;
		for (int i = 0; i < nfl; i++)
			if (first < 0 || fl[i].done < fl[first].done)
				first = i;
		if (first >= 0 && fl[first].done < tn)
			tn = fl[first].done;
		if (stage_free[0] > t && stage_free[0] < tn)
			tn = stage_free[0];
		if (tn == INFINITY)
			break;
		t = tn;

		/* batches leaving the last stage by t, earliest first */
		while (nfl > 0) {
			struct flight tmp;
			first = 0;
			for (int i = 1; i < nfl; i++)
				if (fl[i].done < fl[first].done)
					first = i;
			if (fl[first].done > t)
				break;
			if ((rc = medha_sched_batch_done(s, &fl[first].b, NULL,
			         fl[first].done)) != 0)
				goto out;
			tmp = fl[first];
			fl[first] = fl[nfl - 1];
			fl[nfl - 1] = tmp;
			nfl--;
		}
		if ((rc = drain(s, h, st)) != 0)
			goto out;
	}
	st->end = t;
	medha_sched_prefix_stats(s, &st->prefix);
	medha_sched_progress(s, &st->progress);
	st->preemptions = medha_sched_preemptions(s);
	st->preempt_below = medha_sched_preempt_below(s);
	if (medha_sched_pending(s) != 0 || st->records != n) {
		medha_log(MEDHA_LOG_ERROR,
		    "simulation ended with %lld requests unfinished",
		    (long long)medha_sched_pending(s));
		rc = MEDHA_EINVAL;
		goto out;
	}
	if (h->progress != NULL)
		h->progress(h->arg, t, st->records, n);
	rc = 0;
out:
	if (fl != NULL)
		for (int i = 0; i < spp; i++)
			free(fl[i].items);
	free(fl);
	free(stage_free);
	free(order);
	medha_sched_free(s);
	return rc;
}
