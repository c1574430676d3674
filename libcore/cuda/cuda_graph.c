/*
 * cuda_graph.c: decode steps replayed from CUDA graphs. A Llama
 * decode step is some 300 launches; at several microseconds each, eager
 * launching costs as much as reading the weights. A step whose every
 * sequence has one token (and merges nothing) is captured once per
 * (sequences, logits rows, layers, KV bucket) and replayed: the graph
 * reads the batch's descriptors from the device buffer the step's
 * descriptors are copied into before each replay (its address fixed
 * while the graph lives), so the replay sees this step's positions,
 * block tables and tokens. The KV bucket (a power of two, at least 256)
 * is the max_kv the kernels size their grids and workspace for: a step
 * whose longest context passes it captures a new graph.
 *
 * A key's first step runs eagerly, its second is captured: what
 * connects or chooses lazily on its first use (NCCL's connections for
 * an all-reduce of a new size, with NCCL_RUNTIME_CONNECT, which a
 * capture cannot take; cuBLASLt's heuristic) does so outside a capture.
 * A capture that fails (cudaStreamBeginCapture, a launch inside it,
 * cudaStreamEndCapture or cudaGraphInstantiate) costs that step nothing
 * but the attempt: it runs eagerly, its key is kept as refused (never
 * captured again, never evicted) and the failure is said once, on
 * stderr ("medha: cuda: fallback: ..."); when every slot holds a refused
 * key, graphs are turned off.
 *
 * An SPP stage's hidden states are copied in before the replay and out
 * after it. Not captured: TP over the host collectives (they wait on
 * the host), KVP merges, timed calls (profilers: their events are
 * recorded eagerly), and anything when MEDHA_CUDA_GRAPHS=0.
 *
 * Also here: a timed call's events (cudaEvent pairs around attention,
 * each KVP merge and the head, summed after the call).
 */
#include "cuda/cuda_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The graphs dropped (their buffers moved, a communicator aborted), and
   the keys seen (a new communicator connects anew); the refused keys
   stay refused. */
void
cuda_graph_free(struct medha_cuda *c)
{
	for (int i = 0; i < CUDA_GRAPHS; i++) {
		if (c->rt.g[i].used == CUDA_G_CAPTURED)
			cudaGraphExecDestroy(c->rt.g[i].exec);
		if (c->rt.g[i].used != CUDA_G_REFUSED)
			c->rt.g[i].used = CUDA_G_FREE;
	}
}

/* The slot of this step's key (*hit set), or a free (or the oldest
   captured) slot, or NULL when every slot holds a refused key. */
static struct cuda_graph *
find(struct medha_cuda *c, const struct medha_cuda_call *f, int nrows,
    int64_t cap, int *hit)
{
	struct cuda_graph *old = NULL;

	*hit = 0;
	for (int i = 0; i < CUDA_GRAPHS; i++) {
		struct cuda_graph *g = &c->rt.g[i];
		if (g->used != CUDA_G_FREE && g->n_seqs == f->b->n_seqs &&
		    g->nrows == nrows && g->lo == f->layer_lo &&
		    g->hi == f->layer_hi && g->kv_cap == cap) {
			*hit = 1;
			return g;
		}
		if (g->used == CUDA_G_REFUSED)
			continue;
		if (old == NULL || g->used == CUDA_G_FREE ||
		    (old->used != CUDA_G_FREE && g->last < old->last))
			old = g;
	}
	if (old != NULL && old->used == CUDA_G_CAPTURED)
		cudaGraphExecDestroy(old->exec);
	if (old != NULL)
		old->used = CUDA_G_FREE;
	return old;
}

/* Capture the step into g (c->s.desc built at its bucket): 0, or a
   capture's failure in why (nothing ran; the stream is usable). */
static int
capture(struct medha_cuda *c, const struct medha_cuda_call *f, int nrows,
    struct cuda_graph *g, char *why, size_t whylen)
{
	cudaGraph_t graph = NULL;
	cudaError_t e;
	int rc;

	if ((rc = cuda_ok(cudaStreamBeginCapture(c->st,
	                      cudaStreamCaptureModeThreadLocal),
	         "cudaStreamBeginCapture", why, whylen)) != 0)
		return rc;
	c->rt.capturing = 1;
	rc = cuda_run_layers(c, f, nrows, why, whylen);
	c->rt.capturing = 0;
	e = cudaStreamEndCapture(c->st, &graph);
	if (rc != 0 || e != cudaSuccess) {
		if (graph != NULL)
			cudaGraphDestroy(graph);
		(void)cudaGetLastError(); /* the capture's error, not sticky */
		return rc != 0 ? rc : cuda_err(why, whylen, e,
		    "cudaStreamEndCapture");
	}
	e = cudaGraphInstantiate(&g->exec, graph, 0);
	cudaGraphDestroy(graph);
	return cuda_ok(e, "cudaGraphInstantiate", why, whylen);
}

/* The key of f in g: seen, refused (said once), or captured. */
static void
keep(const struct medha_cuda_call *f, int nrows, int64_t cap,
    struct cuda_graph *g, int state, const char *err)
{
	g->used = state;
	g->n_seqs = f->b->n_seqs;
	g->nrows = nrows;
	g->lo = f->layer_lo;
	g->hi = f->layer_hi;
	g->kv_cap = cap;
	if (state == CUDA_G_REFUSED)
		fprintf(stderr, "medha: cuda: fallback: the decode step of %d "
		    "sequences (%d logits rows, layers %d to %d, KV bucket "
		    "%lld) was not captured: %s; it runs eagerly, never "
		    "captured again (said once)\n",
		    g->n_seqs, nrows, g->lo, g->hi - 1, (long long)cap, err);
}

