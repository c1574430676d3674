/*
 * pcli_test.c: the protocol's asynchronous client (net/pcli.c) against
 * a scripted server on a real ipc:// socket. A SUBMIT the server holds
 * does not hold back one sent after it (its ACCEPTED comes first), nor
 * a CANCEL; an event that comes before its request's ACCEPTED waits and
 * is handed out right after it, in order; an event for no request is
 * dropped once no SUBMIT could claim it, and its request cancelled; a
 * refusal comes back with the server's ERROR, a SUBMIT never answered
 * as a timeout; STATUS and any other call are answered to their
 * cookies; and with a shared secret (net/auth.h)
 * the same calls go through the handshake. Events a server in the
 * process hands over (medha_pcli_deliver) go the same way as a POLL's.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/auth.h"
#include "net/link.h"
#include "net/pcli.h"
#include "net/proto.h"

static char url[128];

/*
 * The server. A SUBMIT of id "slow" is held until the test says
 * (release), one of id "never" for ever, one of id "bad" refused with
 * ERROR; any other is accepted at once with the handle its id names
 * ("h7": 7). A POLL is held until the test queues events (or 0.5 s: a
 * keep-alive). CANCEL and STATUS are answered at once; the cancelled
 * handles are counted.
 */
struct srv {
	struct medha_srv *s;
	pthread_t thr;
	pthread_mutex_t mu;
	int quit;
	struct medha_srv_call *poll, *slow, *never[4];
	int nnever;
	double poll_since;
	double poll_hold; /* s a POLL is held at most (0: 0.5) */
	uint64_t slow_handle;
	uint32_t slow_peer; /* the held SUBMIT's connection */
	int release;
	struct medha_msg_event ev[16]; /* to send on the held POLL */
	int nev;
	uint64_t cancelled[16];
	int ncancel;
	int submits;
	int mute; /* every call dropped unanswered */
};

static struct srv S;

static void
answer_accepted(struct medha_srv_call *call, const char *id, uint64_t h)
{
	struct medha_msg m = {.type = MEDHA_MSG_ACCEPTED};

	snprintf(m.accepted.id, sizeof(m.accepted.id), "%s", id);
	m.accepted.handle = h;
	medha_srv_msg(S.s, call, &m);
}

static void
on_call(struct medha_srv_ev *ev)
{
	struct medha_msg m, rep = {0};
	char why[256];

	assert_int_equal(medha_msg_decode(&m, ev->data, ev->len, why,
	                     sizeof(why)),
	    0);
	pthread_mutex_lock(&S.mu);
	if (S.mute) {
		medha_srv_drop(S.s, ev->call);
		pthread_mutex_unlock(&S.mu);
		medha_msg_clear(&m);
		return;
	}
	switch (m.type) {
	case MEDHA_MSG_SUBMIT:
		S.submits++;
		if (strcmp(m.submit.id, "slow") == 0) {
			S.slow = ev->call;
			S.slow_peer = ev->peer;
		} else if (strcmp(m.submit.id, "never") == 0) {
			assert_true(S.nnever < 4);
			S.never[S.nnever++] = ev->call;
		} else if (strcmp(m.submit.id, "bad") == 0) {
			medha_srv_error(S.s, ev->call, MEDHA_EINVAL, "bad id");
		} else {
			answer_accepted(ev->call, m.submit.id,
			    strtoull(m.submit.id + 1, NULL, 10));
		}
		break;
	case MEDHA_MSG_POLL:
		if (S.poll != NULL) { /* one at a time: the old one empty */
			rep.type = MEDHA_MSG_EVENTS;
			medha_srv_msg(S.s, S.poll, &rep);
		}
		S.poll = ev->call;
		S.poll_since = medha_now();
		break;
	case MEDHA_MSG_CANCEL:
		if (S.ncancel < 16)
			S.cancelled[S.ncancel++] = m.cancel;
		rep.type = MEDHA_MSG_OK;
		medha_srv_msg(S.s, ev->call, &rep);
		break;
	case MEDHA_MSG_STATUS:
		rep.type = MEDHA_MSG_STATUS_REPLY;
		rep.status.workers = 7;
		rep.status.workers_wanted = 7;
		rep.status.ready = 1;
		medha_srv_msg(S.s, ev->call, &rep);
		break;
	default:
		medha_srv_error(S.s, ev->call, MEDHA_EINVAL, "not here");
	}
	pthread_mutex_unlock(&S.mu);
	medha_msg_clear(&m);
}

