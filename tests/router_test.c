/*
 * router_test.c: medha-router's core (libcore/serve/router/) in this
 * process, in front of one live replica (serve/replica/) whose worker
 * the test plays (tests/scripted_worker.h: a sim worker of llama3-8b
 * that answers each batch at once with the sim backend's placeholder
 * tokens). Router and replica each run in a thread on ipc:// sockets in
 * a temporary directory, until their stop flags are set. The checks:
 *  - a request submitted while the replica has no worker is ACCEPTED and
 *    held (router.h: it waits at the router for a ready replica); once
 *    the worker says HELLO it goes out and ends "ok" with its tokens;
 *  - requests go through and come back with the router's handles: the
 *    replica's tokens, in order, and exactly one record each, the last
 *    event; a request that asks for no stream gets its record alone;
 *  - STATUS through the router gives the replica's figures (workers,
 *    KV blocks, block size, model, backend) and the router's own count
 *    of requests in flight; the metrics snapshot counts what ended;
 *  - CANCEL of an unknown handle, and of another client's request, is
 *    an ERROR; of a running request it is OK and its record says
 *    "cancelled";
 *  - a router whose replica is down (nothing listens at its address)
 *    is not ready; with hold_timeout 0 it answers a SUBMIT with ERROR
 *    (MEDHA_ENOSPACE), with a short hold_timeout it ACCEPTs it and
 *    ends it "rejected" once the hold is over;
 *  - a long text refused by a replica after its ACCEPTED ("rejected"
 *    record) for a reason of that replica's own is served by another
 *    (two scripted replicas, tests/scripted_worker.h); for a reason
 *    every replica would give, or after a token, its client gets the
 *    record once;
 *  - a stop with a request in flight refuses new SUBMITs, lets the
 *    request finish, and medha_router_run() returns 0 (and so does the
 *    replica's after it).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>

#include "model/gguf.h"
#include "serve/http/http.h"
#include "serve/replica/replica.h"
#include "serve/router.h"
#include "tok/tokenizer.h"
#include "scripted_worker.h"

#define WATCHDOG 60 /* s: the whole test, whatever hangs */
#define VOCAB 128256

/* A router and the thread that runs it. */
struct rt {
	char url[192];
	const char *reps[2];
	char rep_url[2][192];
	struct medha_router *r;
	pthread_t thr;
	int running;
	volatile sig_atomic_t stop;
	int rc;
};

static struct {
	char dir[128];
	char rep_url[192];
	struct medha_replica *rep;
	pthread_t rep_thr;
	int rep_running;
	volatile sig_atomic_t rep_stop;
	int rep_rc;
	struct rt main;  /* in front of the replica */
	struct sw w;     /* the replica's worker */
	struct cl c, c2; /* clients of the router */
	/* test_rejected_after_accepted's router, its two scripted replicas
	   and its client: left open (see there), here so that they stay
	   reachable */
	struct rt two;
	struct sr ra, rb;
	struct cl c3;
} T;

static void *
replica_main(void *arg)
{
	(void)arg;
	T.rep_rc = medha_replica_run(T.rep, &T.rep_stop);
	return NULL;
}

static void *
router_main(void *arg)
{
	struct rt *x = arg;

	x->rc = medha_router_run(x->r, &x->stop);
	return NULL;
}

static void
on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "router_test: watchdog: hung\n";
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

/* Start a router at dir/name in front of the replica at rep_url (and
 * the one at rep_url2 unless NULL). */
static int
rt_start(struct rt *x, const char *name, const char *rep_url,
    const char *rep_url2, double hold)
{
	struct medha_router_config c;
	char why[256];

	memset(x, 0, sizeof(*x));
	snprintf(x->url, sizeof(x->url), "ipc://%s/%s", T.dir, name);
	snprintf(x->rep_url[0], sizeof(x->rep_url[0]), "%s", rep_url);
	snprintf(x->rep_url[1], sizeof(x->rep_url[1]), "%s",
	    rep_url2 != NULL ? rep_url2 : "");
	x->reps[0] = x->rep_url[0];
	x->reps[1] = x->rep_url[1];
	medha_router_config_default(&c);
	c.listen = x->url;
	c.replicas = x->reps;
	c.nreplicas = rep_url2 != NULL ? 2 : 1;
	c.status_interval = 0.05;
	c.hold_timeout = hold;
	c.drain_timeout = 10;
	if (medha_router_open(&x->r, &c, why, sizeof(why)) != 0) {
		print_error("router: %s\n", why);
		return -1;
	}
	if (pthread_create(&x->thr, NULL, router_main, x) != 0)
		return -1;
	x->running = 1;
	return 0;
}

