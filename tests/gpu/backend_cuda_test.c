/*
 * backend_cuda_test.c: the cuda backend (libcore/engine/backend_cuda.c)
 * against the cpu backend and a float64 forward pass written here, on a
 * random GQA model in memory (bf16 weights, head_dim 64: tests/
 * tinymodel.h) and on SmolLM2-135M (Q4_1, from the cache; skipped
 * without it). Each case prints "ok" or "FAIL" with what it measured:
 *
 *  - logits' relative L2 to float64, beside the cpu fast mode's (the
 *    cuda backend's median no worse than twice the cpu's or 3e-2), and
 *    greedy tokens equal to the cpu backend's but where the float64
 *    logits of the two candidates are within 0.5 (each such place
 *    printed as "near-tie");
 *  - a 4K prompt prefilled in chunks of 32, 256 and 4096: last logits
 *    within 1e-2 of one another (bf16 KV);
 *  - layers [0, 1) then [1, n) with host hidden states, and two SPP
 *    stage backends, against one whole call: the same bits;
 *  - TP 2 and KVP 2 in one process (two backends on threads, the
 *    collectives in host memory here) against one backend;
 *  - a mixed batch (a prefill chunk, a decode, a chunk after a prefix)
 *    against each sequence alone: the same bits (batch invariance);
 *  - greedy and seeded samplers: the argmax, and the cpu sampler's draw.
 *
 * MEDHA_CUDA_TEST_CASES (a list of numerics, chunks, split, tp, kvp,
 * mixed, forks) runs only those (tests/sh/cuda-mock.sh's runs with a
 * stand-in told to refuse or fail). MEDHA_CUDA_TEST_FAMILIES (GGUF
 * paths, blank-separated) runs the other families' models instead
 * (families(): against the cpu backend's reference mode). Exits 77 with "skip: no CUDA device
 * (...)" where there is none, 1 on any FAIL.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "engine/backend.h"
#include "engine/backend_cpu.h"
#include "engine/backend_cuda.h"
#include "model/gguf.h"
#include "model/sample.h"
#include "tinymodel.h"

static int fails;

static void
report(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s ", ok ? "ok  " : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	fails += !ok;
}

static double
rel_l2(const float *a, const float *b, size_t n)
{
	double e = 0, r = 0;

	for (size_t i = 0; i < n; i++) {
		e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		r += (double)b[i] * b[i];
	}
	return r > 0 ? sqrt(e / r) : sqrt(e);
}

static double
rel_l2_64(const float *a, const double *b, size_t n)
{
	double e = 0, r = 0;

	for (size_t i = 0; i < n; i++) {
		e += (a[i] - b[i]) * (a[i] - b[i]);
		r += b[i] * b[i];
	}
	return r > 0 ? sqrt(e / r) : sqrt(e);
}

static int
argmax(const float *x, int n)
{
	int b = 0;

	for (int i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return b;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double
median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return n > 0 ? v[n / 2] : 0;
}

/* ---- float64 forward pass (one sequence, no cache) ---- */

/* A matrix dequantized to doubles (rows ne[1] of ne[0]). */
static double *
deq(const struct medha_tensor *t)
{
	int64_t R = t->ne[1], C = t->ne[0];
	size_t rb = medha_ggml_row_bytes(t->type, C);
	double *d = malloc(sizeof(double) * (size_t)(R * C));
	float *row = malloc(sizeof(float) * (size_t)C);

	for (int64_t r = 0; r < R; r++) {
		medha_dequant_row(t->type, (const char *)t->data + rb * (size_t)r,
		    row, C);
		for (int64_t c = 0; c < C; c++)
			d[r * C + c] = row[c];
	}
	free(row);
	return d;
}

/* y (n, R) = x (n, C) W^T: each output a sum over c in order, four rows
   of W at once (their sums independent, so they overlap) */
static void
mm64(const double *W, int R, int C, const double *x, int n, double *y)
{
	for (int t = 0; t < n; t++) {
		const double *xt = x + (size_t)t * C;
		int r = 0;
		for (; r + 4 <= R; r += 4) {
			const double *w0 = W + (size_t)r * C, *w1 = w0 + C;
			const double *w2 = w1 + C, *w3 = w2 + C;
			double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
			for (int c = 0; c < C; c++) {
				s0 += xt[c] * w0[c];
				s1 += xt[c] * w1[c];
				s2 += xt[c] * w2[c];
				s3 += xt[c] * w3[c];
			}
			y[(size_t)t * R + r] = s0;
			y[(size_t)t * R + r + 1] = s1;
			y[(size_t)t * R + r + 2] = s2;
			y[(size_t)t * R + r + 3] = s3;
		}
		for (; r < R; r++) {
			double s = 0;
			for (int c = 0; c < C; c++)
				s += xt[c] * W[(size_t)r * C + c];
			y[(size_t)t * R + r] = s;
		}
	}
}

static void
norm64(double *y, const double *x, const float *w, int n, int d, double eps)
{
	for (int t = 0; t < n; t++) {
		double s = 0;
		for (int i = 0; i < d; i++)
			s += x[(size_t)t * d + i] * x[(size_t)t * d + i];
		s = 1 / sqrt(s / d + eps);
		for (int i = 0; i < d; i++)
			y[(size_t)t * d + i] = x[(size_t)t * d + i] * s * w[i];
	}
}

static void
rope64(double *v, int n, int stride, int nh, int hd, int nrot, double base,
    const float *freqs)
{
	for (int t = 0; t < n; t++)
		for (int h = 0; h < nh; h++)
			for (int i = 0; i < nrot / 2; i++) {
				double *p = v + (size_t)t * stride + h * hd + 2 * i;
				double th = t * pow(base, -2.0 * i / nrot);
				double x0 = p[0], x1 = p[1];
				if (freqs != NULL)
					th /= freqs[i];
				p[0] = x0 * cos(th) - x1 * sin(th);
				p[1] = x0 * sin(th) + x1 * cos(th);
			}
}

