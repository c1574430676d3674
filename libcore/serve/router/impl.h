/*
 * impl.h: what the router's files share (serve/router/; router.h is the
 * router's interface). Not for use outside serve/router/. The files,
 * each calling only those below it:
 *
 *	router.c	the public calls (open, run, close), and the clients'
 *			side: SUBMIT, CANCEL, STATUS, a client gone, the stop,
 *			the main loop's pass
 *	  text.c	text to token ids: a short text on the loop, a long one
 *			on the tokenizer's thread, its ids taken back
 *	  up.c		the replicas: STATUS asked, up and down judged, what
 *			their clients (net/pcli.h) bring back turned into moves
 *	    life.c	a request's life: its state, changed only by rt_move,
 *			the requests held for a replica, the records made here
 *	      place.c	the choice of a replica (least work; cache-aware)
 *			and the SUBMIT to it
 *	        cache.c	the record of the prompts' block hashes by replica
 *	      metrics.c	the figures of medha_router_metrics()
 *
 * Every one of them runs on the router's main thread but
 * medha_router_metrics(), which any thread may call.
 */
#ifndef MEDHA_ROUTER_IMPL_H
#define MEDHA_ROUTER_IMPL_H

#include "serve/router.h"

#include "batch.h" /* MEDHA_KV_BLOCK */
#include "map.h"
#include "serve/front.h"
#include "net/link.h"
#include "net/pcli.h"
#include "net/proto.h"
#include "sched/prefix.h" /* medha_prefix_chain */
#include "tok/tokq.h"

#include <pthread.h>

#define DEAD (MEDHA_PROTO_DEAD_MS / 1e3)
#define HB (MEDHA_PROTO_HEARTBEAT_MS / 1e3)

/* A replica's client, or the tokenizer's thread, has news: the main
 * thread's loop (arg: its struct medha_srv) takes it. */
static inline void
rt_wake(void *arg)
{
	medha_srv_wake(arg);
}

/* A long text prompt on its way through the router's tokenizer
 * thread (text.c). */
struct rjob {
	struct medha_tokq_job tj; /* first */
	uint64_t handle;          /* its request's: gone if not in reqs */
	char *text;               /* taken from the request's spec */
};

/*
 * A request's life in the router (life.c rt_move makes every change):
 *
 *	NEW --text--> TOKENIZING --place--> SENT | HELD | ENDED
 *	NEW --place--> SENT | HELD		(neither: its SUBMIT refused)
 *	HELD --place--> SENT			(a replica is ready)
 *	SENT --accepted--> ACCEPTED --event--> STARTED --record--> ENDED
 *	SENT, ACCEPTED --back--> SENT | HELD | ENDED
 *				(refused or lost by its replica before it
 *				started: another, or the wait, or its end)
 *
 * and from any state, a record made here (failed, rejected, cancelled)
 * ends it. Its client's CANCEL, or its client going away, is written in
 * stop: a request still tokenizing or held ends at once or at the next
 * pass; one a replica holds is cancelled there, and one on its way to a
 * replica once accepted; their records end them.
 */
enum rq_state {
	RQ_NEW,        /* taken from its SUBMIT, not yet answered */
	RQ_TOKENIZING, /* its text on the tokenizer's thread (job) */
	RQ_HELD,       /* waiting at the router for a replica (r->held) */
	RQ_SENT,       /* its SUBMIT on its way to replica rep */
	RQ_ACCEPTED,   /* replica rep holds it as up; no event yet: it may
	                  still go elsewhere */
	RQ_STARTED,    /* an event went to its client: it stays at rep */
	RQ_ENDED,      /* its record sent, q freed (rt_move's answer only) */
};

/* What its client wants of it. */
enum rq_stop {
	RQ_STOP_NONE,
	RQ_STOP_CANCEL, /* cancelled by its client */
	RQ_STOP_GONE,   /* its client went away */
};

