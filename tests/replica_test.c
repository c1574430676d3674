/*
 * replica_test.c: the live replica (libcore/serve/replica/) in this
 * process, on an ipc:// socket in a temporary directory, run by
 * medha_replica_run() in a thread until a stop flag is set. The test
 * plays its one worker (a sim worker of llama3-8b on an a100, answering
 * each batch at once with the sim backend's placeholder tokens) and its
 * clients, through tests/scripted_worker.h. The checks, in order on one
 * replica:
 *  - before any worker: STATUS says not ready (0 of 1 workers), a
 *    SUBMIT is refused (MEDHA_ENOSPACE), READY from a peer that never
 *    said HELLO is refused, and HELLOs from which no replica can be made
 *    (an unknown device, another vocabulary, a layout of two workers,
 *    a backend not built, a model path: the scheduler opens no file a
 *    worker names) are refused with their reasons and leave it not
 *    ready;
 *  - a good HELLO is welcomed as worker 0 and the replica is ready:
 *    STATUS gives the worker's KV blocks and block size, the model and
 *    the backend; a second HELLO for rank 0 from another connection is
 *    refused while the first is there, as are layers that are not the
 *    stage's;
 *  - SUBMITs are ACCEPTED with their ids, and each request's tokens
 *    stream back (the worker's tokens, in order) and end with exactly
 *    one record, its last event: status ok, finish "length", the counts
 *    and token ids; token ids sent as the prompt reach the worker as
 *    they were, a prompt longer than a chunk (fixed chunks of 64 here)
 *    in pieces; a request that asks for no stream gets its record
 *    alone; every request that ran is freed on the worker;
 *  - refusals: a text prompt without a tokenizer, ids outside the
 *    vocabulary, a made-up prompt larger than the KV cache, ids past
 *    the bytes the replica holds for prompts (a made-up prompt as
 *    long holds none: taken);
 *  - CANCEL of an unknown handle, of another client's request and of
 *    an ended one is an ERROR; of a running request it is OK, and its
 *    record says "cancelled";
 *  - a worker that says READY with a batch out (it dropped it) has
 *    the request recomputed from 0 with the token it had sent: it ends
 *    ok with the tokens it would have had, not failed;
 *  - a HELLO again before the worker's first READY (sent again while
 *    its WELCOME was on the way) welcomes the same worker, nothing
 *    lost: a request that came meanwhile runs once;
 *  - a stop with a request in flight refuses new SUBMITs and says not
 *    ready, lets the request finish (all its tokens, status ok), and
 *    then medha_replica_run() returns 0;
 *  - with the prefix cache, STATUS's kv_used counts the cached blocks a
 *    running request holds (its own full prompt blocks, given to the
 *    cache), and not those of an ended one (evictable).
 *  - a refused HELLO leaves the replica as it was: the first one makes
 *    no core (STATUS reports no KV blocks, a SUBMIT is not ready, a
 *    right worker is then welcome), and one of another model, with no
 *    worker there, neither drops the replica's core nor makes its own;
 *  - with KVP, STATUS's kv_blocks and kv_used are those of all the
 *    groups, a request's pieces on two groups counted on both;
 *  - the layout changes with the workers only when nothing is in
 *    flight: workers of spp 2 after those of kvp 2 are refused (both
 *    layouts named) while a request waits, which kvp 2 workers then
 *    serve, and once none is left get a core of their own (one KV
 *    group, two batches in flight).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>

#include "serve/replica/replica.h"
#include "scripted_worker.h"

#define WATCHDOG 60 /* s: the whole test, whatever hangs */
#define VOCAB 128256

static struct {
	char dir[128];
	char url[192];
	struct medha_replica *rep;
	pthread_t thr;
	int running;
	volatile sig_atomic_t stop;
	int run_rc;
	struct sw w;  /* the worker */
	struct cl c;  /* a client */
	struct cl c2; /* another */
} R;

static void *
replica_main(void *arg)
{
	(void)arg;
	R.run_rc = medha_replica_run(R.rep, &R.stop);
	return NULL;
}

static void
on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "replica_test: watchdog: hung\n";
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

static int
setup(void **state)
{
	struct medha_replica_config c;
	char why[256];

	(void)state;
	signal(SIGALRM, on_alarm);
	alarm(WATCHDOG);
	sw_tmpdir(R.dir, sizeof(R.dir), "replica");
	snprintf(R.url, sizeof(R.url), "ipc://%s/replica.sock", R.dir);
	medha_replica_config_default(&c);
	c.listen = R.url;
	c.workers = 1;
	c.drain_timeout = 10;
	c.sched.chunk = 64; /* fixed chunks: long prompts come in several */
	c.max_queue_bytes = 64 << 10; /* 16384 ids (test_refused) */
	if (medha_replica_open(&R.rep, &c, why, sizeof(why)) != 0) {
		print_error("replica: %s\n", why);
		return -1;
	}
	if (pthread_create(&R.thr, NULL, replica_main, NULL) != 0)
		return -1;
	R.running = 1;
	if (sw_open(&R.w, R.url) != 0 || cl_open(&R.c, R.url) != 0 ||
	    cl_open(&R.c2, R.url) != 0)
		return -1;
	return 0;
}

static int
teardown(void **state)
{
	char path[256];

	(void)state;
	R.stop = 1;
	if (R.running)
		pthread_join(R.thr, NULL);
	R.running = 0;
	sw_stop(&R.w);
	cl_close(&R.c);
	cl_close(&R.c2);
	medha_replica_close(R.rep);
	snprintf(path, sizeof(path), "%s/replica.sock", R.dir);
	unlink(path);
	rmdir(R.dir);
	alarm(0);
	return 0;
}

/* A HELLO that must be refused with code; its reason holds what. */
static void
hello_refused(const struct medha_msg_hello *h, int code, const char *what)
{
	struct medha_msg rep;
	int t = sw_hello(&R.w, h, &rep);

	if (t != MEDHA_MSG_ERROR)
		fail_msg("HELLO (%s) answered %s", what,
		    t > 0 ? medha_msg_type_name(t) : medha_strerror(t));
	assert_int_equal(rep.error.code, code);
	if (strstr(rep.error.reason, what) == NULL)
		fail_msg("reason \"%s\", not \"%s\"", rep.error.reason, what);
	medha_msg_clear(&rep);
}

