/*
 * decode-batch.c: the ceiling continuous batching can reach on this
 * machine: the cpu backend alone (no scheduler, no sockets) running
 * batches of N decodes, each of N sequences one token per forward call,
 * as a live worker does when N requests decode together. For each N it
 * runs STEPS (64) forward calls of N decode tokens at positions 8, 9,
 * ... after an 8-token prompt per sequence, logits for every sequence
 * (as a worker samples from), and prints one line per N:
 *
 *	N  tokens/s
 *
 * contrib/bench-live.sh prints it beside the live replica's rates.
 *
 *	decode-batch [-t THREADS] model.gguf N ...
 *
 * Build (after make):
 *	cc -std=c11 -D_GNU_SOURCE -O2 -march=native -iquote libcore \
 *	    -o decode-batch contrib/decode-batch.c build/libmedha.a \
 *	    -ljansson -lzstd -lpcre2-32 -lm -lpthread
 */
#include "engine/backend_cpu.h"

#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROMPT 8 /* prompt tokens per sequence */
#define STEPS 64 /* decode steps per N */
#define MAX_N 64 /* most sequences */

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
forward(struct medha_backend *be, const int32_t *tok, int ntok,
    const struct medha_batch_seq *s, int ns, float *logits)
{
	struct medha_batch b = {tok, ntok, s, ns};
	struct medha_fwd f = {.b = &b,
	    .layer_lo = 0,
	    .layer_hi = be->info.shape.n_layers,
	    .logits = logits};
	char why[256];

	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
		errx(1, "forward: %s", why);
}

static void
usage(void)
{
	fprintf(stderr, "usage: decode-batch [-t THREADS] model.gguf N ...\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	struct medha_backend_cpu_opts o = {.n_threads = 2}; /* -t */
	struct medha_backend *be;
	struct medha_batch_seq s[MAX_N];
	int32_t tok[MAX_N * PROMPT];
	int seq[MAX_N], ns[64], nn = 0, maxn = 0, ch;
	float *logits;
	char why[512];

	while ((ch = getopt(argc, argv, "ht:")) != -1) {
		switch (ch) {
		case 't':
			o.n_threads = atoi(optarg);
			if (o.n_threads < 1 || o.n_threads > 256)
				usage();
			break;
		default: usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 2 || argc - 1 > 64)
		usage();
	for (int i = 1; i < argc; i++) {
		ns[nn] = atoi(argv[i]);
		if (ns[nn] < 1 || ns[nn] > MAX_N)
			usage();
		maxn = ns[nn] > maxn ? ns[nn] : maxn;
		nn++;
	}
	if (medha_backend_cpu_open(&be, argv[0], &o, why, sizeof(why)) != 0)
		errx(1, "%s: %s", argv[0], why);
	if ((logits = calloc((size_t)maxn * be->info.shape.vocab,
	         sizeof(float))) == NULL)
		err(1, "calloc");
	/* every sequence gets its prompt once, one at a time */
	for (int i = 0; i < maxn; i++) {
		if (medha_backend_seq_alloc(be, &seq[i]) != 0)
			errx(1, "no room for %d sequences", maxn);
		for (int j = 0; j < PROMPT; j++)
			tok[j] = 1000 + 97 * i + 13 * j;
		s[0] = (struct medha_batch_seq){.seq = seq[i],
		    .pos = 0,
		    .n_tokens = PROMPT,
		    .logits = MEDHA_LOGITS_LAST};
		forward(be, tok, PROMPT, s, 1, logits);
	}
	for (int k = 0; k < nn; k++) {
		int n = ns[k];
		double t0 = now(), rate;
		for (int step = 0; step < STEPS; step++) {
			for (int i = 0; i < n; i++) {
				tok[i] = 2000 + 31 * i + 7 * step;
				s[i] = (struct medha_batch_seq){.seq = seq[i],
				    .pos = PROMPT + step,
				    .n_tokens = 1,
				    .logits = MEDHA_LOGITS_LAST};
			}
			forward(be, tok, n, s, n, logits);
		}
		rate = (double)n * STEPS / (now() - t0);
		printf("%d %.1f\n", n, rate);
	}
	free(logits);
	medha_backend_close(be);
	if (fclose(stdout) != 0)
		err(1, "stdout");
	return 0;
}