/* Attention and the rest of one layer, in place on x (n, d). */
static void
layer64(const struct medha_model *m, int l, double *x, int n)
{
	const struct medha_model_config *c = &m->c;
	const struct medha_layer *L = &m->layer[l];
	const int d = c->dim, hd = c->head_dim, nh = c->n_heads;
	const int nkv = c->n_kv_heads, qd = nh * hd, kvd = nkv * hd;
	const int F = c->ffn_dim;
	double *xn = malloc(sizeof(double) * (size_t)n * d);
	double *q = malloc(sizeof(double) * (size_t)n * qd);
	double *k = malloc(sizeof(double) * (size_t)n * kvd);
	double *v = malloc(sizeof(double) * (size_t)n * kvd);
	double *a = malloc(sizeof(double) * (size_t)n * qd);
	double *g = malloc(sizeof(double) * (size_t)n * F);
	double *u = malloc(sizeof(double) * (size_t)n * F);
	double *o = malloc(sizeof(double) * (size_t)n * d);
	double *p = malloc(sizeof(double) * (size_t)n);
	double *W;

	norm64(xn, x, L->attn_norm, n, d, c->norm_eps);
	mm64(W = deq(L->wq), qd, d, xn, n, q), free(W);
	mm64(W = deq(L->wk), kvd, d, xn, n, k), free(W);
	mm64(W = deq(L->wv), kvd, d, xn, n, v), free(W);
	rope64(q, n, qd, nh, hd, c->n_rot, c->rope_theta, m->rope_freqs);
	rope64(k, n, kvd, nkv, hd, c->n_rot, c->rope_theta, m->rope_freqs);
	for (int t = 0; t < n; t++)
		for (int h = 0; h < nh; h++) {
			const int kh = h / (nh / nkv);
			double mx = -INFINITY, z = 0;
			for (int s = 0; s <= t; s++) {
				double sc = 0;
				for (int i = 0; i < hd; i++)
					sc += q[(size_t)t * qd + h * hd + i] *
					    k[(size_t)s * kvd + kh * hd + i];
				p[s] = sc / sqrt((double)hd);
				mx = fmax(mx, p[s]);
			}
			for (int s = 0; s <= t; s++)
				z += p[s] = exp(p[s] - mx);
			for (int i = 0; i < hd; i++) {
				double acc = 0;
				for (int s = 0; s <= t; s++)
					acc += p[s] * v[(size_t)s * kvd + kh * hd + i];
				a[(size_t)t * qd + h * hd + i] = acc / z;
			}
		}
	mm64(W = deq(L->wo), d, qd, a, n, o), free(W);
	for (size_t i = 0; i < (size_t)n * d; i++)
		x[i] += o[i];
	norm64(xn, x, L->ffn_norm, n, d, c->norm_eps);
	mm64(W = deq(L->gate), F, d, xn, n, g), free(W);
	mm64(W = deq(L->up), F, d, xn, n, u), free(W);
	for (size_t i = 0; i < (size_t)n * F; i++)
		g[i] = g[i] / (1 + exp(-g[i])) * u[i];
	mm64(W = deq(L->down), d, F, g, n, o), free(W);
	for (size_t i = 0; i < (size_t)n * d; i++)
		x[i] += o[i];
	free(xn), free(q), free(k), free(v), free(a), free(g), free(u);
	free(o), free(p);
}

/* The float64 logits (vocab) after tok[0..n). */
static void
f64_logits(const struct medha_model *m, const int32_t *tok, int n,
    double *lg)
{
	const struct medha_model_config *c = &m->c;
	const int d = c->dim;
	size_t rb = medha_ggml_row_bytes(m->tok_embd->type, d);
	double *x = malloc(sizeof(double) * (size_t)n * d), *xn, *W;
	float *row = malloc(sizeof(float) * d);

	for (int t = 0; t < n; t++) {
		medha_dequant_row(m->tok_embd->type,
		    (const char *)m->tok_embd->data + rb * (size_t)tok[t], row,
		    d);
		for (int i = 0; i < d; i++)
			x[(size_t)t * d + i] = row[i];
	}
	for (int l = 0; l < c->n_layers; l++)
		layer64(m, l, x, n);
	xn = malloc(sizeof(double) * d);
	norm64(xn, x + (size_t)(n - 1) * d, m->out_norm, 1, d, c->norm_eps);
	mm64(W = deq(m->output), c->vocab, d, xn, 1, lg);
	free(W), free(xn), free(x), free(row);
}

/* ---- driving a backend ---- */

/* tok[0..n) of seq from pos in chunks of ch; the last logits in lg. */
static int
prefill(struct medha_backend *be, int seq, int64_t pos, const int32_t *tok,
    int n, int ch, float *lg)
{
	char why[256];

	for (int i = 0; i < n; i += ch) {
		int c = n - i < ch ? n - i : ch, last = i + c == n;
		struct medha_batch_seq s = {seq, pos + i, c,
		    last ? MEDHA_LOGITS_LAST : MEDHA_LOGITS_NONE};
		struct medha_batch b = {tok + i, c, &s, 1};
		struct medha_fwd f = {.b = &b, .layer_lo = 0,
		    .layer_hi = be->info.shape.n_layers,
		    .logits = last ? lg : NULL};
		if (medha_backend_forward(be, &f, why, sizeof(why)) != 0) {
			report(0, "%s forward at %lld: %s", be->info.name,
			    (long long)(pos + i), why);
			return -1;
		}
	}
	return 0;
}

static struct medha_backend *
cuda_on(const struct medha_model *m, int tp, int rank, int spp, int stage)
{
	struct medha_backend_params p = {.tp = tp, .tp_rank = rank,
	    .spp = spp, .stage = stage, .max_seqs = 8, .kv_blocks = 2048,
	    .coll = MEDHA_COLL_HOST};
	struct medha_backend *be;
	char why[512];

	if (medha_backend_cuda_init(&be, m, &p, why, sizeof(why)) != 0) {
		report(0, "cuda backend: %s", why);
		return NULL;
	}
	return be;
}

