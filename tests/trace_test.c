/*
 * trace_test.c: unit tests of libcore/io/trace.c and trace_read.c: JSON
 * trace lines and records parsed and rejected with a reason, write-then-parse round
 * trips, the zstd-transparent reader and writer (through tmpfile()), the
 * detection of the Azure and Vidur CSV formats, damaged input that
 * must give an error rather than a crash, and the limits on counts and
 * times (MEDHA_TOKENS_MAX, MEDHA_TIME_MAX) that every reader enforces.
 * Also the TBT histogram of req.h that records carry: its quantiles
 * against the exact ones of random gaps, merging, its JSON form and the
 * malformed ones refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <string.h>

#include "io/trace.h"
#include "testutil.h"

/* A read-only stream over a string. */
static FILE *
str_stream(const char *s)
{
	FILE *f = fmemopen((void *)s, strlen(s), "r");

	assert_non_null(f);
	return f;
}

/* ---- parsing ---- */

static void
test_parse_valid(void **state)
{
	struct medha_reqspec rs;
	char why[128];

	(void)state;
	assert_int_equal(
	    medha_reqspec_parse(
	        "{\"id\": \"req-1\", "
	        "\"arrival\": 1.5, \"prompt_tokens\": 100, \"max_tokens\": 20, "
	        "\"ttft_slo\": 0.5, \"tpot_slo\": 0.05, \"extra\": [1, {}]}",
	        &rs, why, sizeof(why)),
	    0);
	assert_string_equal(rs.id, "req-1");
	assert_true(rs.arrival == 1.5);
	assert_int_equal(rs.prompt_tokens, 100);
	assert_int_equal(rs.max_tokens, 20);
	assert_true(rs.ttft_slo == 0.5);
	assert_true(rs.tpot_slo == 0.05);
	assert_null(rs.prompt);
	assert_int_equal(rs.output_tokens, 0); /* not given */

	/* the real length beside the client's cap */
	assert_int_equal(
	    medha_reqspec_parse("{\"arrival\": 0, \"prompt_tokens\": 9, "
	                        "\"max_tokens\": 8000, \"output_tokens\": 44}",
	        &rs, why, sizeof(why)),
	    0);
	assert_int_equal(rs.max_tokens, 8000);
	assert_int_equal(rs.output_tokens, 44);

	/* integer id, prompt text only, no SLOs, integral real count */
	assert_int_equal(
	    medha_reqspec_parse(
	        "{\"id\": 42, \"arrival\": 0, "
	        "\"prompt\": \"hi \\\"there\\\"\", \"max_tokens\": 3.0}",
	        &rs, why, sizeof(why)),
	    0);
	assert_string_equal(rs.id, "42");
	assert_int_equal(rs.prompt_tokens, 0);
	assert_int_equal(rs.max_tokens, 3);
	assert_string_equal(rs.prompt, "hi \"there\"");
	assert_true(rs.ttft_slo == 0 && rs.tpot_slo == 0);
	medha_reqspec_clear(&rs);
	assert_null(rs.prompt);

	/* no id: left empty for the trace reader to fill */
	assert_int_equal(
	    medha_reqspec_parse("{\"arrival\": 2, "
	                        "\"prompt_tokens\": 1, \"max_tokens\": 0}",
	        &rs, why, sizeof(why)),
	    0);
	assert_string_equal(rs.id, "");
}

static void
test_parse_malformed(void **state)
{
	static const struct {
		const char *line, *why;
	} cases[] = {
	    {"{\"prompt_tokens\": 5, \"max_tokens\": 1}", "arrival: missing"},
	    {"{\"arrival\": 1, \"prompt_tokens\": 5, \"max_tokens\": -1}",
	        "max_tokens: not an integer in [0, 1000000000] (got -1)"},
	    {"{\"arrival\": \"1\", \"prompt_tokens\": 5, "
	     "\"max_tokens\": 1}",
	        "arrival: not a number in [0, 1000000000] (got a string)"},
	    {"{\"arrival\": 1, \"prompt_tokens\": true, \"max_tokens\": 1}",
	        "prompt_tokens: not an integer in [1, 1000000000] (got a "
	        "boolean)"},
	    {"{\"arrival\": 1, \"prompt_tokens\": 0, \"max_tokens\": 1}",
	        "prompt_tokens: not an integer in [1, 1000000000] (got 0)"},
	    {"{\"arrival\": 1, \"prompt_tokens\": 2.5, \"max_tokens\": 1}",
	        "prompt_tokens: not an integer in [1, 1000000000] (got 2.5)"},
	    {"{\"arrival\": -1, \"prompt_tokens\": 5, \"max_tokens\": 1}",
	        "arrival: not a number in [0, 1000000000] (got -1)"},
	    {"{\"arrival\": 1, \"prompt_tokens\": 5}", "max_tokens: missing"},
	    {"{\"arrival\": 1, \"prompt_tokens\": 5, \"max_tokens\": 1, "
	     "\"output_tokens\": 0}",
	        "output_tokens: not an integer in [1, 1000000000] (got 0)"},
	    {"{\"arrival\": 1, \"prompt_tokens\": 5, \"max_tokens\": 1, "
	     "\"output_tokens\": \"44\"}",
	        "output_tokens: not an integer in [1, 1000000000] (got a "
	        "string)"},
	    {"{\"arrival\": 1, \"max_tokens\": 1}", "prompt_tokens: missing"},
	    {"{\"arrival\": 1, \"prompt\": 7, \"max_tokens\": 1}",
	        "prompt: not a string"},
	    {"{\"arrival\": 1, \"prompt_tokens\": 5, \"max_tokens\": 1, "
	     "\"ttft_slo\": 0}",
	        "ttft_slo: not a number in (0, 1000000000] (got 0)"},
	    {"{\"id\": \"0123456789012345678901234567890123456789"
	     "012345678901234567890123\", \"arrival\": 1, "
	     "\"prompt_tokens\": 5, \"max_tokens\": 1}",
	        "id: longer than 63 bytes"},
	    {"{\"id\": -4, \"arrival\": 1, \"prompt_tokens\": 5, "
	     "\"max_tokens\": 1}",
	        "id: not a string or non-negative"},
	    {"{\"id\": \"\", \"arrival\": 1, \"prompt_tokens\": 5, "
	     "\"max_tokens\": 1}",
	        "id: empty"},
	    {"hello", "not JSON"},
	    {"", "not JSON"},
	    {"{\"arrival\": 1, \"prompt_tokens\": 5, \"max_tokens\": 1} x",
	        "not JSON"},
	    {"{\"arrival\": 1, \"arrival\": 2, \"prompt_tokens\": 5, "
	     "\"max_tokens\": 1}",
	        "duplicate"},
	    {"[1, 2]", "not a JSON object"},
	    {"{\"arrival\": 1e999, \"prompt_tokens\": 5, "
	     "\"max_tokens\": 1}",
	        "not JSON"},
	};
	struct medha_reqspec rs;
	char why[128];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		why[0] = '\0';
		assert_int_equal(medha_reqspec_parse(cases[i].line, &rs, why,
		                     sizeof(why)),
		    MEDHA_EFORMAT);
		if (strstr(why, cases[i].why) == NULL)
			fail_msg("case %zu: \"%s\" lacks \"%s\"", i, why,
			    cases[i].why);
		assert_null(rs.prompt);
	}
}

static void
test_record_parse(void **state)
{
	struct medha_record r;
	char why[128];

	(void)state;
	/* ttft and tpot_mean derived when absent */
	assert_int_equal(
	    medha_record_parse(
	        "{\"id\": 3, \"arrival\": 2, "
	        "\"first_token\": 12, \"finish\": 20, \"prompt_tokens\": 300, "
	        "\"output_tokens\": 5, \"status\": \"ok\"}",
	        &r, why, sizeof(why)),
	    0);
	assert_true(r.ttft == 10);
	assert_true(r.tpot_mean == 2);
	assert_int_equal(r.status, MEDHA_STATUS_OK);

	/* a rejected request needs no times */
	assert_int_equal(
	    medha_record_parse("{\"id\": \"x\", \"arrival\": 1, "
	                       "\"prompt_tokens\": 0, \"output_tokens\": 0, "
	                       "\"status\": \"rejected\"}",
	        &r, why, sizeof(why)),
	    0);
	assert_int_equal(r.status, MEDHA_STATUS_REJECTED);

	assert_int_equal(
	    medha_record_parse("{\"id\": 3, \"arrival\": 2, "
	                       "\"prompt_tokens\": 300, \"output_tokens\": 5, "
	                       "\"status\": \"ok\"}",
	        &r, why, sizeof(why)),
	    MEDHA_EFORMAT);
	assert_non_null(strstr(why, "first_token: missing"));
	assert_int_equal(
	    medha_record_parse("{\"id\": 3, \"arrival\": 2, "
	                       "\"prompt_tokens\": 300, \"output_tokens\": 5, "
	                       "\"status\": \"done\"}",
	        &r, why, sizeof(why)),
	    MEDHA_EFORMAT);
	assert_non_null(strstr(why, "status: not one of"));

	assert_string_equal(medha_status_name(MEDHA_STATUS_FAILED), "failed");
	assert_int_equal(medha_status_parse("failed"), MEDHA_STATUS_FAILED);
	assert_int_equal(medha_status_parse("nope"), -1);
}

