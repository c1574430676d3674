/*
 * proto_dec_req.c: the wire decoder's requests and records, the two
 * shapes that travel inside messages: a request specification (SUBMIT's
 * body; its stop strings, SLOs and sampling parameters) and a finished
 * request's record (in EVENTS; its times, counts, status and TBT
 * histogram). Both are maps, read through the typed getters of
 * proto_dec_get.c; the ranges are proto_check's, run once the whole
 * message is decoded.
 */
#include "net/proto_dec_impl.h"

#include <math.h>

/* ---- requests and records ---- */

enum {
	RQ_ID,
	RQ_ARRIVAL,
	RQ_PROMPT,
	RQ_PROMPT_IDS,
	RQ_PROMPT_TOKENS,
	RQ_MAX_TOKENS,
	RQ_TEMP,
	RQ_TOP_K,
	RQ_TOP_P,
	RQ_SEED,
	RQ_IGNORE_EOS,
	RQ_STOP,
	RQ_TTFT_SLO,
	RQ_TPOT_SLO,
	RQ_STREAM,
	RQ_PRESENCE,
	RQ_FREQUENCY,
	RQ_REPETITION,
	RQ_MIN_P,
	RQ_LOGPROBS,
	RQ_TOP_LOGPROBS,
	RQ_STOP_IDS,
	RQ_MIN_TOKENS,
	RQ_CACHE_SALT,
	RQ_N
};
static const char *const rq_keys[RQ_N] = {"id", "arrival", "prompt",
    "prompt_ids", "prompt_tokens", "max_tokens", "temperature", "top_k",
    "top_p", "seed", "ignore_eos", "stop", "ttft_slo", "tpot_slo", "stream",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "min_p",
    "logprobs", "top_logprobs", "stop_token_ids", "min_tokens",
    "cache_salt"};

static int
dec_stop(struct dec *d, const msgpack_object *o, struct medha_reqspec *rs)
{
	const char *path = "request.stop";
	int rc;

	if (o->type != MSGPACK_OBJECT_ARRAY)
		return BAD(d, path, "not an array");
	if (o->via.array.size > MEDHA_STOP_MAX)
		return BAD(d, path, "more than %d strings", MEDHA_STOP_MAX);
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *e = &o->via.array.ptr[i];

		if ((e->type != MSGPACK_OBJECT_STR &&
		        e->type != MSGPACK_OBJECT_BIN) ||
		    e->via.str.size == 0 || e->via.str.size > MEDHA_STOP_LEN)
			return BAD(d, path,
			    "each must be a string of 1 to %d bytes without "
			    "NUL",
			    MEDHA_STOP_LEN);
		if ((rc = dec_dup_text(d, e, path, 0, &rs->stop[i], NULL)) != 0)
			return rc;
		rs->n_stop = (int)i + 1;
	}
	return 0;
}

/* A time that must be > 0 when it is given. */
static int
get_slo(struct dec *d, const msgpack_object *o, const char *path, double *out)
{
	int rc;

	if (o == NULL)
		return 0;
	if ((rc = dec_get_num(d, o, path, out)) != 0)
		return rc;
	if (!(*out > 0) || !isfinite(*out))
		return BAD(d, path, "not a number > 0");
	return 0;
}

