/*
 * topo_dist.c: how far the logits of tp2 and kvp2 are from the single
 * process's, computed the way the worker daemon computes them but in one
 * process: two cpu backends on two threads, the TP all-gather and the
 * KVP merge through shared memory instead of nng (the bytes that cross
 * the wire are the same, so the logits are the live topology's).
 *
 * usage: topo_dist [-m int8|f32|both] MODEL IDS PIECE
 *
 * -m: the numeric mode, the int8 fast paths or f32 activations (the
 * backends' ref option, MEDHA_CPU_REF=1: several times slower), or both
 * (the default), which also prints, for scale, how far the single
 * process's fast path is from its f32 activations.
 *
 * IDS has one request a line: its max_tokens, then its prompt's token
 * ids. PIECE is the KVP groups' --kvp-max-tokens (a request's positions
 * [0, PIECE) on group 0, the rest on group 1: at most 2 PIECE in all).
 * Each topology decodes greedily on its own; for each request it prints
 * the relative L2 distance of the logits after the prompt from the
 * single process's, the largest over the steps where the tokens agree,
 * and, where the greedy tokens part, the single process's top-2 gap at
 * that step. Exit status 1 on a bad argument, a failed forward pass, or
 * greedy tokens of tp2 or kvp2 that part from the single process's with
 * f32 activations.
 */
#include "cpu/cpu.h"
#include "engine/backend.h"
#include "engine/backend_cpu.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 64 /* prompt chunk, cut at the piece boundary */

struct req {
	int max_tokens;
	int n;       /* prompt tokens */
	int32_t *ids; /* (n) */
};

/* One topology's run of one request, shared by its ranks. */
struct run {
	const char *topo; /* "single", "tp2", "kvp2" */
	int nr;           /* ranks: 1 or 2 */
	int piece;        /* kvp2: positions per group */
	struct medha_backend *be[2];
	pthread_barrier_t bar;
	const struct req *q;
	int vocab;
	/* per step (0: after the prompt) */
	float *logits;   /* (max_tokens + 1, vocab) */
	int32_t *tok;    /* (max_tokens + 1) greedy, the next input */
	/* the collectives */
	const void *mine[2];
	size_t len[2];
	char err[2][256];
};

struct rank {
	struct run *r;
	int i;
};

static int
all_gather(void *arg, int layer, int kind, const void *mine, size_t len,
    void *all, int mem, char *why, size_t whylen)
{
	struct rank *k = arg;
	struct run *r = k->r;

	(void)layer;
	(void)kind;
	(void)mem;
	(void)why;
	(void)whylen;
	r->mine[k->i] = mine;
	pthread_barrier_wait(&r->bar);
	for (int i = 0; i < r->nr; i++)
		memcpy((char *)all + i * len, r->mine[i], len);
	pthread_barrier_wait(&r->bar);
	return 0;
}

/* The KVP exchange of two groups in one process: each takes the other's
 * buffer (the backend does the merge, as in the worker). */
static int
exchange(void *arg, int layer, int g, const void *buf, size_t len,
    void *rbuf, size_t rlen, int mem, char *why, size_t whylen)
{
	struct rank *k = arg;
	struct run *r = k->r;

	(void)layer;
	(void)mem;
	r->mine[k->i] = buf;
	r->len[k->i] = len;
	pthread_barrier_wait(&r->bar);
	if (r->len[g] != rlen) {
		pthread_barrier_wait(&r->bar);
		snprintf(why, whylen, "group %d sent %zu bytes, %zu expected", g,
		    r->len[g], rlen);
		return MEDHA_EFORMAT;
	}
	memcpy(rbuf, r->mine[g], rlen);
	pthread_barrier_wait(&r->bar);
	return 0;
}

/*
 * One rank's part of the request: the prompt in chunks, then a decode
 * step per token. Rank 0 (TP rank 0; KVP: the group of piece 0) gives
 * the logits and picks the next token; the ranks meet at a barrier
 * before each step so that all take the same input.
 */
