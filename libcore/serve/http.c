/*
 * http.c: the router's HTTP front door (http.h). nng's HTTP server calls
 * on_http() on its own threads for every request, at one handler that
 * owns the whole tree, so that every route, method and error is ours to
 * answer in OpenAI's JSON. What must not block there goes elsewhere:
 *
 *   - a request body is read with an aio of our own (bounded in size and
 *     time), then parsed (http_api.c) in its callback;
 *   - the sender thread makes the SUBMIT and CANCEL calls to the router
 *     (ctx 0) and frees what has ended;
 *   - the poller thread keeps a POLL outstanding (ctx 1): its events
 *     carry the tokens and records of every HTTP request at once.
 *
 * A non-streaming request keeps nng's handler aio until its record comes
 * and is then answered through the server (keep-alive is kept). A
 * streaming request keeps it until its first token: then it takes the
 * connection over (nng_http_hijack), writes the SSE head and chunks
 * itself (chunked transfer coding) and closes the connection after
 * "data: [DONE]". A refusal that comes before any token (a prompt too
 * long, an overloaded router) is thus an ordinary HTTP error even when
 * streaming. While a stream runs, a read is kept posted on its
 * connection: when it fails, or a write fails, the client has gone and
 * the request is cancelled upstream; its record still comes, and only
 * then is the request freed (nothing is left behind in the router).
 *
 * One mutex (h->mu) guards every request's state; nng's callbacks, the
 * two threads and medha_http_close() take it. I/O is only started under
 * it (nng completes aios on its own threads, never in the caller).
 */
#include "serve/http.h"

#include "map.h"
#include "net/link.h"
#include "net/proto.h"

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <errno.h>
#include <pthread.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEAD (MEDHA_PROTO_DEAD_MS / 1e3)

struct buf {
	char *p;
	size_t n, cap;
};

/* Where a request stands with the router. */
enum { U_NONE, U_QUEUED, U_SUBMITTED, U_LIVE, U_DONE };

struct hreq {
	struct medha_http *h;
	struct hreq *prev, *next; /* h->all */
	struct hreq *qnext;       /* h->sq or h->reap */
	char id[48];              /* "cmpl-..." / "chatcmpl-...": also the
	                             request id upstream */
	char model[MEDHA_PROTO_NAME_MAX]; /* the model id answered */
	int64_t created;
	struct medha_oai_req q;
	nng_aio *haio;       /* nng's handler aio, until answered */
	nng_http_conn *conn; /* the server's until hijacked, then ours */
	nng_http_req *nreq;  /* likewise */
	int chat;            /* /v1/chat/completions */
	int hijacked;        /* a stream that took the connection */
	nng_aio *rx;         /* the body read, then a stream's watch read */
	nng_aio *tx;         /* a stream's writes */
	int rx_busy, tx_busy;
	int cont; /* tx is writing "100 Continue": the body follows */
	char *body;
	size_t body_len;
	char rxbuf[256];
	int up;          /* U_* */
	uint64_t handle; /* the router's, once U_LIVE */
	int gone;        /* its client went away */
	int ended;       /* a stream's last bytes are queued */
	int reaped;      /* on h->reap: callbacks leave it alone */
	struct buf out;  /* a stream's bytes not yet handed to tx */
	struct buf wr;   /* those tx is writing */
};

/* An event that came before its request's ACCEPTED was read. */
struct early {
	double since;
	struct medha_msg_event ev;
};

struct medha_http {
	struct medha_http_config cfg;
	nng_url *url;
	nng_http_server *srv;
	nng_http_handler *hd;
	int port;
	struct medha_cli *cli;
	struct medha_tok *tok;               /* from cfg.model, or NULL */
	int64_t ctx_len;                     /* its context length, or 0 */
	char model_id[MEDHA_PROTO_NAME_MAX]; /* cfg.model's basename, or "" */
	int64_t started;                     /* Unix time */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* work for the sender */
	int quit;
	pthread_t sender, poller;
	int threads;
	/* under mu */
	struct hreq *all;          /* every request not yet reaped */
	struct hreq *sq, *sq_tail; /* to submit */
	struct hreq *reap;         /* to free */
	uint64_t *cancels;         /* handles to cancel */
	int ncancel, cancel_cap;
	struct medha_map live; /* handle -> hreq */
	struct early *early;
	int nearly, early_cap;
	uint64_t seq;
	struct medha_http_stats st;
};

static uint64_t
mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void
medha_http_config_default(struct medha_http_config *c)
{
	memset(c, 0, sizeof(*c));
	c->max_conns = 1024;
	c->max_body = 1 << 20;
	c->body_timeout = 10;
}

static int
buf_add(struct buf *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		size_t ncap = b->cap ? 2 * b->cap : 1024;
		while (ncap < b->n + n)
			ncap *= 2;
		char *np = realloc(b->p, ncap);
		if (np == NULL)
			return MEDHA_ENOMEM;
		b->p = np;
		b->cap = ncap;
	}
	memcpy(b->p + b->n, p, n);
	b->n += n;
	return 0;
}

/* ---- answers through the server ---- */

static void
count_code(struct medha_http *h, int code)
{
	int i = 0;

	while (i < MEDHA_HTTP_CODES && medha_http_codes[i] != code)
		i++;
	h->st.responses[i]++;
}

/*
 * Answer nng's handler aio with status and len bytes of body (mutex
 * held or not: counts under it when locked is 0). close asks the server
 * to close the connection after it (a body was left unread).
 */
