/*
 * nccl_mock.c: a host-memory stand-in for NCCL, built as libnccl.so.2 by
 * tests/sh/cuda-mock-live.sh so that the cuda backend's dlopen finds it:
 * the calls libcore/cuda/cuda_lib.c loads (and ncclCommDestroy), for TP ranks that are
 * separate processes on one machine ("device" memory being host memory,
 * as in cudart_mock.c). The unique id names a POSIX shared-memory
 * segment; ncclCommInitRank maps it and waits until every rank has.
 * ncclAllReduce (f32 sums only: anything else is refused) goes in
 * rounds of at most SLOT floats: each rank puts its piece in its slot,
 * waits at a barrier, adds the slots up in rank order (so every rank,
 * and the host collectives' sum, get the same bits), and waits again
 * before the slots are reused. A wait gives up after
 * MEDHA_NCCL_MOCK_TIMEOUT seconds (default 60) with ncclSystemError,
 * and a rank that gives up or leaves breaks the communicator, so that
 * the others fail at once instead of waiting too. Inside a graph
 * capture (cudart_mock.c's mock_defer, found with dlsym in the process,
 * linked -rdynamic) the all-reduce is recorded and redone at every
 * replay; a replay's failure aborts (a graph has no one to tell). As
 * NCCL 2.22+ connects lazily (NCCL_RUNTIME_CONNECT) at the first
 * all-reduce of a size, which a capture cannot take, an all-reduce of a
 * count this communicator has not run outside a capture fails inside
 * one (ncclInvalidUsage, said on stderr).
 * ncclCommInitRankConfig with blocking 0 returns ncclInProgress at once
 * and ncclCommGetAsyncError says when every rank has joined.
 * ncclCommInitRank and ncclCommDestroy (and ncclCommAbort) say on stderr
 * what they did and how many all-reduces ran: what the test looks for.
 * Told to by a file (MEDHA_NCCL_MOCK_HANG_INIT, _AR: the name of a file
 * that the first rank to remove it obeys, so that a restarted process
 * is not told again), a rank hangs in its init for ever (a peer stuck
 * after the id exchange), or its first all-reduce of a new size stays
 * ncclInProgress for ever (a connection that never comes).
 * ncclCommGetAsyncError says ncclRemoteError once the communicator is
 * broken (the stand-in's all-reduces are done when their call returns,
 * so the backend's wait for a stream never sees one pending).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <nccl.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SLOT ((size_t)1 << 18) /* floats a rank puts in per round */
#define MAXR 64

/* the shared segment: this header, then nranks slots of SLOT floats */
struct seg {
	atomic_int nranks;    /* set by the first to come */
	atomic_ullong joined; /* a bit per rank that has mapped it */
	atomic_int arrived;   /* at the barrier */
	atomic_uint gen;      /* barriers passed */
	atomic_int broken;    /* a rank gave up or left */
	char pad[64 - 28];
};

struct ncclComm {
	struct seg *s;
	float *slot; /* nranks * SLOT */
	size_t len;
	int rank, n;
	char name[NCCL_UNIQUE_ID_BYTES];
	long n_ar, n_replay, n_captured;
	double floats;
	size_t seen[64]; /* counts run outside a capture ("connected") */
	int n_seen;
	ncclResult_t state; /* ncclInProgress: joining, or stuck */
	int unlinked, stuck;
};

/* 1 if count was run outside a capture (remembered when not: seen) */
static int
connected(struct ncclComm *c, size_t count, int seen)
{
	for (int i = 0; i < c->n_seen; i++)
		if (c->seen[i] == count)
			return 1;
	if (seen && c->n_seen < 64)
		c->seen[c->n_seen++] = count;
	return 0;
}

static double
now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static double
timeout_s(void)
{
	const char *e = getenv("MEDHA_NCCL_MOCK_TIMEOUT");

	return e != NULL && atof(e) > 0 ? atof(e) : 60;
}

