/*
 * proto.h: the wire protocol, version 1 (doc/DESIGN.md section 5;
 * man/medha-proto.7 is normative). Every nng message is one msgpack
 * array [version, type, body...]; this codec turns it into a struct
 * medha_msg and back, and msgpack goes no further than it.
 *
 * Clients (medha-trace replay, medha-router) and workers both talk to
 * medha-sched through one req/rep socket the scheduler listens on: they
 * send a request message, the scheduler answers each with exactly one
 * reply (it may hold a POLL or READY back: long-poll).
 *
 * The decoder is written for hostile input: wrong shapes, wrong types,
 * unknown types and keys, numbers out of range, arrays longer than the
 * limits below or than the bytes that remain, and trailing bytes are all
 * MEDHA_EFORMAT with a reason ("submit: request.max_tokens: not a
 * non-negative integer"). It allocates no more than a small multiple of
 * the input's size. The encoder refuses (MEDHA_EINVAL, with a reason) any
 * struct the decoder would refuse, so a bad message never goes out.
 *
 *	struct medha_msg m = {.type = MEDHA_MSG_CANCEL, .cancel = handle};
 *	void *buf;
 *	size_t len;
 *	char why[256];
 *
 *	if (medha_msg_encode(&m, &buf, &len, why, sizeof(why)) != 0) ...
 *	(send buf, len; free(buf))
 *
 *	if (medha_msg_decode(&m, data, size, why, sizeof(why)) != 0)
 *		medha_log(MEDHA_LOG_WARN, "dropped: %s", why);
 *	else if (m.type == MEDHA_MSG_SUBMIT)
 *		... m.submit.id, m.submit.max_tokens ...
 *	medha_msg_clear(&m);
 */
#ifndef MEDHA_PROTO_H
#define MEDHA_PROTO_H

#include "medha.h"
#include "req.h"

#include <stddef.h>
#include <stdint.h>

#define MEDHA_PROTO_VERSION 1
/* Largest message, bytes: every socket sets NNG_OPT_RECVMAXSZ to it. */
#define MEDHA_PROTO_MAX_FRAME (64u << 20)
/* Items in a BATCH, handles in its frees, tokens in a RESULT. */
#define MEDHA_PROTO_MAX_ITEMS 65536
/* Token ids in one BATCH, all items together. */
#define MEDHA_PROTO_MAX_IDS (1 << 24)
/* Events in one EVENTS. */
#define MEDHA_PROTO_MAX_EVENTS 65536
/* Largest tp, spp or kvp degree, and largest layer index + 1. */
#define MEDHA_PROTO_MAX_DEGREE 65536
#define MEDHA_PROTO_TOPK_MAX (1 << 24) /* largest top_k */
#define MEDHA_PROTO_NAME_MAX 1024      /* model path or name, NUL included */
#define MEDHA_PROTO_GPU_MAX 64         /* device name, NUL included */
#define MEDHA_PROTO_BACKEND_MAX 16     /* "cpu", "sim", "cuda" */
#define MEDHA_PROTO_REASON_MAX 256     /* ERROR and RESULT reasons */
#define MEDHA_PROTO_FP_LEN 64 /* hex digits of a model fingerprint */
#define MEDHA_PROTO_URL_MAX 256        /* a worker's peer address, NUL
                                          included */
#define MEDHA_PROTO_MAX_GROUPS 64      /* KVP groups of one item */
#define MEDHA_PROTO_MAX_EXPERTS 256    /* experts counted in a RESULT or
                                          STATUS_REPLY */
#define MEDHA_PROTO_MAX_PEERS 4096     /* workers of one replica */
/*
 * Liveness: a worker sends HEARTBEAT this often while a batch runs, and
 * the scheduler answers a held POLL or READY within this time; a peer
 * silent for MEDHA_PROTO_DEAD_MS is dead.
 */
#define MEDHA_PROTO_HEARTBEAT_MS 1000
#define MEDHA_PROTO_DEAD_MS 3000