static void
reply(struct medha_http *h, nng_aio *aio, int status, const char *ctype,
    const char *body, size_t len, int close, int locked)
{
	nng_http_res *res;

	if (!locked)
		pthread_mutex_lock(&h->mu);
	count_code(h, status);
	if (!locked)
		pthread_mutex_unlock(&h->mu);
	if (nng_http_res_alloc(&res) != 0) {
		nng_aio_finish(aio, NNG_ENOMEM); /* the server closes */
		return;
	}
	if (nng_http_res_set_status(res, (uint16_t)status) != 0 ||
	    nng_http_res_set_header(res, "Content-Type", ctype) != 0 ||
	    (close &&
	        nng_http_res_set_header(res, "Connection", "close") != 0) ||
	    (status == 405 &&
	        nng_http_res_set_header(res, "Allow", "GET, POST") != 0) ||
	    nng_http_res_copy_data(res, body, len) != 0) {
		nng_http_res_free(res);
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

static void
reply_json(struct medha_http *h, nng_aio *aio, int status, const char *js,
    size_t len, int close, int locked)
{
	if (js == NULL) {
		static const char nomem[] =
		    "{\"error\":{\"message\":\"out of memory\",\"type\":"
		    "\"server_error\",\"param\":null,\"code\":null}}";
		status = 500;
		js = nomem;
		len = sizeof(nomem) - 1;
	}
	reply(h, aio, status, "application/json", js, len, close, locked);
}

static void
reply_error(struct medha_http *h, nng_aio *aio, const struct medha_oai_error *e,
    int close, int locked)
{
	size_t len = 0;
	char *js = medha_oai_error_json(e, &len);

	reply_json(h, aio, e->status, js, len, close, locked);
	free(js);
}

/* ---- request lifetime ---- */

/* Hand r to the sender to be freed once nothing refers to it (mu held). */
static void
maybe_reap(struct medha_http *h, struct hreq *r)
{
	if (r->reaped || r->haio != NULL ||
	    (r->up != U_NONE && r->up != U_DONE) ||
	    (r->hijacked && !r->gone && (r->tx_busy || r->out.n > 0)))
		return;
	r->reaped = 1;
	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		h->all = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
	r->qnext = h->reap;
	h->reap = r;
	pthread_cond_signal(&h->cv);
}

/* Free r: on the sender's thread (or at close), never in a callback. */
static void
req_free(struct medha_http *h, struct hreq *r)
{
	if (r->hijacked && r->conn != NULL)
		nng_http_conn_close(r->conn); /* ends the reads and writes */
	if (r->rx != NULL)
		nng_aio_free(r->rx); /* waits for its callback */
	if (r->tx != NULL)
		nng_aio_free(r->tx);
	if (r->hijacked && r->nreq != NULL)
		nng_http_req_free(r->nreq);
	pthread_mutex_lock(&h->mu);
	h->st.in_progress--;
	if (r->hijacked)
		h->st.streams--;
	pthread_mutex_unlock(&h->mu);
	medha_oai_req_clear(&r->q);
	free(r->body);
	free(r->out.p);
	free(r->wr.p);
	free(r);
}

static void
push_cancel(struct medha_http *h, uint64_t handle)
{
	if (h->ncancel == h->cancel_cap) {
		int ncap = h->cancel_cap ? 2 * h->cancel_cap : 64;
		void *n = medha_reallocarray(h->cancels, (size_t)ncap,
		    sizeof(*h->cancels));
		if (n == NULL) { /* it runs to its end: bounded */
			medha_log(MEDHA_LOG_ERROR,
			    "http: out of memory cancelling a request");
			return;
		}
		h->cancels = n;
		h->cancel_cap = ncap;
	}
	h->cancels[h->ncancel++] = handle;
	pthread_cond_signal(&h->cv);
}

/* r's client is gone (mu held): cancel it upstream; its record ends it. */
static void
on_gone(struct medha_http *h, struct hreq *r)
{
	if (r->gone)
		return;
	r->gone = 1;
	r->out.n = 0;
	if (r->up == U_LIVE)
		push_cancel(h, r->handle);
	medha_log(MEDHA_LOG_INFO, "http: %s: client went away", r->id);
	maybe_reap(h, r);
}

/* ---- streams ---- */

static void tx_cb(void *arg);

/* Write what is queued, if no write is under way (mu held). */
static void
kick(struct hreq *r)
{
	nng_iov iov;
	struct buf t;

	if (r->tx_busy || r->out.n == 0 || r->gone)
		return;
	t = r->wr;
	r->wr = r->out;
	r->out = t;
	r->out.n = 0;
	iov.iov_buf = r->wr.p;
	iov.iov_len = r->wr.n;
	nng_aio_set_iov(r->tx, 1, &iov);
	nng_aio_set_timeout(r->tx, NNG_DURATION_INFINITE);
	r->tx_busy = 1;
	nng_http_conn_write_all(r->conn, r->tx);
}

/* Queue n bytes of p as one chunk of the chunked body (mu held). */
static void
emit(struct medha_http *h, struct hreq *r, const char *p, size_t n)
{
	char hd[24];
	int k = snprintf(hd, sizeof(hd), "%zx\r\n", n);

	if (r->gone || n == 0)
		return;
	if (buf_add(&r->out, hd, (size_t)k) != 0 ||
	    buf_add(&r->out, p, n) != 0 || buf_add(&r->out, "\r\n", 2) != 0) {
		medha_log(MEDHA_LOG_ERROR, "http: %s: out of memory", r->id);
		on_gone(h, r);
		return;
	}
	kick(r);
}

static void
emit_chunk(struct medha_http *h, struct hreq *r, const char *text, size_t len,
    int role, int finish, const struct medha_record *usage)
{
	struct medha_oai_head hd = {r->id, r->model, r->created, r->q.chat};
	size_t n = 0;
	char *s = medha_oai_chunk(&hd, text, len, role, finish, usage,
	    r->q.include_usage, &n);

	if (s == NULL) {
		medha_log(MEDHA_LOG_ERROR, "http: %s: out of memory", r->id);
		on_gone(h, r);
		return;
	}
	emit(h, r, s, n);
	free(s);
}

/* The end of the chunked body: the connection closes once it is out. */
static void
emit_end(struct hreq *r)
{
	r->ended = 1;
	if (!r->gone && buf_add(&r->out, "0\r\n\r\n", 5) == 0)
		kick(r);
}

static void
watch(struct hreq *r)
{
	nng_iov iov = {.iov_buf = r->rxbuf, .iov_len = sizeof(r->rxbuf)};

	nng_aio_set_iov(r->rx, 1, &iov);
	nng_aio_set_timeout(r->rx, NNG_DURATION_INFINITE);
	r->rx_busy = 1;
	nng_http_conn_read(r->conn, r->rx);
}

/* Take r's connection over and start its event stream (mu held). */
static void
stream_start(struct medha_http *h, struct hreq *r)
{
	static const char head[] = "HTTP/1.1 200 OK\r\n"
	                           "Content-Type: text/event-stream\r\n"
	                           "Cache-Control: no-cache\r\n"
	                           "Connection: close\r\n"
	                           "Transfer-Encoding: chunked\r\n\r\n";

	nng_http_hijack(r->conn);
	r->hijacked = 1;
	nng_aio_set_output(r->haio, 0, NULL);
	nng_aio_finish(r->haio, 0); /* the server lets the connection go */
	r->haio = NULL;
	count_code(h, 200);
	h->st.streams++;
	if (buf_add(&r->out, head, sizeof(head) - 1) != 0) {
		on_gone(h, r);
		return;
	}
	kick(r);
	watch(r);
	if (r->q.chat) /* OpenAI's first chunk: the role */
		emit_chunk(h, r, "", 0, 1, 0, NULL);
}

static void read_body(struct medha_http *h, struct hreq *r);

static void
tx_cb(void *arg)
{
	struct hreq *r = arg;
	struct medha_http *h = r->h;
	int rv = nng_aio_result(r->tx);

	pthread_mutex_lock(&h->mu);
	r->tx_busy = 0;
	if (r->cont) { /* "100 Continue" is out: now the body */
		r->cont = 0;
		if (r->haio == NULL) {
			r->up = U_DONE;
			maybe_reap(h, r);
		} else if (rv != 0) {
			nng_aio_finish(r->haio, rv); /* the server closes */
			r->haio = NULL;
			maybe_reap(h, r);
		} else
			read_body(h, r);
	} else if (!r->reaped) {
		r->wr.n = 0;
		if (rv != 0)
			on_gone(h, r);
		else {
			kick(r);
			maybe_reap(h, r);
		}
	}
	pthread_mutex_unlock(&h->mu);
}

/* ---- upstream events ---- */

/* One of the router's events for r (mu held; the event is only read). */
static void
on_event(struct medha_http *h, struct hreq *r, struct medha_msg_event *ev)
{
	struct medha_oai_error e;

	if (ev->kind == MEDHA_EVENT_TOKENS) {
		if (r->gone || !r->q.stream)
			return; /* the record carries the whole text */
		if (!r->hijacked && r->haio == NULL)
			return; /* answered 503: stopping */
		if (!r->hijacked)
			stream_start(h, r);
		if (ev->text_len > 0)
			emit_chunk(h, r, ev->text, ev->text_len, 0, 0, NULL);
		return;
	}
	struct medha_record *rec = ev->record;
	medha_map_del(&h->live, r->handle);
	r->up = U_DONE;
	if (r->gone) {
		maybe_reap(h, r);
		return;
	}
	if (rec->status != MEDHA_STATUS_OK) {
		medha_oai_error_record(&e, rec);
		if (r->haio != NULL) {
			reply_error(h, r->haio, &e, 0, 1);
			r->haio = NULL;
		} else if (r->hijacked) { /* OpenAI's error event */
			size_t n = 0;
			char *js = medha_oai_error_json(&e, &n), *s;
			if (js != NULL && (s = malloc(n + 9)) != NULL) {
				memcpy(s, "data: ", 6);
				memcpy(s + 6, js, n);
				memcpy(s + 6 + n, "\n\n", 2);
				emit(h, r, s, n + 8);
				free(s);
			}
			free(js);
			emit_end(r);
		}
	} else if (r->q.stream && (r->hijacked || r->haio != NULL)) {
		if (!r->hijacked)
			stream_start(h, r);
		emit_chunk(h, r, "", 0, 0,
		    rec->finish_reason ? rec->finish_reason : MEDHA_FINISH_STOP,
		    NULL);
		if (r->q.include_usage)
			emit_chunk(h, r, NULL, 0, 0, 0, rec);
		emit(h, r, "data: [DONE]\n\n", 14);
		emit_end(r);
	} else if (r->haio != NULL) {
		struct medha_oai_head hd = {r->id, r->model, r->created,
		    r->q.chat};
		size_t n = 0;
		const char *t = rec->text != NULL ? rec->text : "";
		char *js = medha_oai_response(&hd, t, strlen(t), rec, &n);
		reply_json(h, r->haio, 200, js, n, 0, 1);
		free(js);
		r->haio = NULL;
	}
	maybe_reap(h, r);
}

static void
early_add(struct medha_http *h, struct medha_msg_event *ev)
{
	if (h->nearly == h->early_cap) {
		int ncap = h->early_cap ? 2 * h->early_cap : 16;
		void *n = medha_reallocarray(h->early, (size_t)ncap,
		    sizeof(*h->early));
		if (n == NULL) {
			medha_msg_event_clear(ev);
			return;
		}
		h->early = n;
		h->early_cap = ncap;
	}
	h->early[h->nearly].since = medha_now();
	h->early[h->nearly++].ev = *ev;
	memset(ev, 0, sizeof(*ev));
}

/* Events that waited for r's ACCEPTED, in order (mu held). */
static void
early_claim(struct medha_http *h, struct hreq *r)
{
	for (int i = 0; i < h->nearly;) {
		if (h->early[i].ev.handle != r->handle) {
			i++;
			continue;
		}
		struct medha_msg_event ev = h->early[i].ev;
		memmove(&h->early[i], &h->early[i + 1],
		    (size_t)(h->nearly - i - 1) * sizeof(*h->early));
		h->nearly--;
		if (medha_map_get(&h->live, r->handle) == r)
			on_event(h, r, &ev);
		medha_msg_event_clear(&ev);
	}
}

/* Events for no request of ours, waiting too long: let go (mu held). */
static void
early_prune(struct medha_http *h)
{
	double t = medha_now();

	for (int i = 0; i < h->nearly;) {
		if (t - h->early[i].since <= 3 * DEAD) {
			i++;
			continue;
		}
		medha_log(MEDHA_LOG_WARN,
		    "http: event for unknown request %llx dropped",
		    (unsigned long long)h->early[i].ev.handle);
		if (h->early[i].ev.kind != MEDHA_EVENT_RECORD)
			push_cancel(h, h->early[i].ev.handle);
		medha_msg_event_clear(&h->early[i].ev);
		h->early[i] = h->early[--h->nearly];
	}
}

static void *
poller_main(void *arg)
{
	struct medha_http *h = arg;
	struct medha_msg m = {.type = MEDHA_MSG_POLL}, rep;
	char why[256];

	for (;;) {
		int quit;
		pthread_mutex_lock(&h->mu);
		quit = h->quit;
		pthread_mutex_unlock(&h->mu);
		if (quit)
			return NULL;
		if (medha_cli_msg(h->cli, 1, &m, &rep, DEAD, why,
		        sizeof(why)) != 0) {
			if (!medha_cli_connected(h->cli))
				usleep(50000);
			continue;
		}
		if (rep.type != MEDHA_MSG_EVENTS) {
			medha_log(MEDHA_LOG_WARN, "http: POLL answered with %s",
			    medha_msg_type_name(rep.type));
			medha_msg_clear(&rep);
			usleep(100000);
			continue;
		}
		pthread_mutex_lock(&h->mu);
		for (int64_t i = 0; i < rep.events.n; i++) {
			struct medha_msg_event *ev = &rep.events.ev[i];
			struct hreq *r = medha_map_get(&h->live, ev->handle);
			if (r != NULL)
				on_event(h, r, ev);
			else
				early_add(h, ev);
		}
		early_prune(h);
		pthread_mutex_unlock(&h->mu);
		medha_msg_clear(&rep);
	}
}

/* ---- the sender ---- */

/* Chat without max_tokens: the room the context leaves (0, or 400). */
static int
fill_max_tokens(struct medha_http *h, struct hreq *r, struct medha_oai_error *e)
{
	int32_t *ids = NULL;
	size_t n = 0;
	int rc;

	if (r->q.max_tokens_set)
		return 0;
	if (h->tok == NULL || h->ctx_len <= 0) {
		r->q.spec.max_tokens = 16;
		return 0;
	}
	rc = medha_tok_encode(h->tok, r->q.spec.prompt,
	    strlen(r->q.spec.prompt), MEDHA_TOK_DEFAULT, &ids, &n);
	free(ids);
	if (rc != 0)
		return medha_oai_error_set(e, 400, "invalid_request_error",
		    NULL, "messages", "tokenizing the messages: %s",
		    medha_strerror(rc));
	if ((int64_t)n >= h->ctx_len)
		return medha_oai_error_set(e, 400, "invalid_request_error",
		    "context_length_exceeded", "messages",
		    "the messages are %zu tokens, the model's context is %lld",
		    n, (long long)h->ctx_len);
	r->q.spec.max_tokens = h->ctx_len - (int64_t)n;
	return 0;
}

/* Submit r to the router; its answer decides what follows. */
static void
submit(struct medha_http *h, struct hreq *r)
{
	struct medha_msg m = {.type = MEDHA_MSG_SUBMIT}, rep;
	struct medha_oai_error e;
	char why[256];
	int rc;

	if ((rc = fill_max_tokens(h, r, &e)) != 0) {
		pthread_mutex_lock(&h->mu);
		goto refuse;
	}
	m.submit = r->q.spec; /* borrowed */
	/* a response that is not a stream is made from the record alone */
	m.submit.no_stream = !r->q.stream;
	rc = medha_cli_msg(h->cli, 0, &m, &rep, DEAD, why, sizeof(why));
	pthread_mutex_lock(&h->mu);
	if (rc != 0)
		medha_oai_error_set(&e, 503, "server_error",
		    "service_unavailable", NULL,
		    "the router did not answer: %s", why);
	else if (rep.type == MEDHA_MSG_ERROR)
		medha_oai_error_submit(&e, rep.error.code, rep.error.reason);
	else if (rep.type != MEDHA_MSG_ACCEPTED)
		medha_oai_error_set(&e, 500, "server_error", NULL, NULL,
		    "the router answered %s", medha_msg_type_name(rep.type));
	else {
		r->handle = rep.accepted.handle;
		if (medha_map_put(&h->live, r->handle, r) != 0) {
			push_cancel(h, r->handle);
			medha_oai_error_set(&e, 500, "server_error", NULL, NULL,
			    "out of memory");
		} else {
			r->up = U_LIVE;
			if (r->gone)
				push_cancel(h, r->handle);
			early_claim(h, r);
			medha_msg_clear(&rep);
			maybe_reap(h, r);
			return;
		}
	}
	if (rc == 0)
		medha_msg_clear(&rep);
refuse:
	r->up = U_DONE;
	if (r->haio != NULL) {
		reply_error(h, r->haio, &e, 0, 1);
		r->haio = NULL;
	}
	maybe_reap(h, r);
}

static void *
sender_main(void *arg)
{
	struct medha_http *h = arg;
	char why[256];

	pthread_mutex_lock(&h->mu);
	for (;;) {
		struct hreq *r;
		if ((r = h->reap) != NULL) {
			h->reap = r->qnext;
			pthread_mutex_unlock(&h->mu);
			req_free(h, r);
			pthread_mutex_lock(&h->mu);
			continue;
		}
		if (h->quit)
			break;
		if (h->ncancel > 0) {
			struct medha_msg m = {.type = MEDHA_MSG_CANCEL}, rep;
			m.cancel = h->cancels[--h->ncancel];
			pthread_mutex_unlock(&h->mu);
			if (medha_cli_msg(h->cli, 0, &m, &rep, DEAD, why,
			        sizeof(why)) == 0)
				medha_msg_clear(&rep);
			pthread_mutex_lock(&h->mu);
			continue;
		}
		if ((r = h->sq) != NULL) {
			h->sq = r->qnext;
			if (h->sq == NULL)
				h->sq_tail = NULL;
			if (r->gone || r->haio == NULL) {
				r->up = U_DONE;
				maybe_reap(h, r);
				continue;
			}
			r->up = U_SUBMITTED;
			pthread_mutex_unlock(&h->mu);
			submit(h, r); /* returns locked */
			continue;
		}
		pthread_cond_wait(&h->cv, &h->mu);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

/* ---- HTTP requests ---- */

/* The model id answered: -m's basename, else a replica's, else "". */
static void
served_model(struct medha_http *h, char *buf, size_t len)
{
	struct medha_router_metrics m;
	const char *s = "";

	if (h->model_id[0] != '\0') {
		snprintf(buf, len, "%s", h->model_id);
		return;
	}
	if (h->cfg.router != NULL &&
	    medha_router_metrics(h->cfg.router, &m) == 0) {
		const char *b = strrchr(m.model, '/');
		free(m.rep);
		snprintf(buf, len, "%s", b != NULL ? b + 1 : m.model);
		return;
	}
	snprintf(buf, len, "%s", s);
}

static void
rx_cb(void *arg)
{
	struct hreq *r = arg;
	struct medha_http *h = r->h;
	struct medha_oai_error e;
	int rv = nng_aio_result(r->rx), rc;

	pthread_mutex_lock(&h->mu);
	r->rx_busy = 0;
	if (r->reaped) {
		pthread_mutex_unlock(&h->mu);
		return;
	}
	if (r->hijacked) { /* the watch read of a stream */
		if (rv != 0)
			on_gone(h, r);
		else if (!r->ended && !r->gone)
			watch(r); /* bytes from the client: ignored */
		pthread_mutex_unlock(&h->mu);
		return;
	}
	if (r->haio == NULL) { /* answered meanwhile (closing) */
		r->up = U_DONE;
		maybe_reap(h, r);
		pthread_mutex_unlock(&h->mu);
		return;
	}
	if (rv != 0) { /* late (nng has closed the connection), or gone */
		medha_log(MEDHA_LOG_INFO, "http: %s: body not read: %s", r->id,
		    nng_strerror(rv));
		nng_aio_finish(r->haio, rv); /* the server lets it go */
		r->haio = NULL;
		maybe_reap(h, r);
		pthread_mutex_unlock(&h->mu);
		return;
	}
	pthread_mutex_unlock(&h->mu);
	rc = medha_oai_parse(&r->q, r->body, r->body_len, r->chat, h->tok, &e);
	free(r->body);
	r->body = NULL;
	if (rc == 0 && r->q.model[0] != '\0' && r->model[0] != '\0' &&
	    strcmp(r->q.model, r->model) != 0)
		rc = medha_oai_error_set(&e, 404, "invalid_request_error",
		    "model_not_found", "model",
		    "The model `%.200s` does not exist: this server has "
		    "`%.200s`",
		    r->q.model, r->model);
	pthread_mutex_lock(&h->mu);
	if (rc == 0 && r->haio != NULL && !h->quit) {
		snprintf(r->q.spec.id, sizeof(r->q.spec.id), "%s", r->id);
		if (!r->q.seed_set)
			r->q.spec.sampling.seed =
			    mix(h->seq++ ^ (uint64_t)(medha_now() * 1e9));
		r->up = U_QUEUED;
		r->qnext = NULL;
		if (h->sq_tail != NULL)
			h->sq_tail->qnext = r;
		else
			h->sq = r;
		h->sq_tail = r;
		pthread_cond_signal(&h->cv);
	} else if (r->haio != NULL) {
		if (rc == 0)
			medha_oai_error_set(&e, 503, "server_error",
			    "service_unavailable", NULL, "shutting down");
		reply_error(h, r->haio, &e, 0, 1);
		r->haio = NULL;
		maybe_reap(h, r);
	} else
		maybe_reap(h, r);
	pthread_mutex_unlock(&h->mu);
}

static void
error_now(struct medha_http *h, nng_aio *aio, int status, const char *type,
    const char *code, int close, const char *msg)
{
	struct medha_oai_error e;

	medha_oai_error_set(&e, status, type, code, NULL, "%s", msg);
	reply_error(h, aio, &e, close, 0);
}

/* POST /v1/completions or /v1/chat/completions: read the body. */
static void
on_completion(struct medha_http *h, nng_aio *aio, nng_http_req *req,
    nng_http_conn *conn, int chat)
{
	const char *cl = nng_http_req_get_header(req, "Content-Length");
	const char *te = nng_http_req_get_header(req, "Transfer-Encoding");
	const char *expect = nng_http_req_get_header(req, "Expect");
	struct medha_oai_error e;
	struct hreq *r;
	int64_t len;
	char model[MEDHA_PROTO_NAME_MAX];

	if (te != NULL || cl == NULL) {
		error_now(h, aio, 411, "invalid_request_error", NULL, 1,
		    "a request body with a Content-Length is required (no "
		    "chunked transfer coding)");
		return;
	}
	if (*cl == '\0' || strspn(cl, "0123456789") != strlen(cl)) {
		error_now(h, aio, 400, "invalid_request_error", NULL, 1,
		    "Content-Length is not a number of bytes");
		return;
	}
	if (medha_parse_i64(cl, 0, INT64_MAX, &len) != 0)
		len = INT64_MAX; /* digits past what fits: too large */
	if (len > h->cfg.max_body) {
		medha_oai_error_set(&e, 413, "invalid_request_error",
		    "request_too_large", NULL,
		    "the request body is larger than %lld bytes",
		    (long long)h->cfg.max_body);
		reply_error(h, aio, &e, 1, 0);
		return;
	}
	if (len == 0) {
		error_now(h, aio, 400, "invalid_request_error", NULL, 0,
		    "We could not parse the JSON body of your request: the "
		    "body is empty");
		return;
	}
	served_model(h, model, sizeof(model));
	pthread_mutex_lock(&h->mu);
	if (h->quit || h->st.in_progress >= h->cfg.max_conns) {
		int quit = h->quit;
		pthread_mutex_unlock(&h->mu);
		if (quit)
			error_now(h, aio, 503, "server_error",
			    "service_unavailable", 1, "shutting down");
		else
			error_now(h, aio, 429, "rate_limit_error",
			    "too_many_requests", 1,
			    "too many HTTP requests in progress");
		return;
	}
	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->body = malloc((size_t)len)) == NULL ||
	    nng_aio_alloc(&r->rx, rx_cb, r) != 0 ||
	    nng_aio_alloc(&r->tx, tx_cb, r) != 0) {
		pthread_mutex_unlock(&h->mu);
		if (r != NULL) {
			if (r->rx != NULL)
				nng_aio_free(r->rx);
			free(r->body);
		}
		free(r);
		error_now(h, aio, 500, "server_error", NULL, 1,
		    "out of memory");
		return;
	}
	h->st.in_progress++;
	r->h = h;
	r->chat = chat;
	memcpy(r->model, model, sizeof(r->model));
	r->haio = aio;
	r->conn = conn;
	r->nreq = req;
	r->body_len = (size_t)len;
	r->created = (int64_t)time(NULL);
	{
		uint64_t a = mix(++h->seq ^ (uint64_t)getpid() << 32),
		         b = mix(a ^ (uint64_t)(medha_now() * 1e9));
		snprintf(r->id, sizeof(r->id), "%s-%016llx%08llx",
		    chat ? "chatcmpl" : "cmpl", (unsigned long long)a,
		    (unsigned long long)(b >> 32));
	}
	r->next = h->all;
	if (h->all != NULL)
		h->all->prev = r;
	h->all = r;
	if (expect != NULL && strcasecmp(expect, "100-continue") == 0) {
		/* curl waits a second for this before a body over 1 KiB */
		static char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		nng_iov iov = {.iov_buf = cont, .iov_len = sizeof(cont) - 1};
		nng_aio_set_iov(r->tx, 1, &iov);
		nng_aio_set_timeout(r->tx,
		    (nng_duration)(h->cfg.body_timeout * 1e3));
		r->cont = r->tx_busy = 1;
		nng_http_conn_write_all(conn, r->tx);
	} else
		read_body(h, r);
	pthread_mutex_unlock(&h->mu);
}

/* Read r's body, within body_timeout (mu held). */
static void
read_body(struct medha_http *h, struct hreq *r)
{
	nng_iov iov = {.iov_buf = r->body, .iov_len = r->body_len};

	nng_aio_set_iov(r->rx, 1, &iov);
	nng_aio_set_timeout(r->rx, (nng_duration)(h->cfg.body_timeout * 1e3));
	r->rx_busy = 1;
	nng_http_conn_read_all(r->conn, r->rx);
}

static void
on_health(struct medha_http *h, nng_aio *aio)
{
	struct medha_router_metrics m;
	char js[256];
	int up = 0, ready = 0, n;

	if (h->cfg.router == NULL) {
		n = snprintf(js, sizeof(js), "{\"status\":\"ok\"}");
		reply_json(h, aio, 200, js, (size_t)n, 0, 0);
		return;
	}
	if (medha_router_metrics(h->cfg.router, &m) != 0) {
		reply_json(h, aio, 500, NULL, 0, 0, 0);
		return;
	}
	for (int i = 0; i < m.nreplicas; i++) {
		up += m.rep[i].up;
		ready += m.rep[i].ready;
	}
	n = snprintf(js, sizeof(js),
	    "{\"status\":\"%s\",\"replicas\":%d,\"replicas_up\":%d,"
	    "\"replicas_ready\":%d,\"requests_in_flight\":%lld,"
	    "\"requests_held\":%lld}",
	    m.draining         ? "stopping"
	        : !m.ready     ? "unavailable"
	        : ready < m.nreplicas ? "degraded"
	                              : "ok",
	    m.nreplicas, up, ready, (long long)m.in_flight,
	    (long long)m.held);
	free(m.rep);
	reply_json(h, aio, m.ready ? 200 : 503, js, (size_t)n, 0, 0);
}

static void
on_metrics(struct medha_http *h, nng_aio *aio)
{
	struct medha_router_metrics m, *mp = NULL;
	struct medha_http_stats st;
	size_t len = 0;
	char *s;

	if (h->cfg.router != NULL &&
	    medha_router_metrics(h->cfg.router, &m) == 0)
		mp = &m;
	pthread_mutex_lock(&h->mu);
	st = h->st;
	pthread_mutex_unlock(&h->mu);
	s = medha_oai_metrics(mp, &st, &len);
	if (mp != NULL)
		free(m.rep);
	if (s == NULL) {
		reply_json(h, aio, 500, NULL, 0, 0, 0);
		return;
	}
	reply(h, aio, 200, "text/plain; version=0.0.4; charset=utf-8", s, len,
	    0, 0);
	free(s);
}

static void
on_models(struct medha_http *h, nng_aio *aio, const char *one)
{
	char model[MEDHA_PROTO_NAME_MAX], *fixed, *js = NULL;
	json_t *obj, *o;

	served_model(h, model, sizeof(model));
	if (one != NULL && strcmp(one, model) != 0) {
		struct medha_oai_error e;
		medha_oai_error_set(&e, 404, "invalid_request_error",
		    "model_not_found", "model",
		    "The model `%.200s` does not exist", one);
		reply_error(h, aio, &e, 0, 0);
		return;
	}
	if ((fixed = medha_utf8_fix(model, strlen(model), NULL)) != NULL) {
		obj = json_pack("{s:s,s:s,s:I,s:s}", "id", fixed, "object",
		    "model", "created", (json_int_t)h->started, "owned_by",
		    "medha");
		if (one != NULL)
			o = obj;
		else if (model[0] == '\0') {
			json_decref(obj);
			o = json_pack("{s:s,s:[]}", "object", "list", "data");
		} else
			o = json_pack("{s:s,s:[o]}", "object", "list", "data",
			    obj);
		if (o != NULL) {
			js = json_dumps(o, JSON_COMPACT);
			json_decref(o);
		}
		free(fixed);
	}
	reply_json(h, aio, 200, js, js ? strlen(js) : 0, 0, 0);
	free(js);
}

/* Every HTTP request, on one of nng's threads. */
static void
on_http(nng_aio *aio)
{
	nng_http_req *req = nng_aio_get_input(aio, 0);
	nng_http_handler *hd = nng_aio_get_input(aio, 1);
	nng_http_conn *conn = nng_aio_get_input(aio, 2);
	struct medha_http *h = nng_http_handler_get_data(hd);
	const char *uri = nng_http_req_get_uri(req);
	const char *meth = nng_http_req_get_method(req);
	const char *cl = nng_http_req_get_header(req, "Content-Length");
	int body = (cl != NULL && strcmp(cl, "0") != 0) ||
	    nng_http_req_get_header(req, "Transfer-Encoding") != NULL;
	char path[128];
	size_t n = strcspn(uri, "?#");
	int get = strcmp(meth, "GET") == 0, post = strcmp(meth, "POST") == 0;

	if (n >= sizeof(path)) {
		error_now(h, aio, 404, "invalid_request_error", "not_found",
		    body, "no such route");
		return;
	}
	memcpy(path, uri, n);
	path[n] = '\0';
	while (n > 1 && path[n - 1] == '/')
		path[--n] = '\0';
	if (strcmp(path, "/v1/completions") == 0 ||
	    strcmp(path, "/v1/chat/completions") == 0) {
		if (post)
			on_completion(h, aio, req, conn,
			    strcmp(path, "/v1/chat/completions") == 0);
		else
			error_now(h, aio, 405, "invalid_request_error",
			    "method_not_allowed", body,
			    "only POST is allowed here");
		return;
	}
	if (strcmp(path, "/v1/models") == 0 || strcmp(path, "/health") == 0 ||
	    strcmp(path, "/metrics") == 0 ||
	    strncmp(path, "/v1/models/", 11) == 0) {
		if (!get)
			error_now(h, aio, 405, "invalid_request_error",
			    "method_not_allowed", body,
			    "only GET is allowed here");
		else if (body)
			error_now(h, aio, 400, "invalid_request_error", NULL, 1,
			    "a GET request has no body");
		else if (path[1] == 'h')
			on_health(h, aio);
		else if (path[1] == 'm')
			on_metrics(h, aio);
		else
			on_models(h, aio, path[10] == '/' ? path + 11 : NULL);
		return;
	}
	error_now(h, aio, 404, "invalid_request_error", "not_found", body,
	    "no such route (POST /v1/completions, POST "
	    "/v1/chat/completions, GET /v1/models, /health, /metrics)");
}

/* ---- open and close ---- */

static int
open_model(struct medha_http *h, const char *path, char *why, size_t whylen)
{
	struct medha_gguf *g;
	char key[128], arch[64];
	const char *b = strrchr(path, '/');
	int rc;

	if ((rc = medha_gguf_open(&g, path, why, whylen)) != 0)
		return rc;
	rc = medha_tok_open(&h->tok, g, why, whylen);
	if (rc == 0 &&
	    medha_gguf_get_strbuf(g, "general.architecture", arch,
	        sizeof(arch)) == 0) {
		snprintf(key, sizeof(key), "%s.context_length", arch);
		if (medha_gguf_get_i64(g, key, &h->ctx_len) != 0)
			h->ctx_len = 0;
	}
	medha_gguf_close(g);
	snprintf(h->model_id, sizeof(h->model_id), "%s", b ? b + 1 : path);
	return rc;
}

int
medha_http_open(struct medha_http **hp, const struct medha_http_config *c,
    char *why, size_t whylen)
{
	struct medha_http *h;
	char url[300];
	nng_sockaddr sa;
	int rv, rc;

	*hp = NULL;
	if (c->listen == NULL || c->upstream == NULL || c->max_conns < 1 ||
	    c->max_body < 1 || !(c->body_timeout > 0))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "bad HTTP configuration");
	if (strchr(c->listen, ':') == NULL || strchr(c->listen, '/') != NULL ||
	    strlen(c->listen) > 250)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "--http %s: not HOST:PORT", c->listen);
	if ((h = calloc(1, sizeof(*h))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	h->cfg = *c;
	h->started = (int64_t)time(NULL);
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	if (c->model != NULL &&
	    (rc = open_model(h, c->model, why, whylen)) != 0) {
		medha_http_close(h);
		return rc;
	}
	if ((rc = medha_cli_open(&h->cli, c->upstream, 2, why, whylen)) != 0) {
		medha_http_close(h);
		return rc;
	}
	snprintf(url, sizeof(url), "http://%s/", c->listen);
	if ((rv = nng_url_parse(&h->url, url)) != 0 ||
	    (rv = nng_http_server_hold(&h->srv, h->url)) != 0) {
		medha_http_close(h);
		return medha_why(why, whylen, MEDHA_EINVAL, "--http %s: %s",
		    c->listen, nng_strerror(rv));
	}
	if ((rv = nng_http_handler_alloc(&h->hd, "/", on_http)) != 0 ||
	    (rv = nng_http_handler_set_method(h->hd, NULL)) != 0 ||
	    (rv = nng_http_handler_set_tree(h->hd)) != 0 ||
	    (rv = nng_http_handler_collect_body(h->hd, false, 0)) != 0 ||
	    (rv = nng_http_handler_set_data(h->hd, h, NULL)) != 0 ||
	    (rv = nng_http_server_add_handler(h->srv, h->hd)) != 0) {
		if (h->hd != NULL)
			nng_http_handler_free(h->hd);
		h->hd = NULL;
		medha_http_close(h);
		return medha_why(why, whylen, MEDHA_ENOMEM, "HTTP handler: %s",
		    nng_strerror(rv));
	}
	if (pthread_create(&h->sender, NULL, sender_main, h) != 0) {
		medha_http_close(h);
		return medha_why(why, whylen, MEDHA_ENOMEM,
		    "cannot start a thread");
	}
	h->threads = 1;
	if (pthread_create(&h->poller, NULL, poller_main, h) != 0) {
		medha_http_close(h);
		return medha_why(why, whylen, MEDHA_ENOMEM,
		    "cannot start a thread");
	}
	h->threads = 2;
	if ((rv = nng_http_server_start(h->srv)) != 0) {
		medha_http_close(h);
		return medha_why(why, whylen,
		    rv == NNG_EADDRINVAL ? MEDHA_EINVAL : MEDHA_EIO,
		    "cannot listen at %s: %s", c->listen, nng_strerror(rv));
	}
	if (nng_http_server_get_addr(h->srv, &sa) == 0) {
		if (sa.s_family == NNG_AF_INET)
			h->port = ntohs(sa.s_in.sa_port);
		else if (sa.s_family == NNG_AF_INET6)
			h->port = ntohs(sa.s_in6.sa_port);
	}
	medha_log(MEDHA_LOG_WARN, "http: listening at http://%s (port %d)%s%s",
	    c->listen, h->port, h->tok ? ", model " : "",
	    h->tok ? h->model_id : "");
	*hp = h;
	return 0;
}

int
medha_http_port(const struct medha_http *h)
{
	return h->port;
}

void
medha_http_close(struct medha_http *h)
{
	struct medha_oai_error e;
	struct hreq *r;

	if (h == NULL)
		return;
	if (h->srv != NULL)
		nng_http_server_stop(h->srv); /* no new connection */
	/* let the streams that have ended finish writing (1 s at most) */
	for (int i = 0; i < 100; i++) {
		int busy = 0;
		pthread_mutex_lock(&h->mu);
		for (r = h->all; r != NULL; r = r->next)
			busy += r->hijacked && !r->gone && r->ended;
		pthread_mutex_unlock(&h->mu);
		if (busy == 0)
			break;
		usleep(10000);
	}
	medha_oai_error_set(&e, 503, "server_error", "service_unavailable",
	    NULL, "the router is stopping");
	pthread_mutex_lock(&h->mu);
	h->quit = 1;
	for (r = h->all; r != NULL; r = r->next)
		if (r->haio != NULL) {
			reply_error(h, r->haio, &e, 1, 1);
			r->haio = NULL;
		}
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	if (h->cli != NULL)
		medha_cli_abort(h->cli);
	if (h->threads > 0)
		pthread_join(h->sender, NULL);
	if (h->threads > 1)
		pthread_join(h->poller, NULL);
	/* what is left is ours alone, but for nng's callbacks */
	pthread_mutex_lock(&h->mu);
	for (r = h->all; r != NULL; r = r->next)
		r->reaped = 1;
	while ((r = h->all) != NULL) {
		h->all = r->next;
		r->qnext = h->reap;
		h->reap = r;
	}
	pthread_mutex_unlock(&h->mu);
	while ((r = h->reap) != NULL) {
		h->reap = r->qnext;
		req_free(h, r);
	}
	if (h->srv != NULL)
		nng_http_server_release(h->srv);
	if (h->url != NULL)
		nng_url_free(h->url);
	medha_cli_close(h->cli);
	medha_tok_close(h->tok);
	for (int i = 0; i < h->nearly; i++)
		medha_msg_event_clear(&h->early[i].ev);
	free(h->early);
	free(h->cancels);
	medha_map_free(&h->live);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	free(h);
}
