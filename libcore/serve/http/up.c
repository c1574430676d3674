/*
 * up.c: the HTTP front door's side of the router (serve/http/), through
 * the router's client (net/pcli.h): the sender thread makes each
 * request's prompts ready (prompt.c) and submits its choices, all at
 * once, and frees what has ended; the taker thread takes the answers (a
 * choice accepted, or refused) and the events, which carry the tokens
 * and records of every HTTP request, a request's only after its
 * ACCEPTED, and turns them into its answer. A CANCEL is the client's to
 * send, from any thread. Calls prompt.c, req.c (the request's state)
 * and stream.c (the bytes out), never conn.c or http.c.
 */
#include "serve/http/impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which of r's choices handle is (-1: none). */
static int
choice_of(const struct hreq *r, uint64_t handle)
{
	for (int i = 0; i < r->nch; i++)
		if (r->handles[i] == handle)
			return i;
	return -1;
}

/*
 * The access line of a completion answered 200 (mu held): u's tokens,
 * how it ended (ok, or the reason of a stream that failed after its
 * headers), the time since it came. A refusal's is the reply's own
 * (http_reply_allow).
 */
static void
access_done(const struct hreq *r, const struct medha_record *u,
    const char *how)
{
	medha_log(MEDHA_LOG_INFO,
	    "http: POST %s 200 %s, %lld tokens in, %lld out, %s, %.3f s%s",
	    r->q.chat ? "/v1/chat/completions" : "/v1/completions", r->id,
	    u != NULL ? (long long)u->prompt_tokens : 0LL,
	    u != NULL ? (long long)u->output_tokens : 0LL, how,
	    medha_now() - r->t0, r->q.stream ? ", streamed" : "");
}

/*
 * r failed (mu held): e answers it, as an error reply or, after a
 * stream's headers, OpenAI's error event and "data: [DONE]"; its other choices are
 * cancelled and their records only counted.
 */
static void
fail(struct medha_http *h, struct hreq *r, const struct medha_oai_error *e)
{
	if (r->state >= HS_ANSWERED)
		return;
	if (r->haio != NULL) {
		http_reply_error(h, r->haio, e, r->watching, 1);
		r->haio = NULL;
	} else if (r->state == HS_STREAM) { /* OpenAI's error event */
		size_t n = 0;
		access_done(r, NULL, e->message);
		char *js = medha_oai_error_json(e, &n), *s;
		if (js != NULL && (s = malloc(n + 9)) != NULL) {
			memcpy(s, "data: ", 6);
			memcpy(s + 6, js, n);
			memcpy(s + 6 + n, "\n\n", 2);
			hreq_send(h, r, s, n + 8);
			free(s);
		}
		free(js);
		/* and the stream's end, as vLLM sends it after an error */
		hreq_send(h, r, "data: [DONE]\n\n", 14);
		http_put_end(r);
	}
	hreq_move(h, r, HS_ANSWERED); /* its other choices cancelled */
}

/* Every choice of r ended well (mu held, r LIVE or STREAM): the
 * answer. */
static void
finish(struct medha_http *h, struct hreq *r)
{
	struct medha_record u = *r->recs[0]; /* counts only */
	int n1 = r->q.n > 1 ? r->q.n : 1;

	/* each prompt counted once; its cached tokens those every choice
	   of it found (the first computed them, the others forked) */
	u.output_tokens = u.prompt_tokens = u.cached_tokens = 0;
	for (int p = 0; p < r->nch; p += n1) {
		int64_t cached = r->recs[p]->cached_tokens;
		u.prompt_tokens += r->recs[p]->prompt_tokens;
		for (int i = p; i < p + n1; i++) {
			u.output_tokens += r->recs[i]->output_tokens;
			if (r->recs[i]->cached_tokens < cached)
				cached = r->recs[i]->cached_tokens;
		}
		u.cached_tokens += cached;
	}
	access_done(r, &u, "ok");
	if (r->q.stream) {
		if (hreq_move(h, r, HS_STREAM) != HS_STREAM)
			return; /* gone */
		if (r->q.include_usage)
			hreq_send_chunk(h, r, NULL, 0, 0, 0, &u);
		hreq_send(h, r, "data: [DONE]\n\n", 14);
		http_put_end(r);
	} else {
		struct medha_oai_head hd = {r->id, r->model, r->created,
		    r->q.chat, r->q.spec.sampling.logprobs, NULL, NULL, 0, NULL,
		    0};
		size_t n = 0;
		char *js = medha_oai_response_n(&hd, r->recs, r->nch, &u, &n);
		http_reply_json(h, r->haio, 200, js, n, r->watching, 1);
		free(js);
		r->haio = NULL;
	}
	hreq_move(h, r, HS_ANSWERED);
}

