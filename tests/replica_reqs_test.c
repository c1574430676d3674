/*
 * replica_reqs_test.c: a live replica's request states (serve/replica/
 * reqs.c, rep_req_move) on a replica with no socket: each move's effect
 * on the tables that find a request by handle, the live counts of the
 * front and of its client, the prompt bytes held, the count of requests
 * being tokenized, and the frees queued for the workers at a request's
 * end (only for one a worker held, and only without the prefix cache,
 * whose TRIM ops do it). A failed move (out of memory) is not tested:
 * it changes nothing by construction.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "serve/replica/impl.h"

#define PEER 7

/* A replica of two workers, worker 0 there, client PEER known. */
static struct medha_replica *
replica(void)
{
	struct medha_replica *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	r->cfg.workers = 2;
	r->t0 = medha_now();
	assert_int_equal(rep_seqs_init(&r->seqs, 2), 0);
	rep_seqs_join(&r->seqs, 0);
	assert_non_null(medha_clients_find(&r->f.clients, PEER, 1));
	return r;
}

static void
replica_free(struct medha_replica *r)
{
	rep_reqs_free(r);
	rep_seqs_free(&r->seqs);
	medha_clients_free(&r->f.clients);
	free(r);
}

static int64_t
client_live(struct medha_replica *r)
{
	return medha_clients_find(&r->f.clients, PEER, 0)->live;
}

/* A request of n prompt ids from PEER, NEW. */
static struct lreq *
request(int64_t n)
{
	struct lreq *q = rep_req_new();

	assert_non_null(q);
	q->peer = PEER;
	q->n_prompt = n;
	q->ids = calloc((size_t)n, sizeof(*q->ids));
	q->held = n * (int64_t)sizeof(*q->ids);
	return q;
}

/* NEW -> QUEUED -> RUNNING -> freed: in the table by the core's handle,
 * live while there, its sequence freed on the one worker there. */
static void
test_arrive_run_end(void **state)
{
	struct medha_replica *r = replica();
	struct lreq *q = request(100);

	(void)state;
	q->handle = (uint64_t)3 << 32 | 5; /* generation 3, slot 5 */
	assert_int_equal(rep_req_move(r, q, REP_REQ_ARRIVE), 0);
	assert_int_equal(q->state, REP_REQ_QUEUED);
	assert_true(q->ch == q->handle);
	assert_ptr_equal(rep_lreq_get(r, q->handle), q);
	assert_null(rep_lreq_get(r, (uint64_t)2 << 32 | 5)); /* stale */
	assert_int_equal(r->f.live, 1);
	assert_int_equal(client_live(r), 1);
	assert_int_equal(r->reqs.held, 400);
	assert_int_equal(r->reqs.n[REP_REQ_QUEUED], 1);

	assert_int_equal(rep_req_move(r, q, REP_REQ_SEND), 0);
	assert_int_equal(q->state, REP_REQ_RUNNING);
	double first = q->first_batch;
	assert_true(first > 0);
	/* a preempted request's first item again: still its first batch */
	assert_int_equal(rep_req_move(r, q, REP_REQ_SEND), 0);
	assert_true(q->first_batch == first);
	assert_int_equal(r->reqs.n[REP_REQ_QUEUED], 0);
	assert_int_equal(r->reqs.n[REP_REQ_RUNNING], 1);

	uint64_t h = q->handle;
	assert_int_equal(rep_req_move(r, q, REP_REQ_END), 0);
	assert_null(rep_lreq_get(r, h));
	assert_int_equal(r->f.live, 0);
	assert_int_equal(client_live(r), 0);
	assert_int_equal(r->reqs.held, 0);
	assert_int_equal(r->reqs.n[REP_REQ_RUNNING], 0);
	/* worker 0 frees it after the last batch formed; worker 1 is not
	   there, and gets nothing */
	assert_int_equal(r->seqs.q[0].n, 1);
	assert_true(r->seqs.q[0].h[0] == h && r->seqs.q[0].keep[0] == 0);
	assert_int_equal(r->seqs.q[1].n, 0);
	replica_free(r);
}

/* A request no worker held, or one under the prefix cache, ends with
 * no free queued. */
