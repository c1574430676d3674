/*
 * bench-sched.c: how long the live scheduler's own work takes, in two
 * parts, each printed as median and 99th percentile over thousands of
 * samples.
 *
 * The scheduler core's decision per iteration: medha_sched_next_batch()
 * plus medha_sched_batch_done(), with -n (1000) requests active at
 * every iteration: Llama-3 8B on A100s, tp 8, adaptive chunks with the
 * 50 ms target, KV memory that never binds. Prompts and outputs are
 * 64 to 1087 tokens each (a fixed pseudo-random sequence); whenever a
 * request finishes, a new one arrives, so the replica holds a steady
 * mix of decodes and prefills at every chunk stage. Arrivals and
 * records happen outside the timed calls; virtual time moves on by each
 * batch's predicted latency. fcfs and medha each have a scheduler of
 * their own fed the same requests, and their iterations alternate, so
 * the machine's noise falls on both alike.
 *
 * The dispatch round trip: a worker's RESULT (the tokens of a batch of
 * 16 decodes) to a server thread, which decodes it and answers with the
 * next BATCH (16 decode items), encoded for each answer, as medha-sched
 * does; the client decodes the answer. Timed from before the client
 * encodes to after it decodes, over ipc:// and over tcp://127.0.0.1.
 * The peer, in the same run: the same bytes over a bare nng req/rep
 * socket pair, no codec, which is the floor nng sets. Calls alternate
 * among the four. The codec's share is timed alone, without sockets,
 * and so is a BATCH of -n decodes, the size a replica with that many
 * requests in decode sends every iteration.
 *
 *	bench-sched [-h] [-i ITERS] [-n ACTIVE] [-r CALLS]
 *
 * Build (contrib/bench-sched.sh does it):
 *	cc -std=c11 -D_GNU_SOURCE -O2 -iquote libcore -o bench-sched \
 *	    contrib/bench-sched.c build/libmedha.a -lnng -lmsgpackc \
 *	    -ljansson -lzstd -lpcre2-32 -lpthread -lm
 */
#include "net/link.h"
#include "net/proto.h"
#include "sched/pred.h"
#include "sched/sched.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include <err.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WARMUP 1000  /* iterations (or calls) before timing starts */
#define DEC_ITEMS 16 /* decode items of the BATCH of a round trip */

static double
mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int
dcmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Sorts v; its median and 99th percentile, in microseconds. */
static void
pct(double *v, int n, double *med, double *p99)
{
	qsort(v, n, sizeof(*v), dcmp);
	*med = v[n / 2] * 1e6;
	*p99 = v[(int)(0.99 * (n - 1))] * 1e6;
}

static long
num(const char *flag, const char *s, long lo, long hi)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v < lo || v > hi)
		errx(2, "%s: %s: not a number in [%ld, %ld]", flag, s, lo, hi);
	return v;
}

/* ---- the scheduler core ---- */

/* One policy's scheduler and the request stream it is fed. */
struct core {
	struct medha_sched *s;
	double now;
	uint64_t rng;   /* the request sizes: the same stream for every core */
	int64_t serial; /* requests made */
	double *t;      /* (iters) timed decisions, s */
	double items, decodes, prefills; /* sums over the timed batches */
};

static int64_t
draw(struct core *c)
{
	c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
	return 64 + (int64_t)((c->rng >> 33) % 1024);
}

static void
arrive(struct core *c)
{
	struct medha_reqspec rs;
	int rc;

	memset(&rs, 0, sizeof(rs));
	snprintf(rs.id, sizeof(rs.id), "r%lld", (long long)c->serial++);
	rs.arrival = c->now;
	rs.prompt_tokens = draw(c);
	rs.max_tokens = draw(c);
	rs.sampling = medha_sampling_greedy;
	if ((rc = medha_sched_arrive(c->s, &rs, c->now, NULL)) != 0)
		errx(1, "arrive: %s", medha_strerror(rc));
}

