/*
 * req.c: the shared request and record structs (req.h): ownership
 * helpers and the names of statuses and finish reasons, which both
 * codecs (JSON Lines and msgpack) use; and the TBT histogram of a
 * record.
 */
#include "req.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

const struct medha_sampler_params medha_sampling_greedy = {.temp = 0,
    .top_k = 0,
    .top_p = 1,
    .seed = 1};

void
medha_reqspec_clear(struct medha_reqspec *rs)
{
	free(rs->prompt);
	free(rs->prompt_ids);
	free(rs->prefix);
	rs->prompt = NULL;
	rs->prompt_ids = NULL;
	rs->prefix = NULL;
	rs->n_prefix = 0;
	for (int i = 0; i < rs->n_stop && i < MEDHA_STOP_MAX; i++) {
		free(rs->stop[i]);
		rs->stop[i] = NULL;
	}
	rs->n_stop = 0;
}

int
medha_reqspec_copy(struct medha_reqspec *dst, const struct medha_reqspec *src)
{
	*dst = *src;
	dst->prompt = NULL;
	dst->prompt_ids = NULL;
	dst->prefix = NULL;
	dst->n_prefix = 0;
	dst->n_stop = 0;
	memset(dst->stop, 0, sizeof(dst->stop));
	if (src->n_prefix > 0) {
		dst->prefix = medha_reallocarray(NULL, (size_t)src->n_prefix,
		    sizeof(*dst->prefix));
		if (dst->prefix == NULL)
			goto nomem;
		memcpy(dst->prefix, src->prefix,
		    (size_t)src->n_prefix * sizeof(*dst->prefix));
		dst->n_prefix = src->n_prefix;
	}
	if (src->prompt != NULL && (dst->prompt = strdup(src->prompt)) == NULL)
		goto nomem;
	if (src->prompt_ids != NULL) {
		dst->prompt_ids = medha_reallocarray(NULL,
		    (size_t)src->prompt_tokens, sizeof(*dst->prompt_ids));
		if (dst->prompt_ids == NULL)
			goto nomem;
		memcpy(dst->prompt_ids, src->prompt_ids,
		    (size_t)src->prompt_tokens * sizeof(*dst->prompt_ids));
	}
	for (int i = 0; i < src->n_stop && i < MEDHA_STOP_MAX; i++) {
		if ((dst->stop[i] = strdup(src->stop[i])) == NULL)
			goto nomem;
		dst->n_stop = i + 1;
	}
	return 0;
nomem:
	medha_reqspec_clear(dst);
	return MEDHA_ENOMEM;
}

static const char *status_names[MEDHA_STATUS_COUNT] = {"ok", "rejected",
    "failed", "cancelled"};

const char *
medha_status_name(int status)
{
	if (status < 0 || status >= MEDHA_STATUS_COUNT)
		return "unknown";
	return status_names[status];
}

int
medha_status_parse(const char *name)
{
	for (int i = 0; i < MEDHA_STATUS_COUNT; i++)
		if (strcmp(name, status_names[i]) == 0)
			return i;
	return -1;
}

static const char *finish_names[MEDHA_FINISH_COUNT] = {"", "length", "stop"};

const char *
medha_finish_name(int finish)
{
	if (finish < 0 || finish >= MEDHA_FINISH_COUNT)
		return "";
	return finish_names[finish];
}

int
medha_finish_parse(const char *name)
{
	for (int i = 1; i < MEDHA_FINISH_COUNT; i++)
		if (strcmp(name, finish_names[i]) == 0)
			return i;
	return -1;
}

/* ---- the names of logprobs' tokens ---- */

static size_t
lp_used(const struct medha_token_lp *lp, int upto)
{
	size_t n = 0;

	for (int k = 0; k < upto; k++)
		n += lp->nbytes[k];
	return n;
}

int
medha_token_lp_name(struct medha_token_lp *lp, const char *s, size_t n)
{
	size_t at = lp_used(lp, lp->nnamed);

	if (lp->nnamed > lp->ntop || n > MEDHA_LP_BYTES_MAX - at)
		return MEDHA_ENOSPACE;
	if (n > 0)
		memcpy(lp->bytes + at, s, n);
	lp->nbytes[lp->nnamed++] = (uint16_t)n;
	return 0;
}

const char *
medha_token_lp_bytes(const struct medha_token_lp *lp, int k, size_t *n)
{
	if (k < 0 || k >= lp->nnamed) {
		*n = 0;
		return NULL;
	}
	*n = lp->nbytes[k];
	return lp->bytes + lp_used(lp, k);
}

