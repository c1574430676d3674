/*
 * threadpool.h: a small fixed pool of worker threads for the CPU backend.
 * The caller hands it n tasks and a function; the tasks are taken one at
 * a time from a shared counter by the workers and by the calling thread
 * itself, and medha_threadpool_run() returns when every task is done.
 *
 * A forward pass runs a few hundred such regions per token, so waking
 * the workers must be cheap: they spin on a generation counter for a
 * while after each region and only then sleep on a condition variable;
 * the caller waits for their last tasks the same way.
 * The pool is meant for one caller at a time (one forward pass).
 *
 *	struct medha_threadpool *tp;
 *	if (medha_threadpool_init(&tp, 2) != 0)
 *		...;
 *	medha_threadpool_run(tp, nrows / 16, rows_fn, &args);
 *	medha_threadpool_free(tp);
 */
#ifndef MEDHA_THREADPOOL_H
#define MEDHA_THREADPOOL_H

#include "medha.h"

#define MEDHA_THREADS_MAX 256 /* most threads a pool may have */

struct medha_threadpool; /* opaque */

/*
 * Task i of n, run on thread number thread (0 is the caller; workers are
 * 1 .. n_threads-1), so that a task may use per-thread scratch memory.
 */
typedef void (*medha_task_fn)(void *arg, int i, int thread);

/*
 * A pool of n_threads threads in all, the calling thread included (so 1
 * starts no thread), or of as many as the CPUs the process may run on
 * (sched_getaffinity) where those are fewer: medha_threadpool_size()
 * says how many. On success *tp is the caller's, to be released
 * with medha_threadpool_free(). Returns 0, MEDHA_EINVAL (n_threads out
 * of [1, MEDHA_THREADS_MAX]) or MEDHA_ENOMEM (allocation or thread
 * creation failed; *tp is NULL).
 */
int medha_threadpool_init(struct medha_threadpool **tp, int n_threads);
/* Stop and join the workers and free the pool; tp may be NULL. */
void medha_threadpool_free(struct medha_threadpool *tp);
int medha_threadpool_size(const struct medha_threadpool *tp);
/*
 * Run fn(arg, i, thread) for every i in [0, n) and return when all have
 * returned. n <= 0 does nothing; n == 1 or a pool of one thread runs on
 * the caller alone. Not reentrant: fn must not call it on the same pool.
 */
void medha_threadpool_run(struct medha_threadpool *tp, int n, medha_task_fn fn,
    void *arg);
/*
 * The caller will be a while (a live worker waiting for its next batch):
 * spinning workers sleep now rather than keep cores from the processes
 * beside it; the next region wakes them.
 */
void medha_threadpool_nap(struct medha_threadpool *tp);

#endif
