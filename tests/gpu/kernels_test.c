/*
 * kernels_test.c: every kernel of kernels/kernels.h against its cpu twin
 * (libcore/cpu: rmsnorm, rope, swiglu, the KVP merge; model/sample.c:
 * greedy and sampling) or a reference written here (float64 attention,
 * the cache's layout, conversions, the generator of random weights), on
 * fresh random inputs of several sizes, outputs poisoned (NaN bits)
 * before each run so that an element left unwritten fails the check.
 *
 *	kernels_test              every case (a 100K+ context among them)
 *	kernels_test --quick      small sizes (for compute-sanitizer)
 *	kernels_test --self-check the references alone, on the CPU: the
 *	                          float64 attention against libcore's
 *	                          medha_cpu_attn and medha_attn_merge, on the
 *	                          same random paged inputs (make test runs
 *	                          this through tests/sh/kernels-ref.sh)
 *	kernels_test --moe-bench  the routed FFN's kernels timed at a
 *	                          large MoE's shape (contrib/gpu-check.sh's
 *	                          moe step): numbers, no checks
 *
 * One line per case: "ok" or "FAIL", the name, the measured error and
 * the tolerance (relative L2 under 1e-2 for bf16 paths, 1e-4 for f32
 * ones; exact bits where the kernel and its twin round the same way).
 * Without a CUDA device it runs the self-check, then prints "skip: no
 * CUDA device (...)" and exits 77 (1 if the self-check failed); with
 * one, it exits 1 on any failure.
 */
#include "../../kernels/kernels.h"
#include "cpu/cpu.h"
#include "cpu/kvcache.h"
#include "model/model.h"
#include "model/sample.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Test hooks of kernels/attn.cu (attn.cuh), not part of kernels.h: the
 * whole of medha_k_attn run on the host, in host memory, as its kernels
 * cut the work for a GPU of sms multiprocessors.
 */
size_t medha_k_attn_emulate_workspace(const struct medha_k_attn *a, int sms);
int medha_k_attn_emulate(const struct medha_k_attn *a, int sms,
    int simple_only);

static int quick; /* --quick: small sizes */
static int fails;

/* ---- checks ---- */

#define CK(call)                                                           \
	do {                                                               \
		cudaError_t e_ = (call);                                   \
		if (e_ != cudaSuccess) {                                   \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__,       \
			    __LINE__, #call, cudaGetErrorString(e_));      \
			exit(1);                                           \
		}                                                          \
	} while (0)

/* a launcher: its return, then the kernel's own faults */
#define CL(call)                                                           \
	do {                                                               \
		int e_ = (call);                                           \
		if (e_ != 0) {                                             \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__,       \
			    __LINE__, #call,                               \
			    cudaGetErrorString((cudaError_t)e_));          \
			exit(1);                                           \
		}                                                          \
		CK(cudaDeviceSynchronize());                               \
	} while (0)

static void
report(const char *name, double err, double tol)
{
	int ok = err <= tol; /* NaN fails */

	printf("%s %s: %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", name, err,
	    tol);
	if (!ok)
		fails++;
	fflush(stdout);
}