/* Message types, the second element of every frame (never renumbered). */
enum medha_msg_type {
	MEDHA_MSG_SUBMIT = 1,       /* client: a request */
	MEDHA_MSG_ACCEPTED = 2,     /* reply: its id and handle */
	MEDHA_MSG_POLL = 3,         /* client: give me events */
	MEDHA_MSG_EVENTS = 4,       /* reply: tokens and records */
	MEDHA_MSG_CANCEL = 5,       /* client: cancel a handle */
	MEDHA_MSG_OK = 6,           /* reply: done */
	MEDHA_MSG_STATUS = 7,       /* anyone: how are you */
	MEDHA_MSG_STATUS_REPLY = 8, /* reply: workers, queue, KV */
	MEDHA_MSG_ERROR = 9,        /* reply: malformed or refused */
	MEDHA_MSG_HELLO = 10,       /* worker: who I am */
	MEDHA_MSG_WELCOME = 11,     /* reply: your worker id */
	MEDHA_MSG_READY = 12,       /* worker: give me a batch */
	MEDHA_MSG_RESULT = 13,      /* worker: a batch's sampled tokens */
	MEDHA_MSG_HEARTBEAT = 14,   /* worker: still running a batch */
	MEDHA_MSG_BATCH = 15,       /* reply: a batch to run */
	MEDHA_MSG_IDLE = 16,        /* reply: nothing to run (only frees) */
	MEDHA_MSG_TYPE_COUNT
};

/* ACCEPTED: the scheduler's name for a submitted request. */
struct medha_msg_accepted {
	char id[MEDHA_ID_MAX]; /* the request's id, as submitted */
	uint64_t handle;       /* the scheduler's handle for it */
};

enum medha_event_kind {
	MEDHA_EVENT_TOKENS = 0, /* new output tokens of a request */
	MEDHA_EVENT_RECORD = 1, /* its final record (the last event) */
};

/* One event of an EVENTS reply. */
struct medha_msg_event {
	int kind;        /* MEDHA_EVENT_* */
	uint64_t handle; /* the request's handle */
	/* MEDHA_EVENT_TOKENS: */
	int32_t *ids; /* owned (n_ids) ids >= 0; NULL if n_ids is 0 */
	int64_t n_ids;
	char *text; /* owned bytes the ids decode to, any bytes (NUL
	               too), NUL-terminated beyond text_len; or NULL */
	size_t text_len;
	struct medha_token_lp *lps; /* owned (n_ids), where asked, or NULL */
	/* MEDHA_EVENT_RECORD: */
	struct medha_record *record; /* owned record */
};

/* EVENTS: what happened since the last POLL; empty is a keep-alive. */
struct medha_msg_events {
	struct medha_msg_event *ev; /* owned (n) events */
	int64_t n;                  /* <= MEDHA_PROTO_MAX_EVENTS */
};

/* STATUS_REPLY: the scheduler's state; every count >= 0. */
struct medha_msg_status {
	int64_t workers;        /* connected */
	int64_t workers_wanted; /* the replica's tp * spp * kvp */
	int ready;              /* all workers there: requests are served */
	int64_t pending;        /* requests in flight */
	int64_t queue;          /* of those, waiting for their first batch */
	int64_t kv_blocks;      /* KV blocks in all */
	int64_t kv_used;        /* of those, held */
	int64_t block_size;     /* tokens per KV block */
	int64_t prefill;        /* prompt tokens not yet prefilled */
	double work;            /* predicted seconds of those prefills, >= 0 */
	int64_t evicted;        /* KV blocks its prefix cache evicted since
	                           the scheduler started (optional on the
	                           wire: 0 if absent) */
	int64_t progress;       /* batches the progress guarantee ran over
	                           their target, since it started (optional
	                           likewise) */
	int n_experts;          /* a mixture of experts: the experts counted
	                           (key "experts", sent where not 0) */
	int64_t experts[MEDHA_PROTO_MAX_EXPERTS]; /* tokens routed to each
	                           since the scheduler started, summed over
	                           the routed layers */
	char model[MEDHA_PROTO_NAME_MAX];
	char backend[MEDHA_PROTO_BACKEND_MAX];
};

/* ERROR: why a message was refused. */
struct medha_msg_error {
	int code;                            /* MEDHA_E*, < 0 */
	char reason[MEDHA_PROTO_REASON_MAX]; /* no NUL inside */
};