/* What moves a request (rt_move). */
enum rq_ev {
	RQ_EV_TEXT,     /* NEW: its text went to the tokenizer (q->job) */
	RQ_EV_PLACE,    /* NEW, TOKENIZING (its ids came): sized, placed
	                   or held; HELD: offered out again */
	RQ_EV_ACCEPTED, /* SENT: its replica took it, as n->up */
	RQ_EV_EVENT,    /* ACCEPTED, STARTED: its replica's n->ev (taken),
	                   on to its client; a record ends it */
	RQ_EV_BACK,     /* SENT, ACCEPTED: refused or lost by its replica
	                   before it started; if no other takes it and it
	                   cannot wait, it ends with n->status, n->why */
	RQ_EV_CANCEL,   /* its client's CANCEL */
	RQ_EV_GONE,     /* its client went away */
	RQ_EV_STOP,     /* the router stops: cancelled everywhere, ended */
	RQ_EV_END,      /* ends with a record made here (n->status,
	                   n->why); n->status < 0: with none (NEW: its
	                   SUBMIT is refused) */
};

/* What an event brings (the fields its comment names). */
struct rq_news {
	int status;
	const char *why;
	uint64_t up;
	struct medha_msg_event *ev;
};

/* A request in flight through the router. */
struct rreq {
	enum rq_state state;
	enum rq_stop stop;
	uint64_t handle; /* the router's, as the client knows it */
	uint32_t peer;   /* the client's connection */
	char id[MEDHA_ID_MAX];
	double arrival;   /* router clock, s */
	int64_t prompt;   /* prompt tokens (estimated for a text the
	                     router does not tokenize) */
	int64_t need;     /* KV tokens it needs: prompt + max_tokens */
	int rep;          /* the replica it was sent to, or -1 */
	uint32_t placed_n; /* times placed: its SUBMIT's cookie is
	                      handle << 16 | placed_n % 65536, so that the
	                      answer to an earlier one is not taken for it */
	uint64_t up;      /* the replica's handle once accepted, else 0 */
	uint64_t *tried;  /* bitmap of replicas tried */
	struct medha_reqspec spec; /* kept until its first event, for a
	                              retry elsewhere */
	int64_t held_at;           /* HELD: its slot in r->held */
	double held_since;         /* router clock when first held, or 0 */
	double sent;               /* router clock when last placed */
	struct rjob *job;          /* its text being tokenized, or NULL */
	uint64_t *keys;            /* (nkeys) its prompt's chained block
	                              hashes (cache.c), or NULL */
	int64_t nkeys;
	int64_t kbs;               /* the KV block size (tokens) the keys
	                              were cut at: a replica of another
	                              does not match them; 0: text bytes */
	int64_t bl;                /* prompt tokens a key stands for */
	int64_t cached;            /* prompt tokens its replica was guessed
	                              to hold, placed as not to compute */
};

/* A replica's prompts as the router placed them (cache.c). */
struct rcache {
	struct medha_map gen[2]; /* chained block hashes: recent, older */
};

struct up {
	struct medha_router *r;
	int idx;
	const char *url;
	struct medha_pcli *pc; /* its client (net/pcli.h) */
	double st_at;       /* medha_now() when STATUS was last asked */
	/* main thread only */
	int alive;          /* counted up (answered within DEAD) */
	int ready;          /* and its workers are all there */
	int unreach_said;   /* "unreachable" logged, not alive since */
	struct medha_msg_status st; /* the latest STATUS taken in */
	uint64_t st_gen;    /* statuses taken in */
	uint64_t st_seen;   /* the st_gen acted on */
	struct medha_msg_status now; /* the latest status acted on */
	uint64_t epoch;     /* the connection epoch acted on */
	struct medha_map by_up; /* the replica's handle -> struct rreq */
	int64_t live;       /* requests accepted there, not ended */
	int64_t placed;     /* prompt tokens sent since its last status */
	int64_t placed_kv;  /* KV tokens likewise */
	double s_per_tok;   /* predicted prefill seconds per prompt token */
	struct rcache cache; /* what was placed there (cache-aware) */
	int64_t evicted;     /* its latest STATUS's evicted blocks */
	int64_t evicted_sum; /* counted: blocks evicted over its lives */
	int64_t progress, progress_sum; /* the same of its STATUS's
	                                   progress batches */
	int64_t xlast[MEDHA_PROTO_MAX_EXPERTS]; /* the same of its STATUS's */
	int64_t xsum[MEDHA_PROTO_MAX_EXPERTS];  /* experts (n_experts of */
	int nx;                                 /* each) */
};

