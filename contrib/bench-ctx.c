/*
 * bench-ctx.c: the CPU backend's speed at depth, for contrib/bench-cpu.sh.
 * For each context length DEPTH (ascending), the one sequence is filled
 * to DEPTH with pseudo-random tokens in chunks of 512 (not timed), then
 * timed: a prefill chunk of P tokens (512) appended at that depth, and
 * N (32) decode steps after it, one token each with its logits. The
 * next depth continues the same sequence. One line per depth:
 *
 *	depth D  prefill X tok/s  decode Y tok/s  bytes/token B
 *
 * B is what one decode step at depth D must read at least: every weight
 * of the model, of a mixture of experts only the top-k experts a token
 * runs in each routed layer (medha_model_step_bytes), and the KV cache's
 * K and V of D + P positions. With -B it first prints the memory bandwidth a
 * streaming read of 1 GiB gets with the same threads (best of 5):
 *
 *	read G GB/s
 *
 *	bench-ctx [-B] [-k f16|f32] [-n N] [-p P] [-t threads] model.gguf DEPTH...
 *
 * Build (after make):
 *	cc -std=c11 -D_GNU_SOURCE -O2 -march=native -iquote libcore \
 *	    -o bench-ctx contrib/bench-ctx.c build/libmedha.a -ljansson \
 *	    -lzstd -lpcre2-32 -lm -lpthread
 */
#include <err.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "cpu/cpu.h"
#include "cpu/kvcache.h"
#include "model/gguf.h"
#include "model/model.h"

#define FILL 512                 /* tokens per untimed fill chunk */
#define READ_BYTES (1ull << 30) /* the streaming read's buffer */

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
usage(void)
{
	fprintf(stderr, "usage: bench-ctx [-B] [-k f16|f32] [-n N] [-p P] "
	                "[-t threads] model.gguf DEPTH...\n");
	exit(2);
}

/* ---- the streaming read ---- */

struct slice {
	const uint64_t *p;
	size_t n;
	uint64_t sum;
};