int
dec_reqspec(struct dec *d, const msgpack_object *o, struct medha_reqspec *rs)
{
	const msgpack_object *v[RQ_N];
	int64_t pt = 0, n = 0;
	int rc;

	rs->sampling = medha_sampling_greedy;
	if ((rc = dec_get_map(d, o, "request", rq_keys, RQ_N, v)) != 0 ||
	    (rc = dec_need(d, "request", rq_keys, RQ_N, v,
	         1u << RQ_ID | 1u << RQ_MAX_TOKENS)) != 0 ||
	    (rc = dec_get_str(d, v[RQ_ID], "request.id", 0, rs->id,
	         sizeof(rs->id), 1)) != 0 ||
	    (rc = dec_get_i64(d, v[RQ_MAX_TOKENS], "request.max_tokens",
	         &rs->max_tokens)) != 0)
		return rc;
	if (v[RQ_ARRIVAL] != NULL &&
	    (rc = dec_get_num(d, v[RQ_ARRIVAL], "request.arrival",
	         &rs->arrival)) != 0)
		return rc;
	if (v[RQ_PROMPT] != NULL &&
	    (rc = dec_dup_text(d, v[RQ_PROMPT], "request.prompt", 0,
	         &rs->prompt, NULL)) != 0)
		return rc;
	if (v[RQ_PROMPT_IDS] != NULL &&
	    (rc = dec_get_ids(d, v[RQ_PROMPT_IDS], "request.prompt_ids", 1,
	         UINT32_MAX, &rs->prompt_ids, &n)) != 0)
		return rc;
	if (v[RQ_PROMPT_TOKENS] != NULL) {
		if ((rc = dec_get_i64(d, v[RQ_PROMPT_TOKENS],
		         "request.prompt_tokens", &pt)) != 0)
			return rc;
		if (pt < 1)
			return BAD(d, "request.prompt_tokens",
			    "not a positive integer");
		if (rs->prompt_ids != NULL && pt != n)
			return BAD(d, "request.prompt_tokens",
			    "%lld but prompt_ids has %lld", (long long)pt,
			    (long long)n);
	}
	rs->prompt_tokens = rs->prompt_ids != NULL ? n : pt;
	if ((v[RQ_TEMP] != NULL &&
	        (rc = dec_get_float(d, v[RQ_TEMP], "request.temperature",
	             &rs->sampling.temp)) != 0) ||
	    (v[RQ_TOP_K] != NULL &&
	        (rc = dec_get_int(d, v[RQ_TOP_K], "request.top_k",
	             &rs->sampling.top_k)) != 0) ||
	    (v[RQ_TOP_P] != NULL &&
	        (rc = dec_get_float(d, v[RQ_TOP_P], "request.top_p",
	             &rs->sampling.top_p)) != 0) ||
	    (v[RQ_SEED] != NULL &&
	        (rc = dec_get_u64(d, v[RQ_SEED], "request.seed",
	             &rs->sampling.seed)) != 0) ||
	    (v[RQ_PRESENCE] != NULL &&
	        (rc = dec_get_float(d, v[RQ_PRESENCE],
	             "request.presence_penalty",
	             &rs->sampling.presence_penalty)) != 0) ||
	    (v[RQ_FREQUENCY] != NULL &&
	        (rc = dec_get_float(d, v[RQ_FREQUENCY],
	             "request.frequency_penalty",
	             &rs->sampling.frequency_penalty)) != 0) ||
	    (v[RQ_REPETITION] != NULL &&
	        (rc = dec_get_float(d, v[RQ_REPETITION],
	             "request.repetition_penalty",
	             &rs->sampling.repetition_penalty)) != 0) ||
	    (v[RQ_MIN_P] != NULL &&
	        (rc = dec_get_float(d, v[RQ_MIN_P], "request.min_p",
	             &rs->sampling.min_p)) != 0) ||
	    (v[RQ_LOGPROBS] != NULL &&
	        (rc = dec_get_bool(d, v[RQ_LOGPROBS], "request.logprobs",
	             &rs->sampling.logprobs)) != 0) ||
	    (v[RQ_TOP_LOGPROBS] != NULL &&
	        (rc = dec_get_int(d, v[RQ_TOP_LOGPROBS], "request.top_logprobs",
	             &rs->sampling.top_logprobs)) != 0) ||
	    (v[RQ_IGNORE_EOS] != NULL &&
	        (rc = dec_get_bool(d, v[RQ_IGNORE_EOS], "request.ignore_eos",
	             &rs->ignore_eos)) != 0) ||
	    (v[RQ_STOP] != NULL && (rc = dec_stop(d, v[RQ_STOP], rs)) != 0))
		return rc;
	if (v[RQ_STOP_IDS] != NULL) {
		int32_t *ids = NULL;
		int64_t k = 0;
		if ((rc = dec_get_ids(d, v[RQ_STOP_IDS],
		         "request.stop_token_ids", 0, MEDHA_STOP_IDS_MAX, &ids,
		         &k)) != 0) {
			free(ids);
			return rc;
		}
		if (k > 0)
			memcpy(rs->stop_ids, ids, (size_t)k * sizeof(*ids));
		rs->n_stop_ids = (int)k;
		free(ids);
	}
	if (v[RQ_MIN_TOKENS] != NULL &&
	    (rc = dec_get_i64(d, v[RQ_MIN_TOKENS], "request.min_tokens",
	         &rs->sampling.min_tokens)) != 0)
		return rc;
	if (v[RQ_CACHE_SALT] != NULL &&
	    (rc = dec_get_u64(d, v[RQ_CACHE_SALT], "request.cache_salt",
	         &rs->cache_salt)) != 0)
		return rc;
	if (v[RQ_STREAM] != NULL) {
		int stream = 1;
		if ((rc = dec_get_bool(d, v[RQ_STREAM], "request.stream",
		         &stream)) != 0)
			return rc;
		rs->no_stream = !stream;
	}
	if ((rc = get_slo(d, v[RQ_TTFT_SLO], "request.ttft_slo",
	         &rs->ttft_slo)) != 0 ||
	    (rc = get_slo(d, v[RQ_TPOT_SLO], "request.tpot_slo",
	         &rs->tpot_slo)) != 0)
		return rc;
	return 0;
}

