/*
 * proto_dec.c: the wire protocol's decoder (net/proto.h). A frame goes
 * through three gates. First proto_scan (proto.c) reads the raw bytes
 * before msgpack-c sees them: one value of the protocol's types, ending
 * where the input does, no array or map claiming more elements than
 * there are bytes left; only then does msgpack_unpack_next build its
 * object tree, whose size is bounded by the input's. Second, the tree is
 * walked into the message's struct, checking msgpack types, keys and the
 * limits on counts before anything is allocated. Third, the struct goes
 * through proto_check, the checks the encoder runs too.
 */
#include "net/proto_impl.h"

#include <limits.h>
#include <math.h>
#include <msgpack.h>
#include <string.h>

struct dec {
	const char *msg; /* message name, for reasons */
	char *why;
	size_t whylen;
};

#define BAD(d, path, ...)                                                  \
	proto_fail((d)->why, (d)->whylen, MEDHA_EFORMAT, (d)->msg, (path), \
	    __VA_ARGS__)

/* ---- typed getters ---- */

/* "a.b", or b alone when a is empty, into buf. */
static const char *
join(char *buf, size_t size, const char *a, const char *b)
{
	if (proto_quiet)
		buf[0] = '\0';
	else
		snprintf(buf, size, "%s%s%s", a, a[0] != '\0' ? "." : "", b);
	return buf;
}

/* "a[i]" into buf. */
static const char *
join_idx(char *buf, size_t size, const char *a, uint32_t i)
{
	if (proto_quiet)
		buf[0] = '\0';
	else
		snprintf(buf, size, "%s[%u]", a, i);
	return buf;
}

static int
get_u64(struct dec *d, const msgpack_object *o, const char *path, uint64_t *out)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return BAD(d, path, "not a non-negative integer");
	*out = o->via.u64;
	return 0;
}

static int
get_i64(struct dec *d, const msgpack_object *o, const char *path, int64_t *out)
{
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		*out = o->via.i64;
	else if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return BAD(d, path, "not an integer");
	else if (o->via.u64 > INT64_MAX)
		return BAD(d, path, "out of range");
	else
		*out = (int64_t)o->via.u64;
	return 0;
}

static int
get_int(struct dec *d, const msgpack_object *o, const char *path, int *out)
{
	int64_t v = 0;
	int rc;

	if ((rc = get_i64(d, o, path, &v)) != 0)
		return rc;
	if (v < INT_MIN || v > INT_MAX)
		return BAD(d, path, "out of range");
	*out = (int)v;
	return 0;
}

/* A number: float64, float32 or an integer. */
static int
get_num(struct dec *d, const msgpack_object *o, const char *path, double *out)
{
	if (o->type == MSGPACK_OBJECT_FLOAT64 ||
	    o->type == MSGPACK_OBJECT_FLOAT32)
		*out = o->via.f64;
	else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		*out = (double)o->via.u64;
	else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		*out = (double)o->via.i64;
	else
		return BAD(d, path, "not a number");
	return 0;
}

static int
get_float(struct dec *d, const msgpack_object *o, const char *path, float *out)
{
	double v = 0;
	int rc;

	if ((rc = get_num(d, o, path, &v)) != 0)
		return rc;
	*out = (float)v;
	return 0;
}

static int
get_bool(struct dec *d, const msgpack_object *o, const char *path, int *out)
{
	if (o->type != MSGPACK_OBJECT_BOOLEAN)
		return BAD(d, path, "not a boolean");
	*out = o->via.boolean;
	return 0;
}

/*
 * A string (or, with bin, also a byte string) of lo to cap - 1 bytes
 * without NUL, copied NUL-terminated into dst.
 */
static int
get_str(struct dec *d, const msgpack_object *o, const char *path, int bin,
    char *dst, size_t cap, size_t lo)
{
	const char *p = o->via.str.ptr;
	size_t n = o->via.str.size;

	if (o->type != MSGPACK_OBJECT_STR &&
	    (!bin || o->type != MSGPACK_OBJECT_BIN))
		return BAD(d, path, "not a string");
	if (n < lo || n >= cap)
		return lo > 0
		    ? BAD(d, path, "not a string of %zu to %zu bytes", lo,
		          cap - 1)
		    : BAD(d, path, "not a string of at most %zu bytes",
		          cap - 1);
	if (n > 0 && memchr(p, '\0', n) != NULL)
		return BAD(d, path, "contains a NUL byte");
	if (n > 0)
		memcpy(dst, p, n);
	dst[n] = '\0';
	return 0;
}

/*
 * A string or byte string into a new NUL-terminated buffer *out (and its
 * length into *len if not NULL); without nul_ok it may not hold a NUL.
 */