static void *
read_slice(void *arg)
{
	struct slice *s = arg;
	size_t i = 0;
#if defined(__AVX512F__)
	/* a cache line a load, four independent sums */
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
	for (; i + 32 <= s->n; i += 32) {
		a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(s->p + i));
		a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(s->p + i + 8));
		a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(s->p + i + 16));
		a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(s->p + i + 24));
	}
	s->sum += (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(
	    _mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
#endif
	for (; i < s->n; i++)
		s->sum += s->p[i];
	return NULL;
}

static double
read_bandwidth(int threads)
{
	size_t n = READ_BYTES / sizeof(uint64_t), per = n / threads;
	uint64_t *buf = malloc(READ_BYTES);
	struct slice s[256];
	pthread_t th[256];
	double best = 0, t;
	int r, i;

	if (buf == NULL)
		err(1, "malloc");
	for (size_t j = 0; j < n; j++) /* touch every page */
		buf[j] = j;
	for (r = 0; r < 5; r++) {
		t = now();
		for (i = 0; i < threads; i++) {
			s[i] = (struct slice){buf + per * i, per, 0};
			if (pthread_create(&th[i], NULL, read_slice, &s[i]) != 0)
				err(1, "pthread_create");
		}
		for (i = 0; i < threads; i++)
			pthread_join(th[i], NULL);
		t = now() - t;
		if (per * threads * sizeof(uint64_t) / t > best)
			best = per * threads * sizeof(uint64_t) / t;
	}
	if (s[0].sum == 42) /* keep the sums */
		fprintf(stderr, "\n");
	free(buf);
	return best;
}

/* ---- the model at depth ---- */

static void
forward(struct medha_cpu *cpu, int seq, const int32_t *tok, int64_t pos,
    int n, float *logits)
{
	struct medha_batch_seq s = {seq, pos, n, MEDHA_LOGITS_LAST};
	struct medha_batch b = {tok, n, &s, 1};
	char why[512];

	if (medha_cpu_forward(cpu, &b, logits, why, sizeof(why)) != 0)
		errx(1, "forward at %lld: %s", (long long)pos, why);
}

int
main(int argc, char **argv)
{
	struct medha_gguf *g;
	struct medha_model *m;
	struct medha_kvcache *kv;
	struct medha_cpu *cpu;
	struct medha_kv_config kc;
	struct medha_cpu_opts o = {.n_threads = 2};
	int64_t v, npp = 512, ntg = 32, maxd = 0, *depth, pos = 0;
	int kvtype = MEDHA_KV_F16, bw = 0, ch, i, nd, seq, rc, tty;
	int32_t *tok;
	float *logits;
	char why[512];
	double t, pp, tg, kvb;

	while ((ch = getopt(argc, argv, "Bk:n:p:t:")) != -1) {
		switch (ch) {
		case 'B': bw = 1; break;
		case 'k':
			if (strcmp(optarg, "f32") == 0)
				kvtype = MEDHA_KV_F32;
			else if (strcmp(optarg, "f16") != 0)
				usage();
			break;
		case 'n':
			if (medha_parse_i64(optarg, 2, 1 << 16, &ntg) != 0)
				usage();
			break;
		case 'p':
			if (medha_parse_i64(optarg, 1, 1 << 16, &npp) != 0)
				usage();
			break;
		case 't':
			if (medha_parse_i64(optarg, 1, 256, &v) != 0)
				usage();
			o.n_threads = (int)v;
			break;
		default: usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 2)
		usage();
	nd = argc - 1;
	if ((depth = calloc((size_t)nd, sizeof(*depth))) == NULL)
		err(1, "calloc");
	for (i = 0; i < nd; i++) {
		if (medha_parse_i64(argv[1 + i], 0, 1 << 24, &depth[i]) != 0 ||
		    (i > 0 && depth[i] < depth[i - 1] + npp + ntg))
			errx(2, "%s: depths must be ascending, each at least "
			        "P + N past the last",
			    argv[1 + i]);
		maxd = depth[i];
	}
	if (bw)
		printf("read %.1f GB/s\n", read_bandwidth(o.n_threads) / 1e9);
	if ((rc = medha_gguf_open(&g, argv[0], why, sizeof(why))) != 0)
		errx(1, "%s: %s", argv[0], why);
	if ((rc = medha_model_load(&m, g, why, sizeof(why))) != 0)
		errx(1, "%s: %s", argv[0], why);
	if (m->c.ctx_len > 0 && maxd + npp + ntg > m->c.ctx_len)
		errx(2, "depth %lld + %lld + %lld is past the model's context "
		        "of %lld",
		    (long long)maxd, (long long)npp, (long long)ntg,
		    (long long)m->c.ctx_len);
	if ((tok = calloc((size_t)(maxd + npp + ntg), sizeof(*tok))) == NULL ||
	    (logits = calloc((size_t)m->c.vocab, sizeof(float))) == NULL)
		err(1, "calloc");
	for (v = 0; v < maxd + npp + ntg; v++)
		tok[v] = (int32_t)((v * 2654435761u) % m->c.vocab);
	kc = (struct medha_kv_config){.n_layers = m->c.n_layers,
	    .n_kv_heads = m->c.n_kv_heads,
	    .head_dim = m->c.head_dim,
	    .n_blocks = (maxd + npp + ntg) / MEDHA_KV_BLOCK + 2,
	    .type = kvtype,
	    .max_seqs = 1};
	if ((rc = medha_kvcache_init(&kv, &kc)) != 0)
		errx(1, "KV cache: %s", medha_strerror(rc));
	if ((rc = medha_cpu_init(&cpu, m, kv, &o, why, sizeof(why))) != 0)
		errx(1, "%s", why);
	if (medha_kv_seq_alloc(kv, &seq) != 0 ||
	    medha_kv_reserve(kv, seq, maxd + npp + ntg) != 0)
		errx(1, "no room in the KV cache");
	tty = isatty(2);
	kvb = (double)m->c.n_layers * 2 * m->c.n_kv_heads * m->c.head_dim *
	    (kvtype == MEDHA_KV_F16 ? 2 : 4);
	for (i = 0; i < nd; i++) {
		while (pos < depth[i]) {
			int c = depth[i] - pos < FILL ? (int)(depth[i] - pos)
			                              : FILL;
			forward(cpu, seq, tok + pos, pos, c, logits);
			pos += c;
			if (tty)
				fprintf(stderr, "\rbench-ctx: filling %lld / %lld",
				    (long long)pos, (long long)depth[i]);
		}
		if (tty)
			fprintf(stderr, "\r\033[K");
		t = now();
		forward(cpu, seq, tok + pos, pos, (int)npp, logits);
		pp = npp / (now() - t);
		pos += npp;
		t = now();
		for (v = 0; v < ntg; v++, pos++)
			forward(cpu, seq, tok + pos, pos, 1, logits);
		tg = ntg / (now() - t);
		printf("depth %lld  prefill %.1f tok/s  decode %.1f tok/s  "
		       "bytes/token %.0f\n",
		    (long long)depth[i], pp, tg,
		    medha_model_step_bytes(m, m->c.a.n_expert_used) +
		        kvb * (double)pos);
		fflush(stdout);
	}
	medha_cpu_free(cpu);
	medha_kvcache_free(kv);
	medha_model_free(m);
	medha_gguf_close(g);
	free(tok);
	free(logits);
	free(depth);
	return 0;
}
