/*
 * http.c: the router's HTTP front door (http.h), the top of serve/http/
 * (impl.h draws the files and which calls which): open and close, and
 * the routes. nng's HTTP server calls on_http() on its own threads for
 * every request, at one handler that owns the whole tree, so that every
 * route, method and error is ours to answer in OpenAI's JSON. What must
 * not block there goes elsewhere:
 *
 *   - a request body is read with an aio of our own (bounded in size and
 *     time), then parsed (parse.c) in its callback (conn.c);
 *   - the sender thread (up.c) fits a prompt to the model's context
 *     (prompt.c), submits
 *     it through the router's client (net/pcli.h, which keeps a POLL
 *     outstanding and waits for no answer) and frees what has ended;
 *   - the taker thread takes what the client brings back: the answers
 *     to the SUBMITs and the events, whose tokens and records are
 *     those of every HTTP request at once.
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
 * nng's server reads nothing while a non-streaming request waits, so one
 * that has waited WATCH_AFTER s (up.c) gets the same watch read and
 * is answered with Connection: close (the read would take the bytes of
 * a next request on the connection); quicker ones keep keep-alive.
 *
 * A request's life is one state (enum hstate, impl.h), changed only by
 * hreq_move (req.c).
 *
 * One mutex (h->mu) guards every request's state; nng's callbacks, the
 * two threads and medha_http_close() take it (and call the client under
 * it, which never calls back). I/O is only started under
 * it (nng completes aios on its own threads, never in the caller).
 */
#include "serve/http/impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void
medha_http_config_default(struct medha_http_config *c)
{
	memset(c, 0, sizeof(*c));
	c->max_conns = 1024;
	c->max_body = 1 << 20;
	c->body_timeout = 10;
	c->keepalive = 5;
}

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
error_now(struct medha_http *h, nng_aio *aio, int status, const char *type,
    const char *code, int close, const char *msg)
{
	struct medha_oai_error e;

	medha_oai_error_set(&e, status, type, code, NULL, "%s", msg);
	http_reply_error(h, aio, &e, close, 0);
}

/* 401: no API key, or not one of --api-key's (OpenAI's answer). */
static void
unauthorized(struct medha_http *h, nng_aio *aio, nng_http_req *req, int close)
{
	int none = nng_http_req_get_header(req, "Authorization") == NULL;

	error_now(h, aio, 401, "invalid_request_error", "invalid_api_key",
	    close, none ? "You didn't provide an API key: give it in the "
	                  "Authorization header (Authorization: Bearer KEY)"
	                : "Incorrect API key provided");
}

/* 405: the path takes only method allow (its Allow header). */
static void
not_allowed(struct medha_http *h, nng_aio *aio, const char *allow, int close)
{
	struct medha_oai_error e;
	size_t len = 0;
	char *js;

	medha_oai_error_set(&e, 405, "invalid_request_error",
	    "method_not_allowed", NULL, "only %s is allowed here", allow);
	if ((js = medha_oai_error_json(&e, &len)) == NULL) {
		http_reply_json(h, aio, 500, NULL, 0, close, 0);
		return;
	}
	http_reply_allow(h, aio, 405, "application/json", js, len, close, 0,
	    allow);
	free(js);
}

/* POST /v1/completions or /v1/chat/completions: read the body. */
static void
on_completion(struct medha_http *h, nng_aio *aio, nng_http_req *req,
    nng_http_conn *conn, int chat, uint64_t tenant)
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
		http_reply_error(h, aio, &e, 1, 0);
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
	    nng_aio_alloc(&r->rx, http_rx_cb, r) != 0 ||
	    nng_aio_alloc(&r->tx, http_tx_cb, r) != 0) {
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
	r->tenant = tenant;
	memcpy(r->model, model, sizeof(r->model));
	r->haio = aio;
	r->conn = conn;
	r->nreq = req;
	r->http10 = strcmp(nng_http_req_get_version(req), "HTTP/1.0") == 0;
	r->body_len = (size_t)len;
	r->created = (int64_t)time(NULL);
	r->t0 = medha_now();
	{
		uint64_t a = http_mix(++h->seq ^ (uint64_t)getpid() << 32),
		         b = http_mix(a ^ (uint64_t)(medha_now() * 1e9));
		snprintf(r->id, sizeof(r->id), "%s-%016llx%08llx",
		    chat ? "chatcmpl" : "cmpl", (unsigned long long)a,
		    (unsigned long long)(b >> 32));
	}
	r->next = h->all;
	if (h->all != NULL)
		h->all->prev = r;
	h->all = r;
	http_conn_start(h, r,
	    expect != NULL && strcasecmp(expect, "100-continue") == 0);
	pthread_mutex_unlock(&h->mu);
}