/* ---- round trips ---- */

/* Rewinds f and reads its first line. */
static void
first_line(FILE *f, struct medha_reader **r, char **line)
{
	size_t len;

	rewind(f);
	assert_int_equal(medha_reader_open(r, f), 0);
	assert_int_equal(medha_reader_line(*r, line, &len), 1);
	assert_int_equal(strlen(*line), len);
}

static void
test_reqspec_roundtrip(void **state)
{
	static const char *ids[] = {"123", "007", "abc \"q\"", "0",
	    "1234567890123456789"};
	struct medha_reqspec in = {0}, out = {0};
	struct medha_writer *w;
	struct medha_reader *r;
	char why[128], *line;
	size_t i;
	FILE *f;

	(void)state;
	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		assert_non_null(f = tmpfile());
		snprintf(in.id, sizeof(in.id), "%s", ids[i]);
		in.arrival = 3600.125;
		in.prompt_tokens = i == 0 ? 0 : 1048576;
		in.max_tokens = 518;
		in.output_tokens = i == 2 ? 0 : 17 * (int64_t)i + 1;
		in.ttft_slo = i == 1 ? 0 : 183.297832;
		in.tpot_slo = 0.1;
		in.prompt = i == 0
		    ? "line\none\ttab \\ \"quoted\" \x01 h\xc3\xa9"
		    : NULL;
		assert_int_equal(medha_writer_open(&w, f, 0), 0);
		assert_int_equal(medha_reqspec_write(w, &in), 0);
		assert_int_equal(medha_writer_close(w), 0);
		first_line(f, &r, &line);
		if (i == 0)
			assert_non_null(strstr(line, "\"id\": 123,"));
		if (i == 1)
			assert_non_null(strstr(line, "\"id\": \"007\","));
		assert_int_equal(medha_reqspec_parse(line, &out, why,
		                     sizeof(why)),
		    0);
		assert_string_equal(out.id, in.id);
		assert_true(out.arrival == in.arrival);
		assert_int_equal(out.prompt_tokens, in.prompt_tokens);
		assert_int_equal(out.max_tokens, in.max_tokens);
		assert_int_equal(out.output_tokens, in.output_tokens);
		assert_int_equal(strstr(line, "\"output_tokens\"") != NULL,
		    in.output_tokens > 0);
		assert_true(out.ttft_slo == in.ttft_slo);
		assert_true(out.tpot_slo == in.tpot_slo);
		if (in.prompt != NULL)
			assert_string_equal(out.prompt, in.prompt);
		else
			assert_null(out.prompt);
		medha_reqspec_clear(&out);
		medha_reader_close(r);
		fclose(f);
	}

	/* what could not be read back is not written */
	in.output_tokens = -1;
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 0), 0);
	assert_int_equal(medha_reqspec_write(w, &in), MEDHA_EINVAL);
	assert_int_equal(medha_writer_close(w), 0);
	fclose(f);
	in.output_tokens = 0;
	in.prompt_tokens = 0;
	in.prompt = NULL;
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 0), 0);
	assert_int_equal(medha_reqspec_write(w, &in), MEDHA_EINVAL);
	assert_int_equal(medha_writer_close(w), 0);
	fclose(f);
}

static void
test_record_roundtrip(void **state)
{
	struct medha_record in, out;
	struct medha_writer *w;
	struct medha_reader *r;
	char why[128], *line;
	int st;
	FILE *f;

	(void)state;
	for (st = MEDHA_STATUS_OK; st <= MEDHA_STATUS_FAILED; st++) {
		memset(&in, 0, sizeof(in));
		snprintf(in.id, sizeof(in.id), st == 0 ? "17" : "r-%d", st);
		in.arrival = 12.5;
		in.first_token = 13.75;
		in.finish = 20.25;
		in.prompt_tokens = 393000;
		in.output_tokens = 27;
		in.ttft = 1.25;
		in.tpot_mean = 0.25;
		in.tpot_max = 0.5;
		in.ttft_slo = 28.1105;
		in.tpot_slo = st == 2 ? 0 : 0.1;
		in.status = st;
		assert_non_null(f = tmpfile());
		assert_int_equal(medha_writer_open(&w, f, 0), 0);
		assert_int_equal(medha_record_write(w, &in), 0);
		assert_int_equal(medha_writer_close(w), 0);
		first_line(f, &r, &line);
		assert_int_equal(medha_record_parse(line, &out, why,
		                     sizeof(why)),
		    0);
		assert_string_equal(out.id, in.id);
		assert_true(out.arrival == in.arrival);
		assert_true(out.first_token == in.first_token);
		assert_true(out.finish == in.finish);
		assert_int_equal(out.prompt_tokens, in.prompt_tokens);
		assert_int_equal(out.output_tokens, in.output_tokens);
		assert_true(out.ttft == in.ttft);
		assert_true(out.tpot_mean == in.tpot_mean);
		assert_true(out.tpot_max == in.tpot_max);
		assert_true(out.ttft_slo == in.ttft_slo);
		assert_true(out.tpot_slo == in.tpot_slo);
		assert_int_equal(out.status, in.status);
		/* neither kept: left out, read back as unknown */
		assert_null(strstr(line, "tbt"));
		assert_null(strstr(line, "prefill_alone"));
		assert_int_equal(out.tbt.n, 0);
		assert_true(out.prefill_alone == 0);
		medha_reader_close(r);
		fclose(f);
	}
}