/* Stop it (run must return 0) and close it. */
static void
rt_stop(struct rt *x)
{
	x->stop = 1;
	if (x->running) {
		pthread_join(x->thr, NULL);
		assert_int_equal(x->rc, 0);
	}
	x->running = 0;
	medha_router_close(x->r);
	x->r = NULL;
}

static int
setup(void **state)
{
	struct medha_replica_config c;
	char why[256];

	(void)state;
	signal(SIGALRM, on_alarm);
	alarm(WATCHDOG);
	sw_tmpdir(T.dir, sizeof(T.dir), "router");
	snprintf(T.rep_url, sizeof(T.rep_url), "ipc://%s/replica.sock", T.dir);
	medha_replica_config_default(&c);
	c.listen = T.rep_url;
	c.drain_timeout = 10;
	if (medha_replica_open(&T.rep, &c, why, sizeof(why)) != 0) {
		print_error("replica: %s\n", why);
		return -1;
	}
	if (pthread_create(&T.rep_thr, NULL, replica_main, NULL) != 0)
		return -1;
	T.rep_running = 1;
	if (rt_start(&T.main, "router.sock", T.rep_url, NULL, 30) != 0)
		return -1;
	if (sw_open(&T.w, T.rep_url) != 0 || cl_open(&T.c, T.main.url) != 0 ||
	    cl_open(&T.c2, T.main.url) != 0)
		return -1;
	return 0;
}

