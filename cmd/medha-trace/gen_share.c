/*
 * gen_share.c: "medha-trace gen" workloads whose prompts share tokens,
 * for prefix caching: system prompts shared by a fraction of requests,
 * multi-turn conversations (each turn's prompt is the conversation so
 * far: its system prompt, every earlier message and reply, the new
 * message), and questions about one long document. The shared tokens
 * are named segments ("prefix", medha-trace(5)): "sysK" a system
 * prompt, "cI.uJ" and "cI.aJ" conversation I's J-th message and reply,
 * "doc" the document; what a prompt has beyond them is its own. These
 * draws come from a stream of their own, so the base stream (its times
 * and lengths) is the one gen writes without these flags.
 */
#include "gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
share_active(const struct gen_share *sh)
{
	return sh->nsys > 0 || sh->turns > 1 || sh->doc_tokens > 0;
}

struct vec {
	struct medha_reqspec *v;
	size_t n, cap;
};

/* A zeroed request at the end of x, or NULL (out of memory). */
static struct medha_reqspec *
vec_push(struct vec *x)
{
	if (x->n == x->cap) {
		size_t ncap = x->cap ? 2 * x->cap : 1024;
		void *m = medha_reallocarray(x->v, ncap, sizeof(*x->v));
		if (m == NULL)
			return NULL;
		x->v = m;
		x->cap = ncap;
	}
	memset(&x->v[x->n], 0, sizeof(x->v[0]));
	return &x->v[x->n++];
}

/* A log-normal draw of the given median and 90th percentile. */
static double
lognorm(uint64_t s[4], double median, double p90)
{
	double u1 = rng_uniform(s), u2 = rng_uniform(s);

	return median *
	    exp(log(p90 / median) / Z90 * sqrt(-2 * log(u1)) *
	        cos(2 * M_PI * u2));
}

/* rs's prefix: a copy of seg[0..n). 0 or MEDHA_ENOMEM. */
static int
set_prefix(struct medha_reqspec *rs, const struct medha_seg *seg, int n)
{
	if (n == 0)
		return 0;
	if ((rs->prefix = medha_reallocarray(NULL, n, sizeof(*seg))) == NULL)
		return MEDHA_ENOMEM;
	memcpy(rs->prefix, seg, n * sizeof(*seg));
	rs->n_prefix = n;
	return 0;
}

/* "cI.uJ" or "cI.aJ" (kind): I < 1e9 (-n) and J < MEDHA_SEG_MAX fit */
static void
seg_set(struct medha_seg *g, int64_t tokens, char kind, long long ci,
    long long k)
{
	char buf[64];

	snprintf(buf, sizeof(buf), "c%lld.%c%lld", ci, kind, k);
	memcpy(g->name, buf, sizeof(g->name) - 1);
	g->name[sizeof(g->name) - 1] = '\0';
	g->tokens = tokens;
}

/* A short message's and reply's lengths, as gen's short requests. */
static void
short_pair(struct gen *g, struct gen_share *sh, int64_t *u, int64_t *o)
{
	*o = clamp(lognorm(sh->s, SHORT_OUTPUT_MEDIAN, SHORT_OUTPUT_P90), 1,
	    g->short_max / 2);
	*u = clamp(lognorm(sh->s, SHORT_PROMPT_MEDIAN, SHORT_PROMPT_P90), 1,
	    g->short_max - *o);
}

/* --doc-tokens: the questions about the document, at uniform times in
 * [0, -t). */
static int
gen_doc(struct gen *g, struct gen_share *sh, struct vec *out)
{
	struct medha_seg doc = {"doc", sh->doc_tokens};

	for (int64_t i = 0; i < sh->questions; i++) {
		struct medha_reqspec *rs = vec_push(out);
		int64_t u, o;
		if (rs == NULL)
			return MEDHA_ENOMEM;
		rs->arrival = g->duration * rng_uniform(sh->s);
		short_pair(g, sh, &u, &o);
		rs->prompt_tokens = sh->doc_tokens + u;
		rs->max_tokens = o;
		if (set_prefix(rs, &doc, 1) != 0)
			return MEDHA_ENOMEM;
		set_slos(g, rs);
	}
	return 0;
}

/*
 * Conversation ci from the base stream's request first: its first turn
 * is first (after a system prompt, maybe), each later one arrives an
 * exponential think time after the one before, with a new message and
 * reply of a short request's lengths, until --turns or until the next
 * turn would pass --context-max.
 */
static int
gen_conv(struct gen *g, struct gen_share *sh, const struct medha_reqspec *first,
    long long ci, struct vec *out)
{
	static struct medha_seg seg[MEDHA_SEG_MAX];
	int64_t ctx = 0, u = first->prompt_tokens, o = first->max_tokens;
	double at = first->arrival;
	int n = 0;

	if (sh->nsys > 0 && rng_uniform(sh->s) < sh->sys_frac) {
		snprintf(seg[n].name, sizeof(seg[n].name), "sys%llu",
		    (unsigned long long)(rng_next(sh->s) % (uint64_t)sh->nsys));
		seg[n++].tokens = sh->sys_tokens;
		ctx = sh->sys_tokens;
	}
	for (int64_t k = 1; k <= sh->turns; k++) {
		struct medha_reqspec *rs;
		if (k > 1) {
			at += -log(rng_uniform(sh->s)) * sh->think;
			short_pair(g, sh, &u, &o);
			if (ctx + u + o > sh->ctx_max ||
			    n + 2 > MEDHA_SEG_MAX || at > MEDHA_TIME_MAX)
				break;
		}
		if ((rs = vec_push(out)) == NULL)
			return MEDHA_ENOMEM;
		rs->arrival = at;
		rs->prompt_tokens = ctx + u;
		rs->max_tokens = o;
		/* a message is named only if a later turn repeats it */
		if (sh->turns > 1)
			seg_set(&seg[n++], u, 'u', ci, (long long)k);
		if (set_prefix(rs, seg, n) != 0)
			return MEDHA_ENOMEM;
		set_slos(g, rs);
		seg_set(&seg[n++], o, 'a', ci, (long long)k);
		ctx += u + o;
	}
	return 0;
}

int
gen_shared(struct gen *g, struct gen_share *sh, int64_t max_tokens,
    struct medha_writer *w)
{
	struct vec out = {0};
	struct medha_reqspec rs = {0};
	double t = 0;
	int rc = 0;

	if (sh->doc_tokens > 0)
		rc = gen_doc(g, sh, &out);
	else
		for (int64_t i = 0; g->count == 0 || i < g->count; i++) {
			if (!gen_next(g, &t, &rs))
				break;
			if ((rc = gen_conv(g, sh, &rs, (long long)i, &out)) !=
			    0)
				break;
		}
	if (rc != 0)
		medha_log(MEDHA_LOG_ERROR, "out of memory");
	qsort(out.v, out.n, sizeof(*out.v), by_arrival);
	for (size_t i = 0; i < out.n && rc == 0; i++) {
		snprintf(out.v[i].id, sizeof(out.v[i].id), "%zu", i);
		if (max_tokens > 0 && out.v[i].max_tokens > max_tokens)
			out.v[i].max_tokens = max_tokens;
		if ((rc = cap_apply(&g->cap, &out.v[i])) != 0)
			break;
		if ((rc = medha_reqspec_write(w, &out.v[i])) != 0)
			medha_log(MEDHA_LOG_ERROR,
			    "request %zu: not writable (arrival %.9g s)", i,
			    out.v[i].arrival);
	}
	for (size_t i = 0; i < out.n; i++)
		medha_reqspec_clear(&out.v[i]);
	free(out.v);
	return rc != 0;
}