/*
 * Whether r's state has its answer to come (mu held): LIVE or STREAM.
 * Else it was answered or refused already, its client went away (then
 * what comes is only counted), or it is not accepted yet.
 */
static int
answering(const struct hreq *r)
{
	return r->state == HS_LIVE || r->state == HS_STREAM;
}

/* Every choice answered and ended (mu held): the request's end. */
static void
settle(struct medha_http *h, struct hreq *r)
{
	if (!r->sending && r->npend == 0 && r->nend == r->nup &&
	    r->nend == r->nch && answering(r))
		finish(h, r);
	hreq_reap(h, r);
}

/* Choice i's record (mu held; taken from ev). */
static void
on_record(struct medha_http *h, struct hreq *r, int i,
    struct medha_msg_event *ev)
{
	struct medha_record *rec = ev->record;
	struct medha_oai_error e;

	ev->record = NULL;
	r->recs[i] = rec;
	r->nend++;
	medha_map_del(&h->live, r->handles[i]);
	if (!answering(r)) {
		hreq_reap(h, r);
		return;
	}
	if (rec->status != MEDHA_STATUS_OK) {
		medha_oai_error_record(&e, rec);
		fail(h, r, &e);
	} else if (r->q.stream && hreq_move(h, r, HS_STREAM) == HS_STREAM) {
		char tail[4];
		size_t nt = medha_utf8_flush(&r->hold[i], tail);
		r->cur_idx = i;
		hreq_send_chunk(h, r, tail, nt, 0,
		    rec->finish_reason ? rec->finish_reason : MEDHA_FINISH_STOP,
		    NULL);
		r->cur_idx = 0;
	}
	settle(h, r);
}

/* One of the router's events for r (mu held; a record is taken). */
static void
on_event(struct medha_http *h, struct hreq *r, struct medha_msg_event *ev)
{
	int i = choice_of(r, ev->handle);
	char *whole;
	size_t n;

	if (i < 0)
		return;
	if (ev->kind != MEDHA_EVENT_TOKENS) {
		on_record(h, r, i, ev);
		return;
	}
	if (!r->q.stream || !answering(r))
		return; /* the record carries the whole text, or it was
		           answered (an error, 503: stopping) or is gone */
	if (hreq_move(h, r, HS_STREAM) != HS_STREAM)
		return; /* gone */
	r->cur_ids = ev->ids;
	r->cur_lps = ev->lps;
	r->cur_n = ev->lps != NULL ? ev->n_ids : 0;
	r->cur_idx = i;
	if ((whole = malloc(ev->text_len + 4)) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "http: %s: out of memory", r->id);
		hreq_move(h, r, HS_GONE);
	} else {
		n = medha_utf8_feed(&r->hold[i], ev->text, ev->text_len,
		    whole);
		if (n > 0 || r->cur_n > 0)
			hreq_send_chunk(h, r, whole, n, 0, 0, NULL);
		free(whole);
	}
	r->cur_ids = NULL;
	r->cur_lps = NULL;
	r->cur_n = 0;
	r->cur_idx = 0;
}

