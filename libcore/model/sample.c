/*
 * sample.c: greedy and random choice of tokens (see sample.h).
 *
 * Only the head of the distribution is ever sorted: the top-k (or, for
 * top-p alone, a growing prefix of 64, 128, ... candidates, until its
 * probability mass reaches p) is selected in linear time and then
 * sorted, so a vocabulary of 150k costs a pass or two, not a sort.
 */
#include "model/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
	float logit;
	int id;
};

struct medha_sampler {
	struct medha_sampler_params p;
	int n;          /* vocabulary */
	uint64_t st[4]; /* xoshiro256** state */
	struct cand *c; /* (n) candidates; NULL when greedy */
	int *ids;       /* (n) kept ids; greedy: &id1 */
	float *probs;   /* (n) their probabilities; greedy: &p1 */
	int id1;        /* a greedy sampler's one candidate: a sequence */
	float p1;       /* that decodes greedily holds no vocab-sized scratch */
	/* the last draw's log-probabilities, where asked for */
	float lp;
	int ntop;
	struct medha_logprob top[MEDHA_TOP_LOGPROBS_MAX];
	/* penalties (none: all NULL) */
	float *work;    /* (n) the logits, penalised */
	int32_t *count; /* (n) times each token was drawn */
	uint8_t *seen;  /* (n) in the prompt or drawn */
	int64_t ndrawn; /* tokens drawn (min_tokens counts them) */
};

static int
penalised(const struct medha_sampler_params *p)
{
	return p->presence_penalty != 0 || p->frequency_penalty != 0 ||
	    (p->repetition_penalty > 0 && p->repetition_penalty != 1);
}

/* Before min_tokens draws, with ids to keep out. */
static int
banning(const struct medha_sampler *s)
{
	return s->ndrawn < s->p.min_tokens && s->p.n_ban > 0;
}

static uint64_t
splitmix(uint64_t *x)
{
	return medha_mix64(*x += 0x9e3779b97f4a7c15ull);
}

static inline uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t
next(struct medha_sampler *s)
{
	uint64_t *t = s->st, r = rotl(t[1] * 5, 7) * 9, u = t[1] << 17;

	t[2] ^= t[0];
	t[3] ^= t[1];
	t[1] ^= t[2];
	t[0] ^= t[3];
	t[2] ^= u;
	t[3] = rotl(t[3], 45);
	return r;
}

float
medha_sampler_uniform(struct medha_sampler *s)
{
	return (float)(next(s) >> 40) * (1.0f / 16777216.0f);
}

int
medha_sampler_init(struct medha_sampler **sp,
    const struct medha_sampler_params *p, int n_vocab)
{
	struct medha_sampler *s;
	uint64_t x;
	int i;

	*sp = NULL;
	if (n_vocab < 1 || isnan(p->temp) || isnan(p->top_p) ||
	    !(p->presence_penalty >= -2 && p->presence_penalty <= 2) ||
	    !(p->frequency_penalty >= -2 && p->frequency_penalty <= 2) ||
	    !(p->repetition_penalty >= 0 && p->repetition_penalty <= 100) ||
	    !(p->min_p >= 0 && p->min_p <= 1) ||
	    p->top_logprobs < 0 || p->top_logprobs > MEDHA_TOP_LOGPROBS_MAX ||
	    p->min_tokens < 0 || p->n_ban < 0 || p->n_ban > MEDHA_BAN_MAX)
		return MEDHA_EINVAL;
	for (i = 0; i < p->n_ban; i++)
		if (p->ban[i] < 0 || p->ban[i] >= n_vocab)
			return MEDHA_EINVAL;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return MEDHA_ENOMEM;
	s->p = *p;
	s->n = n_vocab;
	x = p->seed;
	for (i = 0; i < 4; i++)
		s->st[i] = splitmix(&x);
	/* a sampler that draws drew one value a token: go on after them */
	if (p->temp > 0)
		for (uint64_t k = 0; k < p->skip; k++)
			(void)next(s);
	if (penalised(p)) {
		s->count = medha_calloc((size_t)n_vocab, sizeof(*s->count));
		s->seen = medha_calloc((size_t)n_vocab, sizeof(*s->seen));
	}
	/* the penalised or banned logits (the caller's stay as given) */
	if (penalised(p) || banning(s))
		s->work = medha_calloc((size_t)n_vocab, sizeof(*s->work));
	if ((penalised(p) && (s->count == NULL || s->seen == NULL)) ||
	    ((penalised(p) || banning(s)) && s->work == NULL)) {
		free(s->work);
		free(s->count);
		free(s->seen);
		free(s);
		return MEDHA_ENOMEM;
	}
	if (p->temp <= 0) {
		s->ids = &s->id1;
		s->probs = &s->p1;
		*sp = s;
		return 0;
	}
	s->c = medha_calloc((size_t)n_vocab, sizeof(*s->c));
	s->ids = medha_calloc((size_t)n_vocab, sizeof(*s->ids));
	s->probs = medha_calloc((size_t)n_vocab, sizeof(*s->probs));
	if (s->c == NULL || s->ids == NULL || s->probs == NULL) {
		medha_sampler_free(s);
		return MEDHA_ENOMEM;
	}
	*sp = s;
	return 0;
}

