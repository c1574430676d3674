/*
 * worker.c: the live worker's loop (serve/worker/worker.h), the top of
 * its room. It dials its scheduler, says HELLO (hello.c), then asks for
 * work with READY and answers each BATCH with a RESULT of the tokens it
 * sampled, on one req context; a second context sends HEARTBEAT every
 * second while a batch runs (beat.c), so the scheduler can tell a long
 * batch from a dead worker. Every sequence lives in the backend under
 * the scheduler's request handle until a BATCH or IDLE lists it in
 * frees (seqs.c). If the scheduler goes away (no answer within
 * MEDHA_PROTO_DEAD_MS, or an ERROR), the worker frees every sequence and
 * says HELLO again.
 *
 * In a replica of several workers (tp * spp * kvp: layout.h), every
 * worker gets every batch and runs its part (batch.c), exchanging
 * hidden states and collectives with its peers (peers.c). A worker
 * alone may run the next step ahead while its RESULT makes the round
 * trip (ahead.c).
 *
 * Calls go one way, down: worker.c -> hello.c, beat.c, ahead.c ->
 * batch.c -> peers.c, seqs.c; no file calls one above it.
 */
#include "serve/worker/ahead.h"
#include "serve/worker/beat.h"
#include "serve/worker/hello.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct worker {
	struct medha_backend *be;    /* the caller's */
	volatile sig_atomic_t *stop; /* the caller's: set to stop */
	struct medha_cli *cli;       /* the scheduler's link */
	int id;                      /* the scheduler's WELCOME gave it */
	struct wk_peers peers;
	struct wk_seqs seqs;
	struct wk_batch batch;
	struct wk_ahead ahead;
	struct wk_beat beat;
	double busy; /* s spent running batches */
	/* a mixture of experts: the backend's counts of tokens routed to
	   each expert, as last reported in a RESULT */
	uint64_t xseen[MEDHA_PROTO_MAX_EXPERTS];
};

/*
 * A mixture of experts: into res the tokens routed to each expert since
 * the last RESULT (every forward call's, steps run ahead included), from
 * the first TP rank of a stage only (every rank routes the same tokens).
 */
static void
experts_count(struct worker *w, struct medha_msg_result *res)
{
	uint64_t now[MEDHA_PROTO_MAX_EXPERTS];
	int n;

	if (w->peers.lay.rt != 0 ||
	    (n = medha_backend_expert_tokens(w->be, now,
	         MEDHA_PROTO_MAX_EXPERTS)) <= 0)
		return;
	n = n < MEDHA_PROTO_MAX_EXPERTS ? n : MEDHA_PROTO_MAX_EXPERTS;
	for (int e = 0; e < n; e++) {
		res->experts[e] = (int64_t)(now[e] - w->xseen[e]);
		w->xseen[e] = now[e];
	}
	res->n_experts = n;
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

	wk_seqs_apply_frees(&w->seqs, b);
	if (nm == 0 && b->peers != NULL &&
	    wk_peers_take(&w->peers, w->be, b->peers) != 0)
		return -1;
	res->worker_id = w->id;
	wk_beat_batch(&w->beat, w->id, b->seq, 1);
	t_run = medha_now();
	if (nm > 0)
		wk_ahead_use(&w->ahead, b, nm, res);
	else
		wk_batch_run(&w->batch, b, res);
	wk_beat_batch(&w->beat, w->id, b->seq, 0);
	w->busy += medha_now() - t_run;
	if (medha_log_level >= MEDHA_LOG_DEBUG)
		log_batch(b, t_run, sent);
	if (nm == 0 && res->error[0] == '\0')
		wk_ahead_plan(&w->ahead, b);
	experts_count(w, res);
	batch_ran(batches, res);
	return 0;
}

/*
 * Send out (READY or RESULT) and wait for the answer into *rep: with a
 * step planned, the step runs while the answer comes. 0, or an error
 * with why.
 */
