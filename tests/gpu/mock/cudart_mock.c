/*
 * cudart_mock.c: host-memory stand-ins for the CUDA runtime calls the
 * cuda backend makes and for every launcher of kernels/kernels.h, so
 * that tests/sh/cuda-mock.sh runs the backend's host side without a
 * GPU: "device" memory is malloc's (poisoned with NaN bytes), copies are
 * memcpy, streams do nothing, and each kernel is a plain loop with the
 * contract's numerics (bf16 storage, f32 or f64 accumulation). A stream
 * capture records every launch with its arguments copied (as CUDA's
 * does) and a graph launch replays them in order; a copy, an allocation
 * or a kernel the backend must not capture aborts during a capture;
 * MEDHA_MOCK_FAIL_CAPTURE makes a capture fail (fail_this_capture).
 * Not the kernels: their own tests check those.
 */
#include "kernels.h"
#include "model/quant.h"
#include "cpu/cpu.h"
#include "model/model.h"
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

static int nalloc;
static void no_capture(const char *what);
/* devices: MEDHA_MOCK_DEVICES (1), all this machine's memory */
cudaError_t cudaGetDeviceCount(int *n) { const char *e = getenv("MEDHA_MOCK_DEVICES"); *n = e != NULL && atoi(e) > 0 ? atoi(e) : 1; return 0; }
cudaError_t cudaSetDevice(int d) { (void)d; return 0; }
cudaError_t cudaGetDevice(int *d) { *d = 0; return 0; }
/* an H200 by name (the registry's device questions: medha-worker and
   medha-prof label their GPU h200), compute capability 9.0, 132 SMs */
cudaError_t
cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
	(void)d;
	memset(p, 0, sizeof(*p));
	strcpy(p->name, "NVIDIA H200 (host stand-in)");
	p->major = 9;
	p->multiProcessorCount = 132;
	return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) { (void)a; (void)d; *v = 132; return 0; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f) { (void)f; *s = (cudaStream_t)malloc(8); return 0; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return 0; }
/* every call has run when it returns: nothing is pending */
cudaError_t cudaStreamQuery(cudaStream_t s) { (void)s; return 0; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { free(s); return 0; }
cudaError_t cudaMalloc(void **p, size_t n) { no_capture("cudaMalloc"); *p = malloc(n); if (!*p) return cudaErrorMemoryAllocation; memset(*p, 0xff, n); nalloc++; return 0; }
cudaError_t cudaFree(void *p) { if (p) nalloc--; free(p); return 0; }
cudaError_t cudaMallocHost(void **p, size_t n) { *p = malloc(n); memset(*p, 0xff, n); return *p ? 0 : cudaErrorMemoryAllocation; }
cudaError_t cudaFreeHost(void *p) { free(p); return 0; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) { (void)k; memmove(d, s, n); return 0; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) { (void)k; (void)st; no_capture("cudaMemcpyAsync"); memmove(d, s, n); return 0; }
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) { (void)st; no_capture("cudaMemsetAsync"); memset(d, v, n); return 0; }
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { *f = (size_t)8 << 30; *t = (size_t)16 << 30; return 0; }
const char *cudaGetErrorString(cudaError_t e) { (void)e; return "mock error"; }
cudaError_t cudaGetLastError(void) { return 0; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = (cudaEvent_t)malloc(8); return 0; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return 0; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e; (void)s; return 0; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { (void)a; (void)b; *ms = 0.5f; return 0; }

/* ---- graphs: a capture records each launch as a closure, a launch of
   the graph runs them in order; launches outside a capture run at once ---- */

struct closure {
	void (*fn)(void *);
	void *arg;
};

struct mgraph {
	struct closure *c;
	int n, cap;
};

/* the capture in progress on this thread: a backend runs on one thread,
   and backend_cuda_test's TP and KVP pairs run two backends on two at
   once (a capture of one must not record the other's launches, as a
   stream's capture does not on a GPU); the counts are shared */
static _Thread_local struct mgraph *capturing;
static _Atomic int n_begun, n_captures, n_replays, n_failed;

/* at exit: how many graphs were captured and replayed (cuda-mock.sh
   checks that decode steps took the graph path), and how many captures
   failed as told */
static void
graph_counts(void)
{
	printf("mock: %d graphs captured, %d replays, %d captures failed\n",
	    n_captures, n_replays, n_failed);
}

/* MEDHA_MOCK_FAIL_CAPTURE: "all", or N: the N-th capture (from 1) is
   invalidated, as CUDA does when a capture meets what it cannot take */
static int
fail_this_capture(void)
{
	const char *e = getenv("MEDHA_MOCK_FAIL_CAPTURE");

	return e != NULL && (strcmp(e, "all") == 0 || atoi(e) == n_begun);
}

static void
mgraph_free(struct mgraph *g)
{
	for (int i = 0; i < g->n; i++)
		free(g->c[i].arg);
	free(g->c);
	free(g);
}

/* run fn(arg) now, or (capturing) a copy of the n bytes at arg later */
static int
launch(void (*fn)(void *), const void *arg, size_t n)
{
	struct mgraph *g = capturing;
	void *cp;

	if (g == NULL) {
		fn((void *)arg);
		return 0;
	}
	if (g->n == g->cap) {
		g->cap = g->cap ? 2 * g->cap : 64;
		g->c = realloc(g->c, sizeof(*g->c) * (size_t)g->cap);
	}
	cp = malloc(n);
	memcpy(cp, arg, n);
	g->c[g->n++] = (struct closure){fn, cp};
	return 0;
}

/* for cublaslt_mock.c (found with dlsym): 1 if fn(arg) was deferred */
int
mock_defer(void (*fn)(void *), const void *arg, size_t n)
{
	if (capturing == NULL)
		return 0;
	launch(fn, arg, n);
	return 1;
}

/* for nccl_mock.c (found with dlsym): 1 during a capture */
int
mock_capturing(void)
{
	return capturing != NULL;
}

static void
no_capture(const char *what)
{
	if (capturing != NULL) {
		fprintf(stderr, "MOCK: %s during a graph capture\n", what);
		abort();
	}
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m)
{ (void)s; (void)m; if (capturing) return cudaErrorInvalidValue; if (n_begun++ == 0) atexit(graph_counts); capturing = calloc(1, sizeof(*capturing)); return 0; }
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
	(void)s;
	*g = (cudaGraph_t)capturing;
	capturing = NULL;
	if (*g == NULL)
		return cudaErrorInvalidValue;
	if (fail_this_capture()) {
		mgraph_free((struct mgraph *)*g);
		*g = NULL;
		n_failed++;
		return cudaErrorStreamCaptureInvalidated;
	}
	n_captures++;
	return 0;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long f)
{ (void)f; *e = (cudaGraphExec_t)g; return 0; }
cudaError_t cudaGraphDestroy(cudaGraph_t g) { (void)g; return 0; /* the exec owns it */ }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { mgraph_free((struct mgraph *)e); return 0; }
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s)
{ struct mgraph *g = (struct mgraph *)e; (void)s; no_capture("cudaGraphLaunch"); n_replays++; for (int i = 0; i < g->n; i++) g->c[i].fn(g->c[i].arg); return 0; }

