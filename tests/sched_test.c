/*
 * sched_test.c: the scheduler's invariants on random traces, driven
 * through the simulator: every request in gives exactly one record out;
 * KV blocks are never over-committed; a decode is never left out of a
 * batch (but one of long decodes alone, and then not of the next);
 * adaptive chunks are multiples of 32 (but a prompt's last
 * remainder) and at least 32; with a decode in the batch the predicted
 * latency stays within 1.1 x the target. Plus policy order, deadlines,
 * rejection and SPP pipelining on small hand-made cases, and the work of
 * forming a batch over a long queue (n log n, not n^2). Then the
 * simulator's fidelity: sarathi never has two chunks of a prompt in
 * flight, batch time composed per layer over KVP groups, adaptive chunks
 * bounded by the decodes' TPOT SLO and by the efficient chunk, the
 * KVP load balancer weighing predicted time and spreading ties, and
 * long requests' decodes kept within their TPOT target.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sched/batchcost.h"
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
	int64_t prog; /* batches the progress guarantee gave a chunk */
	int left_out; /* the last batch left a decode out */
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
	int lone, out;

	o->batches++;
	if (medha_sched_check(s, o->why, sizeof(o->why)) != 0) {
		print_error("invariant: %s\n", o->why);
		o->errors++;
	}
	/* a running decode that is not in flight would have been left out:
	   only of a batch of long decodes alone (est and vllm with spp >
	   1), never of two batches in a row */
	lone = b->n_decode > 0 && b->n_items == b->n_decode;
	for (int i = 0; i < b->n_items && lone; i++) {
		const struct medha_req *r = medha_sched_req(s, b->items[i].req);
		lone = r != NULL && r->tpot_long > 0;
	}
	out = 0;
	for (int i = 0; i < medha_sched_pending(s); i++) {
		const struct medha_req *r = medha_sched_active(s, i);
		if (r->state == MEDHA_REQ_DECODE && !r->busy) {
			out++;
			if (lone && !o->left_out)
				continue;
			print_error("decode %s left out of batch %llu\n",
			    r->spec.id, (unsigned long long)b->seq);
			o->errors++;
		}
	}
	o->left_out = out > 0;
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
		struct medha_sched_progress pg;
		medha_sched_progress(s, &pg);
		o->decode_batches++;
		/* over the target only by the progress guarantee: one
		   smallest chunk (the batch counted) */
		if (o->adaptive && pg.batches > o->prog) {
			o->prog = pg.batches;
			if (b->n_items != b->n_decode + 1 ||
			    b->n_tokens - b->n_decode > 32) {
				print_error("batch %llu: guaranteed chunk of "
				            "%lld tokens, %d items\n",
				    (unsigned long long)b->seq,
				    (long long)(b->n_tokens - b->n_decode),
				    b->n_items);
				o->errors++;
			}
		} else if (o->adaptive && b->latency > 1.1 * o->target) {
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
	/* sarathi takes a fixed budget only */
	run_case("a100", "llama3-8b", 8, 2, 1, MEDHA_POLICY_SARATHI, 512, 0, 0,
	    300, 2.0, 25);
	run_case("h100", "llama3-70b", 8, 4, 2, MEDHA_POLICY_SARATHI, 2048,
	    20000, 65536, 200, 2.0, 26);
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
 * A trace's real length (output_tokens) below its cap: the simulator
 * stops the request there, as at an end-of-generation token ("stop");
 * at or above the cap, the cap ends it ("length").
 */
static void
test_output_tokens(void **state)
{
	struct medha_sched_config c;
	struct collect col;
	struct medha_reqspec r[4] = {
	    req("a", 0, 100, 8000, 0),
	    req("b", 0, 100, 20, 0),
	    req("c", 0, 100, 8000, 0),
	    req("d", 0, 100, 8000, 0),
	};
	const struct medha_record *x;

	(void)state;
	r[0].output_tokens = 44;
	r[1].output_tokens = 300;
	r[2].output_tokens = 1;
	medha_sched_config_default(&c);
	sim("llama3-8b", 1, &c, r, 4, &col);
	x = find(&col, "a");
	assert_int_equal(x->output_tokens, 44);
	assert_int_equal(x->finish_reason, MEDHA_FINISH_STOP);
	x = find(&col, "b");
	assert_int_equal(x->output_tokens, 20);
	assert_int_equal(x->finish_reason, MEDHA_FINISH_LENGTH);
	x = find(&col, "c");
	assert_int_equal(x->output_tokens, 1);
	assert_int_equal(x->finish_reason, MEDHA_FINISH_STOP);
	x = find(&col, "d"); /* none given: max_tokens */
	assert_int_equal(x->output_tokens, 8000);
	assert_int_equal(x->finish_reason, MEDHA_FINISH_LENGTH);
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
		while (medha_sched_pop_record(s, &rec) == 1) {
			medha_record_clear(&rec);
			served++;
		}
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

/* ---- simulator fidelity ---- */

/* A scheduler on a tp x spp x kvp replica of model on gpu. */
struct fx {
	struct medha_pred p;
	struct medha_sched *s;
};

static void
fx_open(struct fx *f, const char *gpu, const char *model, int tp, int spp,
    int kvp, const struct medha_sched_config *c)
{
	struct medha_pred_model m;

	assert_int_equal(medha_model_resolve(model, &m), 0);
	assert_int_equal(medha_pred_init(&f->p, medha_gpu_find(gpu), &m, tp,
	                     spp, kvp),
	    0);
	assert_int_equal(medha_sched_init(&f->s, c, &f->p), 0);
}

static void
fx_close(struct fx *f)
{
	medha_sched_free(f->s);
	medha_pred_free(&f->p);
}

static uint64_t
fx_arrive(struct fx *f, const char *id, int64_t prompt, int64_t out,
    double tpot_slo, double now)
{
	struct medha_reqspec r = req(id, now, prompt, out, 0);
	uint64_t h;

	r.tpot_slo = tpot_slo;
	assert_int_equal(medha_sched_arrive(f->s, &r, now, &h), 0);
	return h;
}

/* The prefill item of handle h in b, or NULL. */
static const struct medha_sched_item *
prefill_of(const struct medha_sched_batch *b, uint64_t h)
{
	for (int i = 0; i < b->n_items; i++)
		if (!b->items[i].decode && b->items[i].req == h)
			return &b->items[i];
	return NULL;
}

/*
 * Sarathi-Serve cannot pipeline one prompt's chunks across stages: with
 * spp 2, the batch formed while a's chunk is in stage 1 takes b's chunk,
 * never a's next one, and with both in flight there is nothing to run;
 * a's next chunk comes once its previous one is done. fcfs (Medha's
 * SPP) hands out a's next chunk at once.
 */
static void
test_sarathi_one_chunk_in_flight(void **state)
{
	struct medha_sched_config c;
	struct medha_sched_batch b1, b2, b3;
	struct medha_sched_item it1[4];
	struct fx f;
	uint64_t a, bh;

	(void)state;
	medha_sched_config_default(&c);
	c.policy = MEDHA_POLICY_SARATHI;
	c.chunk = 512;
	fx_open(&f, "a100", "llama3-8b", 8, 2, 1, &c);
	a = fx_arrive(&f, "a", 100000, 4, 0, 0);
	bh = fx_arrive(&f, "b", 100000, 4, 0, 0.001);
	assert_int_equal(medha_sched_next_batch(f.s, 0.01, &b1), 1);
	assert_non_null(prefill_of(&b1, a));
	assert_int_equal(prefill_of(&b1, a)->tokens, 512);
	assert_null(prefill_of(&b1, bh)); /* the budget is a's */
	assert_int_equal(b1.n_items, 1);
	it1[0] = b1.items[0]; /* b1.items is the scheduler's, reused */
	b1.items = it1;
	assert_int_equal(medha_sched_next_batch(f.s, 0.02, &b2), 1);
	assert_null(prefill_of(&b2, a)); /* a's chunk is still in flight */
	assert_non_null(prefill_of(&b2, bh));
	assert_int_equal(medha_sched_next_batch(f.s, 0.03, &b3), 0);
	assert_int_equal(medha_sched_batch_done(f.s, &b1, NULL, 0.04), 0);
	assert_int_equal(medha_sched_next_batch(f.s, 0.04, &b3), 1);
	assert_non_null(prefill_of(&b3, a));
	assert_int_equal(prefill_of(&b3, a)->kv, 512);
	fx_close(&f);

	c.policy = MEDHA_POLICY_FCFS;
	fx_open(&f, "a100", "llama3-8b", 8, 2, 1, &c);
	a = fx_arrive(&f, "a", 100000, 4, 0, 0);
	bh = fx_arrive(&f, "b", 100000, 4, 0, 0.001);
	assert_int_equal(medha_sched_next_batch(f.s, 0.01, &b1), 1);
	assert_int_equal(medha_sched_next_batch(f.s, 0.02, &b2), 1);
	assert_non_null(prefill_of(&b2, a));
	assert_int_equal(prefill_of(&b2, a)->kv, 512);
	fx_close(&f);
}

/*
 * One long prompt alone: sarathi gains nothing from a second stage (each
 * chunk crosses both before the next starts), where fcfs pipelines the
 * chunks and nearly halves the TTFT; with one stage the two are the same
 * schedule.
 */
static void
test_sarathi_no_spp_speedup(void **state)
{
	struct medha_sched_config c;
	struct collect col;
	struct medha_reqspec r[4] = {
	    req("0", 0, 300000, 8, 0),
	    req("1", 0.5, 3000, 8, 0),
	    req("2", 0.7, 50000, 8, 0),
	    req("3", 9.0, 800, 8, 0),
	};
	double f1, f2, s2;

	(void)state;
	medha_sched_config_default(&c);
	c.chunk = 512;
	c.policy = MEDHA_POLICY_FCFS;
	sim("llama3-8b", 1, &c, r, 1, &col);
	f1 = col.recs[0].ttft;
	sim("llama3-8b", 2, &c, r, 1, &col);
	f2 = col.recs[0].ttft;
	c.policy = MEDHA_POLICY_SARATHI;
	sim("llama3-8b", 2, &c, r, 1, &col);
	s2 = col.recs[0].ttft;
	assert_true(f2 < 0.6 * f1);
	assert_true(s2 > 0.95 * f1);

	/* spp 1: sarathi is fcfs with the same budget, record for record */
	{
		struct collect a, b;
		c.policy = MEDHA_POLICY_FCFS;
		sim("llama3-8b", 1, &c, r, 4, &a);
		c.policy = MEDHA_POLICY_SARATHI;
		sim("llama3-8b", 1, &c, r, 4, &b);
		for (int i = 0; i < 4; i++) {
			assert_string_equal(a.recs[i].id, b.recs[i].id);
			assert_true(a.recs[i].ttft == b.recs[i].ttft);
			assert_true(a.recs[i].finish == b.recs[i].finish);
		}
	}
	/* and it needs a budget */
	{
		struct medha_pred p;
		struct medha_pred_model m;
		struct medha_sched *s;
		c.chunk = 0;
		assert_int_equal(medha_model_resolve("llama3-8b", &m), 0);
		assert_int_equal(medha_pred_init(&p, medha_gpu_find("a100"),
		                     &m, 8, 1, 1),
		    0);
		assert_int_equal(medha_sched_init(&s, &c, &p), MEDHA_EINVAL);
		medha_pred_free(&p);
	}
	assert_int_equal(medha_policy_parse("sarathi"), MEDHA_POLICY_SARATHI);
	assert_string_equal(medha_policy_name(MEDHA_POLICY_SARATHI), "sarathi");
}

/*
 * Batch time over KVP groups, by hand: group 0 runs a 512-token chunk of
 * a short request and the decode attention of a long request's first
 * piece (1M tokens); group 1 holds the rest of the long request (500K
 * tokens) and runs its decode token's linear layers. Per layer: the most
 * linear work (group 0's 512 tokens), then the slowest attention (group
 * 0's), then the merge of the long request's two partial outputs.
 */
static void
test_cost_per_layer(void **state)
{
	struct medha_pred p;
	struct medha_pred_model m;
	struct medha_cost a;
	struct medha_lat l;
	double lin, att0, att1, core, old;

	(void)state;
	assert_int_equal(medha_model_resolve("llama3-8b", &m), 0);
	assert_int_equal(medha_pred_init(&p, medha_gpu_find("h100"), &m, 8, 2,
	                     2),
	    0);
	memset(&a, 0, sizeof(a));
	a.lin[0] = 512;
	a.attn[0] = medha_pred_attn_prefill(&p, 512, 0);
	a.dec_n[0] = 1;
	a.dec_kv[0] = 1000000;
	a.lin[1] = 1;
	a.dec_n[1] = 1;
	a.dec_kv[1] = 500000;
	a.merge_tokens = 1;
	a.merge_groups = 2;
	a.n_logits = 2;
	a.n_tokens = 513;
	a.n_items = 2;
	l = medha_cost_latency(&a, &p, 2);

	lin = medha_pred_linear(&p, 512);
	att0 = a.attn[0] + medha_pred_attn_decode(&p, 1, 1000000);
	att1 = medha_pred_attn_decode(&p, 1, 500000);
	assert_true(att0 > att1);
	core = lin + att0 + medha_pred_kvp_merge(&p, 1, 2);
	assert_true(fabs(l.stage - (core + medha_pred_spp_send(&p, 513))) <=
	    1e-12 * core);
	assert_true(fabs(l.last - (core + medha_pred_lm_head(&p, 2))) <=
	    1e-12 * core);
	assert_true(fabs(l.latency - (l.stage + l.last)) <= 1e-12 * core);

	/* the slowest group's linear + attention alone would be less here:
	 * swap the attentions so the slow attention is on group 1 */
	a.dec_kv[0] = 500000;
	a.dec_kv[1] = 1000000;
	a.attn[0] = 0;
	l = medha_cost_latency(&a, &p, 2);
	old = medha_pred_linear(&p, 512) + att1; /* group 0's own sum */
	if (medha_pred_linear(&p, 1) + medha_pred_attn_decode(&p, 1, 1000000) >
	    old)
		old = medha_pred_linear(&p, 1) +
		    medha_pred_attn_decode(&p, 1, 1000000);
	core = lin + medha_pred_attn_decode(&p, 1, 1000000) +
	    medha_pred_kvp_merge(&p, 1, 2);
	assert_true(fabs(l.last - (core + medha_pred_lm_head(&p, 2))) <=
	    1e-12 * core);
	assert_true(core - medha_pred_kvp_merge(&p, 1, 2) > 1.01 * old);

	/* one group: linear + attention, as it always was */
	memset(&a, 0, sizeof(a));
	a.lin[0] = 300;
	a.attn[0] = medha_pred_attn_prefill(&p, 299, 7000);
	a.dec_n[0] = 1;
	a.dec_kv[0] = 7000;
	a.n_logits = 1;
	a.n_tokens = 300;
	l = medha_cost_latency(&a, &p, 1);
	core = medha_pred_linear(&p, 300) + a.attn[0] +
	    medha_pred_attn_decode(&p, 1, 7000);
	assert_true(l.last == core + medha_pred_lm_head(&p, 1));
	medha_pred_free(&p);
}

/*
 * Adaptive chunks: a decode whose tpot_slo is 20 ms bounds the batches
 * it is in to 20 ms, where the 50 ms target alone lets a long prefill
 * beside it take more; without a tpot_slo the target rules.
 */
static void
test_chunk_tpot_bound(void **state)
{
	struct medha_sched_config c;
	struct medha_sched_batch b;
	struct fx f;
	double slo[2] = {0.02, 0}, lat[2] = {0, 0};
	int64_t chunk[2] = {0, 0};

	(void)state;
	medha_sched_config_default(&c);
	c.policy = MEDHA_POLICY_FCFS;
	for (int k = 0; k < 2; k++) {
		uint64_t d, l;
		fx_open(&f, "a100", "llama3-8b", 8, 1, 1, &c);
		d = fx_arrive(&f, "d", 100, 1000, slo[k], 0);
		assert_int_equal(medha_sched_next_batch(f.s, 0, &b), 1);
		assert_int_equal(medha_sched_batch_done(f.s, &b, NULL, 0.01),
		    0);
		l = fx_arrive(&f, "l", 400000, 4, 0.1, 0.01);
		/* a's decode and l's chunks, as l's KV grows */
		for (int i = 0; i < 40; i++) {
			const struct medha_sched_item *it;
			assert_int_equal(medha_sched_next_batch(f.s, 1, &b), 1);
			assert_int_equal(b.n_decode, 1);
			it = prefill_of(&b, l);
			assert_non_null(it);
			assert_true(it->tokens >= 32 && it->tokens % 32 == 0);
			if (b.latency > lat[k])
				lat[k] = b.latency;
			chunk[k] += it->tokens;
			assert_int_equal(medha_sched_batch_done(f.s, &b, NULL,
			                     1 + b.latency),
			    0);
		}
		(void)d;
		fx_close(&f);
	}
	print_message("tpot_slo 20 ms: batches at most %.1f ms, %lld tokens;"
	              " none: %.1f ms, %lld tokens\n",
	    lat[0] * 1e3, (long long)chunk[0], lat[1] * 1e3,
	    (long long)chunk[1]);
	assert_true(lat[0] <= 0.02);
	assert_true(lat[1] > 0.03 && lat[1] <= 0.05);
	assert_true(chunk[0] < chunk[1]);
}

/*
 * The efficient chunk: the predictor's smallest multiple of 32 whose
 * linear layers cost at most MEDHA_CHUNK_EFF x per token those of the
 * largest chunk. A long prefill alone (no decode waits on it) never gets
 * less, though past some context that takes longer than the target.
 */
static void
test_chunk_floor(void **state)
{
	struct medha_sched_config c;
	struct medha_sched_batch b;
	struct fx f;
	const char *gpu[2] = {"a100", "h100"};
	int64_t m, most_kv = 0;
	double best, over = 0;
	uint64_t h;

	(void)state;
	medha_sched_config_default(&c);
	for (int k = 0; k < 2; k++) {
		fx_open(&f, gpu[k], "llama3-8b", 8, 1, 1, &c);
		m = medha_sched_min_chunk(f.s);
		best = medha_pred_linear(&f.p, 8192) / 8192;
		print_message("efficient chunk, llama3-8b tp 8 on %s: %lld\n",
		    gpu[k], (long long)m);
		assert_true(m >= 32 && m % 32 == 0 && m < 8192);
		assert_true(medha_pred_linear(&f.p, m) / m <=
		    MEDHA_CHUNK_EFF * best);
		assert_true(m == 32 ||
		    medha_pred_linear(&f.p, m - 32) / (m - 32) >
		        MEDHA_CHUNK_EFF * best);
		assert_true(m > 32); /* 32-token chunks waste these GPUs */
		fx_close(&f);
	}

	/* a floor of 1024 tokens: a 300K prompt alone, chunk by chunk */
	c.min_chunk = 1000; /* rounded up to 1024 */
	c.policy = MEDHA_POLICY_FCFS;
	fx_open(&f, "a100", "llama3-8b", 8, 1, 1, &c);
	assert_int_equal(medha_sched_min_chunk(f.s), 1024);
	h = fx_arrive(&f, "l", 300000, 1, 0, 0);
	for (;;) {
		const struct medha_sched_item *it;
		if (medha_sched_next_batch(f.s, 0, &b) != 1)
			break;
		it = prefill_of(&b, h);
		assert_non_null(it);
		if (!it->last)
			assert_true(it->tokens >= 1024);
		if (b.latency > c.target && it->kv > most_kv) {
			most_kv = it->kv;
			over = b.latency;
		}
		assert_int_equal(medha_sched_batch_done(f.s, &b, NULL, 0), 0);
	}
	/* late in the prompt 1024 tokens take longer than the target */
	assert_true(over > c.target);
	fx_close(&f);
}

/*
 * The KVP load balancer weighs predicted prefill time, not tokens: a
 * 200K prompt on one group is more work than four 60K prompts on the
 * other (attention grows with the square), so a fifth 60K prompt joins
 * the four. And an idle replica spreads requests over its groups (ties
 * go by free memory, then round-robin), where they all went to group 0.
 */
static void
test_kvp_balance(void **state)
{
	struct medha_sched_config c;
	struct medha_sched_batch b;
	struct fx f;
	uint64_t h[6];
	int g[6], seen[4] = {0, 0, 0, 0};

	(void)state;
	medha_sched_config_default(&c);
	c.policy = MEDHA_POLICY_FCFS;
	c.chunk = 512;
	fx_open(&f, "h100", "llama3-8b", 8, 1, 2, &c);
	h[0] = fx_arrive(&f, "L", 200000, 4, 0, 0);
	for (int i = 1; i < 6; i++) {
		char id[16];
		snprintf(id, sizeof(id), "s%d", i);
		h[i] = fx_arrive(&f, id, 60000, 4, 0, 0.001 * i);
	}
	assert_int_equal(medha_sched_next_batch(f.s, 0.01, &b), 1);
	for (int i = 0; i < 6; i++) {
		const struct medha_req *r = medha_sched_req(f.s, h[i]);
		assert_int_equal(r->state, MEDHA_REQ_PREFILL);
		assert_int_equal(r->kv.n_groups, 1);
		g[i] = r->kv.groups[0];
	}
	for (int i = 2; i < 6; i++)
		assert_int_equal(g[i], g[1]);
	assert_true(g[0] != g[1]);
	assert_true(medha_sched_group_pending(f.s, g[1]) <
	    medha_sched_group_pending(f.s, g[0]));
	fx_close(&f);

	/* one at a time, each prefilled before the next arrives */
	c.chunk = 0;
	fx_open(&f, "h100", "llama3-8b", 8, 1, 4, &c);
	for (int i = 0; i < 4; i++) {
		char id[16];
		uint64_t x;
		snprintf(id, sizeof(id), "r%d", i);
		x = fx_arrive(&f, id, 1000, 100000, 0, i);
		assert_int_equal(medha_sched_next_batch(f.s, i, &b), 1);
		assert_non_null(prefill_of(&b, x));
		assert_true(prefill_of(&b, x)->last);
		seen[medha_sched_req(f.s, x)->kv.groups[0]]++;
		assert_int_equal(medha_sched_batch_done(f.s, &b, NULL, i + 0.5),
		    0);
		for (int k = 0; k < 4; k++)
			assert_int_equal(medha_sched_group_pending(f.s, k), 0);
	}
	for (int k = 0; k < 4; k++)
		assert_int_equal(seen[k], 1);
	/* a cancelled prefill takes its pending work with it */
	h[0] = fx_arrive(&f, "c", 900000, 4, 0, 5);
	assert_int_equal(medha_sched_next_batch(f.s, 5, &b), 1);
	assert_true(medha_sched_group_pending(f.s,
	                medha_sched_req(f.s, h[0])->kv.groups[0]) > 0);
	assert_int_equal(medha_sched_cancel(f.s, h[0], NULL, 5.1), 0);
	for (int k = 0; k < 4; k++)
		assert_int_equal(medha_sched_group_pending(f.s, k), 0);
	fx_close(&f);
}


/*
 * The prefill progress guarantee: three long decodes alone fill the
 * batch time (a 1 ms target, which one decode batch of Llama-3 8B at tp
 * 8 already passes), and a short request arriving among them still gets
 * its first chunk (32 tokens) in the first batch formed after it came,
 * then a chunk every batch, where before it waited for the decodes to
 * end. The chunk's cost is in the batch's predicted latency and
 * counted. Then the same in the simulator: the short request's first
 * chunk within two batches of its arrival.
 */
struct prog_obs {
	double arrival;  /* of the short request */
	int64_t batches; /* formed from its arrival to its first chunk */
	int chunked;
	uint64_t h; /* its handle: the first request admitted after the
	               decodes' (found by its prompt) */
};

static int
prog_batch(void *arg, const struct medha_sched *s,
    const struct medha_sched_batch *b)
{
	struct prog_obs *o = arg;

	if (o->chunked || b->start < o->arrival)
		return 0;
	o->batches++;
	for (int i = 0; i < b->n_items; i++) {
		const struct medha_req *r = medha_sched_req(s, b->items[i].req);
		if (!b->items[i].decode && r != NULL &&
		    strcmp(r->spec.id, "s") == 0)
			o->chunked = 1;
	}
	return 0;
}

static int
prog_record(void *arg, const struct medha_record *rec)
{
	(void)arg;
	(void)rec;
	return 0;
}

static void
test_progress_guarantee(void **state)
{
	struct medha_sched_config c;
	struct medha_sched_batch b;
	struct medha_sched_progress pg, pg0;
	struct fx f;
	uint64_t d[3], sh;
	double dec_lat, now = 0;
	int64_t got = 0;

	(void)state;
	medha_sched_config_default(&c);
	c.target = 0.001;
	for (int pol = 0; pol < 2; pol++) {
		c.policy = pol == 0 ? MEDHA_POLICY_MEDHA : MEDHA_POLICY_FCFS;
		fx_open(&f, "a100", "llama3-8b", 8, 1, 1, &c);
		for (int i = 0; i < 3; i++) {
			char id[8];
			snprintf(id, sizeof(id), "d%d", i);
			d[i] = fx_arrive(&f, id, 20000, 100000, 0, 0);
		}
		/* their prefills, alone (no decode waits), then decodes */
		while (medha_sched_req(f.s, d[2])->state != MEDHA_REQ_DECODE) {
			assert_int_equal(medha_sched_next_batch(f.s, now, &b),
			    1);
			now += b.latency;
			assert_int_equal(medha_sched_batch_done(f.s, &b, NULL,
			                     now),
			    0);
		}
		assert_int_equal(medha_sched_next_batch(f.s, now, &b), 1);
		assert_int_equal(b.n_items, 3);
		dec_lat = b.latency;
		assert_true(dec_lat > c.target); /* the decodes fill it */
		now += b.latency;
		assert_int_equal(medha_sched_batch_done(f.s, &b, NULL, now), 0);
		/* (d1's and d2's prefills had it beside d0's decode) */
		medha_sched_progress(f.s, &pg0);

		sh = fx_arrive(&f, "s", 100, 4, 0, now);
		got = 0;
		for (int k = 0; k < 4; k++) {
			const struct medha_sched_item *it;
			assert_int_equal(medha_sched_next_batch(f.s, now, &b),
			    1);
			assert_int_equal(b.n_decode, 3);
			it = prefill_of(&b, sh);
			assert_non_null(it); /* every batch, from the first */
			assert_int_equal(it->tokens, k < 3 ? 32 : 4);
			assert_int_equal(it->last, k == 3);
			assert_true(b.latency > dec_lat);
			got += it->tokens;
			medha_sched_progress(f.s, &pg);
			assert_int_equal(pg.batches, pg0.batches + k + 1);
			now += b.latency;
			assert_int_equal(medha_sched_batch_done(f.s, &b, NULL,
			                     now),
			    0);
		}
		assert_int_equal(got, 100);
		/* the extra time is the chunks' (a few ms each, at most) */
		pg.extra -= pg0.extra;
		assert_true(pg.extra > 0 && pg.extra < 4 * 0.01);
		print_message("%s: decodes alone %.2f ms; 4 chunks added "
		              "%.2f ms in all\n",
		    medha_policy_name(c.policy), dec_lat * 1e3,
		    pg.extra * 1e3);
		assert_int_equal(medha_sched_req(f.s, sh)->state,
		    MEDHA_REQ_DECODE);
		fx_close(&f);
	}

	/* the simulator: the same, batches timed by the predictor */
	{
		struct medha_pred p;
		struct medha_pred_model m;
		struct medha_sim_hooks h = {0};
		struct medha_sim_stats st;
		struct prog_obs o = {0};
		struct medha_reqspec r[4] = {
		    req("d0", 0, 20000, 2000, 0),
		    req("d1", 0, 20000, 2000, 0),
		    req("d2", 0, 20000, 2000, 0),
		    req("s", 2, 3000, 4, 0),
		};

		c.policy = MEDHA_POLICY_MEDHA;
		assert_int_equal(medha_model_resolve("llama3-8b", &m), 0);
		assert_int_equal(medha_pred_init(&p, medha_gpu_find("a100"), &m,
		                     8, 1, 1),
		    0);
		o.arrival = 2;
		h.arg = &o;
		h.record = prog_record;
		h.batch = prog_batch;
		assert_int_equal(medha_sim_run(&c, &p, r, 4, &h, &st), 0);
		print_message("sim: first chunk in batch %lld after arrival; "
		              "%lld batches over target, +%.1f ms\n",
		    (long long)o.batches, (long long)st.progress.batches,
		    st.progress.extra * 1e3);
		assert_true(o.chunked);
		assert_true(o.batches >= 1 && o.batches <= 2);
		/* 3000 tokens in 32-token chunks: ~94 batches so */
		assert_true(st.progress.batches >= 90);
		medha_pred_free(&p);
	}
}

/*
 * Long requests' TPOT (long_tpot): with spp 2, while a long request L
 * (prompt of preempt_below tokens or more) decodes, every batch, the
 * ones formed while its token is in flight too, stays within its target,
 * 1.5 x its decode's latency alone (the tpot_slo floor where that is
 * higher), bar a progress-guarantee chunk of a short prompt, and
 * (reserve est, spp 2) L's decode goes in batches of its own, so that
 * its TPOT is its decode's latency alone; another
 * long prompt, Q, whose deadline is far, waits for L's decode to end
 * (its chunks, deep in its context, cost about what L's decode does),
 * while short prompts arriving meanwhile still get chunks. L's mean
 * TPOT stays within its target. With long_tpot 0 (the rule off) Q's
 * chunks fill L's batches to the 50 ms target.
 */
struct lt_obs {
	double floor;   /* the tpot_slo floor: twice a 32-token chunk alone */
	double target;  /* L's tpot_long, once admitted */
	int64_t prog;   /* progress-guarantee batches so far */
	int64_t during; /* batches formed while L decoded */
	int64_t over;   /* of them over L's target (no guaranteed chunk) */
	int64_t q_chunks, s_chunks; /* Q's and short prompts' chunks then */
	int64_t shared; /* batches of L's decode with any other item */
	double worst;   /* the longest of those batches, s */
	double l_tpot;  /* L's mean TPOT from its record */
};

static int
lt_batch(void *arg, const struct medha_sched *s,
    const struct medha_sched_batch *b)
{
	struct lt_obs *o = arg;
	const struct medha_req *l = NULL;
	struct medha_sched_progress pg;
	int prog;

	for (int i = 0; i < medha_sched_pending(s); i++) {
		const struct medha_req *r = medha_sched_active(s, i);
		if (strcmp(r->spec.id, "L") == 0)
			l = r;
	}
	medha_sched_progress(s, &pg);
	prog = pg.batches > o->prog;
	o->prog = pg.batches;
	if (l == NULL || l->state != MEDHA_REQ_DECODE)
		return 0;
	o->target = l->tpot_long;
	o->during++;
	if (b->latency > o->worst)
		o->worst = b->latency;
	if (!prog && b->latency > 1.000001 * (o->target > o->floor
	                                             ? o->target
	                                             : o->floor))
		o->over++;
	for (int i = 0; i < b->n_items; i++) {
		const struct medha_req *r = medha_sched_req(s, b->items[i].req);
		if (r == l && b->n_items > 1)
			o->shared++;
		if (b->items[i].decode || r == NULL)
			continue;
		if (strcmp(r->spec.id, "Q") == 0)
			o->q_chunks++;
		else if (r->spec.id[0] == 's')
			o->s_chunks++;
	}
	return 0;
}

static int
lt_record(void *arg, const struct medha_record *rec)
{
	struct lt_obs *o = arg;

	if (strcmp(rec->id, "L") == 0)
		o->l_tpot = rec->tpot_mean;
	return 0;
}

static void
test_long_tpot(void **state)
{
	struct medha_sched_config c;
	struct medha_pred p;
	struct medha_pred_model m;
	struct medha_reqspec r[12];
	struct lt_obs o[2];
	struct fx f;
	double pre;

	(void)state;
	medha_sched_config_default(&c);
	c.preempt_below = 100000;
	assert_true(c.long_tpot == MEDHA_LONG_TPOT && c.long_tpot == 1.5);
	/* L's prefill alone, so that Q and the short ones come during its
	   decode (2000 tokens) */
	fx_open(&f, "a100", "llama3-8b", 8, 2, 1, &c);
	pre = medha_sched_prefill_alone(f.s, 600000);
	fx_close(&f);
	r[0] = req("L", 0, 600000, 2000, 0);
	r[1] = req("Q", pre + 0.5, 600000, 10, 10000);
	for (int i = 0; i < 10; i++) {
		char id[8];
		snprintf(id, sizeof(id), "s%d", i);
		r[2 + i] = req(id, pre + 0.5 + 0.3 * i, 2000, 20, 0);
	}
	assert_int_equal(medha_model_resolve("llama3-8b", &m), 0);
	assert_int_equal(medha_pred_init(&p, medha_gpu_find("a100"), &m, 8, 2,
	                     1),
	    0);
	for (int k = 0; k < 2; k++) {
		struct medha_sim_hooks h = {0};
		struct medha_sim_stats st;

		memset(&o[k], 0, sizeof(o[k]));
		o[k].floor = 2 * medha_cost_lone(&p, 32, 0).latency;
		c.long_tpot = k == 0 ? MEDHA_LONG_TPOT : 0;
		h.arg = &o[k];
		h.record = lt_record;
		h.batch = lt_batch;
		assert_int_equal(medha_sim_run(&c, &p, r, 12, &h, &st), 0);
		print_message("long_tpot %.1f: L's target %.2f ms (floor %.2f), "
		              "%lld batches while it decoded, %lld over it, "
		              "%lld with L's decode and more, longest %.2f ms; "
		              "Q's chunks %lld, short ones' %lld; L's TPOT "
		              "%.2f ms\n",
		    c.long_tpot, o[k].target * 1e3, o[k].floor * 1e3,
		    (long long)o[k].during, (long long)o[k].over,
		    (long long)o[k].shared, o[k].worst * 1e3,
		    (long long)o[k].q_chunks, (long long)o[k].s_chunks,
		    o[k].l_tpot * 1e3);
		assert_true(o[k].during > 100);
		assert_true(o[k].s_chunks >= 10);
	}
	/* the rule: within the target, above the floor here; Q waits */
	assert_true(o[0].target > o[0].floor);
	assert_int_equal(o[0].over, 0);
	assert_int_equal(o[0].q_chunks, 0);
	assert_true(o[0].l_tpot <= 1.05 * o[0].target);
	/* est, spp 2: L's decode in batches of its own, at its latency
	   alone (the target's 1 / 1.5) */
	assert_int_equal(o[0].shared, 0);
	assert_true(o[0].l_tpot <= 1.02 * o[0].target / MEDHA_LONG_TPOT);
	/* off: no target, Q's chunks beside L's decode, TPOT far above */
	assert_true(o[1].target == 0);
	assert_true(o[1].q_chunks > 0);
	assert_true(o[1].shared > 0);
	assert_true(o[1].worst > 0.04);
	assert_true(o[1].l_tpot > 1.5 * o[0].l_tpot);
	medha_pred_free(&p);
}

/*
 * Long prompts take turns (est and vllm, lrs and medha): A and B, two
 * long prompts alike whose TTFT SLOs leave room for both (150 s, the
 * paper's workload gives as much), arrive a second apart, C, a long
 * prompt whose prefill alone is under half of A's, a second later. Least relative
 * slack alone (as under reserve max, with memory for all three)
 * interleaves A's and B's chunks, so that both end late; with turns A
 * keeps its turn against B (B's first chunk after A's last) and C takes
 * it from A (C's first token first), and the later of A's and B's first
 * tokens comes no later than without turns.
 */
static void
test_long_turns(void **state)
{
	struct medha_sched_config c;
	struct collect col[2];
	struct medha_reqspec r[3] = {
	    req("A", 0, 600000, 4, 150),
	    req("B", 1, 600000, 4, 150),
	    req("C", 2, 120000, 4, 0),
	};
	const struct medha_record *a[2], *b[2], *cc[2];

	(void)state;
	medha_sched_config_default(&c);
	c.preempt_below = 100000;
	for (int k = 0; k < 2; k++) {
		c.reserve = k == 0 ? MEDHA_RESERVE_EST : MEDHA_RESERVE_MAX;
		sim("llama3-8b", 2, &c, r, 3, &col[k]);
		a[k] = find(&col[k], "A");
		b[k] = find(&col[k], "B");
		cc[k] = find(&col[k], "C");
		assert_non_null(a[k]);
		assert_non_null(b[k]);
		assert_non_null(cc[k]);
		print_message("%s: TTFT A %.2f s, B %.2f, C %.2f (alone "
		              "%.2f, %.2f, %.2f)\n",
		    medha_reserve_name(c.reserve), a[k]->ttft, b[k]->ttft,
		    cc[k]->ttft, a[k]->prefill_alone, b[k]->prefill_alone,
		    cc[k]->prefill_alone);
	}
	assert_true(2 * cc[0]->prefill_alone < a[0]->prefill_alone);
	/* turns: C first, then A, then B after A's end */
	assert_true(cc[0]->first_token < a[0]->first_token);
	assert_true(a[0]->first_token < b[0]->first_token);
	assert_true(b[0]->ttft >= a[0]->ttft + 0.9 * b[0]->prefill_alone - 1);
	assert_true(a[0]->ttft <= a[0]->prefill_alone + cc[0]->prefill_alone + 1);
	/* without: interleaved, A ends late */
	assert_true(a[1]->ttft > a[0]->ttft + 0.25 * a[0]->prefill_alone);
	assert_true(fmax(a[0]->ttft, b[0]->ttft) <=
	    1.01 * fmax(a[1]->ttft, b[1]->ttft));
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
	    cmocka_unit_test(test_output_tokens),
	    cmocka_unit_test(test_medha_long_queue),
	    cmocka_unit_test(test_sarathi_one_chunk_in_flight),
	    cmocka_unit_test(test_sarathi_no_spp_speedup),
	    cmocka_unit_test(test_cost_per_layer),
	    cmocka_unit_test(test_chunk_tpot_bound),
	    cmocka_unit_test(test_chunk_floor),
	    cmocka_unit_test(test_kvp_balance),
	    cmocka_unit_test(test_progress_guarantee),
	    cmocka_unit_test(test_long_tpot),
	    cmocka_unit_test(test_long_turns),
	};

	medha_log_level = MEDHA_LOG_ERROR;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