/* relative L2 of out against ref; a NaN in out makes it infinite */
static double
rel_l2(const float *out, const double *ref, int64_t n)
{
	double num = 0, den = 0;

	for (int64_t i = 0; i < n; i++) {
		double d = (double)out[i] - ref[i];

		if (isnan(out[i]))
			return INFINITY;
		num += d * d;
		den += ref[i] * ref[i];
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double
rel_l2f(const float *out, const float *ref, int64_t n)
{
	double *r = malloc((size_t)n * sizeof(*r)), e;

	for (int64_t i = 0; i < n; i++)
		r[i] = ref[i];
	e = rel_l2(out, r, n);
	free(r);
	return e;
}

/* ---- numbers ---- */

static uint64_t rs = 88172645463325252ull;

static void
seed(uint64_t s)
{
	rs = s * 0x9e3779b97f4a7c15ull + 1;
}

static uint64_t
rnext(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return rs;
}

/* uniform in [-1, 1) */
static float
frnd(void)
{
	return (float)(rnext() >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static uint16_t
h_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static float
h_bf16f(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static uint16_t
h_f16(float f)
{
	_Float16 h = (_Float16)f;
	uint16_t b;

	memcpy(&b, &h, 2);
	return b;
}

static float
h_f16f(uint16_t b)
{
	_Float16 h;

	memcpy(&h, &b, 2);
	return (float)h;
}

static float
h_kv(int type, uint16_t b)
{
	return type == MEDHA_K_BF16 ? h_bf16f(b) : h_f16f(b);
}

static uint16_t
h_tokv(int type, float f)
{
	return type == MEDHA_K_BF16 ? h_bf16(f) : h_f16(f);
}

/* the cpu twin of medha_k_fill_random (kernels/add.cu) */
static uint16_t
fill_random_ref(uint64_t seed_, uint64_t i, float scale)
{
	uint64_t z = seed_ + (i + 1) * 0x9e3779b97f4a7c15ull;
	float f;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	f = (float)(uint32_t)(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
	return h_bf16(f * scale);
}

/* ---- device buffers ---- */

static void *
dalloc(size_t bytes)
{
	void *p = NULL;

	CK(cudaMalloc(&p, bytes ? bytes : 1));
	return p;
}

static void *
dup_to(const void *h, size_t bytes)
{
	void *d = dalloc(bytes);

	CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	return d;
}

static void
from_dev(void *h, const void *d, size_t bytes)
{
	CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* NaN bits (0xff bytes: an f32, bf16 or f16 NaN; -1 for ints) */
static void
poison(void *d, size_t bytes)
{
	CK(cudaMemset(d, 0xff, bytes));
}

/* ---- a paged batch, on the host (and its device copy) ---- */

struct hseq {
	int n_q;
	int64_t pos, kv_base, kv_len;
	int append;
};

struct batch {
	int n_seqs, n_tokens, max_q;
	int64_t max_kv;
	struct hseq *s;
	int32_t *q_start;
	int32_t *table; /* all tables, one after another */
	int64_t *toff;
	int64_t n_blocks;
	/* the cache */
	int type, n_kv_heads, head_dim, bs;
	uint16_t *k, *v; /* pools (n_blocks, n_kv_heads, bs, head_dim) */
};

static int64_t
kv_off(const struct batch *b, int s, int64_t slot, int h, int c)
{
	int64_t blk = b->table[b->toff[s] + slot / b->bs];

	return ((blk * b->n_kv_heads + h) * b->bs + slot % b->bs) *
	    b->head_dim + c;
}

/*
 * A batch of these sequences over a cache of random keys and values
 * whose blocks are handed out in a shuffled order.
 */
static void
batch_make(struct batch *b, const struct hseq *s, int n, int type, int nkv,
    int hd)
{
	int64_t nb = 0, *perm;

	memset(b, 0, sizeof(*b));
	b->n_seqs = n;
	b->s = malloc((size_t)n * sizeof(*s));
	memcpy(b->s, s, (size_t)n * sizeof(*s));
	b->q_start = malloc((size_t)n * sizeof(int32_t));
	b->toff = malloc((size_t)n * sizeof(int64_t));
	b->type = type;
	b->n_kv_heads = nkv;
	b->head_dim = hd;
	b->bs = 16;
	for (int i = 0; i < n; i++) {
		b->q_start[i] = b->n_tokens;
		b->n_tokens += s[i].n_q;
		if (s[i].n_q > b->max_q)
			b->max_q = s[i].n_q;
		if (s[i].kv_len > b->max_kv)
			b->max_kv = s[i].kv_len;
		b->toff[i] = nb;
		nb += (s[i].kv_len + b->bs - 1) / b->bs;
	}
	b->n_blocks = nb;
	b->table = malloc((size_t)(nb ? nb : 1) * sizeof(int32_t));
	perm = malloc((size_t)(nb ? nb : 1) * sizeof(int64_t));
	for (int64_t i = 0; i < nb; i++)
		perm[i] = i;
	for (int64_t i = nb - 1; i > 0; i--) {
		int64_t j = (int64_t)(rnext() % (uint64_t)(i + 1)), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (int64_t i = 0; i < nb; i++)
		b->table[i] = (int32_t)perm[i];
	free(perm);
	size_t els = (size_t)nb * nkv * b->bs * hd;
	b->k = malloc((els ? els : 1) * 2);
	b->v = malloc((els ? els : 1) * 2);
	for (size_t i = 0; i < els; i++) {
		b->k[i] = h_tokv(type, frnd());
		b->v[i] = h_tokv(type, frnd());
	}
}

static void
batch_free(struct batch *b)
{
	free(b->s);
	free(b->q_start);
	free(b->toff);
	free(b->table);
	free(b->k);
	free(b->v);
}

/* the device side of a batch: its medha_k_seqs, the pools */
struct dbatch {
	struct medha_k_seqs s;
	struct medha_k_kv_layer kv;
	void *mem[10];
};

static void
dbatch_make(struct dbatch *d, const struct batch *b, int with_pools)
{
	int n = b->n_seqs;
	int32_t *nq = malloc((size_t)n * 4), *app = malloc((size_t)n * 4);
	int64_t *pos = malloc((size_t)n * 8), *base = malloc((size_t)n * 8);
	int64_t *len = malloc((size_t)n * 8);
	size_t els = (size_t)b->n_blocks * b->n_kv_heads * b->bs * b->head_dim;

	for (int i = 0; i < n; i++) {
		nq[i] = b->s[i].n_q;
		app[i] = b->s[i].append;
		pos[i] = b->s[i].pos;
		base[i] = b->s[i].kv_base;
		len[i] = b->s[i].kv_len;
	}
	memset(d, 0, sizeof(*d));
	d->s.q_start = d->mem[0] = dup_to(b->q_start, (size_t)n * 4);
	d->s.n_q = d->mem[1] = dup_to(nq, (size_t)n * 4);
	d->s.pos = d->mem[2] = dup_to(pos, (size_t)n * 8);
	d->s.kv_base = d->mem[3] = dup_to(base, (size_t)n * 8);
	d->s.kv_len = d->mem[4] = dup_to(len, (size_t)n * 8);
	d->s.table = d->mem[5] = dup_to(b->table,
	    (size_t)(b->n_blocks ? b->n_blocks : 1) * 4);
	d->s.table_off = d->mem[6] = dup_to(b->toff, (size_t)n * 8);
	d->s.append = d->mem[7] = dup_to(app, (size_t)n * 4);
	d->s.n_seqs = n;
	d->s.n_tokens = b->n_tokens;
	d->s.max_q = b->max_q;
	d->s.max_kv = b->max_kv;
	d->kv.k = d->mem[8] = with_pools ? dup_to(b->k, els * 2) :
	    dalloc(els * 2);
	d->kv.v = d->mem[9] = with_pools ? dup_to(b->v, els * 2) :
	    dalloc(els * 2);
	d->kv.kv_type = b->type;
	d->kv.n_kv_heads = b->n_kv_heads;
	d->kv.head_dim = b->head_dim;
	d->kv.block_size = b->bs;
	free(nq);
	free(app);
	free(pos);
	free(base);
	free(len);
}

static void
dbatch_free(struct dbatch *d)
{
	for (int i = 0; i < 10; i++)
		CK(cudaFree(d->mem[i]));
}

/* ---- the float64 attention reference ---- */

/*
 * out (n_tokens, n_heads, head_dim) and lse (n_tokens, n_heads): row r
 * of sequence s (position p = pos + r) against slots [0, min(kv_len, p
 * + 1 - kv_base)), scores q.k * scale, in float64; a row with no key is
 * 0 and -INFINITY.
 */
/* the other families' attention (kernels.h's window and softcap), for
   ref_attn and the cases that set them: 0, none */
static int attn_window;
static int attn_chunk; /* llama4's chunks (kernels.h's chunk): 0, none */
static double attn_cap;

static void
ref_attn(const struct batch *b, const float *q, int qs, int n_heads,
    double scale, double *out, double *lse)
{
	int hd = b->head_dim, G = n_heads / b->n_kv_heads;
	double *sc = malloc((size_t)(b->max_kv ? b->max_kv : 1) * 8);

	for (int s = 0; s < b->n_seqs; s++) {
		const struct hseq *x = &b->s[s];

		for (int r = 0; r < x->n_q; r++) {
			int64_t t = b->q_start[s] + r;
			int64_t lim = x->pos + r + 1 - x->kv_base, i0 = 0;

			if (lim > x->kv_len)
				lim = x->kv_len;
			/* a window: keys at positions above p - W only */
			if (attn_window > 0 &&
			    x->pos + r + 1 - attn_window - x->kv_base > 0)
				i0 = x->pos + r + 1 - attn_window - x->kv_base;
			/* a chunk: keys of the row's chunk of attn_chunk only */
			if (attn_chunk > 0 && (x->pos + r) / attn_chunk *
			        attn_chunk - x->kv_base > i0)
				i0 = (x->pos + r) / attn_chunk * attn_chunk -
				    x->kv_base;
			for (int h = 0; h < n_heads; h++) {
				const float *qv = q + t * qs + (int64_t)h * hd;
				double *o = out + (t * n_heads + h) * hd, m = -INFINITY,
				       sum = 0;

				for (int c = 0; c < hd; c++)
					o[c] = 0;
				for (int64_t i = i0; i < lim; i++) {
					double d = 0;

					for (int c = 0; c < hd; c++)
						d += (double)qv[c] * h_kv(b->type,
						    b->k[kv_off(b, s, i, h / G, c)]);
					sc[i] = d * scale;
					if (attn_cap > 0)
						sc[i] = attn_cap * tanh(sc[i] / attn_cap);
					if (sc[i] > m)
						m = sc[i];
				}
				for (int64_t i = i0; i < lim; i++) {
					double e = exp(sc[i] - m);
					int64_t off = kv_off(b, s, i, h / G, 0);

					sum += e;
					for (int c = 0; c < hd; c++)
						o[c] += e * h_kv(b->type, b->v[off + c]);
				}
				for (int c = 0; lim > i0 && c < hd; c++)
					o[c] /= sum;
				lse[t * n_heads + h] = lim > i0 ? m + log(sum) :
				    -INFINITY;
			}
		}
	}
	free(sc);
}

/* the largest |a - b| of two lse arrays; -inf must meet -inf */
static double
lse_err(const float *got, const double *ref, int64_t n)
{
	double e = 0;

	for (int64_t i = 0; i < n; i++) {
		if (isnan(got[i]))
			return INFINITY; /* unwritten (poisoned) or wrong */
		if (isinf(ref[i]) || isinf(got[i])) {
			if (got[i] != ref[i])
				return INFINITY;
			continue;
		}
		if (!(fabs(got[i] - ref[i]) <= e))
			e = fabs(got[i] - ref[i]);
	}
	return e;
}

static float *
rand_q(int64_t n, float amp)
{
	float *q = malloc((size_t)n * 4);

	for (int64_t i = 0; i < n; i++)
		q[i] = frnd() * amp;
	return q;
}

/* ---- the self-check: the references against libcore ---- */

/*
 * ref_attn against medha_cpu_attn on one batch: each sequence's keys
 * and values (slots [0, kv_len), which are positions kv_base ...)
 * written into a cpu cache (f32: the values exactly), its queries run
 * through medha_cpu_attn over [kv_base, kv_base + kv_len).
 */
static void
self_attn(const char *name, const struct hseq *hs, int n, int n_heads,
    int nkv, int hd)
{
	struct batch b;
	struct medha_kvcache *kv;
	int64_t blocks = 0;
	char label[160];

	batch_make(&b, hs, n, MEDHA_K_BF16, nkv, hd);
	for (int s = 0; s < n; s++)
		blocks += (hs[s].kv_base + hs[s].kv_len) / 16 + 1;
	struct medha_kv_config c = {.n_layers = 1, .n_kv_heads = nkv,
	    .head_dim = hd, .n_blocks = blocks, .type = MEDHA_KV_F32,
	    .max_seqs = n};
	if (medha_kvcache_init(&kv, &c) != 0) {
		fprintf(stderr, "self-check: medha_kvcache_init failed\n");
		exit(1);
	}
	int qs = n_heads * hd;
	float *q = rand_q((int64_t)b.n_tokens * qs, 2.0f);
	double *ro = malloc((size_t)b.n_tokens * qs * 8);
	double *rl = malloc((size_t)b.n_tokens * n_heads * 8);
	float *co = malloc((size_t)b.n_tokens * qs * 4);
	float *cl = malloc((size_t)b.n_tokens * n_heads * 4);

	ref_attn(&b, q, qs, n_heads, 1.0 / sqrt(hd), ro, rl);
	for (int s = 0; s < n; s++) {
		const struct hseq *x = &hs[s];
		float *kk = malloc((size_t)(x->kv_len + 1) * nkv * hd * 4);
		float *vv = malloc((size_t)(x->kv_len + 1) * nkv * hd * 4);
		int sq;

		for (int64_t i = 0; i < x->kv_len; i++)
			for (int h = 0; h < nkv; h++)
				for (int cc = 0; cc < hd; cc++) {
					int64_t o = kv_off(&b, s, i, h, cc);
					size_t d = ((size_t)i * nkv + h) * hd + cc;

					kk[d] = h_bf16f(b.k[o]);
					vv[d] = h_bf16f(b.v[o]);
				}
		if (medha_kv_seq_alloc(kv, &sq) != 0 ||
		    medha_kv_reserve(kv, sq, x->kv_base + x->kv_len) != 0 ||
		    medha_kv_write(kv, sq, 0, x->kv_base, (int)x->kv_len, kk,
		        vv) != 0 ||
		    medha_kv_set_len(kv, sq, x->kv_base + x->kv_len) != 0 ||
		    medha_cpu_attn(NULL, kv, sq, 0, n_heads,
		        q + (size_t)b.q_start[s] * qs, x->n_q, x->pos,
		        x->kv_base, x->kv_base + x->kv_len,
		        co + (size_t)b.q_start[s] * qs,
		        cl + (size_t)b.q_start[s] * n_heads) != 0) {
			fprintf(stderr, "self-check: the cpu cache refused %s\n",
			    name);
			exit(1);
		}
		free(kk);
		free(vv);
	}
	snprintf(label, sizeof(label), "self-check attn %s: f64 ref vs "
	    "medha_cpu_attn, out", name);
	report(label, rel_l2(co, ro, (int64_t)b.n_tokens * qs), 1e-5);
	snprintf(label, sizeof(label), "self-check attn %s: lse max abs", name);
	report(label, lse_err(cl, rl, (int64_t)b.n_tokens * n_heads), 1e-4);
	medha_kvcache_free(kv);
	free(q);
	free(ro);
	free(rl);
	free(co);
	free(cl);
	batch_free(&b);
}

/* the merge: medha_attn_merge of split parts = the whole attention */
static void
self_merge(void)
{
	/* one sequence of 3 rows at 900.., keys in three pieces, one of
	   them after the queries (weighs nothing) */
	struct hseq whole = {3, 900, 0, 1000, 0};
	struct batch b;
	int nh = 4, nkv = 2, hd = 64, qs = nh * hd;
	int64_t cut[4] = {0, 304, 912, 1000};
	double *ro, *rl, *po[3], *pl[3];
	float *fo[3], *fl[3], out[3 * 4 * 64], lse[3 * 4];
	const float *op[3], *lp[3];

	batch_make(&b, &whole, 1, MEDHA_K_BF16, nkv, hd);
	float *q = rand_q(3 * qs, 2.0f);
	ro = malloc(3 * qs * 8);
	rl = malloc(3 * nh * 8);
	ref_attn(&b, q, qs, nh, 1.0 / sqrt(hd), ro, rl);
	for (int j = 0; j < 3; j++) {
		struct batch pb = b;
		struct hseq ps = {3, 900, cut[j], cut[j + 1] - cut[j], 0};
		int64_t *toff = malloc(8);

		/* a piece: the same pools, the table from its first block */
		pb.s = &ps;
		toff[0] = cut[j] / 16;
		pb.toff = toff;
		pb.max_kv = ps.kv_len;
		po[j] = malloc(3 * qs * 8);
		pl[j] = malloc(3 * nh * 8);
		fo[j] = malloc(3 * qs * 4);
		fl[j] = malloc(3 * nh * 4);
		if (cut[j] % 16 != 0) { /* keep pieces block-aligned */
			fprintf(stderr, "self-check: piece not aligned\n");
			exit(1);
		}
		ref_attn(&pb, q, qs, nh, 1.0 / sqrt(hd), po[j], pl[j]);
		for (int i = 0; i < 3 * qs; i++)
			fo[j][i] = (float)po[j][i];
		for (int i = 0; i < 3 * nh; i++)
			fl[j][i] = (float)pl[j][i];
		op[j] = fo[j];
		lp[j] = fl[j];
		free(toff);
	}
	medha_attn_merge(3, op, lp, 3 * nh, hd, out, lse);
	report("self-check merge: f64 pieces merged by medha_attn_merge vs "
	       "f64 whole",
	    rel_l2(out, ro, 3 * qs), 1e-5);
	report("self-check merge: lse", lse_err(lse, rl, 3 * nh), 1e-4);
	for (int j = 0; j < 3; j++) {
		free(po[j]);
		free(pl[j]);
		free(fo[j]);
		free(fl[j]);
	}
	free(q);
	free(ro);
	free(rl);
	batch_free(&b);
}

/* a batch's medha_k_seqs in host memory (for the emulation) */
struct hseqs {
	struct medha_k_seqs s;
	int32_t *nq, *app;
	int64_t *pos, *base, *len;
};

static void
hseqs_make(struct hseqs *h, const struct batch *b)
{
	int n = b->n_seqs;

	h->nq = malloc((size_t)n * 4);
	h->app = malloc((size_t)n * 4);
	h->pos = malloc((size_t)n * 8);
	h->base = malloc((size_t)n * 8);
	h->len = malloc((size_t)n * 8);
	for (int i = 0; i < n; i++) {
		h->nq[i] = b->s[i].n_q;
		h->app[i] = b->s[i].append;
		h->pos[i] = b->s[i].pos;
		h->base[i] = b->s[i].kv_base;
		h->len[i] = b->s[i].kv_len;
	}
	h->s = (struct medha_k_seqs){.q_start = b->q_start, .n_q = h->nq,
	    .pos = h->pos, .kv_base = h->base, .kv_len = h->len,
	    .table = b->table, .table_off = b->toff, .append = h->app,
	    .n_seqs = n, .n_tokens = b->n_tokens, .max_q = b->max_q,
	    .max_kv = b->max_kv};
}

static void
hseqs_free(struct hseqs *h)
{
	free(h->nq);
	free(h->app);
	free(h->pos);
	free(h->base);
	free(h->len);
}

/*
 * medha_k_attn's cutting of the work (plan, items, parts, limits,
 * stores, fold), emulated on the host against the float64 reference:
 * for GPUs of sms multiprocessors, both paths' tile and vector sizes.
 */
static void
self_emulate(const char *name, const struct hseq *hs, int n, int type,
    int n_heads, int nkv, int hd, int sms)
{
	struct batch b;
	struct hseqs h;
	char label[200];
	int qs = n_heads * hd + 8;

	batch_make(&b, hs, n, type, nkv, hd);
	hseqs_make(&h, &b);
	int64_t nt = b.n_tokens, ne = nt * n_heads * hd;
	float *q = rand_q(nt * qs, 2.0f);
	double *ro = malloc((size_t)ne * 8), *rl = malloc((size_t)nt * n_heads * 8);
	float *of = malloc((size_t)ne * 4), *ol = malloc((size_t)nt * n_heads * 4);
	uint16_t *ob = malloc((size_t)ne * 2);
	struct medha_k_kv_layer kv = {b.k, b.v, type, nkv, hd, b.bs};

	ref_attn(&b, q, qs, n_heads, 1.0 / sqrt(hd), ro, rl);
	for (int simple = 0; simple < 2; simple++) {
		struct medha_k_attn a = {.kv = &kv, .s = &h.s, .q = q, .qs = qs,
		    .n_heads = n_heads, .scale = 1.0f / sqrtf(hd), .out = ob,
		    .lse = ol};

		a.work_len = medha_k_attn_emulate_workspace(&a, sms);
		a.work = malloc(a.work_len);
		memset(ob, 0xff, (size_t)ne * 2);
		memset(ol, 0xff, (size_t)nt * n_heads * 4);
		if (medha_k_attn_emulate(&a, sms, simple) != 0) {
			fprintf(stderr, "medha_k_attn_emulate refused %s\n", name);
			exit(1);
		}
		for (int64_t i = 0; i < ne; i++)
			of[i] = h_bf16f(ob[i]);
		snprintf(label, sizeof(label), "self-check emulated attn %s, %d "
		    "SMs%s: bf16 out", name, sms, simple ? " (simple)" : "");
		report(label, rel_l2(of, ro, ne), 1e-2);
		snprintf(label, sizeof(label), "self-check emulated attn %s, %d "
		    "SMs%s: lse max abs", name, sms, simple ? " (simple)" : "");
		report(label, lse_err(ol, rl, nt * n_heads), 1e-4);
		a.out = NULL;
		a.out_f32 = of;
		a.lse = NULL;
		memset(of, 0xff, (size_t)ne * 4);
		medha_k_attn_emulate(&a, sms, simple);
		snprintf(label, sizeof(label), "self-check emulated attn %s, %d "
		    "SMs%s: f32 out", name, sms, simple ? " (simple)" : "");
		report(label, rel_l2(of, ro, ne), 1e-4);
		free(a.work);
	}
	free(q);
	free(ro);
	free(rl);
	free(of);
	free(ol);
	free(ob);
	hseqs_free(&h);
	batch_free(&b);
}

static void
self_check(void)
{
	/* a mixed batch: decode, chunks (one of 1), a KVP piece holding
	   positions 64.. for queries at 200.., and one entirely after its
	   queries (no key: lse -inf) */
	struct hseq a[] = {
	    {1, 37, 0, 38, 1},
	    {20, 100, 0, 120, 1},
	    {1, 0, 0, 1, 1},
	    {3, 200, 64, 139, 0},
	    {2, 50, 64, 100, 0},
	};
	struct hseq big[] = {{2, quick ? 700 : 5000, 0, quick ? 702 : 5002, 1}};
	uint16_t b0 = h_bf16(1.00390625f), b1 = h_bf16(1.01171875f);

	seed(1);
	self_attn("mixed hd64 9/3", a, 5, 9, 3, 64);
	self_attn("mixed hd128 8/2", a, 5, 8, 2, 128);
	self_attn("long hd128 4/1", big, 1, 4, 1, 128);
	self_merge();
	/* the kernels' cutting, emulated: few SMs split short contexts */
	struct hseq chunks[] = {
	    {1, 2999, 0, 3000, 1},
	    {32, 3968, 0, 4000, 1},
	    {70, 700, 0, 770, 1},
	    {3, 5000, 1008, 3000, 0},
	    {2, 5000, 6000, 500, 0},
	    {40, 1500, 1024, 600, 0},
	};
	self_emulate("mixed hd64 9/3 bf16", a, 5, MEDHA_K_BF16, 9, 3, 64, 4);
	self_emulate("mixed+kvp hd128 8/2 f16", chunks, 6, MEDHA_K_F16, 8, 2,
	    128, 3);
	self_emulate("mixed+kvp hd128 4/1 bf16", chunks, 6, MEDHA_K_BF16, 4, 1,
	    128, 132);
	/* head size 256 (Gemma 2/3): the simple kernel's cutting on both
	   paths (the mma path's chunks planned to it) */
	self_emulate("mixed+kvp hd256 4/1 bf16", chunks, 6, MEDHA_K_BF16, 4, 1,
	    256, 3);
	/* many shapes at once: row counts about the 16-row tiles and the
	   paths' edge, short and long contexts (the parts' bound) */
	struct hseq many[12];
	static const int nqs[12] = {1, 2, 5, 16, 17, 33, 1, 100, 3, 1, 48, 8};
	for (int i = 0; i < 12; i++) {
		int64_t kvl = 40 + (int64_t)(rnext() % 2900);

		if (kvl < nqs[i])
			kvl = nqs[i];
		many[i] = (struct hseq){nqs[i], kvl - nqs[i], 0, kvl, 1};
	}
	self_emulate("12 shapes hd64 4/2 bf16", many, 12, MEDHA_K_BF16, 4, 2,
	    64, 2);
	self_emulate("12 shapes hd64 4/2 bf16", many, 12, MEDHA_K_BF16, 4, 2,
	    64, 132);
	/* round to nearest even at the tie, both ways */
	report("self-check bf16 rounding (ties to even)",
	    b0 == 0x3f80 && b1 == 0x3f82 && h_bf16f(h_bf16(-2.5f)) == -2.5f ?
	        0 : 1, 0);
	/* the generator: parts give the whole */
	int bad = 0;
	for (uint64_t i = 0; i < 1000; i++) {
		float f = h_bf16f(fill_random_ref(7, i, 0.5f));

		bad += !(f >= -0.5f && f <= 0.5f);
	}
	report("self-check fill_random_ref range", bad, 0);
}

/* ---- GPU cases ---- */

static void
t_attn_case(const char *name, const struct hseq *hs, int n, int type,
    int n_heads, int nkv, int hd)
{
	struct batch b;
	struct dbatch d;
	char label[200];
	int qs = n_heads * hd + 8; /* a stride wider than the row */

	batch_make(&b, hs, n, type, nkv, hd);
	dbatch_make(&d, &b, 1);
	int64_t nt = b.n_tokens, ne = nt * n_heads * hd;
	float *q = rand_q(nt * qs, 2.0f);
	double *ro = malloc((size_t)ne * 8), *rl = malloc((size_t)nt * n_heads * 8);
	float *got = malloc((size_t)ne * 4), *gl = malloc((size_t)nt * n_heads * 4);
	uint16_t *gb = malloc((size_t)ne * 2);
	float *dq = dup_to(q, (size_t)nt * qs * 4);
	float *dout = dalloc((size_t)ne * 4), *dlse = dalloc((size_t)nt * n_heads * 4);
	uint16_t *dob = dalloc((size_t)ne * 2);

	ref_attn(&b, q, qs, n_heads, 1.0 / sqrt(hd), ro, rl);
	/* both paths: the default (mma for chunks) and the simple one */
	for (int simple = 0; simple < 2; simple++) {
		struct medha_k_attn a = {.kv = &d.kv, .s = &d.s, .q = dq,
		    .qs = qs, .n_heads = n_heads, .scale = 1.0f / sqrtf(hd),
		    .softcap = (float)attn_cap, .window = attn_window,
		    .chunk = attn_chunk};
		void *work;

		if (simple)
			setenv("MEDHA_K_ATTN", "simple", 1);
		else
			unsetenv("MEDHA_K_ATTN");
		/* bf16 out with lse */
		a.out = dob;
		a.lse = dlse;
		a.work_len = medha_k_attn_workspace(&a);
		work = dalloc(a.work_len);
		a.work = work;
		poison(dob, (size_t)ne * 2);
		poison(dlse, (size_t)nt * n_heads * 4);
		CL(medha_k_attn(&a, 0));
		from_dev(gb, dob, (size_t)ne * 2);
		from_dev(gl, dlse, (size_t)nt * n_heads * 4);
		for (int64_t i = 0; i < ne; i++)
			got[i] = h_bf16f(gb[i]);
		snprintf(label, sizeof(label), "attn %s%s: bf16 out", name,
		    simple ? " (simple)" : "");
		report(label, rel_l2(got, ro, ne), 1e-2);
		snprintf(label, sizeof(label), "attn %s%s: lse max abs", name,
		    simple ? " (simple)" : "");
		report(label, lse_err(gl, rl, nt * n_heads), simple ? 1e-4 : 2e-2);
		/* f32 out, no lse */
		a.out = NULL;
		a.out_f32 = dout;
		a.lse = NULL;
		poison(dout, (size_t)ne * 4);
		CL(medha_k_attn(&a, 0));
		from_dev(got, dout, (size_t)ne * 4);
		snprintf(label, sizeof(label), "attn %s%s: f32 out", name,
		    simple ? " (simple)" : "");
		report(label, rel_l2(got, ro, ne), simple ? 1e-4 : 1e-2);
		CK(cudaFree(work));
	}
	unsetenv("MEDHA_K_ATTN");
	CK(cudaFree(dq));
	CK(cudaFree(dout));
	CK(cudaFree(dlse));
	CK(cudaFree(dob));
	dbatch_free(&d);
	batch_free(&b);
	free(q);
	free(ro);
	free(rl);
	free(got);
	free(gl);
	free(gb);
}

static void
t_attn(void)
{
	int64_t L = quick ? 3000 : 100003;
	/* SmolLM2's shape (9 query heads, 3 kv heads, head_dim 64): a mixed
	   batch of decodes, a chunk of 1, chunks of 5 (simple path: 15
	   vectors) and 50 (mma path) */
	struct hseq mixed[] = {
	    {1, 37, 0, 38, 1},
	    {50, 100, 0, 150, 1},
	    {1, 0, 0, 1, 1},
	    {5, 2000, 0, 2005, 1},
	    {1, 700, 0, 701, 1},
	};
	/* decode at a long context and a short one (Llama-3-8B: 32/8) */
	struct hseq dec[] = {{1, L - 1, 0, L, 1}, {1, 4096, 0, 4097, 1}};
	/* chunks against a long context (4 query heads per kv head): 32
	   rows (split and mma), 300 rows with the causal edge inside */
	struct hseq chunk[] = {
	    {32, quick ? 2000 : 20000, 0, quick ? 2032 : 20032, 1},
	    {quick ? 70 : 300, 700, 0, quick ? 770 : 1000, 1},
	};
	/* KVP pieces: keys at 1000.. seen whole by rows at 5000; a piece
	   after its queries (lse -inf, out 0); one cut by the causal edge */
	struct hseq kvp[] = {
	    {3, 5000, 1008, 3000, 0},
	    {2, 5000, 6000, 500, 0},
	    {40, 1500, 1024, 600, 0},
	    {1, 1030, 1024, 600, 0},
	};

	t_attn_case("mixed hd64 9/3 bf16", mixed, 5, MEDHA_K_BF16, 9, 3, 64);
	t_attn_case("mixed hd64 9/3 f16", mixed, 5, MEDHA_K_F16, 9, 3, 64);
	t_attn_case(quick ? "decode 3K+4K hd128 32/8" :
	                    "decode 100K+4K hd128 32/8",
	    dec, 2, MEDHA_K_BF16, 32, 8, 128);
	t_attn_case("chunks 32 vs 20K, 300 hd128 4/1", chunk, 2,
	    MEDHA_K_BF16, 4, 1, 128);
	t_attn_case("kvp pieces hd128 8/2 f16", kvp, 4, MEDHA_K_F16, 8, 2, 128);
	t_attn_case("kvp pieces hd64 8/8 bf16", kvp, 4, MEDHA_K_BF16, 8, 8, 64);
	/* head size 256: Gemma 3 270M's 4/1 and Gemma 2's 8/4 (f16) */
	t_attn_case("mixed hd256 4/1 bf16", mixed, 5, MEDHA_K_BF16, 4, 1, 256);
	t_attn_case("kvp pieces hd256 8/4 f16", kvp, 4, MEDHA_K_F16, 8, 4, 256);
	/* the other families': a window shorter than the contexts (decodes
	   and chunks whose rows' windows start in different tiles and
	   parts, KVP pieces wholly before a window), then a soft-cap, then
	   both (gemma2's) */
	attn_window = 300;
	t_attn_case("mixed hd64 9/3 bf16 window 300", mixed, 5, MEDHA_K_BF16,
	    9, 3, 64);
	t_attn_case("chunks hd128 4/1 window 300", chunk, 2, MEDHA_K_BF16, 4,
	    1, 128);
	t_attn_case("kvp pieces hd128 8/2 f16 window 300", kvp, 4,
	    MEDHA_K_F16, 8, 2, 128);
	attn_window = 0;
	attn_cap = 1.5;
	t_attn_case("mixed hd64 9/3 bf16 softcap 1.5", mixed, 5, MEDHA_K_BF16,
	    9, 3, 64);
	attn_window = 40;
	t_attn_case("chunks hd128 4/1 window 40 softcap 1.5", chunk, 2,
	    MEDHA_K_BF16, 4, 1, 128);
	t_attn_case("chunks hd256 8/4 window 40 softcap 1.5", chunk, 2,
	    MEDHA_K_BF16, 8, 4, 256);
	attn_window = 0;
	attn_cap = 0;
	/* llama4's chunked attention: chunks of 256 and 8192 (rows on both
	   sides of a chunk's edge, KVP pieces wholly before a row's chunk) */
	attn_chunk = 256;
	t_attn_case("mixed hd64 9/3 bf16 chunk 256", mixed, 5, MEDHA_K_BF16,
	    9, 3, 64);
	t_attn_case("kvp pieces hd128 8/2 f16 chunk 256", kvp, 4, MEDHA_K_F16,
	    8, 2, 128);
	attn_chunk = 8192;
	t_attn_case("chunks 32 vs 20K, 300 hd128 4/1 chunk 8192", chunk, 2,
	    MEDHA_K_BF16, 4, 1, 128);
	attn_chunk = 0;

	/* a head_dim with no instance is refused before any launch */
	struct medha_k_kv_layer kv = {NULL, NULL, MEDHA_K_BF16, 1, 96, 16};
	struct medha_k_seqs s = {0};
	float dummy;
	struct medha_k_attn a = {.kv = &kv, .s = &s, .q = &dummy, .qs = 96,
	    .n_heads = 1, .out_f32 = &dummy};
	report("attn head_dim 96 refused (cudaErrorInvalidValue)",
	    medha_k_attn(&a, 0) == cudaErrorInvalidValue ? 0 : 1, 0);
}

static void
t_kv_append(int type, int nkv, int hd)
{
	struct hseq hs[] = {{3, 40, 0, 43, 1}, {1, 7, 0, 8, 1},
	    {5, 100, 0, 105, 0}, {2, 31, 16, 17, 1}};
	struct batch b;
	struct dbatch d;
	int width = nkv * hd, ks = width + 4, vs = width + 12, bad = 0;
	char label[120];

	batch_make(&b, hs, 4, type, nkv, hd);
	dbatch_make(&d, &b, 1); /* the pools start as random data */
	int64_t nt = b.n_tokens;
	float *k = rand_q(nt * ks, 3.0f), *v = rand_q(nt * vs, 3.0f);
	float *dk = dup_to(k, (size_t)nt * ks * 4), *dv = dup_to(v, (size_t)nt * vs * 4);
	size_t els = (size_t)b.n_blocks * nkv * b.bs * hd;
	uint16_t *gk = malloc(els * 2), *gv = malloc(els * 2);

	CL(medha_k_kv_append(&d.kv, &d.s, dk, ks, dv, vs, 0));
	from_dev(gk, d.kv.k, els * 2);
	from_dev(gv, d.kv.v, els * 2);
	/* expected: the pools as they were, the appended rows replaced */
	for (int s = 0; s < 4; s++)
		for (int r = 0; r < hs[s].n_q && hs[s].append; r++) {
			int64_t t = b.q_start[s] + r;
			int64_t slot = hs[s].pos + r - hs[s].kv_base;

			for (int h = 0; h < nkv; h++)
				for (int c = 0; c < hd; c++) {
					int64_t o = kv_off(&b, s, slot, h, c);

					b.k[o] = h_tokv(type, k[t * ks + h * hd + c]);
					b.v[o] = h_tokv(type, v[t * vs + h * hd + c]);
				}
		}
	for (size_t i = 0; i < els; i++)
		bad += gk[i] != b.k[i] || gv[i] != b.v[i];
	snprintf(label, sizeof(label), "kv_append %s %d heads hd%d: elements "
	    "differing", type == MEDHA_K_BF16 ? "bf16" : "f16", nkv, hd);
	report(label, bad, 0);
	CK(cudaFree(dk));
	CK(cudaFree(dv));
	dbatch_free(&d);
	batch_free(&b);
	free(k);
	free(v);
	free(gk);
	free(gv);
}

static void
t_rows(int n, int dim)
{
	char label[120];
	float *x = rand_q((int64_t)n * dim, 4.0f), *w = rand_q(dim, 1.0f);
	float *y = malloc((size_t)n * dim * 4), *ref = malloc((size_t)n * dim * 4);
	uint16_t *yb = malloc((size_t)n * dim * 2);
	float *dx = dup_to(x, (size_t)n * dim * 4), *dw = dup_to(w, (size_t)dim * 4);
	float *dy = dalloc((size_t)n * dim * 4);
	uint16_t *dyb = dalloc((size_t)n * dim * 2);
	int64_t ne = (int64_t)n * dim;

	for (int i = 0; i < n; i++)
		medha_cpu_rmsnorm(ref + (size_t)i * dim, x + (size_t)i * dim, w,
		    dim, 1e-5f);
	poison(dy, ne * 4);
	CL(medha_k_rmsnorm_f32(dy, dx, dw, n, dim, 1e-5f, 0));
	from_dev(y, dy, ne * 4);
	snprintf(label, sizeof(label), "rmsnorm f32 %dx%d", n, dim);
	report(label, rel_l2f(y, ref, ne), 1e-4);
	poison(dyb, ne * 2);
	CL(medha_k_rmsnorm(dyb, dx, dw, n, dim, 1e-5f, 0));
	from_dev(yb, dyb, ne * 2);
	for (int64_t i = 0; i < ne; i++)
		y[i] = h_bf16f(yb[i]);
	snprintf(label, sizeof(label), "rmsnorm bf16 %dx%d", n, dim);
	report(label, rel_l2f(y, ref, ne), 1e-2);

	/* swiglu: g and u as the halves of one (n, 2 dim) product */
	float *gu = rand_q(ne * 2, 4.0f), *dgu = dup_to(gu, ne * 2 * 4);
	for (int i = 0; i < n; i++) {
		memcpy(ref + (size_t)i * dim, gu + (size_t)i * 2 * dim, dim * 4);
		medha_cpu_swiglu(ref + (size_t)i * dim,
		    gu + (size_t)i * 2 * dim + dim, dim);
	}
	poison(dyb, ne * 2);
	CL(medha_k_swiglu(dyb, dgu, 2 * dim, dgu + dim, 2 * dim, n, dim, 0));
	from_dev(yb, dyb, ne * 2);
	for (int64_t i = 0; i < ne; i++)
		y[i] = h_bf16f(yb[i]);
	snprintf(label, sizeof(label), "swiglu bf16 %dx%d", n, dim);
	report(label, rel_l2f(y, ref, ne), 1e-2);

	/* add: exact */
	int bad = 0;
	poison(dy, ne * 4);
	CK(cudaMemcpy(dy, x, ne * 4, cudaMemcpyHostToDevice));
	CL(medha_k_add(dy, dgu, ne, 0));
	from_dev(y, dy, ne * 4);
	for (int64_t i = 0; i < ne; i++)
		bad += y[i] != x[i] + gu[i];
	snprintf(label, sizeof(label), "add %lld: elements differing",
	    (long long)ne);
	report(label, bad, 0);

	/* conversions: exact */
	bad = 0;
	poison(dyb, ne * 2);
	CL(medha_k_f32_to_bf16(dyb, dx, ne, 0));
	from_dev(yb, dyb, ne * 2);
	for (int64_t i = 0; i < ne; i++)
		bad += yb[i] != h_bf16(x[i]);
	poison(dy, ne * 4);
	CL(medha_k_bf16_to_f32(dy, dyb, ne, 0));
	from_dev(y, dy, ne * 4);
	for (int64_t i = 0; i < ne; i++)
		bad += y[i] != h_bf16f(h_bf16(x[i]));
	snprintf(label, sizeof(label), "f32<->bf16 %lld: elements differing",
	    (long long)ne);
	report(label, bad, 0);

	/* rope: rows of n_heads heads, stride wider; positions to 1M */
	int nh = dim / 64 > 0 ? dim / 64 : 1, hd = 64, rs = nh * hd + 16;
	for (int fq = 0; fq < 2; fq++) {
		float *r = rand_q((int64_t)n * rs, 2.0f), *rr = malloc((size_t)n * rs * 4);
		int64_t *pos = malloc((size_t)n * 8);
		float freqs[32], cs[64];

		for (int i = 0; i < 32; i++)
			freqs[i] = 1.0f + (float)i / 8;
		for (int i = 0; i < n; i++)
			pos[i] = i == 0 ? 0 : (int64_t)(rnext() % 1000000);
		memcpy(rr, r, (size_t)n * rs * 4);
		for (int i = 0; i < n; i++) {
			medha_cpu_rope_table(cs, pos[i], hd, 500000.0f,
			    fq ? freqs : NULL);
			medha_cpu_rope(rr + (size_t)i * rs, nh, hd, hd, cs);
		}
		float *dr = dup_to(r, (size_t)n * rs * 4);
		int64_t *dpos = dup_to(pos, (size_t)n * 8);
		float *dfq = dup_to(freqs, sizeof(freqs));
		CL(medha_k_rope(dr, dpos, n, rs, nh, hd, hd, 500000.0f,
		    fq ? dfq : NULL, 0));
		from_dev(r, dr, (size_t)n * rs * 4);
		snprintf(label, sizeof(label), "rope %d rows x %d heads%s, "
		    "positions to 1M", n, nh, fq ? " (freqs)" : "");
		report(label, rel_l2f(r, rr, (int64_t)n * rs), 1e-4);
		CK(cudaFree(dr));
		CK(cudaFree(dpos));
		CK(cudaFree(dfq));
		free(r);
		free(rr);
		free(pos);
	}
	CK(cudaFree(dx));
	CK(cudaFree(dw));
	CK(cudaFree(dy));
	CK(cudaFree(dyb));
	CK(cudaFree(dgu));
	free(x);
	free(w);
	free(y);
	free(ref);
	free(yb);
	free(gu);
}

/*
 * The other families' operators on n rows (kernels.h): RoPE with NEOX
 * halves and the scalings against float64 (positions under 64, where
 * f32's angle is exact to 1e-4) and against the cpu twins
 * (medha_cpu_rope_table_ext + medha_cpu_rope_ext, positions to 1M); the
 * per-head norm, GELU-tanh's gated product and the soft-cap against
 * float64; the bias add and the scale exactly (one f32 operation each).
 */
static double
f64_gelu(double x)
{
	return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* ggml's rope_yarn in float64 on (x0, x1), pair i of n_rot at pos */
static void
f64_rope_pair(double *x0, double *x1, int64_t pos, int i, int n_rot,
    const struct medha_k_rope *r, const float *freqs)
{
	double th = (double)pos * pow(r->base, -2.0 * i / n_rot), ti, ms;

	if (freqs != NULL)
		th /= freqs[i];
	ti = r->freq_scale * th;
	ms = r->mscale;
	if (r->ext_factor != 0) {
		double y = (i - r->corr[0]) / fmax(0.001, r->corr[1] - r->corr[0]);
		double mix = (1 - fmin(1, fmax(0, y))) * r->ext_factor;
		ti = ti * (1 - mix) + th * mix;
		ms *= 1 + 0.1 * log(1.0 / r->freq_scale);
	}
	double a = *x0, b = *x1;
	*x0 = a * cos(ti) * ms - b * sin(ti) * ms;
	*x1 = a * sin(ti) * ms + b * cos(ti) * ms;
}

static void
t_family(int n)
{
	char label[160];
	const int nh = 3, hd = 64, rs = nh * hd + 16, nr = 48;
	int64_t ne = (int64_t)n * rs;
	float freqs[32];
	struct medha_k_rope kinds[3] = {
	    /* qwen2's YaRN (factor 4, the ramp over pairs 3..17), NEOX */
	    {1e6f, 0.25f, 1.0f, 1.0f, {3, 17}, NULL, 1},
	    /* phi3's LongRoPE factors and attention factor, NEOX */
	    {10000.0f, 1.0f, 0.0f, 1.19f, {0, 0}, NULL, 1},
	    /* gemma3's linear scaling (8), with rope_freqs, NORM */
	    {1e6f, 0.125f, 0.0f, 1.0f, {0, 0}, NULL, 0},
	};
	const char *kname[3] = {"neox yarn", "neox longrope", "norm linear"};

	for (int i = 0; i < 32; i++)
		freqs[i] = 1.0f + (float)i / 5;
	for (int k = 0; k < 3; k++)
		for (int big = 0; big < 2; big++) {
			struct medha_k_rope r = kinds[k];
			const float *hf = k > 0 ? freqs : NULL;
			float *x = rand_q(ne, 2.0f), *got = malloc((size_t)ne * 4);
			float *twin = malloc((size_t)ne * 4), cs[64];
			double *ref = malloc((size_t)ne * 8);
			int64_t *pos = malloc((size_t)n * 8);
			float *dfq = dup_to(freqs, sizeof(freqs));

			for (int t = 0; t < n; t++)
				pos[t] = big ? (int64_t)(rnext() % 1000000) :
				               (int64_t)(rnext() % 64);
			for (int64_t i = 0; i < ne; i++)
				ref[i] = x[i];
			memcpy(twin, x, (size_t)ne * 4);
			for (int t = 0; t < n; t++) {
				struct medha_rope mr = {r.base, r.freq_scale,
				    r.ext_factor, r.mscale, {r.corr[0], r.corr[1]},
				    hf};
				medha_cpu_rope_table_ext(cs, pos[t], nr, &mr);
				medha_cpu_rope_ext(twin + (size_t)t * rs, nh, hd,
				    nr, cs, r.neox, 0);
				for (int h = 0; h < nh; h++)
					for (int i = 0; i < nr / 2; i++) {
						double *v = ref + (size_t)t * rs + h * hd;
						int a = r.neox ? i : 2 * i;
						int b = r.neox ? i + nr / 2 : 2 * i + 1;
						f64_rope_pair(&v[a], &v[b], pos[t], i,
						    nr, &r, hf);
					}
			}
			float *dx = dup_to(x, (size_t)ne * 4);
			int64_t *dpos = dup_to(pos, (size_t)n * 8);
			r.freqs = k > 0 ? dfq : NULL;
			CL(medha_k_rope_ext(dx, dpos, n, rs, nh, hd, nr, &r, 0));
			from_dev(got, dx, (size_t)ne * 4);
			if (big) {
				snprintf(label, sizeof(label), "rope %s %d rows, "
				    "positions to 1M, against the cpu twin",
				    kname[k], n);
				report(label, rel_l2f(got, twin, ne), 1e-4);
			} else {
				snprintf(label, sizeof(label), "rope %s %d rows, "
				    "positions under 64, against float64",
				    kname[k], n);
				report(label, rel_l2(got, ref, ne), 1e-4);
			}
			CK(cudaFree(dx));
			CK(cudaFree(dpos));
			CK(cudaFree(dfq));
			free(x), free(got), free(twin), free(ref), free(pos);
		}

	/* Q/K norm per head, in place, rows wider than their heads */
	{
		float *x = rand_q(ne, 3.0f), *w = rand_q(hd, 1.0f);
		float *got = malloc((size_t)ne * 4);
		double *ref = malloc((size_t)ne * 8);
		float *dx = dup_to(x, (size_t)ne * 4), *dw = dup_to(w, hd * 4);
		int bad = 0;

		for (int t = 0; t < n; t++)
			for (int h = 0; h < nh + 1; h++)
				for (int c = 0; c < hd && (h < nh || c < 16); c++) {
					const float *v = x + (size_t)t * rs + h * hd;
					double ss = 0;
					for (int j = 0; h < nh && j < hd; j++)
						ss += (double)v[j] * v[j];
					ref[(size_t)t * rs + h * hd + c] = h < nh ?
					    v[c] / sqrt(ss / hd + 1e-6) * w[c] : v[c];
				}
		CL(medha_k_rmsnorm_heads(dx, rs, n, nh, hd, dw, 1e-6f, 0));
		from_dev(got, dx, (size_t)ne * 4);
		snprintf(label, sizeof(label), "rmsnorm per head %d rows x %d "
		    "heads (in place) against float64", n, nh);
		report(label, rel_l2(got, ref, ne), 1e-5);
		/* the columns past the heads are left alone */
		for (int t = 0; t < n; t++)
			for (int c = nh * hd; c < rs; c++)
				bad += got[(size_t)t * rs + c] != x[(size_t)t * rs + c];
		snprintf(label, sizeof(label), "rmsnorm per head: columns past "
		    "the heads changed");
		report(label, bad, 0);
		CK(cudaFree(dx));
		CK(cudaFree(dw));
		free(x), free(w), free(got), free(ref);
	}

	/* GELU-tanh gated product, bf16 out; bias add, scale, soft-cap */
	{
		const int ff = 200;
		int64_t m = (int64_t)n * ff;
		float *gu = rand_q(2 * m, 4.0f), *dgu = dup_to(gu, (size_t)m * 8);
		uint16_t *yb = malloc((size_t)m * 2), *dyb = dalloc((size_t)m * 2);
		float *y = malloc((size_t)m * 4);
		double *ref = malloc((size_t)m * 8);

		for (int t = 0; t < n; t++)
			for (int j = 0; j < ff; j++)
				ref[(size_t)t * ff + j] =
				    f64_gelu(gu[(size_t)t * 2 * ff + j]) *
				    gu[(size_t)t * 2 * ff + ff + j];
		poison(dyb, (size_t)m * 2);
		CL(medha_k_geglu(dyb, dgu, 2 * ff, dgu + ff, 2 * ff, n, ff, 0));
		from_dev(yb, dyb, (size_t)m * 2);
		for (int64_t i = 0; i < m; i++)
			y[i] = h_bf16f(yb[i]);
		snprintf(label, sizeof(label), "geglu bf16 %dx%d against float64",
		    n, ff);
		report(label, rel_l2(y, ref, m), 1e-2);

		int bad = 0;
		float *b = rand_q(ff, 1.0f), *db = dup_to(b, ff * 4);
		CK(cudaMemcpy(dgu, gu, (size_t)m * 8, cudaMemcpyHostToDevice));
		CL(medha_k_bias_add(dgu, 2 * ff, n, db, ff, 0));
		float *g2 = malloc((size_t)m * 8);
		from_dev(g2, dgu, (size_t)m * 8);
		for (int t = 0; t < n; t++)
			for (int j = 0; j < 2 * ff; j++) {
				float want = gu[(size_t)t * 2 * ff + j];
				if (j < ff)
					want += b[j];
				bad += g2[(size_t)t * 2 * ff + j] != want;
			}
		snprintf(label, sizeof(label), "bias add %dx%d (stride %d): "
		    "elements differing", n, ff, 2 * ff);
		report(label, bad, 0);

		bad = 0;
		CK(cudaMemcpy(dgu, gu, (size_t)m * 8, cudaMemcpyHostToDevice));
		CL(medha_k_scale(dgu, 2 * m, 11.3137085f, 0));
		from_dev(g2, dgu, (size_t)m * 8);
		for (int64_t i = 0; i < 2 * m; i++)
			bad += g2[i] != gu[i] * 11.3137085f;
		snprintf(label, sizeof(label), "scale %lld: elements differing",
		    (long long)(2 * m));
		report(label, bad, 0);

		double *rc = malloc((size_t)m * 16);
		CK(cudaMemcpy(dgu, gu, (size_t)m * 8, cudaMemcpyHostToDevice));
		CL(medha_k_softcap(dgu, 2 * m, 3.0f, 0));
		from_dev(g2, dgu, (size_t)m * 8);
		for (int64_t i = 0; i < 2 * m; i++)
			rc[i] = 3.0 * tanh(gu[i] / 3.0);
		snprintf(label, sizeof(label), "softcap 3 %lld against float64",
		    (long long)(2 * m));
		report(label, rel_l2(g2, rc, 2 * m), 1e-6);

		/* llama4's temperature on rows of stride 2 w (the columns
		   past w untouched), positions to 100K, against float64 */
		{
			const int w = m / n;
			int64_t *pos = malloc((size_t)n * 8);
			for (int t = 0; t < n; t++)
				pos[t] = t == 0 ? 8190 : (int64_t)(rnext() % 100000);
			int64_t *dpos = dup_to(pos, (size_t)n * 8);
			CK(cudaMemcpy(dgu, gu, (size_t)m * 8,
			    cudaMemcpyHostToDevice));
			CL(medha_k_attn_temp(dgu, 2 * w, n, w, dpos, 0.1f, 8192,
			    0));
			from_dev(g2, dgu, (size_t)m * 8);
			for (int t = 0; t < n; t++)
				for (int c = 0; c < 2 * w; c++) {
					const size_t i = (size_t)t * 2 * w + c;
					rc[i] = c >= w ? gu[i]
					    : gu[i] * (1 + 0.1 * log(1 +
					        floor((pos[t] + 1) / 8192.0)));
				}
			snprintf(label, sizeof(label), "attn_temp %dx%d (stride "
			    "%d) against float64", n, w, 2 * w);
			report(label, rel_l2(g2, rc, 2 * m), 1e-6);
			CK(cudaFree(dpos));
			free(pos);
		}
		CK(cudaFree(dgu));
		CK(cudaFree(dyb));
		CK(cudaFree(db));
		free(gu), free(yb), free(y), free(ref), free(b), free(g2);
		free(rc);
	}
}

static void
t_embed_gather(int vocab, int dim, int n)
{
	char label[120];
	uint16_t *tab = malloc((size_t)vocab * dim * 2);
	int32_t *ids = malloc((size_t)n * 4);
	float *y = malloc((size_t)n * dim * 4), *g = malloc((size_t)n * dim * 4);
	int bad = 0;

	for (int64_t i = 0; i < (int64_t)vocab * dim; i++)
		tab[i] = h_bf16(frnd());
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)(rnext() % (uint64_t)vocab);
	uint16_t *dtab = dup_to(tab, (size_t)vocab * dim * 2);
	int32_t *dids = dup_to(ids, (size_t)n * 4);
	float *dy = dalloc((size_t)n * dim * 4), *dg = dalloc((size_t)n * dim * 4);
	poison(dy, (size_t)n * dim * 4);
	CL(medha_k_embed(dy, dtab, dids, n, dim, 0));
	from_dev(y, dy, (size_t)n * dim * 4);
	for (int i = 0; i < n; i++)
		for (int c = 0; c < dim; c++)
			bad += y[(size_t)i * dim + c] !=
			    h_bf16f(tab[(size_t)ids[i] * dim + c]);
	snprintf(label, sizeof(label), "embed %d of %dx%d: elements differing",
	    n, vocab, dim);
	report(label, bad, 0);
	/* gather rows of y, reversed */
	for (int i = 0; i < n; i++)
		ids[i] = n - 1 - i;
	CK(cudaMemcpy(dids, ids, (size_t)n * 4, cudaMemcpyHostToDevice));
	poison(dg, (size_t)n * dim * 4);
	CL(medha_k_gather_rows(dg, dy, dids, n, dim, 0));
	from_dev(g, dg, (size_t)n * dim * 4);
	bad = 0;
	for (int i = 0; i < n; i++)
		bad += memcmp(g + (size_t)i * dim, y + (size_t)(n - 1 - i) * dim,
		    (size_t)dim * 4) != 0;
	snprintf(label, sizeof(label), "gather_rows %d x %d: rows differing", n,
	    dim);
	report(label, bad, 0);
	CK(cudaFree(dtab));
	CK(cudaFree(dids));
	CK(cudaFree(dy));
	CK(cudaFree(dg));
	free(tab);
	free(ids);
	free(y);
	free(g);
}

static void
t_fill(int64_t n)
{
	char label[120];
	uint16_t *y = malloc((size_t)n * 2), *dy = dalloc((size_t)n * 2);
	int64_t bad = 0, half = n / 3;

	poison(dy, (size_t)n * 2);
	/* in two parts: the offset continues the sequence */
	CL(medha_k_fill_random(dy, half, 42, 1000, 0.02f, 0));
	CL(medha_k_fill_random(dy + half, n - half, 42, 1000 + half, 0.02f, 0));
	from_dev(y, dy, (size_t)n * 2);
	for (int64_t i = 0; i < n; i++)
		bad += y[i] != fill_random_ref(42, 1000 + (uint64_t)i, 0.02f);
	snprintf(label, sizeof(label), "fill_random %lld (two parts) vs cpu "
	    "twin: elements differing", (long long)n);
	report(label, (double)bad, 0);
	CK(cudaFree(dy));
	free(y);
}

static void
t_merge(int n_parts, int n, int nh, int hd)
{
	char label[120];
	int64_t w = (int64_t)nh * hd;
	float *parts = rand_q(n_parts * n * w, 1.0f);
	float *lses = malloc((size_t)n_parts * n * nh * 4);
	float *out = malloc((size_t)n * w * 4), *ol = malloc((size_t)n * nh * 4);
	const float *op[16], *lp[16];
	uint16_t *gb = malloc((size_t)n * w * 2);
	float *got = malloc((size_t)n * w * 4);

	for (int64_t i = 0; i < (int64_t)n_parts * n * nh; i++)
		lses[i] = (rnext() % 5 == 0) ? -INFINITY : frnd() * 8;
	for (int j = 0; j < n_parts; j++) /* row 0: no part at all */
		lses[(int64_t)j * n * nh] = -INFINITY;
	for (int j = 0; j < n_parts; j++) {
		op[j] = parts + (int64_t)j * n * w;
		lp[j] = lses + (int64_t)j * n * nh;
	}
	/* the cpu merge by (row, head) rows of head_dim */
	medha_attn_merge(n_parts, op, lp, n * nh, hd, out, ol);
	float *dp = dup_to(parts, (size_t)n_parts * n * w * 4);
	float *dl = dup_to(lses, (size_t)n_parts * n * nh * 4);
	uint16_t *dout = dalloc((size_t)n * w * 2);
	poison(dout, (size_t)n * w * 2);
	CL(medha_k_attn_merge(dout, dp, dl, n_parts, n, nh, hd, 0));
	from_dev(gb, dout, (size_t)n * w * 2);
	for (int64_t i = 0; i < n * w; i++)
		got[i] = h_bf16f(gb[i]);
	snprintf(label, sizeof(label), "attn_merge %d parts %d rows %d heads",
	    n_parts, n, nh);
	report(label, rel_l2f(got, out, n * w), 1e-2);
	CK(cudaFree(dp));
	CK(cudaFree(dl));
	CK(cudaFree(dout));
	free(parts);
	free(lses);
	free(out);
	free(ol);
	free(gb);
	free(got);
}

/*
 * argmax and sampling against sample.c: each row's u is the first draw
 * of a sampler of the row's seed, and medha_sample of a second sampler
 * of that seed draws the same u. A sampled token that differs is a
 * failure unless u lies within 1e-5 of the cpu's cumulative boundary
 * (the f64 sums over a long nucleus are in another order: rounding).
 */
static void
t_sample(int n, int vocab)
{
	char label[120];
	float *l = malloc((size_t)n * vocab * 4);
	float temp[16], top_p[16], u[16];
	int32_t top_k[16], ids[16], ref[16];
	struct {
		float t;
		int k;
		float p;
	} cfg[8] = {{0.8f, 40, 0.95f}, {1.0f, 0, 1.0f}, {0.7f, 0, 0.9f},
	    {1.5f, 5, 0.5f}, {0, 0, 1}, {1.0f, 0, 0.9999f}, {0.3f, 1, 1},
	    {1.0f, 100000000, 0.5f}};
	int bad = 0, near = 0, gbad = 0;

	if (n > 16)
		n = 16;
	for (int64_t i = 0; i < (int64_t)n * vocab; i++)
		l[i] = frnd() * 6;
	/* plant ties: the largest twice (greedy takes the lower index) */
	for (int r = 0; r < n; r++) {
		float *row = l + (int64_t)r * vocab;

		row[vocab / 2] = 7;
		row[vocab / 3] = 7;
		row[vocab - 1] = 7;
	}
	for (int r = 0; r < n; r++) {
		struct medha_sampler_params p = {.temp = cfg[r % 8].t,
		    .top_k = cfg[r % 8].k, .top_p = cfg[r % 8].p,
		    .seed = 1234 + (uint64_t)r};
		struct medha_sampler *s1, *s2;

		temp[r] = p.temp;
		top_k[r] = p.top_k;
		top_p[r] = p.top_p;
		if (medha_sampler_init(&s1, &p, vocab) != 0 ||
		    medha_sampler_init(&s2, &p, vocab) != 0) {
			fprintf(stderr, "medha_sampler_init failed\n");
			exit(1);
		}
		u[r] = medha_sampler_uniform(s1);
		ref[r] = medha_sample(s2, l + (int64_t)r * vocab);
		medha_sampler_free(s1);
		medha_sampler_free(s2);
	}
	float *dl = dup_to(l, (size_t)n * vocab * 4);
	float *dt = dup_to(temp, n * 4), *dp = dup_to(top_p, n * 4);
	float *du = dup_to(u, n * 4);
	int32_t *dk = dup_to(top_k, n * 4), *dids = dalloc(n * 4);
	size_t wl = medha_k_sample_workspace(n, vocab);
	void *work = dalloc(wl);

	/* greedy */
	poison(dids, n * 4);
	CL(medha_k_argmax(dids, dl, n, vocab, 0));
	from_dev(ids, dids, n * 4);
	for (int r = 0; r < n; r++)
		gbad += ids[r] != medha_sample_greedy(l + (int64_t)r * vocab,
		    vocab);
	snprintf(label, sizeof(label), "argmax %d x %d (ties): rows differing",
	    n, vocab);
	report(label, gbad, 0);
	/* a row with a NaN and one with an infinity: -1 (the backend's
	   check of the logits), the next row its argmax */
	if (n >= 3) {
		const float bad2[2] = {NAN, INFINITY};
		float *dl2 = dup_to(l, (size_t)n * vocab * 4);

		CK(cudaMemcpy(dl2 + 5, &bad2[0], 4, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dl2 + 2 * (int64_t)vocab - 1, &bad2[1], 4,
		    cudaMemcpyHostToDevice));
		poison(dids, n * 4);
		CL(medha_k_argmax(dids, dl2, n, vocab, 0));
		from_dev(ids, dids, n * 4);
		gbad = (ids[0] != -1) + (ids[1] != -1) +
		    (ids[2] != medha_sample_greedy(l + 2 * (int64_t)vocab,
		                   vocab));
		snprintf(label, sizeof(label), "argmax %d x %d: a row with a "
		    "NaN, one with an inf: -1 (rows wrong)", n, vocab);
		report(label, gbad, 0);
		CK(cudaFree(dl2));
	}
	/* sampling */
	poison(dids, n * 4);
	CL(medha_k_sample(dids, dl, n, vocab, dt, dk, dp, du, work, wl, 0));
	from_dev(ids, dids, n * 4);
	for (int r = 0; r < n; r++) {
		struct medha_sampler_params p = {.temp = temp[r],
		    .top_k = top_k[r], .top_p = top_p[r], .seed = 1};
		struct medha_sampler *s;
		const int *ci;
		const float *cp;
		int m, i;
		double cum = 0;

		if (ids[r] == ref[r])
			continue;
		medha_sampler_init(&s, &p, vocab);
		m = medha_sample_candidates(s, l + (int64_t)r * vocab, &ci, &cp);
		for (i = 0; i < m && ci[i] != ids[r] && ci[i] != ref[r]; i++)
			cum += cp[i];
		cum += cp[i < m ? i : m - 1];
		if (fabs(cum - u[r]) < 1e-5) {
			near++;
		} else {
			bad++;
			printf("     row %d (temp %g top_k %d top_p %g u %.7f): "
			       "gpu %d cpu %d\n", r, temp[r], top_k[r], top_p[r],
			    u[r], ids[r], ref[r]);
		}
		medha_sampler_free(s);
	}
	snprintf(label, sizeof(label), "sample %d x %d: rows differing "
	    "(%d more at a rounding boundary)", n, vocab, near);
	report(label, bad, 0);
	CK(cudaFree(dl));
	CK(cudaFree(dt));
	CK(cudaFree(dp));
	CK(cudaFree(du));
	CK(cudaFree(dk));
	CK(cudaFree(dids));
	CK(cudaFree(work));
	free(l);
}

/*
 * A mixture of experts' kernels (kernels/moe.cu) on n tokens of ne
 * experts, top k, dim wide, each expert's product N x dim: the router's
 * logits, the routing (softmax or sigmoid, by weight or by logit,
 * renormalised or not, qwen2moe's shared gate) and the weighted sum
 * against float64; the sort checked as a sort (the offsets the counts'
 * prefix, each segment its expert's rows, row and src inverse, the
 * tiles covering each segment in order, the others -1); the gather
 * exactly; the grouped product against float64 of its bf16 operands.
 */
static void
t_moe(const char *what, int n, int ne, int k, int dim, int N, int sigm,
    int by_logit, int norm_w, int shg)
{
	char label[160];
	const int nk = n * k, rows = ne + shg;
	const int nt = medha_k_moe_tiles(n, ne, k);
	float *x = rand_q((int64_t)n * dim, 2.0f);
	float *rw = rand_q((int64_t)rows * dim, 0.3f);
	float *lg = malloc(sizeof(float) * (size_t)n * rows);
	double *ref = malloc(sizeof(double) * (size_t)nk * (N > dim ? N : dim));
	int32_t *sel = malloc(sizeof(int32_t) * nk), *row = malloc(sizeof(int32_t) * nk);
	int32_t *src = malloc(sizeof(int32_t) * nk), *off = malloc(sizeof(int32_t) * (ne + 1));
	int32_t *tiles = malloc(sizeof(int32_t) * 3 * nt);
	float *wt = malloc(sizeof(float) * nk), *gsh = malloc(sizeof(float) * n);
	float *rwt = malloc(sizeof(float) * nk);
	int32_t *rsel = malloc(sizeof(int32_t) * nk);
	uint16_t *xb = malloc(2 * (size_t)n * dim), *xg = malloc(2 * (size_t)nk * dim);
	uint16_t *wb = malloc(2 * (size_t)ne * N * dim);
	float *y = malloc(sizeof(float) * (size_t)nk * N);
	float *o = malloc(sizeof(float) * (size_t)n * dim);
	float *sh = rand_q((int64_t)n * dim, 1.0f);
	float *ys = rand_q((int64_t)nk * dim, 1.0f);
	int bad = 0;

	/* the logits against float64 */
	float *dx = dup_to(x, sizeof(float) * (size_t)n * dim);
	float *drw = dup_to(rw, sizeof(float) * (size_t)rows * dim);
	float *dlg = dalloc(sizeof(float) * (size_t)n * rows);
	poison(dlg, sizeof(float) * (size_t)n * rows);
	CL(medha_k_moe_logits(dlg, dx, drw, n, rows, dim, 0));
	from_dev(lg, dlg, sizeof(float) * (size_t)n * rows);
	for (int t = 0; t < n; t++)
		for (int r = 0; r < rows; r++) {
			double s = 0;
			for (int c = 0; c < dim; c++)
				s += (double)x[(size_t)t * dim + c] *
				    rw[(size_t)r * dim + c];
			ref[(size_t)t * rows + r] = s;
		}
	snprintf(label, sizeof(label), "moe %s: logits %dx%d", what, n, rows);
	report(label, rel_l2(lg, ref, (int64_t)n * rows), 1e-5);

	/* the routing against float64 on the same logits */
	struct medha_k_moe m = {.ne = ne, .k = k, .sigmoid = sigm,
	    .by_logit = by_logit, .norm_w = norm_w};
	m.sel = dalloc(4 * (size_t)nk);
	m.wt = dalloc(4 * (size_t)nk);
	m.gsh = shg ? dalloc(4 * (size_t)n) : NULL;
	m.row = dalloc(4 * (size_t)nk);
	m.src = dalloc(4 * (size_t)nk);
	m.off = dalloc(4 * (size_t)(ne + 1));
	m.tiles = dalloc(12 * (size_t)nt);
	poison(m.sel, 4 * (size_t)nk);
	poison(m.tiles, 12 * (size_t)nt);
	CL(medha_k_moe_route(&m, dlg, rows, n, 0));
	from_dev(sel, m.sel, 4 * (size_t)nk);
	from_dev(wt, m.wt, 4 * (size_t)nk);
	if (shg)
		from_dev(gsh, m.gsh, 4 * (size_t)n);
	double gerr = 0, gden = 0;
	for (int t = 0; t < n; t++) {
		const float *l = lg + (size_t)t * rows;
		double p[256], mx = -INFINITY, z = 0, s = 0;
		int j = 0;
		for (int e = 0; e < ne; e++)
			mx = fmax(mx, l[e]);
		for (int e = 0; e < ne; e++)
			z += exp(l[e] - mx);
		for (int e = 0; e < ne; e++)
			p[e] = sigm ? 1 / (1 + exp(-(double)l[e])) : exp(l[e] - mx) / z;
		/* the k best, by logit or weight, ties to the lower index */
		for (j = 0; j < k; j++) {
			int b = -1;
			for (int e = 0; e < ne; e++) {
				int taken = 0;
				for (int i = 0; i < j; i++)
					taken |= rsel[t * k + i] == e;
				if (!taken && (b < 0 || (by_logit ? l[e] > l[b] : p[e] > p[b])))
					b = e;
			}
			rsel[t * k + j] = b;
			s += p[b];
		}
		for (j = 0; j < k; j++) {
			double w = p[rsel[t * k + j]] / (norm_w ? fmax(s, 6.103515625e-5) : 1);
			bad += sel[t * k + j] != rsel[t * k + j];
			gerr += (wt[t * k + j] - w) * (wt[t * k + j] - w);
			gden += w * w;
		}
		if (shg) {
			double g = 1 / (1 + exp(-(double)l[ne]));
			gerr += (gsh[t] - g) * (gsh[t] - g);
			gden += g * g;
		}
	}
	snprintf(label, sizeof(label), "moe %s: route %d tokens top-%d of %d: "
	    "experts differing", what, n, k, ne);
	report(label, bad, 0);
	snprintf(label, sizeof(label), "moe %s: route weights%s", what,
	    shg ? " and shared gate" : "");
	report(label, sqrt(gerr / gden), 1e-6);

	/* the sort, as a sort */
	CL(medha_k_moe_sort(&m, n, 0));
	from_dev(row, m.row, 4 * (size_t)nk);
	from_dev(src, m.src, 4 * (size_t)nk);
	from_dev(off, m.off, 4 * (size_t)(ne + 1));
	from_dev(tiles, m.tiles, 12 * (size_t)nt);
	bad = off[0] != 0 || off[ne] != nk;
	for (int e = 0, at = 0; e < ne; e++) {
		int c = 0;
		for (int i = 0; i < nk; i++)
			c += sel[i] == e;
		bad += off[e + 1] - off[e] != c;
		for (int r = off[e]; r < off[e + 1] && r < nk; r++)
			bad += r < 0 || src[r] < 0 || src[r] >= nk ||
			    sel[src[r]] != e || row[src[r]] != r;
		for (int r = off[e]; r < off[e + 1]; r += MEDHA_K_MOE_BM, at++)
			bad += at >= nt || tiles[3 * at] != e ||
			    tiles[3 * at + 1] != r ||
			    tiles[3 * at + 2] != (r + MEDHA_K_MOE_BM < off[e + 1]
			        ? r + MEDHA_K_MOE_BM : off[e + 1]);
		if (e == ne - 1)
			for (; at < nt; at++)
				bad += tiles[3 * at] != -1;
	}
	snprintf(label, sizeof(label), "moe %s: sort %d rows into %d experts, "
	    "%d tiles: faults", what, nk, ne, nt);
	report(label, bad, 0);

	/* the gather, exact (llama4's: times the weight, rounded) */
	for (int i = 0; i < n * dim; i++)
		xb[i] = h_bf16(x[i]);
	uint16_t *dxb = dup_to(xb, 2 * (size_t)n * dim), *dxg = dalloc(2 * (size_t)nk * dim);
	poison(dxg, 2 * (size_t)nk * dim);
	CL(medha_k_moe_gather(dxg, dxb, dim, dim, &m, n, by_logit, 0));
	from_dev(xg, dxg, 2 * (size_t)nk * dim);
	bad = 0;
	for (int r = 0; r < nk; r++)
		for (int c = 0; c < dim; c++) {
			uint16_t v = xb[(size_t)(src[r] / k) * dim + c];
			if (by_logit)
				v = h_bf16(h_bf16f(v) * wt[src[r]]);
			bad += xg[(size_t)r * dim + c] != v;
		}
	snprintf(label, sizeof(label), "moe %s: gather %dx%d: elements differing",
	    what, nk, dim);
	report(label, bad, 0);

	/* the grouped product against float64 */
	for (int64_t i = 0; i < (int64_t)ne * N * dim; i++)
		wb[i] = h_bf16(frnd() * 0.2f);
	uint16_t *dwb = dup_to(wb, 2 * (size_t)ne * N * dim);
	float *dy = dalloc(sizeof(float) * (size_t)nk * N);
	poison(dy, sizeof(float) * (size_t)nk * N);
	CL(medha_k_moe_gemm(dy, N, dxg, dim, dwb, (int64_t)N * dim, N, dim,
	    m.tiles, nt, 0));
	from_dev(y, dy, sizeof(float) * (size_t)nk * N);
	for (int r = 0; r < nk; r++) {
		const uint16_t *W = wb + (size_t)sel[src[r]] * N * dim;
		for (int j = 0; j < N; j++) {
			double s = 0;
			for (int c = 0; c < dim; c++)
				s += (double)h_bf16f(xg[(size_t)r * dim + c]) *
				    h_bf16f(W[(size_t)j * dim + c]);
			ref[(size_t)r * N + j] = s;
		}
	}
	snprintf(label, sizeof(label), "moe %s: grouped product %dx%dx%d over "
	    "%d experts", what, nk, N, dim, ne);
	report(label, rel_l2(y, ref, (int64_t)nk * N), 1e-5);

	/* the weighted sum, added to out, with the shared expert's */
	float *dys = dup_to(ys, sizeof(float) * (size_t)nk * dim);
	float *dsh = dup_to(sh, sizeof(float) * (size_t)n * dim);
	float *dout = dup_to(x, sizeof(float) * (size_t)n * dim);
	CL(medha_k_moe_sum(dout, 1, dys, dim, &m, n, !by_logit, dsh, 0));
	from_dev(o, dout, sizeof(float) * (size_t)n * dim);
	for (int t = 0; t < n; t++)
		for (int c = 0; c < dim; c++) {
			double s = x[(size_t)t * dim + c];
			for (int j = 0; j < k; j++)
				s += (double)ys[(size_t)row[t * k + j] * dim + c] *
				    (by_logit ? 1 : wt[t * k + j]);
			s += (double)sh[(size_t)t * dim + c] * (shg ? gsh[t] : 1);
			ref[(size_t)t * dim + c] = s;
		}
	snprintf(label, sizeof(label), "moe %s: weighted sum %dx%d", what, n, dim);
	report(label, rel_l2(o, ref, (int64_t)n * dim), 1e-6);

	CK(cudaFree(dx));
	CK(cudaFree(drw));
	CK(cudaFree(dlg));
	CK(cudaFree(m.sel));
	CK(cudaFree(m.wt));
	CK(cudaFree(m.row));
	CK(cudaFree(m.src));
	CK(cudaFree(m.off));
	CK(cudaFree(m.tiles));
	if (m.gsh != NULL)
		CK(cudaFree(m.gsh));
	CK(cudaFree(dxb));
	CK(cudaFree(dxg));
	CK(cudaFree(dwb));
	CK(cudaFree(dy));
	CK(cudaFree(dys));
	CK(cudaFree(dsh));
	CK(cudaFree(dout));
	free(x), free(rw), free(lg), free(ref), free(sel), free(row);
	free(src), free(off), free(tiles), free(wt), free(gsh), free(rwt);
	free(rsel), free(xb), free(xg), free(wb), free(y), free(o), free(sh);
	free(ys);
}

/* the cases: Mixtral's normalised softmax, qwen2moe's unnormalised
   softmax with the shared gate, llama4's sigmoid top-1 by logit on the
   input; n past a tile (BM) per expert on the larger */
static void
t_moe_all(int big)
{
	t_moe("mixtral", big ? 300 : 70, 8, 2, big ? 512 : 96,
	    big ? 256 : 80, 0, 0, 1, 0);
	t_moe("qwen2moe", big ? 129 : 21, 6, 2, 64, 40, 0, 0, 0, 1);
	t_moe("llama4", big ? 65 : 19, 4, 1, 128, 70, 1, 1, 0, 0);
	t_moe("qwen3moe decode", 3, 16, 4, 64, 64, 0, 0, 1, 0);
}

/*
 * --moe-bench: the routed FFN's kernels timed on a GPU (contrib/gpu-
 * check.sh's moe step), at Qwen3-30B-A3B's shape (128 experts, top-8,
 * dim 2048, 768 rows each), batches of 1 to 256 tokens: routing, sort,
 * gather, the grouped gate/up and down products; the experts a batch
 * touched (from the offsets), the bytes of their weights over the time
 * (a decode step's bound) and the products' rate. Prints numbers, checks
 * nothing (the correctness is t_moe's).
 */
static void
moe_bench(void)
{
	const int ne = 128, k = 8, d = 2048, ef = 768, bs[] = {1, 16, 64, 256};
	const int nmax = 256, nk = nmax * k, it = 20;
	const int nt = medha_k_moe_tiles(nmax, ne, k);
	struct medha_k_moe m = {.ne = ne, .k = k, .norm_w = 1};
	float *lg = rand_q((int64_t)nmax * ne, 3.0f);
	float *dlg = dup_to(lg, 4 * (size_t)nmax * ne);
	uint16_t *wgu = dalloc(2 * (size_t)ne * 2 * ef * d);
	uint16_t *wdn = dalloc(2 * (size_t)ne * d * ef);
	uint16_t *x = dalloc(2 * (size_t)nmax * d), *xg = dalloc(2 * (size_t)nk * d);
	uint16_t *act = dalloc(2 * (size_t)nk * ef);
	float *gu = dalloc(4 * (size_t)nk * 2 * ef), *ys = dalloc(4 * (size_t)nk * d);
	int32_t off[129];
	cudaEvent_t a, b;

	CL(medha_k_fill_random(wgu, (int64_t)ne * 2 * ef * d, 1, 0, 0.03f, 0));
	CL(medha_k_fill_random(wdn, (int64_t)ne * d * ef, 1, 1ull << 40, 0.03f, 0));
	CL(medha_k_fill_random(x, (int64_t)nmax * d, 1, 2ull << 40, 1.0f, 0));
	m.sel = dalloc(4 * (size_t)nk);
	m.wt = dalloc(4 * (size_t)nk);
	m.row = dalloc(4 * (size_t)nk);
	m.src = dalloc(4 * (size_t)nk);
	m.off = dalloc(4 * (size_t)(ne + 1));
	m.tiles = dalloc(12 * (size_t)nt);
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (size_t i = 0; i < sizeof(bs) / sizeof(bs[0]); i++) {
		const int n = bs[i], t = medha_k_moe_tiles(n, ne, k);
		float ms = 0;
		int touched = 0;
		for (int r = 0; r <= it; r++) {
			if (r == 1)
				CK(cudaEventRecord(a, 0));
			CL(medha_k_moe_route(&m, dlg, ne, n, 0));
			CL(medha_k_moe_sort(&m, n, 0));
			CL(medha_k_moe_gather(xg, x, d, d, &m, n, 0, 0));
			CL(medha_k_moe_gemm(gu, 2 * ef, xg, d, wgu,
			    (int64_t)2 * ef * d, 2 * ef, d, m.tiles, t, 0));
			CL(medha_k_swiglu(act, gu, 2 * ef, gu + ef, 2 * ef,
			    n * k, ef, 0));
			CL(medha_k_moe_gemm(ys, d, act, ef, wdn, (int64_t)d * ef,
			    d, ef, m.tiles, t, 0));
		}
		CK(cudaEventRecord(b, 0));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		ms /= it;
		from_dev(off, m.off, sizeof(off));
		for (int e = 0; e < ne; e++)
			touched += off[e + 1] > off[e];
		double bytes = (double)touched * 3 * ef * d * 2;
		double flop = 2.0 * n * k * 3 * ef * d;
		printf("moe-bench: %d tokens, top-%d of %d (dim %d, %d rows): "
		       "%d experts touched, %.1f us, %.0f GB/s of weights, "
		       "%.2f TFLOP/s\n",
		    n, k, ne, d, ef, touched, ms * 1e3, bytes / ms / 1e6,
		    flop / ms / 1e9);
	}
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	CK(cudaFree(dlg));
	CK(cudaFree(wgu));
	CK(cudaFree(wdn));
	CK(cudaFree(x));
	CK(cudaFree(xg));
	CK(cudaFree(act));
	CK(cudaFree(gu));
	CK(cudaFree(ys));
	CK(cudaFree(m.sel));
	CK(cudaFree(m.wt));
	CK(cudaFree(m.row));
	CK(cudaFree(m.src));
	CK(cudaFree(m.off));
	CK(cudaFree(m.tiles));
	free(lg);
}

int
main(int argc, char **argv)
{
	int self_only = 0, ndev = 0, bench = 0;
	cudaError_t e;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--self-check"))
			self_only = 1;
		else if (!strcmp(argv[i], "--moe-bench"))
			bench = 1;
		else {
			fprintf(stderr, "usage: kernels_test [--quick] "
			                "[--self-check] [--moe-bench]\n");
			return 2;
		}
	}
	if (self_only) {
		self_check();
		printf("%s: %d failed\n", fails ? "FAIL" : "ok", fails);
		return fails ? 1 : 0;
	}
	e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev < 1) {
		quick = 1;
		self_check();
		if (fails) {
			printf("FAIL: the references' self-check failed\n");
			return 1;
		}
		printf("skip: no CUDA device (%s)\n", e != cudaSuccess ?
		    cudaGetErrorString(e) : "none found");
		return 77;
	}
	if (bench) {
		seed(2);
		moe_bench();
		return 0;
	}
	self_check();
	seed(2);
	t_rows(1, 576);
	t_rows(quick ? 7 : 129, quick ? 576 : 4096);
	t_family(quick ? 5 : 65);
	t_embed_gather(quick ? 1000 : 49152, 576, quick ? 9 : 300);
	t_fill(quick ? 10001 : 3000017);
	t_kv_append(MEDHA_K_BF16, 3, 64);
	t_kv_append(MEDHA_K_F16, 8, 128);
	t_merge(1, 5, 9, 64);
	t_merge(3, quick ? 17 : 257, 8, 128);
	t_kv_append(MEDHA_K_BF16, 1, 256);
	t_merge(2, 5, 4, 256);
	t_moe_all(!quick);
	t_sample(16, quick ? 1000 : 49152);
	if (!quick)
		t_sample(16, 128256);
	t_attn();
	printf("%s: %d failed\n", fails ? "FAIL" : "ok", fails);
	return fails ? 1 : 0;
}
