/*
 * worker.c: the live worker's loop (serve/worker.h). It dials its
 * scheduler, says HELLO (backend, model, layout, KV block size and
 * count), then asks for work with READY and answers each BATCH with a
 * RESULT of the tokens it sampled, on one req context; a second context
 * sends HEARTBEAT every second while a batch runs, so the scheduler can
 * tell a long batch from a dead worker. Every sequence lives in the
 * backend under the scheduler's request handle until a BATCH or IDLE
 * lists it in frees. If the scheduler goes away (no answer within
 * MEDHA_PROTO_DEAD_MS, or an ERROR), the worker frees every sequence and
 * says HELLO again.
 *
 * In a replica of several workers (tp * spp * kvp: layout.h), every
 * worker gets every batch and runs its part (worker_batch.c). A worker
 * alone may run the next step ahead while its RESULT makes the round
 * trip (worker_ahead.c).
 */
#include "serve/worker_impl.h"

#include "layout.h"
#include "net/greet.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The slot of handle h in w->index: its own, or the empty one to take. */
/* The slot of handle h in w->index: its own, or the empty one to take. */
static int
slot_of(const struct worker *w, uint64_t h)
{
	int mask = w->index_cap - 1;
	int i = (int)((h * 0x9e3779b97f4a7c15ULL) >> 32) & mask;

	while (w->index[i] >= 0 && w->seqs[w->index[i]].handle != h)
		i = (i + 1) & mask;
	return i;
}

struct wseq *
wk_find_seq(struct worker *w, uint64_t h)
{
	int e = w->index[slot_of(w, h)];

	return e >= 0 ? &w->seqs[e] : NULL;
}

struct wseq *
wk_new_seq(struct worker *w, uint64_t h)
{
	int e;

	if (w->nspare == 0)
		return NULL;
	e = w->spare[--w->nspare];
	w->seqs[e].handle = h;
	w->seqs[e].seq = -1; /* none in the backend yet */
	w->index[slot_of(w, h)] = e;
	return &w->seqs[e];
}

void
wk_free_seq(struct worker *w, struct wseq *q)
{
	int mask = w->index_cap - 1, i = slot_of(w, q->handle), j, k;

	/* delete by shifting back the entries that probed past slot i */
	w->index[i] = -1;
	for (j = (i + 1) & mask; w->index[j] >= 0; j = (j + 1) & mask) {
		k = slot_of(w, w->seqs[w->index[j]].handle);
		if (k == j)
			continue; /* already where it hashes: stays */
		w->index[i] = w->index[j];
		w->index[j] = -1;
		i = j;
	}
	medha_backend_seq_free(w->be, q->seq);
	medha_sampler_free(q->smp);
	memset(q, 0, sizeof(*q));
	w->spare[w->nspare++] = (int)(q - w->seqs);
}

static void
free_all(struct worker *w)
{
	for (int i = 0; i < w->max_seqs; i++)
		if (w->seqs[i].handle != 0)
			wk_free_seq(w, &w->seqs[i]);
}