/* One iteration; with t, the decision's time goes in *t. */
static void
step(struct core *c, double *t)
{
	struct medha_sched_batch b;
	struct medha_record rec;
	double t0 = mono(), t1;
	int rc = medha_sched_next_batch(c->s, c->now, &b);

	if (rc != 1)
		errx(1, "next_batch: %s",
		    rc < 0 ? medha_strerror(rc) : "nothing to run");
	if ((rc = medha_sched_batch_done(c->s, &b, NULL, c->now + b.latency)) !=
	    0)
		errx(1, "batch_done: %s", medha_strerror(rc));
	t1 = mono();
	c->now += b.latency;
	if (t != NULL) {
		*t = t1 - t0;
		c->items += b.n_items;
		c->decodes += b.n_decode;
		c->prefills += b.n_items - b.n_decode;
	}
	while (medha_sched_pop_record(c->s, &rec) == 1) {
		if (rec.status != MEDHA_STATUS_OK)
			errx(1, "request %s: %s", rec.id, rec.reason);
		medha_record_clear(&rec);
		arrive(c);
	}
}

static void
bench_core(int active, int iters)
{
	static const int policies[] = {MEDHA_POLICY_FCFS, MEDHA_POLICY_MEDHA};
	struct core cores[2];
	struct medha_pred_model m;
	struct medha_pred p;
	struct medha_sched_config sc;
	int rc;

	if ((rc = medha_model_resolve("llama3-8b", &m)) != 0 ||
	    (rc = medha_pred_init(&p, medha_gpu_find("a100"), &m, 8, 1, 1)) !=
	        0)
		errx(1, "predictor: %s", medha_strerror(rc));
	for (int k = 0; k < 2; k++) {
		struct core *c = &cores[k];
		memset(c, 0, sizeof(*c));
		medha_sched_config_default(&sc);
		sc.policy = policies[k];
		sc.kv_blocks = 1 << 20; /* KV never binds: 16 M tokens */
		if ((rc = medha_sched_init(&c->s, &sc, &p)) != 0)
			errx(1, "sched: %s", medha_strerror(rc));
		c->rng = 1;
		if ((c->t = calloc(iters, sizeof(*c->t))) == NULL)
			err(1, "calloc");
		for (int i = 0; i < active; i++)
			arrive(c);
		for (int i = 0; i < WARMUP; i++)
			step(c, NULL);
	}
	for (int i = 0; i < iters; i++)
		for (int k = 0; k < 2; k++)
			step(&cores[k], &cores[k].t[i]);

	printf("scheduler core: llama3-8b on a100, tp 8, adaptive 50 ms; "
	       "%d requests active,\nprompts and outputs of 64..1087 tokens; "
	       "next_batch + batch_done, %d iterations\n",
	    active, iters);
	printf("%-7s %12s %10s %8s %8s %9s %8s\n", "policy", "median (us)",
	    "p99 (us)", "items", "decodes", "prefills", "goal");
	for (int k = 0; k < 2; k++) {
		struct core *c = &cores[k];
		double med, p99;
		pct(c->t, iters, &med, &p99);
		printf("%-7s %12.1f %10.1f %8.1f %8.1f %9.2f %8s\n",
		    medha_policy_name(policies[k]), med, p99, c->items / iters,
		    c->decodes / iters, c->prefills / iters,
		    p99 < 50       ? "met"
		        : med < 50 ? "p99 over"
		                   : "missed");
		if (medha_sched_pending(c->s) != active)
			errx(1, "%lld requests active, not %d",
			    (long long)medha_sched_pending(c->s), active);
		medha_sched_free(c->s);
		free(c->t);
	}
	printf("goal: < 50 us per iteration; items, decodes, prefills: per "
	       "batch, mean\n");
	medha_pred_free(&p);
}

/* ---- the dispatch round trip ---- */

/*
 * A server thread: through medha_srv_* (decode each RESULT, encode the
 * BATCH answer), or (raw) a bare nng rep socket that sends the BATCH's
 * bytes back as they are: the floor nng itself sets.
 */
struct server {
	int raw;
	struct medha_srv *srv;
	nng_socket sock;
	const struct medha_msg *answer; /* the BATCH each call gets */
	const void *bytes;              /* raw: its encoding */
	size_t len;
	volatile int stop;
	pthread_t th;
};

