/*
 * replica.c: the live replica (replica.h). One thread runs everything
 * (serve/front.c's loop): each request message and each closed
 * connection is answered at once or held (a client's POLL until there
 * are events, a worker's READY or RESULT until there is a batch), and
 * each pass answers what has been held too long. The scheduler core
 * decides what runs; the replica only moves tokens between the core, the
 * workers (replica_work.c) and the clients (a request's arrival:
 * replica_submit.c).
 *
 * Per request (struct lreq) it keeps what the core does not: the prompt's
 * token ids, the client's connection, the sampling parameters and stop
 * strings, and the output so far (ids, and text for stop strings and the
 * record). A request's output text is streamed to its client as tokens
 * come, holding back the bytes that could still turn into a stop string.
 */
#include "serve/replica_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
medha_replica_config_default(struct medha_replica_config *c)
{
	memset(c, 0, sizeof(*c));
	c->workers = 1;
	medha_sched_config_default(&c->sched);
	c->cpu_threads = 2;
	c->target_auto = 1;
	c->drain_timeout = 30;
	c->max_queue = 100000;
	c->max_queue_bytes = (int64_t)1 << 30;
}

/* ---- requests ---- */

struct lreq *
rep_lreq_get(const struct medha_replica *r, uint64_t h)
{
	size_t slot = (size_t)(h & 0xffffffffu);

	if (slot == PRE_SLOT)
		return medha_map_get(&r->by_ch, h);
	if (slot >= r->slots || r->by_slot[slot] == NULL ||
	    r->by_slot[slot]->handle != h)
		return NULL;
	return r->by_slot[slot];
}

/*
 * A made-up prompt's ids are computed where they are sent, from its
 * seed (made of the request id: the same ids for the same id), so that
 * a SUBMIT of 60 bytes that asks for a long prompt costs no memory
 * while it waits; a mix of seed and position, so that any piece comes
 * without the ones before it.
 */
uint64_t
rep_wname(const struct medha_replica *r, uint64_t h)
{
	void *v = medha_map_get(&r->wname, h);

	return v != NULL ? (uint64_t)(uintptr_t)v : h;
}

void
rep_prompt_ids(const struct medha_replica *r, const struct lreq *q,
    int64_t at, int64_t n, int32_t *out)
{
	if (at + n > q->n_prompt) { /* a preempted request's output */
		int64_t k = at > q->n_prompt ? at : q->n_prompt;
		MEDHA_ASSERT(at + n - q->n_prompt <= q->n_out);
		for (int64_t p = k; p < at + n; p++)
			out[p - at] = q->out[p - q->n_prompt];
		if ((n = q->n_prompt - at) <= 0)
			return;
	}
	if (q->ids != NULL) {
		memcpy(out, q->ids + at, (size_t)n * sizeof(*out));
		return;
	}
	for (int64_t i = 0; i < n; i++) {
		uint64_t z = medha_mix64(q->made_up + (uint64_t)(at + i) *
		    0x9e3779b97f4a7c15ULL);
		out[i] = (int32_t)(z % (uint64_t)r->vocab);
	}
}

void
rep_lreq_free(struct lreq *q)
{
	free(q->ids);
	free(q->out);
	free(q->lps);
	free(q->text);
	free(q->forks);
	for (int i = 0; i < q->n_stop; i++)
		free(q->stop[i]);
	free(q);
}

