/*
 * threadpool.c: the CPU backend's worker threads (see threadpool.h).
 *
 * One region at a time. The caller writes the region (function,
 * argument, task count) into one of two descriptor slots, then
 * publishes it by storing a 64-bit state word: the region's generation
 * in the high half, the next task to take in the low half. Everyone,
 * the caller included, takes tasks by compare-and-swap on that word, so
 * a claim succeeds only while the generation is still the one whose
 * descriptor the taker read; the caller returns when as many tasks have
 * finished as the region has. A worker that wakes late (descheduled by
 * a busy machine) finds the generation moved on and goes back to
 * waiting: nobody waits for a worker that has not claimed anything, and
 * the slot it may still be reading is not rewritten before the region
 * after next, which cannot start while it could still claim.
 *
 * Workers spin on the generation for a while after each region (regions
 * follow each other within microseconds during a forward pass) and then
 * sleep on a condition variable (see SPIN_S); the sleeper count and the
 * state word are sequentially consistent atomics, so a worker either sees
 * the new generation or is seen asleep and woken. The caller, its own
 * tasks done, waits for the workers' the same way: it spins a while, then
 * sleeps on a second condition variable that whoever finishes the
 * region's last task signals if it saw the caller waiting (the done
 * count and that flag are sequentially consistent too).
 */
#include "cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/*
 * How long a thread spins before it sleeps, a worker waiting for the
 * next region or the caller for the workers' last tasks: 200 us, longer
 * than the gaps between the regions of a forward pass on a free machine
 * but short beside a scheduler's time slice (50 us let the workers
 * sleep between regions there: on an idle machine SmolLM2's prefill and
 * decode in contrib/bench-cpu.sh types were 5-17% slower than with the
 * old pool in runs alternated with it, and at 200 us they are as fast,
 * while bench-moe.sh's 8K decode is 82-84 tok/s against llama.cpp's
 * 30-32). Timed, not counted in
 * pauses: a pause takes 25 to 140 ns by the CPU (8000 of them, meant as
 * 0.2 ms, spun 0.7-0.9 ms here). On a loaded machine a partner that lost
 * its core comes back only after others' slices; a thread spinning the
 * while uses up its own share, and one asleep is woken ahead of the
 * processes that ran. With 50 us, a decode step of contrib/bench-moe.sh's qwen3moe
 * at 8K tokens of context, 2 threads, load 5-7 on 2 cores, runs of 50
 * steps alternated with the pool as it was (8000 pauses for a worker, a
 * yield every 2000 for the caller): median 27-35 against 55-64 ms, its
 * attention 15-17 against 25-40 ms. A live worker's nap (below) sleeps
 * at once.
 */
#define SPIN_S 200e-6
#define SPIN_CHECK 32 /* pauses between reads of the clock */

struct worker {
	struct medha_threadpool *tp;
	int id; /* 1 .. n-1 */
};

struct region {
	medha_task_fn fn;
	void *arg;
	atomic_int ntasks;
};

struct medha_threadpool {
	int n;              /* threads, the caller included */
	pthread_t *th;      /* (n-1) workers */
	struct worker *w;   /* (n-1) their arguments */
	int started;        /* workers created so far */
	pthread_mutex_t mu; /* guards sleeping only */
	pthread_cond_t wake;
	pthread_cond_t fin; /* the caller's: the region's last task is done */
	atomic_int cwait;   /* the caller is (going) asleep on fin */
	struct region r[2];         /* region of generation g in r[g & 1] */
	atomic_uint_fast64_t state; /* generation << 32 | next task */
	atomic_int done;            /* tasks of the current region finished */
	atomic_int sleepers;        /* workers in (or entering) cond_wait */
	atomic_int stop;
	atomic_int nap; /* medha_threadpool_nap: sleep now, not after spinning */
	uint32_t gen; /* the caller's count of regions */
};

#define GEN(s) ((uint32_t)((s) >> 32))

/* spun SPIN_S since *t0 (0: not started; set by the first call) */
static int
spun_out(double *t0, long spin)
{
	double t;

	if (spin % SPIN_CHECK != 0)
		return 0;
	t = medha_now();
	if (*t0 == 0)
		*t0 = t;
	return t - *t0 >= SPIN_S;
}

/* Take and run tasks of generation g until none is left. */
static void
take_tasks(struct medha_threadpool *tp, uint32_t g, int thread)
{
	struct region *r = &tp->r[g & 1];
	uint_fast64_t s = atomic_load(&tp->state);
	uint32_t i, n;

	for (;;) {
		if (GEN(s) != g)
			return;
		i = (uint32_t)s;
		n = (uint32_t)atomic_load_explicit(&r->ntasks,
		    memory_order_relaxed);
		if (i >= n)
			return;
		if (!atomic_compare_exchange_weak(&tp->state, &s, s + 1))
			continue; /* s now holds the current word */
		r->fn(r->arg, (int)i, thread);
		/* the last task: wake the caller if it sleeps (a later
		   region's caller woken by mistake looks again) */
		if ((uint32_t)atomic_fetch_add(&tp->done, 1) + 1 == n &&
		    thread != 0 && atomic_load(&tp->cwait)) {
			pthread_mutex_lock(&tp->mu);
			pthread_cond_signal(&tp->fin);
			pthread_mutex_unlock(&tp->mu);
		}
		s = atomic_load(&tp->state);
	}
}

