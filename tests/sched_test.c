/*
 * sched_test.c: the scheduler's invariants on random traces, driven
 * through the simulator: every request in gives exactly one record out;
 * KV blocks are never over-committed; a decode is never left out of a
 * batch; adaptive chunks are multiples of 32 (but a prompt's last
 * remainder) and at least 32; with a decode in the batch the predicted
 * latency stays within 1.1 x the target. Plus policy order, deadlines,
 * rejection and SPP pipelining on small hand-made cases, and the work of
 * forming a batch over a long queue (n log n, not n^2).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sched/sched.h"
#include "sched/sim.h"

static uint64_t rng_state;

static uint64_t
rng(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double
unif(void)
{
	return (rng() >> 11) * (1.0 / 9007199254740992.0);
}

/* n requests at qps; a fraction `lfrac` long (20K..long_max tokens). */
static struct medha_reqspec *
random_trace(size_t n, double qps, double lfrac, int64_t long_max,
    uint64_t seed)
{
	struct medha_reqspec *v = calloc(n, sizeof(*v));
	double t = 0;

	rng_state = seed;
	for (size_t i = 0; i < n; i++) {
		t += -log(1 - unif()) / qps;
		snprintf(v[i].id, sizeof(v[i].id), "%zu", i);
		v[i].arrival = t;
		if (unif() < lfrac)
			v[i].prompt_tokens = 20000 + rng() % (long_max - 20000);
		else
			v[i].prompt_tokens = 1 + rng() % 4000;
		v[i].max_tokens = rng() % 200;
		if (unif() < 0.3)
			v[i].ttft_slo = 0.2 + 2 * unif();
		v[i].tpot_slo = 0.1;
	}
	return v;
}

struct obs {
	size_t n;
	int *seen; /* records per request id */
	const struct medha_reqspec *reqs;
	double target;
	int adaptive;
	int64_t chunk, max_chunk;
	int64_t batches, decode_batches, errors;
	char why[256];
};

static int
obs_record(void *arg, const struct medha_record *rec)
{
	struct obs *o = arg;
	long id = strtol(rec->id, NULL, 10);

	if (id < 0 || (size_t)id >= o->n) {
		o->errors++;
		return 0;
	}
	o->seen[id]++;
	if (rec->status == MEDHA_STATUS_OK) {
		if (rec->output_tokens != o->reqs[id].max_tokens ||
		    rec->first_token < rec->arrival - 1e-12 ||
		    rec->finish < rec->first_token ||
		    fabs(rec->ttft - (rec->first_token - rec->arrival)) > 1e-9)
			o->errors++;
	}
	return 0;
}

static int
obs_batch(void *arg, const struct medha_sched *s,
    const struct medha_sched_batch *b)
{
	struct obs *o = arg;

	o->batches++;
	if (medha_sched_check(s, o->why, sizeof(o->why)) != 0) {
		print_error("invariant: %s\n", o->why);
		o->errors++;
	}
	/* a running decode that is not in flight would have been left out */
	for (int i = 0; i < medha_sched_pending(s); i++) {
		const struct medha_req *r = medha_sched_active(s, i);
		if (r->state == MEDHA_REQ_DECODE && !r->busy) {
			print_error("decode %s left out of batch %llu\n",
			    r->spec.id, (unsigned long long)b->seq);
			o->errors++;
		}
	}
	for (int i = 0; i < b->n_items; i++) {
		const struct medha_sched_item *it = &b->items[i];
		const struct medha_req *r = medha_sched_req(s, it->req);
		if (it->decode) {
			if (it->tokens != 1)
				o->errors++;
			continue;
		}
		if (o->adaptive && it->tokens > o->max_chunk) {
			print_error("chunk %lld above the maximum\n",
			    (long long)it->tokens);
			o->errors++;
		}
		if (o->adaptive && !it->last &&
		    (it->tokens < 32 || it->tokens % 32 != 0)) {
			print_error("chunk %lld of %s\n", (long long)it->tokens,
			    r->spec.id);
			o->errors++;
		}
		if (it->last && it->kv + it->tokens != r->spec.prompt_tokens)
			o->errors++;
	}
	/* a fixed budget: decodes first, prefill chunks fill the rest */
	if (!o->adaptive && b->n_tokens > o->chunk &&
	    b->n_tokens > b->n_decode) {
		print_error("batch %llu: %lld tokens over a budget of %lld\n",
		    (unsigned long long)b->seq, (long long)b->n_tokens,
		    (long long)o->chunk);
		o->errors++;
	}
	if (b->n_decode > 0) {
		o->decode_batches++;
		if (o->adaptive && b->latency > 1.1 * o->target) {
			print_error("batch %llu: latency %g with %d decodes\n",
			    (unsigned long long)b->seq, b->latency,
			    b->n_decode);
			o->errors++;
		}
	}
	return 0;
}