static int
round_trip(struct worker *w, const struct medha_msg *out, struct medha_msg *rep,
    char *why, size_t whylen)
{
	int rc;

	if (wk_ahead_planned(&w->ahead)) {
		/* the next step runs while the answer comes */
		rc = medha_cli_msg_send(w->cli, 0, out,
		    MEDHA_PROTO_DEAD_MS / 1e3, why, whylen);
		if (rc == 0) {
			wk_ahead_run(&w->ahead);
			rc = medha_cli_msg_wait(w->cli, 0, rep, why, whylen);
		}
		return rc;
	}
	/* the reply may be a while: let the backend's threads give the
	   cores to the scheduler */
	medha_backend_idle(w->be);
	return medha_cli_msg(w->cli, 0, out, rep, MEDHA_PROTO_DEAD_MS / 1e3,
	    why, whylen);
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
	wk_ahead_drop(&w->ahead);
	while (!*w->stop) {
		sent = medha_now();
		rc = round_trip(w, &out, &rep, why, sizeof(why));
		if (rc == 0 && rep.type == MEDHA_MSG_BATCH &&
		    out.type == MEDHA_MSG_RESULT)
			(void)medha_tbt_add(rtt, medha_now() - sent);
		result_free(&out.result);
		memset(&out, 0, sizeof(out));
		out.type = MEDHA_MSG_READY;
		out.worker_id = w->id;
		nm = wk_ahead_match(&w->ahead,
		    rc == 0 && rep.type == MEDHA_MSG_BATCH ? &rep.batch : NULL);
		if (rc != 0) {
			medha_log(MEDHA_LOG_WARN,
			    "scheduler lost (%s): freeing every sequence", why);
			/* its HELLO on a fresh connection (medha_cli_redial) */
			if (rc == MEDHA_ETIMEOUT)
				(void)medha_cli_redial(w->cli);
			break;
		}
		if (rep.type == MEDHA_MSG_IDLE) {
			wk_seqs_apply_frees(&w->seqs, &rep.batch);
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

/*
 * Everything w holds; failed: the stop follows a failure. nng 1.5 may
 * block for ever closing a socket whose peer went away (the scheduler's
 * link, as a worker stopped with its scheduler killed once did, or the
 * peers' push sockets, as all go at a stop): if they have not returned
 * in 3 s, the process exits (status failed), as it was about to.
 */
static void
worker_free(struct worker *w, int failed)
{
	medha_link_exit_by(3, failed);
	medha_cli_close(w->cli);
	wk_seqs_free(&w->seqs);
	wk_batch_free(&w->batch);
	wk_ahead_free(&w->ahead);
	wk_peers_close(&w->peers);
	medha_link_exit_by_off();
}

/* w for backend be and config c, its scheduler's link open; *h the
 * HELLO it says. */
static int
worker_init(struct worker *w, struct medha_backend *be,
    const struct medha_worker_config *c, volatile sig_atomic_t *stop,
    struct medha_msg_hello *h, char *why, size_t whylen)
{
	char fp[65]; /* the model's fingerprint, said in HELLO */
	int rc;

	memset(w, 0, sizeof(*w));
	w->be = be;
	w->stop = stop;
	wk_batch_init(&w->batch, be, &w->seqs, &w->peers);
	if ((rc = wk_peers_init(&w->peers, c, why, whylen)) != 0)
		return rc;
	/* once, here: the scheduler takes only workers of its model */
	if ((rc = medha_model_fingerprint(c->model, fp, why, whylen)) != 0)
		return rc;
	if ((rc = wk_seqs_init(&w->seqs, be, why, whylen)) != 0)
		return rc;
	if ((rc = medha_cli_open(&w->cli, c->addr, 2, why, whylen)) != 0)
		return rc;
	if ((rc = wk_peers_open(&w->peers, c, stop, &w->beat.dropped, why,
	         whylen)) != 0)
		return rc;
	/* lookahead needs a backend that computes (sim only waits), can
	   cut a sequence back (seq_fill: a bad handle tells EINVAL from
	   EUNSUP) and has no peers to keep in step */
	wk_ahead_init(&w->ahead, &w->batch,
	    w->peers.coll == NULL && c->lookahead && w->batch.computes &&
	        medha_backend_seq_fill(be, -1, 0) != MEDHA_EUNSUP);
	wk_hello_of(h, c, be, &w->peers, fp);
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
	int rc, batches = 0;

	if ((rc = worker_init(&w, be, c, stop, &h, why, whylen)) != 0) {
		worker_free(&w, 1);
		return rc;
	}
	wk_beat_start(&w.beat, w.cli);
	/* alone (a worker with peers would wait for them) and computing */
	if (w.peers.coll == NULL && w.batch.computes)
		wk_hello_warm_up(be);
	/* the warm-up's routing is no request's */
	(void)medha_backend_expert_tokens(be, w.xseen, MEDHA_PROTO_MAX_EXPERTS);
	while (!*stop) {
		if ((rc = wk_hello_say(w.cli, &h, c->addr, c->retry_forever,
		         stop, &w.id, why, whylen)) != 0)
			break;
		medha_log(MEDHA_LOG_INFO,
		    "ready: worker %d of %s, %s backend, %lld KV blocks of %d",
		    w.id, c->addr, be->info.name, (long long)be->info.n_blocks,
		    be->info.block_size);
		session(&w, &batches, &rtt);
		wk_seqs_clear(&w.seqs);
	}
	wk_beat_stop(&w.beat);
	wk_seqs_clear(&w.seqs);
	medha_log(MEDHA_LOG_INFO, "stopped after %d batches (%lld of %lld "
	    "steps run ahead used), %.3f s busy", batches, w.ahead.hits,
	    w.ahead.looked, w.busy);
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
