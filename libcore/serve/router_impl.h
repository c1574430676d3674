/*
 * router_impl.h: what the router's files share (router.c: the clients'
 * requests, placement and the life cycle; router_up.c: the replicas'
 * threads, what they bring back, and the metrics). Not for use outside
 * serve/router*.c.
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


/* A long text prompt on its way through the router's tokenizer
 * thread (router.c). */
struct rjob {
	struct medha_tokq_job tj; /* first */
	uint64_t handle;          /* its request's: gone if not in reqs */
	char *text;               /* taken from the request's spec */
};

/* A request in flight through the router. */
struct rreq {
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
	int started;               /* an event came: it cannot move */
	int gone;                  /* its client went away */
	int cancel;                /* cancel it once accepted */
	int held;                  /* waiting in r->held for a replica */
	double held_since;         /* router clock when first held, or 0 */
	double sent;               /* router clock when last placed */
	struct rjob *job;          /* its text being tokenized, or NULL */
	uint64_t *keys;            /* (nkeys) its prompt's chained block
	                              hashes (router_cache.c), or NULL */
	int64_t nkeys;
	int64_t kbs;               /* the KV block size (tokens) the keys
	                              were cut at: a replica of another
	                              does not match them; 0: text bytes */
	int64_t bl;                /* prompt tokens a key stands for */
	int64_t cached;            /* prompt tokens its replica was guessed
	                              to hold, placed as not to compute */
};

/* A replica's prompts as the router placed them (router_cache.c). */
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
	struct rreq **held; /* waiting for a replica, in arrival order */
	int64_t nheld, held_cap;
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

/* router.c: requests */
/* q ends: forgotten (its client was sent its record). */
void rt_rreq_end(struct medha_router *r, struct rreq *q);
/* q fails with status and why: a record for its client, then the end. */
void rt_rreq_fail(struct medha_router *r, struct rreq *q, int status,
    const char *why);
/* q, refused by its replica before it started, placed again. */
void rt_replace(struct medha_router *r, struct rreq *q, int status,
    const char *why);
/* The requests held for want of a ready replica offered out again. */
void rt_release_held(struct medha_router *r, double t);

/* router_cache.c: the record of what prompts went where. The chained
 * block hashes of rs's prompt (its ids in blocks of bs tokens, else its
 * text in blocks of 64 bytes) into *keys (malloc'd), their count
 * returned (0: none to match, *keys NULL). */
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

/* router_up.c: the replicas */
void rt_cancel_upstream(struct medha_router *r, int rep, uint64_t up);
/* q to replica u (its placed_n counted first): 0, or -1 (not sent:
 * out of memory). */
int rt_submit(struct medha_router *r, struct up *u, struct rreq *q);
void rt_take_inbox(struct medha_router *r);
void rt_watch(struct medha_router *r);
/* metrics */
void rt_count_end(struct medha_router *r, const struct medha_record *rec,
    int status);
void rt_count_refused(struct medha_router *r);
void rt_count_gauges(struct medha_router *r);

#endif
