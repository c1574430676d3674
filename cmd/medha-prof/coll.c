/*
 * coll.c: medha-prof's collectives, as the cpu workers of one host
 * exchange them (net/coll.h, over nng ipc://): spp_send, one stage's
 * hidden states (tokens x dim f32) sent to the next, and kvp_merge, one
 * layer's partial attention (tokens x heads x (head_dim + 1) f32) sent by
 * every KVP group to every other, then merged (medha_attn_merge) as the
 * worker daemon does. One thread per endpoint in this process stands for
 * one worker; each point is the median over the repetitions of the time
 * rank 0 (for spp_send, the receiver) spends from a common start to done.
 */
#include "medha-prof.h"

#include "cpu/cpu.h"
#include "net/coll.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define COLL_PEERS 4
#define COLL_WAIT 30.0 /* s */

struct member {
	struct shared *sh;
	int rank;
	struct medha_coll *c;
	float *buf;  /* (peers, count) what the group holds, ours at rank */
	float *out;  /* (count) the merge's result */
	double took; /* s, of the last point */
	int rc;
	char why[256];
};

struct shared {
	pthread_barrier_t go, done;
	int n;          /* members this point */
	int op;         /* MEDHA_OP_SPP_SEND or MEDHA_OP_KVP_MERGE */
	int64_t tokens; /* of this point */
	int nh, hd, dim;
	uint64_t tag;
	int quit;
	struct member m[COLL_PEERS];
};

/* One point's work on member m. */
static int
point(struct member *m)
{
	struct shared *sh = m->sh;
	const size_t row = (size_t)sh->nh * (sh->hd + 1);
	int g, rc;

	if (sh->op == MEDHA_OP_SPP_SEND) {
		size_t len = (size_t)sh->tokens * sh->dim * sizeof(float);
		if (m->rank == 1)
			return medha_coll_send(m->c, 0, sh->tag, m->buf, len,
			    COLL_WAIT, m->why, sizeof(m->why));
		return medha_coll_recv(m->c, 1, sh->tag, m->buf, len,
		    COLL_WAIT, m->why, sizeof(m->why));
	}
	/* kvp_merge: ours to every other, theirs in, the merge */
	{
		size_t count = (size_t)sh->tokens * row;
		const float *po[COLL_PEERS], *pl[COLL_PEERS];
		size_t ro = (size_t)sh->tokens * sh->nh * sh->hd;
		for (g = 0; g < sh->n; g++)
			if (g != m->rank &&
			    (rc = medha_coll_send(m->c, g, sh->tag,
			         m->buf + (size_t)m->rank * count,
			         count * sizeof(float), COLL_WAIT, m->why,
			         sizeof(m->why))) != 0)
				return rc;
		for (g = 0; g < sh->n; g++)
			if (g != m->rank &&
			    (rc = medha_coll_recv(m->c, g, sh->tag,
			         m->buf + (size_t)g * count,
			         count * sizeof(float), COLL_WAIT, m->why,
			         sizeof(m->why))) != 0)
				return rc;
		for (g = 0; g < sh->n; g++) {
			po[g] = m->buf + (size_t)g * count;
			pl[g] = m->buf + (size_t)g * count + ro;
		}
		medha_attn_merge(sh->n, po, pl,
		    (int)(sh->tokens * sh->nh), sh->hd, m->out,
		    m->out + ro);
	}
	return 0;
}

static void *
member_main(void *arg)
{
	struct member *m = arg;
	struct shared *sh = m->sh;

	for (;;) {
		double t0;
		pthread_barrier_wait(&sh->go);
		if (sh->quit)
			break;
		t0 = medha_now();
		if (m->rank < sh->n && m->rc == 0)
			m->rc = point(m);
		m->took = medha_now() - t0;
		pthread_barrier_wait(&sh->done);
	}
	return NULL;
}

/* Every member's endpoint and buffers; the peer table. */
static int
members_open(struct shared *sh, int64_t max_count, char *why, size_t whylen)
{
	char urls[COLL_PEERS][128];
	const char *u[COLL_PEERS];
	const char *td = getenv("TMPDIR");
	int i, rc;

	for (i = 0; i < COLL_PEERS; i++) {
		struct member *m = &sh->m[i];
		m->sh = sh;
		m->rank = i;
		snprintf(urls[i], sizeof(urls[i]), "ipc://%s/medha-prof.%ld.%d",
		    td != NULL && *td != '\0' ? td : "/tmp", (long)getpid(), i);
		u[i] = urls[i];
		if ((rc = medha_coll_open(&m->c, urls[i], why, whylen)) != 0)
			return rc;
		m->buf = medha_calloc((size_t)max_count * COLL_PEERS,
		    sizeof(float));
		m->out = medha_calloc((size_t)max_count, sizeof(float));
		if (m->buf == NULL || m->out == NULL)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
	}
	for (i = 0; i < COLL_PEERS; i++)
		if ((rc = medha_coll_peers(sh->m[i].c, 1, i, COLL_PEERS, u, why,
		         whylen)) != 0)
			return rc;
	return 0;
}