static void *
heartbeat_main(void *arg)
{
	struct worker *w = arg;
	struct medha_msg m = {.type = MEDHA_MSG_HEARTBEAT}, rep;
	char why[256];

	pthread_mutex_lock(&w->mu);
	while (!w->quit) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += MEDHA_PROTO_HEARTBEAT_MS / 1000;
		pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		if (w->quit || !w->running)
			continue;
		m.worker_id = w->id;
		pthread_mutex_unlock(&w->mu);
		if (medha_cli_msg(w->cli, 1, &m, &rep,
		        MEDHA_PROTO_DEAD_MS / 1e3, why, sizeof(why)) == 0)
			medha_msg_clear(&rep);
		else
			medha_log(MEDHA_LOG_WARN, "heartbeat: %s", why);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* The batch's frees; an entry with positions to keep (prefix caching)
 * trims the sequence instead: this worker's piece of it, which starts
 * at its base, keeps what falls before them, or goes if none does. */
static void
apply_frees(struct worker *w, const struct medha_msg_batch *b)
{
	for (int64_t i = 0; i < b->n_frees; i++) {
		struct wseq *q = wk_find_seq(w, b->frees[i]);
		int64_t keep = b->keeps != NULL ? b->keeps[i] : 0, len;
		if (q == NULL)
			continue;
		keep -= q->base;
		len = medha_backend_seq_len(w->be, q->seq);
		if (keep > 0 && len >= 0) {
			if (keep < len &&
			    medha_backend_seq_trim(w->be, q->seq, keep) != 0)
				wk_free_seq(w, q); /* never kept half */
			continue;
		}
		wk_free_seq(w, q);
	}
}

/* The tokens of a RESULT sent (their logprobs too). */
static void
result_free(struct medha_msg_result *res)
{
	for (int64_t i = 0; res->tokens != NULL && i < res->n_tokens; i++)
		free(res->tokens[i].lp);
	free(res->tokens);
	res->tokens = NULL;
	res->n_tokens = 0;
}

/* A batch answered (res): its failure logged, every 1000th counted. */
static void
batch_ran(int *batches, const struct medha_msg_result *res)
{
	if (res->error[0] != '\0')
		medha_log(MEDHA_LOG_ERROR, "batch %llu failed: %s",
		    (unsigned long long)res->seq, res->error);
	if (++*batches % 1000 == 0)
		medha_log(MEDHA_LOG_INFO, "%d batches run", *batches);
}

/* -vv: a batch run from t (its request sent at sent): what it held, how
 * long it ran and how long it took to come */
static void
log_batch(const struct medha_msg_batch *b, double t, double sent)
{
	int64_t tokens = 0;

	for (int64_t i = 0; i < b->n_items; i++)
		tokens += b->items[i].n_ids;
	medha_log(MEDHA_LOG_DEBUG, "batch %llu: %lld items, %lld tokens, "
	    "ran in %.1f ms, came %.0f us after the message before",
	    (unsigned long long)b->seq, (long long)b->n_items,
	    (long long)tokens, (medha_now() - t) * 1e3, (t - sent) * 1e6);
}

/* ---- lookahead (see the top of this file) ---- */


/*
 * One forward of WARM_TOKENS tokens on a sequence of its own, freed
 * after, before the worker says HELLO: otherwise the first batch pays
 * for the first touch of the backend's buffers and KV pages (a 5-token
 * prefill measured 64.6 ms as a fresh worker's first batch, 10-12 ms
 * after).
 */
#define WARM_TOKENS 16

static void
warm_up(struct medha_backend *be)
{
	int32_t tok[WARM_TOKENS] = {0};
	struct medha_batch_seq bs = {.pos = 0,
	    .n_tokens = WARM_TOKENS,
	    .logits = MEDHA_LOGITS_LAST};
	struct medha_batch batch = {tok, WARM_TOKENS, &bs, 1};
	struct medha_fwd f;
	float *lg;
	char why[256];
	double t;

	if ((lg = medha_calloc((size_t)be->info.shape.vocab,
	         sizeof(*lg))) == NULL)
		return;
	if (medha_backend_seq_alloc(be, &bs.seq) != 0) {
		free(lg);
		return;
	}
	memset(&f, 0, sizeof(f));
	f.b = &batch;
	f.layer_lo = be->info.layer_lo;
	f.layer_hi = be->info.layer_hi;
	f.logits = lg;
	t = medha_now();
	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
		medha_log(MEDHA_LOG_INFO, "warm-up forward: %s", why);
	else
		medha_log(MEDHA_LOG_INFO, "warm-up: a forward of %d tokens "
		    "in %.1f ms", WARM_TOKENS, (medha_now() - t) * 1e3);
	medha_backend_seq_free(be, bs.seq);
	free(lg);
}

/* The replica's peer table: dial the workers this one sends to. */

static int
take_peers(struct worker *w, const struct medha_msg_peers *p)
{
	struct medha_comm cm;
	struct call c;
	const char **urls;
	char why[512];
	int rc;

	if (w->coll == NULL || p->n != medha_layout_size(&w->lay)) {
		medha_log(MEDHA_LOG_ERROR,
		    "scheduler sent a table of %d workers; this one is "
		    "rank %d of %d: starting over",
		    p->n, w->lay.rank, medha_layout_size(&w->lay));
		return -1;
	}
	w->kvp_tokens = p->kvp_tokens;
	if (p->gen == medha_coll_gen(w->coll))
		return 0;
	if ((urls = medha_calloc(p->n, sizeof(*urls))) == NULL)
		return -1;
	for (int i = 0; i < p->n; i++)
		urls[i] = p->urls[i];
	rc = medha_coll_peers(w->coll, p->gen, w->lay.rank, p->n, urls, why,
	    sizeof(why));
	free(urls);
	if (rc != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: starting over", why);
		return -1;
	}
	medha_log(MEDHA_LOG_INFO, "peers: generation %llu, %d workers",
	    (unsigned long long)p->gen, p->n);
	/* a backend with collectives of its own sets them up through ours
	   (cpu and sim have none: they use ours in each call) */
	wk_comm(w, &c, 0, &cm);
	if ((rc = medha_backend_comm_init(w->be, &cm, why, sizeof(why))) != 0 &&
	    rc != MEDHA_EUNSUP) {
		medha_log(MEDHA_LOG_ERROR, "collectives: %s: starting over", why);
		return -1;
	}
	return 0;
}

/*
 * HELLO until WELCOME (net/greet.h: a refusal is retried with a
 * backoff, and one retrying cannot change ends it unless
 * --retry-forever). 0, 1 when stopping, or an error with why.
 */
static int
hello(struct worker *w, const struct medha_msg_hello *h,
    const struct medha_worker_config *c, char *why, size_t whylen)
{
	struct medha_msg m = {.type = MEDHA_MSG_HELLO}, rep;
	int rc;

	m.hello = *h;
	if ((rc = medha_cli_greet(w->cli, &m, &rep, c->addr, c->retry_forever,
	         w->stop, why, whylen)) != 0)
		return rc;
	w->id = rep.worker_id;
	medha_msg_clear(&rep);
	return 0;
}

/*
 * Where the other workers reach this one: --peer, or beside the
 * scheduler: ipc://PATH-wRANK.sock for ipc://PATH, tcp://HOST:0 (a free
 * port) for tcp://HOST:PORT.
 */
static void
peer_url(const struct medha_worker_config *o, char *url, size_t n)
{
	const char *colon;

	if (o->peer != NULL)
		snprintf(url, n, "%s", o->peer);
	else if (strncmp(o->addr, "tcp://", 6) == 0 &&
	    (colon = strrchr(o->addr, ':')) != NULL && colon > o->addr + 5)
		snprintf(url, n, "%.*s:0", (int)(colon - o->addr), o->addr);
	else {
		size_t len = strlen(o->addr);
		if (len > 5 && strcmp(o->addr + len - 5, ".sock") == 0)
			len -= 5;
		snprintf(url, n, "%.*s-w%d.sock", (int)len, o->addr, o->rank);
	}
}

/* The HELLO this worker says. */
static void
hello_of(const struct worker *w, const struct medha_worker_config *c,
    struct medha_msg_hello *h)
{
	const struct medha_backend_info *in = &w->be->info;

	memset(h, 0, sizeof(*h));
	snprintf(h->backend, sizeof(h->backend), "%s", in->name);
	snprintf(h->model, sizeof(h->model), "%s", c->model);
	snprintf(h->gpu, sizeof(h->gpu), "%s", c->gpu);
	h->tp = w->lay.tp;
	h->spp = w->lay.spp;
	h->kvp = w->lay.kvp;
	h->rank_tp = w->lay.rt;
	h->rank_spp = w->lay.rs;
	h->rank_kvp = w->lay.rg;
	if (w->coll != NULL)
		snprintf(h->peer, sizeof(h->peer), "%s", medha_coll_url(w->coll));
	h->layer_lo = in->layer_lo;
	h->layer_hi = in->layer_hi;
	h->block_size = in->block_size;
	h->n_blocks = in->n_blocks > INT32_MAX ? INT32_MAX : (int)in->n_blocks;
	h->max_seqs = in->max_seqs;
	h->vocab = in->shape.vocab;
	h->dim = in->shape.dim;
	h->pid = (int)getpid();
	snprintf(h->fingerprint, sizeof(h->fingerprint), "%s", w->fp);
	if (in->caps & MEDHA_BACKEND_WINDOW_KV)
		h->caps |= MEDHA_HELLO_WINDOW_KV;
}

/* Whether a batch runs now (for the heartbeats). */
static void
set_running(struct worker *w, int on)
{
	pthread_mutex_lock(&w->mu);
	w->running = on;
	pthread_mutex_unlock(&w->mu);
}

/*
 * Answer BATCH b (sent: when the message before it went) into *res:
 * from the step run ahead where nm > 0 of its items are steps of it
 * (wk_ahead_match), else run whole, the next step planned after. -1
 * when its peer table cannot be taken (start over), else 0.
 */
static int
answer_batch(struct worker *w, const struct medha_msg_batch *b, int64_t nm,
    double sent, int *batches, struct medha_msg_result *res)
{
	double t_run;

	apply_frees(w, b);
	if (nm == 0 && b->peers != NULL && take_peers(w, b->peers) != 0)
		return -1;
	res->worker_id = w->id;
	set_running(w, 1);
	t_run = medha_now();
	if (nm > 0)
		wk_ahead_use(w, b, nm, res);
	else
		wk_run_batch(w, b, res);
	set_running(w, 0);
	w->busy += medha_now() - t_run;
	if (medha_log_level >= MEDHA_LOG_DEBUG)
		log_batch(b, t_run, sent);
	if (nm == 0 && res->error[0] == '\0')
		wk_ahead_plan(w, b);
	batch_ran(batches, res);
	return 0;
}

/*
 * One session with the scheduler after its WELCOME: READY or RESULT
 * out, BATCH or IDLE back, until a stop, a lost scheduler or an answer
 * out of turn. rtt gets each round trip from a RESULT to its BATCH.
 */
static void
session(struct worker *w, int *batches, struct medha_tbt *rtt)
{
	struct medha_msg out, rep;
	char why[512];
	double sent;
	int64_t nm;
	int rc;

	memset(&out, 0, sizeof(out));
	out.type = MEDHA_MSG_READY;
	out.worker_id = w->id;
	w->na = w->ran = 0;
	while (!*w->stop) {
		sent = medha_now();
		if (w->na > 0) {
			/* the next step runs while the answer comes */
			rc = medha_cli_msg_send(w->cli, 0, &out,
			    MEDHA_PROTO_DEAD_MS / 1e3, why, sizeof(why));
			if (rc == 0) {
				wk_ahead_run(w);
				rc = medha_cli_msg_wait(w->cli, 0, &rep, why,
				    sizeof(why));
			}
		} else {
			/* the reply may be a while: let the backend's
			   threads give the cores to the scheduler */
			medha_backend_idle(w->be);
			rc = medha_cli_msg(w->cli, 0, &out, &rep,
			    MEDHA_PROTO_DEAD_MS / 1e3, why, sizeof(why));
		}
		if (rc == 0 && rep.type == MEDHA_MSG_BATCH &&
		    out.type == MEDHA_MSG_RESULT)
			(void)medha_tbt_add(rtt, medha_now() - sent);
		result_free(&out.result);
		memset(&out, 0, sizeof(out));
		out.type = MEDHA_MSG_READY;
		out.worker_id = w->id;
		nm = rc == 0 && rep.type == MEDHA_MSG_BATCH
		    ? wk_ahead_match(w, &rep.batch)
		    : 0;
		if (nm == 0)
			wk_ahead_drop(w);
		if (rc != 0) {
			medha_log(MEDHA_LOG_WARN,
			    "scheduler lost (%s): freeing every sequence", why);
			break;
		}
		if (rep.type == MEDHA_MSG_IDLE) {
			apply_frees(w, &rep.batch);
		} else if (rep.type == MEDHA_MSG_BATCH) {
			out.type = MEDHA_MSG_RESULT;
			if (answer_batch(w, &rep.batch, nm, sent, batches,
			        &out.result) != 0) {
				medha_msg_clear(&rep);
				break;
			}
		} else {
			medha_log(MEDHA_LOG_WARN,
			    "scheduler answered %s%s%s: starting over",
			    medha_msg_type_name(rep.type),
			    rep.type == MEDHA_MSG_ERROR ? ": " : "",
			    rep.type == MEDHA_MSG_ERROR ? rep.error.reason : "");
			medha_msg_clear(&rep);
			break;
		}
		medha_msg_clear(&rep);
	}
	result_free(&out.result);
}

/* Everything w holds; failed: the stop follows a failure. */
static void
worker_free(struct worker *w, int failed)
{
	medha_cli_close(w->cli);
	free(w->seqs);
	free(w->spare);
	free(w->index);
	free(w->tok);
	free(w->bs);
	free(w->smp);
	free(w->out);
	free(w->idx);
	free(w->kvx);
	free(w->h);
	free(w->a_handle);
	free(w->a_item);
	free(w->r_items);
	free(w->r_map);
	free(w->a_len);
	free(w->a_tok);
	free(w->a_bs);
	free(w->a_lg);
	/* nng 1.5 may block for ever closing a push socket whose peer went
	 * away first (as all do at a stop): the exit comes within 3 s */
	if (w->coll != NULL) {
		medha_link_exit_by(3, failed);
		medha_coll_close(w->coll);
	}
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
}

/* w for backend be and config c, its scheduler's link open. */
static int
worker_init(struct worker *w, struct medha_backend *be,
    const struct medha_worker_config *c, volatile sig_atomic_t *stop,
    char *why, size_t whylen)
{
	int rc;

	memset(w, 0, sizeof(*w));
	w->be = be;
	w->stop = stop;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (medha_layout_init(&w->lay, c->tp, c->spp, c->kvp, c->rank) != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "rank %d: not below tp %d x spp %d x kvp %d", c->rank,
		    c->tp, c->spp, c->kvp);
	w->computes = (be->info.caps & MEDHA_BACKEND_COMPUTES) != 0;
	/* once, here: the scheduler takes only workers of its model */
	if ((rc = medha_model_fingerprint(c->model, w->fp, why, whylen)) != 0)
		return rc;
	w->max_seqs = be->info.max_seqs;
	/* prefix caching keeps sequences of requests that ended, each
	   with a block at least: room for them too */
	if (be->info.caps & MEDHA_BACKEND_FORK)
		w->max_seqs += be->info.n_blocks < (1 << 24)
		    ? (int)be->info.n_blocks
		    : 1 << 24;
	for (w->index_cap = 16; w->index_cap < 2 * w->max_seqs;)
		w->index_cap *= 2;
	w->seqs = medha_calloc(w->max_seqs, sizeof(*w->seqs));
	w->spare = medha_calloc(w->max_seqs, sizeof(*w->spare));
	w->index = medha_calloc(w->index_cap, sizeof(*w->index));
	if (w->seqs == NULL || w->spare == NULL || w->index == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	for (int i = 0; i < w->index_cap; i++)
		w->index[i] = -1;
	for (w->nspare = 0; w->nspare < w->max_seqs; w->nspare++)
		w->spare[w->nspare] = w->max_seqs - 1 - w->nspare;
	if ((rc = medha_cli_open(&w->cli, c->addr, 2, why, whylen)) != 0)
		return rc;
	if (medha_layout_size(&w->lay) > 1) {
		char url[MEDHA_PROTO_URL_MAX], w2[384];
		peer_url(c, url, sizeof(url));
		if ((rc = medha_coll_open(&w->coll, url, w2, sizeof(w2))) != 0)
			return medha_why(why, whylen, rc, "--peer: %s", w2);
		medha_coll_stop_on(w->coll, stop);
	}
	/* lookahead needs a backend that computes (sim only waits), can
	   cut a sequence back (seq_fill: a bad handle tells EINVAL from
	   EUNSUP) and has no peers to keep in step */
	w->ahead_ok = w->coll == NULL && c->lookahead && w->computes &&
	    medha_backend_seq_fill(be, -1, 0) != MEDHA_EUNSUP;
	return 0;
}

int
medha_worker_run(struct medha_backend *be,
    const struct medha_worker_config *c, volatile sig_atomic_t *stop,
    char *why, size_t whylen)
{
	struct worker w;
	struct medha_msg_hello h;
	struct medha_tbt rtt = {0}; /* RESULT sent -> next BATCH in */
	pthread_t hb;
	int rc, batches = 0;

	if ((rc = worker_init(&w, be, c, stop, why, whylen)) != 0) {
		worker_free(&w, 1);
		return rc;
	}
	pthread_create(&hb, NULL, heartbeat_main, &w);
	/* alone (a worker with peers would wait for them) and computing */
	if (w.coll == NULL && w.computes)
		warm_up(be);
	hello_of(&w, c, &h);
	while (!*stop) {
		if ((rc = hello(&w, &h, c, why, whylen)) != 0)
			break;
		medha_log(MEDHA_LOG_INFO,
		    "ready: worker %d of %s, %s backend, %lld KV blocks of %d",
		    w.id, c->addr, be->info.name, (long long)be->info.n_blocks,
		    be->info.block_size);
		session(&w, &batches, &rtt);
		free_all(&w);
	}
	pthread_mutex_lock(&w.mu);
	w.quit = 1;
	pthread_cond_signal(&w.cv);
	pthread_mutex_unlock(&w.mu);
	pthread_join(hb, NULL);
	free_all(&w);
	medha_log(MEDHA_LOG_INFO, "stopped after %d batches (%lld of %lld "
	    "steps run ahead used), %.3f s busy", batches, w.hits, w.looked,
	    w.busy);
	if (medha_tbt_count(&rtt) > 0)
		medha_log(MEDHA_LOG_INFO, "from a result sent to the next batch "
		    "in: median %.0f us, p90 %.0f us over %lld batches",
		    medha_tbt_quantile(&rtt, 0.5) * 1e6,
		    medha_tbt_quantile(&rtt, 0.9) * 1e6,
		    (long long)medha_tbt_count(&rtt));
	medha_tbt_free(&rtt);
	worker_free(&w, 0);
	return rc < 0 ? rc : 0; /* a greeting given up, or a stop */
}