void
rep_free_later(struct medha_replica *r, uint64_t h, int64_t keep)
{
	for (int i = 0; i < r->cfg.workers; i++) {
		struct wslot *w = &r->w[i];
		if (!w->present)
			continue;
		if (w->nfrees == w->frees_cap) {
			int64_t ncap = w->frees_cap ? 2 * w->frees_cap : 64;
			void *n = medha_reallocarray(w->frees, (size_t)ncap,
			    sizeof(*w->frees));
			void *a = n == NULL ? NULL :
			    medha_reallocarray(w->frees_after, (size_t)ncap,
			    sizeof(*w->frees_after));
			void *k = a == NULL ? NULL :
			    medha_reallocarray(w->keeps, (size_t)ncap,
			    sizeof(*w->keeps));
			if (n != NULL)
				w->frees = n;
			if (a != NULL)
				w->frees_after = a;
			if (k != NULL)
				w->keeps = k;
			if (k == NULL) {
				medha_log(MEDHA_LOG_ERROR,
				    "out of memory: worker %d keeps request "
				    "%llx",
				    i, (unsigned long long)h);
				continue;
			}
			w->frees_cap = ncap;
		}
		w->frees_after[w->nfrees] = r->bseq;
		w->keeps[w->nfrees] = keep;
		w->frees[w->nfrees++] = h;
	}
}

/* Tokens and text of q not yet sent, as an event for its client. */
void
rep_send_tokens(struct medha_replica *r, struct lreq *q, int final)
{
	struct medha_msg_event ev = {.kind = MEDHA_EVENT_TOKENS};
	size_t upto = q->text_len;

	if (q->no_stream)
		return;
	if (!final && q->n_stop > 0)
		upto = q->text_len > q->stop_max - 1
		    ? q->text_len - (q->stop_max - 1)
		    : 0;
	if (upto < q->text_sent)
		upto = q->text_sent;
	if (q->n_out == q->ids_sent && upto == q->text_sent)
		return;
	ev.handle = q->ch;
	ev.n_ids = q->n_out - q->ids_sent;
	if (ev.n_ids > 0 &&
	    (ev.ids = medha_reallocarray(NULL, (size_t)ev.n_ids,
	         sizeof(int32_t))) == NULL)
		return;
	if (ev.n_ids > 0)
		memcpy(ev.ids, q->out + q->ids_sent,
		    (size_t)ev.n_ids * sizeof(int32_t));
	if (ev.n_ids > 0 && q->lps != NULL &&
	    (ev.lps = medha_reallocarray(NULL, (size_t)ev.n_ids,
	         sizeof(*ev.lps))) != NULL)
		memcpy(ev.lps, q->lps + q->ids_sent,
		    (size_t)ev.n_ids * sizeof(*ev.lps));
	ev.text_len = upto - q->text_sent;
	if ((ev.text = malloc(ev.text_len + 1)) == NULL) {
		free(ev.ids);
		return;
	}
	if (ev.text_len > 0)
		memcpy(ev.text, q->text + q->text_sent, ev.text_len);
	ev.text[ev.text_len] = '\0';
	q->ids_sent = q->n_out;
	q->text_sent = upto;
	medha_clients_push(&r->f.clients, q->peer, &ev);
}