/*
 * Run decode step f from a graph if it can be (*done set), else leave
 * it to the eager path (*done 0): an error only where the eager path
 * would fail too (the descriptors, the workspace, a replay's launch).
 */
int
cuda_graph_step(struct medha_cuda *c, const struct medha_cuda_call *f,
    int nrows, int *done, char *why, size_t whylen)
{
	struct cuda_graph *g;
	int64_t max_kv = 0, cap = 256;
	int hit, rc;

	*done = 0;
	if (c->tp > 1 && c->lib.nccl == NULL)
		return 0;
	for (int i = 0; i < f->b->n_seqs; i++) {
		int64_t k = cuda_keys_of(c, f, i);
		if (k > max_kv)
			max_kv = k;
	}
	while (cap < max_kv)
		cap *= 2;
	if ((rc = cuda_desc_build(c, f, cap, why, whylen)) != 0)
		return rc;
	/* the workspace may move (and free the graphs) before the find */
	if ((rc = cuda_attn_work(c, why, whylen)) != 0)
		return rc;
	if ((g = find(c, f, nrows, cap, &hit)) == NULL) {
		fprintf(stderr, "medha: cuda: fallback: %d decode steps' "
		    "captures failed: graphs off\n", CUDA_GRAPHS);
		c->rt.graphs = 0;
		return 0;
	}
	if (hit && g->used == CUDA_G_REFUSED)
		return 0;
	if (!hit) { /* its first step: eager */
		keep(f, nrows, cap, g, CUDA_G_SEEN, NULL);
		g->last = ++c->rt.gclock;
		return 0;
	}
	if (g->used == CUDA_G_SEEN) {
		char err[256];
		if ((rc = capture(c, f, nrows, g, err, sizeof(err))) != 0) {
			/* a communicator given up inside it fails the step
			   (its peers' fail too), and the key stays */
			if (c->tp > 1 && c->use_nccl &&
			    c->lib.nccl == NULL)
				return medha_why(why, whylen, rc, "%s", err);
			keep(f, nrows, cap, g, CUDA_G_REFUSED, err);
			return 0;
		}
		keep(f, nrows, cap, g, CUDA_G_CAPTURED, NULL);
	}
	g->last = ++c->rt.gclock;
	/* an SPP stage's hidden states: in place before the replay (the
	   graph starts at its first layer, with no embedding) */
	if ((rc = cuda_upload_h(c, f, why, whylen)) != 0)
		return rc;
	if ((rc = cuda_ok(cudaGraphLaunch(g->exec, c->st), "cudaGraphLaunch",
	         why, whylen)) != 0)
		return rc;
	*done = 1;
	return 0;
}

/* ---- where a timed call's time goes ---- */

/*
 * Record the next event of a timed call (a pair's start or end; kind
 * says what the pair timed): nothing when the call is not timed.
 */
int
cuda_mark(struct medha_cuda *c, int kind, char *why, size_t whylen)
{
	int rc;

	if (!c->rt.timing)
		return 0;
	if (c->rt.n_ev == c->rt.ev_cap) {
		int cap = c->rt.ev_cap > 0 ? 2 * c->rt.ev_cap : 64;
		void *e = realloc(c->rt.ev, sizeof(*c->rt.ev) * (size_t)cap);
		void *k = e != NULL ? realloc(c->rt.ev_kind,
		                          sizeof(int) * (size_t)cap) : NULL;
		if (e != NULL)
			c->rt.ev = e;
		if (k == NULL)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		c->rt.ev_kind = k;
		for (int i = c->rt.ev_cap; i < cap; i++) {
			if ((rc = cuda_ok(cudaEventCreate(&c->rt.ev[i]),
			         "cudaEventCreate", why, whylen)) != 0)
				return rc;
			c->rt.ev_cap = i + 1;
		}
	}
	c->rt.ev_kind[c->rt.n_ev] = kind;
	return cuda_ok(cudaEventRecord(c->rt.ev[c->rt.n_ev++], c->st),
	    "cudaEventRecord", why, whylen);
}

/* The timed pairs' sums into t (after the stream is synchronized). */
int
cuda_times(struct medha_cuda *c, struct medha_cuda_times *t, char *why,
    size_t whylen)
{
	double s[3] = {0, 0, 0};
	float ms;
	int rc;

	for (int i = 0; i + 1 < c->rt.n_ev; i += 2) {
		if ((rc = cuda_ok(cudaEventElapsedTime(&ms, c->rt.ev[i],
		                      c->rt.ev[i + 1]),
		         "cudaEventElapsedTime", why, whylen)) != 0)
			return rc;
		s[c->rt.ev_kind[i]] += ms * 1e-3;
	}
	t->attn = s[0];
	t->merge = s[1];
	t->head = s[2];
	t->split = 1;
	c->rt.n_ev = 0;
	return 0;
}

void
cuda_events_free(struct medha_cuda *c)
{
	for (int i = 0; i < c->rt.ev_cap; i++)
		cudaEventDestroy(c->rt.ev[i]);
	free(c->rt.ev);
	free(c->rt.ev_kind);
	c->rt.ev = NULL;
	c->rt.ev_kind = NULL;
	c->rt.ev_cap = c->rt.n_ev = 0;
}
