/*
 * link_test.c: the req/rep transport (net/link.c) on a real ipc:// socket:
 * calls answered at once and held answers (long polls) interleaved on
 * several contexts, a client that dials before the server listens, a
 * closed connection reported, and a frame over the size limit costing
 * its sender the connection while the server goes on serving; and a
 * client of a streaming server that stops collecting its events is
 * named as not reading after MEDHA_CLIENT_STALL_S (serve/clients.c).
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
#include <unistd.h>

#include "serve/clients.h"
#include "net/link.h"
#include "net/proto.h"

#include <time.h>

static char url[128];

/*
 * The server: echoes each request, but holds one starting with 'H' until
 * a request "release" comes, then answers the held one with "late".
 * "quit" stops it. Counts closed connections.
 */
struct srv_state {
	struct medha_srv *s;
	int gone;
	int calls;
};

static void *
srv_main(void *arg)
{
	struct srv_state *st = arg;
	struct medha_srv_call *held = NULL;
	struct medha_srv_ev ev;

	for (;;) {
		assert_int_equal(medha_srv_next(st->s, 0.2, &ev), 0);
		if (ev.kind == MEDHA_SRV_GONE) {
			st->gone++;
			continue;
		}
		if (ev.kind != MEDHA_SRV_CALL)
			continue;
		st->calls++;
		if (ev.len == 4 && memcmp(ev.data, "quit", 4) == 0) {
			medha_srv_reply(st->s, ev.call, "bye", 3);
			return NULL;
		}
		if (ev.len > 0 && ((const char *)ev.data)[0] == 'H') {
			held = ev.call;
			continue;
		}
		if (ev.len == 7 && memcmp(ev.data, "release", 7) == 0 &&
		    held != NULL) {
			medha_srv_reply(st->s, held, "late", 4);
			held = NULL;
		}
		medha_srv_reply(st->s, ev.call, ev.data, ev.len);
	}
}

struct bg_call {
	struct medha_cli *c;
	int ctx;
	const char *msg;
	void *rep;
	size_t n;
	int rc;
};

static void *
bg_main(void *arg)
{
	struct bg_call *b = arg;

	b->rc = medha_cli_call(b->c, b->ctx, b->msg, strlen(b->msg), &b->rep,
	    &b->n, 5);
	return NULL;
}

static void
call_ok(struct medha_cli *c, int ctx, const char *msg, const char *want)
{
	void *rep;
	size_t n;

	assert_int_equal(medha_cli_call(c, ctx, msg, strlen(msg), &rep, &n, 5),
	    0);
	assert_int_equal(n, strlen(want));
	assert_memory_equal(rep, want, n);
	free(rep);
}

static void
test_link(void **state)
{
	struct srv_state st = {0};
	struct medha_cli *c, *c2;
	struct bg_call b;
	pthread_t srv, bg;
	char why[256], *big;
	void *rep;
	size_t n;

	(void)state;
	snprintf(url, sizeof(url), "ipc:///tmp/medha-link-test-%d.sock",
	    (int)getpid());
	/* the client dials first; its call waits until the server is up */
	assert_int_equal(medha_cli_open(&c, url, 3, why, sizeof(why)), 0);
	b = (struct bg_call){c, 0, "early", NULL, 0, -99};
	assert_int_equal(pthread_create(&bg, NULL, bg_main, &b), 0);
	usleep(100000);
	assert_int_equal(medha_srv_open(&st.s, url, why, sizeof(why)), 0);
	assert_int_equal(pthread_create(&srv, NULL, srv_main, &st), 0);
	pthread_join(bg, NULL);
	assert_int_equal(b.rc, 0);
	assert_memory_equal(b.rep, "early", 5);
	free(b.rep);
	assert_true(medha_cli_connected(c));

	/* a held call on context 0 while context 1 goes on */
	b = (struct bg_call){c, 0, "Hold me", NULL, 0, -99};
	assert_int_equal(pthread_create(&bg, NULL, bg_main, &b), 0);
	for (int i = 0; i < 50; i++)
		call_ok(c, 1, "ping", "ping");
	call_ok(c, 2, "release", "release");
	pthread_join(bg, NULL);
	assert_int_equal(b.rc, 0);
	assert_int_equal(b.n, 4);
	assert_memory_equal(b.rep, "late", 4);
	free(b.rep);

	/* a frame over the limit costs its sender the connection; the
	 * client redials and the server goes on */
	big = calloc(1, MEDHA_LINK_MAX_FRAME + 16);
	assert_non_null(big);
	n = (size_t)medha_cli_call(c, 1, big, MEDHA_LINK_MAX_FRAME + 16, &rep,
	    &n, 2);
	assert_true((int)n == MEDHA_EPEER || (int)n == MEDHA_ETIMEOUT);
	free(big);
	call_ok(c, 1, "again", "again");
	/* a second client is served meanwhile; its close is reported */
	assert_int_equal(medha_cli_open(&c2, url, 1, why, sizeof(why)), 0);
	call_ok(c2, 0, "two", "two");
	medha_cli_close(c2);
	for (int i = 0; i < 50 && st.gone == 0; i++)
		usleep(20000);
	assert_true(st.gone >= 1);

	call_ok(c, 2, "quit", "bye");
	pthread_join(srv, NULL);
	medha_cli_close(c);
	medha_srv_close(st.s);

	/* bad urls are refused with a reason */
	assert_int_equal(medha_srv_open(&st.s, "nope://x", why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "nope://x"));
}

static void
test_deaf_client(void **state)
{
	struct medha_clients cs = {.srv = NULL};
	struct medha_msg_event ev;
	struct medha_client *c;
	struct timespec ts;
	double t;

	(void)state;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
	assert_non_null(c = medha_clients_find(&cs, 7, 1));
	assert_non_null(medha_clients_find(&cs, 8, 1));
	/* nothing queued: never deaf, however long it has not polled */
	assert_int_equal(medha_clients_tick(&cs, t + 1000), 0);
	memset(&ev, 0, sizeof(ev));
	ev.kind = MEDHA_EVENT_TOKENS;
	ev.handle = 1;
	medha_clients_push(&cs, 7, &ev);
	assert_int_equal(c->nq, 1);
	assert_int_equal(medha_clients_tick(&cs, t + 1), 0);
	assert_int_equal(medha_clients_tick(&cs, t + MEDHA_CLIENT_STALL_S - 1),
	    0);
	assert_int_equal(medha_clients_tick(&cs, t + MEDHA_CLIENT_STALL_S + 2),
	    7);
	medha_clients_drop(&cs, 7);
	assert_int_equal(medha_clients_tick(&cs, t + 1000), 0);
	medha_clients_free(&cs);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_link),
	    cmocka_unit_test(test_deaf_client),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