static void *
srv_main(void *arg)
{
	struct medha_srv_ev ev;

	(void)arg;
	for (;;) {
		assert_int_equal(medha_srv_next(S.s, 0.01, &ev), 0);
		if (ev.kind == MEDHA_SRV_CALL)
			on_call(&ev);
		pthread_mutex_lock(&S.mu);
		if (S.quit) {
			pthread_mutex_unlock(&S.mu);
			return NULL;
		}
		if (S.release && S.slow != NULL) {
			answer_accepted(S.slow, "slow", S.slow_handle);
			S.slow = NULL;
			S.release = 0;
		}
		if (S.poll != NULL &&
		    (S.nev > 0 || medha_now() - S.poll_since >
		        (S.poll_hold > 0 ? S.poll_hold : 0.5))) {
			struct medha_msg m = {.type = MEDHA_MSG_EVENTS};
			m.events.ev = S.ev;
			m.events.n = S.nev;
			medha_srv_msg(S.s, S.poll, &m);
			for (int i = 0; i < S.nev; i++)
				medha_msg_event_clear(&S.ev[i]);
			S.nev = 0;
			S.poll = NULL;
		}
		pthread_mutex_unlock(&S.mu);
	}
}

static void
srv_start(void)
{
	char why[256];

	memset(&S, 0, sizeof(S));
	pthread_mutex_init(&S.mu, NULL);
	snprintf(url, sizeof(url), "ipc:///tmp/medha-pcli-test-%d.sock",
	    (int)getpid());
	assert_int_equal(medha_srv_open(&S.s, url, why, sizeof(why)), 0);
	assert_int_equal(pthread_create(&S.thr, NULL, srv_main, NULL), 0);
}

static void
srv_stop(void)
{
	pthread_mutex_lock(&S.mu);
	S.quit = 1;
	pthread_mutex_unlock(&S.mu);
	pthread_join(S.thr, NULL);
	medha_srv_close(S.s);
	for (int i = 0; i < S.nev; i++)
		medha_msg_event_clear(&S.ev[i]);
	pthread_mutex_destroy(&S.mu);
}

/* *e: tokens ([tok]) of handle h or, tok < 0, its record. */
static void
event_make(struct medha_msg_event *e, uint64_t h, int32_t tok)
{
	memset(e, 0, sizeof(*e));
	e->handle = h;
	if (tok >= 0) {
		e->kind = MEDHA_EVENT_TOKENS;
		e->ids = malloc(sizeof(*e->ids));
		e->ids[0] = tok;
		e->n_ids = 1;
	} else {
		e->kind = MEDHA_EVENT_RECORD;
		e->record = calloc(1, sizeof(*e->record));
		snprintf(e->record->id, sizeof(e->record->id), "r%llu",
		    (unsigned long long)h);
		e->record->status = MEDHA_STATUS_OK;
	}
}

/* Queue an event for the next POLL (event_make's). */
static void
srv_event(uint64_t h, int32_t tok)
{
	pthread_mutex_lock(&S.mu);
	assert_true(S.nev < 16);
	event_make(&S.ev[S.nev++], h, tok);
	pthread_mutex_unlock(&S.mu);
}

static int
srv_cancelled(uint64_t h)
{
	int n = 0;

	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.ncancel; i++)
		n += S.cancelled[i] == h;
	pthread_mutex_unlock(&S.mu);
	return n;
}

