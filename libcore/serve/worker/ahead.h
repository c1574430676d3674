/*
 * ahead.h: a live worker's lookahead (ahead.c, whose top says what it
 * is for): the step after the batch just run, run while the RESULT
 * makes its round trip, and the BATCH that comes back answered from it
 * where it can be. An object of its own: the step's sequences, tokens
 * and logits, and its state (below), changed in one function. Calls the
 * batch runner (batch.h) and the sequences (seqs.h). Not for use
 * outside serve/worker/.
 *
 *	wk_ahead_init(&a, &runner, may);
 *	(a batch b run whole into res) wk_ahead_plan(&a, &b);
 *	if (wk_ahead_planned(&a)) {
 *		(send the RESULT) wk_ahead_run(&a); (wait for the reply)
 *	}
 *	nm = wk_ahead_match(&a, reply is a BATCH ? &batch : NULL);
 *	if (nm > 0) wk_ahead_use(&a, &batch, nm, &res); else (run it whole)
 *	wk_ahead_free(&a);
 */
#ifndef MEDHA_WK_AHEAD_H
#define MEDHA_WK_AHEAD_H

#include "serve/worker/batch.h"

#include <stddef.h>
#include <stdint.h>

/*
 * The step's life (ahead.c ahead_move makes every change):
 *
 *	NONE --plan--> PLANNED --run--> RAN --match--> MATCHED --used--> NONE
 *
 * and from RAN or MATCHED, a failed forward, a reply that holds no step
 * of it or a failed batch drop it: back to NONE, its sequences cut back
 * to the lengths they had.
 */
enum wk_ahead_state {
	WK_AHEAD_NONE,    /* no step kept */
	WK_AHEAD_PLANNED, /* a step kept (sequences, positions, tokens) */
	WK_AHEAD_RAN,     /* run: its logits kept, its sequences one on */
	WK_AHEAD_MATCHED, /* the BATCH back holds steps of it (item) */
};

struct wk_ahead {
	enum wk_ahead_state state;
	int may;               /* this worker may look ahead */
	struct wk_batch *run;  /* the caller's: its backend and sequences */
	int n;                 /* the step's sequences (0 in NONE) */
	uint64_t *handle;      /* (n) */
	int64_t *len;          /* (n) each one's length before the step */
	int32_t *tok;          /* (n) the token fed: the one just sampled */
	struct medha_batch_seq *bs; /* (n) */
	float *lg;             /* (n, vocab) the step's logits */
	int32_t *item;         /* (n) the item it answers, or -1 (MATCHED) */
	size_t cap;            /* sequences room */
	struct medha_msg_item *r_items; /* (r_cap) the items not run ahead */
	int32_t *r_map;                 /* (r_cap) each one's item */
	size_t r_cap;
	long long looked, hits; /* steps run ahead; of them used */
};

/* a, NONE, beside the batch runner run (the caller's, outliving a); may:
 * whether this worker looks ahead at all. */
void wk_ahead_init(struct wk_ahead *a, struct wk_batch *run, int may);
void wk_ahead_free(struct wk_ahead *a);
/* After BATCH b ran whole here without error (a->run holds its
 * sequences): keep the step after it where every item sampled here. */
void wk_ahead_plan(struct wk_ahead *a, const struct medha_msg_batch *b);
/* Whether a step is kept, to run while the RESULT travels. */
int wk_ahead_planned(const struct wk_ahead *a);
/* Run the kept step, logits kept (nothing sampled yet); a failure drops
 * it. */
void wk_ahead_run(struct wk_ahead *a);
/*
 * The reply to the RESULT came: b, a BATCH, or NULL for anything else.
 * Returns how many of b's items the step run answers (the same handle,
 * position and token, one id, sampled with the parameters it had); 0
 * drops the step, its sequences cut back.
 */
int64_t wk_ahead_match(struct wk_ahead *a, const struct medha_msg_batch *b);
/*
 * Answer b, nm of whose items the step answers (wk_ahead_match), into
 * *res (its tokens malloc'd, the caller's): the sequences of the step
 * that b leaves out cut back, the items it did not run run as a batch
 * of their own, the others sampled from the kept logits; then the next
 * step planned from all of them. On failure res->error says why and the
 * step is dropped.
 */
void wk_ahead_use(struct wk_ahead *a, const struct medha_msg_batch *b,
    int64_t nm, struct medha_msg_result *res);
/* Forget the step (a new session), its sequences cut back if it ran. */
void wk_ahead_drop(struct wk_ahead *a);

#endif