enum {
	RC_ID,
	RC_ARRIVAL,
	RC_FIRST_TOKEN,
	RC_FINISH,
	RC_TTFT,
	RC_TPOT_MEAN,
	RC_TPOT_MAX,
	RC_TTFT_SLO,
	RC_TPOT_SLO,
	RC_PROMPT_TOKENS,
	RC_OUTPUT_TOKENS,
	RC_STATUS,
	RC_FINISH_REASON,
	RC_REASON,
	RC_TOKEN_IDS,
	RC_TEXT,
	RC_PREFILL_ALONE,
	RC_TBT,
	RC_CACHED,
	RC_LOGPROBS,
	RC_QUEUE_TIME,
	RC_PREEMPT,
	RC_CODE,
	RC_N
};
static const char *const rc_keys[RC_N] = {"id", "arrival", "first_token",
    "finish", "ttft", "tpot_mean", "tpot_max", "ttft_slo", "tpot_slo",
    "prompt_tokens", "output_tokens", "status", "finish_reason", "reason",
    "token_ids", "text", "prefill_alone", "tbt", "cached_tokens",
    "logprobs", "queue_time", "preemptions", "code"};

/*
 * A record's "tbt": [[bucket, count], ...], each bucket in range (it is
 * narrowed); order, counts and their sum are proto_check's.
 */
static int
dec_tbt(struct dec *d, const msgpack_object *o, const char *path,
    struct medha_tbt *h)
{
	const msgpack_object *e;
	char buf[192];
	int64_t b, n;
	uint32_t i;
	int rc;

	if ((rc = dec_get_arr(d, o, path, 0, MEDHA_TBT_BUCKETS)) != 0)
		return rc;
	if (o->via.array.size == 0)
		return 0;
	if ((h->bin = medha_reallocarray(NULL, o->via.array.size,
	         sizeof(*h->bin))) == NULL)
		return MEDHA_ENOMEM;
	h->cap = (int)o->via.array.size;
	for (i = 0; i < o->via.array.size; i++) {
		e = &o->via.array.ptr[i];
		dec_join_idx(buf, sizeof(buf), path, i);
		if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2)
			return BAD(d, buf, "not a [bucket, count] pair");
		if ((rc = dec_get_i64(d, &e->via.array.ptr[0], buf, &b)) != 0 ||
		    (rc = dec_get_i64(d, &e->via.array.ptr[1], buf, &n)) != 0)
			return rc;
		if (b < 0 || b >= MEDHA_TBT_BUCKETS)
			return BAD(d, buf, "bucket %lld not in [0, %d]",
			    (long long)b, MEDHA_TBT_BUCKETS - 1);
		h->bin[i].bucket = (int32_t)b;
		h->bin[i].count = n;
		h->n = (int)i + 1;
	}
	return 0;
}

int
dec_record(struct dec *d, const msgpack_object *o, const char *pfx,
    struct medha_record *r)
{
	double *t[] = {&r->arrival, &r->first_token, &r->finish, &r->ttft,
	    &r->tpot_mean, &r->tpot_max, &r->ttft_slo, &r->tpot_slo};
	const msgpack_object *v[RC_N];
	char path[160], name[16];
	int rc, k;