static void
run_case(const char *gpu, const char *model, int tp, int spp, int kvp,
    int policy, int64_t chunk, int64_t kv_blocks, int64_t kvp_max, size_t n,
    double qps, uint64_t seed)
{
	struct medha_pred p;
	struct medha_pred_model m;
	struct medha_sched_config c;
	struct medha_sim_hooks h = {0};
	struct medha_sim_stats st;
	struct obs o = {0};
	struct medha_reqspec *reqs = random_trace(n, qps, 0.05, 200000, seed);

	assert_int_equal(medha_model_resolve(model, &m), 0);
	assert_int_equal(medha_pred_init(&p, medha_gpu_find(gpu), &m, tp, spp,
	                     kvp),
	    0);
	medha_sched_config_default(&c);
	c.policy = policy;
	c.chunk = chunk;
	c.kv_blocks = kv_blocks;
	c.kvp_max_tokens = kvp_max;
	o.n = n;
	o.seen = calloc(n, sizeof(int));
	o.reqs = reqs;
	o.target = c.target;
	o.adaptive = chunk == 0;
	o.chunk = chunk;
	o.max_chunk = c.max_chunk;
	h.arg = &o;
	h.record = obs_record;
	h.batch = obs_batch;
	assert_int_equal(medha_sim_run(&c, &p, reqs, n, &h, &st), 0);
	for (size_t i = 0; i < n; i++)
		if (o.seen[i] != 1) {
			print_error("request %zu: %d records\n", i, o.seen[i]);
			o.errors++;
		}
	assert_int_equal(st.records, n);
	assert_true(o.batches > 0);
	assert_int_equal(o.errors, 0);
	free(o.seen);
	free(reqs);
	medha_pred_free(&p);
}

static void
test_invariants_policies(void **state)
{
	(void)state;
	for (int pol = 0; pol < 4; pol++) {
		run_case("a100", "llama3-8b", 8, 2, 1, pol, 0, 0, 0, 400, 2.0,
		    11 + pol);
		run_case("a100", "llama3-8b", 8, 2, 1, pol, 512, 0, 0, 300, 2.0,
		    21 + pol);
	}
}

static void
test_invariants_tight_memory(void **state)
{
	(void)state;
	/* 20000 blocks of 16 = 320K tokens: requests must wait for memory */
	run_case("a100", "llama3-8b", 8, 1, 1, MEDHA_POLICY_MEDHA, 0, 20000, 0,
	    300, 4.0, 5);
	run_case("a100", "llama3-8b", 8, 4, 1, MEDHA_POLICY_FCFS, 2048, 20000,
	    0, 300, 4.0, 6);
}

static void
test_invariants_kvp(void **state)
{
	(void)state;
	/* 4 groups, 64K tokens each per request: long prompts span groups */
	run_case("h100", "llama3-70b", 8, 2, 4, MEDHA_POLICY_MEDHA, 0, 0, 65536,
	    300, 2.0, 7);
	run_case("h100", "llama3-70b", 8, 1, 4, MEDHA_POLICY_LRS, 0, 30000,
	    65536, 200, 2.0, 8);
}