/* The core finished a request: its record goes to its client. */
static void
finalize(struct medha_replica *r, struct medha_record *rec)
{
	struct lreq *q = rep_lreq_get(r, rec->handle);
	struct medha_msg_event ev = {.kind = MEDHA_EVENT_RECORD};
	struct medha_client *c;

	r->served++;
	medha_log(rec->status == MEDHA_STATUS_OK ? MEDHA_LOG_DEBUG
	                                         : MEDHA_LOG_INFO,
	    "request %s: %s%s%s, %lld tokens", rec->id,
	    medha_status_name(rec->status), rec->reason[0] ? ": " : "",
	    rec->reason, (long long)rec->output_tokens);
	if (q == NULL) { /* rejected at arrival, before it had an lreq */
		medha_record_clear(rec);
		return;
	}
	if (q->text_sent > q->text_len) /* cut at a stop string */
		q->text_sent = q->text_len;
	rep_send_tokens(r, q, 1);
	if ((ev.record = malloc(sizeof(*ev.record))) != NULL) {
		*ev.record = *rec;
		ev.record->output_tokens += q->stop_hit;
		if (q->started && q->first_batch > rec->arrival)
			ev.record->queue_time = q->first_batch - rec->arrival;
		/* no output is an empty array, never an absent one */
		if (q->out == NULL)
			q->out = malloc(sizeof(*q->out));
		ev.record->token_ids = q->out;
		ev.record->n_token_ids = q->out != NULL ? q->n_out : 0;
		ev.record->logprobs = q->out != NULL ? q->lps : NULL;
		if (q->out != NULL)
			q->lps = NULL;
		ev.record->text = q->text;
		if (ev.record->text == NULL)
			ev.record->text = strdup("");
		q->out = NULL;
		q->text = NULL;
		ev.handle = ev.record->handle = q->ch;
		medha_clients_push(&r->f.clients, q->peer, &ev);
	} else
		medha_record_clear(rec);
	if ((c = medha_clients_find(&r->f.clients, q->peer, 0)) != NULL)
		c->live--;
	/* with the prefix cache, the core's TRIM ops let its sequence go */
	if (q->started && !r->prefix)
		rep_free_later(r, rep_wname(r, q->handle), 0);
	r->by_slot[q->handle & 0xffffffffu] = NULL;
	if (q->ch != q->handle)
		medha_map_del(&r->by_ch, q->ch);
	r->f.live--;
	r->held -= q->held;
	rep_lreq_free(q);
}

void
rep_drain_records(struct medha_replica *r)
{
	struct medha_record rec;

	while (medha_sched_pop_record(r->core, &rec) == 1)
		finalize(r, &rec);
}

static int
append_text(struct lreq *q, const char *s, size_t n)
{
	if (q->text_len + n + 1 > q->text_cap) {
		size_t ncap = (q->text_len + n + 1) * 2;
		char *t = realloc(q->text, ncap);
		if (t == NULL)
			return MEDHA_ENOMEM;
		q->text = t;
		q->text_cap = ncap;
	}
	memcpy(q->text + q->text_len, s, n);
	q->text_len += n;
	q->text[q->text_len] = '\0';
	return 0;
}

/*
 * A token came out for q: returns MEDHA_FINISH_STOP if the request ends
 * here (end of generation, or its text now holds a stop string, where
 * the text is cut and the token kept in the ids), else 0.
 */
int
rep_on_token(struct medha_replica *r, struct lreq *q, int32_t tok,
    const struct medha_token_lp *lp)
{
	const char *piece = "";
	size_t plen = 0, from;
	char buf[256];

	q->last = tok;
	if (r->tok != NULL && !r->sim && !q->ignore_eos &&
	    medha_tok_is_eog(r->tok, tok))
		return MEDHA_FINISH_STOP;
	for (int i = 0; i < q->n_stop_ids; i++)
		if (tok == q->stop_ids[i]) /* not output, as the EOS is not */
			return MEDHA_FINISH_STOP;
	if (q->n_out == q->out_cap) {
		int64_t ncap = q->out_cap ? 2 * q->out_cap : 64;
		void *n =
		    medha_reallocarray(q->out, (size_t)ncap, sizeof(*q->out));
		if (n == NULL)
			return 0;
		q->out = n;
		if (q->lps != NULL || lp != NULL) { /* asked for: kept alike */
			void *l = medha_reallocarray(q->lps, (size_t)ncap,
			    sizeof(*q->lps));
			if (l == NULL)
				return 0;
			q->lps = l;
		}
		q->out_cap = ncap;
	}
	if (q->lps != NULL) {
		if (lp != NULL)
			q->lps[q->n_out] = *lp;
		else
			memset(&q->lps[q->n_out], 0, sizeof(*q->lps));
	}
	q->out[q->n_out++] = tok;
	if (r->tok != NULL &&
	    medha_tok_decode(r->tok, &tok, 1, 0, buf, sizeof(buf), &plen) == 0)
		piece = buf;
	else
		plen = 0;
	from = q->text_len; /* a stop string must end in the new text */
	if (append_text(q, piece, plen) != 0)
		return 0;
	/* as vLLM, none is looked for until the output holds more than
	   min_tokens tokens, nor found in the text before the token */
	for (int i = 0; q->n_out > q->sp.min_tokens && i < q->n_stop; i++) {
		size_t len = strlen(q->stop[i]),
		       at = from > len - 1 ? from - (len - 1) : 0;
		char *hit = memmem(q->text + at, q->text_len - at, q->stop[i],
		    len);
		if (hit != NULL) {
			/* the text is cut, but the token that completed the
			   stop string was generated: token_ids and logprobs
			   keep it and finalize counts it in output_tokens
			   (the core counts no stopping token), as vLLM
			   does; the end-of-generation token stays out */
			q->stop_hit = 1;
			q->text_len = (size_t)(hit - q->text);
			q->text[q->text_len] = '\0';
			return MEDHA_FINISH_STOP;
		}
	}
	return 0;
}