static struct medha_backend *
cpu_on(const struct medha_model *m, int ref)
{
	struct medha_backend_cpu_opts o = {.n_threads = 4, .ref = ref,
	    .kv_blocks = 2048, .max_seqs = 8, .kv_type = MEDHA_KV_F32};
	struct medha_backend *be;
	char why[512];

	if (medha_backend_cpu_init(&be, m, &o, why, sizeof(why)) != 0) {
		report(0, "cpu backend: %s", why);
		return NULL;
	}
	return be;
}

/*
 * Numerics (case 1): prompt then steps greedy steps on cuda, the cpu
 * backend fed the same tokens; float64 at each step where f64 (or only
 * at the prompt's end). 
 */
static void
numerics(const char *name, const struct medha_model *m, const int32_t *prompt,
    int plen, int steps, int f64_every)
{
	const int V = m->c.vocab;
	struct medha_backend *cu = cuda_on(m, 1, 0, 1, 0), *cp = cpu_on(m, 0);
	float *lc = malloc(sizeof(float) * V), *lp = malloc(sizeof(float) * V);
	double *l64 = malloc(sizeof(double) * V), ec[256], ep[256];
	int32_t *tok = malloc(sizeof(int32_t) * (size_t)(plen + steps + 1));
	int sc, sp, n64 = 0, diff = 0, ties = 0;
	double worst = 0;

	if (cu == NULL || cp == NULL)
		goto out;
	memcpy(tok, prompt, sizeof(int32_t) * (size_t)plen);
	medha_backend_seq_alloc(cu, &sc);
	medha_backend_seq_alloc(cp, &sp);
	if (prefill(cu, sc, 0, tok, plen, plen, lc) != 0 ||
	    prefill(cp, sp, 0, tok, plen, plen, lp) != 0)
		goto out;
	for (int i = 0; i <= steps && i < 256; i++) {
		int n = plen + i, a = argmax(lc, V), b = argmax(lp, V);
		worst = fmax(worst, rel_l2(lc, lp, V));
		if (i == 0 || f64_every) {
			f64_logits(m, tok, n, l64);
			ec[n64] = rel_l2_64(lc, l64, V);
			ep[n64++] = rel_l2_64(lp, l64, V);
		}
		if (a != b) {
			int near;
			if (!(i == 0 || f64_every))
				f64_logits(m, tok, n, l64);
			near = fabs(l64[a] - l64[b]) < 0.5;
			printf("     %s step %d: cuda %d, cpu %d, float64 "
			       "%.4f vs %.4f: %s\n",
			    name, i, a, b, l64[a], l64[b],
			    near ? "near-tie" : "NOT a near-tie");
			ties += near;
			diff += !near;
		}
		if (i == steps)
			break;
		tok[n] = a; /* both go on with the cuda backend's token */
		if (prefill(cu, sc, n, tok + n, 1, 1, lc) != 0 ||
		    prefill(cp, sp, n, tok + n, 1, 1, lp) != 0)
			goto out;
	}
	{
		double mc = median(ec, n64), mp = median(ep, n64);
		report(mc <= fmax(2 * mp, 3e-2),
		    "%s: logits rel L2 to float64, median of %d: cuda %.3e, "
		    "cpu fast %.3e (cuda to cpu, worst %.3e)",
		    name, n64, mc, mp, worst);
		report(diff == 0,
		    "%s: greedy %d steps: %d differ from the cpu backend "
		    "(%d float64 near-ties)",
		    name, steps, diff + ties, ties);
	}
out:
	medha_backend_close(cu);
	medha_backend_close(cp);
	free(lc), free(lp), free(l64), free(tok);
}

/* MEDHA_CUDA_TEST_QUICK=1 (tests/sh/cuda-mock.sh, on host stand-ins for
   the GPU): a 1K prompt for the chunks, and no SmolLM2 */
static int quick;

/* 1 if case c is to run (MEDHA_CUDA_TEST_CASES names it, or is unset) */
static int
want(const char *c)
{
	const char *e = getenv("MEDHA_CUDA_TEST_CASES"), *p;
	size_t n = strlen(c);

	if (e == NULL || *e == '\0')
		return 1;
	for (p = e; (p = strstr(p, c)) != NULL; p += n)
		if ((p == e || p[-1] == ' ' || p[-1] == ',') &&
		    (p[n] == '\0' || p[n] == ' ' || p[n] == ','))
			return 1;
	return 0;
}

/* Case 2: a 4K prompt in chunks of 32, 256, 4096. */
static void
chunks(const char *name, const struct medha_model *m, const int32_t *tok)
{
	const int n = quick ? 1024 : 4096, ch[3] = {32, 256, n};
	const int V = m->c.vocab;
	struct medha_backend *cu = cuda_on(m, 1, 0, 1, 0);
	float *lg = malloc(sizeof(float) * 3 * V);
	double e = 0;
	int seq;

	if (cu == NULL)
		goto out;
	for (int i = 0; i < 3; i++) {
		medha_backend_seq_alloc(cu, &seq);
		if (prefill(cu, seq, 0, tok, n, ch[i], lg + (size_t)i * V) != 0)
			goto out;
		medha_backend_seq_free(cu, seq);
	}
	e = fmax(rel_l2(lg, lg + 2 * V, V), rel_l2(lg + V, lg + 2 * V, V));
	report(e < 1e-2,
	    "%s: %d tokens in chunks of 32 / 256 against %d: rel L2 %.3e",
	    name, n, n, e);
out:
	medha_backend_close(cu);
	free(lg);
}

