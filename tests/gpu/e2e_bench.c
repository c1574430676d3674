/*
 * e2e_bench.c: the cuda backend end to end on a random Llama-3-8B (bf16
 * weights generated on the GPU, tp 1; issue 26, acceptance 4): an
 * 8K-token prefill (tok/s, TFLOP/s, % of 715, the H200's measured bf16
 * GEMM rate), one sequence's greedy decode (tok/s, % of the weight-read
 * floor: weight bytes / 4.3 TB/s, the measured copy rate), and 8 and 32
 * concurrent decodes; each with decode graphs off (eager) and on, and
 * with cuBLASLt's per-size algorithms (MEDHA_CUDA_GEMM=fast) where
 * --fast is given. Prints one table. Then what the backend interface's
 * host memory costs (issue 26: hidden states cross it in host memory):
 * 32 decodes and one 4K-token chunk run as one call, and as two calls
 * that meet in host memory at the middle layer (h_out, then h_in: two
 * SPP stages in one process, less the network), with a pageable and a
 * pinned host buffer.
 *
 *	build/tests/gpu/e2e_bench [--model NAME] [--steps N] [--prefill N]
 *	    [--ctx N] [--fast]
 *
 * Exits 77 with "skip: no CUDA device (...)" without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "engine/backend.h"
#include "model/sample.h"
#include "sched/pred.h"

#define GEMM_PEAK 715e12 /* bf16 GEMM 8192^3 on the H200, PyTorch */
#define COPY_BW 4.30e12  /* device-to-device copy, bytes/s */
static const char *model = "llama3-8b";
static int steps = 64;     /* decode steps timed */
static int ptok = 8192;    /* the timed prefill's tokens */
static int ctx = 512;      /* each decoding sequence's prompt */

struct row {
	const char *mode;
	double prefill_s, dec1, dec8, dec32; /* s; tok/s */
};

static void
die(const char *what, const char *why)
{
	fprintf(stderr, "e2e_bench: %s: %s\n", what, why);
	exit(1);
}

static void
run(struct medha_backend *be, const struct medha_batch *b,
    struct medha_sampler **sp, int32_t *ids)
{
	struct medha_fwd f = {.b = b, .layer_lo = 0,
	    .layer_hi = be->info.shape.n_layers, .samplers = sp,
	    .tokens = ids};
	char why[512];

	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
		die("forward", why);
}

/* Prefill n random tokens on a fresh sequence in one call; seconds. */
static double
prefill(struct medha_backend *be, int n, int *seq)
{
	int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), id;
	struct medha_sampler *sp;
	double t;

	medha_sampler_init(&sp, &medha_sampling_greedy, be->info.shape.vocab);
	for (int i = 0; i < n; i++)
		tok[i] = (int32_t)((i * 7919u + 13) % 32000u);
	if (medha_backend_seq_alloc(be, seq) != 0)
		die("prefill", "no sequence");
	struct medha_batch_seq s = {*seq, 0, n, MEDHA_LOGITS_LAST};
	struct medha_batch b = {tok, n, &s, 1};
	t = medha_now();
	run(be, &b, &sp, &id);
	t = medha_now() - t;
	medha_sampler_free(sp);
	free(tok);
	return t;
}

/* ns sequences of ctx tokens each decode `steps` greedy steps together;
   tokens per second. */
static double
decode(struct medha_backend *be, int ns)
{
	struct medha_sampler **sp = calloc((size_t)ns, sizeof(*sp));
	struct medha_batch_seq *s = calloc((size_t)ns, sizeof(*s));
	int32_t *tok = calloc((size_t)ns, sizeof(int32_t));
	int32_t *ids = calloc((size_t)ns, sizeof(int32_t));
	int *seq = calloc((size_t)ns, sizeof(int));
	double t = 0;

	for (int i = 0; i < ns; i++) {
		prefill(be, ctx, &seq[i]);
		medha_sampler_init(&sp[i], &medha_sampling_greedy,
		    be->info.shape.vocab);
		s[i] = (struct medha_batch_seq){seq[i], ctx, 1,
		    MEDHA_LOGITS_LAST};
		tok[i] = (int32_t)(i + 1);
	}
	for (int k = 0; k < steps + 3; k++) {
		struct medha_batch b = {tok, ns, s, ns};
		if (k == 3)
			t = medha_now(); /* after the warm-up (captures) */
		run(be, &b, sp, ids);
		for (int i = 0; i < ns; i++) {
			tok[i] = ids[i];
			s[i].pos++;
		}
	}
	t = medha_now() - t;
	for (int i = 0; i < ns; i++) {
		medha_sampler_free(sp[i]);
		medha_backend_seq_free(be, seq[i]);
	}
	free(sp), free(s), free(tok), free(ids), free(seq);
	return (double)ns * steps / t;
}

static struct medha_backend *open_be(const char *graphs, const char *gemm);

/* One step of b: the whole model in one call (h NULL), or layers
   [0, L/2) to host memory h and [L/2, L) from it. */