/* The fields a live replica adds: sampling, stops, ids, text. */
static void
test_live_fields_roundtrip(void **state)
{
	struct medha_reqspec in = {0}, out = {0};
	struct medha_record rin, rout;
	struct medha_writer *w;
	struct medha_reader *r;
	char why[160], *line, s1[] = "\n\n", s2[] = "User:";
	int32_t ids[] = {1, 9906, 28, 0, 49151};
	int32_t gen[] = {504, 3458, 0};
	static const char *bad[] = {
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt_ids\": [1, -2]}",
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt_ids\": []}",
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt_tokens\": 3, "
	    "\"prompt_ids\": [1, 2]}",
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt\": \"x\", "
	    "\"temperature\": 101}",
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt\": \"x\", "
	    "\"top_p\": 1.5}",
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt\": \"x\", "
	    "\"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}",
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt\": \"x\", "
	    "\"stop\": [\"\"]}",
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt\": \"x\", "
	    "\"stop\": 3}",
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt\": \"x\", "
	    "\"ignore_eos\": 1}",
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt\": \"x\", "
	    "\"min_tokens\": 2}",
	    "{\"arrival\": 0, \"max_tokens\": 1, \"prompt\": \"x\", "
	    "\"min_tokens\": -1}",
	};
	FILE *f;

	(void)state;
	snprintf(in.id, sizeof(in.id), "q1");
	in.prompt_tokens = 5;
	in.prompt_ids = ids;
	in.max_tokens = 64;
	in.sampling = (struct medha_sampler_params){0.7f, 40, 0.9f, 42, 0.5f,
	    -0.25f, 1.2f, 0.05f, 0, 0, 0, .min_tokens = 64};
	in.ignore_eos = 1;
	in.n_stop = 2;
	in.stop[0] = s1;
	in.stop[1] = s2;
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 0), 0);
	assert_int_equal(medha_reqspec_write(w, &in), 0);
	assert_int_equal(medha_writer_close(w), 0);
	first_line(f, &r, &line);
	assert_int_equal(medha_reqspec_parse(line, &out, why, sizeof(why)), 0);
	assert_int_equal(out.prompt_tokens, 5);
	assert_memory_equal(out.prompt_ids, ids, sizeof(ids));
	assert_true(out.sampling.temp == 0.7f);
	assert_int_equal(out.sampling.top_k, 40);
	assert_true(out.sampling.top_p == 0.9f);
	assert_int_equal(out.sampling.seed, 42);
	assert_int_equal(out.sampling.min_tokens, 64);
	assert_int_equal(out.ignore_eos, 1);
	assert_int_equal(out.n_stop, 2);
	assert_string_equal(out.stop[0], "\n\n");
	assert_string_equal(out.stop[1], "User:");
	medha_reqspec_clear(&out);
	medha_reader_close(r);
	fclose(f);

	/* a line without sampling fields is greedy */
	assert_int_equal(medha_reqspec_parse("{\"arrival\": 0, \"max_tokens\": "
	                                     "1, \"prompt\": \"hi\", "
	                                     "\"stop\": \"x\"}",
	                     &out, why, sizeof(why)),
	    0);
	assert_true(out.sampling.temp == 0);
	assert_int_equal(out.n_stop, 1);
	medha_reqspec_clear(&out);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(medha_reqspec_parse(bad[i], &out, why,
		                     sizeof(why)),
		    MEDHA_EFORMAT);
		assert_null(out.prompt_ids);
	}

	memset(&rin, 0, sizeof(rin));
	snprintf(rin.id, sizeof(rin.id), "q1");
	rin.status = MEDHA_STATUS_CANCELLED;
	snprintf(rin.reason, sizeof(rin.reason), "client \"7\" went away");
	rin.token_ids = gen;
	rin.n_token_ids = 3;
	/* a stray byte and a character cut short become U+FFFD */
	rin.text = "caf\xc3\xa9 \xff ok \xe2\x82";
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 0), 0);
	assert_int_equal(medha_record_write(w, &rin), 0);
	rin.status = MEDHA_STATUS_OK;
	rin.finish_reason = MEDHA_FINISH_STOP;
	rin.reason[0] = '\0';
	rin.token_ids = NULL;
	rin.text = NULL;
	assert_int_equal(medha_record_write(w, &rin), 0);
	assert_int_equal(medha_writer_close(w), 0);
	rewind(f);
	assert_int_equal(medha_reader_open(&r, f), 0);
	assert_int_equal(medha_reader_line(r, &line, &(size_t){0}), 1);
	assert_int_equal(medha_record_parse(line, &rout, why, sizeof(why)), 0);
	assert_int_equal(rout.status, MEDHA_STATUS_CANCELLED);
	assert_string_equal(rout.reason, "client \"7\" went away");
	assert_int_equal(rout.n_token_ids, 3);
	assert_memory_equal(rout.token_ids, gen, sizeof(gen));
	assert_string_equal(rout.text,
	    "caf\xc3\xa9 \xef\xbf\xbd ok \xef\xbf\xbd\xef\xbf\xbd");
	assert_int_equal(rout.finish_reason, MEDHA_FINISH_NONE);
	medha_record_clear(&rout);
	assert_int_equal(medha_reader_line(r, &line, &(size_t){0}), 1);
	assert_int_equal(medha_record_parse(line, &rout, why, sizeof(why)), 0);
	assert_int_equal(rout.finish_reason, MEDHA_FINISH_STOP);
	assert_null(rout.token_ids);
	assert_null(rout.text);
	medha_reader_close(r);
	fclose(f);
}