static int
dup_text(struct dec *d, const msgpack_object *o, const char *path, int nul_ok,
    char **out, size_t *len)
{
	size_t n = o->via.str.size;

	if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN)
		return BAD(d, path, "not a string");
	if (!nul_ok && n > 0 && memchr(o->via.str.ptr, '\0', n) != NULL)
		return BAD(d, path, "contains a NUL byte");
	if ((*out = malloc(n + 1)) == NULL)
		return MEDHA_ENOMEM;
	if (n > 0)
		memcpy(*out, o->via.str.ptr, n);
	(*out)[n] = '\0';
	if (len != NULL)
		*len = n;
	return 0;
}

/* An array of lo to hi elements. */
static int
get_arr(struct dec *d, const msgpack_object *o, const char *path, uint32_t lo,
    uint32_t hi)
{
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return BAD(d, path, "not an array");
	if (o->via.array.size < lo || o->via.array.size > hi)
		return lo == hi
		    ? BAD(d, path, "not an array of %u", lo)
		    : BAD(d, path, "not an array of %u to %u", lo, hi);
	return 0;
}

/*
 * An array of lo to hi token ids into a new array *ids (never NULL on
 * success, even when empty).
 */
static int
get_ids(struct dec *d, const msgpack_object *o, const char *path, uint32_t lo,
    uint32_t hi, int32_t **ids, int64_t *n)
{
	const msgpack_object *e;
	uint32_t i, cnt;
	char buf[192];
	int rc;

	if ((rc = get_arr(d, o, path, lo, hi)) != 0)
		return lo == 1 && o->type == MSGPACK_OBJECT_ARRAY &&
		        o->via.array.size == 0
		    ? BAD(d, path, "not a non-empty array")
		    : rc;
	cnt = o->via.array.size;
	if ((*ids = malloc((cnt ? cnt : 1) * sizeof(**ids))) == NULL)
		return MEDHA_ENOMEM;
	*n = cnt;
	for (i = 0; i < cnt; i++) {
		e = &o->via.array.ptr[i];
		if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
		    e->via.u64 > INT32_MAX)
			return BAD(d, join_idx(buf, sizeof(buf), path, i),
			    "not a token id");
		(*ids)[i] = (int32_t)e->via.u64;
	}
	return 0;
}

/* A key for a reason: at most 32 bytes, odd bytes as '?'. */
static const char *
key_text(char *buf, size_t size, const msgpack_object *k)
{
	size_t i, n = k->via.str.size;

	if (n > 32)
		n = 32;
	if (n > size - 1)
		n = size - 1;
	for (i = 0; i < n; i++) {
		char ch = k->via.str.ptr[i];
		buf[i] = ch >= 0x20 && ch < 0x7f && ch != '"' ? ch : '?';
	}
	buf[n] = '\0';
	return buf;
}

/*
 * A map whose keys are all strings among keys[0..nkeys), none twice:
 * vals[k] gets key k's value, or NULL.
 */
static int
get_map(struct dec *d, const msgpack_object *o, const char *path,
    const char *const *keys, int nkeys, const msgpack_object **vals)
{
	const msgpack_object_kv *kv;
	char kbuf[40];
	uint32_t i;
	int k;

	for (k = 0; k < nkeys; k++)
		vals[k] = NULL;
	if (o->type != MSGPACK_OBJECT_MAP)
		return BAD(d, path, "not a map");
	for (i = 0; i < o->via.map.size; i++) {
		kv = &o->via.map.ptr[i];
		if (kv->key.type != MSGPACK_OBJECT_STR)
			return BAD(d, path, "a key is not a string");
		for (k = 0; k < nkeys; k++)
			if (strlen(keys[k]) == kv->key.via.str.size &&
			    memcmp(keys[k], kv->key.via.str.ptr,
			        kv->key.via.str.size) == 0)
				break;
		if (k == nkeys)
			return BAD(d, path, "unknown key \"%s\"",
			    key_text(kbuf, sizeof(kbuf), &kv->key));
		if (vals[k] != NULL)
			return BAD(d, path, "key \"%s\" given twice", keys[k]);
		vals[k] = &kv->val;
	}
	return 0;
}

/* Each of the keys whose bit is set in need must be there. */
static int
need(struct dec *d, const char *path, const char *const *keys, int nkeys,
    const msgpack_object **vals, uint32_t mask)
{
	char buf[96];

	for (int k = 0; k < nkeys; k++)
		if ((mask >> k & 1) && vals[k] == NULL)
			return BAD(d, join(buf, sizeof(buf), path, keys[k]),
			    "missing");
	return 0;
}

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
	RQ_N
};
static const char *const rq_keys[RQ_N] = {"id", "arrival", "prompt",
    "prompt_ids", "prompt_tokens", "max_tokens", "temperature", "top_k",
    "top_p", "seed", "ignore_eos", "stop", "ttft_slo", "tpot_slo", "stream"};

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
		if ((rc = dup_text(d, e, path, 0, &rs->stop[i], NULL)) != 0)
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
	if ((rc = get_num(d, o, path, out)) != 0)
		return rc;
	if (!(*out > 0) || !isfinite(*out))
		return BAD(d, path, "not a number > 0");
	return 0;
}

