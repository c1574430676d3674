/*
 * tokq.c: a tokenizer's thread (tokq.h): a FIFO of jobs in, a list of
 * jobs done out, one mutex over both.
 */
#include "tok/tokq.h"

#include <pthread.h>
#include <stdlib.h>

struct medha_tokq {
	void (*wake)(void *);
	void *arg;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thr;
	int started, quit;
	struct medha_tokq_job *in, *in_tail; /* waiting, in order */
	struct medha_tokq_job *done, *done_tail;
	size_t pending; /* pushed, not taken back (the loop's count) */
};

int
medha_tokq_open(struct medha_tokq **qp, void (*wake)(void *), void *arg)
{
	struct medha_tokq *q = calloc(1, sizeof(*q));

	*qp = NULL;
	if (q == NULL)
		return MEDHA_ENOMEM;
	q->wake = wake;
	q->arg = arg;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cv, NULL);
	*qp = q;
	return 0;
}

static void *
tokq_main(void *arg)
{
	struct medha_tokq *q = arg;
	struct medha_tokq_job *j;

	pthread_mutex_lock(&q->mu);
	for (;;) {
		while (q->in == NULL && !q->quit)
			pthread_cond_wait(&q->cv, &q->mu);
		if (q->quit)
			break;
		j = q->in;
		if ((q->in = j->next) == NULL)
			q->in_tail = NULL;
		pthread_mutex_unlock(&q->mu);
		j->rc = medha_tok_encode(j->tok, j->text, j->len, j->flags,
		    &j->ids, &j->n);
		pthread_mutex_lock(&q->mu);
		j->next = NULL;
		if (q->done_tail != NULL)
			q->done_tail->next = j;
		else
			q->done = j;
		q->done_tail = j;
		if (q->wake != NULL) {
			/* without the lock: wake may take the caller's, which
			   the caller holds while it calls in */
			pthread_mutex_unlock(&q->mu);
			q->wake(q->arg);
			pthread_mutex_lock(&q->mu);
		}
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

int
medha_tokq_push(struct medha_tokq *q, struct medha_tokq_job *j,
    const struct medha_tok *tok, const char *text, size_t len, int flags)
{
	pthread_mutex_lock(&q->mu);
	if (!q->started) {
		if (pthread_create(&q->thr, NULL, tokq_main, q) != 0) {
			pthread_mutex_unlock(&q->mu);
			return MEDHA_ENOMEM;
		}
		q->started = 1;
	}
	j->tok = tok;
	j->text = text;
	j->len = len;
	j->flags = flags;
	j->ids = NULL;
	j->n = 0;
	j->rc = 0;
	j->next = NULL;
	if (q->in_tail != NULL)
		q->in_tail->next = j;
	else
		q->in = j;
	q->in_tail = j;
	q->pending++;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
	return 0;
}

int
medha_tokq_cancel(struct medha_tokq *q, struct medha_tokq_job *j)
{
	struct medha_tokq_job **p, *prev = NULL;
	int found = 0;

	pthread_mutex_lock(&q->mu);
	for (p = &q->in; *p != NULL; prev = *p, p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			if (q->in_tail == j)
				q->in_tail = prev;
			j->next = NULL;
			q->pending--;
			found = 1;
			break;
		}
	pthread_mutex_unlock(&q->mu);
	return found;
}

struct medha_tokq_job *
medha_tokq_take(struct medha_tokq *q)
{
	struct medha_tokq_job *j;

	pthread_mutex_lock(&q->mu);
	if ((j = q->done) != NULL) {
		if ((q->done = j->next) == NULL)
			q->done_tail = NULL;
		j->next = NULL;
		q->pending--;
	}
	pthread_mutex_unlock(&q->mu);
	return j;
}

size_t
medha_tokq_pending(const struct medha_tokq *q)
{
	return q->pending;
}

void
medha_tokq_close(struct medha_tokq *q,
    void (*drop)(void *arg, struct medha_tokq_job *j), void *arg)
{
	struct medha_tokq_job *l[2], *j;

	if (q == NULL)
		return;
	pthread_mutex_lock(&q->mu);
	q->quit = 1;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
	if (q->started)
		pthread_join(q->thr, NULL);
	l[0] = q->in;
	l[1] = q->done;
	for (int k = 0; k < 2; k++)
		for (; l[k] != NULL; l[k] = j) {
			j = l[k]->next;
			free(l[k]->ids);
			l[k]->ids = NULL;
			if (drop != NULL)
				drop(arg, l[k]);
		}
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cv);
	free(q);
}
