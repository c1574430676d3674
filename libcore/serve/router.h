/*
 * router.h: medha-router, the front door of several replicas. It speaks
 * the client half of the wire protocol (net/proto.h) on its own
 * listening socket, exactly as a replica's scheduler does, so clients
 * (medha-trace replay, the HTTP front door) cannot tell the two apart,
 * and is itself a client of every replica.
 *
 * With a model (cfg.model), text becomes token ids here, once: a text
 * prompt is tokenized (a short one on the main thread, a long one on a
 * tokenizer thread, tok/tokq.h, its request accepted meanwhile and
 * placed when its ids come) and checked against the model's context,
 * and only its ids go on. Without one a text goes on to the replica,
 * which tokenizes it.
 *
 * Each request goes to the replica with the least predicted pending
 * work (the prefill seconds its STATUS reports, plus what was placed on
 * it since) among those that are ready and have free KV memory for the
 * prompt and its output; when none has the memory, to the least loaded
 * ready one, which queues it. Cache-aware (cache_balance > 0): the
 * router records the chained block hashes of the prompts it placed on
 * each replica (router/cache.c: their ids in the replicas' KV blocks,
 * hashed as the replicas' prefix caches hash them), and a request whose
 * prompt begins with blocks one of them was sent goes to the one with
 * the longest such prefix instead, unless its work exceeds the least
 * loaded one's by more than cache_balance seconds; the work placed
 * counts only the prompt tokens after that prefix. A replica that refuses a request as not
 * ready or overloaded, or cannot be reached, is passed over for the
 * next. Tokens and records stream back to the client unchanged but for
 * the handle (the router's own) and the times (the router's clock, so
 * that TTFT includes the router).
 *
 * A replica whose connection closes, or that answers nothing for
 * MEDHA_PROTO_DEAD_MS, is down: every request it held that had started
 * (an event came back) ends with a "failed" record, those that had not
 * are placed again, and nothing is placed on it until it answers again.
 * A request that no replica can take now (none ready, or every one
 * refused it as not ready or overloaded, or it was on its way to one
 * that went down) waits at the router, in arrival order, for up to
 * hold_timeout seconds, and goes out as soon as a replica is ready; then
 * it is "rejected". Every request ends with exactly one record.
 *
 *	struct medha_router_config c;
 *	medha_router_config_default(&c);
 *	c.listen = "ipc:///tmp/router.sock";
 *	c.replicas = urls; c.nreplicas = 2;
 *	if (medha_router_open(&r, &c, why, sizeof(why)) != 0) ...
 *	medha_router_run(r, &stop_flag);	(until *stop_flag, drained)
 *	medha_router_close(r);
 */
#ifndef MEDHA_ROUTER_H
#define MEDHA_ROUTER_H

#include "medha.h"
#include "net/proto.h"
#include "req.h"

#include <signal.h>
#include <stdint.h>

#define MEDHA_ROUTER_MAX_REPLICAS 1024

struct medha_tok;

struct medha_router_config {
	const char *listen;            /* url to listen at */
	const char *const *replicas;   /* (nreplicas) their urls */
	int nreplicas;                 /* 1 .. MEDHA_ROUTER_MAX_REPLICAS */
	double drain_timeout;          /* s a stop waits for requests (30) */
	int64_t max_queue;             /* requests in flight at most;
	                                  more are refused (100000) */
	double status_interval;        /* s between STATUS calls to each
	                                  replica (0.1) */
	double hold_timeout;           /* s a request may wait at the router
	                                  for a ready replica (30); 0: refuse
	                                  it at once */
	const char *model;             /* a GGUF whose tokenizer turns
	                                  text prompts into ids here, and
	                                  whose context bounds them; NULL:
	                                  text goes on to the replicas */
	double cache_balance;          /* s of predicted pending work: a
	                                  request goes to the replica that
	                                  holds the longest prefix of it
	                                  unless that one's work exceeds the
	                                  least loaded one's by more (1);
	                                  0: least-load placement alone */
};

void medha_router_config_default(struct medha_router_config *c);

struct medha_router;

/* Listen at c->listen and dial every replica. Returns 0, MEDHA_EINVAL,
 * MEDHA_EIO (cannot listen) or MEDHA_ENOMEM, with why. */
int medha_router_open(struct medha_router **r,
    const struct medha_router_config *c, char *why, size_t whylen);

/*
 * Serve until *stop becomes non-zero; then refuse new requests, let
 * those in flight finish for up to drain_timeout seconds, cancel the
 * rest, and return 0 (or MEDHA_ENOMEM if it had to give up).
 */
int medha_router_run(struct medha_router *r, volatile sig_atomic_t *stop);

void medha_router_close(struct medha_router *r);

