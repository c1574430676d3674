/*
 * cpu-run.c: a small driver of the CPU backend for checks and timing
 * before medha-worker exists: run a prompt given as token ids through a
 * GGUF model, print the greedy continuation's ids on stdout, optionally
 * write the last prompt position's logits (float32, little-endian, vocab
 * of them) to a file, and report prompt and generation speed on stderr.
 *
 *	cpu-run [-r] [-c chunk] [-k f16|f32] [-l logits.bin] [-n N]
 *	    [-p N] [-t threads] model.gguf [id ...]
 *
 *	-c  prefill chunk size (0: the whole prompt at once)
 *	-k  KV cache type (f32)
 *	-l  write the last prompt position's logits to this file
 *	-n  tokens to generate (16)
 *	-p  use N pseudo-random prompt ids instead of ids (benchmarks)
 *	-r  f32 reference numerics
 *	-t  threads (2)
 *
 * Build (after make):
 *	cc -std=c11 -D_GNU_SOURCE -O2 -march=native -iquote libcore \
 *	    -o cpu-run contrib/cpu-run.c build/libmedha.a -ljansson -lzstd \
 *	    -lpcre2-32 -lm -lpthread
 */
#include <err.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
#include "model/gguf.h"
#include "cpu/kvcache.h"
#include "model/model.h"
#include "model/sample.h"