static int
on_cancel(void *arg, uint32_t peer, uint64_t h)
{
	struct medha_replica *r = arg;
	struct lreq *q = rep_lreq_get(r, h);

	if (q == NULL || q->peer != peer)
		return MEDHA_ENOTFOUND;
	if (q->handle == 0) { /* tokenizing: it ends when that is over */
		q->cancelled = 1;
		return 0;
	}
	medha_sched_cancel(r->core, q->handle, "cancelled by its client",
	    now_s(r));
	rep_drain_records(r);
	return 0;
}

static void
on_status(void *arg, struct medha_msg_status *s)
{
	struct medha_replica *r = arg;

	s->workers = r->nworkers;
	s->workers_wanted = r->cfg.workers;
	s->ready = r->ready;
	if (r->core != NULL) {
		int64_t waiting = 0;
		for (int i = 0; i < medha_sched_pending(r->core); i++)
			waiting += medha_sched_active(r->core, i)->state ==
			    MEDHA_REQ_WAITING;
		s->queue = waiting;
		/* all KVP groups' (group_used says -1 past the last): the
		   cached blocks its requests share too, as the prefix they
		   share is in use, once */
		int64_t u;
		s->kv_blocks = s->kv_used = 0;
		for (int g = 0; (u = medha_sched_group_used(r->core, g)) >= 0;
		     g++) {
			s->kv_blocks += medha_sched_group_capacity(r->core);
			s->kv_used += u;
		}
		s->block_size = medha_sched_block_size(r->core);
		s->work = medha_sched_pending_work(r->core, &s->prefill);
		{
			struct medha_sched_progress pg;
			medha_sched_progress(r->core, &pg);
			s->progress = pg.batches;
		}
		if (r->prefix) {
			struct medha_prefix_stats ps;
			medha_sched_prefix_stats(r->core, &ps);
			s->evicted = ps.evictions;
		}
	}
	s->n_experts = r->n_experts;
	memcpy(s->experts, r->experts, sizeof(int64_t) * (size_t)r->n_experts);
	snprintf(s->model, sizeof(s->model), "%s", r->model);
	snprintf(s->backend, sizeof(s->backend), "%s", r->backend);
}

/* A client went away: its requests cancelled. */
static int
on_client_gone(void *arg, uint32_t peer)
{
	struct medha_replica *r = arg;
	int n = 0;

	for (size_t s = 0; s < r->slots; s++) {
		struct lreq *q = r->by_slot[s];
		if (q == NULL || q->peer != peer)
			continue;
		medha_sched_cancel(r->core, q->handle, "client went away",
		    now_s(r));
		n++;
	}
	n += rep_pre_cancel(r, peer, 0);
	rep_drain_records(r);
	return n;
}