/* ---- hand-made cases ---- */

struct collect {
	struct medha_record recs[16];
	int n;
	int64_t chunks_in_a_row; /* consecutive batches holding prefill "0" */
	uint64_t last_seq;
	int have_last;
};

static int
col_record(void *arg, const struct medha_record *rec)
{
	struct collect *c = arg;

	if (c->n < 16)
		c->recs[c->n++] = *rec;
	return 0;
}

static const struct medha_record *
find(const struct collect *c, const char *id)
{
	for (int i = 0; i < c->n; i++)
		if (strcmp(c->recs[i].id, id) == 0)
			return &c->recs[i];
	return NULL;
}

static void
sim(const char *model, int spp, struct medha_sched_config *c,
    struct medha_reqspec *r, size_t n, struct collect *out)
{
	struct medha_pred p;
	struct medha_pred_model m;
	struct medha_sim_hooks h = {0};
	struct medha_sim_stats st;

	memset(out, 0, sizeof(*out));
	assert_int_equal(medha_model_resolve(model, &m), 0);
	assert_int_equal(medha_pred_init(&p, medha_gpu_find("a100"), &m, 8, spp,
	                     1),
	    0);
	h.arg = out;
	h.record = col_record;
	assert_int_equal(medha_sim_run(c, &p, r, n, &h, &st), 0);
	assert_int_equal(out->n, (int)n);
	medha_pred_free(&p);
}

static struct medha_reqspec
req(const char *id, double arrival, int64_t prompt, int64_t out, double slo)
{
	struct medha_reqspec r;

	memset(&r, 0, sizeof(r));
	snprintf(r.id, sizeof(r.id), "%s", id);
	r.arrival = arrival;
	r.prompt_tokens = prompt;
	r.max_tokens = out;
	r.ttft_slo = slo;
	return r;
}

static void
test_policy_order(void **state)
{
	struct medha_sched_config c;
	struct collect col;
	/* a long prompt arrives first, a short one right after */
	struct medha_reqspec r[2] = {
	    req("long", 0, 200000, 4, 1000),
	    req("short", 0.001, 1000, 4, 0.3),
	};

	(void)state;
	medha_sched_config_default(&c);
	c.policy = MEDHA_POLICY_FCFS;
	c.chunk = 2048;
	sim("llama3-8b", 1, &c, r, 2, &col);
	/* FCFS with a fixed budget: the short one waits for the long prefill */
	assert_true(find(&col, "short")->ttft > find(&col, "long")->ttft * 0.9);

	c.policy = MEDHA_POLICY_EDF;
	c.chunk = 0;
	sim("llama3-8b", 1, &c, r, 2, &col);
	/* EDF: the short deadline goes first */
	assert_true(find(&col, "short")->ttft < 0.3);

	c.policy = MEDHA_POLICY_MEDHA;
	sim("llama3-8b", 1, &c, r, 2, &col);
	assert_true(find(&col, "short")->ttft < 0.3);
	assert_true(find(&col, "long")->status == MEDHA_STATUS_OK);
}

static void
test_share_beats_lrs(void **state)
{
	struct medha_sched_config c;
	struct collect col;
	struct medha_reqspec r[3] = {
	    /* the long one has the least slack from the start */
	    req("long", 0, 300000, 2, 0),
	    req("s1", 1.0, 2000, 2, 5),
	    req("s2", 1.5, 2000, 2, 5),
	};
	double lrs_ttft, medha_ttft, lrs_long, medha_long;

	(void)state;
	medha_sched_config_default(&c);
	c.policy = MEDHA_POLICY_LRS;
	sim("llama3-8b", 1, &c, r, 3, &col);
	lrs_ttft = find(&col, "s1")->ttft;
	lrs_long = find(&col, "long")->ttft;
	c.policy = MEDHA_POLICY_MEDHA;
	sim("llama3-8b", 1, &c, r, 3, &col);
	medha_ttft = find(&col, "s1")->ttft;
	medha_long = find(&col, "long")->ttft;
	/* prefill-prefill batching lets the short one share the batches
	 * well before its slack runs out; the long one barely notices */
	assert_true(medha_ttft < 0.5 * lrs_ttft);
	assert_true(medha_ttft < 5);
	assert_true(medha_long < 1.05 * lrs_long);
}