static void
submit(struct medha_pcli *p, const char *id, uint64_t cookie, double tmo)
{
	struct medha_reqspec rs;
	char why[256];

	memset(&rs, 0, sizeof(rs));
	snprintf(rs.id, sizeof(rs.id), "%s", id);
	rs.prompt_tokens = 4;
	rs.max_tokens = 2;
	rs.sampling = medha_sampling_greedy;
	assert_int_equal(medha_pcli_submit(p, &rs, cookie, tmo, why,
	                     sizeof(why)),
	    0);
}

/* The next thing the client queues, within 3 s. */
#define take(p, o) assert_int_equal(medha_pcli_take((p), 3, (o)), 1)

static void
run_script(struct medha_pcli *p)
{
	struct medha_pcli_out o;
	int64_t dropped;
	double t;

	/* 1. a held SUBMIT, then one answered at once: its ACCEPTED
	   first, and a CANCEL goes through meanwhile */
	S.slow_handle = 1;
	submit(p, "slow", 11, 5);
	submit(p, "h2", 12, 5);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_ACCEPTED);
	assert_int_equal(o.cookie, 12);
	assert_int_equal(o.handle, 2);
	assert_string_equal(o.msg.accepted.id, "h2");
	medha_pcli_out_clear(&o);
	medha_pcli_cancel(p, 2);
	for (t = medha_now(); !srv_cancelled(2) && medha_now() - t < 3;)
		usleep(1000);
	assert_int_equal(srv_cancelled(2), 1);

	/* 2. events of the held one before its ACCEPTED: they wait */
	srv_event(1, 40);
	srv_event(2, -1);
	srv_event(1, 41);
	take(p, &o); /* 2's record */
	assert_int_equal(o.kind, MEDHA_PCLI_EVENT);
	assert_int_equal(o.cookie, 12);
	assert_int_equal(o.ev.kind, MEDHA_EVENT_RECORD);
	medha_pcli_out_clear(&o);
	for (t = medha_now(); medha_pcli_early(p, NULL) < 2 &&
	     medha_now() - t < 3;)
		usleep(1000);
	assert_int_equal(medha_pcli_early(p, NULL), 2);
	assert_int_equal(medha_pcli_take(p, 0.2, &o), 0);
	pthread_mutex_lock(&S.mu);
	S.release = 1;
	pthread_mutex_unlock(&S.mu);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_ACCEPTED);
	assert_int_equal(o.cookie, 11);
	assert_int_equal(o.handle, 1);
	medha_pcli_out_clear(&o);
	for (int k = 40; k <= 41; k++) { /* in the order they came */
		take(p, &o);
		assert_int_equal(o.kind, MEDHA_PCLI_EVENT);
		assert_int_equal(o.cookie, 11);
		assert_int_equal(o.ev.kind, MEDHA_EVENT_TOKENS);
		assert_int_equal(o.ev.n_ids, 1);
		assert_int_equal(o.ev.ids[0], k);
		medha_pcli_out_clear(&o);
	}
	assert_int_equal(medha_pcli_early(p, &dropped), 0);
	assert_int_equal(dropped, 0);

	/* 3. an event for no request, no SUBMIT in flight: dropped, and
	   its request cancelled */
	srv_event(99, 5);
	for (t = medha_now(); !srv_cancelled(99) && medha_now() - t < 3;)
		usleep(1000);
	assert_int_equal(srv_cancelled(99), 1);
	medha_pcli_early(p, &dropped);
	assert_int_equal(dropped, 1);
	assert_int_equal(medha_pcli_take(p, 0.1, &o), 0);

	/* 4. refused, timed out, STATUS */
	submit(p, "bad", 13, 5);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_REFUSED);
	assert_int_equal(o.cookie, 13);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.msg.type, MEDHA_MSG_ERROR);
	assert_string_equal(o.msg.error.reason, "bad id");
	medha_pcli_out_clear(&o);
	submit(p, "never", 14, 0.3);
	medha_pcli_status(p, 3);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_STATUS);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.msg.status.workers, 7);
	medha_pcli_out_clear(&o);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_REFUSED);
	assert_int_equal(o.cookie, 14);
	assert_int_equal(o.rc, MEDHA_ETIMEOUT);
	medha_pcli_out_clear(&o);
	/* 5. any other message, answered to its cookie; SUBMIT and POLL
	   are the client's own */
	{
		struct medha_msg m = {.type = MEDHA_MSG_CANCEL, .cancel = 55};
		char why[128];
		assert_int_equal(medha_pcli_call(p, &m, 77, 3, why,
		                     sizeof(why)),
		    0);
		take(p, &o);
		assert_int_equal(o.kind, MEDHA_PCLI_ANSWER);
		assert_int_equal(o.cookie, 77);
		assert_int_equal(o.rc, 0);
		assert_int_equal(o.msg.type, MEDHA_MSG_OK);
		medha_pcli_out_clear(&o);
		assert_int_equal(srv_cancelled(55), 1);
		m.type = MEDHA_MSG_POLL;
		assert_int_equal(medha_pcli_call(p, &m, 78, 3, why,
		                     sizeof(why)),
		    MEDHA_EINVAL);
	}
	assert_true(medha_pcli_connected(p));
	assert_true(medha_now() - medha_pcli_last_ok(p) < 1);
}