void
medha_record_clear(struct medha_record *rec)
{
	free(rec->token_ids);
	free(rec->text);
	free(rec->logprobs);
	rec->logprobs = NULL;
	rec->token_ids = NULL;
	rec->text = NULL;
	rec->n_token_ids = 0;
	medha_tbt_free(&rec->tbt);
}

/* ---- time between tokens ---- */

/* The bucket by its definition (a logarithm: about 20 ns). */
static int
bucket_of(double gap)
{
	double b;

	if (gap < MEDHA_TBT_MIN)
		return 0;
	b = floor(log(gap / MEDHA_TBT_MIN) / log(MEDHA_TBT_RATIO)) + 1;
	return b < MEDHA_TBT_BUCKETS - 1 ? (int)b : MEDHA_TBT_BUCKETS - 1;
}

/*
 * A scheduler adds a gap for every decode token, and the logarithm and
 * its division were an eighth of its time with 1000 requests decoding;
 * a gap is placed by its bits and two tables instead, in the same
 * bucket to the last bit.
 * edge[b]: the least double that bucket_of() puts in bucket b or above
 * (edge[0] 0, edge[MEDHA_TBT_BUCKETS] infinity), found once by
 * bisection over the doubles, which are ordered as their bits are;
 * bucket_of() never decreases as gap grows, so bucket b is exactly
 * [edge[b], edge[b + 1]). seg[i]: the bucket of the least double of
 * segment i, the gaps from 2^(SEG_E0 + i / 16) with the first four bits
 * of the mantissa i % 16: a segment is a sixteenth of an octave
 * (6.25%), so a gap's bucket is seg[i] or one or two above, which edge
 * tells.
 */
#define SEG_E0 (-20) /* 2^-20 s, below MEDHA_TBT_MIN */
#define SEG_E1 14    /* 2^14 s, above the last bucket's edge */
#define SEG_N ((SEG_E1 - SEG_E0) * 16)
static double edge[MEDHA_TBT_BUCKETS + 1];
static uint16_t seg[SEG_N];
static pthread_once_t edge_once = PTHREAD_ONCE_INIT;

static void
edge_init(void)
{
	edge[0] = 0;
	edge[1] = MEDHA_TBT_MIN;
	for (int b = 2; b < MEDHA_TBT_BUCKETS; b++) {
		double lo = edge[b - 1], hi = 1e9; /* bucket_of(hi) is the last */
		uint64_t l, h;

		memcpy(&l, &lo, sizeof(l)); /* bucket_of(lo) < b */
		memcpy(&h, &hi, sizeof(h)); /* bucket_of(hi) >= b */
		while (h - l > 1) {
			uint64_t m = l + (h - l) / 2;
			double g;

			memcpy(&g, &m, sizeof(g));
			if (bucket_of(g) >= b)
				h = m;
			else
				l = m;
		}
		memcpy(&edge[b], &h, sizeof(h));
	}
	edge[MEDHA_TBT_BUCKETS] = INFINITY;
	for (int i = 0; i < SEG_N; i++)
		seg[i] = (uint16_t)bucket_of(
		    ldexp(1 + (i % 16) / 16.0, SEG_E0 + i / 16));
}

int
medha_tbt_bucket(double gap)
{
	uint64_t bits;
	int e, b;

	if (!(gap >= 0))
		return -1;
	pthread_once(&edge_once, edge_init);
	memcpy(&bits, &gap, sizeof(bits));
	e = (int)(bits >> 52) - 1023; /* gap >= 0: no sign bit */
	if (e < SEG_E0)
		return bucket_of(gap); /* 0 (below MEDHA_TBT_MIN) */
	if (e >= SEG_E1)
		return MEDHA_TBT_BUCKETS - 1;
	b = seg[(e - SEG_E0) * 16 + (int)(bits >> 48 & 15)];
	while (gap >= edge[b + 1])
		b++;
	return b;
}

double
medha_tbt_value(int bucket)
{
	if (bucket <= 0)
		return 0;
	if (bucket >= MEDHA_TBT_BUCKETS - 1)
		return MEDHA_TBT_MIN *
		    pow(MEDHA_TBT_RATIO, MEDHA_TBT_BUCKETS - 2);
	return MEDHA_TBT_MIN * pow(MEDHA_TBT_RATIO, bucket - 0.5);
}