static void
test_deadline_rule(void **state)
{
	struct medha_sched_config c;
	struct medha_pred p;
	struct medha_pred_model m;
	struct medha_sched *s;
	struct collect col;
	struct medha_reqspec r[3] = {
	    req("tiny", 0, 100, 1, 0),
	    req("big", 0, 500000, 1, 0),
	    req("given", 0, 500000, 1, 42),
	};
	double alone;

	(void)state;
	medha_sched_config_default(&c);
	sim("llama3-8b", 2, &c, r, 3, &col);
	assert_int_equal(medha_model_resolve("llama3-8b", &m), 0);
	assert_int_equal(medha_pred_init(&p, medha_gpu_find("a100"), &m, 8, 2,
	                     1),
	    0);
	assert_int_equal(medha_sched_init(&s, &c, &p), 0);
	alone = medha_sched_prefill_alone(s, 500000);
	assert_true(alone > 1.0);
	assert_true(fabs(find(&col, "tiny")->ttft_slo - 0.5) < 1e-12);
	assert_true(fabs(find(&col, "big")->ttft_slo - 1.5 * alone) < 1e-9);
	assert_true(fabs(find(&col, "given")->ttft_slo - 42) < 1e-12);
	/* longer prompts get longer predicted prefill times */
	assert_true(medha_sched_prefill_alone(s, 1000000) > 2 * alone);
	medha_sched_free(s);
	medha_pred_free(&p);
}

static void
test_reject_too_long(void **state)
{
	struct medha_sched_config c;
	struct collect col;
	struct medha_reqspec r[2] = {
	    req("fits", 0, 1000, 10, 0),
	    req("huge", 0, 2000000, 10, 0),
	};

	(void)state;
	medha_sched_config_default(&c);
	c.kv_blocks = 100000; /* 1.6M tokens */
	sim("llama3-8b", 1, &c, r, 2, &col);
	assert_int_equal(find(&col, "fits")->status, MEDHA_STATUS_OK);
	assert_int_equal(find(&col, "huge")->status, MEDHA_STATUS_REJECTED);
	assert_int_equal(find(&col, "huge")->output_tokens, 0);
}

static void
test_spp_pipelines_chunks(void **state)
{
	struct medha_sched_config c;
	struct collect col;
	struct medha_reqspec r[1] = {req("0", 0, 1000000, 1, 0)};
	double t1, t2, t4;

	(void)state;
	medha_sched_config_default(&c);
	sim("llama3-8b", 1, &c, r, 1, &col);
	t1 = col.recs[0].ttft;
	sim("llama3-8b", 2, &c, r, 1, &col);
	t2 = col.recs[0].ttft;
	sim("llama3-8b", 4, &c, r, 1, &col);
	t4 = col.recs[0].ttft;
	/* the next chunk enters stage 0 as soon as the last one left it */
	assert_true(t2 < 0.6 * t1);
	assert_true(t4 < 0.6 * t2);
}

static void
test_zero_output(void **state)
{
	struct medha_sched_config c;
	struct collect col;
	struct medha_reqspec r[2] = {
	    req("a", 0, 100, 0, 0),
	    req("b", 0, 0, 5, 0), /* no prompt_tokens: rejected */
	};

	(void)state;
	medha_sched_config_default(&c);
	sim("llama3-8b", 1, &c, r, 2, &col);
	assert_int_equal(find(&col, "a")->status, MEDHA_STATUS_OK);
	assert_int_equal(find(&col, "a")->output_tokens, 0);
	assert_int_equal(find(&col, "b")->status, MEDHA_STATUS_REJECTED);
}