/* A server, a client, the script, both closed. */
static void
script_run(void)
{
	struct medha_pcli *p;
	char why[256];

	srv_start();
	assert_int_equal(medha_pcli_open(&p, url, NULL, NULL, why,
	                     sizeof(why)),
	    0);
	run_script(p);
	medha_pcli_close(p);
	srv_stop();
}

static void
test_script(void **state)
{
	(void)state;
	script_run();
}

/* The same with a secret on both sides: every call after the
 * handshake. */
static void
test_secret(void **state)
{
	char path[128], why[256];
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "/tmp/medha-pcli-test-%d.key",
	    (int)getpid());
	assert_non_null(f = fopen(path, "w"));
	fputs("a secret of the pcli test, long enough\n", f);
	fclose(f);
	chmod(path, 0600);
	assert_int_equal(medha_auth_load(path, why, sizeof(why)), 0);
	script_run();
	medha_auth_set(NULL, 0);
	unlink(path);
}

/* Closed with calls in flight and answers not taken: nothing leaks,
 * nothing waits past the answers owed. */
static void
test_close_busy(void **state)
{
	struct medha_pcli *p;
	char why[256];
	double t;

	(void)state;
	srv_start();
	assert_int_equal(medha_pcli_open(&p, url, NULL, NULL, why,
	                     sizeof(why)),
	    0);
	submit(p, "never", 1, -1);
	submit(p, "h5", 2, 5);
	srv_event(77, 1);
	usleep(200000);
	t = medha_now();
	medha_pcli_close(p);
	/* the answers owed for a heartbeat at most (pcli.c, QUIET_MAX):
	   "never"'s does not come */
	assert_true(medha_now() - t < MEDHA_PROTO_HEARTBEAT_MS / 1e3 + 1.5);
	srv_stop();
}

/*
 * Closed again and again with calls in flight, answers arriving and a
 * POLL being sent again, while niced busy processes load every core:
 * no close waits (each within CLOSE_MAX s, a watchdog aborts the test
 * otherwise, so that a hang costs seconds, not the CI's budget).
 * $MEDHA_PCLI_CLOSES sets how many (200; 20 s at most in all).
 */
#define CLOSE_MAX 10.0

static volatile double close_since; /* 0: not in close */
static volatile int close_iter;

static void *
close_watch(void *arg)
{
	volatile int *stop = arg;

	while (!*stop) {
		double t = close_since;
		if (t > 0 && medha_now() - t > CLOSE_MAX) {
			fprintf(stderr, "medha_pcli_close hung (close %d, "
			    "%.0f s)\n", close_iter, medha_now() - t);
			abort();
		}
		usleep(100000);
	}
	return NULL;
}