static void *
serve(void *arg)
{
	struct server *sv = arg;
	struct medha_srv_ev ev;
	struct medha_msg in;
	char why[256];
	void *buf;
	size_t len;

	while (!sv->stop) {
		if (medha_srv_next(sv->srv, 0.1, &ev) != 0)
			errx(1, "srv_next: out of memory");
		if (ev.kind != MEDHA_SRV_CALL)
			continue;
		if (medha_msg_decode(&in, ev.data, ev.len, why, sizeof(why)) !=
		        0 ||
		    in.type != MEDHA_MSG_RESULT)
			errx(1, "server: a bad request: %s", why);
		medha_msg_clear(&in);
		if (medha_msg_encode(sv->answer, &buf, &len, why,
		        sizeof(why)) != 0)
			errx(1, "encode: %s", why);
		if (medha_srv_reply(sv->srv, ev.call, buf, len) != 0)
			errx(1, "srv_reply: out of memory");
		free(buf);
	}
	return NULL;
}

static void *
serve_raw(void *arg)
{
	struct server *sv = arg;
	nng_msg *m;

	while (nng_recvmsg(sv->sock, &m, 0) == 0) {
		nng_msg_clear(m);
		if (nng_msg_append(m, sv->bytes, sv->len) != 0 ||
		    nng_sendmsg(sv->sock, m, 0) != 0)
			errx(1, "raw server: cannot answer");
	}
	return NULL; /* the socket was closed */
}

/* Listen at url (a tcp url: the first free port from port on). */
static void
server_open(struct server *sv, char *url, size_t urllen, int port)
{
	char why[256] = "";
	int rc = -1;

	for (int i = 0; rc != 0 && i < 50; i++) {
		if (port > 0)
			snprintf(url, urllen, "tcp://127.0.0.1:%d", port + i);
		if (!sv->raw)
			rc = medha_srv_open(&sv->srv, url, why, sizeof(why));
		else if ((rc = nng_rep0_open(&sv->sock)) == 0 &&
		    (rc = nng_listen(sv->sock, url, NULL, 0)) != 0) {
			snprintf(why, sizeof(why), "%.200s: %s", url,
			    nng_strerror(rc));
			nng_close(sv->sock);
		}
		if (rc != 0 && port == 0)
			break;
	}
	if (rc != 0)
		errx(1, "%s", why);
	sv->stop = 0;
	if (pthread_create(&sv->th, NULL, sv->raw ? serve_raw : serve, sv) != 0)
		errx(1, "pthread_create");
}

static void
server_close(struct server *sv)
{
	sv->stop = 1;
	if (sv->raw)
		nng_close(sv->sock);
	pthread_join(sv->th, NULL);
	if (!sv->raw)
		medha_srv_close(sv->srv);
}

/* One round trip through medha_cli_call, codec included; its time. */
static double
roundtrip(struct medha_cli *c, const struct medha_msg *req)
{
	struct medha_msg rep;
	char why[256];
	void *buf, *in;
	size_t len, inlen;
	double t0 = mono();
	int rc;

	if (medha_msg_encode(req, &buf, &len, why, sizeof(why)) != 0)
		errx(1, "encode: %s", why);
	if ((rc = medha_cli_call(c, 0, buf, len, &in, &inlen, 5.0)) != 0)
		errx(1, "call: %s", medha_strerror(rc));
	free(buf);
	if (medha_msg_decode(&rep, in, inlen, why, sizeof(why)) != 0 ||
	    rep.type != MEDHA_MSG_BATCH || rep.batch.n_items != DEC_ITEMS)
		errx(1, "a bad answer: %s", why);
	free(in);
	medha_msg_clear(&rep);
	return mono() - t0;
}

/* One round trip of the same bytes on a bare nng req socket; its time. */
static double
roundtrip_raw(nng_socket s, const void *req, size_t len)
{
	double t0 = mono();
	void *in;
	size_t inlen;

	if (nng_send(s, (void *)req, len, 0) != 0 ||
	    nng_recv(s, &in, &inlen, NNG_FLAG_ALLOC) != 0)
		errx(1, "raw nng call failed");
	nng_free(in, inlen);
	return mono() - t0;
}

