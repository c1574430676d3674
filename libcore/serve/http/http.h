/*
 * http.h: the router's OpenAI-compatible HTTP front door (medha-router
 * --http; man/medha-router.1 is the reference for every route, status
 * and message). It serves
 *
 *	POST /v1/completions		a prompt (text or token ids)
 *	POST /v1/chat/completions	messages, through the GGUF's template
 *	GET  /v1/models			the one model served
 *	GET  /health			200 when ready, else 503
 *	GET  /metrics			Prometheus text format 0.0.4
 *
 * with nng's own HTTP server (no other dependency). Completions are
 * answered whole (application/json) or streamed as server-sent events
 * ("data: {json}\n\n" per token event, then "data: [DONE]\n\n").
 *
 * The front door is one more protocol client of the router
 * (net/proto.h): it dials the router at an inproc:// address the router
 * also listens on (medha_router_listen) and speaks SUBMIT, POLL and
 * CANCEL exactly as medha-trace replay does, through net/pcli.h. One
 * thread submits, one takes the answers and the events, which carry
 * every HTTP request's tokens: with c.router set the router hands them
 * to the front door's client on its own thread (medha_router_local),
 * not encoded for the POLL and decoded again. A client that goes away
 * during a stream has its request cancelled.
 *
 * Every resource is bounded: the request body (max_body bytes, read
 * within body_timeout seconds, else the connection closes), the requests in progress (max_conns,
 * more are answered 429 at once), and what a request holds (its output).
 *
 *	struct medha_http_config c;
 *	medha_http_config_default(&c);
 *	c.listen = "127.0.0.1:8000";
 *	c.upstream = "inproc://medha-router";	(medha_router_listen'ed)
 *	c.router = r;				(for /health, /metrics)
 *	c.model = "SmolLM2-135M-Instruct.Q4_1.gguf";	(tokenizer, template)
 *	if (medha_http_open(&h, &c, why, sizeof(why)) != 0) ...
 *	medha_router_run(r, &stop);
 *	medha_http_close(h);
 *	medha_router_close(r);
 *
 * The second half of this header is the OpenAI JSON itself (oai.c, parse.c):
 * request bodies into a struct medha_reqspec, records and token events
 * into response bodies and chunks, errors into OpenAI's error bodies,
 * and the router's figures into Prometheus text. Those functions touch
 * no socket, so tests/http_test.c checks them alone.
 */
#ifndef MEDHA_HTTP_H
#define MEDHA_HTTP_H

#include "medha.h"
#include "tok/tokenizer.h"
#include "serve/router.h"
#include "req.h"

#include <stddef.h>
#include <stdint.h>

struct medha_http_config {
	const char *listen;          /* HOST:PORT (port 0: any free port) */
	const char *upstream;        /* the router's url for this client */
	struct medha_router *router; /* figures for /health and /metrics;
	                                NULL: STATUS is not consulted and
	                                both say only what HTTP saw */
	const char *model;           /* a GGUF whose tokenizer and chat template
	                                are used (router's, if it opened the
	                                same file: medha_router_tok), or NULL
	                                (no chat completions) */
	int64_t max_conns;   /* HTTP requests in progress at most (1024) */
	int64_t max_body;    /* request body bytes at most (1 MiB) */
	double body_timeout; /* s to receive a request body (10) */
	double keepalive;    /* s between a waiting stream's comments (5) */
	const char *const *api_keys; /* (n_api_keys) a /v1/ request must
	                                carry one as a Bearer token, else
	                                401; none: every request taken.
	                                Read at open only. */
	int n_api_keys;
	int shared_prefix_cache; /* the API keys share one prefix cache
	                            (each request's cache_salt alone);
	                            0: each key is a tenant of its own */
};

void medha_http_config_default(struct medha_http_config *c);

struct medha_http;

/*
 * Open the model (if any), dial c->upstream and start serving HTTP at
 * c->listen. Returns 0, MEDHA_EINVAL (a bad address or configuration),
 * MEDHA_EIO (cannot listen: address in use), the model's error, or
 * MEDHA_ENOMEM, with why.
 */
int medha_http_open(struct medha_http **h, const struct medha_http_config *c,
    char *why, size_t whylen);

/* The TCP port it listens at (the one chosen when c->listen asked 0). */
int medha_http_port(const struct medha_http *h);

/*
 * Stop: no new connection; requests still waiting are answered 503,
 * streams are ended (their requests cancelled upstream), and every
 * thread is joined. Call before medha_router_close(). h may be NULL.
 */
