/*
 * seqs.h: the sequences a live worker holds in its backend, by the
 * scheduler's request handle (seqs.c). The lowest file of the worker's
 * room: it calls only the backend and the sampler. Not for use outside
 * serve/worker/.
 *
 *	struct wk_seqs s;
 *	wk_seqs_init(&s, be, why, sizeof(why));
 *	q = wk_seqs_new(&s, handle);	(then medha_backend_seq_alloc)
 *	q = wk_seqs_find(&s, handle);
 *	wk_seqs_apply_frees(&s, batch);	(what a BATCH or IDLE lets go)
 *	wk_seqs_free(&s);
 */
#ifndef MEDHA_WK_SEQS_H
#define MEDHA_WK_SEQS_H

#include "engine/backend.h"
#include "model/sample.h"
#include "net/proto.h"

#include <stddef.h>
#include <stdint.h>

/* One sequence the backend holds for a request handle. */
struct wseq {
	uint64_t handle; /* 0: free entry */
	int seq;         /* backend sequence */
	int64_t base;    /* KVP: the first position of its piece here */
	struct medha_sampler *smp;
};

struct wk_seqs {
	struct medha_backend *be;
	struct wseq *seqs; /* (max) entries */
	int max;
	int *spare; /* (max) stack of free entries */
	int nspare;
	int *index;    /* (index_cap) entry of a handle, -1 empty: an
	                  open-addressing table, so a batch of thousands
	                  of items finds its sequences at once */
	int index_cap; /* a power of two, at least 2 * max */
};

/* s, empty, with room for the sequences be holds (and, where it forks,
 * those prefix caching keeps): 0 or MEDHA_ENOMEM with why. */
int wk_seqs_init(struct wk_seqs *s, struct medha_backend *be, char *why,
    size_t whylen);
/* What s holds (its sequences must be freed first: wk_seqs_clear). */
void wk_seqs_free(struct wk_seqs *s);
/* The entry of handle h, or NULL. */
struct wseq *wk_seqs_find(struct wk_seqs *s, uint64_t h);
/* A free entry under handle h (no backend sequence yet: seq -1), or
 * NULL if all are held. */
struct wseq *wk_seqs_new(struct wk_seqs *s, uint64_t h);
/* Free q's backend sequence and sampler, and the entry. */
void wk_seqs_drop(struct wk_seqs *s, struct wseq *q);
/* Free every sequence held. */
void wk_seqs_clear(struct wk_seqs *s);
/* The frees of BATCH or IDLE b; an entry with positions to keep
 * (prefix caching) trims the sequence instead. */
void wk_seqs_apply_frees(struct wk_seqs *s, const struct medha_msg_batch *b);
/* The log-probabilities of h's last draw, malloc'd (the caller frees),
 * where its request asked for them; else NULL. */
struct medha_token_lp *wk_seqs_token_lp(struct wk_seqs *s, uint64_t h);

#endif
