/*
 * sample_test.c: the sampler (libcore/sample.c): greedy is the argmax
 * with ties to the lowest id; a seed repeats its draws and another seed
 * does not; top-k keeps the k largest logits, by falling logit; top-p
 * keeps the smallest prefix (by untempered probability) that reaches p;
 * draws stay in the kept set and follow its probabilities. The greedy
 * choice (kept in lanes) equals a plain first-maximum loop for every
 * length, any place of the maximum and ties across lanes and the tail;
 * NaNs are never chosen. min_tokens keeps its banned ids from being
 * drawn until it has drawn that many.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/sample.h"
#include "testutil.h"

static void
test_sampling(void **state)
{
	enum { V = 1000 };
	struct medha_sampler *s, *s2;
	struct medha_sampler_params p = {.temp = 0.0f};
	float lg[V];
	const int *ids;
	const float *pr;
	int i, n, a[50], b[50], counts[V];
	double cum;

	(void)state;
	rng_seed(5);
	for (i = 0; i < V; i++)
		lg[i] = 3.0f * frand();
	lg[500] = 10.0f;
	lg[700] = 10.0f; /* a tie: the lower id wins */
	assert_int_equal(medha_sample_greedy(lg, V), 500);
	assert_int_equal(medha_sampler_init(&s, &p, V), 0);
	assert_int_equal(medha_sample(s, lg), 500);
	assert_int_equal(medha_sampler_is_greedy(s), 1);
	medha_sampler_free(s);
	/* greedy with a penalty or logprobs: not the row's argmax alone */
	{
		struct medha_sampler_params q = p;
		const struct medha_logprob *top;
		float lp;
		q.repetition_penalty = 1.5f;
		assert_int_equal(medha_sampler_init(&s, &q, V), 0);
		assert_int_equal(medha_sampler_is_greedy(s), 0);
		assert_int_equal(medha_sample(s, lg), 500);
		/* 500 drawn: its positive logit divided by 1.5, the tie goes
		   to 700 */
		assert_int_equal(medha_sample(s, lg), 700);
		medha_sampler_free(s);
		q = p;
		q.logprobs = 1;
		q.top_logprobs = 2;
		assert_int_equal(medha_sampler_init(&s, &q, V), 0);
		assert_int_equal(medha_sampler_is_greedy(s), 0);
		assert_int_equal(medha_sample(s, lg), 500);
		assert_int_equal(medha_sample_logprobs(s, &lp, &top), 2);
		assert_true(top[0].id == 500 && top[1].id == 700);
		assert_true(lp == top[0].logprob && lp == top[1].logprob);
		assert_true(lp < 0 && lp > -1);
		medha_sampler_free(s);
	}
	lg[700] = 0;

	/* a seed repeats itself; another seed does not */
	p = (struct medha_sampler_params){.temp = 1.5f, .top_p = 1, .seed = 42};
	lg[500] = 3.0f;
	assert_int_equal(medha_sampler_init(&s, &p, V), 0);
	assert_int_equal(medha_sampler_init(&s2, &p, V), 0);
	assert_int_equal(medha_sampler_is_greedy(s), 0);
	for (i = 0; i < 50; i++) {
		a[i] = medha_sample(s, lg);
		b[i] = medha_sample(s2, lg);
	}
	assert_memory_equal(a, b, sizeof(a));
	medha_sampler_free(s2);
	p.seed = 43;
	assert_int_equal(medha_sampler_init(&s2, &p, V), 0);
	for (i = 0; i < 50; i++)
		b[i] = medha_sample(s2, lg);
	assert_memory_not_equal(a, b, sizeof(a));
	medha_sampler_free(s);
	medha_sampler_free(s2);

	/* top-k keeps the k largest, by falling logit */
	p = (struct medha_sampler_params){.temp = 1.0f,
	    .top_k = 10,
	    .top_p = 1.0f,
	    .seed = 1};
	assert_int_equal(medha_sampler_init(&s, &p, V), 0);
	n = medha_sample_candidates(s, lg, &ids, &pr);
	assert_int_equal(n, 10);
	for (i = 0; i < n; i++) {
		int j, above = 0;
		for (j = 0; j < V; j++)
			above += lg[j] > lg[ids[i]];
		assert_int_equal(above, i);
	}
	cum = 0;
	for (i = 0; i < n; i++)
		cum += pr[i];
	assert_true(fabs(cum - 1) < 1e-5);
	for (i = 0; i < 2000; i++) { /* draws stay in the set */
		int t = medha_sample(s, lg), j, in = 0;
		for (j = 0; j < n; j++)
			in |= ids[j] == t;
		assert_true(in);
	}
	medha_sampler_free(s);

	/* top-p keeps the smallest prefix reaching p */
	for (i = 0; i < 4; i++) {
		float tp_ = i == 0 ? 0.5f
		    : i == 1       ? 0.9f
		    : i == 2       ? 0.99f
		                   : 0.1f;
		double z = 0, c2 = 0, mx = 10;
		int j, m;
		float sorted[V];
		p = (struct medha_sampler_params){.temp = 0.7f,
		    .top_p = tp_,
		    .seed = 1};
		assert_int_equal(medha_sampler_init(&s, &p, V), 0);
		n = medha_sample_candidates(s, lg, &ids, &pr);
		for (j = 0; j < V; j++)
			z += exp(lg[j] - mx);
		memcpy(sorted, lg, sizeof(sorted));
		/* expected count: walk the logits from the top */
		for (m = 0; m < V; m++) {
			int best = 0;
			for (j = 1; j < V; j++)
				if (sorted[j] > sorted[best])
					best = j;
			c2 += exp(sorted[best] - mx) / z;
			sorted[best] = -INFINITY;
			if (c2 >= tp_)
				break;
		}
		assert_int_equal(n, m + 1);
		for (j = 1; j < n; j++)
			assert_true(lg[ids[j]] <= lg[ids[j - 1]]);
		medha_sampler_free(s);
	}

	/* the smallest top_p keeps the most likely token: 0, and 1e-50
	   (0 as a float) as 1e-10 does, never the whole vocabulary */
	for (i = 0; i < 3; i++) {
		p = (struct medha_sampler_params){.temp = 1.0f,
		    .top_p = i == 0 ? 0.0f : i == 1 ? (float)1e-50 : 1e-10f,
		    .seed = 3};
		assert_int_equal(medha_sampler_init(&s, &p, V), 0);
		n = medha_sample_candidates(s, lg, &ids, &pr);
		assert_int_equal(n, 1);
		assert_int_equal(ids[0], medha_sample_greedy(lg, V));
		assert_int_equal(medha_sample(s, lg), ids[0]);
		medha_sampler_free(s);
	}

	/* frequencies follow the probabilities */
	p = (struct medha_sampler_params){.temp = 1.0f,
	    .top_k = 3,
	    .top_p = 1.0f,
	    .seed = 9};
	assert_int_equal(medha_sampler_init(&s, &p, V), 0);
	n = medha_sample_candidates(s, lg, &ids, &pr);
	memset(counts, 0, sizeof(counts));
	for (i = 0; i < 20000; i++)
		counts[medha_sample(s, lg)]++;
	for (i = 0; i < n; i++)
		assert_true(fabs(counts[ids[i]] / 20000.0 - pr[i]) < 0.02);
	medha_sampler_free(s);
}

