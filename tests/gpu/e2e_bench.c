/*
 * e2e_bench.c: the cuda backend end to end on a random Llama-3-8B (bf16
 * weights generated on the GPU, tp 1; issue 26, acceptance 4): an
 * 8K-token prefill (tok/s, TFLOP/s, % of 715, the H200's measured bf16
 * GEMM rate), one sequence's greedy decode (tok/s, % of the weight-read
 * floor: weight bytes / 4.3 TB/s, the measured copy rate), and 8 and 32
 * concurrent decodes; each with decode graphs off (eager) and on, and
 * with cuBLASLt's per-size algorithms (MEDHA_CUDA_GEMM=fast) where
 * --fast is given. Prints one table.
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
	return 0;
}
