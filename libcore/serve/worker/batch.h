/*
 * batch.h: one BATCH run on one live worker (batch.c): the items whose
 * KV its KVP group holds a piece of, through its SPP stage's layers, as
 * one forward call of its backend, into the RESULT it answers with.
 * Calls the sequences (seqs.h) and the peers' collectives (peers.h),
 * nothing above. Not for use outside serve/worker/.
 *
 *	struct wk_batch r;
 *	wk_batch_init(&r, be, &seqs, &peers);
 *	wk_batch_run(&r, &msg.batch, &res);	(res.error: a failure)
 *	(r.n sequences just run: r.bs, r.smp, r.out, r.idx)
 *	wk_batch_free(&r);
 */
#ifndef MEDHA_WK_BATCH_H
#define MEDHA_WK_BATCH_H

#include "serve/worker/peers.h"
#include "serve/worker/seqs.h"

#include <stddef.h>
#include <stdint.h>

struct wk_batch {
	struct medha_backend *be;
	struct wk_seqs *seqs;    /* the caller's */
	struct wk_peers *peers;  /* the caller's */
	int computes;            /* the backend computes (not sim) */
	float *h;                /* (h_cap) hidden states between stages */
	float tok0[1];           /* what a sim stage "hands on" */
	size_t h_cap;
	/* scratch, grown to the largest batch seen */
	int32_t *tok;                /* (tok_cap) the tokens fed */
	struct medha_batch_kv *kvx;  /* (seq_cap) KVP: each one's piece */
	size_t tok_cap, seq_cap;
	/* the sequences of the batch just run here (for the lookahead) */
	int n;
	struct medha_batch_seq *bs;  /* (seq_cap) */
	struct medha_sampler **smp;  /* (seq_cap) NULL: not sampled here */
	int32_t *out;                /* (seq_cap) the token drawn, or -1 */
	int32_t *idx;                /* (seq_cap) each one's item */
};

/* r, empty, running batches on be over seqs and peers (the caller's,
 * outliving r). */
void wk_batch_init(struct wk_batch *r, struct medha_backend *be,
    struct wk_seqs *seqs, struct wk_peers *peers);
void wk_batch_free(struct wk_batch *r);
/* Room for a batch of ntok tokens and nseq sequences: 0 or MEDHA_ENOMEM. */
int wk_batch_grow(struct wk_batch *r, size_t ntok, size_t nseq);
/*
 * Run this worker's part of BATCH b into *res (a RESULT: its seq, its
 * tokens malloc'd, the caller's to free). A request's first item
 * (position 0) opens its sequence and sampler. On failure res->error
 * says why. r->bs, r->smp, r->out and r->idx then hold the r->n
 * sequences run here (idx: each one's item of b).
 */
void wk_batch_run(struct wk_batch *r, const struct medha_msg_batch *b,
    struct medha_msg_result *res);

#endif