/* ---- before the worker ---- */

static void
test_not_ready(void **state)
{
	struct medha_msg_status st;
	struct medha_msg_hello h;
	struct medha_msg m = {.type = MEDHA_MSG_READY, .worker_id = 0}, rep;
	struct medha_reqspec rs = cl_spec("early", 10, 2);
	uint64_t hd;
	int code;

	(void)state;
	assert_int_equal(cl_status(&R.c, &st), 0);
	assert_false(st.ready);
	assert_int_equal(st.workers, 0);
	assert_int_equal(st.workers_wanted, 1);
	assert_int_equal(st.pending, 0);
	assert_int_equal(cl_submit(&R.c, &rs, &hd, &code), MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_ENOSPACE);
	/* worker messages from a peer that said no HELLO */
	assert_int_equal(cl_call(&R.c, &m, &rep), MEDHA_MSG_ERROR);
	assert_int_equal(rep.error.code, MEDHA_ENOTFOUND);
	medha_msg_clear(&rep);

	/* HELLOs no replica can be made from */
	sw_hello_default(&h);
	snprintf(h.gpu, sizeof(h.gpu), "z80");
	hello_refused(&h, MEDHA_EINVAL, "z80");
	sw_hello_default(&h);
	h.vocab = 1000;
	hello_refused(&h, MEDHA_EINVAL, "vocab");
	sw_hello_default(&h);
	h.tp = 2;
	hello_refused(&h, MEDHA_EINVAL, "layout");
#ifndef MEDHA_CUDA
	/* a kind not built in (where it is, a cuda worker is welcome) */
	sw_hello_default(&h);
	snprintf(h.backend, sizeof(h.backend), "cuda");
	hello_refused(&h, MEDHA_EUNSUP, "cuda");
#endif
	/* a path: never opened (its error described /etc/shadow), the
	 * reason says to give -m */
	sw_hello_default(&h);
	snprintf(h.model, sizeof(h.model), "/etc/passwd");
	hello_refused(&h, MEDHA_EINVAL, "medha-sched with -m");
	assert_int_equal(cl_status(&R.c, &st), 0);
	assert_false(st.ready);
	assert_int_equal(st.workers, 0);
}

/* ---- the worker arrives ---- */

static void
test_hello(void **state)
{
	struct medha_msg_status st;
	struct medha_msg_hello h;
	struct medha_msg rep;
	struct sw other;

	(void)state;
	sw_hello_default(&h);
	assert_int_equal(sw_hello(&R.w, &h, &rep), MEDHA_MSG_WELCOME);
	assert_int_equal(rep.worker_id, 0);
	medha_msg_clear(&rep);
	assert_int_equal(cl_status(&R.c, &st), 0);
	assert_true(st.ready);
	assert_int_equal(st.workers, 1);
	assert_int_equal(st.workers_wanted, 1);
	assert_int_equal(st.kv_blocks, h.n_blocks);
	assert_int_equal(st.kv_used, 0);
	assert_int_equal(st.block_size, 16);
	assert_int_equal(st.pending, 0);
	assert_int_equal(st.queue, 0);
	assert_string_equal(st.model, "llama3-8b");
	assert_string_equal(st.backend, "sim");

	/* rank 0 again, from another connection: refused, the first
	 * stays; so are layers that are not the stage's */
	assert_int_equal(sw_open(&other, R.url), 0);
	h.layer_hi = 16;
	assert_int_equal(sw_hello(&other, &h, &rep), MEDHA_MSG_ERROR);
	assert_int_equal(rep.error.code, MEDHA_EINVAL);
	assert_non_null(strstr(rep.error.reason, "layers"));
	medha_msg_clear(&rep);
	h.layer_hi = 32;
	assert_int_equal(sw_hello(&other, &h, &rep), MEDHA_MSG_ERROR);
	assert_int_equal(rep.error.code, MEDHA_ENOSPACE);
	assert_non_null(strstr(rep.error.reason, "connected already"));
	medha_msg_clear(&rep);
	sw_stop(&other);
	assert_int_equal(cl_status(&R.c, &st), 0);
	assert_true(st.ready);
	assert_int_equal(st.workers, 1);

	sw_start(&R.w);
}

/* ---- requests ---- */

/* h's record: ok, its tokens those of a prompt of n_prompt and max
 * output tokens; streamed unless no_stream. */
static void
check_done(struct cl *c, uint64_t h, const char *id, int64_t n_prompt,
    int64_t max, int no_stream)
{
	struct cl_req *q = cl_wait_record(c, h, 10);
	struct sw_req seen;

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
	assert_true(q->rec.first_token >= q->rec.arrival);
	assert_true(q->rec.finish >= q->rec.first_token);
	for (int64_t i = 0; i < max; i++)
		assert_int_equal(q->rec.token_ids[i],
		    medha_backend_sim_token(n_prompt + i, VOCAB));
	if (no_stream) {
		assert_int_equal(q->token_events, 0);
		assert_int_equal(q->n_ids, 0);
	} else {
		assert_true(q->token_events >= 1);
		assert_int_equal(q->n_ids, max);
		assert_memory_equal(q->ids, q->rec.token_ids,
		    (size_t)max * sizeof(int32_t));
	}
	/* the worker ran it all, and frees it */
	assert_true(sw_seen(&R.w, h, &seen));
	assert_int_equal(seen.n_prompt, n_prompt);
	assert_int_equal(seen.decodes, max - 1);
	if (!sw_wait_freed(&R.w, h, 5))
		fail_msg("request %s: never freed on the worker", id);
}