/* Messages encoded and decoded, no sockets; their time. */
static double
codec(const struct medha_msg *const *m, int n)
{
	struct medha_msg out;
	char why[256];
	void *buf;
	size_t len;
	double t0 = mono();

	for (int k = 0; k < n; k++) {
		if (medha_msg_encode(m[k], &buf, &len, why, sizeof(why)) != 0 ||
		    medha_msg_decode(&out, buf, len, why, sizeof(why)) != 0)
			errx(1, "codec: %s", why);
		free(buf);
		medha_msg_clear(&out);
	}
	return mono() - t0;
}

/* A BATCH of n decode items (ids and items the caller's, n of each). */
static void
make_batch(struct medha_msg *m, struct medha_msg_item *items, int32_t *ids,
    int n)
{
	for (int i = 0; i < n; i++) {
		ids[i] = 1000 + 37 * i % 40000;
		items[i] = (struct medha_msg_item){.handle = 100 + i,
		    .pos = 300 + 17 * i % 4000,
		    .ids = &ids[i],
		    .n_ids = 1,
		    .sample = 1};
	}
	memset(m, 0, sizeof(*m));
	m->type = MEDHA_MSG_BATCH;
	m->batch = (struct medha_msg_batch){.seq = 123457,
	    .items = items,
	    .n_items = n};
}