/* the stand-ins' products and attention take and free buffers of
   megabytes each call: kept in the heap (glibc's largest threshold)
   rather than mapped and unmapped, whose page faults were a third of
   a run's time */
__attribute__((constructor)) static void
mock_malloc(void)
{
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

static float bf(uint16_t x) { return medha_bf16_to_fp32(x); }
static uint16_t tobf(float x) { return medha_fp32_to_bf16(x); }

static int do_embed(float *x, const uint16_t *t, const int32_t *ids, int n, int d, cudaStream_t s)
{ (void)s; for (int i = 0; i < n; i++) for (int j = 0; j < d; j++) x[(size_t)i*d+j] = bf(t[(size_t)ids[i]*d+j]); return 0; }
static void norm(float *y32, uint16_t *y16, const float *x, const float *w, int n, int d, float eps)
{
	for (int i = 0; i < n; i++) {
		double s = 0; for (int j = 0; j < d; j++) s += (double)x[(size_t)i*d+j]*x[(size_t)i*d+j];
		float r = 1.0f / sqrtf((float)(s / d) + eps);
		for (int j = 0; j < d; j++) { float v = x[(size_t)i*d+j]*r*w[j]; if (y32) y32[(size_t)i*d+j] = v; else y16[(size_t)i*d+j] = tobf(v); }
	}
}
static int do_rmsnorm(uint16_t *y, const float *x, const float *w, int n, int d, float e, cudaStream_t s) { (void)s; norm(NULL, y, x, w, n, d, e); return 0; }
static int do_rope(float *x, const int64_t *pos, int n, int rs, int nh, int hd, int nr, float tb, const float *f, cudaStream_t s)
{
	(void)s;
	if (rs < nh * hd) return cudaErrorInvalidValue;
	for (int t = 0; t < n; t++) for (int h = 0; h < nh; h++) for (int i = 0; i < nr/2; i++) {
		float *p = x + (size_t)t*rs + h*hd + 2*i;
		double th = (double)pos[t] * pow(tb, -2.0*i/nr); if (f) th /= f[i];
		float c = (float)cos(th), sn = (float)sin(th), x0 = p[0], x1 = p[1];
		p[0] = x0*c - x1*sn; p[1] = x0*sn + x1*c;
	}
	return 0;
}
/* struct medha_k_rope as medha_cpu_rope_table_ext + medha_cpu_rope_ext
   compute it (f32, the same order); a plain llama's as do_rope (f64
   angles), as it always was here */
static int do_rope_ext(float *x, const int64_t *pos, int n, int rs, int nh, int hd, int nr, const struct medha_k_rope *r)
{
	if (rs < nh * hd) return cudaErrorInvalidValue;
	if (!r->neox && r->freq_scale == 1 && r->ext_factor == 0 && r->mscale == 1)
		return do_rope(x, pos, n, rs, nh, hd, nr, r->base, r->freqs, 0);
	struct medha_rope mr = {r->base, r->freq_scale, r->ext_factor, r->mscale, {r->corr[0], r->corr[1]}, r->freqs};
	float *cs = malloc(sizeof(float) * (size_t)(nr > 0 ? nr : 1));
	for (int t = 0; t < n; t++) {
		medha_cpu_rope_table_ext(cs, pos[t], nr, &mr);
		medha_cpu_rope_ext(x + (size_t)t * rs, nh, hd, nr, cs, r->neox, 0);
	}
	free(cs);
	return 0;
}
static int do_heads(float *x, int rs, int n, int nh, int hd, const float *w, float eps)
{ for (int t = 0; t < n; t++) for (int h = 0; h < nh; h++) { float *v = x + (size_t)t*rs + h*hd; norm(v, NULL, v, w, 1, hd, eps); } return 0; }
static int do_bias(float *x, int rs, int n, const float *b, int w)
{ for (int t = 0; t < n; t++) for (int j = 0; j < w; j++) x[(size_t)t*rs+j] += b[j]; return 0; }
static int do_scale(float *x, int64_t n, float s, float cap)
{ for (int64_t i = 0; i < n; i++) x[i] = cap != 0 ? tanhf(x[i] * s) * cap : x[i] * s; return 0; }
static int do_geglu(uint16_t *y, const float *g, int gs, const float *u, int us, int n, int ff)
{ for (int t = 0; t < n; t++) for (int j = 0; j < ff; j++) { float a = g[(size_t)t*gs+j]; a = 0.5f*a*(1.0f+tanhf(0.79788456080286535588f*a*(1.0f+0.044715f*a*a))); y[(size_t)t*ff+j] = tobf(a*u[(size_t)t*us+j]); } return 0; }
static int do_swiglu(uint16_t *y, const float *g, int gs, const float *u, int us, int n, int ff, cudaStream_t s)
{ (void)s; for (int t = 0; t < n; t++) for (int j = 0; j < ff; j++) { float a = g[(size_t)t*gs+j]; y[(size_t)t*ff+j] = tobf(a/(1+expf(-a))*u[(size_t)t*us+j]); } return 0; }
static int do_add(float *x, const float *y, int64_t n, cudaStream_t s) { (void)s; for (int64_t i = 0; i < n; i++) x[i] += y[i]; return 0; }
int medha_k_f32_to_bf16(uint16_t *y, const float *x, int64_t n, cudaStream_t s) { no_capture("medha_k_f32_to_bf16"); (void)s; for (int64_t i = 0; i < n; i++) y[i] = tobf(x[i]); return 0; }
int medha_k_bf16_to_f32(float *y, const uint16_t *x, int64_t n, cudaStream_t s) { no_capture("medha_k_bf16_to_f32"); (void)s; for (int64_t i = 0; i < n; i++) y[i] = bf(x[i]); return 0; }
int medha_k_fill_random(uint16_t *y, int64_t n, uint64_t seed, uint64_t off, float sc, cudaStream_t s)
{ no_capture("medha_k_fill_random");
	(void)s;
	for (int64_t i = 0; i < n; i++) {
		uint64_t z = seed * 0x9e3779b97f4a7c15ull + off + (uint64_t)i;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; z = (z ^ (z >> 27)) * 0x94d049bb133111ebull; z ^= z >> 31;
		y[i] = tobf(sc * (float)((double)(z >> 11) / 9007199254740992.0 * 2 - 1));
	}
	return 0;
}
static size_t kel(const struct medha_k_kv_layer *kv, int64_t b, int h, int i, int c)
{ return (size_t)(((b * kv->n_kv_heads + h) * kv->block_size + i) * kv->head_dim + c); }
static float kvget(const struct medha_k_kv_layer *kv, const void *p, size_t o)
{ uint16_t v = ((const uint16_t *)p)[o]; return kv->kv_type == MEDHA_K_BF16 ? bf(v) : medha_fp16_to_fp32(v); }
static int do_kv_append(const struct medha_k_kv_layer *kv, const struct medha_k_seqs *s, const float *k, int ks, const float *v, int vs, cudaStream_t st)
{
	(void)st;
	int w = kv->n_kv_heads * kv->head_dim;
	if (ks < w || vs < w) return cudaErrorInvalidValue;
	for (int q = 0; q < s->n_seqs; q++) {
		if (!s->append[q]) continue;
		for (int r = 0; r < s->n_q[q]; r++) {
			int t = s->q_start[q] + r;
			int64_t slot = s->pos[q] + r - s->kv_base[q];
			if (slot < 0 || slot >= s->kv_len[q]) { fprintf(stderr, "MOCK: append outside claim\n"); abort(); }
			int64_t b = s->table[s->table_off[q] + slot / kv->block_size];
			for (int c = 0; c < w; c++) {
				size_t o = kel(kv, b, c / kv->head_dim, (int)(slot % kv->block_size), c % kv->head_dim);
				float a = k[(size_t)t*ks+c], bb = v[(size_t)t*vs+c];
				((uint16_t *)kv->k)[o] = kv->kv_type == MEDHA_K_BF16 ? tobf(a) : medha_fp32_to_fp16(a);
				((uint16_t *)kv->v)[o] = kv->kv_type == MEDHA_K_BF16 ? tobf(bb) : medha_fp32_to_fp16(bb);
			}
		}
	}
	return 0;
}
/* vectors of 4 floats and 2 doubles: lanes summed apart, each as alone */
typedef float v4f __attribute__((vector_size(16)));
typedef double v2d __attribute__((vector_size(16)));

/* one query row r of sequence q, head h, against its len keys (KT,
   floats, c-major: KT[c * len + j]) and values (V, j-major); sc, dot
   and acc are scratch of len, len and head_dim */
static void
attn_row(const struct medha_k_attn *a, const struct medha_k_seqs *s, int q,
    int r, int h, const float *KT, int64_t len, const float *V, double *sc,
    float *dot, double *acc)
{
	const int hd = a->kv->head_dim, t = s->q_start[q] + r;
	const int64_t p = s->pos[q] + r;
	const float *qq = a->q + (size_t)t * a->qs + h * hd;
	int64_t hi = s->kv_base[q] + s->kv_len[q], nk;
	double mx = -INFINITY, z = 0;

	int64_t j0 = 0; /* the window's first key (slot) */

	if (hi > p + 1)
		hi = p + 1;
	nk = hi - s->kv_base[q];
	if (nk < 0)
		nk = 0;
	if (a->window > 0 && p + 1 - a->window - s->kv_base[q] > 0)
		j0 = p + 1 - a->window - s->kv_base[q];
	/* llama4's chunk: keys from the start of p's chunk */
	if (a->chunk > 0 && p / a->chunk * a->chunk - s->kv_base[q] > j0)
		j0 = p / a->chunk * a->chunk - s->kv_base[q];
	/* each key's f32 dot product summed over c in order, the keys side
	   by side (KT: c-major) so that their sums share vector
	   instructions; the same bits as one key at a time */
	for (int64_t j = j0; j < nk; j++)
		dot[j] = 0;
	for (int c = 0; c < hd; c++) {
		const float qc = qq[c], *kc = KT + (size_t)c * len;
		const v4f qv = {qc, qc, qc, qc};
		int64_t j = j0;
		for (; j + 4 <= nk; j += 4) {
			v4f d, k;
			memcpy(&d, dot + j, sizeof(d));
			memcpy(&k, kc + j, sizeof(k));
			d += qv * k;
			memcpy(dot + j, &d, sizeof(d));
		}
		for (; j < nk; j++)
			dot[j] += qc * kc[j];
	}
	for (int64_t j = j0; j < nk; j++) {
		sc[j] = (double)dot[j] * a->scale;
		if (a->softcap > 0)
			sc[j] = a->softcap * tanh(sc[j] / a->softcap);
		if (sc[j] > mx)
			mx = sc[j];
	}
	if (j0 > nk)
		nk = j0; /* no key in the window: the loops below skip */
	for (int64_t j = j0; j < nk; j++)
		z += sc[j] = exp(sc[j] - mx);
	/* each c's f64 sum over the keys in order, the c's side by side */
	for (int c = 0; c < hd; c++)
		acc[c] = 0;
	for (int64_t j = j0; j < nk; j++) {
		const double w = sc[j];
		const float *vj = V + j * hd;
		const v2d wv = {w, w};
		int c = 0;
		for (; c + 2 <= hd; c += 2) {
			v2d x, v = {vj[c], vj[c + 1]};
			memcpy(&x, acc + c, sizeof(x));
			x += wv * v;
			memcpy(acc + c, &x, sizeof(x));
		}
		for (; c < hd; c++)
			acc[c] += w * vj[c];
	}
	for (int c = 0; c < hd; c++) {
		float o = nk > j0 ? (float)(acc[c] / z) : 0;
		size_t oi = (size_t)t * a->n_heads * hd + h * hd + c;
		if (a->out != NULL)
			a->out[oi] = tobf(o);
		else
			a->out_f32[oi] = o;
	}
	if (a->lse != NULL)
		a->lse[(size_t)t * a->n_heads + h] =
		    nk > j0 ? (float)(mx + log(z)) : -INFINITY;
}

size_t
medha_k_attn_workspace(const struct medha_k_attn *a)
{
	(void)a;
	return 64;
}

/* keys (or values) [0, n) of sequence q's kv head h, as floats */
static void
gather_kv(const struct medha_k_kv_layer *kv, const struct medha_k_seqs *s,
    int q, int h, const void *pool, int64_t n, float *dst)
{
	const int hd = kv->head_dim;

	for (int64_t j = 0; j < n; j++) {
		int64_t b = s->table[s->table_off[q] + j / kv->block_size];
		for (int c = 0; c < hd; c++)
			dst[j * hd + c] = kvget(kv, pool,
			    kel(kv, b, h, (int)(j % kv->block_size), c));
	}
}

static int
do_attn(const struct medha_k_attn *a, cudaStream_t st)
{
	const struct medha_k_kv_layer *kv = a->kv;
	const struct medha_k_seqs *s = a->s;
	const int hd = kv->head_dim, G = a->n_heads / kv->n_kv_heads;

	(void)st;
	if (a->work == NULL || a->work_len < 64 ||
	    (a->out == NULL) == (a->out_f32 == NULL) ||
	    a->qs < a->n_heads * hd)
		return cudaErrorInvalidValue;
	for (int q = 0; q < s->n_seqs; q++) {
		int64_t len = s->kv_len[q];
		float *K = malloc(sizeof(float) * (size_t)(len * hd + 1));
		float *KT = malloc(sizeof(float) * (size_t)(len * hd + 1));
		float *V = malloc(sizeof(float) * (size_t)(len * hd + 1));
		double *sc = malloc(sizeof(double) * (size_t)(len + 1));
		float *dot = malloc(sizeof(float) * (size_t)(len + 1));
		double *acc = malloc(sizeof(double) * (size_t)hd);
		for (int kh = 0; kh < kv->n_kv_heads; kh++) {
			gather_kv(kv, s, q, kh, kv->k, len, K);
			gather_kv(kv, s, q, kh, kv->v, len, V);
			for (int64_t j = 0; j < len; j++)
				for (int c = 0; c < hd; c++)
					KT[(size_t)c * len + j] = K[j * hd + c];
			for (int r = 0; r < s->n_q[q]; r++)
				for (int h = kh * G; h < (kh + 1) * G; h++)
					attn_row(a, s, q, r, h, KT, len, V, sc,
					    dot, acc);
		}
		free(K), free(KT), free(V), free(sc), free(dot), free(acc);
	}
	return 0;
}

int medha_k_attn_merge(uint16_t *out, const float *parts, const float *lses, int np, int n, int nh, int hd, cudaStream_t st)
{ no_capture("medha_k_attn_merge");
	(void)st;
	for (int i = 0; i < n; i++) for (int h = 0; h < nh; h++) {
		double m = -INFINITY, z = 0;
		for (int j = 0; j < np; j++) { double l = lses[((size_t)j*n+i)*nh+h]; if (l > m) m = l; }
		for (int c = 0; c < hd; c++) {
			double acc = 0; z = 0;
			for (int j = 0; j < np; j++) { double l = lses[((size_t)j*n+i)*nh+h]; if (l == -INFINITY) continue; double w = exp(l - m); z += w; acc += w * parts[((size_t)j*n+i)*nh*hd + h*hd + c]; }
			out[(size_t)i*nh*hd + h*hd + c] = tobf(z > 0 ? (float)(acc / z) : 0);
		}
	}
	return 0;
}
static int do_gather_rows(float *y, const float *x, const int32_t *r, int n, int d, cudaStream_t s)
{ (void)s; for (int i = 0; i < n; i++) memcpy(y + (size_t)i*d, x + (size_t)r[i]*d, sizeof(float)*d); return 0; }
static int do_argmax(int32_t *ids, const float *l, int n, int v, cudaStream_t s)
{
	(void)s;
	for (int i = 0; i < n; i++) {
		int b = 0, bad = !isfinite(l[(size_t)i*v]);
		for (int j = 1; j < v; j++) { bad |= !isfinite(l[(size_t)i*v+j]); if (l[(size_t)i*v+j] > l[(size_t)i*v+b]) b = j; }
		ids[i] = bad ? -1 : b; /* kernels.h: a row not all finite */
	}
	return 0;
}
size_t medha_k_sample_workspace(int n, int v) { (void)n; (void)v; return 0; }
int medha_k_sample(int32_t *ids, const float *l, int n, int v, const float *t, const int32_t *k, const float *p, const float *u, void *w, size_t wl, cudaStream_t s)
{ (void)ids; (void)l; (void)n; (void)v; (void)t; (void)k; (void)p; (void)u; (void)w; (void)wl; (void)s; return cudaErrorNotSupported; }

/* ---- the launchers: arguments copied by value, as a kernel launch
   copies them (an attention's kv and seqs structs included) ---- */

struct a_embed { float *x; const uint16_t *t; const int32_t *ids; int n, d; };
static void r_embed(void *p) { struct a_embed *a = p; do_embed(a->x, a->t, a->ids, a->n, a->d, 0); }
int medha_k_embed(float *x, const uint16_t *t, const int32_t *ids, int n, int d, cudaStream_t s)
{ struct a_embed a = {x, t, ids, n, d}; (void)s; return launch(r_embed, &a, sizeof(a)); }

struct a_norm { uint16_t *y; const float *x, *w; int n, d; float e; };
static void r_norm(void *p) { struct a_norm *a = p; do_rmsnorm(a->y, a->x, a->w, a->n, a->d, a->e, 0); }
int medha_k_rmsnorm(uint16_t *y, const float *x, const float *w, int n, int d, float e, cudaStream_t s)
{ struct a_norm a = {y, x, w, n, d, e}; (void)s; return launch(r_norm, &a, sizeof(a)); }

struct a_rope { float *x; const int64_t *pos; int n, rs, nh, hd, nr; float tb; const float *f; };
static void r_rope(void *p) { struct a_rope *a = p; do_rope(a->x, a->pos, a->n, a->rs, a->nh, a->hd, a->nr, a->tb, a->f, 0); }
int medha_k_rope(float *x, const int64_t *pos, int n, int rs, int nh, int hd, int nr, float tb, const float *f, cudaStream_t s)
{ struct a_rope a = {x, pos, n, rs, nh, hd, nr, tb, f}; (void)s; if (rs < nh * hd) return cudaErrorInvalidValue; return launch(r_rope, &a, sizeof(a)); }

struct a_swiglu { uint16_t *y; const float *g; int gs; const float *u; int us, n, ff; };
static void r_swiglu(void *p) { struct a_swiglu *a = p; do_swiglu(a->y, a->g, a->gs, a->u, a->us, a->n, a->ff, 0); }
int medha_k_swiglu(uint16_t *y, const float *g, int gs, const float *u, int us, int n, int ff, cudaStream_t s)
{ struct a_swiglu a = {y, g, gs, u, us, n, ff}; (void)s; return launch(r_swiglu, &a, sizeof(a)); }

struct a_rope_ext { float *x; const int64_t *pos; int n, rs, nh, hd, nr; struct medha_k_rope r; };
static void r_rope_ext(void *p) { struct a_rope_ext *a = p; do_rope_ext(a->x, a->pos, a->n, a->rs, a->nh, a->hd, a->nr, &a->r); }
int medha_k_rope_ext(float *x, const int64_t *pos, int n, int rs, int nh, int hd, int nr, const struct medha_k_rope *r, cudaStream_t s)
{ struct a_rope_ext a = {x, pos, n, rs, nh, hd, nr, *r}; (void)s; if (rs < nh * hd || !(r->base > 0)) return cudaErrorInvalidValue; return launch(r_rope_ext, &a, sizeof(a)); }

/* f32 out (in place: gemma's post-norms, captured with the layer) */
struct a_norm32 { float *y; const float *x, *w; int n, d; float e; };
static void r_norm32(void *p) { struct a_norm32 *a = p; norm(a->y, NULL, a->x, a->w, a->n, a->d, a->e); }
int medha_k_rmsnorm_f32(float *y, const float *x, const float *w, int n, int d, float e, cudaStream_t s)
{ struct a_norm32 a = {y, x, w, n, d, e}; (void)s; return launch(r_norm32, &a, sizeof(a)); }

struct a_heads { float *x; int rs, n, nh, hd; const float *w; float e; };
static void r_heads(void *p) { struct a_heads *a = p; do_heads(a->x, a->rs, a->n, a->nh, a->hd, a->w, a->e); }
int medha_k_rmsnorm_heads(float *x, int rs, int n, int nh, int hd, const float *w, float e, cudaStream_t s)
{ struct a_heads a = {x, rs, n, nh, hd, w, e}; (void)s; if (rs < nh * hd) return cudaErrorInvalidValue; return launch(r_heads, &a, sizeof(a)); }

struct a_bias { float *x; int rs, n; const float *b; int w; };
static void r_bias(void *p) { struct a_bias *a = p; do_bias(a->x, a->rs, a->n, a->b, a->w); }
int medha_k_bias_add(float *x, int rs, int n, const float *b, int w, cudaStream_t s)
{ struct a_bias a = {x, rs, n, b, w}; (void)s; if (rs < w) return cudaErrorInvalidValue; return launch(r_bias, &a, sizeof(a)); }

struct a_temp { float *x; int rs, n, w; const int64_t *pos; float sc; int fl; };
static void r_temp(void *p)
{
	struct a_temp *a = p;
	for (int t = 0; t < a->n; t++) {
		const double f = log(floor((a->pos[t] + 1.0) / a->fl) + 1.0) * a->sc + 1.0;
		for (int c = 0; c < a->w; c++) a->x[(size_t)t*a->rs+c] = (float)(a->x[(size_t)t*a->rs+c] * f);
	}
}
int medha_k_attn_temp(float *x, int rs, int n, int w, const int64_t *pos, float sc, int fl, cudaStream_t s)
{ struct a_temp a = {x, rs, n, w, pos, sc, fl}; (void)s; if (rs < w || fl < 1) return cudaErrorInvalidValue; return launch(r_temp, &a, sizeof(a)); }

struct a_scale { float *x; int64_t n; float s, cap; };
static void r_scale(void *p) { struct a_scale *a = p; do_scale(a->x, a->n, a->s, a->cap); }
int medha_k_scale(float *x, int64_t n, float sc, cudaStream_t s)
{ struct a_scale a = {x, n, sc, 0}; (void)s; return launch(r_scale, &a, sizeof(a)); }
int medha_k_softcap(float *x, int64_t n, float cap, cudaStream_t s)
{ struct a_scale a = {x, n, 1.0f / cap, cap}; (void)s; if (!(cap > 0)) return cudaErrorInvalidValue; return launch(r_scale, &a, sizeof(a)); }

struct a_geglu { uint16_t *y; const float *g; int gs; const float *u; int us, n, ff; };
static void r_geglu(void *p) { struct a_geglu *a = p; do_geglu(a->y, a->g, a->gs, a->u, a->us, a->n, a->ff); }
int medha_k_geglu(uint16_t *y, const float *g, int gs, const float *u, int us, int n, int ff, cudaStream_t s)
{ struct a_geglu a = {y, g, gs, u, us, n, ff}; (void)s; return launch(r_geglu, &a, sizeof(a)); }

struct a_add { float *x; const float *y; int64_t n; };
static void r_add(void *p) { struct a_add *a = p; do_add(a->x, a->y, a->n, 0); }
int medha_k_add(float *x, const float *y, int64_t n, cudaStream_t s)
{ struct a_add a = {x, y, n}; (void)s; return launch(r_add, &a, sizeof(a)); }

struct a_kv { struct medha_k_kv_layer kv; struct medha_k_seqs s; const float *k; int ks; const float *v; int vs; };
static void r_kv(void *p) { struct a_kv *a = p; do_kv_append(&a->kv, &a->s, a->k, a->ks, a->v, a->vs, 0); }
int medha_k_kv_append(const struct medha_k_kv_layer *kv, const struct medha_k_seqs *s, const float *k, int ks, const float *v, int vs, cudaStream_t st)
{ struct a_kv a = {*kv, *s, k, ks, v, vs}; (void)st; if (ks < kv->n_kv_heads * kv->head_dim || vs < kv->n_kv_heads * kv->head_dim) return cudaErrorInvalidValue; return launch(r_kv, &a, sizeof(a)); }

/* the attention's plan: which batch it was made for (its workspace,
   descriptors and shape), and counts, said at exit (cuda-mock.sh: one
   plan per forward pass, not per layer); per thread: backend_cuda_test
   runs TP and KVP pairs on two */
struct a_plan { const void *work; const int32_t *q_start; int n_seqs, n_tokens, n_heads; };
static _Thread_local struct a_plan planned;
static int n_plans, n_attn, n_own_plan;
static void
plan_counts(void)
{
	printf("mock: %d attention plans, %d attention calls (%d made their own)\n",
	    n_plans, n_attn, n_own_plan);
}
static void r_plan(void *p) { planned = *(struct a_plan *)p; __atomic_fetch_add(&n_plans, 1, __ATOMIC_RELAXED); }
static int attn_bad(const struct medha_k_attn *at)
{ return at->work == NULL || at->work_len < 64 || (at->out == NULL) == (at->out_f32 == NULL) || at->qs < at->n_heads * at->kv->head_dim; }
int medha_k_attn_plan(const struct medha_k_attn *at, cudaStream_t st)
{
	struct a_plan a = {at->work, at->s->q_start, at->s->n_seqs, at->s->n_tokens, at->n_heads};
	static int once;
	(void)st;
	if (attn_bad(at))
		return cudaErrorInvalidValue;
	if (!once++)
		atexit(plan_counts);
	return launch(r_plan, &a, sizeof(a));
}

struct a_attn { struct medha_k_attn a; struct medha_k_kv_layer kv; struct medha_k_seqs s; };
static void r_attn(void *p)
{
	struct a_attn *a = p;
	__atomic_fetch_add(&n_attn, 1, __ATOMIC_RELAXED);
	if (!a->a.planned)
		__atomic_fetch_add(&n_own_plan, 1, __ATOMIC_RELAXED);
	else if (planned.work != a->a.work || planned.q_start != a->s.q_start || planned.n_seqs != a->s.n_seqs ||
	    planned.n_tokens != a->s.n_tokens || planned.n_heads != a->a.n_heads) {
		fprintf(stderr, "MOCK: a planned attention without its batch's plan (%p %p %d %d %d; planned %p %p %d %d %d)\n", a->a.work, (const void *)a->s.q_start, a->s.n_seqs, a->s.n_tokens, a->a.n_heads, planned.work, (const void *)planned.q_start, planned.n_seqs, planned.n_tokens, planned.n_heads);
		abort();
	}
	a->a.kv = &a->kv; a->a.s = &a->s; do_attn(&a->a, 0);
}
int medha_k_attn(const struct medha_k_attn *at, cudaStream_t st)
{
	struct a_attn a = {*at, *at->kv, *at->s};
	(void)st;
	if (attn_bad(at))
		return cudaErrorInvalidValue;
	return launch(r_attn, &a, sizeof(a));
}

struct a_gather { float *y; const float *x; const int32_t *r; int n, d; };
static void r_gather(void *p) { struct a_gather *a = p; do_gather_rows(a->y, a->x, a->r, a->n, a->d, 0); }
int medha_k_gather_rows(float *y, const float *x, const int32_t *r, int n, int d, cudaStream_t s)
{ struct a_gather a = {y, x, r, n, d}; (void)s; return launch(r_gather, &a, sizeof(a)); }

struct a_argmax { int32_t *ids; const float *l; int n, v; };
static void r_argmax(void *p) { struct a_argmax *a = p; do_argmax(a->ids, a->l, a->n, a->v, 0); }
int medha_k_argmax(int32_t *ids, const float *l, int n, int v, cudaStream_t s)
{ struct a_argmax a = {ids, l, n, v}; (void)s; return launch(r_argmax, &a, sizeof(a)); }

/* ---- a mixture of experts (kernels/moe.cu's contract): sums in f64,
   the sort stable (token order within an expert) ---- */

int
medha_k_moe_tiles(int n, int ne, int k)
{
	int64_t nk = (int64_t)n * k;

	return (int)((nk + MEDHA_K_MOE_BM - 1) / MEDHA_K_MOE_BM + (nk < ne ? nk : ne));
}

static int moe_bad(const struct medha_k_moe *m)
{ return m->ne < 1 || m->k < 1 || m->k > MEDHA_K_MOE_KMAX || m->k > m->ne; }

struct a_mlogits { float *o; const float *x, *w; int n, rows, dim; };
static void r_mlogits(void *p)
{
	struct a_mlogits *a = p;
	for (int t = 0; t < a->n; t++) for (int r = 0; r < a->rows; r++) {
		double s = 0;
		for (int c = 0; c < a->dim; c++) s += (double)a->x[(size_t)t*a->dim+c] * a->w[(size_t)r*a->dim+c];
		a->o[(size_t)t*a->rows+r] = (float)s;
	}
}
int medha_k_moe_logits(float *o, const float *x, const float *w, int n, int rows, int dim, cudaStream_t s)
{ struct a_mlogits a = {o, x, w, n, rows, dim}; (void)s; if (n < 0 || rows < 1 || dim < 1) return cudaErrorInvalidValue; return launch(r_mlogits, &a, sizeof(a)); }

struct a_route { struct medha_k_moe m; const float *l; int ls, n; };
static void r_route(void *p)
{
	struct a_route *a = p;
	const struct medha_k_moe *m = &a->m;
	for (int t = 0; t < a->n; t++) {
		const float *x = a->l + (size_t)t * a->ls;
		double pr[4096], mx = -INFINITY, z = 0, s = 0;
		int *sel = m->sel + (size_t)t * m->k, j;
		for (int e = 0; e < m->ne; e++) mx = x[e] > mx ? x[e] : mx;
		for (int e = 0; e < m->ne; e++) z += exp(x[e] - mx);
		for (int e = 0; e < m->ne; e++) pr[e] = m->sigmoid ? 1 / (1 + exp(-(double)x[e])) : exp(x[e] - mx) / z;
		for (j = 0; j < m->k; j++) { /* the best not taken, ties to the lower */
			int b = -1;
			for (int e = 0; e < m->ne; e++) {
				int taken = 0;
				for (int i = 0; i < j; i++) taken |= sel[i] == e;
				if (!taken && (b < 0 || (m->by_logit ? x[e] > x[b] : pr[e] > pr[b]))) b = e;
			}
			sel[j] = b;
			s += pr[b];
		}
		for (j = 0; j < m->k; j++) m->wt[(size_t)t*m->k+j] = (float)(pr[sel[j]] / (m->norm_w ? (s > 6.103515625e-5 ? s : 6.103515625e-5) : 1));
		if (m->gsh) m->gsh[t] = (float)(1 / (1 + exp(-(double)x[m->ne])));
	}
}
int medha_k_moe_route(const struct medha_k_moe *m, const float *l, int ls, int n, cudaStream_t s)
{ struct a_route a = {*m, l, ls, n}; (void)s; if (n < 0 || moe_bad(m) || m->ne > 4096 || ls < m->ne + (m->gsh != NULL)) return cudaErrorInvalidValue; return launch(r_route, &a, sizeof(a)); }

struct a_msort { struct medha_k_moe m; int n; };
static void r_msort(void *p)
{
	struct a_msort *a = p;
	const struct medha_k_moe *m = &a->m;
	const int nk = a->n * m->k, nt = medha_k_moe_tiles(a->n, m->ne, m->k);
	int r = 0, tl = 0;
	for (int e = 0; e < m->ne; e++) {
		m->off[e] = r;
		for (int i = 0; i < nk; i++) if (m->sel[i] == e) { m->row[i] = r; m->src[r++] = i; }
		for (int q = m->off[e]; q < r; q += MEDHA_K_MOE_BM, tl++) {
			m->tiles[3*tl] = e; m->tiles[3*tl+1] = q; m->tiles[3*tl+2] = q + MEDHA_K_MOE_BM < r ? q + MEDHA_K_MOE_BM : r;
		}
	}
	m->off[m->ne] = r;
	for (; tl < nt; tl++) m->tiles[3*tl] = -1;
}
int medha_k_moe_sort(const struct medha_k_moe *m, int n, cudaStream_t s)
{ struct a_msort a = {*m, n}; (void)s; if (n < 0 || moe_bad(m)) return cudaErrorInvalidValue; return launch(r_msort, &a, sizeof(a)); }

struct a_mgather { uint16_t *xg; const uint16_t *x; int ldx, dim; struct medha_k_moe m; int n, scale; };
static void r_mgather(void *p)
{
	struct a_mgather *a = p;
	for (int r = 0; r < a->n * a->m.k; r++) {
		const int tj = a->m.src[r];
		for (int c = 0; c < a->dim; c++) {
			uint16_t v = a->x[(size_t)(tj / a->m.k) * a->ldx + c];
			a->xg[(size_t)r*a->dim+c] = a->scale ? tobf(bf(v) * a->m.wt[tj]) : v;
		}
	}
}
int medha_k_moe_gather(uint16_t *xg, const uint16_t *x, int ldx, int dim, const struct medha_k_moe *m, int n, int scale, cudaStream_t s)
{ struct a_mgather a = {xg, x, ldx, dim, *m, n, scale}; (void)s; if (n < 0 || dim < 1 || ldx < dim || moe_bad(m)) return cudaErrorInvalidValue; return launch(r_mgather, &a, sizeof(a)); }

struct a_mgemm { float *y; int ldy; const uint16_t *x; int ldx; const uint16_t *w; int64_t we; int N, K; const int32_t *tiles; int nt; };
static void r_mgemm(void *p)
{
	struct a_mgemm *a = p;
	for (int t = 0; t < a->nt; t++) {
		const int32_t *tl = a->tiles + 3 * t;
		if (tl[0] < 0) continue;
		const uint16_t *W = a->w + (int64_t)tl[0] * a->we;
		for (int r = tl[1]; r < tl[2]; r++) for (int j = 0; j < a->N; j++) {
			double s = 0;
			for (int c = 0; c < a->K; c++) s += (double)bf(a->x[(size_t)r*a->ldx+c]) * bf(W[(size_t)j*a->K+c]);
			a->y[(size_t)r*a->ldy+j] = (float)s;
		}
	}
}
int medha_k_moe_gemm(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int64_t we, int N, int K, const int32_t *tiles, int nt, cudaStream_t s)
{ struct a_mgemm a = {y, ldy, x, ldx, w, we, N, K, tiles, nt}; (void)s; if (N < 1 || K < 1 || ldy < N || ldx < K || we < (int64_t)N * K || nt < 0) return cudaErrorInvalidValue; return launch(r_mgemm, &a, sizeof(a)); }

struct a_msum { float *o; int add; const float *ys; int dim; struct medha_k_moe m; int n, weighted; const float *sh; };
static void r_msum(void *p)
{
	struct a_msum *a = p;
	const struct medha_k_moe *m = &a->m;
	for (int t = 0; t < a->n; t++) for (int c = 0; c < a->dim; c++) {
		double s = 0;
		for (int j = 0; j < m->k; j++) {
			const size_t tj = (size_t)t * m->k + j;
			s += (double)a->ys[(size_t)m->row[tj]*a->dim+c] * (a->weighted ? m->wt[tj] : 1);
		}
		if (a->sh) s += (double)a->sh[(size_t)t*a->dim+c] * (m->gsh ? m->gsh[t] : 1);
		float *o = a->o + (size_t)t * a->dim + c;
		*o = a->add ? (float)(*o + s) : (float)s;
	}
}
int medha_k_moe_sum(float *o, int add, const float *ys, int dim, const struct medha_k_moe *m, int n, int weighted, const float *sh, cudaStream_t s)
{ struct a_msum a = {o, add, ys, dim, *m, n, weighted, sh}; (void)s; if (n < 0 || dim < 1 || moe_bad(m)) return cudaErrorInvalidValue; return launch(r_msum, &a, sizeof(a)); }