/* Case 3: layer ranges, on one backend and on two SPP stages. */
static void
split(const char *name, const struct medha_model *m, const int32_t *tok,
    int n)
{
	const int V = m->c.vocab, d = m->c.dim, nl = m->c.n_layers;
	struct medha_backend *cu = cuda_on(m, 1, 0, 1, 0);
	struct medha_backend *s0 = cuda_on(m, 1, 0, 2, 0);
	struct medha_backend *s1 = cuda_on(m, 1, 0, 2, 1);
	float *whole = malloc(sizeof(float) * V), *part = malloc(sizeof(float) * V);
	float *spp = malloc(sizeof(float) * V);
	float *h = malloc(sizeof(float) * (size_t)n * d);
	char why[256];
	int a, b, q0, q1;

	if (cu == NULL || s0 == NULL || s1 == NULL)
		goto out;
	medha_backend_seq_alloc(cu, &a);
	medha_backend_seq_alloc(cu, &b);
	medha_backend_seq_alloc(s0, &q0);
	medha_backend_seq_alloc(s1, &q1);
	if (prefill(cu, a, 0, tok, n, n, whole) != 0)
		goto out;
	{
		struct medha_batch_seq s = {b, 0, n, MEDHA_LOGITS_LAST};
		struct medha_batch bb = {tok, n, &s, 1};
		struct medha_fwd f0 = {.b = &bb, .layer_lo = 0, .layer_hi = 1,
		    .h_out = h};
		struct medha_fwd f1 = {.b = &bb, .layer_lo = 1,
		    .layer_hi = nl, .h_in = h, .logits = part};
		if (medha_backend_forward(cu, &f0, why, sizeof(why)) != 0 ||
		    medha_backend_forward(cu, &f1, why, sizeof(why)) != 0) {
			report(0, "%s: split call: %s", name, why);
			goto out;
		}
		/* two stages, each with a cache of its own */
		s.seq = q0;
		f0.layer_hi = s0->info.layer_hi;
		if (medha_backend_forward(s0, &f0, why, sizeof(why)) != 0) {
			report(0, "%s: SPP stage 0: %s", name, why);
			goto out;
		}
		s.seq = q1;
		f1.layer_lo = s1->info.layer_lo;
		f1.logits = spp;
		if (medha_backend_forward(s1, &f1, why, sizeof(why)) != 0) {
			report(0, "%s: SPP stage 1: %s", name, why);
			goto out;
		}
	}
	report(memcmp(whole, part, sizeof(float) * V) == 0 &&
	        memcmp(whole, spp, sizeof(float) * V) == 0,
	    "%s: layers [0, 1) + [1, %d) and two SPP stages against one "
	    "call: rel L2 %.3e, %.3e",
	    name, nl, rel_l2(part, whole, V), rel_l2(spp, whole, V));
out:
	medha_backend_close(cu);
	medha_backend_close(s0);
	medha_backend_close(s1);
	free(whole), free(part), free(spp), free(h);
}

/* ---- TP 2 and KVP 2: two backends on threads, collectives here ---- */

struct peers {
	pthread_barrier_t bar;
	const void *buf[2];
	size_t len[2];
	const struct medha_model *m;
	const int32_t *tok;
	int n;
};

struct peer {
	struct peers *x;
	int rank;
	struct medha_backend *be;
	float *lg; /* (9, vocab): after the prompt, then 8 steps */
	char err[256];
	int kvp;   /* 1: the KVP run */
};

static int
p_all_gather(void *arg, int layer, int kind, const void *mine, size_t len,
    void *all, int mem, char *why, size_t whylen)
{
	struct peer *r = arg;

	(void)layer, (void)kind, (void)mem, (void)why, (void)whylen;
	r->x->buf[r->rank] = mine;
	pthread_barrier_wait(&r->x->bar);
	for (int i = 0; i < 2; i++)
		memcpy((char *)all + i * len, r->x->buf[i], len);
	pthread_barrier_wait(&r->x->bar);
	return 0;
}

static int
p_all_reduce(void *arg, int layer, int kind, float *x, size_t n, int mem,
    char *why, size_t whylen)
{
	struct peer *r = arg;
	float *sum = malloc(n * sizeof(float));

	(void)layer, (void)kind, (void)mem, (void)why, (void)whylen;
	r->x->buf[r->rank] = x;
	pthread_barrier_wait(&r->x->bar);
	for (size_t i = 0; i < n; i++)
		sum[i] = ((const float *)r->x->buf[0])[i] +
		    ((const float *)r->x->buf[1])[i];
	pthread_barrier_wait(&r->x->bar);
	memcpy(x, sum, n * sizeof(float));
	free(sum);
	return 0;
}

static int
p_exchange(void *arg, int layer, int group, const void *buf, size_t len,
    void *rbuf, size_t rlen, int mem, char *why, size_t whylen)
{
	struct peer *r = arg;
	int bad;

	(void)layer, (void)mem;
	r->x->buf[r->rank] = buf;
	r->x->len[r->rank] = len;
	pthread_barrier_wait(&r->x->bar);
	/* read before the second barrier: after it the peer may be at its
	   next exchange, its len already another */
	bad = r->x->len[group] != rlen;
	if (bad)
		snprintf(why, whylen, "exchange: %zu bytes, %zu expected",
		    r->x->len[group], rlen);
	else
		memcpy(rbuf, r->x->buf[group], rlen);
	pthread_barrier_wait(&r->x->bar);
	return bad ? MEDHA_EINVAL : 0;
}

#define PIECE 64

/* One TP rank or KVP group: the prompt in chunks of 30 (KVP: cut at the
   piece boundary, group g holding piece g), then 8 steps. */