static void *
rank_main(void *arg)
{
	struct rank *k = arg;
	struct run *r = k->r;
	const struct req *q = r->q;
	struct medha_backend *be = r->be[k->i];
	struct medha_comm comm = {.all_gather = all_gather,
	    .exchange = exchange,
	    .tp = r->piece > 0 ? 1 : r->nr,
	    .tp_rank = r->piece > 0 ? 0 : k->i,
	    .kvp = r->piece > 0 ? r->nr : 1,
	    .kvp_rank = r->piece > 0 ? k->i : 0,
	    .arg = k};
	char *err = r->err[k->i];
	int seq = -1, pos, c, step = 0;
	int total = q->n + q->max_tokens;

	if (medha_backend_seq_alloc(be, &seq) != 0) {
		snprintf(err, 256, "no sequence");
		goto out;
	}
	for (pos = 0; pos < total - 1; pos += c) {
		int prompt = pos < q->n;
		int piece = r->piece > 0 ? pos / r->piece : 0;
		int last, run_here;
		int32_t in;
		struct medha_batch_kv kv;
		struct medha_batch_seq s;
		struct medha_batch b;
		struct medha_fwd f;

		c = prompt ? (q->n - pos < CHUNK ? q->n - pos : CHUNK) : 1;
		if (r->piece > 0 && (pos + c - 1) / r->piece != piece)
			c = (piece + 1) * r->piece - pos;
		last = !prompt || pos + c == q->n;
		in = prompt ? 0 : r->tok[step - 1];
		/* KVP: group g holds piece g; it runs an item of piece k if
		   g <= k, appends if g == k, and both merge when k > 0 */
		run_here = r->piece == 0 || k->i <= piece;
		if (run_here) {
			kv = (struct medha_batch_kv){(int64_t)k->i * r->piece,
			    k->i == piece, piece > 0,
			    piece > 0 ? ((uint64_t)1 << (piece + 1)) - 1 : 0};
			s = (struct medha_batch_seq){seq, pos, c,
			    last && k->i == 0 ? MEDHA_LOGITS_LAST
			                      : MEDHA_LOGITS_NONE};
			b = (struct medha_batch){prompt ? q->ids + pos : &in, c,
			    &s, 1};
			memset(&f, 0, sizeof(f));
			f.b = &b;
			f.layer_lo = 0;
			f.layer_hi = be->info.shape.n_layers;
			f.comm = r->nr > 1 ? &comm : NULL;
			f.kv = r->piece > 0 ? &kv : NULL;
			if (last && k->i == 0)
				f.logits = r->logits + (size_t)step * r->vocab;
			if (medha_backend_forward(be, &f, err, 256) != 0)
				break;
		}
		if (last) {
			if (k->i == 0) {
				const float *l =
				    r->logits + (size_t)step * r->vocab;
				r->tok[step] = medha_sample_greedy(l, r->vocab);
			}
			step++;
			pthread_barrier_wait(&r->bar); /* the token is out */
		}
	}
out:
	if (seq >= 0)
		medha_backend_seq_free(be, seq);
	return NULL;
}

static int
run_req(struct run *r, const struct req *q)
{
	struct rank k[2];
	pthread_t th[2];

	r->q = q;
	memset(r->err, 0, sizeof(r->err));
	pthread_barrier_init(&r->bar, NULL, (unsigned)r->nr);
	for (int i = 0; i < r->nr; i++) {
		k[i] = (struct rank){r, i};
		pthread_create(&th[i], NULL, rank_main, &k[i]);
	}
	for (int i = 0; i < r->nr; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&r->bar);
	for (int i = 0; i < r->nr; i++)
		if (r->err[i][0] != '\0') {
			fprintf(stderr, "topo_dist: %s rank %d: %s\n", r->topo,
			    i, r->err[i]);
			return -1;
		}
	return 0;
}

static double
rel_l2(const float *a, const float *ref, int n)
{
	double d = 0, s = 0;

	for (int i = 0; i < n; i++) {
		d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
		s += (double)ref[i] * ref[i];
	}
	return s > 0 ? sqrt(d / s) : sqrt(d);
}

static double
top2_gap(const float *l, int n)
{
	float a = -INFINITY, b = -INFINITY;

	for (int i = 0; i < n; i++)
		if (l[i] > a) {
			b = a;
			a = l[i];
		} else if (l[i] > b)
			b = l[i];
	return (double)a - b;
}