/* Stopping, the drain over: every live request cancelled. */
static void
cancel_all(void *arg)
{
	struct medha_replica *r = arg;

	for (size_t s = 0; s < r->slots; s++)
		if (r->by_slot[s] != NULL)
			medha_sched_cancel(r->core, r->by_slot[s]->handle,
			    "scheduler stopped", now_s(r));
	rep_pre_cancel(r, 0, 1);
	rep_drain_records(r);
}

static int64_t
activity(void *arg)
{
	const struct medha_replica *r = arg;

	return r->batches + r->served;
}

static const struct medha_front_ops ops = {
    .name = "scheduler",
    .take_at_once = TAKE_AT_ONCE,
    .submit = rep_on_submit,
    .cancel = on_cancel,
    .status = on_status,
    .other = rep_on_other,
    .peer_gone = rep_on_peer_gone,
    .client_gone = on_client_gone,
    .cancel_all = cancel_all,
    .pass = rep_housekeeping,
    .activity = activity,
};

/* ---- life cycle ---- */

int
medha_replica_open(struct medha_replica **rp,
    const struct medha_replica_config *c, char *why, size_t whylen)
{
	struct medha_replica *r;
	struct medha_srv *srv;
	int rc;

	*rp = NULL;
	if (c->listen == NULL || c->workers < 1 || c->workers > 4096 ||
	    c->cpu_threads < 1 || c->drain_timeout < 0 || c->max_queue < 1 ||
	    c->max_queue_bytes < 1)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "bad replica configuration");
	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->w = medha_calloc(c->workers, sizeof(*r->w))) == NULL ||
	    (r->peers.urls = medha_calloc(c->workers,
	         sizeof(*r->peers.urls))) == NULL) {
		if (r != NULL)
			free(r->w);
		free(r);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	r->cfg = *c;
	r->t0 = medha_now();
	/* -m: the one model the workers may serve, fingerprinted once */
	if (c->model != NULL &&
	    (rc = medha_model_fingerprint(c->model, r->fp, why, whylen)) != 0) {
		free(r->peers.urls);
		free(r->w);
		free(r);
		return rc;
	}
	r->fp_fixed = c->model != NULL;
	if ((rc = medha_srv_open(&srv, c->listen, why, whylen)) != 0) {
		free(r->peers.urls);
		free(r->w);
		free(r);
		return rc;
	}
	medha_front_init(&r->f, &ops, r, srv, c->drain_timeout);
	*rp = r;
	return 0;
}

int
medha_replica_run(struct medha_replica *r, volatile sig_atomic_t *stop)
{
	int rc;

	medha_log(MEDHA_LOG_INFO, "listening at %s for %d worker%s",
	    r->cfg.listen, r->cfg.workers, r->cfg.workers > 1 ? "s" : "");
	if ((rc = medha_front_run(&r->f, stop)) != 0)
		return rc;
	medha_log(MEDHA_LOG_INFO, "stopped: %lld requests served, %lld batches",
	    (long long)r->served, (long long)r->batches);
	return 0;
}

void
medha_replica_close(struct medha_replica *r)
{
	if (r == NULL)
		return;
	rep_tok_stop(r);
	for (int i = 0; i < r->cfg.workers; i++) {
		if (r->w[i].call != NULL)
			medha_srv_drop(r->f.srv, r->w[i].call);
		free(r->w[i].frees);
		free(r->w[i].frees_after);
		free(r->w[i].keeps);
	}
	if (r->fl != NULL)
		rep_flights_void(r);
	free(r->fl);
	free(r->peers.urls);
	medha_front_free(&r->f);
	for (size_t s = 0; s < r->slots; s++)
		if (r->by_slot[s] != NULL)
			rep_lreq_free(r->by_slot[s]);
	free(r->by_slot);
	medha_map_free(&r->wname);
	medha_map_free(&r->by_ch);
	free(r->w);
	medha_sched_free(r->core);
	if (r->have_pred)
		medha_pred_free(&r->pred);
	medha_tok_close(r->tok);
	free(r);
}