/*
 * Every TICK s at least (mu held): a stream the router has
 * accepted gets its status line and headers HEAD_AFTER s after it came,
 * token or not, so that a client's read timeout does not run out during
 * a long prefill (a refusal quicker than that is still an HTTP error),
 * and an open stream silent for cfg.keepalive s gets an SSE comment.
 * A whole answer waited for WATCH_AFTER s gets a watch read on its
 * connection, so that a client that hangs up cancels it (http.c).
 */
#define HEAD_AFTER 0.5
#define WATCH_AFTER 0.25
#define TICK 0.1

static void
tick(struct medha_http *h, double now)
{
	for (struct hreq *r = h->all; r != NULL; r = r->next) {
		int waiting = r->state >= HS_QUEUED && r->state <= HS_LIVE;
		if (!r->q.stream) {
			if (waiting && !r->watching && !r->rx_busy &&
			    now - r->t0 >= WATCH_AFTER) {
				r->watching = 1;
				http_watch(r);
			}
			continue;
		}
		if (r->state == HS_LIVE && now - r->t0 >= HEAD_AFTER)
			hreq_move(h, r, HS_STREAM);
		else if (r->state == HS_STREAM && h->cfg.keepalive > 0 &&
		    now - r->last_tx >= h->cfg.keepalive)
			hreq_send(h, r, ": keep-alive\n\n", 14);
	}
}

/*
 * The answer o to a choice's SUBMIT (mu held): its handle, or the
 * request fails; once every choice is answered and has ended, the
 * request's end.
 */
static void
on_answer(struct medha_http *h, struct medha_pcli_out *o)
{
	struct hreq *r = medha_map_del(&h->subs, o->cookie);
	struct medha_oai_error e;
	int i;

	if (r == NULL) { /* cannot be: every cookie is in subs */
		if (o->kind == MEDHA_PCLI_ACCEPTED)
			medha_pcli_cancel(h->pc, o->handle);
		return;
	}
	i = (int)(o->cookie - r->cookie0);
	r->npend--;
	if (o->kind == MEDHA_PCLI_ACCEPTED) {
		if (medha_map_put(&h->live, o->handle, r) != 0) {
			medha_pcli_cancel(h->pc, o->handle);
			medha_oai_error_set(&e, 500, "server_error", NULL,
			    NULL, "out of memory");
			fail(h, r, &e);
		} else {
			r->handles[i] = o->handle;
			r->nup++;
			if (r->state == HS_SUBMITTED)
				hreq_move(h, r, HS_LIVE);
			else if (r->state >= HS_ANSWERED)
				medha_pcli_cancel(h->pc, o->handle);
		}
	} else {
		if (o->rc != 0)
			medha_oai_error_set(&e, 503, "server_error",
			    "service_unavailable", NULL,
			    "the router did not answer: %s", o->why);
		else if (o->msg.type == MEDHA_MSG_ERROR)
			medha_oai_error_submit(&e, o->msg.error.code,
			    o->msg.error.reason);
		else
			medha_oai_error_set(&e, 500, "server_error", NULL,
			    NULL, "the router answered %s",
			    medha_msg_type_name(o->msg.type));
		fail(h, r, &e);
	}
	settle(h, r);
}

void *
http_taker_main(void *arg)
{
	struct medha_http *h = arg;
	struct medha_pcli_out o;
	double ticked = 0;

	for (;;) {
		int got = medha_pcli_take(h->pc, TICK, &o);
		double t = medha_now();
		pthread_mutex_lock(&h->mu);
		if (h->quit) {
			pthread_mutex_unlock(&h->mu);
			if (got)
				medha_pcli_out_clear(&o);
			return NULL;
		}
		if (got && o.kind == MEDHA_PCLI_EVENT) {
			struct hreq *r = medha_map_get(&h->live, o.handle);
			if (r != NULL)
				on_event(h, r, &o.ev);
		} else if (got && (o.kind == MEDHA_PCLI_ACCEPTED ||
		               o.kind == MEDHA_PCLI_REFUSED))
			on_answer(h, &o);
		if (t - ticked >= TICK) {
			tick(h, t);
			ticked = t;
		}
		pthread_mutex_unlock(&h->mu);
		if (got)
			medha_pcli_out_clear(&o);
	}
}

