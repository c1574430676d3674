/*
 * netcost_test.c: the links of netcost.h. A flag's LATENCY[,BANDWIDTH]
 * parsed (and refused when malformed); a message's time; and the
 * simulator with one request alone, where each link adds exactly what
 * it says to the TTFT and the TPOT: the scheduler's link its message out
 * and the answer back, the SPP link a hand-off per stage boundary (its
 * bytes the hidden states of every TP rank), the KVP link an exchange
 * per layer and stage once the request's KV spans two groups, the TP
 * link four gathers a layer; and no link, nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sched/netcost.h"
#include "sched/pred.h"
#include "sched/sim.h"

static void
test_parse(void **state)
{
	struct medha_wire w;
	char why[256];
	static const char *bad[] = {"", "x", "-1", "1001", "0.01,", "0.01,0",
	    "0.01,5xbit", "0.01,100mbit,", "nan", "0.01;1gbit", "0.01,1e16",
	    "0.01,2e6gbit"};

	(void)state;
	assert_int_equal(medha_wire_parse("0.01", &w, why, sizeof(why)), 0);
	assert_true(w.lat == 0.01 && w.bw == 0);
	assert_int_equal(medha_wire_parse("0.002,100mbit", &w, why,
	                     sizeof(why)),
	    0);
	assert_true(w.lat == 0.002 && w.bw == 12.5e6);
	assert_int_equal(medha_wire_parse("0,1GBIT", &w, why, sizeof(why)), 0);
	assert_true(w.lat == 0 && w.bw == 1.25e8);
	assert_int_equal(medha_wire_parse("0,8000", &w, why, sizeof(why)), 0);
	assert_true(w.bw == 1000);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		assert_int_equal(medha_wire_parse(bad[i], &w, why, sizeof(why)),
		    MEDHA_EINVAL);
		assert_non_null(strstr(why, "expected"));
	}
	assert_string_equal(medha_net_name(MEDHA_NET_KVP), "kvp");
	assert_null(medha_net_name(MEDHA_NET_KINDS));
}

static void
test_wire_time(void **state)
{
	struct medha_wire w = {0.01, 1e6}, none = {0, 0};

	(void)state;
	assert_true(fabs(medha_wire_time(&w, 5e5) - 0.51) < 1e-12);
	assert_true(medha_wire_time(&none, 1e9) == 0);
	w.bw = 0;
	assert_true(medha_wire_time(&w, 1e9) == 0.01);
}

struct one {
	struct medha_record rec;
	int n;
};

static int
keep(void *arg, const struct medha_record *rec)
{
	struct one *o = arg;

	o->rec = *rec; /* its times only are read */
	o->n++;
	return 0;
}

/*
 * One request of `prompt` tokens and 3 out, alone, on llama3-8b (a100,
 * tp 8 unless the layout says less), a fixed chunk of 2048, the KV of a
 * request at most 512 tokens a group; net's links. Its record's TTFT
 * and TPOT.
 */
static void
alone(int tp, int spp, int kvp, int64_t prompt, const struct medha_net *net,
    double *ttft, double *tpot)
{
	struct medha_pred p;
	struct medha_pred_model m;
	struct medha_sched_config c;
	struct medha_sim_hooks h = {0};
	struct medha_sim_stats st;
	struct medha_reqspec r;
	struct one o = {0};

	assert_int_equal(medha_model_resolve("llama3-8b", &m), 0);
	assert_int_equal(medha_pred_init(&p, medha_gpu_find("a100"), &m, tp,
	                     spp, kvp),
	    0);
	if (net != NULL)
		p.net = *net;
	medha_sched_config_default(&c);
	c.chunk = 2048;
	c.kvp_max_tokens = kvp > 1 ? 512 : 0;
	memset(&r, 0, sizeof(r));
	snprintf(r.id, sizeof(r.id), "r");
	r.prompt_tokens = prompt;
	r.max_tokens = 3;
	h.arg = &o;
	h.record = keep;
	assert_int_equal(medha_sim_run(&c, &p, &r, 1, &h, &st), 0);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.rec.status, MEDHA_STATUS_OK);
	*ttft = o.rec.ttft;
	*tpot = o.rec.tpot_mean;
	medha_pred_free(&p);
}

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-9)