/* ---- time between tokens ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* Uniform in [0, 1). */
static double
rnd01(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* 1 if a and b hold the same bins. */
static int
tbt_same(const struct medha_tbt *a, const struct medha_tbt *b)
{
	if (a->n != b->n)
		return 0;
	for (int i = 0; i < a->n; i++)
		if (a->bin[i].bucket != b->bin[i].bucket ||
		    a->bin[i].count != b->bin[i].count)
			return 0;
	return 1;
}

/*
 * Random gaps (log-uniform over 1e-8 .. 1e5 s, some 0, and runs of one
 * value as a steady decode gives): every quantile is the bucket value of
 * the exact nearest-rank order statistic, within the bucket ratio of it;
 * under 1 us it is 0, past the last edge the last edge.
 */
static void
test_tbt_quantiles(void **state)
{
	static const double qs[] = {0, 0.001, 0.01, 0.07, 0.25, 0.5, 0.9, 0.99,
	    0.999, 1};
	const double top =
	    MEDHA_TBT_MIN * pow(MEDHA_TBT_RATIO, MEDHA_TBT_BUCKETS - 2);
	static double v[20000];
	struct medha_tbt h = {0};
	size_t n, i, k, round;

	(void)state;
	for (round = 0; round < 20; round++) {
		n = 1 + (size_t)(rnd01() * 20000);
		for (i = 0; i < n; i++) {
			double u = rnd01();
			if (u < 0.02)
				v[i] = 0;
			else if (u < 0.5 && i > 0)
				v[i] = v[i - 1];
			else
				v[i] = pow(10, -8 + 13 * rnd01());
			assert_int_equal(medha_tbt_add(&h, v[i]), 0);
		}
		assert_int_equal(medha_tbt_count(&h), (int64_t)n);
		assert_int_equal(medha_tbt_check(&h, (int64_t)n, NULL, 0), 0);
		assert_int_equal(medha_tbt_check(&h, (int64_t)n - 1, NULL, 0),
		    MEDHA_EINVAL);
		qsort(v, n, sizeof(*v), cmp_double);
		for (i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
			double got = medha_tbt_quantile(&h, qs[i]), want;

			k = (size_t)ceil(qs[i] * n - qs[i] * n * 1e-12);
			want = v[k < 1 ? 0 : k - 1];
			if (want < MEDHA_TBT_MIN)
				assert_true(got == 0);
			else if (want >= top * MEDHA_TBT_RATIO)
				assert_true(got == top);
			else if (!(got >= want / MEDHA_TBT_RATIO &&
			             got <= want * MEDHA_TBT_RATIO))
				fail_msg("n %zu q %g: %.9g for %.9g", n, qs[i],
				    got, want);
		}
		medha_tbt_free(&h);
		assert_null(h.bin);
		assert_int_equal(h.n, 0);
	}
}

/* The bucket as medha-trace(5) defines it, by the logarithm. */
static int
ref_bucket(double gap)
{
	double b;

	if (gap < MEDHA_TBT_MIN)
		return 0;
	b = floor(log(gap / MEDHA_TBT_MIN) / log(MEDHA_TBT_RATIO)) + 1;
	return b < MEDHA_TBT_BUCKETS - 1 ? (int)b : MEDHA_TBT_BUCKETS - 1;
}

/*
 * medha_tbt_bucket (comparisons against a table of edges) and
 * medha_tbt_add (which first tries the bin it added to last) place
 * every gap where the definition does: at each edge MIN * r^k and a
 * few doubles either side of it, and at random gaps from 1e-7 to 1e5 s,
 * added in runs that stay in one bucket and that jump about.
 */
static void
test_tbt_bucket_definition(void **state)
{
	struct medha_tbt h = {0};
	static int64_t want[MEDHA_TBT_BUCKETS];
	uint64_t x = 88172645463325252ull;

	(void)state;
	for (int k = 0; k <= MEDHA_TBT_BUCKETS; k++) {
		double e = MEDHA_TBT_MIN * pow(MEDHA_TBT_RATIO, k);
		for (int d = -4; d <= 4; d++) {
			double g = e;
			for (int i = 0; i < (d < 0 ? -d : d); i++)
				g = nextafter(g, d < 0 ? 0 : INFINITY);
			assert_int_equal(medha_tbt_bucket(g), ref_bucket(g));
		}
	}
	for (int i = 0; i < 200000; i++) {
		double u, g;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		u = (double)(x >> 11) / 9007199254740992.0;
		g = 1e-7 * pow(1e12, u);
		if (i % 100 >= 50) /* runs of nearly equal gaps */
			g = 0.02 * (1 + 0.05 * u);
		assert_int_equal(medha_tbt_bucket(g), ref_bucket(g));
		assert_int_equal(medha_tbt_add(&h, g), 0);
		want[ref_bucket(g)]++;
	}
	for (int i = 0; i < h.n; i++) {
		assert_int_equal(h.bin[i].count, want[h.bin[i].bucket]);
		want[h.bin[i].bucket] = 0;
		if (i > 0)
			assert_true(h.bin[i - 1].bucket < h.bin[i].bucket);
	}
	for (int b = 0; b < MEDHA_TBT_BUCKETS; b++)
		assert_int_equal(want[b], 0);
	medha_tbt_free(&h);
}

/* The buckets' edges and values; bad gaps; empty. */
static void
test_tbt_buckets(void **state)
{
	struct medha_tbt h = {0}, g = {0};

	(void)state;
	assert_int_equal(medha_tbt_bucket(0), 0);
	assert_int_equal(medha_tbt_bucket(0.99e-6), 0);
	assert_int_equal(medha_tbt_bucket(1e-6), 1);
	assert_int_equal(medha_tbt_bucket(1.04e-6), 1);
	assert_int_equal(medha_tbt_bucket(1.06e-6), 2);
	assert_int_equal(medha_tbt_bucket(0.1), 236);
	assert_int_equal(medha_tbt_bucket(1e4), MEDHA_TBT_BUCKETS - 2);
	assert_int_equal(medha_tbt_bucket(1.01e4), MEDHA_TBT_BUCKETS - 1);
	assert_int_equal(medha_tbt_bucket(1e300), MEDHA_TBT_BUCKETS - 1);
	assert_int_equal(medha_tbt_bucket(INFINITY), MEDHA_TBT_BUCKETS - 1);
	assert_int_equal(medha_tbt_bucket(-1e-9), -1);
	assert_int_equal(medha_tbt_bucket(NAN), -1);
	assert_true(medha_tbt_value(0) == 0);
	assert_true(fabs(medha_tbt_value(1) / (1e-6 * sqrt(1.05)) - 1) < 1e-12);
	assert_true(fabs(medha_tbt_value(MEDHA_TBT_BUCKETS - 1) / 10031.1139 -
	                1) < 1e-8);
	/* every bucket's value lies in it */
	for (int b = 1; b < MEDHA_TBT_BUCKETS; b++)
		assert_int_equal(medha_tbt_bucket(medha_tbt_value(b)), b);

	assert_true(isnan(medha_tbt_quantile(&h, 0.5)));
	assert_int_equal(medha_tbt_add(&h, -1), MEDHA_EINVAL);
	assert_int_equal(medha_tbt_add(&h, NAN), MEDHA_EINVAL);
	assert_int_equal(h.n, 0);
	assert_int_equal(medha_tbt_add(&h, 0.05), 0);
	assert_true(fabs(medha_tbt_quantile(&h, 0.99) / 0.05 - 1) < 0.05);
	/* n gaps in a bucket at once: as n adds; bad buckets and counts */
	assert_int_equal(medha_tbt_add_n(&h, medha_tbt_bucket(0.05), 3), 0);
	assert_int_equal(medha_tbt_add_n(&h, 1, 2), 0);
	assert_int_equal(medha_tbt_add_n(&h, -1, 1), MEDHA_EINVAL);
	assert_int_equal(medha_tbt_add_n(&h, MEDHA_TBT_BUCKETS, 1),
	    MEDHA_EINVAL);
	assert_int_equal(medha_tbt_add_n(&h, 1, 0), MEDHA_EINVAL);
	assert_int_equal(h.n, 2);
	assert_int_equal(h.bin[0].bucket, 1);
	assert_int_equal(h.bin[0].count, 2);
	assert_int_equal(h.bin[1].bucket, medha_tbt_bucket(0.05));
	assert_int_equal(h.bin[1].count, 4);
	medha_tbt_move(&g, &h);
	assert_int_equal(h.n, 0);
	assert_null(h.bin);
	assert_int_equal(medha_tbt_count(&g), 6);
	medha_tbt_free(&g);
}

/* Merging histograms is adding their gaps to one. */
static void
test_tbt_merge(void **state)
{
	struct medha_tbt all = {0}, part[3] = {{0}}, sum = {0};
	int i;

	(void)state;
	for (i = 0; i < 5000; i++) {
		double gap = i % 7 == 0 ? pow(10, -7 + 12 * rnd01())
		                        : 0.02 + 0.01 * rnd01();
		assert_int_equal(medha_tbt_add(&all, gap), 0);
		assert_int_equal(medha_tbt_add(&part[i % 3], gap), 0);
	}
	for (i = 0; i < 3; i++)
		assert_int_equal(medha_tbt_merge(&sum, &part[i]), 0);
	assert_true(tbt_same(&sum, &all));
	assert_int_equal(medha_tbt_merge(&sum, &(struct medha_tbt){0}), 0);
	assert_true(tbt_same(&sum, &all));
	/* in the other order, and into a non-empty one */
	assert_int_equal(medha_tbt_merge(&part[2], &part[1]), 0);
	assert_int_equal(medha_tbt_merge(&part[2], &part[0]), 0);
	assert_true(tbt_same(&part[2], &all));
	for (i = 0; i < 3; i++)
		medha_tbt_free(&part[i]);
	medha_tbt_free(&sum);
	medha_tbt_free(&all);
}

/* A record's tbt and prefill_alone survive writing and reading. */
static void
test_tbt_roundtrip(void **state)
{
	struct medha_record in, out;
	struct medha_writer *w;
	struct medha_reader *r;
	char why[160], *line;
	FILE *f;
	int i;

	(void)state;
	memset(&in, 0, sizeof(in));
	snprintf(in.id, sizeof(in.id), "t");
	in.arrival = 1;
	in.first_token = 2;
	in.finish = 12;
	in.prompt_tokens = 100;
	in.output_tokens = 501;
	in.status = MEDHA_STATUS_OK;
	in.prefill_alone = 0.375;
	for (i = 0; i < 500; i++)
		assert_int_equal(medha_tbt_add(&in.tbt,
		                     i == 250 ? 1.5 : 0.019 + 0.0001 * (i % 5)),
		    0);
	in.tpot_max = 1.5;
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 0), 0);
	assert_int_equal(medha_record_write(w, &in), 0);
	assert_int_equal(medha_writer_close(w), 0);
	first_line(f, &r, &line);
	assert_non_null(strstr(line, "\"prefill_alone\": 0.375"));
	assert_non_null(strstr(line, "\"tbt\": [["));
	assert_int_equal(medha_record_parse(line, &out, why, sizeof(why)), 0);
	assert_true(out.prefill_alone == 0.375);
	assert_true(tbt_same(&out.tbt, &in.tbt));
	assert_true(medha_tbt_quantile(&out.tbt, 1) ==
	    medha_tbt_value(medha_tbt_bucket(1.5)));
	medha_record_clear(&out);
	assert_null(out.tbt.bin);
	medha_reader_close(r);
	fclose(f);

	/* the writer refuses what the reader would */
	in.output_tokens = 500; /* 499 gaps at most */
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 0), 0);
	assert_int_equal(medha_record_write(w, &in), MEDHA_EINVAL);
	in.output_tokens = 501;
	in.tbt.bin[1].bucket = in.tbt.bin[0].bucket;
	assert_int_equal(medha_record_write(w, &in), MEDHA_EINVAL);
	medha_tbt_free(&in.tbt);
	in.prefill_alone = NAN;
	assert_int_equal(medha_record_write(w, &in), MEDHA_EINVAL);
	assert_int_equal(medha_writer_close(w), 0);
	assert_int_equal(ftell(f), 0);
	fclose(f);
}