void
medha_sampler_free(struct medha_sampler *s)
{
	if (s == NULL)
		return;
	free(s->work);
	free(s->count);
	free(s->seen);
	if (s->ids != &s->id1) {
		free(s->c);
		free(s->ids);
		free(s->probs);
	}
	free(s);
}

/*
 * The first index of the largest logit, in LANES independent running
 * maxima (a vector's lanes where the compiler targets one) combined at
 * the end: one pass at memory speed, where a single running maximum is
 * a chain of dependent compares (about 12 cycles a logit: 180 us for a
 * 49k vocabulary, per sequence and step). A lane takes a logit only if
 * strictly larger, so each lane holds its first maximum and the lowest
 * index wins among equal lanes: the same answer as the plain loop for
 * any logits without NaN. NaNs are never chosen; if every logit is NaN
 * or -inf the answer is the first -inf, or 0.
 */
#define LANES 16

int
medha_sample_greedy(const float *logits, int n)
{
	float m[LANES];
	int at[LANES], i, j, best = -1;

	for (j = 0; j < LANES; j++) {
		m[j] = -INFINITY;
		at[j] = n;
	}
	for (i = 0; i + LANES <= n; i += LANES)
		for (j = 0; j < LANES; j++) {
			float x = logits[i + j];
			int gt = x > m[j];
			m[j] = gt ? x : m[j];
			at[j] = gt ? i + j : at[j];
		}
	for (; i < n; i++) /* the tail, into lane 0 */
		if (logits[i] > m[0]) {
			m[0] = logits[i];
			at[0] = i;
		}
	for (j = 0; j < LANES; j++)
		if (at[j] < n && (best < 0 || m[j] > m[best] ||
		                     (m[j] == m[best] && at[j] < at[best])))
			best = j;
	if (best >= 0)
		return at[best];
	for (i = 0; i < n; i++)
		if (logits[i] == -INFINITY)
			return i;
	return 0;
}

