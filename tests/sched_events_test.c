/*
 * sched_events_test.c: the scheduler core as a live scheduler drives it,
 * event by event rather than through the simulator: stable handles that
 * are never reused, per-item results that end a request early (a stop),
 * cancellation and a lost worker, each ending its requests with exactly
 * one record and giving their KV back, and memory that stays flat over a
 * million requests served.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "sched/sched.h"

struct fx {
	struct medha_pred p;
	struct medha_sched *s;
};

static void
fx_open_seqs(struct fx *f, int64_t kv_blocks, int max_seqs)
{
	struct medha_pred_model m;
	struct medha_sched_config c;

	assert_int_equal(medha_model_resolve("llama3-8b", &m), 0);
	assert_int_equal(medha_pred_init(&f->p, medha_gpu_find("a100"), &m, 1,
	                     1, 1),
	    0);
	medha_sched_config_default(&c);
	c.recover_timeout = 0; /* a lost worker's requests fail */
	c.kv_blocks = kv_blocks;
	c.max_seqs = max_seqs;
	assert_int_equal(medha_sched_init(&f->s, &c, &f->p), 0);
}

static void
fx_open(struct fx *f, int64_t kv_blocks)
{
	fx_open_seqs(f, kv_blocks, 0);
}

static void
fx_close(struct fx *f)
{
	medha_sched_free(f->s);
	medha_pred_free(&f->p);
}

static uint64_t
arrive(struct fx *f, const char *id, int64_t prompt, int64_t out, double now)
{
	struct medha_reqspec rs = {0};
	uint64_t h = 0;

	snprintf(rs.id, sizeof(rs.id), "%s", id);
	rs.arrival = now;
	rs.prompt_tokens = prompt;
	rs.max_tokens = out;
	rs.sampling = medha_sampling_greedy;
	assert_int_equal(medha_sched_arrive(f->s, &rs, now, &h), 0);
	assert_true(h != 0);
	return h;
}

/* Run one batch and report it done with tokens 7, stopping handle `stop`. */
static int
step(struct fx *f, double now, uint64_t stop)
{
	struct medha_sched_batch b;
	struct medha_sched_result res[512];
	int rc = medha_sched_next_batch(f->s, now, &b);

	if (rc != 1)
		return rc;
	assert_true(b.n_items <= 512);
	for (int i = 0; i < b.n_items; i++) {
		res[i].token = 7;
		res[i].stop = b.items[i].req == stop &&
		        (b.items[i].decode || b.items[i].last)
		    ? MEDHA_FINISH_STOP
		    : 0;
	}
	assert_int_equal(medha_sched_batch_done(f->s, &b, res, now + 0.01), 0);
	return 1;
}

/* The next record; its gap histogram (not looked at here) freed. */
static int
pop(struct fx *f, struct medha_record *rec)
{
	int rc = medha_sched_pop_record(f->s, rec);

	if (rc == 1)
		medha_tbt_free(&rec->tbt);
	return rc;
}

static void
test_handles_not_reused(void **state)
{
	struct fx f;
	struct medha_record rec;
	uint64_t a, b;

	(void)state;
	fx_open(&f, 10000);
	a = arrive(&f, "a", 40, 2, 0);
	assert_non_null(medha_sched_req(f.s, a));
	assert_int_equal(medha_sched_req(f.s, a)->handle, a);
	while (step(&f, 0, 0) == 1)
		;
	assert_int_equal(pop(&f, &rec), 1);
	assert_string_equal(rec.id, "a");
	assert_null(medha_sched_req(f.s, a));
	/* the freed slot is taken again, under another handle */
	b = arrive(&f, "b", 40, 2, 1);
	assert_true(b != a);
	assert_int_equal(b & 0xffffffffu, a & 0xffffffffu);
	assert_null(medha_sched_req(f.s, a));
	assert_int_equal(medha_sched_cancel(f.s, a, NULL, 1), MEDHA_ENOTFOUND);
	fx_close(&f);
}

static void
test_stop_result(void **state)
{
	struct fx f;
	struct medha_record rec;
	uint64_t a, b;
	int got = 0;

	(void)state;
	fx_open(&f, 10000);
	a = arrive(&f, "a", 64, 100, 0);
	b = arrive(&f, "b", 64, 3, 0);
	/* a's first token is fine, its third decode says stop */
	for (int i = 0; i < 3; i++)
		assert_int_equal(step(&f, i * 0.1, 0), 1);
	assert_int_equal(step(&f, 1, a), 1);
	while (step(&f, 2, 0) == 1)
		;
	while (pop(&f, &rec) == 1) {
		got++;
		assert_int_equal(rec.status, MEDHA_STATUS_OK);
		if (strcmp(rec.id, "a") == 0) {
			assert_int_equal(rec.finish_reason, MEDHA_FINISH_STOP);
			assert_int_equal(rec.output_tokens, 3);
		} else {
			assert_int_equal(rec.finish_reason,
			    MEDHA_FINISH_LENGTH);
			assert_int_equal(rec.output_tokens, 3);
		}
	}
	assert_int_equal(got, 2);
	assert_int_equal(medha_sched_pending(f.s), 0);
	assert_int_equal(medha_sched_group_reserved(f.s, 0), 0);
	(void)b;
	fx_close(&f);
}