/* Malformed tbt and prefill_alone: refused, with the reason. */
static void
test_tbt_malformed(void **state)
{
	static const struct {
		const char *extra, *why;
	} bad[] = {
	    {"\"tbt\": {}",
	        "tbt: not an array of at most 474 [bucket, count] pairs"},
	    {"\"tbt\": null",
	        "tbt: not an array of at most 474 [bucket, count] pairs"},
	    {"\"tbt\": [5, 1]", "tbt[0]: not a [bucket, count] pair"},
	    {"\"tbt\": [[5]]", "tbt[0]: not a [bucket, count] pair"},
	    {"\"tbt\": [[5, 1, 1]]", "tbt[0]: not a [bucket, count] pair"},
	    {"\"tbt\": [[-1, 1]]",
	        "tbt[0]: bucket: not an integer in [0, 473] (got -1)"},
	    {"\"tbt\": [[474, 1]]",
	        "tbt[0]: bucket: not an integer in [0, 473] (got 474)"},
	    {"\"tbt\": [[4.5, 1]]",
	        "tbt[0]: bucket: not an integer in [0, 473] (got 4.5)"},
	    {"\"tbt\": [[\"4\", 1]]",
	        "tbt[0]: bucket: not an integer in [0, 473] (got a string)"},
	    {"\"tbt\": [[9, 1], [5, 1]]",
	        "tbt[1]: bucket 5 not above the one before (9)"},
	    {"\"tbt\": [[5, 1], [5, 1]]",
	        "tbt[1]: bucket 5 not above the one before (5)"},
	    {"\"tbt\": [[5, 0]]",
	        "tbt[0]: count: not an integer in [1, 1000000000] (got 0)"},
	    {"\"tbt\": [[5, 9223372036854775807]]",
	        "tbt[0]: count: not an integer in [1, 1000000000]"},
	    {"\"tbt\": [[5, 6], [7, 5]]",
	        "tbt: 11 gaps, more than output_tokens - 1 (10)"},
	    {"\"prefill_alone\": 0",
	        "prefill_alone: not a positive number (got 0)"},
	    {"\"prefill_alone\": -1",
	        "prefill_alone: not a positive number (got -1)"},
	    {"\"prefill_alone\": \"1\"",
	        "prefill_alone: not a positive number (got a string)"},
	};
	struct medha_record r;
	char line[8192], why[200];
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(line, sizeof(line),
		    "{\"id\": 1, \"arrival\": 0, \"first_token\": 1, "
		    "\"finish\": 2, \"prompt_tokens\": 5, "
		    "\"output_tokens\": 11, \"status\": \"ok\", %s}",
		    bad[i].extra);
		why[0] = '\0';
		assert_int_equal(medha_record_parse(line, &r, why, sizeof(why)),
		    MEDHA_EFORMAT);
		if (strstr(why, bad[i].why) == NULL)
			fail_msg("case %zu: \"%s\" lacks \"%s\"", i, why,
			    bad[i].why);
	}
	/* longer than there are buckets */
	n = (size_t)snprintf(line, sizeof(line),
	    "{\"id\": 1, \"arrival\": 0, \"prompt_tokens\": 5, "
	    "\"output_tokens\": 0, \"status\": \"failed\", \"tbt\": [");
	for (i = 0; i <= MEDHA_TBT_BUCKETS; i++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, "%s[%zu, 1]",
		    i ? "," : "", i);
	snprintf(line + n, sizeof(line) - n, "]}");
	assert_int_equal(medha_record_parse(line, &r, why, sizeof(why)),
	    MEDHA_EFORMAT);
	assert_non_null(strstr(why, "tbt: not an array of at most 474"));
	/* an empty one, and none at all, are both no gaps */
	assert_int_equal(medha_record_parse("{\"id\": 1, \"arrival\": 0, "
	                                    "\"prompt_tokens\": 5, "
	                                    "\"output_tokens\": 0, "
	                                    "\"status\": \"failed\", "
	                                    "\"tbt\": []}",
	                     &r, why, sizeof(why)),
	    0);
	assert_int_equal(r.tbt.n, 0);
	medha_record_clear(&r);
}

/* Writes n numbered lines (and one of 300 KB) through a writer, then
 * reads them back. */
static void
lines_roundtrip(int zstd)
{
	static char big[300001];
	struct medha_writer *w;
	struct medha_reader *r;
	unsigned char magic[4];
	char *line, want[64];
	size_t len;
	FILE *f;
	int i;

	memset(big, 'x', sizeof(big) - 1);
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, zstd), 0);
	for (i = 0; i < 5000; i++) {
		assert_int_equal(medha_writer_printf(w, "line %d\n", i), 0);
		if (i == 2500)
			assert_int_equal(medha_writer_printf(w, "%s\n", big),
			    0);
	}
	assert_int_equal(medha_writer_printf(w, "last, no newline"), 0);
	assert_int_equal(medha_writer_close(w), 0);

	rewind(f);
	assert_int_equal(fread(magic, 1, 4, f), 4);
	assert_int_equal(memcmp(magic, "\x28\xb5\x2f\xfd", 4) == 0, zstd);
	rewind(f);
	assert_int_equal(medha_reader_open(&r, f), 0);
	for (i = 0; i < 5000; i++) {
		snprintf(want, sizeof(want), "line %d", i);
		assert_int_equal(medha_reader_line(r, &line, &len), 1);
		assert_string_equal(line, want);
		if (i == 2500) {
			assert_int_equal(medha_reader_line(r, &line, &len), 1);
			assert_int_equal(len, sizeof(big) - 1);
			assert_string_equal(line, big);
		}
	}
	assert_int_equal(medha_reader_line(r, &line, &len), 1);
	assert_string_equal(line, "last, no newline");
	assert_int_equal(medha_reader_line(r, &line, &len), 0);
	assert_int_equal(medha_reader_line(r, &line, &len), 0);
	medha_reader_close(r);
	fclose(f);
}

static void
test_plain_roundtrip(void **state)
{
	(void)state;
	lines_roundtrip(0);
}

static void
test_zstd_roundtrip(void **state)
{
	(void)state;
	lines_roundtrip(1);
}

static void
test_reader_edges(void **state)
{
	static const char nul[] = "ab\0cd\n";
	struct medha_reader *r;
	char *line;
	size_t len;
	FILE *f;

	(void)state;
	/* empty input */
	f = str_stream("");
	assert_int_equal(medha_reader_open(&r, f), 0);
	assert_int_equal(medha_reader_line(r, &line, &len), 0);
	medha_reader_close(r);
	fclose(f);

	/* CRLF, a blank first line, a first byte like the magic's */
	f = str_stream("\r\n(x\r\n\n");
	assert_int_equal(medha_reader_open(&r, f), 0);
	assert_int_equal(medha_reader_line(r, &line, &len), 1);
	assert_string_equal(line, "");
	assert_int_equal(medha_reader_line(r, &line, &len), 1);
	assert_string_equal(line, "(x");
	assert_int_equal(medha_reader_line(r, &line, &len), 1);
	assert_int_equal(len, 0);
	assert_int_equal(medha_reader_line(r, &line, &len), 0);
	medha_reader_close(r);
	fclose(f);

	/* a NUL byte in a line */
	assert_non_null(f = fmemopen((void *)nul, sizeof(nul) - 1, "r"));
	assert_int_equal(medha_reader_open(&r, f), 0);
	assert_int_equal(medha_reader_line(r, &line, &len), MEDHA_EFORMAT);
	assert_non_null(strstr(medha_reader_error(r), "NUL"));
	medha_reader_close(r);
	fclose(f);
}

static void
test_zstd_damaged(void **state)
{
	static const char junk[] = "\x28\xb5\x2f\xfd this is no frame\n";
	struct medha_writer *w;
	struct medha_reader *r;
	char *buf, *line;
	size_t n, len;
	FILE *f, *g;
	int i, rc;

	(void)state;
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 1), 0);
	for (i = 0; i < 20000; i++)
		medha_writer_printf(w,
		    "{\"arrival\": %d, "
		    "\"prompt_tokens\": %d, \"max_tokens\": 1}\n",
		    i, i * 7 + 1);
	assert_int_equal(medha_writer_close(w), 0);
	n = (size_t)ftell(f);
	assert_non_null(buf = malloc(n));
	rewind(f);
	assert_int_equal(fread(buf, 1, n, f), n);
	fclose(f);

	/* cut in half: some lines, then an error */
	assert_non_null(g = fmemopen(buf, n / 2, "r"));
	assert_int_equal(medha_reader_open(&r, g), 0);
	while ((rc = medha_reader_line(r, &line, &len)) == 1)
		;
	assert_int_equal(rc, MEDHA_EFORMAT);
	assert_non_null(strstr(medha_reader_error(r), "truncated"));
	assert_int_equal(medha_reader_line(r, &line, &len), MEDHA_EFORMAT);
	medha_reader_close(r);
	fclose(g);

	/* a flipped byte in the middle */
	buf[n / 2] ^= 0x55;
	assert_non_null(g = fmemopen(buf, n, "r"));
	assert_int_equal(medha_reader_open(&r, g), 0);
	while ((rc = medha_reader_line(r, &line, &len)) == 1)
		;
	assert_true(rc < 0);
	medha_reader_close(r);
	fclose(g);
	free(buf);

	/* the magic, then garbage */
	assert_non_null(g = fmemopen((void *)junk, sizeof(junk) - 1, "r"));
	assert_int_equal(medha_reader_open(&r, g), 0);
	assert_int_equal(medha_reader_line(r, &line, &len), MEDHA_EFORMAT);
	assert_non_null(strstr(medha_reader_error(r), "zstd"));
	medha_reader_close(r);
	fclose(g);
}