void medha_http_close(struct medha_http *h);

/* ---- the OpenAI JSON (oai.c; request bodies: parse.c) ---- */

/* An error as OpenAI answers it: {"error": {message, type, param, code}}. */
struct medha_oai_error {
	int status;       /* the HTTP status: 400 .. 599 */
	const char *type; /* "invalid_request_error", "server_error", ... */
	const char *code; /* "model_not_found", ..., or NULL (null) */
	char param[64];   /* the request field at fault, or "" (null) */
	char message[512];
};

/* Set every field of e; fmt is the message. Returns e->status. */
int medha_oai_error_set(struct medha_oai_error *e, int status, const char *type,
    const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/*
 * The error for a SUBMIT answered with ERROR (code, reason): 429 when
 * the router is overloaded, 503 when no replica is ready or it is
 * stopping, 400 for a request refused as malformed.
 */
void
medha_oai_error_submit(struct medha_oai_error *e, int code, const char *reason);

/*
 * The error for a record whose status is not "ok": "rejected" 400 (code
 * context_length_exceeded when the reason names the context), "failed"
 * 500, "cancelled" 503.
 */
void medha_oai_error_record(struct medha_oai_error *e,
    const struct medha_record *rec);

/* {"error": ...} as a malloc'd string of *len bytes (NULL: no memory). */
char *medha_oai_error_json(const struct medha_oai_error *e, size_t *len);

/* One HTTP completion request, parsed. */
struct medha_oai_req {
	int chat;           /* /v1/chat/completions */
	int stream;         /* "stream": true */
	int include_usage;  /* "stream_options": {"include_usage": true} */
	int max_tokens_set; /* max_tokens (or max_completion_tokens) given */
	int seed_set;       /* seed given */
	int n;              /* "n": choices, 1 to MEDHA_OAI_MAX_N */
	char model[256];    /* "model" as given, or "" */
	struct medha_reqspec spec; /* id left empty; prompt (text, for chat
	                              the template's output) or prompt_ids,
	                              max_tokens, sampling, stop, ignore_eos,
	                              cache_salt (medha_oai_salt, no tenant
	                              yet); owned */
	/* /v1/completions' list of prompts (an array of strings or of
	   token id arrays, as OpenAI and vLLM take): n choices each, choice
	   p * n + j prompt p's; spec then holds no prompt. 0: one prompt,
	   spec's */
	int n_prompts;
	struct medha_oai_prompt *prompts; /* owned (n_prompts) */
};

/* One prompt of a list: a text or token ids. */
struct medha_oai_prompt {
	char *text;   /* owned, or NULL */
	int32_t *ids; /* owned (n_ids), or NULL */
	int64_t n_ids;
};

/* Most choices ("n") a request may ask for: each is a request upstream. */
#define MEDHA_OAI_MAX_N 16
/* Most choices of all its prompts together (prompts times n). */
#define MEDHA_OAI_MAX_CHOICES 64

/* Largest max_tokens accepted. */
#define MEDHA_OAI_MAX_TOKENS (1 << 24)

/*
 * Parse len bytes of body (any bytes) as a /v1/completions request, or
 * with chat a /v1/chat/completions one, whose messages tok's template
 * formats (tok NULL: chat is refused, 400). Defaults are OpenAI's:
 * max_tokens 16 (chat: 0 here and max_tokens_set 0, for the caller to
 * fill in), temperature 1, top_p 1; a seed is left 0 when not given.
 * Returns 0 and fills *q (the caller's, for medha_oai_req_clear), or an
 * HTTP status (>= 400) with *e set and *q owning nothing.
 */
int medha_oai_parse(struct medha_oai_req *q, const char *body, size_t len,
    int chat, const struct medha_tok *tok, struct medha_oai_error *e);
void medha_oai_req_clear(struct medha_oai_req *q);

/*
 * Tenants of the prefix cache (medha_reqspec.cache_salt, medha-router(1)
 * "Tenants"), each the first 8 bytes of a SHA-256 under a label of its
 * own: medha_oai_salt, a body's "cache_salt" (n bytes at s) as the
 * wire's 64-bit salt; medha_oai_key_tenant, an API key's tenant (n bytes
 * at key: nothing of the key can be read from it); and
 * medha_oai_salt_tenant, a salt (0: none) under a tenant (0: none, then
 * the salt as it is), of both, so that no salt a client picks under one
 * tenant is another tenant's. *out is never 0 but from
 * medha_oai_salt_tenant(0, 0). Each returns 0 or MEDHA_ENOMEM (*out 0).
 */
int medha_oai_salt(const char *s, size_t n, uint64_t *out);
int medha_oai_key_tenant(const char *key, size_t n, uint64_t *out);
int medha_oai_salt_tenant(uint64_t tenant, uint64_t salt, uint64_t *out);

/* vLLM's rule for min_tokens: at most max_tokens. 0, or 400 with *e set
 * (the parse checks a max_tokens given; the caller, a chat's once it is
 * filled in). */
int medha_oai_min_tokens_check(const struct medha_reqspec *rs,
    struct medha_oai_error *e);

/*
 * A text arriving in pieces, as characters: those whole so far (as
 * medha_utf8_fix makes them: a bad byte is one U+FFFD) and the bytes, at
 * most 3, of one not yet whole. All zero is empty.
 */
struct medha_utf8_acc {
	int64_t chars;
	char b[4];
	int n;
};

/*
 * Append n bytes of s to a's held ones: into out (the caller's, n + 3
 * bytes at least) the bytes that end at a whole character, their
 * number returned (medha_utf8_fix of the pieces, joined, is that of the
 * whole text); a keeps the rest.
 */
size_t medha_utf8_feed(struct medha_utf8_acc *a, const char *s, size_t n,
    char *out);
/* The text's end: the held bytes into out (3 bytes), their number
 * returned; each counts as one U+FFFD. */
size_t medha_utf8_flush(struct medha_utf8_acc *a, char *out);

/* What every response of one request shares. */
struct medha_oai_head {
	const char *id;    /* "cmpl-..." or "chatcmpl-..." */
	const char *model; /* the model id */
	int64_t created;   /* Unix time, s */
	int chat;
	/* logprobs, where the request asked (a chunk's tokens; a whole
	   response takes the record's): their ids and n_lps of them, each
	   token named by the bytes the replica sent with it (no tokenizer
	   here: "token_id:N", vLLM's, where it sent none) */
	int logprobs; /* asked for */
	const int32_t *ids;
	const struct medha_token_lp *lps;
	int64_t n_lps;
	struct medha_utf8_acc *text_off; /* completions' text_offset so
	                                    far, or NULL (from 0) */
	int index;         /* a chunk's choice */
};

/*
 * The whole answer of a request that ended "ok": its generated text
 * (len bytes, made valid UTF-8: a bad byte becomes U+FFFD), rec's
 * finish_reason and token counts. A malloc'd JSON string of *outlen
 * bytes, or NULL (no memory).
 */
char *medha_oai_response(const struct medha_oai_head *hd, const char *text,
    size_t len, const struct medha_record *rec, size_t *outlen);

/* Likewise with n choices, choice i recs[i]'s text and logprobs (index
 * i), and usage's counts. */
char *medha_oai_response_n(const struct medha_oai_head *hd,
    struct medha_record *const *recs, int n, const struct medha_record *usage,
    size_t *outlen);

/*
 * One server-sent event, "data: {json}\n\n", malloc'd, *outlen bytes:
 * a chunk carrying text (len bytes; for chat, role adds "role":
 * "assistant" to the delta), finish (a MEDHA_FINISH_*, 0 for none), and
 * usage when rec is not NULL (then choices is empty). include_usage
 * adds "usage": null to the chunks without it, as OpenAI does.
 */
char *medha_oai_chunk(const struct medha_oai_head *hd, const char *text,
    size_t len, int role, int finish, const struct medha_record *rec,
    int include_usage, size_t *outlen);

/* Copy len bytes of s into a new NUL-terminated valid UTF-8 string. */
char *medha_utf8_fix(const char *s, size_t len, size_t *outlen);

/* What the front door itself counts, for /metrics. */
#define MEDHA_HTTP_CODES 12
extern const int medha_http_codes[MEDHA_HTTP_CODES]; /* 200, 400, ... */
struct medha_http_stats {
	uint64_t responses[MEDHA_HTTP_CODES + 1]; /* by code; last: other */
	int64_t in_progress; /* HTTP requests being answered */
	int64_t streams;     /* of those, streaming now */
};

/*
 * The figures as Prometheus text (exposition format 0.0.4): m (NULL:
 * none of the router's) and s. A malloc'd string of *len bytes, or
 * NULL.
 */
char *medha_oai_metrics(const struct medha_router_metrics *m,
    const struct medha_http_stats *s, size_t *len);

#endif
