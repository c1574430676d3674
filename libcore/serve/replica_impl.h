/*
 * replica_impl.h: what the live replica's files share (replica.c: its
 * requests, clients and life cycle; replica_core.c: the scheduler core and
 * its predictor, made from the first worker's HELLO; replica_work.c: the
 * workers, the batches in flight and their results). Not for use outside
 * serve/replica*.c.
 */
#ifndef MEDHA_REPLICA_IMPL_H
#define MEDHA_REPLICA_IMPL_H

#include "serve/replica.h"

#include "serve/front.h"
#include "map.h"
#include "net/greet.h"
#include "net/link.h"
#include "net/proto.h"
#include "sched/pred.h"
#include "tok/tokenizer.h"
#include "tok/tokq.h"

#include <pthread.h>

#define HB (MEDHA_PROTO_HEARTBEAT_MS / 1e3)
#define DEAD (MEDHA_PROTO_DEAD_MS / 1e3)
#define TAKE_AT_ONCE 256 /* messages taken before a decision, at most */

/* ---- state ---- */

struct lreq {
	uint64_t handle; /* the core's; 0 while its text is tokenized */
	uint64_t ch;     /* the client's: the core's, or one given when its
	                    SUBMIT was acknowledged before its text was
	                    tokenized (rep_lreq_get finds it by either) */
	int cancelled;   /* cancelled while its text was tokenized */
	double t_sub;    /* when its SUBMIT came (now_s) */
	uint32_t peer; /* the client's connection */
	char id[MEDHA_ID_MAX];
	int32_t *ids; /* (n_prompt) the prompt; NULL: made up (rep_made_up) */
	uint64_t made_up; /* the made-up prompt's seed */
	int64_t n_prompt;
	int64_t held; /* bytes of ids counted in r->held */
	struct medha_sampler_params sp;
	int ignore_eos;
	int no_stream; /* no token events: the record carries the output */
	int n_stop;
	char *stop[MEDHA_STOP_MAX];
	size_t stop_max; /* longest stop string */
	int n_stop_ids;
	int32_t stop_ids[MEDHA_STOP_IDS_MAX]; /* end it as the end of
	                                         generation does */
	int started;     /* a worker holds its sequence */
	double first_batch; /* when it was first in a batch (now_s) */
	int32_t last;    /* the last sampled token: the next decode's input */
	int32_t *out;    /* (n_out) generated ids */
	struct medha_token_lp *lps; /* (n_out) their logprobs, or NULL */
	int64_t n_out, out_cap;
	char *text; /* (text_len) generated text, NUL-terminated */
	size_t text_len, text_cap, text_sent;
	int64_t ids_sent; /* ids already sent in token events */
	int stop_hit;     /* its last token completed a stop string: one
	                     more output token than the core counted */
	/* prefix caching: the runs its sequence is forked from (the core's
	   FORK ops), sent with its first item */
	struct medha_msg_fork *forks;
	int64_t n_forks, forks_cap;
};

/*
 * A long text prompt on its way through the tokenizer's thread
 * (replica.c): its SUBMIT was acknowledged already, and the main
 * thread, which forms batches and answers heartbeats, never tokenizes
 * one.
 */
struct tok_job {
	struct medha_tokq_job tj; /* first: its text rs.prompt; its ids
	                             become q's */
	struct lreq *q; /* made at SUBMIT */
	uint32_t peer;
	struct medha_reqspec rs; /* taken over from the SUBMIT */
};

/*
 * A batch on its way through the workers: every worker gets it and
 * answers it; it is done when all have, and stage 0 is free for the
 * next one when the first stage's workers have.
 */
struct flight {
	uint64_t seq;               /* its batch_seq */
	struct medha_sched_batch b; /* as the core formed it (items copied) */
	struct medha_msg_item *mi;  /* (b.n_items) as sent */
	int32_t *ids;               /* the items' ids, copied */
	struct medha_msg_fork *fk;  /* the items' forks, copied */
	int32_t *tok;               /* (b.n_items) sampled, -1 none yet */
	struct medha_token_lp **lp; /* (b.n_items) their logprobs, or NULL */
	int left;                   /* workers yet to answer */
	int left0;                  /* of them, stage 0's */
};

