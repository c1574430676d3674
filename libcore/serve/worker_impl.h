/*
 * worker_impl.h: what the live worker's files share (worker.c: the
 * daemon's loop, its sequences and heartbeats; worker_batch.c: one
 * BATCH run on this worker's part of the replica, the KVP arithmetic and
 * the collectives; worker_ahead.c: lookahead). Not for use outside
 * serve/worker*.c.
 */
#ifndef MEDHA_WORKER_IMPL_H
#define MEDHA_WORKER_IMPL_H

#include "serve/worker.h"
#include "model/sample.h"
#include "net/coll.h"
#include "net/link.h"
#include "net/proto.h"
#include "layout.h"

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* One sequence the backend holds for a request handle. */
struct wseq {
	uint64_t handle; /* 0: free entry */
	int seq;         /* backend sequence */
	int64_t base;    /* KVP: the first position of its piece here */
	struct medha_sampler *smp;
};

struct worker {
	struct medha_backend *be;
	char fp[65]; /* the model's fingerprint, said in HELLO */
	struct medha_cli *cli;
	volatile sig_atomic_t *stop; /* the caller's: set to stop */
	int computes; /* the backend computes (MEDHA_BACKEND_COMPUTES) */
	int id;
	/* the replica's layout and this worker's place in it */
	struct medha_layout lay;
	struct medha_coll *coll; /* NULL in a replica of one worker */
	int64_t kvp_tokens;      /* KV positions per piece (peer table) */
	float *h;                /* hidden states between stages */
	float tok0[1];           /* what a sim stage "hands on" */
	size_t h_cap;            /* floats */
	struct wseq *seqs; /* (max_seqs) entries */
	int max_seqs;
	int *spare; /* (max_seqs) stack of free entries */
	int nspare;
	int *index;    /* (index_cap) entry of a handle, -1 empty: an
	                  open-addressing table, so a batch of thousands
	                  of items finds its sequences at once */
	int index_cap; /* a power of two, at least 2 * max_seqs */
	/* a batch's scratch, grown to the largest seen */
	int32_t *tok;
	struct medha_batch_seq *bs;
	struct medha_sampler **smp;
	int32_t *out;
	int32_t *idx; /* (seq_cap) the batch item of each sequence run */
	struct medha_batch_kv *kvx; /* (seq_cap) KVP: each one's piece */
	int ncur;     /* the sequences of the batch just run here */
	size_t tok_cap, seq_cap;
	/* lookahead (worker_ahead.c): the step after the batch just run */
	int ahead_ok;       /* this worker may look ahead */
	int na;             /* its sequences (0: none to run) */
	int ran;            /* the step was run (its logits kept) */
	uint64_t *a_handle; /* (na) */
	int64_t *a_len;     /* (na) each one's length before the step */
	int32_t *a_tok;     /* (na) the token fed: the one just sampled */
	struct medha_batch_seq *a_bs; /* (na) */
	float *a_lg;                  /* (na, vocab) the step's logits */
	int32_t *a_item;              /* (na) the item it answers, or -1 */
	size_t a_cap;                 /* sequences room */
	struct medha_msg_item *r_items; /* (r_cap) the items not run ahead */
	int32_t *r_map;                 /* (r_cap) each one's item */
	size_t r_cap;
	long long looked, hits;       /* steps run ahead; of them used */
	double busy;                  /* s spent running batches */
	/* heartbeats */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int running, quit;
};

/* worker.c: the sequences held, by request handle */
struct wseq *wk_find_seq(struct worker *w, uint64_t h);
/* The log-probabilities of h's last draw, malloc'd, where its request
 * asked for them; else NULL. */
struct medha_token_lp *wk_token_lp(struct worker *w, uint64_t h);
/* A free entry under handle h (not held yet), or NULL if all are held. */
struct wseq *wk_new_seq(struct worker *w, uint64_t h);
/* Free q's backend sequence and sampler, and the entry. */
void wk_free_seq(struct worker *w, struct wseq *q);

/* worker_batch.c */
/* One batch's collectives (backend.h struct medha_comm), between this
 * worker and its peers over net/coll.h: the batch's sequence number
 * makes the tags. */
struct call {
	struct worker *w;
	uint64_t bseq;
};
/* *cm: the collectives of batch bseq, over c (both the caller's). */
void wk_comm(struct worker *w, struct call *c, uint64_t bseq,
    struct medha_comm *cm);
/* Room for a batch of ntok tokens and nseq sequences: 0 or MEDHA_ENOMEM. */
int wk_grow_scratch(struct worker *w, size_t ntok, size_t nseq);
/*
 * Run this worker's part of one BATCH into *res (a RESULT). A request's
 * first item (position 0) opens its sequence and sampler. On failure
 * res->error says why. w->bs, w->smp, w->out and w->idx then hold the
 * w->ncur sequences run here (idx: each one's item of b).
 */
void wk_run_batch(struct worker *w, const struct medha_msg_batch *b,
    struct medha_msg_result *res);

/* worker_ahead.c (lookahead; the comment at its top) */
void wk_ahead_plan(struct worker *w, const struct medha_msg_batch *b);
void wk_ahead_drop(struct worker *w);
void wk_ahead_run(struct worker *w);
int64_t wk_ahead_match(struct worker *w, const struct medha_msg_batch *b);
void wk_ahead_use(struct worker *w, const struct medha_msg_batch *b,
    int64_t nm, struct medha_msg_result *res);

#endif