static int
read_reqs(const char *path, struct req **qs, int *nq)
{
	FILE *fp = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	int n = 0;

	if (fp == NULL)
		return -1;
	*qs = NULL;
	while (getline(&line, &cap, fp) > 0) {
		struct req q = {0};
		char *s = line, *e;
		long v;
		int cap_ids = 0;

		q.max_tokens = (int)strtol(s, &e, 10);
		if (e == s || q.max_tokens < 1)
			goto bad;
		for (s = e;; s = e) {
			v = strtol(s, &e, 10);
			if (e == s)
				break;
			if (q.n == cap_ids) {
				cap_ids = cap_ids ? 2 * cap_ids : 256;
				q.ids = realloc(q.ids,
				    (size_t)cap_ids * sizeof(int32_t));
			}
			q.ids[q.n++] = (int32_t)v;
		}
		if (q.n < 1)
			goto bad;
		*qs = realloc(*qs, (size_t)(n + 1) * sizeof(**qs));
		(*qs)[n++] = q;
		continue;
bad:
		fprintf(stderr, "topo_dist: %s: line %d: want MAX_TOKENS ID...\n",
		    path, n + 1);
		free(q.ids);
		free(line);
		fclose(fp);
		return -1;
	}
	free(line);
	fclose(fp);
	*nq = n;
	return 0;
}

static int
open_run(struct run *r, const char *model, const char *topo, int ref,
    int piece, int max_total)
{
	char why[256];

	memset(r, 0, sizeof(*r));
	r->topo = topo;
	r->nr = strcmp(topo, "single") == 0 ? 1 : 2;
	r->piece = strcmp(topo, "kvp2") == 0 ? piece : 0;
	for (int i = 0; i < r->nr; i++) {
		struct medha_backend_cpu_opts o = {.n_threads = 1,
		    .max_seqs = 1,
		    .kv_blocks = (max_total + MEDHA_KV_BLOCK - 1) /
		        MEDHA_KV_BLOCK,
		    .ref = ref};
		if (strcmp(topo, "tp2") == 0) {
			o.tp = 2;
			o.tp_rank = i;
		}
		if (medha_backend_cpu_open(&r->be[i], model, &o, why,
		        sizeof(why)) != 0) {
			fprintf(stderr, "topo_dist: %s: %s\n", model, why);
			return -1;
		}
	}
	r->vocab = r->be[0]->info.shape.vocab;
	return 0;
}

static void
close_run(struct run *r)
{
	for (int i = 0; i < r->nr; i++)
		if (r->be[i] != NULL)
			medha_backend_close(r->be[i]);
}

static int
alloc_out(struct run *r, const struct req *q)
{
	free(r->logits);
	free(r->tok);
	r->logits = calloc((size_t)(q->max_tokens + 1) * r->vocab,
	    sizeof(float));
	r->tok = calloc((size_t)q->max_tokens + 1, sizeof(int32_t));
	return r->logits != NULL && r->tok != NULL ? 0 : -1;
}

/*
 * Compare run t with run one (the single process) on request i: print
 * a line, and return whether the greedy tokens parted; *worst grows to
 * the largest distance seen.
 */
static int
compare(const struct run *t, const struct run *one, const char *mode,
    const char *ref, int i, const struct req *q, double *worst)
{
	size_t v = (size_t)one->vocab;
	double d0 = rel_l2(t->logits, one->logits, one->vocab), dmax = 0;
	int s;

	for (s = 0; s < q->max_tokens; s++) {
		double d = rel_l2(t->logits + s * v, one->logits + s * v,
		    one->vocab);
		dmax = d > dmax ? d : dmax;
		if (t->tok[s] != one->tok[s])
			break;
	}
	*worst = dmax > *worst ? dmax : *worst;
	printf("%s %s request %d (%d prompt tokens): logits after the prompt "
	       "%.3g from single %s (relative L2), at most %.3g over %d steps; ",
	    t->topo, mode, i, q->n, d0, ref, dmax,
	    s < q->max_tokens ? s + 1 : q->max_tokens);
	if (s == q->max_tokens) {
		printf("same %d tokens\n", q->max_tokens);
		return 0;
	}
	printf("greedy tokens part at step %d (%d, single %d): single's "
	       "top-2 gap there %.4g\n",
	    s, t->tok[s], one->tok[s], top2_gap(one->logits + s * v,
	        one->vocab));
	return 1;
}