	if ((rc = dec_get_map(d, o, pfx, rc_keys, RC_N, v)) != 0 ||
	    (rc = dec_need(d, pfx, rc_keys, RC_N, v,
	         (1u << RC_FINISH_REASON) - 1)) != 0 ||
	    (rc = dec_get_str(d, v[RC_ID],
	         dec_join(path, sizeof(path), pfx, "id"), 0, r->id,
	         sizeof(r->id), 1)) != 0)
		return rc;
	for (k = RC_ARRIVAL; k <= RC_TPOT_SLO; k++)
		if ((rc = dec_get_num(d, v[k],
		         dec_join(path, sizeof(path), pfx, rc_keys[k]),
		         t[k - RC_ARRIVAL])) != 0)
			return rc;
	if ((rc = dec_get_i64(d, v[RC_PROMPT_TOKENS],
	         dec_join(path, sizeof(path), pfx, "prompt_tokens"),
	         &r->prompt_tokens)) != 0 ||
	    (rc = dec_get_i64(d, v[RC_OUTPUT_TOKENS],
	         dec_join(path, sizeof(path), pfx, "output_tokens"),
	         &r->output_tokens)) != 0)
		return rc;
	dec_join(path, sizeof(path), pfx, "status");
	if (dec_get_str(d, v[RC_STATUS], path, 0, name, sizeof(name), 1) != 0 ||
	    (r->status = medha_status_parse(name)) < 0)
		return BAD(d, path,
		    "not \"ok\", \"rejected\", \"failed\" or \"cancelled\"");
	dec_join(path, sizeof(path), pfx, "finish_reason");
	if (v[RC_FINISH_REASON] != NULL &&
	    (dec_get_str(d, v[RC_FINISH_REASON], path, 0, name, sizeof(name),
	         1) != 0 ||
	        (r->finish_reason = medha_finish_parse(name)) < 0))
		return BAD(d, path, "not \"length\" or \"stop\"");
	if ((v[RC_REASON] != NULL &&
	        (rc = dec_get_str(d, v[RC_REASON],
	             dec_join(path, sizeof(path), pfx, "reason"), 1, r->reason,
	             sizeof(r->reason), 0)) != 0) ||
	    (v[RC_TOKEN_IDS] != NULL &&
	        (rc = dec_get_ids(d, v[RC_TOKEN_IDS],
	             dec_join(path, sizeof(path), pfx, "token_ids"), 0,
	             UINT32_MAX, &r->token_ids, &r->n_token_ids)) != 0) ||
	    (v[RC_TEXT] != NULL &&
	        (rc = dec_dup_text(d, v[RC_TEXT],
	             dec_join(path, sizeof(path), pfx, "text"), 0, &r->text,
	             NULL)) != 0) ||
	    (rc = get_slo(d, v[RC_PREFILL_ALONE],
	         dec_join(path, sizeof(path), pfx, "prefill_alone"),
	         &r->prefill_alone)) != 0 ||
	    (rc = get_slo(d, v[RC_QUEUE_TIME],
	         dec_join(path, sizeof(path), pfx, "queue_time"),
	         &r->queue_time)) != 0 ||
	    (v[RC_TBT] != NULL &&
	        (rc = dec_tbt(d, v[RC_TBT],
	             dec_join(path, sizeof(path), pfx, "tbt"), &r->tbt)) != 0) ||
	    (v[RC_CACHED] != NULL &&
	        (rc = dec_get_i64(d, v[RC_CACHED],
	             dec_join(path, sizeof(path), pfx, "cached_tokens"),
	             &r->cached_tokens)) != 0) ||
	    (v[RC_PREEMPT] != NULL &&
	        (rc = dec_get_i64(d, v[RC_PREEMPT],
	             dec_join(path, sizeof(path), pfx, "preemptions"),
	             &r->preemptions)) != 0) ||
	    (v[RC_CODE] != NULL &&
	        (rc = dec_get_int(d, v[RC_CODE],
	             dec_join(path, sizeof(path), pfx, "code"), &r->code)) !=
	            0))
		return rc;
	if (v[RC_CODE] != NULL && r->code >= 0)
		return BAD(d, dec_join(path, sizeof(path), pfx, "code"),
		    "not a negative integer");
	if (r->cached_tokens < 0 || r->cached_tokens > MEDHA_TOKENS_MAX)
		return BAD(d, dec_join(path, sizeof(path), pfx, "cached_tokens"),
		    "not an integer in [0, %lld]", (long long)MEDHA_TOKENS_MAX);
	if (r->preemptions < 0 || r->preemptions > MEDHA_TOKENS_MAX)
		return BAD(d, dec_join(path, sizeof(path), pfx, "preemptions"),
		    "not an integer in [0, %lld]", (long long)MEDHA_TOKENS_MAX);
	dec_join(path, sizeof(path), pfx, "logprobs");
	if (v[RC_LOGPROBS] != NULL && r->token_ids == NULL)
		return BAD(d, path, "without token_ids");
	if (v[RC_LOGPROBS] != NULL &&
	    (rc = dec_lps(d, v[RC_LOGPROBS], path, r->n_token_ids,
	         &r->logprobs)) != 0)
		return rc;
	return 0;
}
