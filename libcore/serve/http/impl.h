/*
 * impl.h: what the HTTP front door's files share (serve/http/), each
 * calling only those below it:
 *
 *   http.c     open and close, the routes, a completion request made
 *     -> key.c     the API keys
 *     -> conn.c    nng's callbacks on a request's connection: its body
 *                  read and parsed, the watch read, a stream's writes
 *     -> up.c      the sender and taker threads, the router's side
 *                  (net/pcli.h): choices submitted, answers, events
 *        -> prompt.c  prompts made ready: text to ids, the context
 *     -> req.c     a request's life: its state and hreq_move
 *     -> stream.c  the bytes out: replies through nng's server, a
 *                  stream's head and chunks
 *   and under all of them the OpenAI JSON of http.h (oai.c, parse.c).
 *
 * Not for use outside serve/http/.
 */
#ifndef MEDHA_HTTP_IMPL_H
#define MEDHA_HTTP_IMPL_H

#include "serve/http/http.h"

#include "map.h"
#include "net/link.h"
#include "net/pcli.h"
#include "net/proto.h"
#include "tok/tokq.h"

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

/*
 * A request's life (req.c says what each change brings; hreq_move
 * alone makes one). nng's handler aio (haio) is held up to HS_LIVE.
 */
enum hstate {
	HS_CONTINUE,  /* writing "100 Continue" (then its body) */
	HS_BODY,      /* its body being read */
	HS_QUEUED,    /* parsed, on h->sq for the sender */
	HS_SUBMITTED, /* the sender's: texts tokenized, choices submitted */
	HS_LIVE,      /* a choice accepted: tokens and records come */
	HS_STREAM,    /* a stream that took its connection over */
	HS_ANSWERED,  /* its answer complete (or refused): what comes
	                 from upstream is only counted */
	HS_GONE,      /* its client went away: cancelled upstream */
	HS_REAPED,    /* on h->reap, to be freed: callbacks leave it */
};

struct hreq {
	struct medha_http *h;
	struct hreq *prev, *next; /* h->all */
	struct hreq *qnext;       /* h->sq or h->reap */
	char id[48];              /* "cmpl-..." / "chatcmpl-...": also the
	                             request id upstream */
	char model[MEDHA_PROTO_NAME_MAX]; /* the model id answered */
	int64_t created;
	struct medha_oai_req q;
	int state;           /* enum hstate */
	nng_aio *haio;       /* nng's handler aio, until answered */
	nng_http_conn *conn; /* the server's until hijacked, then ours */
	nng_http_req *nreq;  /* likewise */
	int chat;            /* /v1/chat/completions */
	uint64_t tenant;     /* its API key's tenant in the prefix cache
	                        (medha_oai_salt_tenant); 0: none */
	int hijacked;        /* the connection is ours (from HS_STREAM) */
	int watching;        /* a whole answer's watch read is posted: it
	                        is answered with Connection: close */
	int http10;          /* an HTTP/1.0 client: no chunked coding */
	double t0;           /* when it came (medha_now), for the access line */
	double last_tx;      /* a stream's latest bytes queued (medha_now) */
	/* the logprobs of the chunk being sent (on_event), and where the
	   completions' text_offset is */
	const int32_t *cur_ids;
	const struct medha_token_lp *cur_lps;
	int64_t cur_n;
	struct medha_utf8_acc lp_off[MEDHA_OAI_MAX_CHOICES];
	/* each choice's streamed text: the bytes of a character not yet
	   whole wait for the rest (a chunk is whole characters) */
	struct medha_utf8_acc hold[MEDHA_OAI_MAX_CHOICES];
	int cur_idx; /* the choice of the chunk being sent */
	nng_aio *rx;         /* the body read, then a stream's watch read */
	nng_aio *tx;         /* a stream's writes */
	int rx_busy, tx_busy; /* in flight: r stays until they end */
	char *body;
	size_t body_len;
	char rxbuf[256];
	int sending;     /* the sender's (from HS_QUEUED until its choices
	                    are submitted, or it is dropped) */
	/* choices: q.n requests upstream for each prompt (the prefix
	   cache computes its KV once), choice i prompt i / q.n's with seed
	   seed + i % q.n where a seed is given */
	int nch;                   /* asked for */
	uint64_t cookie0;          /* choice i's name for the client:
	                              cookie0 + i */
	int npend;                 /* submitted, not answered yet */
	int nup;                   /* accepted */
	int nend;                  /* of those, ended (their record came) */
	uint64_t handles[MEDHA_OAI_MAX_CHOICES]; /* the router's, by
	                                            choice; 0 until accepted */
	struct medha_record *recs[MEDHA_OAI_MAX_CHOICES]; /* ended, kept until the
	                                               last (whole answers) */
	int ntok;        /* its texts on the tokenizer's thread */
	int tok_rc;      /* the first of them that failed, or 0 */
	struct buf out;  /* a stream's bytes not yet handed to tx */
	struct buf wr;   /* those tx is writing */
};