static void
step_via(struct medha_backend *be, const struct medha_batch *b,
    struct medha_sampler **sp, int32_t *ids, float *h)
{
	const int L = be->info.shape.n_layers;
	struct medha_fwd f = {.b = b, .layer_lo = 0, .layer_hi = L / 2,
	    .h_out = h};
	struct medha_fwd g = {.b = b, .layer_lo = L / 2, .layer_hi = L,
	    .h_in = h, .samplers = sp, .tokens = ids};
	char why[512];

	if (h == NULL) {
		run(be, b, sp, ids);
		return;
	}
	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0 ||
	    medha_backend_forward(be, &g, why, sizeof(why)) != 0)
		die("forward in two halves", why);
}

/* Seconds a step of ns decodes (ns > 0) or of one chunk of n tokens
   takes, by way of h (NULL: one call). */
static double
hop_time(struct medha_backend *be, int ns, int n, float *h)
{
	const int reps = ns > 0 ? steps : 3;
	const int nt = ns > 0 ? ns : n, nq = ns > 0 ? ns : 1;
	struct medha_sampler **sp = calloc((size_t)nq, sizeof(*sp));
	struct medha_batch_seq *s = calloc((size_t)nq, sizeof(*s));
	int32_t *tok = calloc((size_t)nt, sizeof(int32_t));
	int32_t *ids = calloc((size_t)nq, sizeof(int32_t));
	int *seq = calloc((size_t)nq, sizeof(int));
	double t = 0;

	for (int i = 0; i < nt; i++)
		tok[i] = (int32_t)((i * 7919u + 5) % 32000u);
	for (int i = 0; i < nq; i++) {
		medha_sampler_init(&sp[i], &medha_sampling_greedy,
		    be->info.shape.vocab);
		if (ns > 0)
			prefill(be, ctx, &seq[i]);
		s[i] = (struct medha_batch_seq){seq[i], ns > 0 ? ctx : 0,
		    ns > 0 ? 1 : n, MEDHA_LOGITS_LAST};
	}
	for (int k = 0; k < reps + 2; k++) {
		struct medha_batch b = {tok, nt, s, nq};
		if (ns == 0 && medha_backend_seq_alloc(be, &s[0].seq) != 0)
			die("hop", "no sequence");
		if (k == 2)
			t = medha_now(); /* after the warm-up (captures) */
		step_via(be, &b, sp, ids, h);
		if (ns == 0)
			medha_backend_seq_free(be, s[0].seq);
		for (int i = 0; ns > 0 && i < ns; i++) {
			tok[i] = ids[i];
			s[i].pos++;
		}
	}
	t = (medha_now() - t) / reps;
	for (int i = 0; i < nq; i++) {
		medha_sampler_free(sp[i]);
		if (ns > 0)
			medha_backend_seq_free(be, seq[i]);
	}
	free(sp), free(s), free(tok), free(ids), free(seq);
	return t;
}

/* The interface's hop through host memory, at 32 decodes and a chunk
   of 4096 tokens: one line each. */
static void
hops(void)
{
	struct medha_backend *be = open_be("1", NULL);
	const int d = be->info.shape.dim, chunk = ptok < 4096 ? ptok : 4096;
	const size_t bytes = sizeof(float) * (size_t)chunk * (size_t)d;
	float *pageable = malloc(bytes), *pinned = NULL;

	if (pageable == NULL ||
	    cudaMallocHost((void **)&pinned, bytes) != cudaSuccess)
		die("hop", "no host buffers");
	for (int c = 0; c < 2; c++) {
		int ns = c == 0 ? 32 : 0, n = c == 0 ? 0 : chunk;
		double one = hop_time(be, ns, n, NULL);
		double pg = hop_time(be, ns, n, pageable);
		double pn = hop_time(be, ns, n, pinned);
		printf("hop, %d %s: one call %.3f ms; two halves through "
		       "host memory %.3f ms pageable (%+.1f%%), %.3f ms "
		       "pinned (%+.1f%%); %.2f MB each way\n",
		    c == 0 ? ns : n, c == 0 ? "decodes" : "tokens of a chunk",
		    one * 1e3, pg * 1e3, 100 * (pg - one) / one, pn * 1e3,
		    100 * (pn - one) / one,
		    (double)(ns > 0 ? ns : n) * d * 4 / 1e6);
	}
	cudaFreeHost(pinned);
	free(pageable);
	medha_backend_close(be);
}

static struct medha_backend *
open_be(const char *graphs, const char *gemm)
{
	struct medha_backend_params p = {.model = model, .kv_blocks = 4096,
	    .max_seqs = 64, .seed = 1};
	struct medha_backend *be;
	char why[512];

	setenv("MEDHA_CUDA_GRAPHS", graphs, 1);
	if (gemm != NULL)
		setenv("MEDHA_CUDA_GEMM", gemm, 1);
	else
		unsetenv("MEDHA_CUDA_GEMM");
	if (medha_backend_open(&be, "cuda", &p, why, sizeof(why)) != 0)
		die(model, why);
	return be;
}