static void
on_health(struct medha_http *h, nng_aio *aio)
{
	struct medha_router_metrics m;
	char js[256];
	int up = 0, ready = 0, n;

	if (h->cfg.router == NULL) {
		n = snprintf(js, sizeof(js), "{\"status\":\"ok\"}");
		http_reply_json(h, aio, 200, js, (size_t)n, 0, 0);
		return;
	}
	if (medha_router_metrics(h->cfg.router, &m) != 0) {
		http_reply_json(h, aio, 500, NULL, 0, 0, 0);
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
	http_reply_json(h, aio, m.ready ? 200 : 503, js, (size_t)n, 0, 0);
}

static void
on_metrics(struct medha_http *h, nng_aio *aio)
{
	struct medha_router_metrics m, *mp = NULL;
	struct medha_http_stats st;
	size_t len = 0;
	char *s;

	if (h->cfg.router != NULL &&
	    medha_router_metrics(h->cfg.router, &m) == 0) {
		mp = &m;
		/* the model_name label: the id /v1/models gives */
		served_model(h, m.model, sizeof(m.model));
	}
	pthread_mutex_lock(&h->mu);
	st = h->st;
	pthread_mutex_unlock(&h->mu);
	s = medha_oai_metrics(mp, &st, &len);
	if (mp != NULL)
		free(m.rep);
	if (s == NULL) {
		http_reply_json(h, aio, 500, NULL, 0, 0, 0);
		return;
	}
	http_reply(h, aio, 200, "text/plain; version=0.0.4; charset=utf-8", s, len,
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
		http_reply_error(h, aio, &e, 0, 0);
		return;
	}
	if ((fixed = medha_utf8_fix(model, strlen(model), NULL)) != NULL) {
		obj = json_pack("{s:s,s:s,s:I,s:s}", "id", fixed, "object",
		    "model", "created", (json_int_t)h->started, "owned_by",
		    "medha");
		/* vLLM's name for the context, where -m tells it */
		if (obj != NULL && h->ctx_len > 0)
			json_object_set_new(obj, "max_model_len",
			    json_integer(h->ctx_len));
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
	http_reply_json(h, aio, 200, js, js ? strlen(js) : 0, 0, 0);
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
	/* HEAD is GET without the body (nng's server leaves it out) */
	int get = strcmp(meth, "GET") == 0 || strcmp(meth, "HEAD") == 0;
	int post = strcmp(meth, "POST") == 0;
	uint64_t tenant = 0;

	if (n >= sizeof(path)) {
		error_now(h, aio, 404, "invalid_request_error", "not_found",
		    body, "no such route");
		return;
	}
	memcpy(path, uri, n);
	path[n] = '\0';
	while (n > 1 && path[n - 1] == '/')
		path[--n] = '\0';
	if (strncmp(path, "/v1/", 4) == 0 &&
	    !http_keys_ok(h->keys,
	        nng_http_req_get_header(req, "Authorization"), &tenant)) {
		unauthorized(h, aio, req, body);
		return;
	}
	if (strcmp(path, "/v1/completions") == 0 ||
	    strcmp(path, "/v1/chat/completions") == 0) {
		if (post)
			on_completion(h, aio, req, conn,
			    strcmp(path, "/v1/chat/completions") == 0,
			    h->cfg.shared_prefix_cache ? 0 : tenant);
		else
			not_allowed(h, aio, "POST", body);
		return;
	}
	if (strcmp(path, "/v1/models") == 0 || strcmp(path, "/health") == 0 ||
	    strcmp(path, "/metrics") == 0 ||
	    strncmp(path, "/v1/models/", 11) == 0) {
		if (!get)
			not_allowed(h, aio, "GET", body);
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

/* The tokenizer, context and model id of the GGUF at path: the
 * router's when it opened the same file (medha_router_tok), else opened
 * here; why names the file ("No such file or directory" alone did not
 * say which). */
static int
open_model_said(struct medha_http *h, const char *path, char *why,
    size_t whylen)
{
	const char *b = strrchr(path, '/');
	int rc;

	snprintf(h->model_id, sizeof(h->model_id), "%s", b ? b + 1 : path);
	if (h->cfg.router != NULL &&
	    (h->tok = medha_router_tok(h->cfg.router, path, &h->ctx_len)) !=
	        NULL)
		return 0;
	rc = medha_tok_open_file(&h->tok_own, path, &h->ctx_len, why, whylen);
	h->tok = h->tok_own;
	return rc;
}

/* An event of the router's for one of our requests, on its thread
 * (medha_router_local): to our client as if a POLL had brought it. */
static void
deliver(void *arg, struct medha_msg_event *ev)
{
	struct medha_http *h = arg;

	medha_pcli_deliver(h->pc, ev);
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
	    (rc = open_model_said(h, c->model, why, whylen)) != 0) {
		medha_http_close(h);
		return rc;
	}
	if ((rc = http_keys_open(&h->keys, c->api_keys, c->n_api_keys, why,
	         whylen)) != 0 ||
	    (rc = medha_pcli_open(&h->pc, c->upstream, NULL, NULL, why,
	         whylen)) != 0) {
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
	if (pthread_create(&h->sender, NULL, http_sender_main, h) != 0) {
		medha_http_close(h);
		return medha_why(why, whylen, MEDHA_ENOMEM,
		    "cannot start a thread");
	}
	h->threads = 1;
	if (pthread_create(&h->taker, NULL, http_taker_main, h) != 0) {
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
	/* the router's events for us straight to our client, not encoded
	   for its POLL and decoded again in this process */
	if (c->router != NULL && strncmp(c->upstream, "inproc://", 9) == 0)
		medha_router_local(c->router, deliver, h);
	medha_log(MEDHA_LOG_INFO, "http: listening at http://%s (port %d)%s%s",
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
	struct hreq *r, *next;

	if (h == NULL)
		return;
	if (h->srv != NULL)
		nng_http_server_stop(h->srv); /* no new connection */
	/* let the streams that have ended finish writing (1 s at most) */
	for (int i = 0; i < 100; i++) {
		int busy = 0;
		pthread_mutex_lock(&h->mu);
		for (r = h->all; r != NULL; r = r->next)
			busy += r->hijacked && r->state == HS_ANSWERED;
		pthread_mutex_unlock(&h->mu);
		if (busy == 0)
			break;
		usleep(10000);
	}
	medha_oai_error_set(&e, 503, "server_error", "service_unavailable",
	    NULL, "the router is stopping");
	pthread_mutex_lock(&h->mu);
	h->quit = 1;
	for (r = h->all; r != NULL; r = next) {
		next = r->next; /* r may leave h->all */
		if (r->haio != NULL) {
			http_reply_error(h, r->haio, &e, 1, 1);
			r->haio = NULL;
			hreq_move(h, r, HS_ANSWERED);
		}
	}
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	if (h->threads > 0)
		pthread_join(h->sender, NULL);
	if (h->threads > 1)
		pthread_join(h->taker, NULL);
	http_tok_stop(h);
	/* what is left is ours alone, but for nng's callbacks */
	pthread_mutex_lock(&h->mu);
	hreq_reap_all(h);
	pthread_mutex_unlock(&h->mu);
	while ((r = h->reap) != NULL) {
		h->reap = r->qnext;
		hreq_free(h, r);
	}
	if (h->srv != NULL)
		nng_http_server_release(h->srv);
	if (h->url != NULL)
		nng_url_free(h->url);
	medha_pcli_close(h->pc);
	http_keys_free(h->keys);
	medha_tok_close(h->tok_own);
	medha_map_free(&h->live);
	medha_map_free(&h->subs);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	free(h);
}