/* A worker's place: slot i holds rank i (net/coll.h's rank). */
struct wslot {
	int present;
	uint32_t peer;
	struct medha_msg_hello hello;
	struct medha_srv_call *call; /* its held READY / RESULT */
	double call_since;
	double last_seen;
	uint64_t sent;     /* the last batch_seq sent to it */
	uint64_t done;     /* the last batch_seq it answered */
	uint64_t gen_sent; /* the peer table generation it has */
	/* handles to free, in the order they ended: each with the last
	   batch formed then, which may still hold its items, so that it
	   goes out only once the worker has been sent that batch */
	uint64_t *frees, *frees_after;
	int64_t *keeps; /* prefix caching: positions each keeps, 0: freed */
	int64_t nfrees, frees_cap;
};

struct medha_replica {
	struct medha_replica_config cfg;
	struct medha_front f; /* socket, clients, drain, live requests */
	double t0;
	/* made at the first worker's HELLO */
	struct medha_pred pred;
	int have_pred;
	struct medha_sched *core;
	struct medha_tok *tok; /* NULL: token ids only */
	int sim;               /* the workers are sim: no EOG check */
	int prefix;            /* the core caches prefixes (workers fork) */
	unsigned caps;         /* the workers' MEDHA_HELLO_* (all alike) */
	struct medha_backoff refused; /* HELLOs refused: said rate-limited */
	int vocab;
	int64_t ctx_len; /* 0: no limit */
	int n_experts;   /* a mixture of experts: tokens its workers routed
	                    to each expert (their RESULTs), for STATUS */
	int64_t experts[MEDHA_PROTO_MAX_EXPERTS];
	char model[MEDHA_PROTO_NAME_MAX];
	char backend[MEDHA_PROTO_BACKEND_MAX];
	char fp[MEDHA_PROTO_FP_LEN + 1]; /* the model's fingerprint: -m's
	                                    (fp_fixed), else the workers' */
	int fp_fixed;
	/* requests by the core's slot (handle & 0xffffffff) */
	struct lreq **by_slot;
	size_t slots;
	struct wslot *w; /* (cfg.workers) */
	int nworkers;    /* present */
	int tp, spp, kvp; /* the layout, from the first HELLO */
	int n_layers;
	struct flight *fl; /* (spp) ring of batches in flight */
	int fl_head, nfl;
	struct medha_msg_peers peers; /* urls: (cfg.workers) */
	int ready;
	int64_t held; /* bytes of prompt ids held by live requests */
	/* the tokenizer's thread (tok/tokq.h; made at the first long text
	   prompt): tok_pending jobs not yet collected */
	size_t max_piece; /* bytes of the longest token */
	struct medha_tokq *tokq;
	int64_t tok_pending;
	struct medha_map by_ch; /* a client's handle given before its text
	                           was tokenized -> its lreq */
	uint32_t tok_seq;       /* the last such handle's */
	uint64_t bseq;
	uint64_t bseq_void; /* a batch up to it not sent to a worker yet
	                       was made void: it never will be */
	int64_t served, batches;
	/* preemption (sched.h, MEDHA_KVOP_MOVE): the workers' name of the
	   sequence the core calls by a key, where it is not the key itself
	   (a preempted request's new sequence; the old one, kept for the
	   cache under the core's new name): values are uintptr_t */
	struct medha_map wname;
	uint64_t wname_next; /* the last name made (generation 0) */
};

/* Seconds on the replica's clock (the core's time). */
static inline double
now_s(const struct medha_replica *r)
{
	return medha_now() - r->t0;
}

/* Answer call with a message of type alone (OK, IDLE). */
static inline void
answer_type(struct medha_replica *r, struct medha_srv_call *call, int type)
{
	struct medha_msg m = {.type = type};

	medha_srv_msg(r->f.srv, call, &m);
}

/* The slot of the handles given to clients before the core had their
 * requests (their text was being tokenized): no core slot is ever it. */
#define PRE_SLOT 0xffffffffu