static void
test_submit(void **state)
{
	struct medha_reqspec a = cl_spec("a", 20, 3), b = cl_spec("b", 0, 2);
	struct medha_reqspec c = cl_spec("c", 33, 5), d = cl_spec("d", 0, 4);
	int32_t ids[10] = {5, 6, 7, 8, 9, 128255, 0, 1000, 2, 3}, long_ids[150];
	struct medha_msg_status st;
	struct sw_req seen;
	uint64_t ha, hb, hc, hd;
	int code;

	(void)state;
	b.prompt_ids = ids;
	b.prompt_tokens = 10;
	c.no_stream = 1;
	for (int i = 0; i < 150; i++)
		long_ids[i] = (i * 7919) % VOCAB;
	d.prompt_ids = long_ids;
	d.prompt_tokens = 150;
	assert_int_equal(cl_submit(&R.c, &a, &ha, &code), MEDHA_MSG_ACCEPTED);
	assert_int_equal(cl_submit(&R.c, &b, &hb, &code), MEDHA_MSG_ACCEPTED);
	assert_int_equal(cl_submit(&R.c, &c, &hc, &code), MEDHA_MSG_ACCEPTED);
	assert_int_equal(cl_submit(&R.c, &d, &hd, &code), MEDHA_MSG_ACCEPTED);
	assert_true(ha != hb && hb != hc && ha != hc);
	check_done(&R.c, ha, "a", 20, 3, 0);
	check_done(&R.c, hb, "b", 10, 2, 0);
	check_done(&R.c, hc, "c", 33, 5, 1);
	check_done(&R.c, hd, "d", 150, 4, 0);
	/* a prompt longer than a chunk came in pieces, in order, only the
	 * last one sampled (the worker checks that) */
	assert_true(sw_seen(&R.w, hd, &seen));
	assert_true(seen.chunks >= 3);
	assert_memory_equal(seen.prompt, long_ids, sizeof(long_ids));
	/* the prompt ids reached the worker as sent; a made-up prompt is
	 * in the vocabulary */
	assert_true(sw_seen(&R.w, hb, &seen));
	assert_memory_equal(seen.prompt, ids, sizeof(ids));
	assert_true(sw_seen(&R.w, ha, &seen));
	for (int i = 0; i < 20; i++)
		assert_true(seen.prompt[i] >= 0 && seen.prompt[i] < VOCAB);
	assert_int_equal(R.c.strays, 0);
	/* nothing left in flight */
	assert_int_equal(cl_status(&R.c, &st), 0);
	assert_int_equal(st.pending, 0);
	assert_int_equal(st.kv_used, 0);
	assert_int_equal(st.prefill, 0);
	sw_assert_ok(&R.w);
}