static void
test_cancel_frees_kv(void **state)
{
	struct fx f;
	struct medha_record rec;
	struct medha_sched_batch b;
	uint64_t a;

	(void)state;
	fx_open(&f, 10000);
	a = arrive(&f, "a", 5000, 10, 0);
	/* a chunk of its prompt is in flight when the client goes away */
	assert_int_equal(medha_sched_next_batch(f.s, 0, &b), 1);
	assert_true(medha_sched_group_reserved(f.s, 0) > 0);
	assert_int_equal(medha_sched_cancel(f.s, a, "client went away", 0.01),
	    0);
	assert_int_equal(medha_sched_group_reserved(f.s, 0), 0);
	assert_int_equal(medha_sched_batch_done(f.s, &b, NULL, 0.02), 0);
	assert_int_equal(pop(&f, &rec), 1);
	assert_int_equal(rec.status, MEDHA_STATUS_CANCELLED);
	assert_string_equal(rec.reason, "client went away");
	assert_int_equal(pop(&f, &rec), 0);
	assert_int_equal(medha_sched_next_batch(f.s, 0.03, &b), 0);
	assert_int_equal(medha_sched_cancel(f.s, a, NULL, 1), MEDHA_ENOTFOUND);
	fx_close(&f);
}

static void
test_worker_lost(void **state)
{
	struct fx f;
	struct medha_record rec;
	struct medha_sched_batch b;
	int failed = 0, ok = 0;

	(void)state;
	/* room for one request at a time: the second waits for memory */
	fx_open(&f, 70);
	arrive(&f, "running", 1000, 10, 0);
	arrive(&f, "waiting", 1000, 10, 0);
	assert_int_equal(medha_sched_next_batch(f.s, 0, &b), 1);
	assert_int_equal(medha_sched_worker_lost(f.s, "worker 0 lost", 0.5), 1);
	assert_int_equal(medha_sched_group_reserved(f.s, 0), 0);
	assert_int_equal(pop(&f, &rec), 1);
	assert_string_equal(rec.id, "running");
	assert_int_equal(rec.status, MEDHA_STATUS_FAILED);
	assert_string_equal(rec.reason, "worker 0 lost");
	failed++;
	/* the waiting one is served once a worker is back */
	while (step(&f, 1, 0) == 1)
		;
	while (pop(&f, &rec) == 1) {
		assert_string_equal(rec.id, "waiting");
		assert_int_equal(rec.status, MEDHA_STATUS_OK);
		ok++;
	}
	assert_int_equal(failed + ok, 2);
	fx_close(&f);
}

/* A worker's cache holds max_seqs sequences: never more are admitted. */
static void
test_max_seqs(void **state)
{
	struct fx f;
	struct medha_record rec;
	int done = 0;

	(void)state;
	fx_open_seqs(&f, 100000, 2);
	for (int i = 0; i < 5; i++)
		arrive(&f, "r", 100, 5, 0);
	for (int it = 0; it < 1000 && medha_sched_pending(f.s) > 0; it++) {
		int admitted = 0;
		step(&f, it * 0.01, 0);
		for (int i = 0; i < medha_sched_pending(f.s); i++)
			admitted += medha_sched_active(f.s, i)->state !=
			    MEDHA_REQ_WAITING;
		assert_true(admitted <= 2);
	}
	while (pop(&f, &rec) == 1) {
		assert_int_equal(rec.status, MEDHA_STATUS_OK);
		done++;
	}
	assert_int_equal(done, 5);
	fx_close(&f);
}

/* A million requests, 64 at a time: the scheduler's memory stays flat. */
static void
test_memory_flat(void **state)
{
	struct fx f;
	struct medha_record rec;
	size_t fp_early = 0, fp_late;
	struct mallinfo2 m0, m1;
	long served = 0;
	char id[32];
	double t = 0;

	(void)state;
	fx_open(&f, 100000);
	for (long round = 0; served < 1000000; round++) {
		for (int i = 0; i < 64; i++) {
			snprintf(id, sizeof(id), "%ld", round * 64 + i);
			arrive(&f, id, 16 + i, 1 + i % 3, t);
		}
		while (step(&f, t, 0) == 1)
			t += 0.01;
		while (pop(&f, &rec) == 1) {
			assert_int_equal(rec.status, MEDHA_STATUS_OK);
			served++;
		}
		if (round == 100) {
			fp_early = medha_sched_footprint(f.s);
			m0 = mallinfo2();
		}
	}
	fp_late = medha_sched_footprint(f.s);
	m1 = mallinfo2();
	assert_int_equal(served, 1000000);
	assert_int_equal(medha_sched_pending(f.s), 0);
	assert_int_equal(fp_late, fp_early);
	/* and what malloc holds did not grow either (64 KiB of slack) */
	assert_true(m1.uordblks <= m0.uordblks + 65536);
	fx_close(&f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_handles_not_reused),
	    cmocka_unit_test(test_stop_result),
	    cmocka_unit_test(test_cancel_frees_kv),
	    cmocka_unit_test(test_worker_lost),
	    cmocka_unit_test(test_max_seqs),
	    cmocka_unit_test(test_memory_flat),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