static int
teardown(void **state)
{
	char path[300];

	(void)state;
	if (T.main.r != NULL) {
		T.main.stop = 1;
		if (T.main.running)
			pthread_join(T.main.thr, NULL);
		T.main.running = 0;
		medha_router_close(T.main.r);
	}
	T.rep_stop = 1;
	if (T.rep_running)
		pthread_join(T.rep_thr, NULL);
	sw_stop(&T.w);
	cl_close(&T.c);
	cl_close(&T.c2);
	medha_replica_close(T.rep);
	snprintf(path, sizeof(path), "%s/replica.sock", T.dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/router.sock", T.dir);
	unlink(path);
	for (int i = 0; i < 3; i++) { /* test_rejected_after_accepted's */
		snprintf(path, sizeof(path), "%s/%s.sock", T.dir,
		    (const char *[]){"a", "b", "two"}[i]);
		unlink(path);
	}
	rmdir(T.dir);
	alarm(0);
	return 0;
}

/* STATUS through c until it says ready, workers and workers_wanted as
 * given (up to 5 s): 1, or 0; the last one in st. */
static int
status_until(struct cl *c, struct medha_msg_status *st, int ready,
    int64_t workers, int64_t wanted)
{
	double until = sw_now() + 5;

	do {
		if (cl_status(c, st) == 0 && st->ready == ready &&
		    st->workers == workers && st->workers_wanted == wanted)
			return 1;
		sw_sleep(0.02);
	} while (sw_now() < until);
	return 0;
}

/* h's record through the router: ok, the tokens of a prompt of
 * n_prompt and max output tokens; streamed unless no_stream. */
static void
check_done(struct cl *c, uint64_t h, const char *id, int64_t n_prompt,
    int64_t max, int no_stream)
{
	struct cl_req *q = cl_wait_record(c, h, 10);

	if (q == NULL)
		fail_msg("request %s: no record", id);
	assert_int_equal(q->records, 1);
	assert_int_equal(q->after_record, 0);
	assert_string_equal(q->rec.id, id);
	if (q->rec.status != MEDHA_STATUS_OK)
		fail_msg("request %s: %s (%s)", id,
		    medha_status_name(q->rec.status), q->rec.reason);
	assert_int_equal(q->rec.finish_reason, MEDHA_FINISH_LENGTH);
	assert_int_equal(q->rec.prompt_tokens, n_prompt);
	assert_int_equal(q->rec.output_tokens, max);
	assert_int_equal(q->rec.n_token_ids, max);
	/* the router's clock: it got the request first */
	assert_true(q->rec.first_token >= q->rec.arrival);
	assert_true(q->rec.finish >= q->rec.first_token);
	assert_true(q->rec.ttft >= 0);
	for (int64_t i = 0; i < max; i++)
		assert_int_equal(q->rec.token_ids[i],
		    medha_backend_sim_token(n_prompt + i, VOCAB));
	if (no_stream) {
		assert_int_equal(q->token_events, 0);
	} else {
		assert_int_equal(q->n_ids, max);
		assert_memory_equal(q->ids, q->rec.token_ids,
		    (size_t)max * sizeof(int32_t));
	}
}

/* ---- held until the replica is ready ---- */

static void
test_held_until_ready(void **state)
{
	struct medha_reqspec rs = cl_spec("early", 12, 4);
	struct medha_msg_status st;
	struct medha_msg_hello h;
	struct medha_msg rep;
	uint64_t hd;
	int code;

	(void)state;
	/* the router sees the replica, which has no worker */
	assert_true(status_until(&T.c, &st, 0, 0, 1));
	assert_int_equal(cl_submit(&T.c, &rs, &hd, &code), MEDHA_MSG_ACCEPTED);
	sw_sleep(0.2); /* a few status rounds: it waits */
	assert_int_equal(cl_status(&T.c, &st), 0);
	assert_false(st.ready);
	assert_int_equal(st.pending, 1);
	assert_int_equal(cl_req_of(&T.c, hd)->records, 0);
	/* the worker comes: the request goes out and is served */
	sw_hello_default(&h);
	assert_int_equal(sw_hello(&T.w, &h, &rep), MEDHA_MSG_WELCOME);
	medha_msg_clear(&rep);
	sw_start(&T.w);
	check_done(&T.c, hd, "early", 12, 4, 0);
	sw_assert_ok(&T.w);
}

/* ---- through the router ---- */

static void
test_through(void **state)
{
	struct medha_reqspec a = cl_spec("a", 20, 3), b = cl_spec("b", 0, 2);
	struct medha_reqspec c = cl_spec("c", 40, 6);
	int32_t ids[5] = {11, 12, 13, 14, 128255};
	struct medha_msg_status st, direct;
	struct medha_router_metrics m;
	struct cl rc;
	uint64_t ha, hb, hc;
	int code;

	(void)state;
	b.prompt_ids = ids;
	b.prompt_tokens = 5;
	c.no_stream = 1;
	assert_int_equal(cl_submit(&T.c, &a, &ha, &code), MEDHA_MSG_ACCEPTED);
	assert_int_equal(cl_submit(&T.c, &b, &hb, &code), MEDHA_MSG_ACCEPTED);
	assert_int_equal(cl_submit(&T.c2, &c, &hc, &code), MEDHA_MSG_ACCEPTED);
	/* the router's own handles, one after another */
	assert_int_equal(hb, ha + 1);
	assert_int_equal(hc, hb + 1);
	check_done(&T.c, ha, "a", 20, 3, 0);
	check_done(&T.c, hb, "b", 5, 2, 0);
	check_done(&T.c2, hc, "c", 40, 6, 1);
	assert_int_equal(T.c.strays, 0);
	assert_int_equal(T.c2.strays, 0);

	/* the prompt ids reached the worker as sent (by the replica's
	 * handle, which the test does not know: found by its prompt), and
	 * the sequence was freed there once it ended */
	{
		uint64_t up = 0;
		pthread_mutex_lock(&T.w.mu);
		for (int i = 0; i < T.w.nreq; i++)
			if (T.w.req[i].n_prompt == 5 &&
			    memcmp(T.w.req[i].prompt, ids, sizeof(ids)) == 0)
				up = T.w.req[i].handle;
		pthread_mutex_unlock(&T.w.mu);
		assert_true(up != 0);
		assert_true(sw_wait_freed(&T.w, up, 5));
	}

	/* STATUS: the replica's figures, the router's count */
	assert_int_equal(cl_open(&rc, T.rep_url), 0);
	assert_int_equal(cl_status(&rc, &direct), 0);
	cl_close(&rc);
	assert_true(status_until(&T.c, &st, 1, 1, 1));
	assert_int_equal(st.kv_blocks, direct.kv_blocks);
	assert_int_equal(st.kv_blocks, 10000);
	assert_int_equal(st.block_size, 16);
	assert_string_equal(st.model, "llama3-8b");
	assert_string_equal(st.backend, "sim");
	assert_int_equal(st.pending, 0);

	/* the metrics: four ended ok (early, a, b, c), with their tokens */
	assert_int_equal(medha_router_metrics(T.main.r, &m), 0);
	assert_int_equal(m.requests[MEDHA_STATUS_OK], 4);
	assert_int_equal(m.generation_tokens, 4 + 3 + 2 + 6);
	assert_int_equal(m.prompt_tokens, 12 + 20 + 5 + 40);
	assert_int_equal(m.nreplicas, 1);
	assert_true(m.rep[0].up && m.rep[0].ready);
	assert_int_equal(m.refused, 0);
	free(m.rep);
	sw_assert_ok(&T.w);
}

/* ---- cancel ---- */

static void
test_cancel(void **state)
{
	struct medha_reqspec rs = cl_spec("long", 16, 100000);
	struct cl_req *q;
	uint64_t h;
	int code;

	(void)state;
	assert_int_equal(cl_cancel(&T.c, 0xdeadbeefULL, &code),
	    MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_ENOTFOUND);
	assert_int_equal(cl_submit(&T.c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	assert_true(cl_wait_ids(&T.c, h, 1, 10));
	assert_int_equal(cl_cancel(&T.c2, h, &code), MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_ENOTFOUND);
	assert_int_equal(cl_cancel(&T.c, h, &code), MEDHA_MSG_OK);
	q = cl_wait_record(&T.c, h, 10);
	assert_non_null(q);
	assert_int_equal(q->records, 1);
	assert_int_equal(q->rec.status, MEDHA_STATUS_CANCELLED);
	assert_true(q->rec.output_tokens < 100000);
	assert_int_equal(q->rec.output_tokens, q->n_ids);
	assert_int_equal(cl_cancel(&T.c, h, &code), MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_ENOTFOUND);
	sw_assert_ok(&T.w);
}

/* ---- a replica that is down ---- */

static void
test_replica_down(void **state)
{
	struct medha_reqspec rs = cl_spec("nowhere", 8, 2);
	struct medha_router_metrics m;
	struct medha_msg_status st;
	char none[300], path[300];
	struct rt x;
	struct cl c;
	struct cl_req *q;
	uint64_t h;
	int code;
	double t0, until;

	(void)state;
	snprintf(none, sizeof(none), "ipc://%s/nobody.sock", T.dir);
	/* hold_timeout 0: refused at once */
	assert_int_equal(rt_start(&x, "down0.sock", none, NULL, 0), 0);
	assert_int_equal(cl_open(&c, x.url), 0);
	assert_int_equal(cl_status(&c, &st), 0);
	assert_false(st.ready);
	assert_int_equal(st.workers, 0);
	assert_int_equal(st.kv_blocks, 0);
	assert_int_equal(cl_submit(&c, &rs, &h, &code), MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_ENOSPACE);
	assert_int_equal(medha_router_metrics(x.r, &m), 0);
	assert_int_equal(m.refused, 1);
	assert_false(m.ready);
	assert_false(m.rep[0].up);
	free(m.rep);
	cl_close(&c);
	rt_stop(&x);
	snprintf(path, sizeof(path), "%s/down0.sock", T.dir);
	unlink(path);

	/* a short hold: accepted, then "rejected" when it is over */
	assert_int_equal(rt_start(&x, "down1.sock", none, NULL, 0.3), 0);
	assert_int_equal(cl_open(&c, x.url), 0);
	t0 = sw_now();
	assert_int_equal(cl_submit(&c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	q = cl_wait_record(&c, h, 10);
	assert_non_null(q);
	assert_true(sw_now() - t0 >= 0.3);
	assert_int_equal(q->records, 1);
	assert_int_equal(q->rec.status, MEDHA_STATUS_REJECTED);
	assert_non_null(strstr(q->rec.reason, "no replica ready"));
	assert_int_equal(q->rec.output_tokens, 0);
	/* the figures follow (the record may overtake them) */
	until = sw_now() + 5;
	do {
		assert_int_equal(medha_router_metrics(x.r, &m), 0);
		free(m.rep);
		if (m.requests[MEDHA_STATUS_REJECTED] == 0)
			sw_sleep(0.01);
	} while (m.requests[MEDHA_STATUS_REJECTED] == 0 && sw_now() < until);
	assert_int_equal(m.requests[MEDHA_STATUS_REJECTED], 1);
	assert_int_equal(m.refused, 0);
	cl_close(&c);
	rt_stop(&x);
	snprintf(path, sizeof(path), "%s/down1.sock", T.dir);
	unlink(path);
}

/* ---- refused after it was accepted ---- */

/* The figures of x until requests[status] is n (up to 5 s; the record
 * may overtake them): 1, or 0. */
static int
ended_until(struct rt *x, int status, int64_t n)
{
	struct medha_router_metrics m;
	double until = sw_now() + 5;

	do {
		assert_int_equal(medha_router_metrics(x->r, &m), 0);
		free(m.rep);
		if (m.requests[status] == n)
			return 1;
		sw_sleep(0.01);
	} while (sw_now() < until);
	return 0;
}

/*
 * A long text's "rejected" record, after its ACCEPTED (a replica
 * acknowledges a text of over 4096 bytes before tokenizing it, and
 * refuses it then with a record rather than an ERROR): for a reason of
 * the replica's own (full: MEDHA_ENOSPACE; shutting down) the router
 * sends the request to the other replica, where it completes, its
 * client none the wiser; for a reason every replica would give (the
 * prompt longer than the context) the client gets that record, once,
 * and the other replica never sees the request; nor is a request that
 * has streamed a token moved.
 */
static void
test_rejected_after_accepted(void **state)
{
	static char text[5000];
	struct medha_reqspec rs = cl_spec("long", 0, 4);
	struct sr *a = &T.ra, *b = &T.rb;
	struct rt *x = &T.two;
	struct cl *c = &T.c3;
	char ua[300], ub[300];
	struct medha_msg_status st;
	struct cl_req *q;
	uint64_t h;
	int code;

	(void)state;
	memset(text, 'a', sizeof(text) - 1);
	a->act = SR_REFUSE;
	a->code = MEDHA_ENOSPACE;
	b->act = SR_SERVE;
	b->work = 5;
	rs.prompt = text;
	snprintf(a->reason, sizeof(a->reason),
	    "overloaded: a prompt of 5004 bytes of ids, 0 held for requests "
	    "in flight (at most 1000)");
	snprintf(ua, sizeof(ua), "ipc://%s/a.sock", T.dir);
	snprintf(ub, sizeof(ub), "ipc://%s/b.sock", T.dir);
	/* a has no work, b 5 s: a is asked first */
	assert_int_equal(sr_start(a, ua), 0);
	assert_int_equal(sr_start(b, ub), 0);
	assert_int_equal(rt_start(x, "two.sock", ua, ub, 30), 0);
	assert_int_equal(cl_open(c, x->url), 0);
	assert_true(status_until(c, &st, 1, 2, 2));

	/* a full: served by b, one record, b's tokens only */
	assert_int_equal(cl_submit(c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	q = cl_wait_record(c, h, 10);
	assert_non_null(q);
	if (q->rec.status != MEDHA_STATUS_OK)
		fail_msg("%s (%s)", medha_status_name(q->rec.status),
		    q->rec.reason);
	assert_int_equal(atomic_load(&a->submits), 1);
	assert_int_equal(atomic_load(&b->submits), 1);
	assert_int_equal(q->records, 1);
	assert_int_equal(q->n_ids, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(q->ids[i],
		    medha_backend_sim_token(1250 + i, VOCAB));
	assert_true(ended_until(x, MEDHA_STATUS_OK, 1));

	/* a shutting down: likewise */
	a->code = MEDHA_EUNSUP;
	snprintf(a->reason, sizeof(a->reason),
	    "shutting down: not accepting requests");
	assert_int_equal(cl_submit(c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	q = cl_wait_record(c, h, 10);
	assert_non_null(q);
	assert_int_equal(q->rec.status, MEDHA_STATUS_OK);
	assert_int_equal(q->n_ids, 4);
	assert_int_equal(atomic_load(&a->submits), 2);
	assert_int_equal(atomic_load(&b->submits), 2);

	/* too long for the context, which every replica would say: the
	 * client has a's record, once; b never sees it */
	a->code = MEDHA_ERANGE;
	snprintf(a->reason, sizeof(a->reason),
	    "1251 prompt + 4 output tokens exceed the model's context of "
	    "1024");
	assert_int_equal(cl_submit(c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	q = cl_wait_record(c, h, 10);
	assert_non_null(q);
	assert_int_equal(q->rec.status, MEDHA_STATUS_REJECTED);
	assert_int_equal(q->rec.code, MEDHA_ERANGE);
	assert_string_equal(q->rec.reason, a->reason);
	assert_int_equal(q->n_ids, 0);
	assert_int_equal(atomic_load(&a->submits), 3);
	assert_true(ended_until(x, MEDHA_STATUS_REJECTED, 1));

	/* full, but a token went to the client already: it stays */
	a->act = SR_TOKEN_REFUSE;
	a->code = MEDHA_ENOSPACE;
	assert_int_equal(cl_submit(c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	q = cl_wait_record(c, h, 10);
	assert_non_null(q);
	assert_int_equal(q->rec.status, MEDHA_STATUS_REJECTED);
	assert_int_equal(q->rec.code, MEDHA_ENOSPACE);
	assert_int_equal(q->n_ids, 1);
	assert_int_equal(atomic_load(&a->submits), 4);
	assert_true(ended_until(x, MEDHA_STATUS_REJECTED, 2));

	/* nothing more came for any of them */
	sw_sleep(0.2);
	cl_poll(c);
	for (int i = 0; i < c->nreq; i++) {
		assert_int_equal(c->req[i].records, 1);
		assert_int_equal(c->req[i].after_record, 0);
	}
	assert_int_equal(c->strays, 0);
	assert_int_equal(atomic_load(&b->submits), 2);
	/* the router stops; it, its replicas and the client stay open to
	   the end: closing them here now and then hung (1 run in 10, 3 at
	   once on 2 loaded cores) in nng_close(), in nng 1.5.2's reaper,
	   for this test's closes or the next test's */
	x->stop = 1;
	pthread_join(x->thr, NULL);
	x->running = 0;
	assert_int_equal(x->rc, 0);
}

/* ---- stopping ---- */

static void
test_stop_drains(void **state)
{
	struct medha_reqspec rs = cl_spec("last", 24, 40),
	                     late = cl_spec("late", 8, 2);
	uint64_t h, hl, lates[64];
	int code, t, n_late = 0;
	double until;

	(void)state;
	assert_int_equal(cl_submit(&T.c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	assert_true(cl_wait_ids(&T.c, h, 1, 10));
	/* the worker keeps its next batch: the request stays in flight */
	atomic_store(&T.w.hold, 1);
	T.main.stop = 1;
	until = sw_now() + 5;
	do { /* taken until it sees the stop, then refused */
		t = cl_submit(&T.c, &late, &hl, &code);
		if (t == MEDHA_MSG_ACCEPTED) {
			assert_true(n_late < 64);
			lates[n_late++] = hl;
		}
	} while (t != MEDHA_MSG_ERROR && sw_now() < until);
	assert_int_equal(t, MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_EUNSUP);
	atomic_store(&T.w.hold, 0);
	check_done(&T.c, h, "last", 24, 40, 0);
	for (int i = 0; i < n_late; i++)
		check_done(&T.c, lates[i], "late", 8, 2, 0);
	pthread_join(T.main.thr, NULL);
	T.main.running = 0;
	assert_int_equal(T.main.rc, 0);
	medha_router_close(T.main.r);
	T.main.r = NULL;
	/* the replica stops as cleanly after it */
	T.rep_stop = 1;
	pthread_join(T.rep_thr, NULL);
	T.rep_running = 0;
	assert_int_equal(T.rep_rc, 0);
	sw_assert_ok(&T.w);
}

/* ---- the tokenizer, opened once ---- */

/*
 * With --http and -m the router and its HTTP front door use one
 * tokenizer, the router's (issue 38): medha_router_tok hands it out for
 * the file the router opened and no other, and a front door that uses
 * it leaves it to the router to close (closing it twice aborts; the
 * router tokenizes with it after the front door closed).
 */
static void
test_tok_shared(void **state)
{
	static const char *const toks[] = {"<|endoftext|>", "a", "b", "ab"};
	static const int32_t types[] = {3, 1, 1, 1};
	static const char *const merges[] = {"a b"};
	struct medha_router_config c;
	struct medha_http_config hc;
	struct medha_router *r;
	struct medha_http *h = NULL;
	struct medha_gguf_writer *w;
	const struct medha_tok *t;
	const char *reps[1] = {T.rep_url};
	char path[192], url[192], inproc[64], why[256];
	int64_t ctx = -1;
	int32_t *ids = NULL;
	size_t n = 0;

	(void)state;
	snprintf(path, sizeof(path), "%s/tok.gguf", T.dir);
	assert_int_equal(medha_gguf_writer_open(&w, path), 0);
	medha_gguf_writer_add_str(w, "general.architecture", "llama");
	medha_gguf_writer_add_u32(w, "llama.context_length", 64);
	medha_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
	medha_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
	medha_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, 4);
	medha_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, 1);
	medha_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 0);
	assert_int_equal(medha_gguf_writer_close(w), 0);
	snprintf(url, sizeof(url), "ipc://%s/tok.sock", T.dir);
	medha_router_config_default(&c);
	c.listen = url;
	c.replicas = reps;
	c.nreplicas = 1;
	c.model = path;
	if (medha_router_open(&r, &c, why, sizeof(why)) != 0)
		fail_msg("router: %s", why);
	t = medha_router_tok(r, path, &ctx);
	assert_non_null(t);
	assert_int_equal(ctx, 64);
	assert_null(medha_router_tok(r, "/elsewhere/tok.gguf", &ctx));
	assert_int_equal(ctx, 0);
	snprintf(inproc, sizeof(inproc), "inproc://router_test_tok");
	assert_int_equal(medha_router_listen(r, inproc, why, sizeof(why)), 0);
	medha_http_config_default(&hc);
	hc.listen = "127.0.0.1:0";
	hc.upstream = inproc;
	hc.router = r;
	hc.model = path;
	if (medha_http_open(&h, &hc, why, sizeof(why)) != 0)
		fail_msg("http: %s", why);
	medha_http_close(h);
	assert_int_equal(medha_tok_encode(t, "ab", 2, MEDHA_TOK_DEFAULT, &ids,
	                     &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(ids[0], 3);
	free(ids);
	medha_router_close(r);
	unlink(path);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_held_until_ready),
	    cmocka_unit_test(test_through),
	    cmocka_unit_test(test_cancel),
	    cmocka_unit_test(test_replica_down),
	    cmocka_unit_test(test_rejected_after_accepted),
	    cmocka_unit_test(test_stop_drains),
	    cmocka_unit_test(test_tok_shared),
	};

	medha_log_level = MEDHA_LOG_ERROR;
	return cmocka_run_group_tests(tests, setup, teardown);
}