static void *
peer_main(void *arg)
{
	struct peer *r = arg;
	const struct medha_model *m = r->x->m;
	const int V = m->c.vocab, nl = m->c.n_layers, plen = r->x->n;
	struct medha_comm cm = {p_all_gather, p_all_reduce, p_exchange, NULL,
	    NULL, r->kvp ? 1 : 2, r->kvp ? 0 : r->rank, r->kvp ? 2 : 1,
	    r->kvp ? r->rank : 0, r};
	int seq, c, k = 0;

	medha_backend_seq_alloc(r->be, &seq);
	for (int i = 0; i < plen + 8; i += c) {
		int piece = i / PIECE, last;
		c = i < plen ? 30 : 1;
		if (i < plen && i + c > plen)
			c = plen - i;
		if (r->kvp && (i + c - 1) / PIECE != piece)
			c = (piece + 1) * PIECE - i;
		last = i + c >= plen;
		struct medha_batch_kv kv = {r->rank * PIECE, r->rank == piece,
		    piece > 0, piece > 0 ? 3 : 0};
		struct medha_batch_seq s = {seq, i, c,
		    last ? MEDHA_LOGITS_LAST : MEDHA_LOGITS_NONE};
		struct medha_batch b = {r->x->tok + i, c, &s, 1};
		struct medha_fwd f = {.b = &b, .layer_lo = 0, .layer_hi = nl,
		    .logits = last ? r->lg + (size_t)k * V : NULL,
		    .comm = &cm, .kv = r->kvp ? &kv : NULL};
		if (r->kvp && r->rank > piece) {
			k += last;
			continue; /* its piece not entered yet */
		}
		if (medha_backend_forward(r->be, &f, r->err,
		        sizeof(r->err)) != 0) {
			/* said at once: the other may wait for it for ever */
			fprintf(stderr, "peer %d at %d: %s\n", r->rank, i,
			    r->err);
			break;
		}
		k += last;
	}
	return NULL;
}

/* Case 4: TP 2 (kvp 0) or KVP 2 (kvp 1) against one backend. */
static void
pair(const char *name, const struct medha_model *m, const int32_t *tok,
    int plen, int kvp)
{
	const int V = m->c.vocab;
	struct peers x = {.m = m, .tok = tok, .n = plen};
	struct peer r[2];
	pthread_t th[2];
	float *one = calloc((size_t)9 * V, sizeof(float));
	float *two[2] = {calloc((size_t)9 * V, sizeof(float)),
	    calloc((size_t)9 * V, sizeof(float))};
	struct medha_backend *cu = cuda_on(m, 1, 0, 1, 0);
	double e = 0;
	int seq, ok = 1;

	if (cu == NULL)
		goto out;
	medha_backend_seq_alloc(cu, &seq);
	/* the same chunks as the pair, one backend */
	for (int i = 0, c, k = 0; i < plen + 8; i += c) {
		c = i < plen ? 30 : 1;
		if (i < plen && i + c > plen)
			c = plen - i;
		if (kvp && (i + c - 1) / PIECE != i / PIECE)
			c = (i / PIECE + 1) * PIECE - i;
		if (i + c >= plen) {
			if (prefill(cu, seq, i, tok + i, c, c,
			        one + (size_t)k++ * V) != 0)
				goto out;
		} else if (prefill(cu, seq, i, tok + i, c, c, NULL) != 0)
			goto out;
	}
	pthread_barrier_init(&x.bar, NULL, 2);
	for (int i = 0; i < 2; i++) {
		r[i] = (struct peer){&x, i,
		    kvp ? cuda_on(m, 1, 0, 1, 0) : cuda_on(m, 2, i, 1, 0),
		    two[i], {0}, kvp};
		if (r[i].be == NULL)
			ok = 0;
	}
	if (ok) {
		for (int i = 0; i < 2; i++)
			pthread_create(&th[i], NULL, peer_main, &r[i]);
		for (int i = 0; i < 2; i++)
			pthread_join(th[i], NULL);
	}
	pthread_barrier_destroy(&x.bar);
	for (int i = 0; i < 2; i++) {
		if (r[i].err[0] != '\0') {
			report(0, "%s %s rank %d: %s", name,
			    kvp ? "KVP" : "TP", i, r[i].err);
			ok = 0;
		}
		medha_backend_close(r[i].be);
	}
	if (!ok)
		goto out;
	for (int i = 0; i < 9; i++)
		e = fmax(e, rel_l2(two[0] + (size_t)i * V, one + (size_t)i * V, V));
	report(e < 1e-2 &&
	        memcmp(two[0], two[1], sizeof(float) * 9 * (size_t)V) == 0,
	    "%s: %s 2 against one backend, prompt %d + 8 steps: worst rel "
	    "L2 %.3e; the two hold the same bits",
	    name, kvp ? "KVP" : "TP", plen, e);
out:
	medha_backend_close(cu);
	free(one), free(two[0]), free(two[1]);
}