static int
dec_reqspec(struct dec *d, const msgpack_object *o, struct medha_reqspec *rs)
{
	const msgpack_object *v[RQ_N];
	int64_t pt = 0, n = 0;
	int rc;

	rs->sampling = medha_sampling_greedy;
	if ((rc = get_map(d, o, "request", rq_keys, RQ_N, v)) != 0 ||
	    (rc = need(d, "request", rq_keys, RQ_N, v,
	         1u << RQ_ID | 1u << RQ_MAX_TOKENS)) != 0 ||
	    (rc = get_str(d, v[RQ_ID], "request.id", 0, rs->id, sizeof(rs->id),
	         1)) != 0 ||
	    (rc = get_i64(d, v[RQ_MAX_TOKENS], "request.max_tokens",
	         &rs->max_tokens)) != 0)
		return rc;
	if (v[RQ_ARRIVAL] != NULL &&
	    (rc = get_num(d, v[RQ_ARRIVAL], "request.arrival", &rs->arrival)) !=
	        0)
		return rc;
	if (v[RQ_PROMPT] != NULL &&
	    (rc = dup_text(d, v[RQ_PROMPT], "request.prompt", 0, &rs->prompt,
	         NULL)) != 0)
		return rc;
	if (v[RQ_PROMPT_IDS] != NULL &&
	    (rc = get_ids(d, v[RQ_PROMPT_IDS], "request.prompt_ids", 1,
	         UINT32_MAX, &rs->prompt_ids, &n)) != 0)
		return rc;
	if (v[RQ_PROMPT_TOKENS] != NULL) {
		if ((rc = get_i64(d, v[RQ_PROMPT_TOKENS],
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
	        (rc = get_float(d, v[RQ_TEMP], "request.temperature",
	             &rs->sampling.temp)) != 0) ||
	    (v[RQ_TOP_K] != NULL &&
	        (rc = get_int(d, v[RQ_TOP_K], "request.top_k",
	             &rs->sampling.top_k)) != 0) ||
	    (v[RQ_TOP_P] != NULL &&
	        (rc = get_float(d, v[RQ_TOP_P], "request.top_p",
	             &rs->sampling.top_p)) != 0) ||
	    (v[RQ_SEED] != NULL &&
	        (rc = get_u64(d, v[RQ_SEED], "request.seed",
	             &rs->sampling.seed)) != 0) ||
	    (v[RQ_IGNORE_EOS] != NULL &&
	        (rc = get_bool(d, v[RQ_IGNORE_EOS], "request.ignore_eos",
	             &rs->ignore_eos)) != 0) ||
	    (v[RQ_STOP] != NULL && (rc = dec_stop(d, v[RQ_STOP], rs)) != 0))
		return rc;
	if (v[RQ_STREAM] != NULL) {
		int stream = 1;
		if ((rc = get_bool(d, v[RQ_STREAM], "request.stream",
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
	RC_N
};
static const char *const rc_keys[RC_N] = {"id", "arrival", "first_token",
    "finish", "ttft", "tpot_mean", "tpot_max", "ttft_slo", "tpot_slo",
    "prompt_tokens", "output_tokens", "status", "finish_reason", "reason",
    "token_ids", "text", "prefill_alone", "tbt"};

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

	if ((rc = get_arr(d, o, path, 0, MEDHA_TBT_BUCKETS)) != 0)
		return rc;
	if (o->via.array.size == 0)
		return 0;
	if ((h->bin = medha_reallocarray(NULL, o->via.array.size,
	         sizeof(*h->bin))) == NULL)
		return MEDHA_ENOMEM;
	h->cap = (int)o->via.array.size;
	for (i = 0; i < o->via.array.size; i++) {
		e = &o->via.array.ptr[i];
		join_idx(buf, sizeof(buf), path, i);
		if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2)
			return BAD(d, buf, "not a [bucket, count] pair");
		if ((rc = get_i64(d, &e->via.array.ptr[0], buf, &b)) != 0 ||
		    (rc = get_i64(d, &e->via.array.ptr[1], buf, &n)) != 0)
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

static int
dec_record(struct dec *d, const msgpack_object *o, const char *pfx,
    struct medha_record *r)
{
	double *t[] = {&r->arrival, &r->first_token, &r->finish, &r->ttft,
	    &r->tpot_mean, &r->tpot_max, &r->ttft_slo, &r->tpot_slo};
	const msgpack_object *v[RC_N];
	char path[160], name[16];
	int rc, k;

	if ((rc = get_map(d, o, pfx, rc_keys, RC_N, v)) != 0 ||
	    (rc = need(d, pfx, rc_keys, RC_N, v,
	         (1u << RC_FINISH_REASON) - 1)) != 0 ||
	    (rc = get_str(d, v[RC_ID], join(path, sizeof(path), pfx, "id"), 0,
	         r->id, sizeof(r->id), 1)) != 0)
		return rc;
	for (k = RC_ARRIVAL; k <= RC_TPOT_SLO; k++)
		if ((rc = get_num(d, v[k],
		         join(path, sizeof(path), pfx, rc_keys[k]),
		         t[k - RC_ARRIVAL])) != 0)
			return rc;
	if ((rc = get_i64(d, v[RC_PROMPT_TOKENS],
	         join(path, sizeof(path), pfx, "prompt_tokens"),
	         &r->prompt_tokens)) != 0 ||
	    (rc = get_i64(d, v[RC_OUTPUT_TOKENS],
	         join(path, sizeof(path), pfx, "output_tokens"),
	         &r->output_tokens)) != 0)
		return rc;
	join(path, sizeof(path), pfx, "status");
	if (get_str(d, v[RC_STATUS], path, 0, name, sizeof(name), 1) != 0 ||
	    (r->status = medha_status_parse(name)) < 0)
		return BAD(d, path,
		    "not \"ok\", \"rejected\", \"failed\" or \"cancelled\"");
	join(path, sizeof(path), pfx, "finish_reason");
	if (v[RC_FINISH_REASON] != NULL &&
	    (get_str(d, v[RC_FINISH_REASON], path, 0, name, sizeof(name), 1) !=
	            0 ||
	        (r->finish_reason = medha_finish_parse(name)) < 0))
		return BAD(d, path, "not \"length\" or \"stop\"");
	if ((v[RC_REASON] != NULL &&
	        (rc = get_str(d, v[RC_REASON],
	             join(path, sizeof(path), pfx, "reason"), 1, r->reason,
	             sizeof(r->reason), 0)) != 0) ||
	    (v[RC_TOKEN_IDS] != NULL &&
	        (rc = get_ids(d, v[RC_TOKEN_IDS],
	             join(path, sizeof(path), pfx, "token_ids"), 0, UINT32_MAX,
	             &r->token_ids, &r->n_token_ids)) != 0) ||
	    (v[RC_TEXT] != NULL &&
	        (rc = dup_text(d, v[RC_TEXT],
	             join(path, sizeof(path), pfx, "text"), 0, &r->text,
	             NULL)) != 0) ||
	    (rc = get_slo(d, v[RC_PREFILL_ALONE],
	         join(path, sizeof(path), pfx, "prefill_alone"),
	         &r->prefill_alone)) != 0 ||
	    (v[RC_TBT] != NULL &&
	        (rc = dec_tbt(d, v[RC_TBT],
	             join(path, sizeof(path), pfx, "tbt"), &r->tbt)) != 0))
		return rc;
	return 0;
}

/* ---- the messages ---- */

static int
dec_events(struct dec *d, const msgpack_object *o, struct medha_msg_events *e)
{
	const msgpack_object *a, *x;
	struct medha_msg_event *ev;
	char path[48];
	uint64_t kind;
	uint32_t i;
	int rc;

	if ((rc = get_arr(d, o, "", 0, MEDHA_PROTO_MAX_EVENTS)) != 0)
		return rc;
	if ((e->ev = medha_calloc(o->via.array.size, sizeof(*e->ev))) == NULL)
		return MEDHA_ENOMEM;
	e->n = o->via.array.size;
	for (i = 0; i < o->via.array.size; i++) {
		ev = &e->ev[i];
		x = &o->via.array.ptr[i];
		PROTO_PATH(path, "[%u]", i);
		if ((rc = get_arr(d, x, path, 3, 4)) != 0)
			return rc;
		a = x->via.array.ptr;
		if (a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
		    a[0].via.u64 > 1 ||
		    x->via.array.size != 3 + (a[0].via.u64 == 0))
			return BAD(d, path,
			    "not [0, handle, ids, text] or [1, handle, "
			    "record]");
		kind = a[0].via.u64;
		ev->kind = (int)kind;
		PROTO_PATH(path, "[%u].handle", i);
		if ((rc = get_u64(d, &a[1], path, &ev->handle)) != 0)
			return rc;
		if (kind == MEDHA_EVENT_RECORD) {
			if ((ev->record = calloc(1, sizeof(*ev->record))) ==
			    NULL)
				return MEDHA_ENOMEM;
			PROTO_PATH(path, "[%u].record", i);
			if ((rc = dec_record(d, &a[2], path, ev->record)) != 0)
				return rc;
			continue;
		}
		PROTO_PATH(path, "[%u].ids", i);
		if ((rc = get_ids(d, &a[2], path, 0, UINT32_MAX, &ev->ids,
		         &ev->n_ids)) != 0)
			return rc;
		PROTO_PATH(path, "[%u].text", i);
		if ((rc = dup_text(d, &a[3], path, 1, &ev->text,
		         &ev->text_len)) != 0)
			return rc;
	}
	return 0;
}

enum {
	ST_WORKERS,
	ST_WANTED,
	ST_PENDING,
	ST_QUEUE,
	ST_KV_BLOCKS,
	ST_KV_USED,
	ST_BLOCK_SIZE,
	ST_PREFILL,
	ST_WORK,
	ST_READY,
	ST_MODEL,
	ST_BACKEND,
	ST_N
};
static const char *const st_keys[ST_N] = {"workers", "workers_wanted",
    "pending", "queue", "kv_blocks", "kv_used", "block_size", "prefill", "work", "ready",
    "model", "backend"};

static int
dec_status(struct dec *d, const msgpack_object *o, struct medha_msg_status *s)
{
	int64_t *n[] = {&s->workers, &s->workers_wanted, &s->pending, &s->queue,
	    &s->kv_blocks, &s->kv_used, &s->block_size, &s->prefill};
	const msgpack_object *v[ST_N];
	int rc, k;

	if ((rc = get_map(d, o, "", st_keys, ST_N, v)) != 0 ||
	    (rc = need(d, "", st_keys, ST_N, v, (1u << ST_N) - 1)) != 0)
		return rc;
	for (k = 0; k <= ST_PREFILL; k++)
		if ((rc = get_i64(d, v[k], st_keys[k], n[k])) != 0)
			return rc;
	if ((rc = get_num(d, v[ST_WORK], "work", &s->work)) != 0)
		return rc;
	if (!(s->work >= 0 && s->work <= 1e18))
		return BAD(d, "work", "not a number of seconds >= 0");
	if ((rc = get_bool(d, v[ST_READY], "ready", &s->ready)) != 0 ||
	    (rc = get_str(d, v[ST_MODEL], "model", 0, s->model,
	         sizeof(s->model), 0)) != 0 ||
	    (rc = get_str(d, v[ST_BACKEND], "backend", 0, s->backend,
	         sizeof(s->backend), 0)) != 0)
		return rc;
	return 0;
}

enum {
	HE_TP,
	HE_SPP,
	HE_KVP,
	HE_RANK_TP,
	HE_RANK_SPP,
	HE_RANK_KVP,
	HE_BLOCK_SIZE,
	HE_N_BLOCKS,
	HE_MAX_SEQS,
	HE_VOCAB,
	HE_DIM,
	HE_PID,
	HE_BACKEND,
	HE_MODEL,
	HE_GPU,
	HE_LAYERS,
	HE_PEER,
	HE_N
};
static const char *const he_keys[HE_N] = {"tp", "spp", "kvp", "rank_tp",
    "rank_spp", "rank_kvp", "block_size", "n_blocks", "max_seqs", "vocab",
    "dim", "pid", "backend", "model", "gpu", "layers", "peer"};

static int
dec_hello(struct dec *d, const msgpack_object *o, struct medha_msg_hello *h)
{
	int *n[] = {&h->tp, &h->spp, &h->kvp, &h->rank_tp, &h->rank_spp,
	    &h->rank_kvp, &h->block_size, &h->n_blocks, &h->max_seqs, &h->vocab,
	    &h->dim, &h->pid};
	const msgpack_object *v[HE_N];
	int rc, k;

	if ((rc = get_map(d, o, "", he_keys, HE_N, v)) != 0 ||
	    (rc = need(d, "", he_keys, HE_N, v, (1u << HE_PEER) - 1)) != 0)
		return rc;
	if (v[HE_PEER] != NULL &&
	    (rc = get_str(d, v[HE_PEER], "peer", 0, h->peer, sizeof(h->peer),
	         0)) != 0)
		return rc;
	for (k = 0; k <= HE_PID; k++)
		if ((rc = get_int(d, v[k], he_keys[k], n[k])) != 0)
			return rc;
	if ((rc = get_str(d, v[HE_BACKEND], "backend", 0, h->backend,
	         sizeof(h->backend), 1)) != 0 ||
	    (rc = get_str(d, v[HE_MODEL], "model", 0, h->model,
	         sizeof(h->model), 1)) != 0 ||
	    (rc = get_str(d, v[HE_GPU], "gpu", 0, h->gpu, sizeof(h->gpu), 1)) !=
	        0 ||
	    (rc = get_arr(d, v[HE_LAYERS], "layers", 2, 2)) != 0 ||
	    (rc = get_int(d, &v[HE_LAYERS]->via.array.ptr[0], "layers[0]",
	         &h->layer_lo)) != 0 ||
	    (rc = get_int(d, &v[HE_LAYERS]->via.array.ptr[1], "layers[1]",
	         &h->layer_hi)) != 0)
		return rc;
	return 0;
}

/* [temperature, top_k, top_p, seed] */
static int
dec_params(struct dec *d, const msgpack_object *o, const char *pfx,
    struct medha_sampler_params *sp)
{
	const msgpack_object *a = o->via.array.ptr;
	char path[96];
	int rc;

	if ((rc = get_arr(d, o, pfx, 4, 4)) != 0)
		return rc;
	if ((rc = get_float(d, &a[0],
	         join(path, sizeof(path), pfx, "temperature"), &sp->temp)) !=
	        0 ||
	    (rc = get_int(d, &a[1], join(path, sizeof(path), pfx, "top_k"),
	         &sp->top_k)) != 0 ||
	    (rc = get_float(d, &a[2], join(path, sizeof(path), pfx, "top_p"),
	         &sp->top_p)) != 0 ||
	    (rc = get_u64(d, &a[3], join(path, sizeof(path), pfx, "seed"),
	         &sp->seed)) != 0)
		return rc;
	return 0;
}

static int
dec_frees(struct dec *d, const msgpack_object *o, struct medha_msg_batch *b)
{
	char path[32];
	int rc;

	if ((rc = get_arr(d, o, "frees", 0, MEDHA_PROTO_MAX_ITEMS)) != 0)
		return rc;
	if ((b->frees = medha_calloc(o->via.array.size, sizeof(*b->frees))) ==
	    NULL)
		return MEDHA_ENOMEM;
	b->n_frees = o->via.array.size;
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		PROTO_PATH(path, "frees[%u]", i);
		if ((rc = get_u64(d, &o->via.array.ptr[i], path,
		         &b->frees[i])) != 0)
			return rc;
	}
	return 0;
}

/* An item's KVP groups: [g, ...], each below MEDHA_PROTO_MAX_GROUPS. */
static int
dec_groups(struct dec *d, const msgpack_object *o, uint32_t i,
    struct medha_msg_item *it)
{
	char path[48];
	int rc, g;

	PROTO_PATH(path, "items[%u].groups", i);
	if ((rc = get_arr(d, o, path, 0, MEDHA_PROTO_MAX_GROUPS)) != 0)
		return rc;
	it->n_groups = (int)o->via.array.size;
	for (uint32_t k = 0; k < o->via.array.size; k++) {
		if ((rc = get_int(d, &o->via.array.ptr[k], path, &g)) != 0)
			return rc;
		if (g < 0 || g >= MEDHA_PROTO_MAX_GROUPS)
			return BAD(d, path, "a group not in [0, %d)",
			    MEDHA_PROTO_MAX_GROUPS);
		it->groups[k] = (uint8_t)g;
	}
	return 0;
}

static int
dec_items(struct dec *d, const msgpack_object *o, struct medha_msg_batch *b)
{
	const msgpack_object *a;
	struct medha_msg_item *it;
	uint64_t total = 0;
	char path[64];
	uint32_t i;
	int rc;

	if ((rc = get_arr(d, o, "items", 0, MEDHA_PROTO_MAX_ITEMS)) != 0)
		return rc;
	if ((b->items = medha_calloc(o->via.array.size, sizeof(*b->items))) ==
	    NULL)
		return MEDHA_ENOMEM;
	b->n_items = o->via.array.size;
	for (i = 0; i < o->via.array.size; i++) {
		it = &b->items[i];
		PROTO_PATH(path, "items[%u]", i);
		if ((rc = get_arr(d, &o->via.array.ptr[i], path, 5, 6)) != 0)
			return rc;
		a = o->via.array.ptr[i].via.array.ptr;
		PROTO_PATH(path, "items[%u].handle", i);
		if ((rc = get_u64(d, &a[0], path, &it->handle)) != 0)
			return rc;
		PROTO_PATH(path, "items[%u].pos", i);
		if ((rc = get_i64(d, &a[1], path, &it->pos)) != 0)
			return rc;
		PROTO_PATH(path, "items[%u].ids", i);
		if (a[2].type == MSGPACK_OBJECT_ARRAY &&
		    (total += a[2].via.array.size) > MEDHA_PROTO_MAX_IDS)
			return BAD(d, "items", "more than %d ids in all",
			    MEDHA_PROTO_MAX_IDS);
		if ((rc = get_ids(d, &a[2], path, 1, UINT32_MAX, &it->ids,
		         &it->n_ids)) != 0)
			return rc;
		PROTO_PATH(path, "items[%u].sample", i);
		if ((rc = get_bool(d, &a[3], path, &it->sample)) != 0)
			return rc;
		if (a[4].type != MSGPACK_OBJECT_NIL) {
			it->has_params = 1;
			PROTO_PATH(path, "items[%u].params", i);
			if ((rc = dec_params(d, &a[4], path, &it->params)) != 0)
				return rc;
		}
		if (o->via.array.ptr[i].via.array.size == 6 &&
		    (rc = dec_groups(d, &a[5], i, it)) != 0)
			return rc;
	}
	return 0;
}

/* [gen, [url, ...], kvp_tokens] */
static int
dec_peers(struct dec *d, const msgpack_object *o, struct medha_msg_batch *b)
{
	const msgpack_object *a = o->via.array.ptr, *u;
	struct medha_msg_peers *p;
	char path[32];
	int rc;

	if ((rc = get_arr(d, o, "peers", 3, 3)) != 0 ||
	    (rc = get_arr(d, &a[1], "peers.urls", 1, MEDHA_PROTO_MAX_PEERS)) !=
	        0)
		return rc;
	if ((p = b->peers = medha_calloc(1, sizeof(*p))) == NULL ||
	    (p->urls = medha_calloc(a[1].via.array.size, sizeof(*p->urls))) ==
	        NULL)
		return MEDHA_ENOMEM;
	p->n = (int)a[1].via.array.size;
	if ((rc = get_u64(d, &a[0], "peers.gen", &p->gen)) != 0 ||
	    (rc = get_i64(d, &a[2], "peers.kvp_tokens", &p->kvp_tokens)) != 0)
		return rc;
	for (int i = 0; i < p->n; i++) {
		u = &a[1].via.array.ptr[i];
		PROTO_PATH(path, "peers.urls[%d]", i);
		if ((rc = get_str(d, u, path, 0, p->urls[i], sizeof(p->urls[i]),
		         0)) != 0)
			return rc;
	}
	return 0;
}

static int
dec_result(struct dec *d, const msgpack_object *a, struct medha_msg_result *r)
{
	const msgpack_object *o = &a[2], *t;
	char path[48];
	int rc;

	if ((rc = get_int(d, &a[0], "worker_id", &r->worker_id)) != 0 ||
	    (rc = get_u64(d, &a[1], "batch_seq", &r->seq)) != 0 ||
	    (rc = get_str(d, &a[3], "error", 1, r->error, sizeof(r->error),
	         0)) != 0 ||
	    (rc = get_arr(d, o, "tokens", 0, MEDHA_PROTO_MAX_ITEMS)) != 0)
		return rc;
	if ((r->tokens = medha_calloc(o->via.array.size, sizeof(*r->tokens))) ==
	    NULL)
		return MEDHA_ENOMEM;
	r->n_tokens = o->via.array.size;
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		t = &o->via.array.ptr[i];
		PROTO_PATH(path, "tokens[%u]", i);
		if ((rc = get_arr(d, t, path, 2, 2)) != 0 ||
		    (rc = get_u64(d, &t->via.array.ptr[0], path,
		         &r->tokens[i].handle)) != 0)
			return rc;
		t = &t->via.array.ptr[1];
		if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
		    t->via.u64 > INT32_MAX)
			return BAD(d, path, "not a token id");
		r->tokens[i].token = (int32_t)t->via.u64;
	}
	return 0;
}

/* Elements of each type's frame, version and type included. */
static const uint32_t frame_len[MEDHA_MSG_TYPE_COUNT] = {
    [MEDHA_MSG_SUBMIT] = 3,
    [MEDHA_MSG_ACCEPTED] = 4,
    [MEDHA_MSG_POLL] = 2,
    [MEDHA_MSG_EVENTS] = 3,
    [MEDHA_MSG_CANCEL] = 3,
    [MEDHA_MSG_OK] = 2,
    [MEDHA_MSG_STATUS] = 2,
    [MEDHA_MSG_STATUS_REPLY] = 3,
    [MEDHA_MSG_ERROR] = 4,
    [MEDHA_MSG_HELLO] = 3,
    [MEDHA_MSG_WELCOME] = 3,
    [MEDHA_MSG_READY] = 3,
    [MEDHA_MSG_RESULT] = 6,
    [MEDHA_MSG_HEARTBEAT] = 3,
    [MEDHA_MSG_BATCH] = 5,
    [MEDHA_MSG_IDLE] = 3,
};

static int
dec_body(struct dec *d, struct medha_msg *m, const msgpack_object *a,
    uint32_t nbody)
{
	int rc;

	switch (m->type) {
	case MEDHA_MSG_SUBMIT: return dec_reqspec(d, a, &m->submit);
	case MEDHA_MSG_ACCEPTED:
		if ((rc = get_str(d, &a[0], "id", 0, m->accepted.id,
		         sizeof(m->accepted.id), 1)) != 0)
			return rc;
		return get_u64(d, &a[1], "handle", &m->accepted.handle);
	case MEDHA_MSG_EVENTS: return dec_events(d, a, &m->events);
	case MEDHA_MSG_CANCEL: return get_u64(d, a, "handle", &m->cancel);
	case MEDHA_MSG_STATUS_REPLY: return dec_status(d, a, &m->status);
	case MEDHA_MSG_ERROR:
		if ((rc = get_int(d, &a[0], "code", &m->error.code)) != 0)
			return rc;
		return get_str(d, &a[1], "reason", 1, m->error.reason,
		    sizeof(m->error.reason), 0);
	case MEDHA_MSG_HELLO: return dec_hello(d, a, &m->hello);
	case MEDHA_MSG_WELCOME:
	case MEDHA_MSG_READY:
	case MEDHA_MSG_HEARTBEAT:
		return get_int(d, a, "worker_id", &m->worker_id);
	case MEDHA_MSG_RESULT: return dec_result(d, a, &m->result);
	case MEDHA_MSG_BATCH:
		if ((rc = get_u64(d, &a[0], "batch_seq", &m->batch.seq)) != 0 ||
		    (rc = dec_frees(d, &a[1], &m->batch)) != 0)
			return rc;
		if ((rc = dec_items(d, &a[2], &m->batch)) != 0)
			return rc;
		if (nbody == 4 && a[3].type != MSGPACK_OBJECT_NIL)
			return dec_peers(d, &a[3], &m->batch);
		return 0;
	case MEDHA_MSG_IDLE: return dec_frees(d, a, &m->batch);
	}
	return 0; /* POLL, OK, STATUS: no body */
}

static int
dec_frame(struct medha_msg *m, const msgpack_object *o, char *why,
    size_t whylen)
{
	struct dec d = {"frame", why, whylen};
	const msgpack_object *a = o->via.array.ptr;
	uint64_t type;
	int rc;

	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 2)
		return BAD(&d, "", "not an array [version, type, ...]");
	if (a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return BAD(&d, "version", "not a non-negative integer");
	if (a[0].via.u64 != MEDHA_PROTO_VERSION)
		return BAD(&d, "version", "%llu not supported (this is %d)",
		    (unsigned long long)a[0].via.u64, MEDHA_PROTO_VERSION);
	if (a[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return BAD(&d, "type", "not a non-negative integer");
	type = a[1].via.u64;
	if (type == 0 || type >= MEDHA_MSG_TYPE_COUNT)
		return BAD(&d, "type", "%llu unknown",
		    (unsigned long long)type);
	m->type = (int)type;
	d.msg = medha_msg_type_name(m->type);
	if (o->via.array.size != frame_len[type] &&
	    !(type == MEDHA_MSG_BATCH &&
	        o->via.array.size == frame_len[type] + 1)) /* peers */
		return BAD(&d, "", "a frame of %u elements, not %u",
		    o->via.array.size, frame_len[type]);
	if ((rc = dec_body(&d, m, a + 2, o->via.array.size - 2)) ==
	    MEDHA_ENOMEM)
		return medha_why(why, whylen, rc, "%s: out of memory", d.msg);
	return rc;
}

static int decode_once(struct medha_msg *m, const void *buf, size_t len,
    char *why, size_t whylen);

int
medha_msg_decode(struct medha_msg *m, const void *buf, size_t len, char *why,
    size_t whylen)
{
	int rc;

	proto_quiet = 1;
	rc = decode_once(m, buf, len, why, whylen);
	proto_quiet = 0;
	if (rc != 0 && rc != MEDHA_ENOMEM) /* again, for the reason */
		rc = decode_once(m, buf, len, why, whylen);
	return rc;
}

static int
decode_once(struct medha_msg *m, const void *buf, size_t len, char *why,
    size_t whylen)
{
	msgpack_unpacked up;
	msgpack_unpack_return ur;
	size_t off = 0;
	int rc;

	memset(m, 0, sizeof(*m));
	if (len > MEDHA_PROTO_MAX_FRAME)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "frame: %zu bytes, more than %u", len,
		    MEDHA_PROTO_MAX_FRAME);
	if ((rc = proto_scan(buf, len, why, whylen)) != 0)
		return rc;
	msgpack_unpacked_init(&up);
	ur = msgpack_unpack_next(&up, buf, len, &off);
	if (ur != MSGPACK_UNPACK_SUCCESS || off != len) {
		msgpack_unpacked_destroy(&up);
		if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "frame: out of memory");
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "frame: not msgpack");
	}
	rc = dec_frame(m, &up.data, why, whylen);
	msgpack_unpacked_destroy(&up);
	if (rc == 0)
		rc = proto_check(m, MEDHA_EFORMAT, why, whylen);
	if (rc != 0)
		medha_msg_clear(m);
	return rc;
}