/* a before b: larger logit first, then lower id */
static inline int
before(const struct cand *a, const struct cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int
cand_cmp(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;

	return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Move the m first (in "before" order) of c[0..n) to the front. */
static void
partition_top(struct cand *c, int n, int m)
{
	int lo = 0, hi = n - 1, i, j;
	struct cand piv, t;

	if (m < n) {
		while (lo < hi) { /* quickselect: c[m-1] lands in place */
			piv = c[lo + (hi - lo) / 2];
			i = lo;
			j = hi;
			while (i <= j) {
				while (before(&c[i], &piv))
					i++;
				while (before(&piv, &c[j]))
					j--;
				if (i <= j) {
					t = c[i];
					c[i] = c[j];
					c[j] = t;
					i++;
					j--;
				}
			}
			if (m - 1 <= j)
				hi = j;
			else if (m - 1 >= i)
				lo = i;
			else
				break;
		}
	}
}

/* The same, and sort them. */
static void
select_top(struct cand *c, int n, int m)
{
	partition_top(c, n, m);
	qsort(c, (size_t)(m < n ? m : n), sizeof(*c), cand_cmp);
}

int
medha_sampler_prompt(struct medha_sampler *s, const int32_t *ids, int64_t n)
{
	if (s->seen == NULL)
		return 0;
	for (int64_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= s->n)
			return MEDHA_EINVAL;
	for (int64_t i = 0; i < n; i++)
		s->seen[ids[i]] = 1;
	return 0;
}

/* The penalties (sample.h) on logits, into s->work. */
static const float *
penalise(struct medha_sampler *s, const float *logits)
{
	const struct medha_sampler_params *p = &s->p;
	const float r = p->repetition_penalty;
	const int rep = r > 0 && r != 1;

	for (int i = 0; i < s->n; i++) {
		float l = logits[i];
		if (rep && s->seen[i])
			l = l > 0 ? l / r : l * r;
		if (s->count[i] > 0)
			l -= p->frequency_penalty * (float)s->count[i] +
			    p->presence_penalty;
		s->work[i] = l;
	}
	return s->work;
}

int
medha_sample_candidates(struct medha_sampler *s, const float *logits,
    const int **ids, const float **probs)
{
	const struct medha_sampler_params *p = &s->p;
	int i, n = s->n, m, k;
	double z, cum, e;
	float max;

	*ids = s->ids;
	*probs = s->probs;
	if (s->count != NULL)
		logits = penalise(s, logits);
	if (banning(s)) {
		/* vLLM's min_tokens: the ids cannot be drawn yet */
		if (logits != s->work)
			memcpy(s->work, logits, (size_t)n * sizeof(*s->work));
		for (i = 0; i < p->n_ban; i++)
			s->work[p->ban[i]] = -INFINITY;
		logits = s->work;
	}
	if (p->temp <= 0) {
		s->ids[0] = medha_sample_greedy(logits, n);
		s->probs[0] = 1;
		return 1;
	}
	for (i = 0; i < n; i++) {
		s->c[i].logit = logits[i];
		s->c[i].id = i;
	}
	k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
	/* top_p 0 (or a p so small that it is 0 as a float) keeps the
	   most likely token, as the smallest nucleus does: never all */
	if (p->top_p >= 1) {
		select_top(s->c, n, k);
		m = k;
	} else {
		/* the nucleus of the top-k, by untempered probability */
		partition_top(s->c, n, k);
		select_top(s->c, k, k < 64 ? k : 64);
		max = s->c[0].logit;
		z = 0;
		for (i = 0; i < k; i++)
			z += exp((double)s->c[i].logit - max);
		m = k < 64 ? k : 64;
		for (;;) {
			cum = 0;
			for (i = 0; i < m; i++) {
				cum += exp((double)s->c[i].logit - max) / z;
				if (cum >= p->top_p)
					break;
			}
			if (i < m) {
				m = i + 1;
				break;
			}
			if (m == k)
				break;
			m = 2 * m < k ? 2 * m : k;
			select_top(s->c, k, m);
		}
	}
	/* min-p: of the kept (sorted), those at least min_p times as
	   likely as the likeliest, before temperature */
	if (p->min_p > 0)
		while (m > 1 &&
		    exp((double)s->c[m - 1].logit - s->c[0].logit) < p->min_p)
			m--;
	/* temperature and softmax over the kept */
	max = s->c[0].logit;
	z = 0;
	for (i = 0; i < m; i++) {
		e = exp(((double)s->c[i].logit - max) / p->temp);
		s->probs[i] = (float)e;
		s->ids[i] = s->c[i].id;
		z += e;
	}
	for (i = 0; i < m; i++)
		s->probs[i] = (float)(s->probs[i] / z);
	return m;
}

/* a before b in the top log-probabilities: larger, then lower id */
static int
lp_before(const struct medha_logprob *a, const struct medha_logprob *b)
{
	return a->logprob > b->logprob ||
	    (a->logprob == b->logprob && a->id < b->id);
}

/* The log-softmax of the raw logits at tok, and the top ones. */
static void
logprobs(struct medha_sampler *s, const float *logits, int tok)
{
	const int k = s->p.top_logprobs;
	double max = -INFINITY, z = 0, lse;
	int n = 0;

	for (int i = 0; i < s->n; i++)
		if (logits[i] > max)
			max = logits[i];
	for (int i = 0; i < s->n; i++)
		z += exp((double)logits[i] - max);
	lse = max + log(z);
	s->lp = (float)((double)logits[tok] - lse);
	/* the k largest by insertion: k is at most 20 */
	for (int i = 0; i < s->n && k > 0; i++) {
		struct medha_logprob c = {i, (float)((double)logits[i] - lse)};
		int j;
		if (n == k && !lp_before(&c, &s->top[n - 1]))
			continue;
		j = n < k ? n++ : n - 1;
		while (j > 0 && lp_before(&c, &s->top[j - 1])) {
			s->top[j] = s->top[j - 1];
			j--;
		}
		s->top[j] = c;
	}
	s->ntop = n;
}

int
medha_sample_logprobs(const struct medha_sampler *s, float *lp,
    const struct medha_logprob **top)
{
	if (!s->p.logprobs)
		return -1;
	*lp = s->lp;
	*top = s->top;
	return s->ntop;
}

/* tok is output: the penalties count it. */
static int
drawn(struct medha_sampler *s, int tok)
{
	s->ndrawn++;
	if (s->count != NULL) {
		s->count[tok]++;
		s->seen[tok] = 1;
	}
	return tok;
}

int
medha_sampler_is_greedy(const struct medha_sampler *s)
{
	/* penalties and min_tokens's ban change the argmax, logprobs want
	   the row: not these (the ban only until min_tokens draws) */
	return s->p.temp <= 0 && s->count == NULL && !banning(s) &&
	    !s->p.logprobs;
}

int
medha_sample(struct medha_sampler *s, const float *logits)
{
	const int *ids;
	const float *probs;
	int n, i;
	float r, cum = 0;

	n = medha_sample_candidates(s, logits, &ids, &probs);
	if (n == 1 && s->p.temp <= 0)
		i = 0;
	else {
		r = medha_sampler_uniform(s);
		for (i = 0; i < n - 1; i++) {
			cum += probs[i];
			if (r < cum)
				break;
		}
	}
	if (s->p.logprobs)
		logprobs(s, logits, ids[i]);
	return drawn(s, ids[i]);
}