/* spin a little, then sleep 20 us at a time: 0, or -1 past deadline */
static int
pause_until(int *spins, double deadline)
{
	struct timespec ts = {0, 20000};

	if (++*spins < 2000)
		return 0;
	nanosleep(&ts, NULL);
	return (*spins & 255) == 0 && now() > deadline ? -1 : 0;
}

static ncclResult_t
fail(struct ncclComm *c, const char *what)
{
	fprintf(stderr, "mock nccl: rank %d of %d: %s\n", c->rank, c->n, what);
	atomic_store(&c->s->broken, 1);
	return ncclSystemError;
}

/* every rank here, or an error (after the timeout, or at once when the
   communicator is broken) */
static ncclResult_t
barrier(struct ncclComm *c, const char *where)
{
	struct seg *s = c->s;
	unsigned g = atomic_load(&s->gen);
	double deadline;
	int spins = 0;
	char msg[160];

	if (atomic_fetch_add(&s->arrived, 1) == c->n - 1) {
		atomic_store(&s->arrived, 0);
		atomic_fetch_add(&s->gen, 1);
		return ncclSuccess;
	}
	deadline = now() + timeout_s();
	while (atomic_load(&s->gen) == g) {
		/* broken after this barrier was passed (a rank done with it
		   left) is no failure of this one: look at gen again */
		if (atomic_load(&s->broken) && atomic_load(&s->gen) == g) {
			fprintf(stderr, "mock nccl: rank %d of %d: %s: another "
			    "rank gave up or left\n", c->rank, c->n, where);
			return ncclRemoteError;
		}
		if (pause_until(&spins, deadline) != 0) {
			snprintf(msg, sizeof(msg), "%s: the other ranks did "
			    "not come within %g s", where, timeout_s());
			return fail(c, msg);
		}
	}
	return ncclSuccess;
}

ncclResult_t
ncclGetUniqueId(ncclUniqueId *id)
{
	static atomic_int serial;
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	memset(id, 0, sizeof(*id));
	snprintf(id->internal, sizeof(id->internal),
	    "/medha-nccl-mock.%ld.%d.%ld%09ld", (long)getpid(),
	    atomic_fetch_add(&serial, 1), (long)t.tv_sec, t.tv_nsec);
	return ncclSuccess;
}

/* 1 if the file named by environment variable var existed and this
   process removed it (one process of several is told so) */
static int
told(const char *var)
{
	const char *f = getenv(var);

	return f != NULL && *f != '\0' && unlink(f) == 0;
}

/* 1 once every rank has joined c's segment (rank 0 then unlinks it) */
static int
all_joined(struct ncclComm *c)
{
	unsigned long long all = c->n == 64 ? ~0ull : (1ull << c->n) - 1;

	if (atomic_load(&c->s->joined) != all)
		return 0;
	if (c->rank == 0 && !c->unlinked) {
		shm_unlink(c->name);
		c->unlinked = 1;
	}
	if (c->state == ncclInProgress)
		fprintf(stderr, "mock nccl: rank %d of %d joined %s\n", c->rank,
		    c->n, c->name);
	c->state = ncclSuccess;
	return 1;
}

/* rank's communicator of id, its bit set in the segment; NULL after a
   message */