static void
test_close_loop(void **state)
{
	const char *e = getenv("MEDHA_PCLI_CLOSES");
	int n = e != NULL ? atoi(e) : 200, ncpu, i;
	pid_t load[16];
	volatile int stop = 0;
	pthread_t w;
	double t0 = medha_now(), worst = 0;
	char why[256];

	(void)state;
	ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	ncpu = ncpu < 1 ? 1 : ncpu > 16 ? 16 : ncpu;
	for (i = 0; i < ncpu; i++) {
		if ((load[i] = fork()) == 0) {
			volatile unsigned long x = 0;
			if (nice(19) == -1) {
			}
			alarm(60); /* never outlives a killed test */
			for (;;)
				x++;
		}
		assert_true(load[i] > 0);
	}
	srv_start();
	pthread_mutex_lock(&S.mu);
	S.poll_hold = 0.02; /* a close waits for the POLL's answer */
	pthread_mutex_unlock(&S.mu);
	assert_int_equal(pthread_create(&w, NULL, close_watch,
	                     (void *)&stop),
	    0);
	srand((unsigned)getpid());
	for (i = 0; i < n && medha_now() - t0 < 20; i++) {
		struct medha_pcli *p;
		struct medha_pcli_out o;
		double t;
		assert_int_equal(medha_pcli_open(&p, url, NULL, NULL, why,
		                     sizeof(why)),
		    0);
		for (int k = 1; k <= 4; k++) {
			char id[16];
			snprintf(id, sizeof(id), "h%d", 100 * i + k);
			submit(p, id, (uint64_t)k, 2);
		}
		medha_pcli_status(p, 2);
		if (i % 4 == 0) /* some answers come first */
			medha_pcli_take(p, 0.05, &o), medha_pcli_out_clear(&o);
		usleep((useconds_t)(rand() % 3000));
		close_iter = i;
		close_since = t = medha_now();
		medha_pcli_close(p);
		close_since = 0;
		if (medha_now() - t > worst)
			worst = medha_now() - t;
	}
	stop = 1;
	pthread_join(w, NULL);
	for (int k = 0; k < ncpu; k++) {
		kill(load[k], SIGKILL);
		waitpid(load[k], NULL, 0);
	}
	srv_stop();
	fprintf(stderr, "%d closes, the longest %.3f s\n", i, worst);
	assert_true(i >= 10);
}

/*
 * A server that stops answering, silent past MEDHA_PROTO_DEAD_MS with
 * the connection up (a partition over TCP looks so for minutes): the
 * client drops the connection and dials a fresh one, and calls go
 * through again once it answers.
 */
static void
test_redial(void **state)
{
	struct medha_pcli *p;
	struct medha_pcli_out o;
	char why[256];
	uint64_t e0;
	double t0, t;

	(void)state;
	srv_start();
	assert_int_equal(medha_pcli_open(&p, url, NULL, NULL, why,
	                     sizeof(why)),
	    0);
	submit(p, "h5", 1, 3);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_ACCEPTED);
	medha_pcli_out_clear(&o);
	assert_int_equal(medha_pcli_redials(p), 0);
	e0 = medha_pcli_epoch(p);
	pthread_mutex_lock(&S.mu);
	S.mute = 1;
	pthread_mutex_unlock(&S.mu);
	t0 = medha_now();
	for (t = t0; medha_pcli_redials(p) == 0 && t - t0 < 10;
	     t = medha_now())
		usleep(10000);
	assert_int_equal(medha_pcli_redials(p), 1);
	/* not before the POLL sent at the mute, or just before, was due */
	assert_true(t - t0 > MEDHA_PROTO_DEAD_MS / 1e3 -
	                        MEDHA_PROTO_HEARTBEAT_MS / 1e3);
	for (; medha_pcli_epoch(p) == e0 && medha_now() - t0 < 10;)
		usleep(10000);
	assert_true(medha_pcli_epoch(p) > e0); /* the old one dropped */
	pthread_mutex_lock(&S.mu);
	S.mute = 0;
	pthread_mutex_unlock(&S.mu);
	submit(p, "h6", 2, 3);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_ACCEPTED);
	assert_int_equal(o.handle, 6);
	medha_pcli_out_clear(&o);
	assert_true(medha_pcli_connected(p));
	medha_pcli_close(p);
	srv_stop();
}