struct medha_router {
	struct medha_router_config cfg;
	struct medha_front f; /* socket, clients, drain, live requests */
	double t0;
	struct up *up; /* (cfg.nreplicas) */
	int nup;
	struct medha_map reqs;          /* the router's handle -> rreq */
	uint64_t next_handle;
	int rr; /* where the tie-break starts */
	int ready;
	struct rreq **held; /* (held_len) the HELD requests in arrival
	                       order, NULL where one left since */
	int64_t nheld, held_len, held_cap;
	double held_tried;  /* medha_now() when they were last offered out */
	int64_t served, failed;
	int64_t cache_placed; /* placements on a recorded prefix */
	struct medha_tok *tok;   /* cfg.model's, or NULL: text goes on */
	int64_t ctx_len;         /* its context (0: unknown) */
	struct medha_tokq *tokq; /* its thread, for long texts */
	size_t tok_bytes;        /* of the texts pushed, not taken back */
	pthread_mutex_t mmu;               /* guards met */
	struct medha_router_metrics met;   /* met.rep: (nup) */
};

/* ---- text.c: text to token ids (cfg.model) ---- */

/* q's text (NEW), with a tokenizer: a short one tokenized now, a long
 * one pushed to the thread (RQ_EV_TEXT). 0, or a code with why to
 * refuse its SUBMIT. */
int rt_text_tokenize(struct medha_router *r, struct rreq *q, char *why,
    size_t whylen);
/* The texts tokenized since the last pass: their requests moved on. */
void rt_text_collect(struct medha_router *r);
/* The tokenizer's thread stopped, its texts let go (closing). */
void rt_text_close(struct medha_router *r);

/* ---- up.c: the replicas ---- */

/* Replicas up and down judged at time t (medha_now()), STATUS asked
 * for and taken in; the requests of one lost moved. */
void rt_watch(struct medha_router *r, double t);
/* What the replicas' clients brought: answers, events, statuses. */
void rt_take_inbox(struct medha_router *r);

/* ---- life.c: a request's life ---- */

/* The one place q->state and q->stop change: q moved by ev (n: what
 * it brings, or NULL). Returns q's state after; RQ_ENDED: q is freed. */
enum rq_state rt_move(struct medha_router *r, struct rreq *q,
    enum rq_ev ev, const struct rq_news *n);
/* The requests held at time t: ended if their client left or they
 * waited hold_timeout, else offered out again while a replica is
 * ready. Every status_interval. */
void rt_release_held(struct medha_router *r, double t);

/* q freed (closing: what it holds, not where it is). */
void rt_rreq_free(struct rreq *q);

/* ---- place.c: where a request goes ---- */

/* q's prompt known (ids, or a text left to the replica): its size, its
 * hashes for cache-aware placement. */
void rt_sized(struct medha_router *r, struct rreq *q);
/* q sent to the best replica not yet tried (q->rep, q->sent set): 0,
 * or -1 if none is left or its SUBMIT could not be sent. */
int rt_place(struct medha_router *r, struct rreq *q);

/* ---- cache.c: the record of what prompts went where ---- */

/* The chained block hashes of rs's prompt (its ids in blocks of bs
 * tokens, else its text in blocks of 64 bytes) into *keys (malloc'd),
 * their count returned (0: none to match, *keys NULL). */
int64_t rt_cache_keys(const struct medha_reqspec *rs, int64_t bs,
    uint64_t **keys);
/* Blocks of keys, from the first, that c holds. */
int64_t rt_cache_match(const struct rcache *c, const uint64_t *keys,
    int64_t n);
/* keys placed on c's replica (of kv_blocks KV blocks): recorded. */
void rt_cache_add(struct rcache *c, const uint64_t *keys, int64_t n,
    int64_t kv_blocks);
/* The replica's cache is gone (down, or a new connection). */
void rt_cache_clear(struct rcache *c);

/* ---- metrics.c ---- */

/* A request ended with rec (from a replica) or with status (made here). */
void rt_count_end(struct medha_router *r, const struct medha_record *rec,
    int status);
void rt_count_refused(struct medha_router *r);
/* The replicas' states and the gauges, after a pass. */
void rt_count_gauges(struct medha_router *r);

#endif
