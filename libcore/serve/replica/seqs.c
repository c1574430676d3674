/*
 * seqs.c: the workers' sequences, as the replica names them and lets
 * them go (seqs.h). Calls nothing of the replica's: every file of
 * serve/replica/ may call it.
 *
 * A free goes out once its worker has been sent every batch that was
 * formed before its request ended: the worker frees before it runs the
 * batch of the same message, and a request cancelled while its prompt
 * chunks fly still has items in the batches it was not sent yet; not
 * for batches made void (bseq_void), which it never will be.
 */
#include "serve/replica/seqs.h"

#include <stdlib.h>
#include <string.h>

int
rep_seqs_init(struct rep_seqs *s, int nw)
{
	memset(s, 0, sizeof(*s));
	if ((s->q = medha_calloc(nw, sizeof(*s->q))) == NULL)
		return MEDHA_ENOMEM;
	s->nw = nw;
	return 0;
}

void
rep_seqs_free(struct rep_seqs *s)
{
	for (int i = 0; s->q != NULL && i < s->nw; i++)
		rep_seqs_leave(s, i);
	free(s->q);
	medha_map_free(&s->name);
	memset(s, 0, sizeof(*s));
}

void
rep_seqs_join(struct rep_seqs *s, int i)
{
	rep_seqs_leave(s, i);
	s->q[i].on = 1;
}

void
rep_seqs_leave(struct rep_seqs *s, int i)
{
	struct rep_frees *q = &s->q[i];

	free(q->h);
	free(q->after);
	free(q->keep);
	memset(q, 0, sizeof(*q));
}

uint64_t
rep_seqs_name(const struct rep_seqs *s, uint64_t h)
{
	void *v = medha_map_get(&s->name, h);

	return v != NULL ? (uint64_t)(uintptr_t)v : h;
}

void
rep_seqs_free_later(struct rep_seqs *s, uint64_t h, int64_t keep)
{
	for (int i = 0; i < s->nw; i++) {
		struct rep_frees *w = &s->q[i];
		if (!w->on)
			continue;
		if (w->n == w->cap) {
			int64_t ncap = w->cap ? 2 * w->cap : 64;
			void *n = medha_reallocarray(w->h, (size_t)ncap,
			    sizeof(*w->h));
			void *a = n == NULL ? NULL :
			    medha_reallocarray(w->after, (size_t)ncap,
			    sizeof(*w->after));
			void *k = a == NULL ? NULL :
			    medha_reallocarray(w->keep, (size_t)ncap,
			    sizeof(*w->keep));
			if (n != NULL)
				w->h = n;
			if (a != NULL)
				w->after = a;
			if (k != NULL)
				w->keep = k;
			if (k == NULL) {
				medha_log(MEDHA_LOG_ERROR,
				    "out of memory: worker %d keeps request "
				    "%llx",
				    i, (unsigned long long)h);
				continue;
			}
			w->cap = ncap;
		}
		w->after[w->n] = s->bseq;
		w->keep[w->n] = keep;
		w->h[w->n++] = h;
	}
}

/*
 * A preempted request's sequence, kept to [0, to) for the cache, is the
 * core's ghost's from now on (MEDHA_KVOP_MOVE): the workers keep it
 * under its name, the ghost is called so, and the request gets a new
 * name for the sequence of its prefill again.
 */
int
rep_seqs_move(struct rep_seqs *s, const struct medha_kvop *op)
{
	uint64_t old = rep_seqs_name(s, op->req), fresh;

	rep_seqs_free_later(s, old, op->to);
	/* generation 0, as no request's handle; a name made here is never
	   a key (the core's ghosts are keys, never sent) */
	if (++s->name_next > 0xffffffffu)
		s->name_next = 1;
	fresh = s->name_next;
	if (medha_map_put(&s->name, op->src, (void *)(uintptr_t)old) != 0 ||
	    medha_map_put(&s->name, op->req, (void *)(uintptr_t)fresh) != 0)
		return MEDHA_ENOMEM;
	return 0;
}

void
rep_seqs_forget(struct rep_seqs *s, uint64_t h)
{
	medha_map_del(&s->name, h);
}

void
rep_seqs_forget_all(struct rep_seqs *s)
{
	medha_map_free(&s->name);
}

uint64_t
rep_seqs_next_batch(struct rep_seqs *s)
{
	return ++s->bseq;
}

void
rep_seqs_void(struct rep_seqs *s)
{
	s->bseq_void = s->bseq;
}

int64_t
rep_seqs_due(const struct rep_seqs *s, int i, uint64_t sent, int64_t max)
{
	const struct rep_frees *w = &s->q[i];
	int64_t nf = 0;

	while (nf < w->n && nf < max &&
	    (w->after[nf] <= sent || w->after[nf] <= s->bseq_void))
		nf++; /* the rest go with the next message */
	return nf;
}

void
rep_seqs_sent(struct rep_seqs *s, int i, int64_t nf)
{
	struct rep_frees *w = &s->q[i];

	w->n -= nf;
	if (w->n > 0) { /* (h may be NULL when there are none) */
		memmove(w->h, w->h + nf, (size_t)w->n * sizeof(*w->h));
		memmove(w->after, w->after + nf,
		    (size_t)w->n * sizeof(*w->after));
		memmove(w->keep, w->keep + nf,
		    (size_t)w->n * sizeof(*w->keep));
	}
}