/* Adds count gaps to bucket, keeping the bins in order. */
static int
tbt_add_n(struct medha_tbt *h, int bucket, int64_t count)
{
	struct medha_tbt_bin *p;
	int lo = 0, hi = h->n, mid;

	/* the gaps of one request mostly fall where the last one did */
	if (h->last < h->n && h->bin[h->last].bucket == bucket) {
		h->bin[h->last].count += count;
		return 0;
	}
	while (lo < hi) {
		mid = (lo + hi) / 2;
		if (h->bin[mid].bucket < bucket)
			lo = mid + 1;
		else
			hi = mid;
	}
	h->last = lo;
	if (lo < h->n && h->bin[lo].bucket == bucket) {
		h->bin[lo].count += count;
		return 0;
	}
	if (h->n == h->cap) {
		int ncap = h->cap ? 2 * h->cap : 8;

		if (ncap > MEDHA_TBT_BUCKETS)
			ncap = MEDHA_TBT_BUCKETS;
		if ((p = medha_reallocarray(h->bin, ncap, sizeof(*p))) == NULL)
			return MEDHA_ENOMEM;
		h->bin = p;
		h->cap = ncap;
	}
	memmove(&h->bin[lo + 1], &h->bin[lo], (h->n - lo) * sizeof(*h->bin));
	h->bin[lo].bucket = bucket;
	h->bin[lo].count = count;
	h->n++;
	return 0;
}

int
medha_tbt_add(struct medha_tbt *h, double gap)
{
	int b = medha_tbt_bucket(gap);

	if (b < 0)
		return MEDHA_EINVAL;
	return tbt_add_n(h, b, 1);
}

int
medha_tbt_add_n(struct medha_tbt *h, int bucket, int64_t n)
{
	if (bucket < 0 || bucket >= MEDHA_TBT_BUCKETS || n < 1)
		return MEDHA_EINVAL;
	return tbt_add_n(h, bucket, n);
}

int
medha_tbt_merge(struct medha_tbt *dst, const struct medha_tbt *src)
{
	int rc;

	for (int i = 0; i < src->n; i++)
		if ((rc = tbt_add_n(dst, src->bin[i].bucket,
		         src->bin[i].count)) != 0)
			return rc;
	return 0;
}

int64_t
medha_tbt_count(const struct medha_tbt *h)
{
	int64_t n = 0;

	for (int i = 0; i < h->n; i++)
		n += h->bin[i].count;
	return n;
}

double
medha_tbt_quantile(const struct medha_tbt *h, double q)
{
	int64_t n = medha_tbt_count(h), k, seen = 0;
	double x = q * (double)n;
	int i;

	if (n == 0)
		return NAN;
	/* the rank, ceil(q * n) without the rounding of q * n past an
	   integer (0.07 * 100 is 7.000000000000001) */
	k = (int64_t)ceil(x - x * 1e-12);
	if (k < 1)
		k = 1;
	for (i = 0; i < h->n - 1; i++) {
		seen += h->bin[i].count;
		if (seen >= k)
			break;
	}
	return medha_tbt_value(h->bin[i].bucket);
}

int
medha_tbt_check(const struct medha_tbt *h, int64_t max_gaps, char *why,
    size_t whylen)
{
	int64_t total = 0;

	if (h->n < 0 || h->n > MEDHA_TBT_BUCKETS ||
	    (h->n > 0 && h->bin == NULL))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "not an array of at most %d bins", MEDHA_TBT_BUCKETS);
	for (int i = 0; i < h->n; i++) {
		const struct medha_tbt_bin *b = &h->bin[i];

		if (b->bucket < 0 || b->bucket >= MEDHA_TBT_BUCKETS)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "bin %d: bucket %d not in [0, %d]", i, b->bucket,
			    MEDHA_TBT_BUCKETS - 1);
		if (i > 0 && b->bucket <= h->bin[i - 1].bucket)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "bin %d: bucket %d after bucket %d", i, b->bucket,
			    h->bin[i - 1].bucket);
		if (b->count < 1 || b->count > MEDHA_TOKENS_MAX)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "bin %d: count %lld not in [1, %lld]", i,
			    (long long)b->count, (long long)MEDHA_TOKENS_MAX);
		total += b->count; /* <= MEDHA_TBT_BUCKETS * 1e9: no overflow */
	}
	if (total > (max_gaps > 0 ? max_gaps : 0))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%lld gaps, more than %lld", (long long)total,
		    (long long)(max_gaps > 0 ? max_gaps : 0));
	return 0;
}

void
medha_tbt_move(struct medha_tbt *dst, struct medha_tbt *src)
{
	if (dst == src)
		return;
	medha_tbt_free(dst);
	*dst = *src;
	memset(src, 0, sizeof(*src));
}

void
medha_tbt_free(struct medha_tbt *h)
{
	free(h->bin);
	memset(h, 0, sizeof(*h));
}
