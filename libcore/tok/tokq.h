/*
 * tokq.h: a tokenizer's thread, for a server whose loop must not wait
 * for a long text to be tokenized (about 9 MB/s: a 16 MB prompt takes
 * two seconds). The loop tokenizes a short text itself (tens of
 * microseconds) and pushes a long one here; the thread tokenizes the
 * texts in the order pushed, calls wake (from the thread) after each,
 * and the loop takes the finished jobs back. A job is the caller's
 * struct, with a struct medha_tokq_job inside it; the queue only links
 * it. The replica (serve/replica/intake.c) and the router (serve/
 * router.c) tokenize their clients' long texts so.
 *
 *	struct job { struct medha_tokq_job tj; uint64_t handle; };
 *	medha_tokq_open(&q, wake, srv);
 *	medha_tokq_push(q, &j->tj, tok, text, len, MEDHA_TOK_DEFAULT);
 *		(tok and text kept until j is taken back)
 *	...	(woken)
 *	while ((tj = medha_tokq_take(q)) != NULL) {
 *		struct job *j = (struct job *)tj;	(tj first in it)
 *		... tj->rc, tj->ids (the caller's now), tj->n ...
 *	}
 *	medha_tokq_close(q, drop, arg);
 */
#ifndef MEDHA_TOKQ_H
#define MEDHA_TOKQ_H

#include "tok/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Bytes of text a server tokenizes on its own thread (tens of
 * microseconds); a longer text goes to a tokq, so that a short prompt
 * never waits behind a long one's tokenizing.
 */
#define MEDHA_TOKQ_INLINE 4096

struct medha_tokq_job {
	/* as pushed */
	const struct medha_tok *tok;
	const char *text; /* len bytes */
	size_t len;
	int flags; /* medha_tok_encode's */
	/* set by the thread: as medha_tok_encode sets them (ids the
	   caller's once taken) */
	int32_t *ids;
	size_t n;
	int rc;
	struct medha_tokq_job *next; /* the queue's */
};

struct medha_tokq;

/*
 * A queue, its thread started at the first push; wake(arg) is called
 * from the thread after each job (may be NULL), holding no lock of the
 * queue's, so that it may take one of the caller's that the caller
 * holds while it calls the queue. Returns 0 or
 * MEDHA_ENOMEM.
 */
int medha_tokq_open(struct medha_tokq **q, void (*wake)(void *), void *arg);

/*
 * j, len bytes of text to be tokenized with tok and flags (as
 * medha_tok_encode), after those pushed before it; tok and text are the
 * caller's, kept until j is taken back. 0, or MEDHA_ENOMEM (the thread
 * could not start; j is the caller's still).
 */
int medha_tokq_push(struct medha_tokq *q, struct medha_tokq_job *j,
    const struct medha_tok *tok, const char *text, size_t len, int flags);

/*
 * Take j back before the thread starts on it: 1 (j is the caller's
 * again, untouched), or 0 (being tokenized or done: it comes back from
 * medha_tokq_take).
 */
int medha_tokq_cancel(struct medha_tokq *q, struct medha_tokq_job *j);

/* A job tokenized, in the order finished, or NULL: the caller's again. */
struct medha_tokq_job *medha_tokq_take(struct medha_tokq *q);

/* Jobs pushed and not yet taken back. */
size_t medha_tokq_pending(const struct medha_tokq *q);

/*
 * Stop the thread (after the job it is on) and free q; every job not
 * taken back is handed to drop(arg, j) (may be NULL), its ids freed
 * first. q may be NULL.
 */
void medha_tokq_close(struct medha_tokq *q,
    void (*drop)(void *arg, struct medha_tokq_job *j), void *arg);

#endif