struct medha_http {
	struct medha_http_config cfg;
	nng_url *url;
	nng_http_server *srv;
	nng_http_handler *hd;
	int port;
	struct medha_pcli *pc;                /* the router's client */
	const struct medha_tok *tok;         /* from cfg.model, or NULL */
	struct medha_tok *tok_own;           /* tok if opened here, not
	                                        the router's; or NULL */
	int64_t ctx_len;                     /* its context length, or 0 */
	char model_id[MEDHA_PROTO_NAME_MAX]; /* cfg.model's basename, or "" */
	int64_t started;                     /* Unix time */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* work for the sender */
	int quit;
	pthread_t sender, taker;
	int threads;
	/* under mu */
	struct hreq *all;          /* every request not yet reaped */
	struct hreq *sq, *sq_tail; /* to submit */
	struct hreq *reap;         /* to free */
	struct medha_tokq *tokq;   /* the long texts' tokenizer thread */
	int tok_news;              /* it has finished a job since the
	                              sender last looked */
	struct medha_map live; /* handle -> hreq */
	struct medha_map subs; /* a choice's cookie -> hreq, until its
	                          SUBMIT is answered */
	uint64_t next_cookie;
	uint64_t seq;
	struct medha_http_stats st;
	struct http_keys *keys; /* cfg's API keys, or NULL: none asked */
};

/* ---- key.c: the API keys (NULL: none, every request taken) ---- */
struct http_keys;
int http_keys_open(struct http_keys **k, const char *const *keys, int n,
    char *why, size_t whylen);
void http_keys_free(struct http_keys *k);
/* 1 when the Authorization header's value names a key (or k is NULL),
 * with *tenant the key's tenant (0: no key, or k NULL) */
int http_keys_ok(const struct http_keys *k, const char *authorization,
    uint64_t *tenant);

/* ---- conn.c: nng's callbacks on a request's connection ---- */
/* A new request's first I/O (mu held): "100 Continue" first (cont),
 * then its body. */
void http_conn_start(struct medha_http *h, struct hreq *r, int cont);
void http_rx_cb(void *arg); /* r->rx's */
void http_tx_cb(void *arg); /* r->tx's */

/* ---- up.c: the router's side ---- */
void *http_taker_main(void *arg);
void *http_sender_main(void *arg);

/* ---- prompt.c: prompts made ready to go upstream ---- */
int http_fit(struct medha_http *h, struct hreq *r, struct medha_oai_error *e);
int http_tok_push(struct medha_http *h, struct hreq *r);
struct hreq *http_tok_take(struct medha_http *h);
/* The tokenizer's thread stopped, its jobs dropped (at close, after the
 * sender's thread). */
void http_tok_stop(struct medha_http *h);

/* ---- req.c: a request's life ---- */
uint64_t http_mix(uint64_t z);
int hreq_move(struct medha_http *h, struct hreq *r, int to);
void hreq_reap(struct medha_http *h, struct hreq *r);
void hreq_reap_all(struct medha_http *h);
void hreq_send(struct medha_http *h, struct hreq *r, const char *p, size_t n);
void hreq_send_chunk(struct medha_http *h, struct hreq *r, const char *text,
    size_t len, int role, int finish, const struct medha_record *usage);
void hreq_free(struct medha_http *h, struct hreq *r);

/* ---- stream.c: the bytes out (mu held where it says locked 1) ---- */
void http_reply(struct medha_http *h, nng_aio *aio, int status,
    const char *ctype, const char *body, size_t len, int close, int locked);
void http_reply_allow(struct medha_http *h, nng_aio *aio, int status,
    const char *ctype, const char *body, size_t len, int close, int locked,
    const char *allow);
void http_reply_json(struct medha_http *h, nng_aio *aio, int status,
    const char *js, size_t len, int close, int locked);
void http_reply_error(struct medha_http *h, nng_aio *aio,
    const struct medha_oai_error *e, int close, int locked);
int http_put_head(struct medha_http *h, struct hreq *r);
int http_put(struct hreq *r, const char *p, size_t n);
int http_put_chunk(struct hreq *r, const char *text, size_t len, int role,
    int finish, const struct medha_record *usage);
void http_put_end(struct hreq *r);
void http_kick(struct hreq *r);
void http_watch(struct hreq *r);

#endif