int
main(int argc, char **argv)
{
	static const char *topos[] = {"single", "tp2", "kvp2"};
	static const char *modes[] = {"int8", "f32"};
	struct req *qs;
	struct run runs[2][3];
	double worst[2][3] = {{0}};
	int parted[2][3] = {{0}};
	int nq, piece, max_total = 0, rc = 0, m, t, m0 = 0, m1 = 1;

	if (argc == 6 && strcmp(argv[1], "-m") == 0) {
		if (strcmp(argv[2], "int8") == 0)
			m1 = 0;
		else if (strcmp(argv[2], "f32") == 0)
			m0 = 1;
		else if (strcmp(argv[2], "both") != 0)
			argc = 0;
		argv += 2;
		argc -= 2;
	}
	if (argc != 4 || (piece = atoi(argv[3])) < 1) {
		fprintf(stderr,
		    "usage: topo_dist [-m int8|f32|both] MODEL IDS PIECE\n");
		return 1;
	}
	if (read_reqs(argv[2], &qs, &nq) != 0) {
		fprintf(stderr, "topo_dist: cannot read %s\n", argv[2]);
		return 1;
	}
	for (int i = 0; i < nq; i++)
		if (qs[i].n + qs[i].max_tokens > max_total)
			max_total = qs[i].n + qs[i].max_tokens;
	if (max_total > 2 * piece) {
		fprintf(stderr,
		    "topo_dist: a request of %d positions does not fit two "
		    "groups of %d\n",
		    max_total, piece);
		return 1;
	}
	memset(runs, 0, sizeof(runs));
	for (m = m0; m <= m1; m++)
		for (t = 0; t < 3; t++)
			if (open_run(&runs[m][t], argv[1], topos[t], m, piece,
			        max_total) != 0)
				return 1;
	for (int i = 0; i < nq && rc == 0; i++) {
		const struct req *q = &qs[i];

		for (m = m0; m <= m1 && rc == 0; m++)
			for (t = 0; t < 3 && rc == 0; t++)
				if (alloc_out(&runs[m][t], q) != 0 ||
				    run_req(&runs[m][t], q) != 0)
					rc = 1;
		if (rc != 0)
			break;
		/* how far the fast path itself is from f32 activations */
		if (m0 < m1)
			parted[0][0] += compare(&runs[0][0], &runs[1][0],
			    "int8", "f32", i, q, &worst[0][0]);
		for (m = m0; m <= m1; m++)
			for (t = 1; t < 3; t++)
				parted[m][t] += compare(&runs[m][t],
				    &runs[m][0], modes[m], modes[m], i, q,
				    &worst[m][t]);
		fflush(stdout);
	}
	if (rc == 0) {
		if (m0 < m1)
			printf("single int8 against single f32: %d of %d "
			       "requests part, logits at most %.3g apart "
			       "(relative L2)\n",
			    parted[0][0], nq, worst[0][0]);
		for (m = m0; m <= m1; m++)
			for (t = 1; t < 3; t++)
				printf("%s %s: %d of %d requests part from single "
				       "%s, logits at most %.3g from it "
				       "(relative L2)\n",
				    topos[t], modes[m], parted[m][t], nq,
				    modes[m], worst[m][t]);
	}
	for (m = 0; m < 2; m++)
		for (t = 0; t < 3; t++) {
			close_run(&runs[m][t]);
			free(runs[m][t].logits);
			free(runs[m][t].tok);
		}
	for (int i = 0; i < nq; i++)
		free(qs[i].ids);
	free(qs);
	/* with f32 activations TP and KVP must give the single tokens */
	if (rc == 0 && (parted[1][1] > 0 || parted[1][2] > 0))
		rc = 1;
	return rc;
}