static void
test_refused(void **state)
{
	struct medha_reqspec rs = cl_spec("text", 0, 2);
	int32_t ids[3] = {1, VOCAB, 2};
	uint64_t h;
	int code;

	(void)state;
	rs.prompt = "Hello";
	assert_int_equal(cl_submit(&R.c, &rs, &h, &code), MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_EUNSUP); /* no tokenizer */
	rs = cl_spec("ids", 3, 2);
	rs.prompt_ids = ids;
	assert_int_equal(cl_submit(&R.c, &rs, &h, &code), MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_EINVAL);
	rs = cl_spec("huge", 10000 * 16 + 1, 2);
	assert_int_equal(cl_submit(&R.c, &rs, &h, &code), MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_ERANGE);

	/* the bytes of ids held are bounded (64 KiB here): 20000 ids
	 * given are refused; a made-up prompt of as many holds none (its
	 * ids were invented and kept: 20,000 SUBMITs of 60 bytes took
	 * 670 MiB), is taken and runs */
	int32_t *many = calloc(20000, sizeof(*many));
	assert_non_null(many);
	rs = cl_spec("many", 20000, 2);
	rs.prompt_ids = many;
	assert_int_equal(cl_submit(&R.c, &rs, &h, &code), MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_ENOSPACE);
	free(many);
	rs = cl_spec("madeup", 20000, 2);
	assert_int_equal(cl_submit(&R.c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	check_done(&R.c, h, "madeup", 20000, 2, 0);
}

static void
test_cancel(void **state)
{
	struct medha_reqspec rs = cl_spec("long", 16, 100000);
	struct cl_req *q;
	uint64_t h;
	int code;

	(void)state;
	assert_int_equal(cl_cancel(&R.c, 0xdeadbeefULL, &code),
	    MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_ENOTFOUND);
	assert_int_equal(cl_submit(&R.c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	assert_true(cl_wait_ids(&R.c, h, 1, 10));
	/* not another client's to cancel */
	assert_int_equal(cl_cancel(&R.c2, h, &code), MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_ENOTFOUND);
	assert_int_equal(cl_cancel(&R.c, h, &code), MEDHA_MSG_OK);
	q = cl_wait_record(&R.c, h, 10);
	assert_non_null(q);
	assert_int_equal(q->records, 1);
	assert_int_equal(q->rec.status, MEDHA_STATUS_CANCELLED);
	assert_true(q->rec.output_tokens < 100000);
	assert_int_equal(q->rec.output_tokens, q->n_ids);
	assert_non_null(strstr(q->rec.reason, "cancel"));
	/* ended: no longer in flight */
	assert_int_equal(cl_cancel(&R.c, h, &code), MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_ENOTFOUND);
	if (!sw_wait_freed(&R.w, h, 5))
		fail_msg("cancelled request never freed on the worker");
}

/*
 * A worker's token outside the vocabulary (2147483647 reached a client
 * with status ok): the request fails with a reason, and the replica
 * goes on serving.
 */
static void
test_bad_token(void **state)
{
	struct medha_reqspec rs = cl_spec("bad", 8, 4);
	struct cl_req *q;
	uint64_t h;
	int code;

	(void)state;
	atomic_store(&R.w.bad_token, 2147483647);
	assert_int_equal(cl_submit(&R.c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	q = cl_wait_record(&R.c, h, 10);
	assert_non_null(q);
	assert_int_equal(q->rec.status, MEDHA_STATUS_FAILED);
	assert_non_null(strstr(q->rec.reason, "vocabulary"));
	for (int64_t i = 0; i < q->n_ids; i++)
		assert_true(q->ids[i] >= 0 && q->ids[i] < VOCAB);
	rs = cl_spec("after", 8, 4);
	assert_int_equal(cl_submit(&R.c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	check_done(&R.c, h, "after", 8, 4, 0);
}

/*
 * A worker that says READY with a batch out (it started over, its
 * batch dropped) once a request has sent a token: the request is
 * recomputed, not failed (it "worker dropped its batch" before): its
 * prompt and the token sent run again as a prefill from 0, and it ends
 * ok with one record and the tokens it would have had.
 */
static void
test_dropped_batch(void **state)
{
	struct medha_reqspec rs = cl_spec("dropped", 8, 6);
	struct cl_req *q;
	struct sw_req seen;
	uint64_t h;
	int code;

	(void)state;
	atomic_store(&R.w.drop, 2); /* its first decode: one token out */
	assert_int_equal(cl_submit(&R.c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	q = cl_wait_record(&R.c, h, 10);
	assert_non_null(q);
	assert_int_equal(atomic_load(&R.w.drop), 0);
	if (q->rec.status != MEDHA_STATUS_OK)
		fail_msg("dropped: %s (%s)", medha_status_name(q->rec.status),
		    q->rec.reason);
	assert_int_equal(q->records, 1);
	assert_int_equal(q->rec.output_tokens, 6);
	assert_int_equal(q->n_ids, 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(q->rec.token_ids[i],
		    medha_backend_sim_token(8 + i, VOCAB));
	/* on the worker: begun again once, its prefill the prompt and
	   the token sent before the drop */
	assert_true(sw_seen(&R.w, h, &seen));
	assert_int_equal(seen.restarts, 1);
	assert_int_equal(seen.n_prompt, 9);
	assert_int_equal(seen.prompt[8], medha_backend_sim_token(8, VOCAB));
	assert_int_equal(seen.decodes, 4);
	if (!sw_wait_freed(&R.w, h, 5))
		fail_msg("dropped: never freed on the worker");
	sw_assert_ok(&R.w);
}

/* ---- stopping ---- */

static void
test_stop_drains(void **state)
{
	struct medha_reqspec rs = cl_spec("last", 24, 40),
	                     late = cl_spec("late", 8, 2);
	struct medha_msg_status st;
	uint64_t h, hl, lates[64];
	int code, t, n_late = 0;
	double until;

	(void)state;
	assert_int_equal(cl_submit(&R.c, &rs, &h, &code), MEDHA_MSG_ACCEPTED);
	assert_true(cl_wait_ids(&R.c, h, 1, 10));
	/* the worker keeps its next batch: the request stays in flight */
	atomic_store(&R.w.hold, 1);
	R.stop = 1;
	/* the replica sees the stop on its next pass: new requests are
	 * refused and it says it is not ready */
	until = sw_now() + 5;
	do { /* taken until it sees the stop, then refused */
		t = cl_submit(&R.c, &late, &hl, &code);
		if (t == MEDHA_MSG_ACCEPTED) {
			assert_true(n_late < 64);
			lates[n_late++] = hl;
		}
	} while (t != MEDHA_MSG_ERROR && sw_now() < until);
	assert_int_equal(t, MEDHA_MSG_ERROR);
	assert_int_equal(code, MEDHA_EUNSUP);
	assert_int_equal(cl_status(&R.c, &st), 0);
	assert_false(st.ready);
	/* the request in flight ends as it would have */
	atomic_store(&R.w.hold, 0);
	check_done(&R.c, h, "last", 24, 40, 0);
	for (int i = 0; i < n_late; i++)
		check_done(&R.c, lates[i], "late", 8, 2, 0);
	pthread_join(R.thr, NULL);
	R.running = 0;
	assert_int_equal(R.run_rc, 0);
	sw_assert_ok(&R.w);
}

/* A second replica's thread, until poisoned_stop. */
static volatile sig_atomic_t poisoned_stop;
static void leave_lay(struct sw *w);

static void *
poisoned_main(void *arg)
{
	medha_replica_run(arg, &poisoned_stop);
	return NULL;
}

/* STATUS of a replica at url until it counts n workers (5 s at most). */
static void
wait_workers(struct cl *c, int n)
{
	struct medha_msg_status st;

	for (int i = 0; i < 250; i++) {
		assert_int_equal(cl_status(c, &st), 0);
		if (st.workers == n)
			return;
		sw_sleep(0.02);
	}
	fail_msg("the replica never counted %d workers", n);
}

/*
 * The model fingerprint (issue 28 B). Without -m: a replica of two
 * workers takes the first one's model; a worker of another model for
 * the other rank is refused while the first is there; once none is
 * connected and nothing is in flight, another model may come (a
 * stranger's HELLO that came first, or the wrong file, does not fix it
 * for good). With -m: only that model's workers. A HELLO without a
 * fingerprint is refused.
 */
/* A HELLO of rank_tp rank in a replica of tp 2. */
static void
hello2(struct medha_msg_hello *h, int rank)
{
	sw_hello_default(h);
	h->tp = 2;
	h->rank_tp = rank;
	snprintf(h->peer, sizeof(h->peer), "ipc:///tmp/medha-fp-%d", rank);
}

static void
test_fingerprint(void **state)
{
	struct medha_replica_config c;
	struct medha_replica *r;
	struct medha_msg_hello h;
	struct medha_msg rep;
	struct sw a, b;
	struct cl cli;
	char url[300], path[256], why[256], other[65];
	pthread_t thr;

	(void)state;
	memset(other, 'e', 64);
	other[64] = '\0';
	for (int fixed = 0; fixed < 2; fixed++) {
		snprintf(path, sizeof(path), "%s/fp%d.sock", R.dir, fixed);
		snprintf(url, sizeof(url), "ipc://%s", path);
		medha_replica_config_default(&c);
		c.listen = url;
		c.workers = 2;
		c.drain_timeout = 0.5;
		c.model = fixed ? "llama3-8b" : NULL;
		assert_int_equal(medha_replica_open(&r, &c, why, sizeof(why)),
		    0);
		poisoned_stop = 0;
		assert_int_equal(pthread_create(&thr, NULL, poisoned_main, r),
		    0);
		assert_int_equal(sw_open(&a, url), 0);
		assert_int_equal(sw_open(&b, url), 0);
		assert_int_equal(cl_open(&cli, url), 0);
		hello2(&h, 0);
		h.fingerprint[0] = '\0';
		assert_int_equal(sw_hello(&a, &h, &rep), MEDHA_MSG_ERROR);
		assert_non_null(strstr(rep.error.reason, "fingerprint"));
		medha_msg_clear(&rep);
		hello2(&h, 0);
		if (fixed) { /* -m llama3-8b: another model is refused */
			memcpy(h.fingerprint, other, sizeof(other));
			assert_int_equal(sw_hello(&a, &h, &rep),
			    MEDHA_MSG_ERROR);
			assert_non_null(strstr(rep.error.reason, "-m"));
			medha_msg_clear(&rep);
			hello2(&h, 0);
		}
		assert_int_equal(sw_hello(&a, &h, &rep), MEDHA_MSG_WELCOME);
		medha_msg_clear(&rep);
		hello2(&h, 1);
		memcpy(h.fingerprint, other, sizeof(other));
		assert_int_equal(sw_hello(&b, &h, &rep), MEDHA_MSG_ERROR);
		assert_non_null(strstr(rep.error.reason, "fingerprint"));
		medha_msg_clear(&rep);
		hello2(&h, 1);
		assert_int_equal(sw_hello(&b, &h, &rep), MEDHA_MSG_WELCOME);
		medha_msg_clear(&rep);
		/* both gone, nothing in flight: another model may come
		 * without -m, never with it */
		sw_stop(&a);
		sw_stop(&b);
		wait_workers(&cli, 0);
		assert_int_equal(sw_open(&a, url), 0);
		hello2(&h, 0);
		memcpy(h.fingerprint, other, sizeof(other));
		assert_int_equal(sw_hello(&a, &h, &rep),
		    fixed ? MEDHA_MSG_ERROR : MEDHA_MSG_WELCOME);
		medha_msg_clear(&rep);
		poisoned_stop = 1;
		pthread_join(thr, NULL);
		sw_stop(&a);
		cl_close(&cli);
		medha_replica_close(r);
		unlink(path);
	}
}

/*
 * STATUS's kv_used with the prefix cache (issue 27): a request's full
 * prompt blocks join the cache as its prefill is handed out, and stay
 * in use while it runs; kv_used counts them (it counted only the blocks
 * left reserved, 1 of the 5 here, so that a replica whose requests
 * share a long document looked nearly empty). Once the request has
 * ended its cached blocks are free (evictable): kv_used is 0 again.
 */
static void
test_kv_used_prefix(void **state)
{
	struct medha_replica_config c;
	struct medha_replica *r;
	struct medha_msg_status st;
	struct medha_msg_hello h;
	struct medha_msg rep;
	struct medha_reqspec rs = cl_spec("p", 64, 16);
	int32_t ids[64];
	struct sw w;
	struct cl cli;
	char url[300], path[256], why[256];
	pthread_t thr;
	uint64_t hd;
	int code, i;

	(void)state;
	for (i = 0; i < 64; i++)
		ids[i] = 1000 + i;
	rs.prompt_ids = ids;
	snprintf(path, sizeof(path), "%s/px.sock", R.dir);
	snprintf(url, sizeof(url), "ipc://%s", path);
	medha_replica_config_default(&c);
	c.listen = url;
	c.workers = 1;
	c.drain_timeout = 0.5;
	c.sched.chunk = 64; /* the prompt in one batch */
	c.sched.prefix_cache = 1;
	assert_int_equal(medha_replica_open(&r, &c, why, sizeof(why)), 0);
	poisoned_stop = 0;
	assert_int_equal(pthread_create(&thr, NULL, poisoned_main, r), 0);
	assert_int_equal(sw_open(&w, url), 0);
	assert_int_equal(cl_open(&cli, url), 0);
	sw_hello_default(&h);
	assert_int_equal(sw_hello(&w, &h, &rep), MEDHA_MSG_WELCOME);
	medha_msg_clear(&rep);
	atomic_store(&w.hold, 1); /* its first batch waits */
	sw_start(&w);
	assert_int_equal(cl_submit(&cli, &rs, &hd, &code),
	    MEDHA_MSG_ACCEPTED);
	for (i = 0; i < 250; i++) { /* until its prompt is handed out */
		assert_int_equal(cl_status(&cli, &st), 0);
		if (st.pending == 1 && st.queue == 0 && st.prefill == 0)
			break;
		sw_sleep(0.02);
	}
	assert_true(i < 250);
	/* 64 prompt + 16 output tokens: 5 blocks, 4 of them cached */
	assert_int_equal(st.kv_used, 5);
	atomic_store(&w.hold, 0);
	assert_non_null(cl_wait_record(&cli, hd, 10));
	assert_int_equal(cl_status(&cli, &st), 0);
	assert_int_equal(st.pending, 0);
	assert_int_equal(st.kv_used, 0);
	sw_assert_ok(&w);
	poisoned_stop = 1;
	pthread_join(thr, NULL);
	sw_stop(&w);
	cl_close(&cli);
	medha_replica_close(r);
	unlink(path);
}

/*
 * A refused HELLO leaves the replica as it was. on_hello() once made the
 * scheduler core from the first HELLO before it checked that HELLO's
 * layers, and kept the core when it then refused the worker: one refused
 * HELLO (smollm2-135m, layers [0, 16) of 30) fixed the replica's model
 * and KV blocks (STATUS reported them with no worker there, SUBMITs were
 * ACCEPTED, and waited, where they are "not ready"), and a right
 * llama3-8b worker was refused for good ("stage 0 of 1 runs layers
 * [0, 30)"). Likewise once a worker has come and gone: a HELLO of
 * another model whose layers fit the replica's stage but not its own
 * model's dropped the replica's core, made its own, and was refused,
 * and the next llama3-8b worker with it.
 */

static void
test_refused_hello_keeps_core(void **state)
{
	struct medha_replica_config c;
	struct medha_replica *r;
	struct medha_msg_hello h;
	struct medha_msg rep;
	struct medha_msg_status st;
	struct sw bad, good;
	struct cl cli;
	char url[300], path[256], why[256];
	struct medha_reqspec rs = cl_spec("x", 10, 2);
	pthread_t thr;
	uint64_t hd;
	int code, t_sub, t_good, t_other, t_again;
	struct medha_msg_status st2;

	(void)state;
	snprintf(path, sizeof(path), "%s/poisoned.sock", R.dir);
	snprintf(url, sizeof(url), "ipc://%s", path);
	medha_replica_config_default(&c);
	c.listen = url;
	c.drain_timeout = 0.5;
	assert_int_equal(medha_replica_open(&r, &c, why, sizeof(why)), 0);
	poisoned_stop = 0;
	assert_int_equal(pthread_create(&thr, NULL, poisoned_main, r), 0);
	assert_int_equal(sw_open(&bad, url), 0);
	assert_int_equal(sw_open(&good, url), 0);
	assert_int_equal(cl_open(&cli, url), 0);
	sw_hello_default(&h);
	snprintf(h.model, sizeof(h.model), "smollm2-135m");
	h.vocab = 49152;
	h.dim = 576;
	h.layer_hi = 16;
	h.n_blocks = 50;
	assert_int_equal(sw_hello(&bad, &h, &rep), MEDHA_MSG_ERROR);
	medha_msg_clear(&rep);
	assert_int_equal(cl_status(&cli, &st), 0);
	t_sub = cl_submit(&cli, &rs, &hd, &code);
	sw_hello_default(&h);
	t_good = sw_hello(&good, &h, &rep);
	if (t_good > 0)
		medha_msg_clear(&rep);
	/* it goes; a smollm2-135m worker whose layers are llama3-8b's */
	sw_stop(&good);
	wait_workers(&cli, 0);
	sw_hello_default(&h);
	snprintf(h.model, sizeof(h.model), "smollm2-135m");
	medha_model_fingerprint("smollm2-135m", h.fingerprint, NULL, 0);
	h.vocab = 49152;
	h.dim = 576;
	h.n_blocks = 50;
	t_other = sw_hello(&bad, &h, &rep);
	if (t_other > 0) {
		if (t_other == MEDHA_MSG_ERROR &&
		    strstr(rep.error.reason, "layers [0, 30)") == NULL)
			t_other = -1000; /* refused, but not for its layers */
		medha_msg_clear(&rep);
	}
	assert_int_equal(cl_status(&cli, &st2), 0);
	assert_int_equal(sw_open(&good, url), 0);
	sw_hello_default(&h);
	t_again = sw_hello(&good, &h, &rep);
	if (t_again > 0)
		medha_msg_clear(&rep);
	poisoned_stop = 1;
	pthread_join(thr, NULL);
	sw_stop(&bad);
	sw_stop(&good);
	cl_close(&cli);
	medha_replica_close(r);
	unlink(path);
	assert_int_equal(st.kv_blocks, 0);           /* was: 50 */
	assert_int_equal(t_sub, MEDHA_MSG_ERROR);    /* was: accepted */
	assert_int_equal(t_good, MEDHA_MSG_WELCOME); /* was: error */
	assert_int_equal(t_other, MEDHA_MSG_ERROR);
	/* the replica's core stays, of llama3-8b */
	assert_int_equal(st2.kv_blocks, 10000); /* was: 50 */
	assert_string_equal(st2.model, "llama3-8b");
	assert_int_equal(t_again, MEDHA_MSG_WELCOME); /* was: error */
}

/*
 * A replica of its own at R.dir/NAME.sock (url and path filled in) with
 * config c, which gets its listen here, run by poisoned_main in *thr.
 */
static struct medha_replica *
side_open(const char *name, struct medha_replica_config *c, char *url,
    size_t urllen, char *path, size_t pathlen, pthread_t *thr)
{
	struct medha_replica *r;
	char why[256];

	snprintf(path, pathlen, "%s/%s.sock", R.dir, name);
	snprintf(url, urllen, "ipc://%s", path);
	c->listen = url;
	assert_int_equal(medha_replica_open(&r, c, why, sizeof(why)), 0);
	poisoned_stop = 0;
	assert_int_equal(pthread_create(thr, NULL, poisoned_main, r), 0);
	return r;
}

/*
 * A worker's HELLO again before its first READY (one it sent again
 * while the WELCOME was on its way: a link cut off for a minute
 * delivered dozens at once, each taken for a worker that started over:
 * lost, its replica's requests recomputed, the batches void, again and
 * again) is welcomed again as the same worker, nothing lost: a request
 * that came meanwhile runs once, and the worker is never sent a free of
 * a sequence it never had (the loss's).
 */
static void
test_hello_twice(void **state)
{
	struct medha_replica_config c;
	struct medha_replica *r;
	struct medha_msg_hello h;
	struct medha_msg rep;
	struct medha_reqspec rs = cl_spec("twice", 8, 4);
	struct sw w;
	struct cl cli;
	struct cl_req *q;
	struct sw_req seen;
	char url[300], path[256];
	pthread_t thr;
	uint64_t hd;
	int code;

	(void)state;
	medha_replica_config_default(&c);
	c.workers = 1;
	r = side_open("twice", &c, url, sizeof(url), path, sizeof(path), &thr);
	assert_int_equal(cl_open(&cli, url), 0);
	assert_int_equal(sw_open(&w, url), 0);
	sw_hello_default(&h);
	assert_int_equal(sw_hello(&w, &h, &rep), MEDHA_MSG_WELCOME);
	medha_msg_clear(&rep);
	assert_int_equal(cl_submit(&cli, &rs, &hd, &code), MEDHA_MSG_ACCEPTED);
	sw_sleep(0.2); /* the replica's turns: a batch could be formed */
	assert_int_equal(sw_hello(&w, &h, &rep), MEDHA_MSG_WELCOME);
	assert_int_equal(rep.worker_id, 0);
	medha_msg_clear(&rep);
	sw_start(&w);
	q = cl_wait_record(&cli, hd, 10);
	assert_non_null(q);
	if (q->rec.status != MEDHA_STATUS_OK)
		fail_msg("twice: %s (%s)", medha_status_name(q->rec.status),
		    q->rec.reason);
	assert_int_equal(q->records, 1);
	assert_int_equal(q->rec.output_tokens, 4);
	assert_true(sw_seen(&w, hd, &seen));
	assert_int_equal(seen.restarts, 0);
	assert_int_equal(seen.chunks, 1);
	sw_assert_ok(&w);
	atomic_store(&w.quit, 1);
	pthread_join(w.thr, NULL);
	w.running = 0;
	sw_stop(&w);
	poisoned_stop = 1;
	pthread_join(thr, NULL);
	cl_close(&cli);
	medha_replica_close(r);
	unlink(path);
}

/*
 * STATUS with KVP (kvp 2, 64 tokens a request a group, reserving all
 * of max_tokens): kv_blocks is both groups' 2 x 10000, and a request of
 * 100 + 4 tokens, pieces of 64 and 40 on the two groups, uses 4 + 3
 * blocks (STATUS once said group 0's alone: 10000 and 4 or 3).
 */
static void
test_status_kvp(void **state)
{
	struct medha_replica_config c;
	struct medha_replica *r;
	struct medha_msg_status st;
	struct medha_msg_hello h;
	struct medha_msg rep;
	struct medha_reqspec rs = cl_spec("kvp", 100, 4);
	struct sw w[2];
	struct cl cli;
	char url[300], path[256], why[256];
	pthread_t thr;
	uint64_t hd;
	int code, i;

	(void)state;
	snprintf(path, sizeof(path), "%s/kvp.sock", R.dir);
	snprintf(url, sizeof(url), "ipc://%s", path);
	medha_replica_config_default(&c);
	c.listen = url;
	c.workers = 2;
	c.drain_timeout = 0.5;
	c.sched.kvp_max_tokens = 64;
	c.sched.reserve = MEDHA_RESERVE_MAX;
	assert_int_equal(medha_replica_open(&r, &c, why, sizeof(why)), 0);
	poisoned_stop = 0;
	assert_int_equal(pthread_create(&thr, NULL, poisoned_main, r), 0);
	assert_int_equal(cl_open(&cli, url), 0);
	for (i = 0; i < 2; i++) {
		assert_int_equal(sw_open(&w[i], url), 0);
		sw_hello_default(&h);
		h.kvp = 2;
		h.rank_kvp = i;
		snprintf(h.peer, sizeof(h.peer), "ipc:///tmp/medha-kvp-%d", i);
		assert_int_equal(sw_hello(&w[i], &h, &rep), MEDHA_MSG_WELCOME);
		medha_msg_clear(&rep);
		atomic_store(&w[i].hold, 1); /* the batch waits */
		sw_start(&w[i]);
	}
	assert_int_equal(cl_status(&cli, &st), 0);
	assert_true(st.ready);
	assert_int_equal(st.kv_blocks, 20000);
	assert_int_equal(st.kv_used, 0);
	assert_int_equal(cl_submit(&cli, &rs, &hd, &code),
	    MEDHA_MSG_ACCEPTED);
	for (i = 0; i < 250; i++) { /* until it holds its KV */
		assert_int_equal(cl_status(&cli, &st), 0);
		if (st.pending == 1 && st.queue == 0)
			break;
		sw_sleep(0.02);
	}
	assert_true(i < 250);
	assert_int_equal(st.kv_blocks, 20000);
	assert_int_equal(st.kv_used, 7);
	atomic_store(&w[0].hold, 0);
	atomic_store(&w[1].hold, 0);
	assert_non_null(cl_wait_record(&cli, hd, 10));
	assert_int_equal(cl_status(&cli, &st), 0);
	assert_int_equal(st.kv_used, 0);
	sw_assert_ok(&w[0]);
	sw_assert_ok(&w[1]);
	leave_lay(w); /* before the replica stops: sw_stop alone panicked */
	poisoned_stop = 1;
	pthread_join(thr, NULL);
	cl_close(&cli);
	medha_replica_close(r);
	unlink(path);
}

/*
 * The layout changes with the workers (tp x spp x kvp of the same
 * count, the same model). The core is the layout's (its predictor, KVP
 * groups, ring of spp batches in flight): a replica of two workers made
 * its core for kvp 2; once both had gone, workers of spp 2 were welcome
 * on that core (HELLO was checked against the layout only while workers
 * were connected), STATUS said 2 x 10000 KV blocks (the kvp 2 groups),
 * and with two batches in flight the ring of one (spp 1) overflowed.
 * Now: while a request waits on the kvp 2 core, workers of spp 2 are
 * refused with both layouts named and the request is served once kvp 2
 * workers return; with nothing in flight the spp 2 workers get a core
 * of their own (one group of 10000 blocks, two batches in flight), and
 * every request ends ok.
 */
static void
hello_lay(struct medha_msg_hello *h, int spp, int kvp, int rank)
{
	sw_hello_default(h);
	h->spp = spp;
	h->kvp = kvp;
	h->rank_spp = spp > 1 ? rank : 0;
	h->rank_kvp = kvp > 1 ? rank : 0;
	medha_stage_layers(32, spp, h->rank_spp, &h->layer_lo, &h->layer_hi);
	snprintf(h->peer, sizeof(h->peer), "ipc:///tmp/medha-lay-%d", rank);
}

/* Workers w[0], w[1] of spp x kvp, welcome and asking for work. */
static void
join_lay(struct sw *w, const char *url, int spp, int kvp)
{
	struct medha_msg_hello h;
	struct medha_msg rep;

	for (int i = 0; i < 2; i++) {
		assert_int_equal(sw_open(&w[i], url), 0);
		hello_lay(&h, spp, kvp, i);
		assert_int_equal(sw_hello(&w[i], &h, &rep), MEDHA_MSG_WELCOME);
		medha_msg_clear(&rep);
		sw_start(&w[i]);
	}
}

/*
 * Workers w[0], w[1] leave: each thread ends at the replica's next
 * answer (a held READY is answered within a second), then the
 * connection closes. sw_stop alone closes the socket under a call the
 * thread may be starting, which made nng panic now and then here
 * ("pthread_mutex_lock: Invalid argument"), the replica answering
 * READY with frees just then.
 */
static void
leave_lay(struct sw *w)
{
	for (int i = 0; i < 2; i++)
		atomic_store(&w[i].quit, 1);
	for (int i = 0; i < 2; i++) {
		if (w[i].running)
			pthread_join(w[i].thr, NULL);
		w[i].running = 0;
		sw_stop(&w[i]);
	}
}

/* Request hd's record: ok, with max tokens. */
static void
record_ok(struct cl *c, uint64_t hd, int64_t max)
{
	struct cl_req *q = cl_wait_record(c, hd, 10);

	assert_non_null(q);
	if (q->rec.status != MEDHA_STATUS_OK)
		fail_msg("%s: %s (%s)", q->rec.id,
		    medha_status_name(q->rec.status), q->rec.reason);
	assert_int_equal(q->rec.output_tokens, max);
}

static void
test_relayout(void **state)
{
	struct medha_replica_config c;
	struct medha_replica *r;
	struct medha_msg_status st;
	struct medha_msg_hello h;
	struct medha_msg rep;
	struct medha_reqspec rs = cl_spec("lay", 100, 4);
	struct sw w[2], other;
	struct cl cli;
	char url[300], path[256], why[256];
	pthread_t thr;
	uint64_t hd, hd2;
	int code, i;

	(void)state;
	snprintf(path, sizeof(path), "%s/lay.sock", R.dir);
	snprintf(url, sizeof(url), "ipc://%s", path);
	medha_replica_config_default(&c);
	c.listen = url;
	c.workers = 2;
	c.drain_timeout = 0.5;
	c.sched.chunk = 32; /* a prompt of 100 in several batches */
	c.sched.kvp_max_tokens = 64;
	assert_int_equal(medha_replica_open(&r, &c, why, sizeof(why)), 0);
	poisoned_stop = 0;
	assert_int_equal(pthread_create(&thr, NULL, poisoned_main, r), 0);
	assert_int_equal(cl_open(&cli, url), 0);

	/* kvp 2: two groups */
	join_lay(w, url, 1, 2);
	assert_int_equal(cl_status(&cli, &st), 0);
	assert_true(st.ready);
	assert_int_equal(st.kv_blocks, 20000);
	assert_int_equal(cl_submit(&cli, &rs, &hd, &code), MEDHA_MSG_ACCEPTED);
	record_ok(&cli, hd, 4);
	sw_assert_ok(&w[0]);
	sw_assert_ok(&w[1]);
	leave_lay(w);
	wait_workers(&cli, 0);

	/* a request waits on the kvp 2 core: spp 2 is refused, both
	   layouts named, and the request is kvp 2's to serve */
	assert_int_equal(cl_submit(&cli, &rs, &hd, &code), MEDHA_MSG_ACCEPTED);
	assert_int_equal(sw_open(&other, url), 0);
	hello_lay(&h, 2, 1, 0);
	assert_int_equal(sw_hello(&other, &h, &rep), MEDHA_MSG_ERROR);
	assert_int_equal(rep.error.code, MEDHA_EINVAL);
	if (strstr(rep.error.reason, "tp 1 x spp 2 x kvp 1") == NULL ||
	    strstr(rep.error.reason, "tp 1 x spp 1 x kvp 2") == NULL)
		fail_msg("reason \"%s\" names not both layouts",
		    rep.error.reason);
	medha_msg_clear(&rep);
	sw_stop(&other);
	assert_int_equal(cl_status(&cli, &st), 0);
	assert_int_equal(st.kv_blocks, 20000);
	assert_int_equal(st.pending, 1);
	join_lay(w, url, 1, 2);
	record_ok(&cli, hd, 4);
	sw_assert_ok(&w[0]);
	sw_assert_ok(&w[1]);
	leave_lay(w);
	wait_workers(&cli, 0);

	/* nothing in flight: spp 2 gets its own core, one group (its
	   handles start over: another client follows them) */
	cl_close(&cli);
	assert_int_equal(cl_open(&cli, url), 0);
	for (i = 0; i < 2; i++) {
		assert_int_equal(sw_open(&w[i], url), 0);
		hello_lay(&h, 2, 1, i);
		assert_int_equal(sw_hello(&w[i], &h, &rep), MEDHA_MSG_WELCOME);
		medha_msg_clear(&rep);
	}
	assert_int_equal(cl_status(&cli, &st), 0);
	assert_true(st.ready);
	assert_int_equal(st.kv_blocks, 10000); /* was: 20000 */
	/* stage 1 holds its first batch while stage 0 takes the next:
	   two batches in flight, the ring's two places */
	atomic_store(&w[1].hold, 1);
	sw_start(&w[0]);
	sw_start(&w[1]);
	rs = cl_spec("lay1", 60, 4); /* within one group's 64 tokens */
	assert_int_equal(cl_submit(&cli, &rs, &hd, &code), MEDHA_MSG_ACCEPTED);
	snprintf(rs.id, sizeof(rs.id), "lay2");
	assert_int_equal(cl_submit(&cli, &rs, &hd2, &code), MEDHA_MSG_ACCEPTED);
	for (i = 0; i < 100; i++) { /* 1 s at most: no heartbeats held */
		int64_t n;
		pthread_mutex_lock(&w[0].mu);
		n = w[0].batches;
		pthread_mutex_unlock(&w[0].mu);
		if (n >= 2)
			break;
		sw_sleep(0.01);
	}
	atomic_store(&w[1].hold, 0);
	assert_true(i < 100);
	record_ok(&cli, hd, 4);
	record_ok(&cli, hd2, 4);
	sw_assert_ok(&w[0]);
	sw_assert_ok(&w[1]);
	leave_lay(w);
	poisoned_stop = 1;
	pthread_join(thr, NULL);
	cl_close(&cli);
	medha_replica_close(r);
	unlink(path);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_not_ready),
	    cmocka_unit_test(test_hello),
	    cmocka_unit_test(test_submit),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_cancel),
	    cmocka_unit_test(test_bad_token),
	    cmocka_unit_test(test_dropped_batch),
	    cmocka_unit_test(test_hello_twice),
	    cmocka_unit_test(test_stop_drains),
	    cmocka_unit_test(test_fingerprint),
	    cmocka_unit_test(test_kv_used_prefix),
	    cmocka_unit_test(test_refused_hello_keeps_core),
	    cmocka_unit_test(test_status_kvp),
	    cmocka_unit_test(test_relayout),
	};

	medha_log_level = MEDHA_LOG_ERROR;
	return cmocka_run_group_tests(tests, setup, teardown);
}