/* the plain loop the lane-wise greedy choice must agree with */
static int
first_max(const float *lg, int n)
{
	int i, best = 0;

	for (i = 1; i < n; i++)
		if (lg[i] > lg[best])
			best = i;
	return best;
}

static void
test_greedy_lanes(void **state)
{
	enum { V = 300 };
	float lg[V];
	int n, i, j, r;

	(void)state;
	rng_seed(9);
	for (n = 1; n <= V; n++)
		for (r = 0; r < 20; r++) {
			for (i = 0; i < n; i++) /* few values: many ties */
				lg[i] = (float)(int)(4 * frand());
			if (r % 4 == 1) /* a tie between two places */
				lg[(r * 7) % n] = lg[(r * 13 + 5) % n] = 9;
			if (r % 4 == 2) /* the maximum in the tail */
				lg[n - 1] = 9;
			if (r % 4 == 3) /* -inf everywhere but one */
				for (i = 0; i < n; i++)
					lg[i] = i == (r * 3) % n ? -1e30f
					                         : -INFINITY;
			assert_int_equal(medha_sample_greedy(lg, n),
			    first_max(lg, n));
		}
	for (n = 1; n <= 40; n++) { /* all -inf: the first */
		for (i = 0; i < n; i++)
			lg[i] = -INFINITY;
		assert_int_equal(medha_sample_greedy(lg, n), 0);
	}
	for (i = 0; i < 40; i++) /* NaNs are passed over */
		lg[i] = i % 3 == 0 ? NAN : (float)i;
	lg[39] = NAN;
	assert_int_equal(medha_sample_greedy(lg, 40), 38);
	for (j = 0; j < 40; j++)
		lg[j] = NAN;
	assert_int_equal(medha_sample_greedy(lg, 40), 0);
}

/*
 * A sampler given skip k draws what one that drew k tokens first draws
 * next (a preempted request resumed goes on where it was), and differs
 * from a fresh one; greedy ignores it.
 */
static void
test_skip(void **state)
{
	enum { V = 50, K = 37, N = 40 };
	struct medha_sampler_params p = {.temp = 0.9f,
	    .top_k = 0,
	    .top_p = 0.95f,
	    .seed = 1234};
	struct medha_sampler *a, *b, *c;
	float lg[V];
	int i, t, same = 0;

	(void)state;
	rng_seed(3);
	for (i = 0; i < V; i++)
		lg[i] = 3 * frand();
	assert_int_equal(medha_sampler_init(&a, &p, V), 0);
	assert_int_equal(medha_sampler_init(&c, &p, V), 0);
	for (t = 0; t < K; t++)
		(void)medha_sample(a, lg);
	p.skip = K;
	assert_int_equal(medha_sampler_init(&b, &p, V), 0);
	for (t = 0; t < N; t++) {
		int x = medha_sample(a, lg), y = medha_sample(b, lg);

		assert_int_equal(x, y);
		same += medha_sample(c, lg) == y;
	}
	assert_true(same < N);
	medha_sampler_free(a);
	medha_sampler_free(b);
	medha_sampler_free(c);
}