/*
 * Listen at one more url (link.h's medha_srv_listen): the HTTP front
 * door (serve/http.h) is a client of the router at an inproc:// address.
 * Call before medha_router_run. Returns 0, MEDHA_EINVAL or MEDHA_EIO,
 * with why.
 */
/*
 * Hand the events of the clients connected over inproc:// (in this
 * process: the HTTP front door) to deliver(arg, ev), ev taken over, on
 * the router's thread, rather than encoding them for their POLLs: a
 * token is then not encoded and decoded again inside one process
 * (net/pcli.h's medha_pcli_deliver takes them). Call before
 * medha_router_run; deliver and arg stay valid until it returns.
 */
void medha_router_local(struct medha_router *r,
    void (*deliver)(void *arg, struct medha_msg_event *ev), void *arg);

int medha_router_listen(struct medha_router *r, const char *url, char *why,
    size_t whylen);

/*
 * The tokenizer r opened from the GGUF at model (cfg.model, the same
 * path), and its context in *ctx_len (0: unknown); NULL if r opened
 * none or another. The router's, closed by medha_router_close; any
 * thread may tokenize with it while r is open (tok/tokenizer.h), so the
 * HTTP front door in the same process (medha_http_config.router) uses
 * it rather than opening the GGUF a second time.
 */
const struct medha_tok *medha_router_tok(const struct medha_router *r,
    const char *model, int64_t *ctx_len);

/* ---- metrics: a snapshot any thread may take while the router runs ---- */

/* Histogram buckets: upper bounds in seconds, +Inf beyond the last. */
#define MEDHA_HIST_BUCKETS 12
extern const double medha_router_ttft_le[MEDHA_HIST_BUCKETS];
extern const double medha_router_tpot_le[MEDHA_HIST_BUCKETS];
extern const double medha_router_e2e_le[MEDHA_HIST_BUCKETS];

struct medha_hist {
	uint64_t n[MEDHA_HIST_BUCKETS + 1]; /* observations in (le[i-1],
	                                       le[i]]; the last: > le[11] */
	uint64_t count;
	double sum;
};

/* One replica as the router last saw it (its latest STATUS). */
struct medha_router_replica_stat {
	const char *url; /* the configuration's string */
	int up;          /* answered within MEDHA_PROTO_DEAD_MS */
	int ready;       /* and all its workers are there */
	int64_t workers, workers_wanted;
	int64_t pending, queue; /* requests in flight there; of those, queued */
	int64_t kv_blocks, kv_used, block_size;
	int64_t live; /* requests the router has accepted there */
};

struct medha_router_metrics {
	double uptime;    /* s since medha_router_open */
	int ready;        /* a replica is ready and the router not stopping */
	int draining;     /* stopping */
	int64_t in_flight; /* requests in flight through the router */
	int64_t held;      /* of those, waiting at the router for a replica */
	int64_t refused;   /* SUBMITs answered with ERROR */
	int64_t requests[MEDHA_STATUS_COUNT]; /* ended, by record status */
	int64_t prompt_tokens;     /* of ended requests, as their records say */
	int64_t generation_tokens; /* likewise, output tokens */
	int64_t cached_tokens;     /* likewise, prompt tokens whose KV came
	                              from a replica's prefix cache */
	int64_t cache_hits;        /* records with a cached token or more */
	int64_t preemptions;       /* likewise, the times their requests
	                              were preempted */
	int64_t cache_evictions;   /* KV blocks the replicas' prefix caches
	                              evicted (their STATUS), since the
	                              router started */
	int64_t progress_batches;  /* batches the replicas' progress
	                              guarantee ran over their target
	                              (their STATUS), likewise */
	int n_experts;             /* a mixture of experts: the replicas'
	                              tokens routed to each expert (their
	                              STATUS), since the router started */
	int64_t experts[MEDHA_PROTO_MAX_EXPERTS];
	struct medha_hist ttft;    /* records of "ok" requests with output */
	struct medha_hist tpot;    /* their tpot_mean, with >= 2 tokens */
	struct medha_hist e2e;     /* finish - arrival of "ok" requests */
	struct medha_hist queue;   /* queue_time of the records with one */
	int64_t finished[MEDHA_FINISH_COUNT]; /* "ok" ones by finish_reason */
	char model[MEDHA_PROTO_NAME_MAX]; /* a replica's model, or "" */
	int nreplicas;
	struct medha_router_replica_stat *rep; /* (nreplicas), malloc'd */
};

/*
 * A consistent copy of the router's figures, updated by its main thread
 * as it goes (requests from every client count, nng and HTTP alike).
 * From any thread, while r is open. On success m->rep is the caller's,
 * freed with free(). Returns 0 or MEDHA_ENOMEM.
 */
int medha_router_metrics(struct medha_router *r, struct medha_router_metrics *m);

/* Count one observation of v seconds into h with bounds le. */
void medha_hist_add(struct medha_hist *h, const double *le, double v);

#endif
