/*
 * check.c: medha-prof --check: how well a profile predicts batches it
 * was not measured on. Random mixed batches (prefill chunks of 32 to
 * 2048 tokens at contexts up to max_context, beside decodes at contexts
 * up to the same) are timed whole, every layer and the logits, and
 * predicted the way the scheduler predicts them (batchcost.h on the
 * profile); the summary is the median and p90 of |predicted / measured
 * - 1|. A mixture of experts' routed FFN is then checked alone, at
 * batch sizes of 1 to 256 tokens (prof_check_moe): each the trimmed
 * mean over draws of random token ids (prof_moe_sweeps), from --seed, so
 * that they route unlike the profile's own draws.
 */
#include "medha-prof.h"

#include "sched/batchcost.h"

#include <math.h>
#include <string.h>

/* uniform in [0, 1) */
static double
unif(uint64_t *s)
{
	return (double)(splitmix64(s) >> 11) / 9007199254740992.0;
}

/* exp(uniform(ln lo, ln hi)), a whole number in [lo, hi] */
static int64_t
logu(uint64_t *s, double lo, double hi)
{
	int64_t v = (int64_t)llround(exp(log(lo) + unif(s) * log(hi / lo)));

	return v < lo ? (int64_t)lo : v > hi ? (int64_t)hi : v;
}

/*
 * One random batch into it (prefills first, then decodes); returns the
 * number of items and sets *npf. The KV it holds stays within room.
 */
static int
gen_batch(uint64_t *s, const struct prof *P, int64_t room,
    struct prof_item *it, int *npf)
{
	const int64_t ctx = P->max_context;
	const int64_t chunk = P->max_tokens < 2048 ? P->max_tokens : 2048;
	int n = 0, k, nd;
	int64_t used = 0;
	double u = unif(s);

	/* 10% decodes only; else 1 to 3 prefills */
	*npf = u < 0.1 ? 0 : u < 0.6 ? 1 : u < 0.85 ? 2 : 3;
	for (k = 0; k < *npf; k++) {
		it[n].tokens = logu(s, 32, (double)chunk);
		it[n].kv = unif(s) < 0.2 ? 0 : logu(s, 64, (double)ctx);
		it[n].logits = unif(s) < 0.5;
		used += it[n].tokens + it[n].kv;
		n++;
	}
	/* decodes: none in a quarter of the mixed batches, else 1 to 32 */
	nd = *npf > 0 && unif(s) < 0.25 ? 0 : (int)logu(s, 1, 32);
	for (k = 0; k < nd; k++) {
		int64_t kv = logu(s, 16, (double)ctx);
		if (used + kv + 1 > room)
			break;
		it[n] = (struct prof_item){1, kv, 1};
		used += kv + 1;
		n++;
	}
	if (n == 0)
		it[n++] = (struct prof_item){1, 16, 1};
	return n;
}

/* The scheduler's prediction of the batch: one KVP group. */
static double
predict(const struct medha_pred *p, const struct prof_item *it, int n,
    int npf)
{
	struct medha_kvplace pl;
	struct medha_kvlease l;
	struct medha_cost a;
	int i;

	memset(&a, 0, sizeof(a));
	medha_kvplace_init(&pl, 1, MEDHA_KV_BLOCK, (int64_t)1 << 40, 0);
	if (medha_kvplace_admit(&pl, &l, (int64_t)1 << 30, 0) != 0)
		return -1;
	for (i = 0; i < n; i++)
		medha_cost_add(&a, p, &pl, &l, it[i].tokens, it[i].kv, i >= npf,
		    it[i].logits, NULL);
	return medha_cost_latency(&a, p, 1).latency;
}

/* The median and p90 of the n errors e (signed) and a (|e|, sorted). */
static void
summary(const char *what, double *e, double *a, int n, double meas,
    double pred)
{
	double med = prof_median(a, n), bias = prof_median(e, n);
	double p90 = a[(int)ceil(0.9 * n) - 1]; /* a is sorted */

	printf("%d %s: measured %.1f s in all, predicted %.1f s; "
	       "signed median error %+.1f%%\n",
	    n, what, meas, pred, 100 * bias);
	printf("predictor error: median %.1f%%, p90 %.1f%%\n", 100 * med,
	    100 * p90);
}

int
prof_moe_batches(struct prof_moe_check *mc, int n, uint64_t seed)
{
	uint64_t s = seed ^ 0x6d6f65; /* not the mixed batches' draws */

	memset(mc, 0, sizeof(*mc));
	mc->tok = medha_calloc((size_t)n, sizeof(*mc->tok));
	mc->seed = medha_calloc((size_t)n, sizeof(*mc->seed));
	mc->t = medha_calloc((size_t)n, sizeof(*mc->t));
	if (mc->tok == NULL || mc->seed == NULL || mc->t == NULL) {
		prof_moe_check_free(mc);
		return MEDHA_ENOMEM;
	}
	mc->n = n;
	for (int i = 0; i < n; i++) {
		mc->tok[i] = logu(&s, 1, 256);
		mc->seed[i] = splitmix64(&s); /* of its draws of ids */
	}
	return 0;
}