/*
 * vLLM's min_tokens: the banned ids (an end-of-generation token and a
 * stop token id) are never drawn in the first min_tokens draws, greedy
 * or sampled, with penalties or not; after, the logits are as given
 * again. The caller's row is not written, a sampler with a ban in force
 * is not greedy on the GPU's terms, the logprobs stay the model's (the
 * log-softmax of the row as given, vLLM's raw logprobs), and the
 * parameters are checked.
 */
static void
test_min_tokens(void **state)
{
	enum { V = 8 };
	const float lg0[V] = {0, 1, 9, 2, 3, 8, 4, 0.5f};
	float lg[V];
	struct medha_sampler *s;
	struct medha_sampler_params p = {.temp = 0.0f, .seed = 3,
	    .min_tokens = 3, .n_ban = 2, .ban = {2, 5}};
	int i, t, hit, counts[V];
	double z = 0;
	float lp;
	const struct medha_logprob *top;

	(void)state;
	memcpy(lg, lg0, sizeof(lg));
	/* greedy: the best of the rest (6) three times, then 2 */
	assert_int_equal(medha_sampler_init(&s, &p, V), 0);
	for (i = 0; i < 3; i++) {
		assert_false(medha_sampler_is_greedy(s));
		assert_int_equal(medha_sample(s, lg), 6);
	}
	assert_memory_equal(lg, lg0, sizeof(lg));
	assert_true(medha_sampler_is_greedy(s));
	assert_int_equal(medha_sample(s, lg), 2);
	medha_sampler_free(s);

	/* with the penalties, and logprobs: the ban still holds, the
	   frequency penalty moves the choice off 6 after its first draw,
	   and the logprob is the unmasked row's */
	p.frequency_penalty = 2;
	p.logprobs = 1;
	p.top_logprobs = 2;
	p.min_tokens = 2;
	assert_int_equal(medha_sampler_init(&s, &p, V), 0);
	assert_int_equal(medha_sample(s, lg), 6);
	for (i = 0; i < V; i++)
		z += exp((double)lg0[i] - 9);
	assert_int_equal(medha_sample_logprobs(s, &lp, &top), 2);
	assert_float_equal(lp, (double)lg0[6] - 9 - log(z), 1e-5);
	assert_int_equal(top[0].id, 2); /* the model's likeliest */
	assert_int_equal(medha_sample(s, lg), 4); /* 6 is at 4 - 2 = 2 */
	assert_int_equal(medha_sample(s, lg), 2); /* free again */
	medha_sampler_free(s);

	/* sampled: 2 and 5 hold nearly all the mass, yet none of the
	   first 300 draws is either; of the next 300, nearly all are */
	p = (struct medha_sampler_params){.temp = 1.0f, .top_p = 1,
	    .seed = 11, .min_tokens = 300, .n_ban = 2, .ban = {5, 2}};
	assert_int_equal(medha_sampler_init(&s, &p, V), 0);
	memset(counts, 0, sizeof(counts));
	for (t = 0; t < 300; t++)
		counts[medha_sample(s, lg)]++;
	assert_int_equal(counts[2] + counts[5], 0);
	assert_true(counts[6] > 0 && counts[4] > 0);
	for (hit = 0, t = 0; t < 300; t++) {
		i = medha_sample(s, lg);
		hit += i == 2 || i == 5;
	}
	assert_true(hit > 290);
	medha_sampler_free(s);

	/* min_tokens with nothing to ban is plain greedy */
	p = (struct medha_sampler_params){.temp = 0, .min_tokens = 5};
	assert_int_equal(medha_sampler_init(&s, &p, V), 0);
	assert_true(medha_sampler_is_greedy(s));
	assert_int_equal(medha_sample(s, lg), 2);
	medha_sampler_free(s);

	/* bad parameters */
	p = (struct medha_sampler_params){.min_tokens = 1, .n_ban = 1,
	    .ban = {V}};
	assert_int_equal(medha_sampler_init(&s, &p, V), MEDHA_EINVAL);
	p.ban[0] = -1;
	assert_int_equal(medha_sampler_init(&s, &p, V), MEDHA_EINVAL);
	p.ban[0] = 1;
	p.n_ban = MEDHA_BAN_MAX + 1;
	assert_int_equal(medha_sampler_init(&s, &p, V), MEDHA_EINVAL);
	p.n_ban = 1;
	p.min_tokens = -1;
	assert_int_equal(medha_sampler_init(&s, &p, V), MEDHA_EINVAL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sampling),
	    cmocka_unit_test(test_greedy_lanes),
	    cmocka_unit_test(test_skip),
	    cmocka_unit_test(test_min_tokens),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