/*
 * medha's prefill-prefill batching over a long queue: 20,000 requests
 * with prompts of lo..hi tokens arrive at once and KV memory holds a few
 * dozen of them, so nearly all of them wait, as prefill candidates of
 * every batch. Returns the most candidate visits (medha_sched_visits) a
 * batch took over its first 200 batches, in units of n (log2 n + 1) for
 * the n requests pending.
 */
static double
long_queue(int64_t lo, int64_t hi)
{
	const int n = 20000;
	struct medha_pred p;
	struct medha_pred_model m;
	struct medha_sched_config c;
	struct medha_sched *s;
	struct medha_sched_batch b;
	struct medha_record rec;
	double now = 0, most = 0;
	int64_t served = 0;

	assert_int_equal(medha_model_resolve("llama3-8b", &m), 0);
	assert_int_equal(medha_pred_init(&p, medha_gpu_find("a100"), &m, 1, 1,
	                     1),
	    0);
	medha_sched_config_default(&c);
	c.kv_blocks = 4000; /* 64K tokens */
	assert_int_equal(medha_sched_init(&s, &c, &p), 0);
	rng_state = 42;
	for (int i = 0; i < n; i++) {
		struct medha_reqspec r;
		memset(&r, 0, sizeof(r));
		snprintf(r.id, sizeof(r.id), "%d", i);
		r.prompt_tokens = lo + (int64_t)(rng() % (uint64_t)(hi - lo + 1));
		r.max_tokens = 1 + rng() % 64;
		if (unif() < 0.3)
			r.ttft_slo = 0.2 + 2 * unif();
		assert_int_equal(medha_sched_arrive(s, &r, 0, NULL), 0);
	}
	for (int k = 0; k < 200; k++) {
		double q = (double)medha_sched_pending(s), v;
		uint64_t v0 = medha_sched_visits(s);

		assert_int_equal(medha_sched_next_batch(s, now, &b), 1);
		v = (double)(medha_sched_visits(s) - v0) / (q * (log2(q) + 1));
		if (v > most)
			most = v;
		now += b.latency;
		assert_int_equal(medha_sched_batch_done(s, &b, NULL, now), 0);
		while (medha_sched_pop_record(s, &rec) == 1)
			served++;
	}
	print_message("medha, %d waiting, prompts %lld..%lld: at most %.3f n "
	              "(log2 n + 1) visits a batch; %lld served\n",
	    n, (long long)lo, (long long)hi, most, (long long)served);
	assert_true(served > 0); /* it went on serving meanwhile */
	medha_sched_free(s);
	medha_pred_free(&p);
	return most;
}

/*
 * Forming a batch costs O(n log n) visits, within 8 n (log2 n + 1),
 * where asking each candidate about every one behind it cost up to
 * n^2 / 2 (650 n (log2 n + 1) here, with prompts all of one length).
 */
static void
test_medha_long_queue(void **state)
{
	double v;

	(void)state;
	v = long_queue(2000, 2000);
	assert_true(v > 0 && v <= 8);
	v = long_queue(1, 4000);
	assert_true(v > 0 && v <= 8);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_invariants_policies),
	    cmocka_unit_test(test_invariants_tight_memory),
	    cmocka_unit_test(test_invariants_kvp),
	    cmocka_unit_test(test_policy_order),
	    cmocka_unit_test(test_share_beats_lrs),
	    cmocka_unit_test(test_deadline_rule),
	    cmocka_unit_test(test_reject_too_long),
	    cmocka_unit_test(test_spp_pipelines_chunks),
	    cmocka_unit_test(test_zero_output),
	    cmocka_unit_test(test_medha_long_queue),
	};

	medha_log_level = MEDHA_LOG_ERROR;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