static void
test_no_link(void **state)
{
	struct medha_net zero = {0};
	double t0, p0, t1, p1;

	(void)state;
	assert_false(medha_net_any(&zero));
	alone(8, 2, 2, 1000, NULL, &t0, &p0);
	alone(8, 2, 2, 1000, &zero, &t1, &p1);
	assert_true(t0 == t1 && p0 == p1);
}

static void
test_sched_link(void **state)
{
	struct medha_net n = {0};
	double t0, p0, t1, p1;

	(void)state;
	n.w[MEDHA_NET_SCHED].lat = 0.01;
	/* every batch: out and back, 20 ms, nothing else */
	alone(8, 1, 1, 1000, NULL, &t0, &p0);
	alone(8, 1, 1, 1000, &n, &t1, &p1);
	NEAR(t1 - t0, 0.02);
	NEAR(p1 - p0, 0.02);
	/* the other links cost nothing where the layout has none of them */
	n.w[MEDHA_NET_SPP].lat = n.w[MEDHA_NET_KVP].lat = 1;
	alone(8, 1, 1, 1000, &n, &t1, &p1);
	NEAR(t1 - t0, 0.02);
	n.w[MEDHA_NET_TP].lat = 1e-3;
	alone(1, 1, 1, 1000, NULL, &t0, &p0);
	alone(1, 1, 1, 1000, &n, &t1, &p1);
	NEAR(t1 - t0, 0.02);
}

static void
test_spp_link(void **state)
{
	struct medha_net n = {0};
	double t0, p0, t1, p1;

	(void)state;
	/* a hand-off per boundary: 3 of 4 stages; each TP rank's 1000 x
	   4096 f32 hidden states, 8 ranks, at 1 GB/s */
	n.w[MEDHA_NET_SPP].lat = 0.005;
	n.w[MEDHA_NET_SPP].bw = 1e9;
	alone(8, 4, 1, 1000, NULL, &t0, &p0);
	alone(8, 4, 1, 1000, &n, &t1, &p1);
	NEAR(t1 - t0, 3 * (0.005 + 8 * 1000 * 4096 * 4 / 1e9));
	NEAR(p1 - p0, 3 * (0.005 + 8 * 4096 * 4 / 1e9));
}

static void
test_kvp_link(void **state)
{
	struct medha_net n = {0};
	double t0, p0, t1, p1;

	(void)state;
	n.w[MEDHA_NET_KVP].lat = 0.001;
	/* 400 tokens fit one group: no exchange */
	alone(8, 2, 2, 400, NULL, &t0, &p0);
	alone(8, 2, 2, 400, &n, &t1, &p1);
	assert_true(t0 == t1 && p0 == p1);
	/* 1000: the chunk past 512 and every decode span two groups, an
	   exchange in each of a stage's 16 layers, in both stages */
	alone(8, 2, 2, 1000, NULL, &t0, &p0);
	alone(8, 2, 2, 1000, &n, &t1, &p1);
	NEAR(t1 - t0, 2 * 16 * 0.001);
	NEAR(p1 - p0, 2 * 16 * 0.001);
	/* at 1 GB/s: the chunk's 488 tokens x 32 heads x 129 f32 a layer */
	n.w[MEDHA_NET_KVP].bw = 1e9;
	alone(8, 2, 2, 1000, &n, &t1, &p1);
	NEAR(t1 - t0, 32 * (0.001 + 488.0 * 32 * 129 * 4 / 1e9));
	NEAR(p1 - p0, 32 * (0.001 + 32.0 * 129 * 4 / 1e9));
}

static void
test_tp_link(void **state)
{
	struct medha_net n = {0};
	double t0, p0, t1, p1;

	(void)state;
	n.w[MEDHA_NET_TP].lat = 1e-4;
	/* four gathers in each of 32 layers */
	alone(2, 1, 1, 1000, NULL, &t0, &p0);
	alone(2, 1, 1, 1000, &n, &t1, &p1);
	NEAR(t1 - t0, 32 * 4 * 1e-4);
	NEAR(p1 - p0, 32 * 4 * 1e-4);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test(test_wire_time),
	    cmocka_unit_test(test_no_link),
	    cmocka_unit_test(test_sched_link),
	    cmocka_unit_test(test_spp_link),
	    cmocka_unit_test(test_kvp_link),
	    cmocka_unit_test(test_tp_link),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