static struct ncclComm *
join(int nranks, ncclUniqueId id, int rank)
{
	struct ncclComm *c;
	unsigned long long had;
	int fd, z = 0;

	if (nranks < 1 || nranks > MAXR || rank < 0 || rank >= nranks ||
	    id.internal[0] != '/' ||
	    memchr(id.internal, '\0', sizeof(id.internal)) == NULL) {
		fprintf(stderr, "mock nccl: ncclCommInitRank: rank %d of %d, "
		    "id \"%.20s\"\n", rank, nranks, id.internal);
		return NULL;
	}
	if (told("MEDHA_NCCL_MOCK_HANG_INIT")) {
		/* a peer stuck after the id exchange: the others wait */
		fprintf(stderr, "mock nccl: rank %d of %d: told to hang in "
		    "ncclCommInitRank\n", rank, nranks);
		for (;;)
			pause();
	}
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->rank = rank;
	c->n = nranks;
	c->state = ncclInProgress;
	memcpy(c->name, id.internal, sizeof(c->name));
	c->len = sizeof(struct seg) + (size_t)nranks * SLOT * sizeof(float);
	if ((fd = shm_open(c->name, O_RDWR | O_CREAT, 0600)) < 0 ||
	    ftruncate(fd, (off_t)c->len) != 0 ||
	    (c->s = mmap(NULL, c->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
	         0)) == MAP_FAILED) {
		fprintf(stderr, "mock nccl: rank %d: %s: %s\n", rank, c->name,
		    strerror(errno));
		if (fd >= 0)
			close(fd);
		free(c);
		return NULL;
	}
	close(fd);
	c->slot = (float *)(c->s + 1);
	if (!atomic_compare_exchange_strong(&c->s->nranks, &z, nranks) &&
	    z != nranks) {
		fprintf(stderr, "mock nccl: rank %d of %d: %s was made for %d "
		    "ranks\n", rank, nranks, c->name, z);
		goto bad;
	}
	had = atomic_fetch_or(&c->s->joined, 1ull << rank);
	if (had >> rank & 1) {
		fprintf(stderr, "mock nccl: rank %d of %d joined %s twice\n",
		    rank, nranks, c->name);
		goto bad;
	}
	return c;
bad:
	atomic_store(&c->s->broken, 1);
	shm_unlink(c->name);
	munmap(c->s, c->len);
	free(c);
	return NULL;
}

ncclResult_t
ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	struct ncclComm *c;
	double deadline;
	int spins = 0;

	if ((*comm = c = join(nranks, id, rank)) == NULL)
		return ncclInvalidUsage;
	deadline = now() + timeout_s();
	while (!all_joined(c))
		if (atomic_load(&c->s->broken) ||
		    pause_until(&spins, deadline) != 0) {
			fprintf(stderr, "mock nccl: rank %d of %d: the other "
			    "ranks did not join %s within %g s\n", rank,
			    nranks, c->name, timeout_s());
			atomic_store(&c->s->broken, 1);
			shm_unlink(c->name);
			munmap(c->s, c->len);
			free(c);
			*comm = NULL;
			return ncclInvalidUsage;
		}
	return ncclSuccess;
}

/* non-blocking (config->blocking 0): ncclInProgress at once, the
   communicator's state ncclSuccess (ncclCommGetAsyncError) once every
   rank has joined, which this stand-in never gives up on by itself */
ncclResult_t
ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id,
    int rank, ncclConfig_t *config)
{
	if (config == NULL || config->blocking != 0)
		return ncclCommInitRank(comm, nranks, id, rank);
	if ((*comm = join(nranks, id, rank)) == NULL)
		return ncclInvalidUsage;
	return all_joined(*comm) ? ncclSuccess : ncclInProgress;
}

ncclResult_t
ncclCommDestroy(ncclComm_t c)
{
	if (c == NULL)
		return ncclSuccess;
	fprintf(stderr, "mock nccl: rank %d of %d: %ld all-reduces (%ld "
	    "replayed from %ld captured), %.0f floats\n", c->rank, c->n,
	    c->n_ar, c->n_replay, c->n_captured, c->floats);
	/* a rank still waiting on this one fails now, not at its timeout */
	atomic_store(&c->s->broken, 1);
	munmap(c->s, c->len);
	free(c);
	return ncclSuccess;
}

/* recv = the sum of every rank's send, in rank order */
static ncclResult_t
reduce(struct ncclComm *c, const float *send, float *recv, size_t count)
{
	ncclResult_t st;

	for (size_t off = 0; off < count; off += SLOT) {
		size_t m = count - off < SLOT ? count - off : SLOT;
		memcpy(c->slot + (size_t)c->rank * SLOT, send + off,
		    m * sizeof(float));
		if ((st = barrier(c, "ncclAllReduce")) != ncclSuccess)
			return st;
		for (size_t i = 0; i < m; i++) {
			float s = c->slot[i];
			for (int r = 1; r < c->n; r++)
				s += c->slot[(size_t)r * SLOT + i];
			recv[off + i] = s;
		}
		/* the slots are read: the next round may write them */
		if ((st = barrier(c, "ncclAllReduce")) != ncclSuccess)
			return st;
	}
	c->n_ar++;
	c->floats += (double)count;
	return ncclSuccess;
}