/* Case 5: a mixed batch against each sequence alone; samplers. */
static void
mixed(const char *name, const struct medha_model *m, const int32_t *tok)
{
	const int V = m->c.vocab, nl = m->c.n_layers;
	struct medha_backend *cu = cuda_on(m, 1, 0, 1, 0);
	float *alone = malloc(sizeof(float) * 3 * V);
	float *batch = malloc(sizeof(float) * 3 * V);
	struct medha_sampler *sp[3] = {NULL, NULL, NULL}, *twin = NULL;
	struct medha_sampler_params hot = {.temp = 0.9f, .top_k = 40,
	    .top_p = 0.95f, .seed = 7};
	int32_t ids[3], t[60];
	char why[256];
	int s[6];
	double e = 0;

	if (cu == NULL)
		goto out;
	for (int i = 0; i < 6; i++)
		medha_backend_seq_alloc(cu, &s[i]);
	/* prefixes: s1 and s4 hold 30, s2 and s5 hold 20 */
	if (prefill(cu, s[1], 0, tok, 30, 30, NULL) != 0 ||
	    prefill(cu, s[4], 0, tok, 30, 30, NULL) != 0 ||
	    prefill(cu, s[2], 0, tok + 100, 20, 20, NULL) != 0 ||
	    prefill(cu, s[5], 0, tok + 100, 20, 20, NULL) != 0)
		goto out;
	/* alone: a prefill of 40, a decode at 30, a chunk of 17 at 20 */
	if (prefill(cu, s[0], 0, tok + 200, 40, 40, alone) != 0 ||
	    prefill(cu, s[1], 30, tok + 30, 1, 1, alone + V) != 0 ||
	    prefill(cu, s[2], 20, tok + 120, 17, 17, alone + 2 * V) != 0)
		goto out;
	memcpy(t, tok + 200, 40 * sizeof(int32_t));
	t[40] = tok[30];
	memcpy(t + 41, tok + 120, 17 * sizeof(int32_t));
	{
		struct medha_batch_seq bs[3] = {{s[3], 0, 40, 0},
		    {s[4], 30, 1, 0}, {s[5], 20, 17, 0}};
		struct medha_batch b = {t, 58, bs, 3};
		struct medha_fwd f = {.b = &b, .layer_lo = 0, .layer_hi = nl,
		    .logits = batch, .samplers = sp, .tokens = ids};
		medha_sampler_init(&sp[0], &medha_sampling_greedy, V);
		medha_sampler_init(&sp[2], &hot, V);
		medha_sampler_init(&twin, &hot, V);
		if (medha_backend_forward(cu, &f, why, sizeof(why)) != 0) {
			report(0, "%s: mixed batch: %s", name, why);
			goto out;
		}
	}
	for (int i = 0; i < 3; i++)
		e = fmax(e, rel_l2(batch + (size_t)i * V, alone + (size_t)i * V,
		                V));
	report(e < 1e-2,
	    "%s: a mixed batch (prefill 40, decode, chunk 17 at 20) against "
	    "each alone: worst rel L2 %.3e (%s)",
	    name, e,
	    memcmp(batch, alone, sizeof(float) * 3 * V) == 0
	        ? "the same bits: batch-invariant"
	        : "NOT batch-invariant");
	{
		/* a timed call says where its time went (medha-prof) */
		struct medha_fwd_times ft;
		struct medha_batch_seq bs = {s[3], 40, 1, MEDHA_LOGITS_LAST};
		struct medha_batch b = {t, 1, &bs, 1};
		struct medha_fwd f = {.b = &b, .layer_lo = 0, .layer_hi = nl,
		    .logits = alone, .times = &ft};
		int rc = medha_backend_forward(cu, &f, why, sizeof(why));
		report(rc == 0 && ft.split && ft.attn > 0 && ft.head > 0 &&
		        ft.merge == 0,
		    "%s: a timed decode: split %d, total %.3g s, attention "
		    "%.3g s, head %.3g s",
		    name, ft.split, ft.total, ft.attn, ft.head);
	}
	report(ids[0] == argmax(batch, V) && ids[1] == -1 &&
	        ids[2] == medha_sample(twin, batch + 2 * V),
	    "%s: samplers: greedy %d (argmax %d), none %d, seeded %d (the "
	    "cpu sampler's draw)",
	    name, ids[0], argmax(batch, V), ids[1], ids[2]);
	{
		/* a seeded sampler with no logits asked for: its row staged
		   on the host by the backend; s[0] holds s[3]'s 40 tokens, so
		   its step equals the timed one's logits (in alone) */
		struct medha_sampler *hot2 = NULL, *twin2 = NULL;
		struct medha_batch_seq bs = {s[0], 40, 1, MEDHA_LOGITS_LAST};
		struct medha_batch b = {t, 1, &bs, 1};
		struct medha_fwd f = {.b = &b, .layer_lo = 0, .layer_hi = nl,
		    .samplers = &hot2, .tokens = ids};
		int rc, want;
		medha_sampler_init(&hot2, &hot, V);
		medha_sampler_init(&twin2, &hot, V);
		rc = medha_backend_forward(cu, &f, why, sizeof(why));
		want = medha_sample(twin2, alone);
		report(rc == 0 && ids[0] == want,
		    "%s: a seeded sampler without logits: %d (the cpu "
		    "sampler's draw from the same row: %d)%s%s",
		    name, ids[0], want, rc ? ": " : "", rc ? why : "");
		medha_sampler_free(hot2);
		medha_sampler_free(twin2);
	}
out:
	for (int i = 0; i < 3; i++)
		medha_sampler_free(sp[i]);
	medha_sampler_free(twin);
	medha_backend_close(cu);
	free(alone), free(batch);
}

/*
 * Case 7, prefix caching: a fork shares a sequence's full blocks and
 * copies its partial one on the device; what the fork computes next
 * equals a fresh sequence fed the same tokens in the same chunks (the
 * same K/V bits: the GEMMs are batch-invariant), and a write into a
 * shared block (after a trim into it) copies the block first, leaving
 * the source's KV, and so its next logits, as they were.
 */