void
prof_moe_check_free(struct prof_moe_check *mc)
{
	free(mc->tok);
	free(mc->seed);
	free(mc->t);
	memset(mc, 0, sizeof(*mc));
}

int
prof_check_moe(struct prof *P, const struct medha_pred *p,
    struct prof_moe_check *mc, char *why, size_t whylen)
{
	const int vocab = P->be->info.shape.vocab;
	const int nmoe = prof_moe_layers(P), n = mc->n;
	const struct prof_time *t = mc->t;
	const int64_t *tok = mc->tok;
	double *err, *aerr, meas = 0, pred = 0;
	int i, rc = 0;

	err = medha_calloc((size_t)n, sizeof(double));
	aerr = medha_calloc((size_t)n, sizeof(double));
	if (err == NULL || aerr == NULL) {
		rc = medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
		goto out;
	}
	/* measured already in the profile's sweeps, or now */
	if (!mc->measured &&
	    (rc = prof_moe_sweeps(P, tok, n, mc->seed, mc->t,
	         "checking experts", why, whylen)) != 0)
		goto out;
	mc->measured = 1;
	if (medha_log_level >= MEDHA_LOG_INFO)
		printf("%5s %6s %8s %8s %10s %10s %7s\n", "batch", "tokens",
		    "experts", "expect", "moe_ms", "pred_ms", "err");
	for (i = 0; i < n; i++) {
		double e, pr = medha_pred_moe_ffn(p, tok[i]);
		if (!(t[i].moe > 0) || !(pr > 0)) {
			rc = medha_why(why, whylen, MEDHA_EINVAL,
			    "the profile has no moe_ffn rows");
			goto out;
		}
		e = pr / t[i].moe - 1;
		err[i] = e;
		aerr[i] = fabs(e);
		meas += t[i].moe;
		pred += pr;
		/* the experts a layer ran, and E (1 - (1 - k/E)^T) */
		if (medha_log_level >= MEDHA_LOG_INFO)
			printf("%5d %6lld %8.2f %8.2f %10.3f %10.3f %+6.1f%%\n",
			    i, (long long)tok[i], t[i].experts / nmoe,
			    medha_moe_experts_touched(&p->model.c,
			        (double)tok[i]),
			    1e3 * t[i].moe, 1e3 * pr, 100 * e);
	}
	summary("routed FFN batches (1 to 256 tokens)", err, aerr, n, meas,
	    pred);
	/* the grid's ids back for a later measurement */
	for (int64_t k = 0; k < P->cap_tokens; k++)
		P->ids[k] = (int32_t)((k * 7919 + 13) % vocab);
out:
	if (rc != 0 && P->progress)
		fputc('\n', stderr);
	free(err);
	free(aerr);
	return rc;
}

int
prof_check(struct prof *P, const struct medha_pred *p, int n, uint64_t seed,
    char *why, size_t whylen)
{
	const int L = P->be->info.shape.n_layers;
	const int64_t room = P->decode_total + P->max_context + P->max_tokens -
	    (int64_t)PROF_SEQS * MEDHA_KV_BLOCK;
	struct prof_item it[PROF_SEQS];
	struct prof_time t;
	double *err, *aerr, meas = 0, pred = 0;
	uint64_t s = seed;
	int i, m, npf, rc = 0;

	err = medha_calloc((size_t)n, sizeof(double));
	aerr = medha_calloc((size_t)n, sizeof(double));
	if (err == NULL || aerr == NULL) {
		free(err);
		free(aerr);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	if (medha_log_level >= MEDHA_LOG_INFO)
		printf("%5s %4s %4s %6s %8s %10s %10s %7s\n", "batch",
		    "pre", "dec", "tokens", "kv", "meas_ms", "pred_ms", "err");
	for (i = 0; i < n; i++) {
		double e, pr;
		int64_t tok = 0, kv = 0;
		prof_progress(P, "checking", i, n);
		m = gen_batch(&s, P, room, it, &npf);
		if ((rc = prof_time(P, it, m, 0, L, 0, &t, why, whylen)) != 0)
			goto out;
		if ((pr = predict(p, it, m, npf)) < 0) {
			rc = medha_why(why, whylen, MEDHA_EINVAL,
			    "the predictor could not place a batch");
			goto out;
		}
		e = pr / t.total - 1;
		err[i] = e;
		aerr[i] = fabs(e);
		meas += t.total;
		pred += pr;
		for (int k = 0; k < m; k++) {
			tok += it[k].tokens;
			kv += it[k].kv;
		}
		if (medha_log_level >= MEDHA_LOG_INFO)
			printf("%5d %4d %4d %6lld %8lld %10.2f %10.2f %+6.1f%%\n",
			    i, npf, m - npf, (long long)tok, (long long)kv,
			    1e3 * t.total, 1e3 * pr, 100 * e);
	}
	prof_progress(P, "checking", n, n);
	summary("batches", err, aerr, n, meas, pred);
out:
	if (rc != 0 && P->progress)
		fputc('\n', stderr);
	free(err);
	free(aerr);
	return rc;
}