static void
bench_link(int calls, int active)
{
	enum { IPC, TCP, RAW_IPC, RAW_TCP, CODEC, BIG, NT };
	static const char *name[NT] = {"ipc://", "tcp://127.0.0.1",
	    "nng alone, ipc", "nng alone, tcp", "codec alone", ""};
	struct medha_msg_item items[DEC_ITEMS], *big_items;
	struct medha_msg_token toks[DEC_ITEMS];
	int32_t ids[DEC_ITEMS], *big_ids;
	struct medha_msg batch, big, result;
	const struct medha_msg *small[2] = {&result, &batch}, *bigp[1] = {&big};
	struct server sv[4];
	struct medha_cli *cli[2];
	nng_socket raw[2];
	char url[4][256], dir[] = "/tmp/bench-sched.XXXXXX", why[256];
	double *t[NT], med, p99;
	void *bbuf, *rbuf, *gbuf;
	size_t blen, rlen, glen;
	int port = 20000 + (int)(getpid() % 20000);

	make_batch(&batch, items, ids, DEC_ITEMS);
	if ((big_items = calloc(active, sizeof(*big_items))) == NULL ||
	    (big_ids = calloc(active, sizeof(*big_ids))) == NULL)
		err(1, "calloc");
	make_batch(&big, big_items, big_ids, active);
	memset(&result, 0, sizeof(result));
	for (int i = 0; i < DEC_ITEMS; i++)
		toks[i] = (struct medha_msg_token){.handle = 100 + i,
		    .token = 2000 + 41 * i};
	result.type = MEDHA_MSG_RESULT;
	result.result = (struct medha_msg_result){.worker_id = 0,
	    .seq = 123456,
	    .tokens = toks,
	    .n_tokens = DEC_ITEMS};
	if (medha_msg_encode(&batch, &bbuf, &blen, why, sizeof(why)) != 0 ||
	    medha_msg_encode(&result, &rbuf, &rlen, why, sizeof(why)) != 0 ||
	    medha_msg_encode(&big, &gbuf, &glen, why, sizeof(why)) != 0)
		errx(1, "encode: %s", why);
	free(gbuf);

	if (mkdtemp(dir) == NULL)
		err(1, "mkdtemp");
	for (int k = 0; k < 4; k++) {
		memset(&sv[k], 0, sizeof(sv[k]));
		sv[k].raw = k >= RAW_IPC;
		sv[k].answer = &batch;
		sv[k].bytes = bbuf;
		sv[k].len = blen;
		snprintf(url[k], sizeof(url[k]), "ipc://%s/s%d.sock", dir, k);
		server_open(&sv[k], url[k], sizeof(url[k]),
		    k % 2 == 0 ? 0 : port);
		port = k == TCP ? port + 100 : port;
	}
	for (int k = 0; k < 2; k++) {
		if (medha_cli_open(&cli[k], url[k], 1, why, sizeof(why)) != 0)
			errx(1, "%s", why);
		if (nng_req0_open(&raw[k]) != 0 ||
		    nng_dial(raw[k], url[RAW_IPC + k], NULL, 0) != 0)
			errx(1, "raw nng: cannot dial %s", url[RAW_IPC + k]);
		for (int i = 0; i < 500 && !medha_cli_connected(cli[k]); i++)
			usleep(10000);
	}
	for (int k = 0; k < NT; k++)
		if ((t[k] = calloc(calls, sizeof(*t[k]))) == NULL)
			err(1, "calloc");
	for (int i = 0; i < WARMUP; i++)
		for (int k = 0; k < 2; k++) {
			roundtrip(cli[k], &result);
			roundtrip_raw(raw[k], rbuf, rlen);
		}
	for (int i = 0; i < calls; i++) {
		for (int k = 0; k < 2; k++) {
			t[k][i] = roundtrip(cli[k], &result);
			t[RAW_IPC + k][i] = roundtrip_raw(raw[k], rbuf, rlen);
		}
		t[CODEC][i] = codec(small, 2);
		if (i % 10 == 0) /* 1000 decodes take a while */
			t[BIG][i / 10] = codec(bigp, 1);
	}
	for (int k = 0; k < 2; k++) {
		medha_cli_close(cli[k]);
		nng_close(raw[k]);
	}
	for (int k = 0; k < 4; k++) {
		server_close(&sv[k]);
		snprintf(url[k], sizeof(url[k]), "%s/s%d.sock", dir, k);
		unlink(url[k]);
	}
	rmdir(dir);

	printf("\ndispatch round trip: RESULT of %d tokens (%zu bytes) -> "
	       "BATCH of %d decodes (%zu bytes),\nencoded and decoded on "
	       "both sides; %d calls each, alternating\n",
	    DEC_ITEMS, rlen, DEC_ITEMS, blen, calls);
	printf("%-16s %12s %10s %9s %9s\n", "transport", "median (us)",
	    "p99 (us)", "goal", "");
	for (int k = 0; k < BIG; k++) {
		double goal = k == IPC ? 100 : k == TCP ? 200 : 0;
		pct(t[k], calls, &med, &p99);
		printf("%-16s %12.1f %10.1f", name[k], med, p99);
		if (goal > 0)
			printf(" %6.0f us %9s", goal,
			    p99 < goal       ? "met"
			        : med < goal ? "p99 over"
			                     : "missed");
		printf("\n");
	}
	pct(t[BIG], (calls + 9) / 10, &med, &p99);
	printf("codec alone, one BATCH of %d decodes (%zu bytes): median "
	       "%.1f us, p99 %.1f us\n",
	    active, glen, med, p99);
	printf("goal: median and p99 under it (met), median only (p99 "
	       "over); nng alone: the same bytes\non a bare req/rep socket "
	       "pair, no codec; codec alone: both messages encoded and\n"
	       "decoded once, no sockets\n");
	for (int k = 0; k < NT; k++)
		free(t[k]);
	free(bbuf);
	free(rbuf);
	free(big_items);
	free(big_ids);
}

static void
usage(void)
{
	fprintf(stderr,
	    "usage: bench-sched [-h] [-i ITERS] [-n ACTIVE] "
	    "[-r CALLS]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	int ch, iters = 5000, active = 1000, calls = 5000;

	while ((ch = getopt(argc, argv, "hi:n:r:")) != -1) {
		switch (ch) {
		case 'i': iters = (int)num("-i", optarg, 1, 10000000); break;
		case 'n': active = (int)num("-n", optarg, 1, 1000000); break;
		case 'r': calls = (int)num("-r", optarg, 1, 10000000); break;
		default: usage();
		}
	}
	if (optind != argc)
		usage();
	bench_core(active, iters);
	bench_link(calls, active);
	if (fclose(stdout) != 0)
		err(1, "stdout");
	return 0;
}