/* Weight bytes a decode step reads: the layers and the output matrix. */
static double
weight_bytes(const struct medha_model_config *c)
{
	double qd = (double)c->n_heads * c->head_dim;
	double kvd = (double)c->n_kv_heads * c->head_dim;
	double layer = (double)c->dim * (qd + 2 * kvd) + qd * c->dim +
	    3.0 * c->dim * c->ffn_dim;

	return 2 * (layer * c->n_layers + (double)c->vocab * c->dim);
}

/* FLOPs of a prefill of n tokens (linear layers, causal attention,
   one row of logits). */
static double
prefill_flops(const struct medha_model_config *c, double n)
{
	double qd = (double)c->n_heads * c->head_dim;
	double kvd = (double)c->n_kv_heads * c->head_dim;
	double layer = (double)c->dim * (qd + 2 * kvd) + qd * c->dim +
	    3.0 * c->dim * c->ffn_dim;

	return 2 * n * layer * c->n_layers + 2.0 * c->n_layers * qd * n * n +
	    2.0 * c->vocab * c->dim;
}

static void
measure(struct row *r, const char *mode, const char *graphs, const char *gemm)
{
	struct medha_backend *be = open_be(graphs, gemm);
	int seq;

	r->mode = mode;
	prefill(be, ctx, &seq); /* warm-up: algorithms, first launches */
	medha_backend_seq_free(be, seq);
	r->prefill_s = prefill(be, ptok, &seq);
	medha_backend_seq_free(be, seq);
	r->dec1 = decode(be, 1);
	r->dec8 = decode(be, 8);
	r->dec32 = decode(be, 32);
	medha_backend_close(be);
}

int
main(int argc, char **argv)
{
	struct medha_model_config c = {0};
	struct row rows[3];
	int n = 0, fast = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
			model = argv[++i];
		else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
			steps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--prefill") == 0 && i + 1 < argc)
			ptok = atoi(argv[++i]);
		else if (strcmp(argv[i], "--ctx") == 0 && i + 1 < argc)
			ctx = atoi(argv[++i]);
		else if (strcmp(argv[i], "--fast") == 0)
			fast = 1;
		else {
			fprintf(stderr, "usage: e2e_bench [--model NAME] "
			                "[--steps N] [--prefill N] [--ctx N] "
			                "[--fast]\n");
			return 2;
		}
	}
	if (e != cudaSuccess || n < 1) {
		printf("skip: no CUDA device (%s)\n",
		    e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return 77;
	}
	if (steps < 1 || ptok < 1 || ctx < 1 || ptok > 8192) {
		fprintf(stderr, "e2e_bench: steps, prefill (at most 8192) and "
		                "ctx must be positive\n");
		return 2;
	}
	{
		struct medha_pred_model pm;
		if (medha_model_resolve(model, &pm) != 0)
			die(model, "not a shape name (llama3-8b, ...)");
		c = pm.c;
	}
	measure(&rows[0], "eager", "0", NULL);
	measure(&rows[1], "graphs", "1", NULL);
	if (fast)
		measure(&rows[2], "graphs, fast GEMM", "1", "fast");
	printf("e2e %s (random bf16, tp 1): weights %.2f GB, decode floor "
	       "%.0f tok/s at %.2f TB/s; prefill of %d tokens, %.0f TFLOP/s "
	       "= 100%%; decodes at context %d, %d steps\n",
	    model, weight_bytes(&c) / 1e9, COPY_BW / weight_bytes(&c),
	    COPY_BW / 1e12, ptok, GEMM_PEAK / 1e12, ctx, steps);
	printf("%-18s %10s %8s %6s %10s %6s %10s %10s\n", "mode",
	    "prefill", "TFLOP/s", "%715", "decode1", "%floor", "decode8",
	    "decode32");
	for (int i = 0; i < 2 + fast; i++) {
		const struct row *r = &rows[i];
		double tf = prefill_flops(&c, ptok) / r->prefill_s;
		printf("%-18s %7.0f t/s %8.1f %5.1f%% %6.1f t/s %5.1f%% "
		       "%6.0f t/s %6.0f t/s\n",
		    r->mode, ptok / r->prefill_s, tf / 1e12,
		    100 * tf / GEMM_PEAK, r->dec1,
		    100 * r->dec1 / (COPY_BW / weight_bytes(&c)), r->dec8,
		    r->dec32);
	}
	hops();
	printf("figure: graphs: prefill %.0f%% of the GEMM rate, 1 decode "
	       "%.0f%% of the weight-read floor, 32 decodes %.0f tok/s\n",
	    100 * prefill_flops(&c, ptok) / rows[1].prefill_s / GEMM_PEAK,
	    100 * rows[1].dec1 / (COPY_BW / weight_bytes(&c)), rows[1].dec32);
	return 0;
}