static void
test_writer_error(void **state)
{
	struct medha_writer *w;
	FILE *f;

	(void)state;
	if ((f = fopen("/dev/full", "w")) == NULL)
		skip_why("/dev/full: %s", strerror(errno));
	setvbuf(f, NULL, _IONBF, 0);
	assert_int_equal(medha_writer_open(&w, f, 0), 0);
	medha_writer_printf(w, "data\n");
	medha_writer_printf(w, "more\n");
	assert_int_equal(medha_writer_close(w), MEDHA_EIO);
	fclose(f);
}

/* ---- trace formats ---- */

static void
test_trace_jsonl(void **state)
{
	struct medha_reqspec rs = {0};
	struct medha_trace_in *t;
	FILE *f;

	(void)state;
	f = str_stream(
	    "# a comment\n\n"
	    "{\"arrival\": 0.5, \"prompt_tokens\": 10, \"max_tokens\": 2}\n"
	    "  {\"id\": \"x\", \"arrival\": 1, \"prompt\": \"p\", "
	    "\"max_tokens\": 0}\n"
	    "{\"arrival\": 2, \"prompt_tokens\": 10, \"max_tokens\": 2}\n"
	    "{\"arrival\": 3, \"prompt_tokens\": 10, \"max_tokens\": -2}\n");
	assert_int_equal(medha_trace_open(&t, f), 0);
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_string_equal(rs.id, "0");
	assert_true(rs.arrival == 0.5);
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_string_equal(rs.id, "x");
	assert_string_equal(rs.prompt, "p");
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_string_equal(rs.id, "2"); /* requests are counted, not lines */
	assert_null(rs.prompt);
	assert_int_equal(medha_trace_next(t, &rs), MEDHA_EFORMAT);
	assert_string_equal(medha_trace_error(t),
	    "line 6: max_tokens: not an integer in [0, 1000000000] (got -2)");
	medha_trace_close(t);
	fclose(f);
}

static void
test_trace_azure(void **state)
{
	struct medha_reqspec rs = {0};
	struct medha_trace_in *t;
	FILE *f;

	(void)state;
	f = str_stream("TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
	               "2023-11-16 18:15:46.6805900,374,44\r\n"
	               "2023-11-16 18:15:50.9951690,396,109\r\n"
	               "2023-11-17 00:00:00,5,0\r\n"
	               "2023-11-16 18:15:40,5,0\r\n");
	assert_int_equal(medha_trace_open(&t, f), 0);
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_string_equal(rs.id, "0");
	assert_true(rs.arrival == 0);
	assert_int_equal(rs.prompt_tokens, 374);
	assert_int_equal(rs.max_tokens, 44);
	assert_true(rs.ttft_slo == 0 && rs.tpot_slo == 0);
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_string_equal(rs.id, "1");
	assert_float_equal(rs.arrival, 4.314579, 1e-9);
	assert_int_equal(rs.prompt_tokens, 396);
	assert_int_equal(rs.max_tokens, 109);
	assert_int_equal(medha_trace_next(t, &rs), 1); /* across midnight */
	assert_float_equal(rs.arrival, 20653.31941, 1e-9);
	assert_int_equal(rs.max_tokens, 0);
	assert_int_equal(medha_trace_next(t, &rs), MEDHA_EFORMAT);
	assert_non_null(strstr(medha_trace_error(t), "line 5: TIMESTAMP"));
	medha_trace_close(t);
	fclose(f);

	f = str_stream("TIMESTAMP,ContextTokens,GeneratedTokens\n"
	               "2023-11-16 18:15:46,0,44\n");
	assert_int_equal(medha_trace_open(&t, f), 0);
	assert_int_equal(medha_trace_next(t, &rs), MEDHA_EFORMAT);
	assert_string_equal(medha_trace_error(t),
	    "line 2: ContextTokens: not an integer in [1, 1000000000] (got "
	    "\"0\")");
	medha_trace_close(t);
	fclose(f);
}

static void
test_trace_vidur(void **state)
{
	struct medha_reqspec rs = {0};
	struct medha_trace_in *t;
	FILE *f;

	(void)state;
	f = str_stream(",num_decode_tokens,arrived_at,num_prefill_tokens,pd\n"
	               "0,20,0.25,100,5.0\n"
	               "1,7.0,1.75,3000.0,x\n"
	               "2,7,1.75\n");
	assert_int_equal(medha_trace_open(&t, f), 0);
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_string_equal(rs.id, "0");
	assert_true(rs.arrival == 0.25);
	assert_int_equal(rs.prompt_tokens, 100);
	assert_int_equal(rs.max_tokens, 20);
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_true(rs.arrival == 1.75);
	assert_int_equal(rs.prompt_tokens, 3000);
	assert_int_equal(rs.max_tokens, 7);
	assert_int_equal(medha_trace_next(t, &rs), MEDHA_EFORMAT);
	assert_non_null(strstr(medha_trace_error(t), "line 4: 3 fields"));
	medha_trace_close(t);
	fclose(f);

	f = str_stream("a,b,c\n1,2,3\n");
	assert_int_equal(medha_trace_open(&t, f), 0);
	assert_int_equal(medha_trace_next(t, &rs), MEDHA_EFORMAT);
	assert_non_null(
	    strstr(medha_trace_error(t), "line 1: unknown trace format"));
	medha_trace_close(t);
	fclose(f);
}

static void
test_trace_zstd(void **state)
{
	struct medha_reqspec rs = {0};
	struct medha_trace_in *t;
	struct medha_writer *w;
	FILE *f;

	(void)state;
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 1), 0);
	medha_writer_printf(w,
	    "arrived_at,num_prefill_tokens,"
	    "num_decode_tokens\n3,4,5\n");
	assert_int_equal(medha_writer_close(w), 0);
	rewind(f);
	assert_int_equal(medha_trace_open(&t, f), 0);
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_true(rs.arrival == 3);
	assert_int_equal(rs.prompt_tokens, 4);
	assert_int_equal(rs.max_tokens, 5);
	assert_int_equal(medha_trace_next(t, &rs), 0);
	medha_trace_close(t);
	fclose(f);
}

/* ---- limits (man/medha-trace.5): counts and times read from outside ---- */

/* Each line must fail to parse with a reason containing why. */
static void
reqspec_refuses(const char *line, const char *why_want)
{
	struct medha_reqspec rs;
	char why[200];

	why[0] = '\0';
	if (medha_reqspec_parse(line, &rs, why, sizeof(why)) != MEDHA_EFORMAT)
		fail_msg("%s: accepted (prompt_tokens %lld, max_tokens %lld)",
		    line, (long long)rs.prompt_tokens,
		    (long long)rs.max_tokens);
	if (strstr(why, why_want) == NULL)
		fail_msg("%s: \"%s\" lacks \"%s\"", line, why, why_want);
	assert_null(rs.prompt);
}