/*
 * Events handed over in the process (medha_pcli_deliver, as the router
 * gives its HTTP front door's) go the way a POLL's do: one before its
 * request's ACCEPTED waits for it, then each comes at once, in order;
 * the server's peers over ipc:// are not in this process.
 */
static void
test_deliver(void **state)
{
	struct medha_pcli *p;
	struct medha_pcli_out o;
	struct medha_msg_event e;
	char why[256];
	double t;

	(void)state;
	srv_start();
	assert_int_equal(medha_pcli_open(&p, url, NULL, NULL, why,
	                     sizeof(why)),
	    0);
	S.slow_handle = 1;
	submit(p, "slow", 11, 5);
	for (t = medha_now(); medha_now() - t < 3;) {
		pthread_mutex_lock(&S.mu);
		int held = S.slow != NULL;
		uint32_t peer = held ? S.slow_peer : 0;
		pthread_mutex_unlock(&S.mu);
		if (held) {
			assert_int_equal(medha_srv_peer_local(S.s, peer), 0);
			break;
		}
		usleep(1000);
	}
	event_make(&e, 1, 40);
	medha_pcli_deliver(p, &e);
	assert_null(e.ids); /* taken over */
	assert_int_equal(medha_pcli_early(p, NULL), 1);
	assert_int_equal(medha_pcli_take(p, 0.2, &o), 0);
	pthread_mutex_lock(&S.mu);
	S.release = 1;
	pthread_mutex_unlock(&S.mu);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_ACCEPTED);
	assert_int_equal(o.cookie, 11);
	medha_pcli_out_clear(&o);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_EVENT);
	assert_int_equal(o.cookie, 11);
	assert_int_equal(o.ev.ids[0], 40);
	medha_pcli_out_clear(&o);
	event_make(&e, 1, 41);
	medha_pcli_deliver(p, &e);
	event_make(&e, 1, -1);
	medha_pcli_deliver(p, &e);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_EVENT);
	assert_int_equal(o.ev.kind, MEDHA_EVENT_TOKENS);
	assert_int_equal(o.ev.ids[0], 41);
	medha_pcli_out_clear(&o);
	take(p, &o);
	assert_int_equal(o.kind, MEDHA_PCLI_EVENT);
	assert_int_equal(o.cookie, 11);
	assert_int_equal(o.ev.kind, MEDHA_EVENT_RECORD);
	medha_pcli_out_clear(&o);
	assert_int_equal(medha_pcli_early(p, NULL), 0);
	medha_pcli_close(p);
	srv_stop();

	/* a client over inproc:// is in this process */
	{
		struct medha_srv *s;
		struct medha_srv_ev ev;
		char u[64];
		snprintf(u, sizeof(u), "inproc://pcli-test-%d", (int)getpid());
		assert_int_equal(medha_srv_open(&s, u, why, sizeof(why)), 0);
		assert_int_equal(medha_pcli_open(&p, u, NULL, NULL, why,
		                     sizeof(why)),
		    0);
		assert_int_equal(medha_srv_next(s, 3, &ev), 0);
		assert_int_equal(ev.kind, MEDHA_SRV_CALL); /* its POLL */
		assert_int_equal(medha_srv_peer_local(s, ev.peer), 1);
		medha_pcli_close(p);
		medha_srv_close(s);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_script),
	    cmocka_unit_test(test_secret),
	    cmocka_unit_test(test_close_busy),
	    cmocka_unit_test(test_deliver),
	    cmocka_unit_test(test_close_loop),
	    cmocka_unit_test(test_redial),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