/* HELLO: a worker introduces itself. */
struct medha_msg_hello {
	char backend[MEDHA_PROTO_BACKEND_MAX]; /* "cpu", "sim" or "cuda" */
	char model[MEDHA_PROTO_NAME_MAX];      /* GGUF path or built-in name */
	char gpu[MEDHA_PROTO_GPU_MAX];         /* "cpu", or "a100", ... */
	int tp, spp, kvp;                /* the replica's layout, each >= 1 */
	int rank_tp, rank_spp, rank_kvp; /* this worker's place, < degree */
	int layer_lo, layer_hi;          /* its layers [lo, hi), lo < hi */
	int block_size;                  /* tokens per KV block, >= 1 */
	int n_blocks;                    /* its KV blocks, >= 1 */
	int max_seqs;                    /* sequences at once, >= 1 */
	int vocab;                       /* vocabulary size, >= 1 */
	int dim;                         /* model width, >= 1 */
	int pid;                         /* its process id, >= 0 */
	char peer[MEDHA_PROTO_URL_MAX];  /* where the replica's other workers
	                                    reach it ("" for none: a replica
	                                    of one worker) */
	char fingerprint[MEDHA_PROTO_FP_LEN + 1]; /* its model's: 64 hex
	                                             digits, "" for none */
	unsigned caps; /* MEDHA_HELLO_* it offers (0: none; key "caps",
	                  sent where not 0) */
};

/* medha_msg_hello.caps */
enum medha_hello_cap {
	/* its window layers give back the KV blocks their sliding window
	   no longer sees: the scheduler may account a request's KV per
	   layer type (sched.h window_kv) and must not fork from positions
	   a window left (it runs without prefix caching) */
	MEDHA_HELLO_WINDOW_KV = 1u << 0,
	/* its TP group splits the experts whole (medha-worker --ep): the
	   scheduler's predictor counts expert parallelism's costs
	   (medha_pred_set_ep); every worker of a replica has it or none */
	MEDHA_HELLO_EP = 1u << 1,
	MEDHA_HELLO_CAPS = MEDHA_HELLO_WINDOW_KV | MEDHA_HELLO_EP /* every
	                                                         one known */
};

/* One sampled token of a RESULT. */
struct medha_msg_token {
	uint64_t handle;
	int32_t token;             /* >= 0 */
	struct medha_token_lp *lp; /* owned, where the request asked */
};

/* RESULT: a batch's sampled tokens, or why it failed. */
struct medha_msg_result {
	int worker_id;                      /* >= 0 */
	uint64_t seq;                       /* the BATCH's batch_seq */
	struct medha_msg_token *tokens;     /* owned (n_tokens), or NULL */
	int64_t n_tokens;                   /* <= MEDHA_PROTO_MAX_ITEMS */
	char error[MEDHA_PROTO_REASON_MAX]; /* "" if the batch ran */
	int n_experts; /* a mixture of experts: experts counted (0: none;
	                  the optional last element, sent where not 0) */
	int64_t experts[MEDHA_PROTO_MAX_EXPERTS]; /* tokens this batch
	                  routed to each, summed over the worker's routed
	                  layers */
};

/* Prefix caching: a run of an item's fork, src's positions [from, to). */
struct medha_msg_fork {
	uint64_t src; /* the handle of the sequence holding them */
	int64_t from, to;
};

/* One sequence's share of a BATCH. */
struct medha_msg_item {
	uint64_t handle;
	int64_t pos;  /* position of ids[0] in the sequence, >= 0 */
	int32_t *ids; /* owned (n_ids >= 1) ids >= 0: a prompt chunk or
	                 the one decode token */
	int64_t n_ids;
	int sample;     /* sample a token after the last id */
	int has_params; /* params given (a request's first item) */
	struct medha_sampler_params params;
	int n_groups; /* KVP groups holding the sequence's pieces of KV
	                 (0: one group, kvp 1) */
	uint8_t groups[MEDHA_PROTO_MAX_GROUPS]; /* piece i's group; piece i
	                 holds positions [i * kvp_tokens, (i + 1) *
	                 kvp_tokens), the last piece the rest */
	struct medha_msg_fork *forks; /* owned (n_forks) or NULL: a new
	                 sequence made of these runs, in order, from 0 to
	                 pos (prefix caching) */
	int64_t n_forks; /* <= MEDHA_PROTO_MAX_ITEMS */
};

