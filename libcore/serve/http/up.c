/*
 * http_up.c: the HTTP front door's side of the router (serve/http.c),
 * through the router's client (net/pcli.h): the sender thread fits each
 * request to the model's context and submits its choices, all at once,
 * and frees what has ended; the taker thread takes the answers (a
 * choice accepted, or refused) and the events, which carry the tokens
 * and records of every HTTP request, a request's only after its
 * ACCEPTED. A CANCEL is the client's to send, from any thread.
 */
#include "serve/http/impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t
http_mix(uint64_t z)
{
	return medha_mix64(z + 0x9e3779b97f4a7c15ULL);
}

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
	if (r->failed)
		return;
	r->failed = 1;
	for (int i = 0; i < r->nch; i++)
		if (r->handles[i] != 0 && r->recs[i] == NULL)
			http_push_cancel(h, r->handles[i]);
	if (r->gone)
		return;
	if (r->haio != NULL) {
		http_reply_error(h, r->haio, e, r->watching, 1);
		r->haio = NULL;
	} else if (r->hijacked) { /* OpenAI's error event */
		size_t n = 0;
		access_done(r, NULL, e->message);
		char *js = medha_oai_error_json(e, &n), *s;
		if (js != NULL && (s = malloc(n + 9)) != NULL) {
			memcpy(s, "data: ", 6);
			memcpy(s + 6, js, n);
			memcpy(s + 6 + n, "\n\n", 2);
			http_emit(h, r, s, n + 8);
			free(s);
		}
		free(js);
		/* and the stream's end, as vLLM sends it after an error */
		http_emit(h, r, "data: [DONE]\n\n", 14);
		http_emit_end(r);
	}
}

/* Every choice of r ended well (mu held): the answer's end. */
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
	if (r->hijacked || r->haio != NULL)
		access_done(r, &u, "ok");
	if (r->q.stream && (r->hijacked || r->haio != NULL)) {
		if (!r->hijacked)
			http_stream_start(h, r);
		if (r->q.include_usage)
			http_emit_chunk(h, r, NULL, 0, 0, 0, &u);
		http_emit(h, r, "data: [DONE]\n\n", 14);
		http_emit_end(r);
	} else if (!r->q.stream && r->haio != NULL) {
		struct medha_oai_head hd = {r->id, r->model, r->created,
		    r->q.chat, r->q.spec.sampling.logprobs, NULL, NULL, 0, h->tok,
		    NULL, 0};
		size_t n = 0;
		char *js = medha_oai_response_n(&hd, r->recs, r->nch, &u, &n);
		http_reply_json(h, r->haio, 200, js, n, r->watching, 1);
		free(js);
		r->haio = NULL;
	}
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
	if (r->npend == 0 && r->nend == r->nup)
		r->up = U_DONE;
	if (r->gone || r->failed) {
		http_maybe_reap(h, r);
		return;
	}
	if (rec->status != MEDHA_STATUS_OK) {
		medha_oai_error_record(&e, rec);
		fail(h, r, &e);
	} else {
		if (r->q.stream && (r->hijacked || r->haio != NULL)) {
			if (!r->hijacked)
				http_stream_start(h, r);
			char tail[4];
			size_t nt = medha_utf8_flush(&r->hold[i], tail);
			r->cur_idx = i;
			http_emit_chunk(h, r, tail, nt, 0,
			    rec->finish_reason ? rec->finish_reason
			                       : MEDHA_FINISH_STOP,
			    NULL);
			r->cur_idx = 0;
		}
		if (r->up == U_DONE && r->nend == r->nch)
			finish(h, r);
	}
	http_maybe_reap(h, r);
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
	if (r->gone || r->failed || !r->q.stream)
		return; /* the record carries the whole text */
	if (!r->hijacked && r->haio == NULL)
		return; /* answered 503: stopping */
	if (!r->hijacked)
		http_stream_start(h, r);
	r->cur_ids = ev->ids;
	r->cur_lps = ev->lps;
	r->cur_n = ev->lps != NULL ? ev->n_ids : 0;
	r->cur_idx = i;
	if ((whole = malloc(ev->text_len + 4)) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "http: %s: out of memory", r->id);
		http_on_gone(h, r);
	} else {
		n = medha_utf8_feed(&r->hold[i], ev->text, ev->text_len,
		    whole);
		if (n > 0 || r->cur_n > 0)
			http_emit_chunk(h, r, whole, n, 0, 0, NULL);
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
		if (r->reaped || r->gone)
			continue;
		if (!r->q.stream) {
			if (!r->watching && !r->rx_busy && r->haio != NULL &&
			    r->up != U_NONE && now - r->t0 >= WATCH_AFTER) {
				r->watching = 1;
				http_watch(r);
			}
			continue;
		}
		if (!r->hijacked && r->up == U_LIVE && r->haio != NULL &&
		    now - r->t0 >= HEAD_AFTER)
			http_stream_start(h, r);
		else if (r->hijacked && !r->ended && h->cfg.keepalive > 0 &&
		    now - r->last_tx >= h->cfg.keepalive)
			http_emit(h, r, ": keep-alive\n\n", 14);
	}
}