static void
forks(const char *name, const struct medha_model *m, const int32_t *tok)
{
	const int V = m->c.vocab;
	struct medha_backend *cu = cuda_on(m, 1, 0, 1, 0);
	float *lg = malloc(sizeof(float) * 2 * V);
	int32_t t2[16];
	int a, b, c, ok = 1;
	int64_t free0 = 0;
	double e1 = 1, e2 = 1, e3 = 1;

	if (cu == NULL)
		goto out;
	free0 = medha_backend_free_blocks(cu);
	for (int i = 0; i < 16; i++)
		t2[i] = tok[300 + i];
	medha_backend_seq_alloc(cu, &a);
	medha_backend_seq_alloc(cu, &b);
	medha_backend_seq_alloc(cu, &c);
	/* a: 100 tokens; b: a's first 70 (4 blocks shared, 1 copied), then
	   30 more; c: the same 70 + 30, computed */
	if (prefill(cu, a, 0, tok, 100, 100, NULL) != 0 ||
	    medha_backend_seq_fork(cu, b, a, 0, 70) != 0 ||
	    prefill(cu, b, 70, tok + 70, 30, 30, lg) != 0 ||
	    prefill(cu, c, 0, tok, 70, 70, NULL) != 0 ||
	    prefill(cu, c, 70, tok + 70, 30, 30, lg + V) != 0)
		goto fail;
	e1 = rel_l2(lg, lg + V, V);
	/* b trimmed into a's block 3, then rewritten there: copied first */
	if (medha_backend_seq_trim(cu, b, 50) != 0 ||
	    prefill(cu, b, 50, t2, 10, 10, lg) != 0)
		goto fail;
	medha_backend_seq_free(cu, c);
	medha_backend_seq_alloc(cu, &c);
	if (prefill(cu, c, 0, tok, 50, 50, NULL) != 0 ||
	    prefill(cu, c, 50, t2, 10, 10, lg + V) != 0)
		goto fail;
	e2 = rel_l2(lg, lg + V, V);
	/* a's next step (a decode: its shape's first, eager) against a
	   fresh twin of a's (the second: captured, replayed) */
	medha_backend_seq_free(cu, c);
	medha_backend_seq_alloc(cu, &c);
	if (prefill(cu, a, 100, tok + 100, 1, 1, lg) != 0 ||
	    prefill(cu, c, 0, tok, 100, 100, NULL) != 0 ||
	    prefill(cu, c, 100, tok + 100, 1, 1, lg + V) != 0)
		goto fail;
	e3 = rel_l2(lg, lg + V, V);
	goto done;
fail:
	ok = 0;
done:
	medha_backend_seq_free(cu, a);
	medha_backend_seq_free(cu, b);
	medha_backend_seq_free(cu, c);
	report(ok && e1 <= 1e-6 && e2 <= 1e-6 && e3 <= 1e-6 &&
	        medha_backend_free_blocks(cu) == free0,
	    "%s: forks: fork + 30 against computed %.1e, a write into a "
	    "shared block %.1e, its source after %.1e; %lld of %lld blocks "
	    "free after",
	    name, e1, e2, e3, (long long)medha_backend_free_blocks(cu),
	    (long long)free0);
out:
	medha_backend_close(cu);
	free(lg);
}

/* ---- the models ---- */