/* The replica's workers, sent with a worker's first batch after any
 * worker (re)joined: rank i listens at urls[i]. */
struct medha_msg_peers {
	uint64_t gen;       /* generation, >= 1: grows at each change */
	int n;              /* workers, 1 .. MEDHA_PROTO_MAX_PEERS */
	char (*urls)[MEDHA_PROTO_URL_MAX]; /* (n) addresses */
	int64_t kvp_tokens; /* KV positions per piece, >= 1 (kvp 1: any) */
};

/* BATCH (and IDLE: frees only, seq 0 and no items). */
struct medha_msg_batch {
	uint64_t seq;                 /* batch_seq, echoed in RESULT */
	uint64_t *frees;              /* owned (n_frees) handles to free */
	int64_t n_frees;              /* <= MEDHA_PROTO_MAX_ITEMS */
	int64_t *keeps; /* owned (n_frees) or NULL (all 0): frees[i]'s
	                   sequence keeps positions [0, keeps[i]) (prefix
	                   caching), 0: freed */
	struct medha_msg_item *items; /* owned (n_items) items */
	int64_t n_items;              /* <= MEDHA_PROTO_MAX_ITEMS, with at most
	                                 MEDHA_PROTO_MAX_IDS ids in all */
	struct medha_msg_peers *peers; /* owned, or NULL (BATCH only) */
};

/*
 * One message. type picks the member of the union that is valid;
 * POLL, OK and STATUS have no body.
 */
struct medha_msg {
	int type; /* enum medha_msg_type */
	union {
		struct medha_reqspec submit;        /* SUBMIT */
		struct medha_msg_accepted accepted; /* ACCEPTED */
		struct medha_msg_events events;     /* EVENTS */
		uint64_t cancel;                    /* CANCEL: the handle */
		struct medha_msg_status status;     /* STATUS_REPLY */
		struct medha_msg_error error;       /* ERROR */
		struct medha_msg_hello hello;       /* HELLO */
		int worker_id; /* WELCOME, READY, HEARTBEAT: >= 0 */
		struct medha_msg_result result; /* RESULT */
		struct medha_msg_batch batch;   /* BATCH, IDLE */
	};
};

/*
 * Decode one frame of len bytes into *m (whose old contents are
 * overwritten, not freed). Returns 0, and then *m owns all its memory
 * (medha_msg_clear); or MEDHA_EFORMAT with a reason in why, or
 * MEDHA_ENOMEM, and then *m owns nothing and is zeroed. buf is only
 * read, and not referenced after the call.
 */
int medha_msg_decode(struct medha_msg *m, const void *buf, size_t len,
    char *why, size_t whylen);

/*
 * Encode *m (which is only read: its pointers may be borrowed) into a
 * new buffer *buf of *len bytes, which the caller frees with free().
 * Returns 0, or MEDHA_EINVAL with a reason in why when the decoder would
 * refuse the message (a field out of range, a frame over
 * MEDHA_PROTO_MAX_FRAME), or MEDHA_ENOMEM; on failure *buf is NULL.
 */
int medha_msg_encode(const struct medha_msg *m, void **buf, size_t *len,
    char *why, size_t whylen);

/* Free what *m owns (as decoded) and zero it; type becomes 0. */
void medha_msg_clear(struct medha_msg *m);

/*
 * 1 if a and b are the same message: the same type and fields (doubles
 * compared with ==, arrays by their elements; an empty token-event text
 * or id array is the same whether its pointer is NULL or not). Tests and
 * the fuzzer check round trips with it.
 */
int medha_msg_equal(const struct medha_msg *a, const struct medha_msg *b);

/* "submit", "accepted", ...; "unknown" for any other type. */
const char *medha_msg_type_name(int type);

/* Free what an event owns and zero it. */
void medha_msg_event_clear(struct medha_msg_event *ev);

#endif