/* replica.c: requests */
/* The request of handle h, or NULL. */
struct lreq *rep_lreq_get(const struct medha_replica *r, uint64_t h);
void rep_lreq_free(struct lreq *q);
/* Free (keep 0) or trim sequence h on every worker, once each has been
 * sent the last batch formed. */
void rep_free_later(struct medha_replica *r, uint64_t h, int64_t keep);
/* replica_submit.c: a SUBMIT (front op) */
void rep_on_submit(void *arg, struct medha_srv_ev *ev,
    struct medha_reqspec *rs);
/* Text prompts tokenized since the last pass, on to the core. */
void rep_tok_collect(struct medha_replica *r);
/* Stop the tokenizer's thread; its jobs are dropped. */
void rep_tok_stop(struct medha_replica *r);
/* The requests of peer (all: of every peer) whose text is being
 * tokenized: cancelled as that ends; how many. */
int rep_pre_cancel(struct medha_replica *r, uint32_t peer, int all);
/* The workers' name of the core's sequence h (rep_wname). */
uint64_t rep_wname(const struct medha_replica *r, uint64_t h);
/* n ids of q's prompt from position at into out, made up or given; past
 * its prompt, its output (a preempted request's prefill). */
void rep_prompt_ids(const struct medha_replica *r, const struct lreq *q,
    int64_t at, int64_t n, int32_t *out);
/* Its new tokens (and, final, what is held back) to its client. */
void rep_send_tokens(struct medha_replica *r, struct lreq *q, int final);
/* The records the core has ready, sent to their clients. */
void rep_drain_records(struct medha_replica *r);
/* A token sampled for q: its text, stop strings, the end of output. */
int rep_on_token(struct medha_replica *r, struct lreq *q, int32_t tok,
    const struct medha_token_lp *lp);

/* replica_core.c: nothing is made from a HELLO, nor dropped for it,
 * before all of it is checked (rep_model_check, rep_layout_check,
 * rep_core_model, the layers): a refused HELLO leaves the replica as it
 * was */
/*
 * Whether h's model (its fingerprint) may join: with -m only that
 * model's; without, the first worker's, and another only while no
 * worker is connected and nothing is in flight. 0 (the replica's model,
 * or none made yet), 1 (another: once h is found good, the caller drops
 * the core, predictor and tokenizer with rep_drop_core and makes them
 * from h), or an error with why. Changes nothing.
 */
int rep_model_check(struct medha_replica *r, const struct medha_msg_hello *h,
    char *why, size_t whylen);
/*
 * Whether h's layout (tp x spp x kvp) may join: the core's, or any
 * before a core is made; another only while no worker is connected and
 * nothing is in flight (the core, its predictor, KVP groups and ring of
 * batches in flight are the layout's). 0 (the core's layout, or no
 * core), 1 (another: once h is found good, the caller drops the core
 * with rep_drop_core and makes one from h), or an error with why naming
 * both layouts. Changes nothing.
 */
int rep_layout_check(struct medha_replica *r, const struct medha_msg_hello *h,
    char *why, size_t whylen);
/* The core, predictor, tokenizer, ring of batches in flight and the
 * workers' names of its sequences dropped, for h's model or layout
 * (logged); -m's fingerprint stays. */
void rep_drop_core(struct medha_replica *r, const struct medha_msg_hello *h);
/* The model a core made from h serves, resolved and checked against h
 * (vocab, width, device): 0, or an error with why. Makes nothing. */
int rep_core_model(struct medha_replica *r, const struct medha_msg_hello *h,
    struct medha_pred_model *m, char *why, size_t whylen);
/* The core, its predictor and the tokenizer from h and m. */
int rep_make_core(struct medha_replica *r, const struct medha_msg_hello *h,
    struct medha_pred_model *m, char *why, size_t whylen);

/* replica_work.c: the workers (front ops and the life cycle's) */
void rep_worker_lost(struct medha_replica *r, struct wslot *w,
    const char *why);
int rep_on_peer_gone(void *arg, uint32_t peer);
int rep_on_other(void *arg, struct medha_srv_ev *ev, struct medha_msg *m);
void rep_housekeeping(void *arg);
void rep_flights_void(struct medha_replica *r);

#endif
