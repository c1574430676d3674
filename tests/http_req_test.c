/*
 * http_req_test.c: an HTTP request's life in the front door
 * (serve/http/req.c), with no socket: hreq_move takes a request along
 * CONTINUE -> BODY -> QUEUED -> SUBMITTED -> LIVE and on to ANSWERED or
 * GONE, refuses a change the life does not have (the state stays), puts
 * a queued request on the sender's queue and holds it for the sender,
 * and reaps one (onto h->reap, out of h->all) only once it is answered
 * or gone and nothing is owed: not while the sender holds it, a SUBMIT
 * is unanswered or an accepted choice has not ended.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "serve/http/impl.h"

static struct medha_http *
http_new(void)
{
	struct medha_http *h = calloc(1, sizeof(*h));

	assert_non_null(h);
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	return h;
}

static struct hreq *
req_new(struct medha_http *h)
{
	struct hreq *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	r->h = h;
	strcpy(r->id, "cmpl-test");
	r->next = h->all;
	if (h->all != NULL)
		h->all->prev = r;
	h->all = r;
	return r; /* HS_CONTINUE: calloc's 0 */
}

static void
http_free(struct medha_http *h)
{
	while (h->reap != NULL) {
		struct hreq *r = h->reap;
		h->reap = r->qnext;
		free(r);
	}
	while (h->all != NULL) {
		struct hreq *r = h->all;
		h->all = r->next;
		free(r);
	}
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

/* The way in, a change it does not have refused at each step. */
static void
test_way_in(void **state)
{
	struct medha_http *h = http_new();
	struct hreq *r = req_new(h);

	(void)state;
	assert_int_equal(r->state, HS_CONTINUE);
	assert_int_equal(hreq_move(h, r, HS_QUEUED), HS_CONTINUE);
	assert_int_equal(hreq_move(h, r, HS_GONE), HS_CONTINUE);
	assert_int_equal(hreq_move(h, r, HS_BODY), HS_BODY);
	assert_int_equal(hreq_move(h, r, HS_LIVE), HS_BODY);
	assert_int_equal(hreq_move(h, r, HS_QUEUED), HS_QUEUED);
	assert_ptr_equal(h->sq, r); /* the sender's, and held by it */
	assert_ptr_equal(h->sq_tail, r);
	assert_int_equal(r->sending, 1);
	assert_int_equal(hreq_move(h, r, HS_STREAM), HS_QUEUED);
	assert_int_equal(hreq_move(h, r, HS_SUBMITTED), HS_SUBMITTED);
	assert_int_equal(hreq_move(h, r, HS_SUBMITTED), HS_SUBMITTED);
	assert_int_equal(hreq_move(h, r, HS_LIVE), HS_LIVE);
	assert_int_equal(hreq_move(h, r, HS_REAPED), HS_LIVE);
	assert_int_equal(hreq_move(h, r, HS_BODY), HS_LIVE);
	http_free(h);
}

/* Reaped only once answered or gone and owed nothing. */
static void
test_reap(void **state)
{
	struct medha_http *h = http_new();
	struct hreq *r = req_new(h), *s = req_new(h);

	(void)state;
	hreq_move(h, r, HS_BODY);
	hreq_move(h, r, HS_QUEUED);
	hreq_move(h, r, HS_SUBMITTED);
	r->npend = 1; /* a SUBMIT not answered yet */
	hreq_move(h, r, HS_GONE);
	assert_int_equal(r->state, HS_GONE);
	assert_null(h->reap); /* the sender holds it, a SUBMIT is due */
	r->sending = 0;
	hreq_reap(h, r);
	assert_null(h->reap);
	r->npend = 0;
	r->nup = 1; /* accepted, its record not come */
	hreq_reap(h, r);
	assert_null(h->reap);
	assert_int_equal(hreq_move(h, r, HS_ANSWERED), HS_GONE);
	r->nend = 1;
	hreq_reap(h, r);
	assert_ptr_equal(h->reap, r);
	assert_int_equal(r->state, HS_REAPED);
	assert_ptr_equal(h->all, s); /* out of the list, s kept */
	assert_null(s->prev);
	assert_int_equal(hreq_move(h, r, HS_GONE), HS_REAPED);

	/* a body that failed: answered, nothing owed, reaped at once */
	hreq_move(h, s, HS_BODY);
	assert_int_equal(hreq_move(h, s, HS_ANSWERED), HS_REAPED);
	assert_ptr_equal(h->reap, s);
	assert_null(h->all);
	http_free(h);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_way_in),
	    cmocka_unit_test(test_reap),
	};

	medha_log_level = MEDHA_LOG_ERROR - 1; /* quiet: refusals log errors */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