/* Every choice answered and ended (mu held): the request's end. */
static void
settle(struct medha_http *h, struct hreq *r)
{
	if (r->npend == 0 && r->nend == r->nup) {
		r->up = U_DONE;
		if (!r->failed && !r->gone && r->nend == r->nch)
			finish(h, r);
	}
	http_maybe_reap(h, r);
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
			http_push_cancel(h, o->handle);
		return;
	}
	i = (int)(o->cookie - r->cookie0);
	r->npend--;
	if (o->kind == MEDHA_PCLI_ACCEPTED) {
		if (medha_map_put(&h->live, o->handle, r) != 0) {
			http_push_cancel(h, o->handle);
			medha_oai_error_set(&e, 500, "server_error", NULL,
			    NULL, "out of memory");
			fail(h, r, &e);
		} else {
			r->handles[i] = o->handle;
			r->nup++;
			r->up = U_LIVE;
			if (r->gone || r->failed)
				http_push_cancel(h, o->handle);
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
 * A prompt (*text, or *ids of *n_ids) made ready to go upstream (0, or
 * 400): with the model (-m), a text becomes its ids here, once (the
 * router and the replica take them as they are; tok/tokq.h), and is
 * let go; then chat without max_tokens gets the room the context
 * leaves, and a prompt that with max_tokens cannot fit is refused here,
 * with the counts. Without the model a text goes up as it is (the
 * replica tokenizes it) and max_tokens is OpenAI's 16 by default.
 */
static int
fit_context(struct medha_http *h, struct hreq *r, char **text, int32_t **ids,
    int64_t *n_ids, struct medha_oai_error *e)
{
	struct medha_reqspec *rs = &r->q.spec;
	const char *field = r->q.chat ? "messages" : "prompt";
	size_t n = (size_t)*n_ids;
	int rc;

	if (!r->q.max_tokens_set && (h->tok == NULL || h->ctx_len <= 0)) {
		rs->max_tokens = 16;
		if ((rc = medha_oai_min_tokens_check(rs, e)) != 0)
			return rc;
	}
	if (h->tok == NULL)
		return 0; /* the replica tokenizes, and knows the context */
	if (*text != NULL) {
		rc = medha_tok_encode(h->tok, *text, strlen(*text),
		    MEDHA_TOK_DEFAULT, ids, &n);
		if (rc != 0)
			return medha_oai_error_set(e, 400,
			    "invalid_request_error", NULL, field,
			    "tokenizing the %s: %s", field, medha_strerror(rc));
		free(*text);
		*text = NULL;
		*n_ids = (int64_t)n;
		if (n == 0) /* as a replica refuses it */
			return medha_oai_error_set(e, 400,
			    "invalid_request_error", NULL, field,
			    "the prompt is empty");
	}
	if (h->ctx_len <= 0)
		return 0; /* the replica knows */
	if (!r->q.max_tokens_set) {
		if ((int64_t)n >= h->ctx_len)
			return medha_oai_error_set(e, 400,
			    "invalid_request_error", "context_length_exceeded",
			    field, "the %s are %zu tokens, the model's context "
			    "is %lld",
			    field, n, (long long)h->ctx_len);
		rs->max_tokens = h->ctx_len - (int64_t)n;
		return medha_oai_min_tokens_check(rs, e);
	}
	if (rs->max_tokens > h->ctx_len - (int64_t)n)
		return medha_oai_error_set(e, 400, "invalid_request_error",
		    "context_length_exceeded", NULL,
		    "%zu prompt + %lld output tokens exceed the model's "
		    "context of %lld",
		    n, (long long)rs->max_tokens, (long long)h->ctx_len);
	return 0;
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
 * thread, decide what follows. Returns with mu held.
 */
static void
submit(struct medha_http *h, struct hreq *r)
{
	struct medha_oai_error e;
	struct medha_reqspec *rs = &r->q.spec;
	int rc = 0;

	if (r->tok_rc != 0)
		rc = medha_oai_error_set(&e, 400, "invalid_request_error", NULL,
		    r->q.chat ? "messages" : "prompt", "tokenizing the %s: %s",
		    r->q.chat ? "messages" : "prompt",
		    medha_strerror(r->tok_rc));
	else if (r->q.n_prompts == 0)
		rc = fit_context(h, r, &rs->prompt, &rs->prompt_ids,
		    &rs->prompt_tokens, &e);
	for (int p = 0; rc == 0 && p < r->q.n_prompts; p++)
		rc = fit_context(h, r, &r->q.prompts[p].text,
		    &r->q.prompts[p].ids, &r->q.prompts[p].n_ids, &e);

	pthread_mutex_lock(&h->mu);
	if (rc != 0)
		fail(h, r, &e);
	r->cookie0 = h->next_cookie + 1;
	h->next_cookie += (uint64_t)r->nch;
	for (int i = 0; i < r->nch && !r->gone && !r->failed; i++)
		if (submit1(h, r, i, &e) != 0)
			fail(h, r, &e);
	settle(h, r);
}

/* ---- long texts: the tokenizer's thread (tok/tokq.h) ---- */

/* A text of up to MEDHA_TOKQ_INLINE bytes is tokenized on the sender's
 * thread; a longer one on the tokenizer's, so that the requests after
 * it are submitted meanwhile (9 MB/s: a body of 32 MB would hold them
 * 3.5 s). */

/* A long text of r's: prompt p's (-1: the request's one prompt). */
struct hjob {
	struct medha_tokq_job tj; /* first */
	struct hreq *r;           /* stays while r->ntok > 0 */
	int p;
};

/* The tokenizer's thread finished a job: the sender takes it. */
static void
tok_wake(void *arg)
{
	struct medha_http *h = arg;

	pthread_mutex_lock(&h->mu);
	h->tok_news = 1;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

/* Text p of r (-1: its one prompt): where it is, and its ids go. */
static char **
text_of(struct hreq *r, int p)
{
	return p < 0 ? &r->q.spec.prompt : &r->q.prompts[p].text;
}

/*
 * r's long texts to the tokenizer's thread (mu held): how many went; r
 * is submitted when their ids are back (tok_take). One that cannot go
 * is tokenized on the sender's thread, as a short one is.
 */
static int
tok_push(struct medha_http *h, struct hreq *r)
{
	int np = r->q.n_prompts > 0 ? r->q.n_prompts : 1;

	if (h->tok == NULL)
		return 0;
	for (int i = 0; i < np; i++) {
		int p = r->q.n_prompts > 0 ? i : -1;
		char *text = *text_of(r, p);
		struct hjob *j;
		if (text == NULL || strlen(text) <= MEDHA_TOKQ_INLINE)
			continue;
		if ((h->tokq == NULL &&
		        medha_tokq_open(&h->tokq, tok_wake, h) != 0) ||
		    (j = calloc(1, sizeof(*j))) == NULL)
			break;
		j->r = r;
		j->p = p;
		if (medha_tokq_push(h->tokq, &j->tj, h->tok, text,
		        strlen(text), MEDHA_TOK_DEFAULT) != 0) {
			free(j);
			break;
		}
		r->ntok++;
	}
	return r->ntok;
}

/*
 * The jobs the tokenizer's thread finished (mu held): each text's ids
 * in its place; a request whose texts are all back is submitted
 * (returns with mu held).
 */
static void
tok_take(struct medha_http *h)
{
	struct medha_tokq_job *tj;

	h->tok_news = 0;
	while (h->tokq != NULL && (tj = medha_tokq_take(h->tokq)) != NULL) {
		struct hjob *j = (struct hjob *)tj;
		struct hreq *r = j->r;
		char **text = text_of(r, j->p);
		if (tj->rc != 0 && r->tok_rc == 0)
			r->tok_rc = tj->rc;
		if (tj->rc == 0) {
			free(*text);
			*text = NULL;
			if (j->p < 0) {
				r->q.spec.prompt_ids = tj->ids;
				r->q.spec.prompt_tokens = (int64_t)tj->n;
			} else {
				r->q.prompts[j->p].ids = tj->ids;
				r->q.prompts[j->p].n_ids = (int64_t)tj->n;
			}
		}
		free(j);
		if (--r->ntok == 0) {
			pthread_mutex_unlock(&h->mu);
			submit(h, r); /* returns locked */
		}
	}
}

/* A job never taken back (closing): its request is freed after. */
static void
tok_drop(void *arg, struct medha_tokq_job *tj)
{
	(void)arg;
	free(tj);
}

void
http_tok_stop(struct medha_http *h)
{
	medha_tokq_close(h->tokq, tok_drop, NULL);
	h->tokq = NULL;
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
			http_req_free(h, r);
			pthread_mutex_lock(&h->mu);
			continue;
		}
		if (h->quit)
			break;
		if (h->tok_news) {
			tok_take(h);
			continue;
		}
		if ((r = h->sq) != NULL) {
			h->sq = r->qnext;
			if (h->sq == NULL)
				h->sq_tail = NULL;
			if (r->gone || r->haio == NULL) {
				r->up = U_DONE;
				http_maybe_reap(h, r);
				continue;
			}
			r->up = U_SUBMITTED;
			if (tok_push(h, r) > 0)
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
