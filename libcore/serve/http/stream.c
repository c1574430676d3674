/*
 * stream.c: the bytes the HTTP front door sends (the bottom of
 * serve/http/, under req.c): a whole answer through nng's server
 * (keep-alive kept), and a stream's: after its first token a streaming
 * request takes its connection over (nng_http_hijack), writes the SSE
 * head and chunks itself (chunked transfer coding) and closes it after
 * "data: [DONE]", with a read kept posted to notice a client that goes
 * away. Nothing here changes a request's state (req.c does): a write
 * that cannot be queued says so to its caller.
 */
#include "serve/http/impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void
count_code(struct medha_http *h, int code)
{
	int i = 0;

	while (i < MEDHA_HTTP_CODES && medha_http_codes[i] != code)
		i++;
	h->st.responses[i]++;
}

/*
 * The access line of a reply (info), from its request (nng's handler
 * aio's input); a completion answered 200 has its own, with its tokens
 * (up.c). nng's server does not tell the client's address.
 */
static void
access_line(nng_aio *aio, int status)
{
	nng_http_req *req;
	const char *uri;

	if (medha_log_level < MEDHA_LOG_INFO ||
	    (req = nng_aio_get_input(aio, 0)) == NULL)
		return;
	uri = nng_http_req_get_uri(req);
	if (status == 200 && strstr(uri, "completions") != NULL)
		return;
	medha_log(MEDHA_LOG_INFO, "http: %.16s %.200s %d",
	    nng_http_req_get_method(req), uri, status);
}

void
http_reply(struct medha_http *h, nng_aio *aio, int status, const char *ctype,
    const char *body, size_t len, int close, int locked)
{
	http_reply_allow(h, aio, status, ctype, body, len, close, locked,
	    NULL);
}

/*
 * Answer nng's handler aio with status and len bytes of body (mutex
 * held or not: counts under it when locked is 0). close asks the server
 * to close the connection after it (a body was left unread); allow is
 * a 405's Allow header, the methods the path takes.
 */
void
http_reply_allow(struct medha_http *h, nng_aio *aio, int status,
    const char *ctype, const char *body, size_t len, int close, int locked,
    const char *allow)
{
	nng_http_res *res;

	if (!locked)
		pthread_mutex_lock(&h->mu);
	count_code(h, status);
	if (!locked)
		pthread_mutex_unlock(&h->mu);
	access_line(aio, status);
	if (nng_http_res_alloc(&res) != 0) {
		nng_aio_finish(aio, NNG_ENOMEM); /* the server closes */
		return;
	}
	if (nng_http_res_set_status(res, (uint16_t)status) != 0 ||
	    nng_http_res_set_header(res, "Content-Type", ctype) != 0 ||
	    (close &&
	        nng_http_res_set_header(res, "Connection", "close") != 0) ||
	    (allow != NULL &&
	        nng_http_res_set_header(res, "Allow", allow) != 0) ||
	    nng_http_res_copy_data(res, body, len) != 0) {
		nng_http_res_free(res);
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

void
http_reply_json(struct medha_http *h, nng_aio *aio, int status, const char *js,
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
	http_reply(h, aio, status, "application/json", js, len, close, locked);
}

void
http_reply_error(struct medha_http *h, nng_aio *aio, const struct medha_oai_error *e,
    int close, int locked)
{
	size_t len = 0;
	char *js = medha_oai_error_json(e, &len);

	http_reply_json(h, aio, e->status, js, len, close, locked);
	free(js);
}

/* Write what is queued, if no write is under way (mu held). */
void
http_kick(struct hreq *r)
{
	nng_iov iov;
	struct buf t;

	if (r->tx_busy || r->out.n == 0 || r->state == HS_GONE)
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

/*
 * Queue n bytes of p as one chunk of the chunked body (mu held); to an
 * HTTP/1.0 client, which knows no chunks (RFC 9112 6.1), as they are:
 * the body ends when the connection closes. 0, or MEDHA_ENOMEM.
 */
int
http_put(struct hreq *r, const char *p, size_t n)
{
	char hd[24];
	int k = snprintf(hd, sizeof(hd), "%zx\r\n", n);

	if (r->state == HS_GONE || n == 0)
		return 0;
	r->last_tx = medha_now();
	if ((!r->http10 && buf_add(&r->out, hd, (size_t)k) != 0) ||
	    buf_add(&r->out, p, n) != 0 ||
	    (!r->http10 && buf_add(&r->out, "\r\n", 2) != 0))
		return MEDHA_ENOMEM;
	http_kick(r);
	return 0;
}

int
http_put_chunk(struct hreq *r, const char *text, size_t len, int role,
    int finish, const struct medha_record *usage)
{
	struct medha_oai_head hd = {r->id, r->model, r->created, r->q.chat,
	    r->q.spec.sampling.logprobs, r->cur_ids, r->cur_lps, r->cur_n,
	    &r->lp_off[r->cur_idx], r->cur_idx};
	size_t n = 0;
	char *s = medha_oai_chunk(&hd, text, len, role, finish, usage,
	    r->q.include_usage, &n);

	int rc;

	if (s == NULL)
		return MEDHA_ENOMEM;
	rc = http_put(r, s, n);
	free(s);
	return rc;
}

/* The end of the chunked body: the connection closes once it is out. */
void
http_put_end(struct hreq *r)
{
	if (r->state == HS_GONE)
		return;
	if (r->http10)
		http_kick(r); /* with nothing left to write, the close ends it */
	else if (buf_add(&r->out, "0\r\n\r\n", 5) == 0)
		http_kick(r);
}

void
http_watch(struct hreq *r)
{
	nng_iov iov = {.iov_buf = r->rxbuf, .iov_len = sizeof(r->rxbuf)};

	nng_aio_set_iov(r->rx, 1, &iov);
	nng_aio_set_timeout(r->rx, NNG_DURATION_INFINITE);
	r->rx_busy = 1;
	nng_http_conn_read(r->conn, r->rx);
}

/*
 * Take r's connection over and write its event stream's head (mu held):
 * nng's handler aio is let go (r->haio NULL), and a read is kept posted
 * (http_watch). 0, or MEDHA_ENOMEM.
 */
int
http_put_head(struct medha_http *h, struct hreq *r)
{
	static const char head[] = "HTTP/1.1 200 OK\r\n"
	                           "Content-Type: text/event-stream\r\n"
	                           "Cache-Control: no-cache\r\n"
	                           "Connection: close\r\n"
	                           "Transfer-Encoding: chunked\r\n\r\n";
	static const char head10[] = "HTTP/1.1 200 OK\r\n"
	                             "Content-Type: text/event-stream\r\n"
	                             "Cache-Control: no-cache\r\n"
	                             "Connection: close\r\n\r\n";

	nng_http_hijack(r->conn);
	r->hijacked = 1;
	nng_aio_set_output(r->haio, 0, NULL);
	nng_aio_finish(r->haio, 0); /* the server lets the connection go */
	r->haio = NULL;
	count_code(h, 200);
	h->st.streams++;
	r->last_tx = medha_now();
	if ((r->http10 ? buf_add(&r->out, head10, sizeof(head10) - 1)
	               : buf_add(&r->out, head, sizeof(head) - 1)) != 0)
		return MEDHA_ENOMEM;
	http_kick(r);
	http_watch(r);
	return 0;
}