/*
 * Submit r's choice i (mu held, let go while the client encodes it): 0,
 * its answer to come to the taker, else an HTTP status with *e set. Its
 * prompt is prompt i / n's, its seed the request's + i % n; its id the
 * request's, "-i" after it past the first.
 */
static int
submit1(struct medha_http *h, struct hreq *r, int i, struct medha_oai_error *e)
{
	struct medha_reqspec rs = r->q.spec; /* borrowed */
	uint64_t cookie = r->cookie0 + (uint64_t)i;
	char why[256];
	int rc, n1 = r->q.n > 1 ? r->q.n : 1;

	if (r->q.n_prompts > 0) {
		const struct medha_oai_prompt *p = &r->q.prompts[i / n1];
		rs.prompt = p->text;
		rs.prompt_ids = p->ids;
		rs.prompt_tokens = p->n_ids;
	}
	/* a response that is not a stream is made from the record alone */
	rs.no_stream = !r->q.stream;
	rs.sampling.seed += (uint64_t)(i % n1);
	if (i > 0)
		snprintf(rs.id, sizeof(rs.id), "%.48s-%d", r->id, i);
	if (medha_map_put(&h->subs, cookie, r) != 0)
		return medha_oai_error_set(e, 500, "server_error", NULL, NULL,
		    "out of memory");
	r->npend++; /* r stays while an answer is due */
	pthread_mutex_unlock(&h->mu); /* a long prompt takes a while */
	rc = medha_pcli_submit(h->pc, &rs, cookie, DEAD, why, sizeof(why));
	pthread_mutex_lock(&h->mu);
	if (rc == 0)
		return 0;
	medha_map_del(&h->subs, cookie);
	r->npend--;
	return medha_oai_error_set(e, 503, "server_error",
	    "service_unavailable", NULL, "the router did not answer: %s", why);
}

/*
 * Submit r's choices to the router, in order and without waiting for
 * their answers (the first's prompt is computed once: the others wait
 * for its blocks and fork from them); the answers, taken by the taker
 * thread, decide what follows. Called without mu, returns with it
 * held, the sender done with r.
 */
static void
submit(struct medha_http *h, struct hreq *r)
{
	struct medha_oai_error e;
	int rc = http_fit(h, r, &e);

	pthread_mutex_lock(&h->mu);
	if (rc != 0)
		fail(h, r, &e);
	r->cookie0 = h->next_cookie + 1;
	h->next_cookie += (uint64_t)r->nch;
	for (int i = 0; i < r->nch && r->state < HS_ANSWERED; i++)
		if (submit1(h, r, i, &e) != 0)
			fail(h, r, &e);
	r->sending = 0;
	settle(h, r);
}

void *
http_sender_main(void *arg)
{
	struct medha_http *h = arg;

	pthread_mutex_lock(&h->mu);
	for (;;) {
		struct hreq *r;
		if ((r = h->reap) != NULL) {
			h->reap = r->qnext;
			pthread_mutex_unlock(&h->mu);
			hreq_free(h, r);
			pthread_mutex_lock(&h->mu);
			continue;
		}
		if (h->quit)
			break;
		if (h->tok_news) {
			if ((r = http_tok_take(h)) != NULL) {
				pthread_mutex_unlock(&h->mu);
				submit(h, r); /* returns locked */
			}
			continue;
		}
		if ((r = h->sq) != NULL) {
			h->sq = r->qnext;
			if (h->sq == NULL)
				h->sq_tail = NULL;
			if (r->state != HS_QUEUED) { /* answered, or gone */
				r->sending = 0;
				hreq_reap(h, r);
				continue;
			}
			hreq_move(h, r, HS_SUBMITTED);
			if (http_tok_push(h, r) > 0)
				continue; /* submitted when its ids are back */
			pthread_mutex_unlock(&h->mu);
			submit(h, r); /* returns locked */
			continue;
		}
		pthread_cond_wait(&h->cv, &h->mu);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}