static void
test_parse_limits(void **state)
{
	struct medha_reqspec rs;
	char why[200];

	(void)state;
	assert_int_equal(MEDHA_TOKENS_MAX, 1000000000);
	assert_true(MEDHA_TIME_MAX == 1e9);
	/* the sum of two counts fits an int32_t, their product an int64_t */
	assert_true(2 * MEDHA_TOKENS_MAX <= INT32_MAX);
	assert_true(MEDHA_TOKENS_MAX <= INT64_MAX / MEDHA_TOKENS_MAX);

	/* the limits themselves pass */
	assert_int_equal(
	    medha_reqspec_parse("{\"arrival\": 1e9, \"prompt_tokens\": "
	                        "1000000000, \"max_tokens\": 1e9, "
	                        "\"ttft_slo\": 1e9, \"tpot_slo\": 1000000000}",
	        &rs, why, sizeof(why)),
	    0);
	assert_int_equal(rs.prompt_tokens, MEDHA_TOKENS_MAX);
	assert_int_equal(rs.max_tokens, MEDHA_TOKENS_MAX);
	assert_true(rs.arrival == MEDHA_TIME_MAX);
	assert_true(rs.ttft_slo == MEDHA_TIME_MAX);
	assert_true(rs.tpot_slo == MEDHA_TIME_MAX);

	/* one past them, and far past, does not; the reason names the
	   field, the value and the range */
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": "
	                "9223372036854775807, \"max_tokens\": 5}",
	    "prompt_tokens: not an integer in [1, 1000000000] "
	    "(got 9223372036854775807)");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 1000000001, "
	                "\"max_tokens\": 5}",
	    "prompt_tokens: not an integer in [1, 1000000000] "
	    "(got 1000000001)");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 1e18, "
	                "\"max_tokens\": 5}",
	    "prompt_tokens: not an integer in [1, 1000000000] (got 1e+18)");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": "
	                "1000000000000000000, \"max_tokens\": 5}",
	    "(got 1000000000000000000)");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 9223372036854775000}",
	    "max_tokens: not an integer in [0, 1000000000] "
	    "(got 9223372036854775000)");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 1000000001}",
	    "max_tokens: not an integer in [0, 1000000000]");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	                "\"max_tokens\": -9223372036854775807}",
	    "max_tokens: not an integer in [0, 1000000000]");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": \"NaN\", "
	                "\"max_tokens\": 5}",
	    "prompt_tokens: not an integer in [1, 1000000000] (got a string)");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": NaN, "
	                "\"max_tokens\": 5}",
	    "not JSON");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 1e400, "
	                "\"max_tokens\": 5}",
	    "not JSON");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": "
	                "99999999999999999999, \"max_tokens\": 5}",
	    "not JSON");
	reqspec_refuses("{\"arrival\": 1e300, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 5}",
	    "arrival: not a number in [0, 1000000000] (got 1e+300)");
	reqspec_refuses("{\"arrival\": 1000000000.5, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 5}",
	    "arrival: not a number in [0, 1000000000]");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 5, \"ttft_slo\": 1e300}",
	    "ttft_slo: not a number in (0, 1000000000] (got 1e+300)");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 5, \"tpot_slo\": -1}",
	    "tpot_slo: not a number in (0, 1000000000] (got -1)");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 5, \"top_k\": 16777217}",
	    "top_k: not an integer in [0, 16777216] (got 16777217)");
	reqspec_refuses("{\"arrival\": 0, \"max_tokens\": 5, "
	                "\"prompt_ids\": [1, 2147483648]}",
	    "prompt_ids[1]: not a token id in [0, 2147483647] "
	    "(got 2147483648)");
	reqspec_refuses("{\"arrival\": 0, \"max_tokens\": 5, "
	                "\"prompt_ids\": [-1]}",
	    "prompt_ids[0]: not a token id in [0, 2147483647] (got -1)");
}

/* "prefix": named shared segments, round trip and refusals; a record's
 * cached_tokens and preemptions, written only when > 0 */
static void
test_prefix_roundtrip(void **state)
{
	struct medha_reqspec in = {0}, out = {0};
	struct medha_record rin, rout;
	struct medha_seg seg[2] = {{"sys \"1\"", 512}, {"c7.u1", 40}};
	struct medha_writer *w;
	struct medha_reader *r;
	char why[200], *line;
	FILE *f;

	(void)state;
	snprintf(in.id, sizeof(in.id), "q1");
	in.prompt_tokens = 600;
	in.max_tokens = 8;
	in.prefix = seg;
	in.n_prefix = 2;
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 0), 0);
	assert_int_equal(medha_reqspec_write(w, &in), 0);
	in.prompt_tokens = 551; /* the segments would not fit: not written */
	assert_int_equal(medha_reqspec_write(w, &in), MEDHA_EINVAL);
	assert_int_equal(medha_writer_close(w), 0);
	first_line(f, &r, &line);
	assert_non_null(strstr(line, "\"prefix\": [[\"sys \\\"1\\\"\", 512], "
	                             "[\"c7.u1\", 40]]"));
	assert_int_equal(medha_reqspec_parse(line, &out, why, sizeof(why)), 0);
	assert_int_equal(out.n_prefix, 2);
	assert_string_equal(out.prefix[0].name, "sys \"1\"");
	assert_int_equal(out.prefix[0].tokens, 512);
	assert_string_equal(out.prefix[1].name, "c7.u1");
	assert_int_equal(out.prefix[1].tokens, 40);
	medha_reqspec_clear(&out);
	assert_null(out.prefix);
	medha_reader_close(r);
	fclose(f);
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 5, \"prefix\": [[\"a\", 6]]}",
	    "prefix: 6 tokens, more than prompt_tokens (5)");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 5, \"prefix\": [[\"\", 1]]}",
	    "prefix[0]: not [name of 1 to 31 bytes, tokens in [1, "
	    "1000000000]]");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 5, \"prefix\": [[\"a\", 1], [\"b\"]]}",
	    "prefix[1]: not [name");
	reqspec_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	                "\"max_tokens\": 5, \"prefix\": []}",
	    "prefix: not an array of 1 to 1024 segments");

	memset(&rin, 0, sizeof(rin));
	snprintf(rin.id, sizeof(rin.id), "q1");
	rin.prompt_tokens = 600;
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 0), 0);
	assert_int_equal(medha_record_write(w, &rin), 0);
	rin.cached_tokens = 552;
	rin.preemptions = 3;
	assert_int_equal(medha_record_write(w, &rin), 0);
	assert_int_equal(medha_writer_close(w), 0);
	first_line(f, &r, &line);
	assert_null(strstr(line, "cached_tokens"));
	assert_null(strstr(line, "preemptions"));
	assert_int_equal(medha_reader_line(r, &line, &(size_t){0}), 1);
	assert_int_equal(medha_record_parse(line, &rout, why, sizeof(why)), 0);
	assert_int_equal(rout.cached_tokens, 552);
	assert_int_equal(rout.preemptions, 3);
	medha_record_clear(&rout);
	medha_reader_close(r);
	fclose(f);
}

static void
test_record_limits(void **state)
{
	static const struct {
		const char *counts, *why;
	} bad[] = {
	    {"\"prompt_tokens\": 9223372036854775807, \"output_tokens\": 5",
	        "prompt_tokens: not an integer in [0, 1000000000] "
	        "(got 9223372036854775807)"},
	    {"\"prompt_tokens\": 5, \"output_tokens\": 9223372036854775807",
	        "output_tokens: not an integer in [0, 1000000000]"},
	    {"\"prompt_tokens\": 5, \"output_tokens\": 1e18",
	        "output_tokens: not an integer in [0, 1000000000] "
	        "(got 1e+18)"},
	    {"\"prompt_tokens\": 5, \"output_tokens\": -1",
	        "output_tokens: not an integer in [0, 1000000000] (got -1)"},
	};
	struct medha_record r;
	char line[512], why[200];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(line, sizeof(line),
		    "{\"id\": 1, \"arrival\": 0, \"first_token\": 1, "
		    "\"finish\": 2, %s, \"status\": \"ok\"}",
		    bad[i].counts);
		why[0] = '\0';
		assert_int_equal(medha_record_parse(line, &r, why, sizeof(why)),
		    MEDHA_EFORMAT);
		if (strstr(why, bad[i].why) == NULL)
			fail_msg("case %zu: \"%s\" lacks \"%s\"", i, why,
			    bad[i].why);
	}
	/* a record's times are what happened: any finite number >= 0 */
	assert_int_equal(medha_record_parse("{\"id\": 1, \"arrival\": 1e300, "
	                                    "\"first_token\": 1e300, "
	                                    "\"finish\": 1e300, "
	                                    "\"prompt_tokens\": 1000000000, "
	                                    "\"output_tokens\": 1000000000, "
	                                    "\"status\": \"ok\"}",
	                     &r, why, sizeof(why)),
	    0);
	assert_int_equal(r.output_tokens, MEDHA_TOKENS_MAX);
	assert_int_equal(medha_record_parse("{\"id\": 1, \"arrival\": -1, "
	                                    "\"prompt_tokens\": 1, "
	                                    "\"output_tokens\": 0, "
	                                    "\"status\": \"rejected\"}",
	                     &r, why, sizeof(why)),
	    MEDHA_EFORMAT);
	assert_non_null(strstr(why, "arrival: not a non-negative number"));
}