static void *
worker_main(void *p)
{
	struct worker *w = p;
	struct medha_threadpool *tp = w->tp;
	uint32_t seen = 0; /* the generation at creation */
	double t0;
	long spin;
	int doze;

	for (;;) {
		for (spin = 0, t0 = 0, doze = 0;; spin++) {
			if (GEN(atomic_load(&tp->state)) != seen ||
			    atomic_load(&tp->stop))
				break;
			if (atomic_load_explicit(&tp->nap,
			        memory_order_relaxed) ||
			    spun_out(&t0, spin)) {
				doze = 1;
				break;
			}
			cpu_relax();
		}
		if (doze) {
			pthread_mutex_lock(&tp->mu);
			atomic_fetch_add(&tp->sleepers, 1);
			while (GEN(atomic_load(&tp->state)) == seen &&
			    !atomic_load(&tp->stop))
				pthread_cond_wait(&tp->wake, &tp->mu);
			atomic_fetch_sub(&tp->sleepers, 1);
			pthread_mutex_unlock(&tp->mu);
		}
		if (atomic_load(&tp->stop))
			break;
		seen = GEN(atomic_load(&tp->state));
		take_tasks(tp, seen, w->id);
	}
	return NULL;
}

static void
wake_all(struct medha_threadpool *tp)
{
	if (atomic_load(&tp->sleepers) > 0) {
		pthread_mutex_lock(&tp->mu);
		pthread_cond_broadcast(&tp->wake);
		pthread_mutex_unlock(&tp->mu);
	}
}

int
medha_threadpool_init(struct medha_threadpool **tpp, int n_threads)
{
	struct medha_threadpool *tp;
	int i;

	*tpp = NULL;
	if (n_threads < 1 || n_threads > MEDHA_THREADS_MAX)
		return MEDHA_EINVAL;
	if ((tp = calloc(1, sizeof(*tp))) == NULL)
		return MEDHA_ENOMEM;
	{
		/* never more threads than the CPUs it may run on: the others
		   would only wait for a core (32 on 2 cores ran 6x slower);
		   results do not depend on the number of threads */
		cpu_set_t cs;
		if (sched_getaffinity(0, sizeof(cs), &cs) == 0 &&
		    CPU_COUNT(&cs) >= 1 && n_threads > CPU_COUNT(&cs))
			n_threads = CPU_COUNT(&cs);
	}
	tp->n = n_threads;
	pthread_mutex_init(&tp->mu, NULL);
	pthread_cond_init(&tp->wake, NULL);
	pthread_cond_init(&tp->fin, NULL);
	atomic_init(&tp->cwait, 0);
	atomic_init(&tp->state, 0);
	atomic_init(&tp->done, 0);
	atomic_init(&tp->r[0].ntasks, 0);
	atomic_init(&tp->r[1].ntasks, 0);
	atomic_init(&tp->sleepers, 0);
	atomic_init(&tp->stop, 0);
	atomic_init(&tp->nap, 0);
	if (n_threads > 1) {
		tp->th = medha_calloc(n_threads - 1, sizeof(*tp->th));
		tp->w = medha_calloc(n_threads - 1, sizeof(*tp->w));
		if (tp->th == NULL || tp->w == NULL) {
			medha_threadpool_free(tp);
			return MEDHA_ENOMEM;
		}
	}
	for (i = 0; i < n_threads - 1; i++) {
		tp->w[i].tp = tp;
		tp->w[i].id = i + 1;
		if (pthread_create(&tp->th[i], NULL, worker_main, &tp->w[i]) !=
		    0) {
			medha_threadpool_free(tp);
			return MEDHA_ENOMEM;
		}
		tp->started++;
	}
	*tpp = tp;
	return 0;
}

void
medha_threadpool_free(struct medha_threadpool *tp)
{
	int i;

	if (tp == NULL)
		return;
	atomic_store(&tp->stop, 1);
	pthread_mutex_lock(&tp->mu);
	pthread_cond_broadcast(&tp->wake);
	pthread_mutex_unlock(&tp->mu);
	for (i = 0; i < tp->started; i++)
		pthread_join(tp->th[i], NULL);
	pthread_cond_destroy(&tp->wake);
	pthread_cond_destroy(&tp->fin);
	pthread_mutex_destroy(&tp->mu);
	free(tp->th);
	free(tp->w);
	free(tp);
}

int
medha_threadpool_size(const struct medha_threadpool *tp)
{
	return tp->n;
}

void
medha_threadpool_run(struct medha_threadpool *tp, int n, medha_task_fn fn,
    void *arg)
{
	struct region *r;
	double t0 = 0;
	long spin = 0;
	int i;

	if (n <= 0)
		return;
	if (n == 1 || tp->n == 1) {
		for (i = 0; i < n; i++)
			fn(arg, i, 0);
		return;
	}
	atomic_store_explicit(&tp->nap, 0, memory_order_relaxed);
	tp->gen++;
	r = &tp->r[tp->gen & 1];
	r->fn = fn;
	r->arg = arg;
	atomic_store_explicit(&r->ntasks, n, memory_order_relaxed);
	atomic_store(&tp->done, 0);
	atomic_store(&tp->state, (uint_fast64_t)tp->gen << 32);
	wake_all(tp);
	take_tasks(tp, tp->gen, 0);
	/* a task may still run on a worker; it may have been descheduled */
	while (atomic_load(&tp->done) != n) {
		if (spun_out(&t0, spin++)) {
			pthread_mutex_lock(&tp->mu);
			atomic_store(&tp->cwait, 1);
			while (atomic_load(&tp->done) != n)
				pthread_cond_wait(&tp->fin, &tp->mu);
			atomic_store(&tp->cwait, 0);
			pthread_mutex_unlock(&tp->mu);
			return;
		}
		cpu_relax();
	}
}

void
medha_threadpool_nap(struct medha_threadpool *tp)
{
	if (tp != NULL)
		atomic_store_explicit(&tp->nap, 1, memory_order_relaxed);
}
