/*
 * conn.c: what nng's threads bring on a completion request's connection
 * (serve/http/, under http.c, which makes the request): its body, read
 * with an aio of our own (bounded in size and time, after "100
 * Continue" when the client asked for it) and parsed (parse.c) in its
 * callback, then queued for the sender; later the watch read kept
 * posted on the connection (a stream's, or a whole answer's that has
 * waited, http_watch), whose failure means the client went away; and
 * a stream's writes. Each callback moves the request's state (req.c)
 * under h->mu.
 */
#include "serve/http/impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A new request's first I/O (mu held): "100 Continue" where the client
 * asked for it (then the body), else its body. */
void
http_conn_start(struct medha_http *h, struct hreq *r, int cont)
{
	if (cont) {
		/* curl waits a second for this before a body over 1 KiB */
		static char text[] = "HTTP/1.1 100 Continue\r\n\r\n";
		nng_iov iov = {.iov_buf = text, .iov_len = sizeof(text) - 1};
		/* r->state is HS_CONTINUE, its first */
		nng_aio_set_iov(r->tx, 1, &iov);
		nng_aio_set_timeout(r->tx,
		    (nng_duration)(h->cfg.body_timeout * 1e3));
		r->tx_busy = 1;
		nng_http_conn_write_all(r->conn, r->tx);
	} else {
		hreq_move(h, r, HS_BODY);
		read_body(h, r);
	}
}

/* r's body is read (mu not held): parsed, and queued or refused. */
static void
body_read(struct medha_http *h, struct hreq *r)
{
	struct medha_oai_error e;
	int rc = medha_oai_parse(&r->q, r->body, r->body_len, r->chat, h->tok,
	    &e);

	free(r->body);
	r->body = NULL;
	/* the key's tenant: its requests share cached prefixes with none
	   of another key's, whatever cache_salt they give */
	if (rc == 0 &&
	    medha_oai_salt_tenant(r->tenant, r->q.spec.cache_salt,
	        &r->q.spec.cache_salt) != 0) {
		medha_oai_req_clear(&r->q);
		rc = medha_oai_error_set(&e, 500, "server_error", NULL, NULL,
		    "out of memory");
	}
	if (rc == 0 && r->q.model[0] != '\0' && r->model[0] != '\0' &&
	    strcmp(r->q.model, r->model) != 0)
		rc = medha_oai_error_set(&e, 404, "invalid_request_error",
		    "model_not_found", "model",
		    "The model `%.200s` does not exist: this server has "
		    "`%.200s`",
		    r->q.model, r->model);
	pthread_mutex_lock(&h->mu);
	if (rc == 0 && r->state == HS_BODY && !h->quit) {
		snprintf(r->q.spec.id, sizeof(r->q.spec.id), "%s", r->id);
		r->nch = (r->q.n > 1 ? r->q.n : 1) *
		    (r->q.n_prompts > 0 ? r->q.n_prompts : 1);
		if (!r->q.seed_set)
			r->q.spec.sampling.seed =
			    http_mix(h->seq++ ^ (uint64_t)(medha_now() * 1e9));
		hreq_move(h, r, HS_QUEUED);
	} else if (r->state == HS_BODY) {
		if (rc == 0)
			medha_oai_error_set(&e, 503, "server_error",
			    "service_unavailable", NULL, "shutting down");
		http_reply_error(h, r->haio, &e, 0, 1);
		r->haio = NULL;
		hreq_move(h, r, HS_ANSWERED);
	} else /* answered meanwhile (closing) */
		hreq_reap(h, r);
	pthread_mutex_unlock(&h->mu);
}

void
http_rx_cb(void *arg)
{
	struct hreq *r = arg;
	struct medha_http *h = r->h;
	int rv = nng_aio_result(r->rx);

	pthread_mutex_lock(&h->mu);
	r->rx_busy = 0;
	if (r->state == HS_REAPED) {
		pthread_mutex_unlock(&h->mu);
		return;
	}
	if (r->watching || r->hijacked) { /* the watch read */
		int waiting = r->state >= HS_QUEUED && r->state <= HS_LIVE;
		if (rv != 0 && waiting) { /* a whole answer's client hung up */
			nng_aio_finish(r->haio, rv); /* the server lets it go */
			r->haio = NULL;
			hreq_move(h, r, HS_GONE);
		} else if (rv != 0 && r->hijacked)
			hreq_move(h, r, HS_GONE);
		else if (waiting || r->state == HS_STREAM)
			http_watch(r); /* bytes from the client: ignored */
		else
			hreq_reap(h, r);
		pthread_mutex_unlock(&h->mu);
		return;
	}
	if (r->state != HS_BODY) { /* answered meanwhile (closing) */
		hreq_reap(h, r);
		pthread_mutex_unlock(&h->mu);
		return;
	}
	if (rv != 0) { /* late (nng has closed the connection), or gone */
		medha_log(MEDHA_LOG_INFO, "http: %s: body not read: %s", r->id,
		    nng_strerror(rv));
		nng_aio_finish(r->haio, rv); /* the server lets it go */
		r->haio = NULL;
		hreq_move(h, r, HS_ANSWERED);
		pthread_mutex_unlock(&h->mu);
		return;
	}
	pthread_mutex_unlock(&h->mu);
	body_read(h, r);
}

void
http_tx_cb(void *arg)
{
	struct hreq *r = arg;
	struct medha_http *h = r->h;
	int rv = nng_aio_result(r->tx);

	pthread_mutex_lock(&h->mu);
	r->tx_busy = 0;
	if (r->state == HS_CONTINUE) { /* "100 Continue" is out */
		if (rv != 0) {
			nng_aio_finish(r->haio, rv); /* the server closes */
			r->haio = NULL;
			hreq_move(h, r, HS_ANSWERED);
		} else {
			hreq_move(h, r, HS_BODY);
			read_body(h, r);
		}
	} else if (r->state != HS_REAPED) {
		r->wr.n = 0;
		if (rv != 0 && r->hijacked)
			hreq_move(h, r, HS_GONE);
		else {
			http_kick(r);
			hreq_reap(h, r);
		}
	}
	pthread_mutex_unlock(&h->mu);
}