/* The first request of a trace must fail with exactly why_want. */
static void
trace_refuses(const char *text, const char *why_want)
{
	struct medha_reqspec rs = {0};
	struct medha_trace_in *t;
	FILE *f = str_stream(text);
	int rc;

	assert_int_equal(medha_trace_open(&t, f), 0);
	while ((rc = medha_trace_next(t, &rs)) == 1)
		;
	if (rc != MEDHA_EFORMAT || strcmp(medha_trace_error(t), why_want) != 0)
		fail_msg("%s: %d \"%s\", want \"%s\"", text, rc,
		    medha_trace_error(t), why_want);
	medha_reqspec_clear(&rs);
	medha_trace_close(t);
	fclose(f);
}

static void
test_trace_csv_limits(void **state)
{
	struct medha_reqspec rs = {0};
	struct medha_trace_in *t;
	FILE *f;

	(void)state;
#define AZ "TIMESTAMP,ContextTokens,GeneratedTokens\n"
#define VI "arrived_at,num_prefill_tokens,num_decode_tokens\n"
	/* the limits themselves pass */
	f = str_stream(AZ "2023-11-16 18:15:46,1000000000,1000000000\n"
	                  "2055-07-25 20:02:26,1,0\n");
	assert_int_equal(medha_trace_open(&t, f), 0);
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_int_equal(rs.prompt_tokens, MEDHA_TOKENS_MAX);
	assert_int_equal(rs.max_tokens, MEDHA_TOKENS_MAX);
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_true(rs.arrival == MEDHA_TIME_MAX);
	medha_trace_close(t);
	fclose(f);
	f = str_stream(VI "1e9,1e9,1000000000.0\n");
	assert_int_equal(medha_trace_open(&t, f), 0);
	assert_int_equal(medha_trace_next(t, &rs), 1);
	assert_true(rs.arrival == MEDHA_TIME_MAX);
	assert_int_equal(rs.prompt_tokens, MEDHA_TOKENS_MAX);
	assert_int_equal(rs.max_tokens, MEDHA_TOKENS_MAX);
	medha_trace_close(t);
	fclose(f);

	trace_refuses(AZ "2023-11-16 18:15:46,9223372036854775807,44\n",
	    "line 2: ContextTokens: not an integer in [1, 1000000000] "
	    "(got \"9223372036854775807\")");
	trace_refuses(AZ "2023-11-16 18:15:46,5,9223372036854775000\n",
	    "line 2: GeneratedTokens: not an integer in [0, 1000000000] "
	    "(got \"9223372036854775000\")");
	trace_refuses(AZ "2023-11-16 18:15:46,1e18,4\n",
	    "line 2: ContextTokens: not an integer in [1, 1000000000] "
	    "(got \"1e18\")");
	trace_refuses(AZ "2023-11-16 18:15:46,5,4\n"
	                 "2023-11-16 18:15:47,5,-4\n",
	    "line 3: GeneratedTokens: not an integer in [0, 1000000000] "
	    "(got \"-4\")");
	trace_refuses(AZ "2023-11-16 18:15:46,nan,4\n",
	    "line 2: ContextTokens: not an integer in [1, 1000000000] "
	    "(got \"nan\")");
	trace_refuses(AZ "2023-11-16 18:15:46,5,1e400\n",
	    "line 2: GeneratedTokens: not an integer in [0, 1000000000] "
	    "(got \"1e400\")");
	/* a fraction of a second is digits: not ".5e999", which was inf */
	trace_refuses(AZ "2023-11-16 18:15:46.5e999,5,4\n",
	    "line 2: TIMESTAMP: not a time like "
	    "\"2023-11-16 18:15:46.6805900\"");
	trace_refuses(AZ "2023-11-16 18:15:46,5,4\n"
	                 "2055-07-25 20:02:27,5,4\n",
	    "line 3: TIMESTAMP: \"2055-07-25 20:02:27\" is 1000000001 s "
	    "after the first row's, more than 1000000000");
	trace_refuses(VI "1e400,5,4\n",
	    "line 2: arrived_at: not a number in [0, 1000000000] "
	    "(got \"1e400\")");
	trace_refuses(VI "1e300,5,4\n",
	    "line 2: arrived_at: not a number in [0, 1000000000] "
	    "(got \"1e300\")");
	trace_refuses(VI "nan,5,4\n",
	    "line 2: arrived_at: not a number in [0, 1000000000] "
	    "(got \"nan\")");
	trace_refuses(VI "inf,5,4\n",
	    "line 2: arrived_at: not a number in [0, 1000000000] "
	    "(got \"inf\")");
	trace_refuses(VI "-1,5,4\n",
	    "line 2: arrived_at: not a number in [0, 1000000000] "
	    "(got \"-1\")");
	trace_refuses(VI "0,9223372036854775807,4\n",
	    "line 2: num_prefill_tokens: not an integer in [1, 1000000000] "
	    "(got \"9223372036854775807\")");
	trace_refuses(VI "0,5,1e18\n",
	    "line 2: num_decode_tokens: not an integer in [0, 1000000000] "
	    "(got \"1e18\")");
	trace_refuses(VI "0,5,-0.5\n",
	    "line 2: num_decode_tokens: not an integer in [0, 1000000000] "
	    "(got \"-0.5\")");
	trace_refuses("{\"arrival\": 0, \"prompt_tokens\": 5, "
	              "\"max_tokens\": 1}\n"
	              "{\"arrival\": 0, \"prompt_tokens\": "
	              "9223372036854775807, \"max_tokens\": 5}\n",
	    "line 2: prompt_tokens: not an integer in [1, 1000000000] "
	    "(got 9223372036854775807)");
#undef AZ
#undef VI
}

/* Writers refuse what the parser would: a trace out is a trace in. */
static void
test_write_limits(void **state)
{
	struct medha_reqspec rs = {0};
	struct medha_writer *w;
	FILE *f;

	(void)state;
	assert_non_null(f = tmpfile());
	assert_int_equal(medha_writer_open(&w, f, 0), 0);
	rs.arrival = MEDHA_TIME_MAX;
	rs.prompt_tokens = MEDHA_TOKENS_MAX;
	rs.max_tokens = MEDHA_TOKENS_MAX;
	assert_int_equal(medha_reqspec_write(w, &rs), 0);
	rs.prompt_tokens = MEDHA_TOKENS_MAX + 1;
	assert_int_equal(medha_reqspec_write(w, &rs), MEDHA_EINVAL);
	rs.prompt_tokens = 1;
	rs.max_tokens = INT64_MAX;
	assert_int_equal(medha_reqspec_write(w, &rs), MEDHA_EINVAL);
	rs.max_tokens = 1;
	rs.arrival = 2e9;
	assert_int_equal(medha_reqspec_write(w, &rs), MEDHA_EINVAL);
	rs.arrival = 0;
	rs.ttft_slo = 1e300;
	assert_int_equal(medha_reqspec_write(w, &rs), MEDHA_EINVAL);
	assert_int_equal(medha_writer_close(w), 0);
	fclose(f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_valid),
	    cmocka_unit_test(test_parse_malformed),
	    cmocka_unit_test(test_record_parse),
	    cmocka_unit_test(test_reqspec_roundtrip),
	    cmocka_unit_test(test_record_roundtrip),
	    cmocka_unit_test(test_live_fields_roundtrip),
	    cmocka_unit_test(test_tbt_quantiles),
	    cmocka_unit_test(test_tbt_buckets),
	    cmocka_unit_test(test_tbt_bucket_definition),
	    cmocka_unit_test(test_tbt_merge),
	    cmocka_unit_test(test_tbt_roundtrip),
	    cmocka_unit_test(test_tbt_malformed),
	    cmocka_unit_test(test_plain_roundtrip),
	    cmocka_unit_test(test_zstd_roundtrip),
	    cmocka_unit_test(test_reader_edges),
	    cmocka_unit_test(test_zstd_damaged),
	    cmocka_unit_test(test_writer_error),
	    cmocka_unit_test(test_trace_jsonl),
	    cmocka_unit_test(test_trace_azure),
	    cmocka_unit_test(test_trace_vidur),
	    cmocka_unit_test(test_trace_zstd),
	    cmocka_unit_test(test_parse_limits),
	    cmocka_unit_test(test_prefix_roundtrip),
	    cmocka_unit_test(test_record_limits),
	    cmocka_unit_test(test_trace_csv_limits),
	    cmocka_unit_test(test_write_limits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