static void
gqa(void)
{
	struct medha_model_config c = {.n_layers = 2, .dim = 256,
	    .n_heads = 8, .n_kv_heads = 2, .head_dim = 64, .n_rot = 64,
	    .ffn_dim = 512, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
	struct tmodel tm;
	int32_t *tok = malloc(sizeof(int32_t) * 4096);
	char why[256];

	tm_fill(&tm, &c, 512, MEDHA_GGML_BF16, MEDHA_GGML_BF16, 0, 26);
	if (medha_model_build(&tm.m, &tm.c, tm_find, &tm, why, sizeof(why)) !=
	    0) {
		report(0, "gqa model: %s", why);
		return;
	}
	rng_seed(11);
	for (int i = 0; i < 4096; i++)
		tok[i] = (int32_t)((frand() + 1) * 256) % 512;
	if (want("numerics"))
		numerics("gqa", tm.m, tok, 48, 24, 1);
	if (want("chunks"))
		chunks("gqa", tm.m, tok);
	if (want("split"))
		split("gqa", tm.m, tok, 37);
	if (want("tp"))
		pair("gqa", tm.m, tok, 100, 0);
	if (want("kvp"))
		pair("gqa", tm.m, tok, 100, 1);
	if (want("mixed"))
		mixed("gqa", tm.m, tok);
	if (want("forks"))
		forks("gqa", tm.m, tok);
	tm_free(&tm);
	free(tok);
}

static void
smollm2(void)
{
	const char *cache = getenv("MEDHA_CACHE");
	char path[1024];
	struct medha_gguf *g;
	struct medha_model *m;
	int32_t *tok = malloc(sizeof(int32_t) * 4096);
	char why[256];

	snprintf(path, sizeof(path), "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf",
	    cache != NULL ? cache : "cache");
	if (quick) {
		printf("skip: smollm2: quick mode (MEDHA_CUDA_TEST_QUICK)\n");
		free(tok);
		return;
	}
	if (access(path, R_OK) != 0) {
		printf("skip: smollm2: no %s (contrib/fetch-refs.sh)\n", path);
		free(tok);
		return;
	}
	if (medha_gguf_open(&g, path, why, sizeof(why)) != 0 ||
	    medha_model_load(&m, g, why, sizeof(why)) != 0) {
		report(0, "smollm2: %s", why);
		free(tok);
		return;
	}
	rng_seed(12);
	for (int i = 0; i < 4096; i++)
		tok[i] = (int32_t)((frand() + 1) * 20000) % m->c.vocab;
	numerics("smollm2", m, tok, 32, 32, 0);
	chunks("smollm2", m, tok);
	split("smollm2", m, tok, 29);
	mixed("smollm2", m, tok);
	forks("smollm2", m, tok);
	medha_model_free(m);
	medha_gguf_close(g);
	free(tok);
}

/*
 * Another family's model (a GGUF file: tests/ref/arch_model.py's random
 * ones, through tests/sh/cuda-mock.sh): the prompt then greedy steps on
 * cuda and on the cpu backend's f32 reference mode fed the same tokens.
 * Its largest |logit difference| and relative L2 to the cpu, and the
 * greedy tokens equal but where the cpu's logits of the two candidates
 * are within twice the largest difference measured (a near-tie, printed
 * as such); then the chunks, layer ranges, TP and KVP cases as for the
 * llama model. One "family" line per model (contrib/gpu-check.sh's
 * table reads it).
 *
 * A mixture of experts (kernels/moe.cu's routed FFN) routes each token
 * to its top-k by the router's logits, and a token whose k-th and
 * (k+1)-th experts are closer than the bf16 products move the router's
 * logits (a few tokens in a hundred: a top-4 of 16's probabilities,
 * llama4's top-1 logits within some 0.03) may take the other expert on
 * either backend: that step's logits then differ by more than rounding
 * (0.5 for a top-1), the steps after it not. For a model with experts
 * the median step's relative L2 is held to the dense families' 5e-2 and
 * at most a quarter of the steps may pass it (with the greedy tokens
 * equal but at near-ties, as for every family); the steps over 5e-2 are
 * counted on the line.
 */
static void
family_numerics(const char *name, const struct medha_model *m,
    const int32_t *prompt, int plen, int steps)
{
	const int V = m->c.vocab;
	struct medha_backend *cu = cuda_on(m, 1, 0, 1, 0), *cp = cpu_on(m, 1);
	float *lc = malloc(sizeof(float) * V), *lp = malloc(sizeof(float) * V);
	int32_t *tok = malloc(sizeof(int32_t) * (size_t)(plen + steps + 1));
	int sc, sp, diff = 0, ties = 0, alike = 0, over = 0;
	double worst = 0, maxd = 0, band, rl[64];
	const int moe = m->c.a.n_expert > 0;

	if (cu == NULL || cp == NULL)
		goto out;
	memcpy(tok, prompt, sizeof(int32_t) * (size_t)plen);
	medha_backend_seq_alloc(cu, &sc);
	medha_backend_seq_alloc(cp, &sp);
	if (prefill(cu, sc, 0, tok, plen, plen, lc) != 0 ||
	    prefill(cp, sp, 0, tok, plen, plen, lp) != 0)
		goto out;
	for (int i = 0; i <= steps; i++) {
		int n = plen + i, a = argmax(lc, V), b = argmax(lp, V);
		rl[i] = rel_l2(lc, lp, V);
		worst = fmax(worst, rl[i]);
		over += rl[i] > 5e-2;
		for (int v = 0; v < V; v++)
			maxd = fmax(maxd, fabs((double)lc[v] - lp[v]));
		alike += a == b;
		if (a != b) {
			band = 2 * maxd;
			int near = fabs((double)lp[a] - lp[b]) <= band;
			printf("     %s step %d: cuda %d, cpu %d, cpu's logits "
			       "%.5f vs %.5f: %s\n",
			    name, i, a, b, lp[a], lp[b],
			    near ? "near-tie" : "NOT a near-tie");
			ties += near;
			diff += !near;
		}
		if (i == steps)
			break;
		tok[n] = b; /* both go on with the cpu backend's token */
		if (prefill(cu, sc, n, tok + n, 1, 1, lc) != 0 ||
		    prefill(cp, sp, n, tok + n, 1, 1, lp) != 0)
			goto out;
	}
	if (moe)
		report(median(rl, steps + 1) < 5e-2 &&
		        4 * over <= steps + 1 && diff == 0,
		    "family %s: max |logit diff| vs cpu %.3e, worst rel L2 "
		    "%.3e, median %.3e (%d steps over 5e-2: experts); greedy "
		    "%d steps after %d: %d of %d equal (%d near-ties)",
		    name, maxd, worst, median(rl, steps + 1), over, steps, plen,
		    alike, steps + 1, ties);
	else
		report(worst < 5e-2 && diff == 0,
		    "family %s: max |logit diff| vs cpu %.3e, worst rel L2 "
		    "%.3e; greedy %d steps after %d: %d of %d equal (%d "
		    "near-ties)",
		    name, maxd, worst, steps, plen, alike, steps + 1, ties);
out:
	medha_backend_close(cu);
	medha_backend_close(cp);
	free(lc), free(lp), free(tok);
}

static void
families(void)
{
	const char *e = getenv("MEDHA_CUDA_TEST_FAMILIES");
	char list[4096], *save = NULL;

	if (e == NULL || *e == '\0')
		return;
	snprintf(list, sizeof(list), "%s", e);
	for (char *path = strtok_r(list, " ", &save); path != NULL;
	     path = strtok_r(NULL, " ", &save)) {
		const char *base = strrchr(path, '/');
		char name[128], why[256];
		struct medha_gguf *g;
		struct medha_model *m;
		int32_t *tok = malloc(sizeof(int32_t) * 4096);

		snprintf(name, sizeof(name), "%s", base ? base + 1 : path);
		if (strchr(name, '.') != NULL)
			*strchr(name, '.') = '\0';
		if (medha_gguf_open(&g, path, why, sizeof(why)) != 0) {
			report(0, "family %s: %s", name, why);
			free(tok);
			continue;
		}
		if (medha_model_load(&m, g, why, sizeof(why)) != 0) {
			report(0, "family %s: %s", name, why);
			medha_gguf_close(g);
			free(tok);
			continue;
		}
		rng_seed(13);
		for (int i = 0; i < 4096; i++)
			tok[i] = (int32_t)((frand() + 1) * 20000) % m->c.vocab;
		if (want("numerics"))
			family_numerics(name, m, tok, 100, 12);
		if (want("chunks"))
			chunks(name, m, tok);
		if (want("split"))
			split(name, m, tok, 37);
		if (want("tp") && m->c.n_kv_heads >= 2)
			pair(name, m, tok, 100, 0);
		if (want("kvp"))
			pair(name, m, tok, 100, 1);
		medha_model_free(m);
		medha_gguf_close(g);
		free(tok);
	}
}

int
main(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	const char *q = getenv("MEDHA_CUDA_TEST_QUICK");

	if (e != cudaSuccess || n < 1) {
		printf("skip: no CUDA device (%s)\n",
		    e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return 77;
	}
	quick = q != NULL && strcmp(q, "1") == 0;
	if (getenv("MEDHA_CUDA_TEST_FAMILIES") == NULL) {
		gqa();
		smollm2();
	}
	families();
	printf("%s: %d failed\n", fails ? "FAIL" : "ok", fails);
	return fails ? 1 : 0;
}