/* an all-reduce recorded in a graph, by value */
struct ar {
	const float *send;
	float *recv;
	size_t count;
	struct ncclComm *c;
};

static void
replay(void *p)
{
	const struct ar *a = p;

	a->c->n_replay++;
	if (reduce(a->c, a->send, a->recv, a->count) != ncclSuccess) {
		fprintf(stderr, "MOCK: ncclAllReduce in a graph replay failed\n");
		abort();
	}
}

ncclResult_t
ncclAllReduce(const void *send, void *recv, size_t count,
    ncclDataType_t type, ncclRedOp_t op, ncclComm_t c, cudaStream_t st)
{
	static int (*defer)(void (*)(void *), const void *, size_t);
	static int (*capturing)(void);
	struct ar a = {send, recv, count, c};

	(void)st;
	if (c == NULL || (count > 0 && (send == NULL || recv == NULL)))
		return ncclInvalidArgument;
	if (type != ncclFloat32 || op != ncclSum) {
		fprintf(stderr, "mock nccl: ncclAllReduce: type %d, op %d: "
		    "f32 (%d) sums (%d) only\n", (int)type, (int)op,
		    (int)ncclFloat32, (int)ncclSum);
		return ncclInvalidArgument;
	}
	if (defer == NULL) {
		*(void **)&defer = dlsym(RTLD_DEFAULT, "mock_defer");
		*(void **)&capturing = dlsym(RTLD_DEFAULT, "mock_capturing");
	}
	if (capturing != NULL && capturing() && !connected(c, count, 0)) {
		fprintf(stderr, "mock nccl: rank %d of %d: an all-reduce of %zu "
		    "floats first met inside a graph capture (NCCL would "
		    "connect here)\n", c->rank, c->n, count);
		return ncclInvalidUsage;
	}
	if (c->state != ncclSuccess)
		return ncclInvalidUsage; /* NCCL: not before the state is */
	if ((capturing == NULL || !capturing()) && !connected(c, count, 1) &&
	    told("MEDHA_NCCL_MOCK_HANG_AR")) {
		/* connecting for ever (a non-blocking communicator's state
		   stays ncclInProgress): the caller's wait gives up */
		fprintf(stderr, "mock nccl: rank %d of %d: told to hang in the "
		    "first all-reduce of %zu floats\n", c->rank, c->n, count);
		c->state = ncclInProgress;
		c->stuck = 1;
		return ncclInProgress;
	}
	if (defer != NULL && defer(replay, &a, sizeof(a))) {
		c->n_captured++;
		return ncclSuccess;
	}
	return reduce(c, send, recv, count);
}

ncclResult_t
ncclCommAbort(ncclComm_t c)
{
	if (c != NULL)
		fprintf(stderr, "mock nccl: rank %d of %d: aborted\n", c->rank,
		    c->n);
	return ncclCommDestroy(c);
}

ncclResult_t
ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err)
{
	if (c == NULL || err == NULL)
		return ncclInvalidArgument;
	if (atomic_load(&c->s->broken))
		*err = ncclRemoteError;
	else if (c->state == ncclInProgress && !c->stuck)
		*err = all_joined(c) ? ncclSuccess : ncclInProgress;
	else
		*err = c->state;
	return ncclSuccess;
}

const char *
ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess:
		return "no error";
	case ncclSystemError:
		return "unhandled system error (mock: a wait timed out, or "
		       "shared memory failed)";
	case ncclInvalidArgument:
		return "invalid argument";
	case ncclInvalidUsage:
		return "invalid usage";
	case ncclRemoteError:
		return "remote process exited or there was a network error";
	default:
		return "mock nccl error";
	}
}