static void
usage(void)
{
	fprintf(stderr,
	    "usage: cpu-run [-r] [-c chunk] [-k f16|f32] [-l logits.bin] "
	    "[-n N]\n"
	    "               [-p N] [-t threads] model.gguf [id ...]\n");
	exit(2);
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int
main(int argc, char **argv)
{
	struct medha_gguf *g;
	struct medha_model *m;
	struct medha_kvcache *kv;
	struct medha_cpu *cpu;
	struct medha_kv_config kc;
	struct medha_cpu_opts o = {.n_threads = 2};   /* -t */
	int64_t v, nprompt = 0, ngen = 16, chunk = 0; /* -p, -n, -c */
	int kvtype = MEDHA_KV_F32;                    /* -k */
	const char *logpath = NULL;                   /* -l */
	int32_t *tok;
	float *logits;
	char why[512];
	int ch, i, seq, n, c, rc;
	double t0, tp = 0, tg = 0;
	FILE *f;

	while ((ch = getopt(argc, argv, "c:hk:l:n:p:rt:")) != -1) {
		switch (ch) {
		case 'c':
			if (medha_parse_i64(optarg, 0, 1 << 20, &chunk) != 0)
				usage();
			break;
		case 'k':
			if (strcmp(optarg, "f16") == 0)
				kvtype = MEDHA_KV_F16;
			else if (strcmp(optarg, "f32") != 0)
				usage();
			break;
		case 'l': logpath = optarg; break;
		case 'n':
			if (medha_parse_i64(optarg, 0, 1 << 20, &ngen) != 0)
				usage();
			break;
		case 'p':
			if (medha_parse_i64(optarg, 1, 1 << 20, &nprompt) != 0)
				usage();
			break;
		case 'r': o.ref = 1; break;
		case 't':
			if (medha_parse_i64(optarg, 1, MEDHA_THREADS_MAX, &v) !=
			    0)
				usage();
			o.n_threads = (int)v;
			break;
		default: usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1 || (argc < 2 && nprompt == 0))
		usage();
	if ((rc = medha_gguf_open(&g, argv[0], why, sizeof(why))) != 0)
		errx(1, "%s: %s", argv[0], why);
	if ((rc = medha_model_load(&m, g, why, sizeof(why))) != 0)
		errx(1, "%s: %s", argv[0], why);
	if (nprompt == 0)
		nprompt = argc - 1;
	if ((tok = calloc((size_t)(nprompt + ngen + 1), sizeof(*tok))) ==
	        NULL ||
	    (logits = calloc((size_t)m->c.vocab, sizeof(float))) == NULL)
		err(1, "calloc");
	for (i = 0; i < nprompt; i++) {
		if (argc > 1) {
			if (medha_parse_i64(argv[1 + i], 0, m->c.vocab - 1,
			        &v) != 0)
				errx(2, "%s: not a token id below %d",
				    argv[1 + i], m->c.vocab);
			tok[i] = (int32_t)v;
		} else
			tok[i] = (int32_t)((i * 2654435761u) % m->c.vocab);
	}
	kc = (struct medha_kv_config){.n_layers = m->c.n_layers,
	    .n_kv_heads = m->c.n_kv_heads,
	    .head_dim = m->c.head_dim,
	    .n_blocks = (nprompt + ngen) / MEDHA_KV_BLOCK + 2,
	    .type = kvtype,
	    .max_seqs = 1};
	if ((rc = medha_kvcache_init(&kv, &kc)) != 0)
		errx(1, "KV cache: %s", medha_strerror(rc));
	if ((rc = medha_cpu_init(&cpu, m, kv, &o, why, sizeof(why))) != 0)
		errx(1, "%s", why);
	if (medha_kv_seq_alloc(kv, &seq) != 0)
		errx(1, "no sequence");
	fprintf(stderr,
	    "cpu-run: %d layers, dim %d, %d/%d heads of %d, ffn %d, vocab "
	    "%d, %.1f MB of weights, %d threads%s\n",
	    m->c.n_layers, m->c.dim, m->c.n_heads, m->c.n_kv_heads,
	    m->c.head_dim, m->c.ffn_dim, m->c.vocab,
	    medha_model_weight_bytes(m) / 1e6, o.n_threads,
	    o.ref ? ", reference numerics" : "");

	t0 = now();
	for (i = 0; i < nprompt; i += c) {
		c = chunk > 0 && nprompt - i > chunk ? (int)chunk
		                                     : (int)(nprompt - i);
		struct medha_batch_seq s = {seq, i, c,
		    i + c == nprompt ? MEDHA_LOGITS_LAST : MEDHA_LOGITS_NONE};
		struct medha_batch b = {tok + i, c, &s, 1};
		if (medha_cpu_forward(cpu, &b, logits, why, sizeof(why)) != 0)
			errx(1, "prompt: %s", why);
	}
	tp = now() - t0;
	if (logpath != NULL) {
		if ((f = fopen(logpath, "wb")) == NULL ||
		    fwrite(logits, sizeof(float), (size_t)m->c.vocab, f) !=
		        (size_t)m->c.vocab ||
		    fclose(f) != 0)
			err(1, "%s", logpath);
	}
	n = (int)nprompt;
	t0 = now();
	for (i = 0; i < ngen; i++) {
		tok[n] = medha_sample_greedy(logits, m->c.vocab);
		printf("%s%d", i ? " " : "", tok[n]);
		if (i + 1 == ngen)
			break;
		struct medha_batch_seq s = {seq, n, 1, MEDHA_LOGITS_LAST};
		struct medha_batch b = {tok + n, 1, &s, 1};
		if (medha_cpu_forward(cpu, &b, logits, why, sizeof(why)) != 0)
			errx(1, "generation: %s", why);
		n++;
	}
	tg = now() - t0;
	printf("\n");
	fprintf(stderr,
	    "cpu-run: prompt %lld tokens in %.3f s (%.1f tok/s); generation "
	    "%lld tokens in %.3f s (%.1f tok/s)\n",
	    (long long)nprompt, tp, nprompt / tp, (long long)ngen, tg,
	    ngen > 1 ? (ngen - 1) / tg : 0.0);
	medha_cpu_free(cpu);
	medha_kvcache_free(kv);
	medha_model_free(m);
	medha_gguf_close(g);
	free(tok);
	free(logits);
	if (fclose(stdout) != 0)
		err(1, "stdout");
	return 0;
}