static void
test_end_no_free(void **state)
{
	struct medha_replica *r = replica();
	struct lreq *q = request(10), *p = request(10);

	(void)state;
	q->handle = 1;
	assert_int_equal(rep_req_move(r, q, REP_REQ_ARRIVE), 0);
	assert_int_equal(rep_req_move(r, q, REP_REQ_END), 0); /* QUEUED */
	r->core.prefix = 1;
	p->handle = 2;
	assert_int_equal(rep_req_move(r, p, REP_REQ_ARRIVE), 0);
	assert_int_equal(rep_req_move(r, p, REP_REQ_SEND), 0);
	assert_int_equal(rep_req_move(r, p, REP_REQ_END), 0); /* RUNNING */
	assert_int_equal(r->seqs.q[0].n, 0);
	assert_int_equal(r->f.live, 0);
	replica_free(r);
}

/* NEW -> TOKENIZING -> QUEUED -> freed: found by the client's handle
 * throughout, by the core's once it has one; counted as tokenizing
 * until it arrives. */
static void
test_tokenize_arrive(void **state)
{
	struct medha_replica *r = replica();
	struct lreq *q = request(8);
	uint64_t ch;

	(void)state;
	q->ch = ch = rep_reqs_pre_handle(r);
	assert_true((ch & 0xffffffffu) == PRE_SLOT);
	assert_true(rep_reqs_pre_handle(r) != ch); /* each its own */
	assert_int_equal(rep_req_move(r, q, REP_REQ_ACK), 0);
	assert_int_equal(q->state, REP_REQ_TOKENIZING);
	assert_ptr_equal(rep_lreq_get(r, ch), q);
	assert_int_equal(rep_reqs_tokenizing(r), 1);
	assert_int_equal(r->f.live, 1);
	assert_int_equal(client_live(r), 1);
	assert_int_equal(r->reqs.held, 0); /* its ids are not there yet */

	q->handle = 9;
	assert_int_equal(rep_req_move(r, q, REP_REQ_ARRIVE), 0);
	assert_int_equal(rep_reqs_tokenizing(r), 0);
	assert_true(q->ch == ch); /* the client's handle stays */
	assert_ptr_equal(rep_lreq_get(r, ch), q);
	assert_ptr_equal(rep_lreq_get(r, 9), q);
	assert_int_equal(r->f.live, 1); /* counted once */
	assert_int_equal(client_live(r), 1);
	assert_int_equal(r->reqs.held, 32);

	assert_int_equal(rep_req_move(r, q, REP_REQ_END), 0);
	assert_null(rep_lreq_get(r, ch));
	assert_null(rep_lreq_get(r, 9));
	assert_int_equal(r->f.live, 0);
	assert_int_equal(client_live(r), 0);
	assert_int_equal(r->reqs.held, 0);
	replica_free(r);
}

/* TOKENIZING -> CANCELLING (twice: the same) -> freed, and a
 * TOKENIZING one dropped: neither leaves a count or a table entry. */
static void
test_cancel_drop(void **state)
{
	struct medha_replica *r = replica();
	struct lreq *q = request(8), *p = request(8), *n = request(8);
	uint64_t qc, pc;

	(void)state;
	q->ch = qc = rep_reqs_pre_handle(r);
	p->ch = pc = rep_reqs_pre_handle(r);
	assert_int_equal(rep_req_move(r, q, REP_REQ_ACK), 0);
	assert_int_equal(rep_req_move(r, p, REP_REQ_ACK), 0);
	assert_int_equal(r->f.live, 2);
	assert_int_equal(rep_req_move(r, q, REP_REQ_CANCEL), 0);
	assert_int_equal(rep_req_move(r, q, REP_REQ_CANCEL), 0);
	assert_int_equal(q->state, REP_REQ_CANCELLING);
	assert_int_equal(rep_reqs_tokenizing(r), 2); /* both still are */
	assert_int_equal(rep_req_move(r, q, REP_REQ_END), 0);
	assert_int_equal(rep_req_move(r, p, REP_REQ_DROP), 0);
	assert_null(rep_lreq_get(r, qc));
	assert_null(rep_lreq_get(r, pc));
	assert_int_equal(rep_reqs_tokenizing(r), 0);
	assert_int_equal(r->f.live, 0);
	assert_int_equal(client_live(r), 0);
	/* a NEW one refused: let go, nothing counted */
	assert_int_equal(rep_req_move(r, n, REP_REQ_DROP), 0);
	assert_int_equal(r->f.live, 0);
	for (int s = 0; s < REP_REQ_NSTATES; s++)
		assert_int_equal(r->reqs.n[s], 0);
	replica_free(r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_arrive_run_end),
	    cmocka_unit_test(test_end_no_free),
	    cmocka_unit_test(test_tokenize_arrive),
	    cmocka_unit_test(test_cancel_drop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