static void
members_close(struct shared *sh)
{
	for (int i = 0; i < COLL_PEERS; i++) {
		medha_coll_close(sh->m[i].c);
		free(sh->m[i].buf);
		free(sh->m[i].out);
	}
}

/* One point, reps times: the median of rank 0's times, s. */
static int
run_point(struct shared *sh, int op, int64_t tokens, int n, int reps,
    uint64_t *tag, double *sec, char *why, size_t whylen)
{
	double t[64];
	int r, i;

	if (reps > 64)
		reps = 64;
	for (r = 0; r < reps; r++) {
		sh->op = op;
		sh->tokens = tokens;
		sh->n = n;
		sh->tag = ++*tag;
		pthread_barrier_wait(&sh->go);
		pthread_barrier_wait(&sh->done);
		for (i = 0; i < n; i++)
			if (sh->m[i].rc != 0)
				return medha_why(why, whylen, sh->m[i].rc,
				    "%s: %s", medha_op_name(op), sh->m[i].why);
		t[r] = sh->m[0].took;
	}
	*sec = prof_median(t, reps);
	return 0;
}

static const int64_t send_full[] = {1, 16, 64, 256, 1024, 2048};
static const int64_t merge_full[] = {1, 16, 64, 256, 1024};
static const int merge_groups[] = {2, 4};
static const int64_t send_quick[] = {1, 64};
static const int64_t merge_quick[] = {1, 16};

int
prof_coll(struct prof *P, struct prof_row *rows, int *nrows, int *done,
    int total, char *why, size_t whylen)
{
	const struct medha_model_config *c = &P->be->info.shape;
	const int64_t *ts = P->quick ? send_quick : send_full;
	const int64_t *tm = P->quick ? merge_quick : merge_full;
	int ns = P->quick ? 2 : 6, nm = P->quick ? 2 : 5;
	struct shared sh;
	pthread_t th[COLL_PEERS];
	int64_t max_count;
	uint64_t tag = 0;
	double s = 0;
	int i, j, rc, started = 0;

	memset(&sh, 0, sizeof(sh));
	sh.nh = c->n_heads;
	sh.hd = c->head_dim;
	sh.dim = c->dim;
	max_count = ts[ns - 1] * c->dim;
	if (tm[nm - 1] * c->n_heads * (c->head_dim + 1) > max_count)
		max_count = tm[nm - 1] * c->n_heads * (c->head_dim + 1);
	pthread_barrier_init(&sh.go, NULL, COLL_PEERS + 1);
	pthread_barrier_init(&sh.done, NULL, COLL_PEERS + 1);
	if ((rc = members_open(&sh, max_count, why, whylen)) != 0)
		goto out;
	for (i = 0; i < COLL_PEERS; i++, started++)
		if (pthread_create(&th[i], NULL, member_main, &sh.m[i]) != 0) {
			/* the others wait at a barrier no one can complete */
			die(1, "no thread for the collectives");
		}
	/* a first exchange between every two members, not timed: the
	   first message over a new connection waits for it (a 1-token
	   spp_send once read 4 ms, 40 times the next points') */
	if ((rc = run_point(&sh, MEDHA_OP_KVP_MERGE, 1, COLL_PEERS, 1, &tag,
	         &s, why, whylen)) != 0)
		goto out;
	/* up to --max-tokens, -q too, and at least two points */
	for (i = 0; i < ns && (i < 2 || ts[i] <= P->max_tokens);
	     i++, (*done)++) {
		prof_progress(P, "profiling", *done, total);
		if ((rc = run_point(&sh, MEDHA_OP_SPP_SEND, ts[i], 2, P->reps,
		         &tag, &s, why, whylen)) != 0)
			goto out;
		rows[(*nrows)++] = (struct prof_row){"spp_send", ts[i], 0,
		    1e6 * s};
	}
	for (j = 0; j < 2; j++)
		for (i = 0; i < nm; i++, (*done)++) {
			prof_progress(P, "profiling", *done, total);
			if ((rc = run_point(&sh, MEDHA_OP_KVP_MERGE, tm[i],
			         merge_groups[j], P->reps, &tag, &s, why,
			         whylen)) != 0)
				goto out;
			rows[(*nrows)++] = (struct prof_row){"kvp_merge", tm[i],
			    merge_groups[j], 1e6 * s};
		}
	rc = 0;
out:
	if (started == COLL_PEERS) {
		sh.quit = 1;
		pthread_barrier_wait(&sh.go);
		for (i = 0; i < COLL_PEERS; i++)
			pthread_join(th[i], NULL);
	}
	members_close(&sh);
	pthread_barrier_destroy(&sh.go);
	pthread_barrier_destroy(&sh.done);
	return rc;
}

/* Points prof_coll() measures, for the progress count. */
int
prof_coll_points(const struct prof *P)
{
	int n = 0;

	if (P->quick)
		return 2 + 2 * 2;
	for (int i = 0; i < 6; i++)
		n += i < 2 || send_full[i] <= P->max_tokens;
	return n + 2 * 5;
}
