/*
 * proto.c: the wire protocol's vocabulary (net/proto.h): message names,
 * what makes a valid frame and a valid message, freeing what a decoded
 * message owns (equality: proto_eq.c). The byte scan (proto_scan) is
 * the gate a frame passes before msgpack-c parses it. The struct checks
 * (proto_check) are the one statement of every range: the encoder runs
 * them before it writes a byte and the decoder after it has filled a
 * struct, so the two agree by construction; the decoder adds only what a
 * struct cannot show (wrong msgpack types, unknown or repeated keys, a
 * value present but 0 where it must be > 0).
 */
#include "net/proto_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *msg_names[MEDHA_MSG_TYPE_COUNT] = {
    [MEDHA_MSG_SUBMIT] = "submit",
    [MEDHA_MSG_ACCEPTED] = "accepted",
    [MEDHA_MSG_POLL] = "poll",
    [MEDHA_MSG_EVENTS] = "events",
    [MEDHA_MSG_CANCEL] = "cancel",
    [MEDHA_MSG_OK] = "ok",
    [MEDHA_MSG_STATUS] = "status",
    [MEDHA_MSG_STATUS_REPLY] = "status_reply",
    [MEDHA_MSG_ERROR] = "error",
    [MEDHA_MSG_HELLO] = "hello",
    [MEDHA_MSG_WELCOME] = "welcome",
    [MEDHA_MSG_READY] = "ready",
    [MEDHA_MSG_RESULT] = "result",
    [MEDHA_MSG_HEARTBEAT] = "heartbeat",
    [MEDHA_MSG_BATCH] = "batch",
    [MEDHA_MSG_IDLE] = "idle",
};

const char *
medha_msg_type_name(int type)
{
	if (type <= 0 || type >= MEDHA_MSG_TYPE_COUNT)
		return "unknown";
	return msg_names[type];
}

_Thread_local int proto_quiet;

int
proto_fail(char *why, size_t whylen, int err, const char *msg, const char *path,
    const char *fmt, ...)
{
	char detail[192];
	va_list ap;

	if (proto_quiet)
		return err;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	if (path == NULL || path[0] == '\0')
		return medha_why(why, whylen, err, "%s: %s", msg, detail);
	return medha_why(why, whylen, err, "%s: %s: %s", msg, path, detail);
}

int
proto_utf8_valid(const char *s, size_t n)
{
	size_t i = 0, k;

	while (i < n) {
		uint64_t w; /* ASCII eight bytes at a time (a 16 MB
		               prompt: 0.4 s a character at a time) */
		if (i + 8 <= n && (memcpy(&w, s + i, 8),
		    (w & 0x8080808080808080ull) == 0))
			i += 8;
		else if ((unsigned char)s[i] < 0x80)
			i++;
		else if ((k = medha_utf8_len(s + i, n - i)) == 0)
			return 0;
		else
			i += k;
	}
	return 1;
}

/* The backend kinds a HELLO may name: the registry's
 * (engine/registry.c), which the codec does not link to stay small for
 * its fuzzer; the replica asks the registry itself. */
int
proto_backend_valid(const char *s)
{
	return strcmp(s, "cpu") == 0 || strcmp(s, "sim") == 0 ||
	    strcmp(s, "cuda") == 0;
}

/* ---- freeing ---- */

void
medha_msg_event_clear(struct medha_msg_event *ev)
{
	free(ev->ids);
	free(ev->text);
	free(ev->lps);
	if (ev->record != NULL) {
		medha_record_clear(ev->record);
		free(ev->record);
	}
	memset(ev, 0, sizeof(*ev));
}

void
medha_msg_clear(struct medha_msg *m)
{
	int64_t i;

	switch (m->type) {
	case MEDHA_MSG_SUBMIT: medha_reqspec_clear(&m->submit); break;
	case MEDHA_MSG_EVENTS:
		for (i = 0; m->events.ev != NULL && i < m->events.n; i++)
			medha_msg_event_clear(&m->events.ev[i]);
		free(m->events.ev);
		break;
	case MEDHA_MSG_RESULT:
		for (int64_t i = 0; m->result.tokens != NULL &&
		     i < m->result.n_tokens; i++)
			free(m->result.tokens[i].lp);
		free(m->result.tokens);
		break;
	case MEDHA_MSG_BATCH:
	case MEDHA_MSG_IDLE:
		free(m->batch.frees);
		free(m->batch.keeps);
		for (i = 0; m->batch.items != NULL && i < m->batch.n_items;
		     i++) {
			free(m->batch.items[i].ids);
			free(m->batch.items[i].forks);
		}
		free(m->batch.items);
		if (m->batch.peers != NULL)
			free(m->batch.peers->urls);
		free(m->batch.peers);
		break;
	}
	memset(m, 0, sizeof(*m));
}

/* ---- the byte scan ---- */

static uint64_t
be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

int
proto_scan(const uint8_t *p, size_t len, char *why, size_t whylen)
{
	uint64_t left[PROTO_DEPTH + 1], n, skip;
	size_t off = 0, at;
	int depth = 0, w, what; /* what: 0 bytes, 1 array, 2 map */
	uint8_t c;

	left[0] = 1;
	while (depth >= 0) {
		if (left[depth] == 0) {
			depth--;
			continue;
		}
		left[depth]--;
		if (off >= len)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "frame: ends early, at byte %zu", off);
		at = off;
		c = p[off++];
		n = skip = 0;
		w = what = 0;
		if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 ||
		    c == 0xc3)
			;
		else if (c <= 0x8f)
			n = 2 * (c & 0x0f);
		else if (c <= 0x9f)
			n = c & 0x0f;
		else if (c <= 0xbf)
			skip = c & 0x1f;
		else
			switch (c) {
			case 0xc4:
			case 0xd9: w = 1; break;
			case 0xc5:
			case 0xda: w = 2; break;
			case 0xc6:
			case 0xdb: w = 4; break;
			case 0xca: skip = 4; break;
			case 0xcb: skip = 8; break;
			case 0xcc:
			case 0xd0: skip = 1; break;
			case 0xcd:
			case 0xd1: skip = 2; break;
			case 0xce:
			case 0xd2: skip = 4; break;
			case 0xcf:
			case 0xd3: skip = 8; break;
			case 0xdc: w = 2, what = 1; break;
			case 0xdd: w = 4, what = 1; break;
			case 0xde: w = 2, what = 2; break;
			case 0xdf: w = 4, what = 2; break;
			default:
				return medha_why(why, whylen, MEDHA_EFORMAT,
				    "frame: byte %zu: type 0x%02x is not used "
				    "by the protocol",
				    at, c);
			}
		if (w > 0) {
			if ((size_t)w > len - off)
				return medha_why(why, whylen, MEDHA_EFORMAT,
				    "frame: ends early, at byte %zu", len);
			n = be(p + off, w);
			off += (size_t)w;
			if (what == 0)
				skip = n, n = 0;
			else if (what == 2)
				n *= 2;
		}
		if (skip > len - off)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "frame: ends early, in the value at byte %zu", at);
		off += (size_t)skip;
		if (n == 0)
			continue;
		if (n > len - off)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "frame: byte %zu: %llu elements but only %zu bytes "
			    "left",
			    at, (unsigned long long)n, len - off);
		if (depth == PROTO_DEPTH)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "frame: byte %zu: nested more than %d deep", at,
			    PROTO_DEPTH);
		left[++depth] = n;
	}
	if (off != len)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "frame: %zu bytes after the message", len - off);
	return 0;
}

/* ---- checks shared by the encoder and the decoder ---- */

struct chk {
	int err;
	const char *msg; /* message name, the first part of every reason */
	char *why;
	size_t whylen;
};

#define FAIL(c, path, ...)                                            \
	proto_fail((c)->why, (c)->whylen, (c)->err, (c)->msg, (path), \
	    __VA_ARGS__)

/* 1 if buf (of cap bytes) holds a string of lo to cap - 1 bytes. */
static int
fits(const char *buf, size_t cap, size_t lo)
{
	const char *nul = memchr(buf, '\0', cap);

	return nul != NULL && (size_t)(nul - buf) >= lo;
}

static int
time_ok(double t)
{
	return isfinite(t) && t >= 0;
}

static int
check_ids(struct chk *c, const char *path, const int32_t *ids, int64_t n)
{
	char buf[192];

	if (n > 0 && ids == NULL)
		return FAIL(c, path, "%lld ids but no array", (long long)n);
	for (int64_t i = 0; i < n; i++)
		if (ids[i] < 0) {
			PROTO_PATH(buf, "%s[%lld]", path,
			    (long long)i);
			return FAIL(c, buf, "not a token id");
		}
	return 0;
}

static int
check_sampling(struct chk *c, const char *pfx,
    const struct medha_sampler_params *sp)
{
	char path[64];

	if (!isfinite(sp->temp) || sp->temp < 0 || sp->temp > 100) {
		PROTO_PATH(path, "%stemperature", pfx);
		return FAIL(c, path, "not a number in [0, 100]");
	}
	if (sp->top_k < 0 || sp->top_k > MEDHA_PROTO_TOPK_MAX) {
		PROTO_PATH(path, "%stop_k", pfx);
		return FAIL(c, path, "not an integer in [0, %d]",
		    MEDHA_PROTO_TOPK_MAX);
	}
	if (!isfinite(sp->top_p) || sp->top_p < 0 || sp->top_p > 1) {
		PROTO_PATH(path, "%stop_p", pfx);
		return FAIL(c, path, "not a number in [0, 1]");
	}
	if (!(sp->presence_penalty >= -2 && sp->presence_penalty <= 2)) {
		PROTO_PATH(path, "%spresence_penalty", pfx);
		return FAIL(c, path, "not a number in [-2, 2]");
	}
	if (!(sp->frequency_penalty >= -2 && sp->frequency_penalty <= 2)) {
		PROTO_PATH(path, "%sfrequency_penalty", pfx);
		return FAIL(c, path, "not a number in [-2, 2]");
	}
	if (!(sp->repetition_penalty >= 0 && sp->repetition_penalty <= 100)) {
		PROTO_PATH(path, "%srepetition_penalty", pfx);
		return FAIL(c, path, "not a number in [0, 100]");
	}
	if (!(sp->min_p >= 0 && sp->min_p <= 1)) {
		PROTO_PATH(path, "%smin_p", pfx);
		return FAIL(c, path, "not a number in [0, 1]");
	}
	if (sp->top_logprobs < 0 || sp->top_logprobs > MEDHA_TOP_LOGPROBS_MAX ||
	    (sp->top_logprobs > 0 && !sp->logprobs)) {
		PROTO_PATH(path, "%stop_logprobs", pfx);
		return FAIL(c, path, "not an integer in [0, %d] (with logprobs)",
		    MEDHA_TOP_LOGPROBS_MAX);
	}
	if (sp->min_tokens < 0 || sp->min_tokens > MEDHA_TOKENS_MAX) {
		PROTO_PATH(path, "%smin_tokens", pfx);
		return FAIL(c, path, "not an integer in [0, %lld]",
		    (long long)MEDHA_TOKENS_MAX);
	}
	if (sp->n_ban < 0 || sp->n_ban > MEDHA_BAN_MAX) {
		PROTO_PATH(path, "%sban", pfx);
		return FAIL(c, path, "more than %d ids", MEDHA_BAN_MAX);
	}
	for (int i = 0; i < sp->n_ban; i++)
		if (sp->ban[i] < 0) {
			PROTO_PATH(path, "%sban[%d]", pfx, i);
			return FAIL(c, path, "not a token id");
		}
	return 0;
}

static int
check_reqspec(struct chk *c, const struct medha_reqspec *rs)
{
	int rc;

	if (!fits(rs->id, sizeof(rs->id), 1))
		return FAIL(c, "request.id", "not a string of 1 to %d bytes",
		    MEDHA_ID_MAX - 1);
	/* the limits of a trace (req.h), so that no count or time from a
	 * client can overflow the scheduler's sums */
	if (!time_ok(rs->arrival) || rs->arrival > MEDHA_TIME_MAX)
		return FAIL(c, "request.arrival", "not a number in [0, %g]",
		    MEDHA_TIME_MAX);
	if (rs->prompt_tokens < 0 || rs->prompt_tokens > MEDHA_TOKENS_MAX ||
	    (rs->prompt_ids != NULL && rs->prompt_tokens == 0))
		return FAIL(c, "request.prompt_tokens",
		    "not an integer in [1, %lld]",
		    (long long)MEDHA_TOKENS_MAX);
	if (rs->prompt == NULL && rs->prompt_tokens == 0)
		return FAIL(c, "request",
		    "no prompt, prompt_ids or prompt_tokens");
	if (rs->max_tokens < 0 || rs->max_tokens > MEDHA_TOKENS_MAX)
		return FAIL(c, "request.max_tokens",
		    "not an integer in [0, %lld]", (long long)MEDHA_TOKENS_MAX);
	if (!time_ok(rs->ttft_slo) || rs->ttft_slo > MEDHA_TIME_MAX)
		return FAIL(c, "request.ttft_slo", "not a number in (0, %g]",
		    MEDHA_TIME_MAX);
	if (!time_ok(rs->tpot_slo) || rs->tpot_slo > MEDHA_TIME_MAX)
		return FAIL(c, "request.tpot_slo", "not a number in (0, %g]",
		    MEDHA_TIME_MAX);
	if ((rc = check_sampling(c, "request.", &rs->sampling)) != 0)
		return rc;
	if (rs->sampling.min_tokens > rs->max_tokens)
		return FAIL(c, "request.min_tokens",
		    "%lld, more than max_tokens (%lld)",
		    (long long)rs->sampling.min_tokens,
		    (long long)rs->max_tokens);
	if (rs->n_stop < 0 || rs->n_stop > MEDHA_STOP_MAX)
		return FAIL(c, "request.stop", "more than %d strings",
		    MEDHA_STOP_MAX);
	if (rs->n_stop_ids < 0 || rs->n_stop_ids > MEDHA_STOP_IDS_MAX)
		return FAIL(c, "request.stop_token_ids", "more than %d ids",
		    MEDHA_STOP_IDS_MAX);
	for (int i = 0; i < rs->n_stop_ids; i++)
		if (rs->stop_ids[i] < 0)
			return FAIL(c, "request.stop_token_ids",
			    "each must be an id in [0, 2147483647]");
	for (int i = 0; i < rs->n_stop; i++)
		if (rs->stop[i] == NULL || rs->stop[i][0] == '\0' ||
		    strnlen(rs->stop[i], MEDHA_STOP_LEN + 1) > MEDHA_STOP_LEN)
			return FAIL(c, "request.stop",
			    "each must be a string of 1 to %d bytes without "
			    "NUL",
			    MEDHA_STOP_LEN);
	if (rs->prompt_ids != NULL)
		return check_ids(c, "request.prompt_ids", rs->prompt_ids,
		    rs->prompt_tokens);
	return 0;
}

/* A record as medha_record_write (io/trace.c) would accept it. */
static int
check_record(struct chk *c, const char *pfx, const struct medha_record *r)
{
	const double t[] = {r->arrival, r->first_token, r->finish, r->ttft,
	    r->tpot_mean, r->tpot_max, r->ttft_slo, r->tpot_slo,
	    r->prefill_alone, r->queue_time};
	static const char *tn[] = {"arrival", "first_token", "finish", "ttft",
	    "tpot_mean", "tpot_max", "ttft_slo", "tpot_slo", "prefill_alone",
	    "queue_time"};
	const char *what = NULL, *bad = NULL;
	char path[96], buf[96];
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!time_ok(t[i]))
			what = tn[i], bad = "not a number >= 0";
	if (!fits(r->id, sizeof(r->id), 1))
		what = "id", bad = "not a string of 1 to 63 bytes";
	else if (r->prompt_tokens < 0)
		what = "prompt_tokens", bad = "not a non-negative integer";
	else if (r->output_tokens < 0)
		what = "output_tokens", bad = "not a non-negative integer";
	else if (r->status < 0 || r->status >= MEDHA_STATUS_COUNT)
		what = "status",
		bad = "not \"ok\", \"rejected\", "
		      "\"failed\" or \"cancelled\"";
	else if (r->finish_reason < 0 || r->finish_reason >= MEDHA_FINISH_COUNT)
		what = "finish_reason", bad = "not \"length\" or \"stop\"";
	else if (!fits(r->reason, sizeof(r->reason), 0))
		what = "reason", bad = "not a string of at most 127 bytes";
	else if (r->code > 0)
		what = "code", bad = "not a negative integer";
	else if (r->n_token_ids < 0 ||
	    (r->token_ids == NULL && r->n_token_ids != 0))
		what = "token_ids", bad = "not an array";
	if (what != NULL) {
		PROTO_PATH(path, "%s.%s", pfx, what);
		return FAIL(c, path, "%s", bad);
	}
	if (medha_tbt_check(&r->tbt, r->output_tokens - 1, buf, sizeof(buf)) !=
	    0) {
		PROTO_PATH(path, "%s.tbt", pfx);
		return FAIL(c, path, "%s", buf);
	}
	PROTO_PATH(path, "%s.token_ids", pfx);
	return check_ids(c, path, r->token_ids, r->n_token_ids);
}

static int
check_events(struct chk *c, const struct medha_msg_events *e)
{
	char path[64];
	int rc;

	if (e->n < 0 || e->n > MEDHA_PROTO_MAX_EVENTS ||
	    (e->n > 0 && e->ev == NULL))
		return FAIL(c, "", "not an array of at most %d events",
		    MEDHA_PROTO_MAX_EVENTS);
	for (int64_t i = 0; i < e->n; i++) {
		const struct medha_msg_event *ev = &e->ev[i];

		PROTO_PATH(path, "[%lld]", (long long)i);
		if (ev->kind == MEDHA_EVENT_TOKENS) {
			if (ev->text == NULL && ev->text_len != 0)
				return FAIL(c, path, "text: no bytes");
			PROTO_PATH(path, "[%lld].ids",
			    (long long)i);
			if (ev->n_ids < 0)
				return FAIL(c, path, "out of range");
			if ((rc = check_ids(c, path, ev->ids, ev->n_ids)) != 0)
				return rc;
		} else if (ev->kind == MEDHA_EVENT_RECORD) {
			if (ev->record == NULL)
				return FAIL(c, path, "no record");
			PROTO_PATH(path, "[%lld].record",
			    (long long)i);
			if ((rc = check_record(c, path, ev->record)) != 0)
				return rc;
		} else
			return FAIL(c, path, "kind %d: not 0 or 1", ev->kind);
	}
	return 0;
}

/* A mixture of experts' counts (RESULT, STATUS_REPLY). */
static int
check_experts(struct chk *c, const int64_t *v, int n)
{
	if (n < 0 || n > MEDHA_PROTO_MAX_EXPERTS)
		return FAIL(c, "experts", "not an array of at most %d",
		    MEDHA_PROTO_MAX_EXPERTS);
	for (int i = 0; i < n; i++)
		if (v[i] < 0)
			return FAIL(c, "experts", "a count below 0");
	return 0;
}

static int
check_status(struct chk *c, const struct medha_msg_status *s)
{
	const int64_t n[] = {s->workers, s->workers_wanted, s->pending,
	    s->queue, s->kv_blocks, s->kv_used, s->block_size, s->prefill};
	static const char *nn[] = {"workers", "workers_wanted", "pending",
	    "queue", "kv_blocks", "kv_used", "block_size", "prefill"};

	for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++)
		if (n[i] < 0)
			return FAIL(c, nn[i], "not a non-negative integer");
	if (!(s->work >= 0 && s->work <= 1e18))
		return FAIL(c, "work", "not a number of seconds >= 0");
	if (!fits(s->model, sizeof(s->model), 0))
		return FAIL(c, "model", "not a string of at most %d bytes",
		    (int)sizeof(s->model) - 1);
	if (!fits(s->backend, sizeof(s->backend), 0))
		return FAIL(c, "backend", "not a string of at most %d bytes",
		    (int)sizeof(s->backend) - 1);
	return check_experts(c, s->experts, s->n_experts);
}

static int
check_hello(struct chk *c, const struct medha_msg_hello *h)
{
	const int deg[3] = {h->tp, h->spp, h->kvp};
	const int rank[3] = {h->rank_tp, h->rank_spp, h->rank_kvp};
	static const char *dn[3] = {"tp", "spp", "kvp"};
	static const char *rn[3] = {"rank_tp", "rank_spp", "rank_kvp"};
	const int pos[5] = {h->block_size, h->n_blocks, h->max_seqs, h->vocab,
	    h->dim};
	static const char *pn[5] = {"block_size", "n_blocks", "max_seqs",
	    "vocab", "dim"};
	int i;

	if (!fits(h->backend, sizeof(h->backend), 1) ||
	    !proto_backend_valid(h->backend))
		return FAIL(c, "backend", "not \"cpu\", \"sim\" or \"cuda\"");
	if (!fits(h->model, sizeof(h->model), 1))
		return FAIL(c, "model", "not a string of 1 to %d bytes",
		    (int)sizeof(h->model) - 1);
	if (!fits(h->gpu, sizeof(h->gpu), 1))
		return FAIL(c, "gpu", "not a string of 1 to %d bytes",
		    (int)sizeof(h->gpu) - 1);
	for (i = 0; i < 3; i++) {
		if (deg[i] < 1 || deg[i] > MEDHA_PROTO_MAX_DEGREE)
			return FAIL(c, dn[i], "not an integer in [1, %d]",
			    MEDHA_PROTO_MAX_DEGREE);
		if (rank[i] < 0 || rank[i] >= deg[i])
			return FAIL(c, rn[i], "not in [0, %s)", dn[i]);
	}
	if (h->layer_lo < 0 || h->layer_lo >= h->layer_hi ||
	    h->layer_hi > MEDHA_PROTO_MAX_DEGREE)
		return FAIL(c, "layers", "not [lo, hi) with 0 <= lo < hi <= %d",
		    MEDHA_PROTO_MAX_DEGREE);
	for (i = 0; i < 5; i++)
		if (pos[i] < 1)
			return FAIL(c, pn[i], "not a positive integer");
	if (h->pid < 0)
		return FAIL(c, "pid", "not a non-negative integer");
	if (!fits(h->peer, sizeof(h->peer), 0))
		return FAIL(c, "peer", "not a string of at most %d bytes",
		    (int)sizeof(h->peer) - 1);
	if (h->fingerprint[0] != '\0' &&
	    (strlen(h->fingerprint) != MEDHA_PROTO_FP_LEN ||
	        strspn(h->fingerprint, "0123456789abcdef") !=
	            MEDHA_PROTO_FP_LEN))
		return FAIL(c, "fingerprint", "not %d lowercase hex digits",
		    MEDHA_PROTO_FP_LEN);
	if (h->caps & ~(unsigned)MEDHA_HELLO_CAPS)
		return FAIL(c, "caps", "a capability this build does not know");
	return 0;
}

static int
check_result(struct chk *c, const struct medha_msg_result *r)
{
	char path[48];

	if (r->worker_id < 0)
		return FAIL(c, "worker_id", "not a non-negative integer");
	if (r->n_tokens < 0 || r->n_tokens > MEDHA_PROTO_MAX_ITEMS ||
	    (r->n_tokens > 0 && r->tokens == NULL))
		return FAIL(c, "tokens", "not an array of at most %d",
		    MEDHA_PROTO_MAX_ITEMS);
	for (int64_t i = 0; i < r->n_tokens; i++)
		if (r->tokens[i].token < 0) {
			PROTO_PATH(path, "tokens[%lld]",
			    (long long)i);
			return FAIL(c, path, "not a token id");
		}
	if (!fits(r->error, sizeof(r->error), 0))
		return FAIL(c, "error", "not a string of at most %d bytes",
		    (int)sizeof(r->error) - 1);
	return check_experts(c, r->experts, r->n_experts);
}

/* An item's fork: runs from position 0 to its pos, each non-empty,
 * one after another. */
static int
check_forks(struct chk *c, int64_t i, const struct medha_msg_item *it)
{
	char path[48];
	int64_t at = 0;

	PROTO_PATH(path, "items[%lld].forks", (long long)i);
	if (it->n_forks < 0 || it->n_forks > MEDHA_PROTO_MAX_ITEMS ||
	    (it->n_forks > 0 && it->forks == NULL))
		return FAIL(c, path, "not an array of at most %d runs",
		    MEDHA_PROTO_MAX_ITEMS);
	for (int64_t k = 0; k < it->n_forks; k++) {
		if (it->forks[k].from != at ||
		    it->forks[k].to <= it->forks[k].from)
			return FAIL(c, path,
			    "runs not one after another from 0");
		at = it->forks[k].to;
	}
	if (it->n_forks > 0 && at != it->pos)
		return FAIL(c, path, "runs ending at %lld, not at pos %lld",
		    (long long)at, (long long)it->pos);
	return 0;
}

static int
check_batch(struct chk *c, const struct medha_msg_batch *b, int idle)
{
	char path[48];
	int64_t total = 0;
	int rc;

	if (b->n_frees < 0 || b->n_frees > MEDHA_PROTO_MAX_ITEMS ||
	    (b->n_frees > 0 && b->frees == NULL))
		return FAIL(c, "frees", "not an array of at most %d handles",
		    MEDHA_PROTO_MAX_ITEMS);
	for (int64_t i = 0; b->keeps != NULL && i < b->n_frees; i++)
		if (b->keeps[i] < 0)
			return FAIL(c, "frees", "a kept length below 0");
	if (idle && (b->seq != 0 || b->n_items != 0))
		return FAIL(c, "", "has a batch_seq or items");
	if (b->n_items < 0 || b->n_items > MEDHA_PROTO_MAX_ITEMS ||
	    (b->n_items > 0 && b->items == NULL))
		return FAIL(c, "items", "not an array of at most %d items",
		    MEDHA_PROTO_MAX_ITEMS);
	for (int64_t i = 0; i < b->n_items; i++) {
		const struct medha_msg_item *it = &b->items[i];

		if (it->pos < 0) {
			PROTO_PATH(path, "items[%lld].pos",
			    (long long)i);
			return FAIL(c, path, "not a non-negative integer");
		}
		PROTO_PATH(path, "items[%lld].ids", (long long)i);
		if (it->n_ids < 1 || it->ids == NULL)
			return FAIL(c, path, "not a non-empty array");
		if (it->n_ids > MEDHA_PROTO_MAX_IDS - total)
			return FAIL(c, "items", "more than %d ids in all",
			    MEDHA_PROTO_MAX_IDS);
		total += it->n_ids;
		if ((rc = check_ids(c, path, it->ids, it->n_ids)) != 0)
			return rc;
		PROTO_PATH(path, "items[%lld].params.",
		    (long long)i);
		if (it->has_params &&
		    (rc = check_sampling(c, path, &it->params)) != 0)
			return rc;
		/* a resumed request drew a value for each token of its
		   output, and the worker steps its generator over them (its
		   first item may be a chunk shorter than that: no bound of
		   the item's) */
		if (it->has_params &&
		    it->params.skip > (uint64_t)MEDHA_TOKENS_MAX) {
			PROTO_PATH(path, "items[%lld].params.skip", (long long)i);
			return FAIL(c, path, "more than %lld",
			    (long long)MEDHA_TOKENS_MAX);
		}
		PROTO_PATH(path, "items[%lld].groups", (long long)i);
		if (it->n_groups < 0 || it->n_groups > MEDHA_PROTO_MAX_GROUPS)
			return FAIL(c, path, "not an array of at most %d",
			    MEDHA_PROTO_MAX_GROUPS);
		for (int g = 0; g < it->n_groups; g++)
			if (it->groups[g] >= MEDHA_PROTO_MAX_GROUPS)
				return FAIL(c, path, "a group not below %d",
				    MEDHA_PROTO_MAX_GROUPS);
		if ((rc = check_forks(c, i, it)) != 0)
			return rc;
	}
	if (b->peers != NULL) {
		const struct medha_msg_peers *p = b->peers;
		if (idle)
			return FAIL(c, "peers", "given with an idle");
		if (p->gen < 1)
			return FAIL(c, "peers.gen", "not a positive integer");
		if (p->n < 1 || p->n > MEDHA_PROTO_MAX_PEERS || p->urls == NULL)
			return FAIL(c, "peers.urls", "not an array of 1 to %d",
			    MEDHA_PROTO_MAX_PEERS);
		for (int i = 0; i < p->n; i++)
			if (!fits(p->urls[i], sizeof(p->urls[i]), 0))
				return FAIL(c, "peers.urls",
				    "not strings of at most %d bytes",
				    MEDHA_PROTO_URL_MAX - 1);
		if (p->kvp_tokens < 1)
			return FAIL(c, "peers.kvp_tokens",
			    "not a positive integer");
	}
	return 0;
}

static int check_loud(const struct medha_msg *m, int err, char *why,
    size_t whylen);

int
proto_check(const struct medha_msg *m, int err, char *why, size_t whylen)
{
	int rc, q = proto_quiet;

	proto_quiet = 1;
	rc = check_loud(m, err, why, whylen);
	proto_quiet = q;
	if (rc != 0 && !q)
		rc = check_loud(m, err, why, whylen);
	return rc;
}

static int
check_loud(const struct medha_msg *m, int err, char *why, size_t whylen)
{
	struct chk c = {err, medha_msg_type_name(m->type), why, whylen};

	switch (m->type) {
	case MEDHA_MSG_SUBMIT: return check_reqspec(&c, &m->submit);
	case MEDHA_MSG_ACCEPTED:
		if (!fits(m->accepted.id, sizeof(m->accepted.id), 1))
			return FAIL(&c, "id", "not a string of 1 to %d bytes",
			    MEDHA_ID_MAX - 1);
		return 0;
	case MEDHA_MSG_EVENTS: return check_events(&c, &m->events);
	case MEDHA_MSG_STATUS_REPLY: return check_status(&c, &m->status);
	case MEDHA_MSG_ERROR:
		if (m->error.code >= 0)
			return FAIL(&c, "code", "not a negative integer");
		if (!fits(m->error.reason, sizeof(m->error.reason), 0))
			return FAIL(&c, "reason",
			    "not a string of at most %d bytes",
			    (int)sizeof(m->error.reason) - 1);
		return 0;
	case MEDHA_MSG_HELLO: return check_hello(&c, &m->hello);
	case MEDHA_MSG_WELCOME:
	case MEDHA_MSG_READY:
	case MEDHA_MSG_HEARTBEAT:
		if (m->worker_id < 0)
			return FAIL(&c, "worker_id",
			    "not a non-negative integer");
		return 0;
	case MEDHA_MSG_RESULT: return check_result(&c, &m->result);
	case MEDHA_MSG_BATCH: return check_batch(&c, &m->batch, 0);
	case MEDHA_MSG_IDLE: return check_batch(&c, &m->batch, 1);
	case MEDHA_MSG_POLL:
	case MEDHA_MSG_CANCEL:
	case MEDHA_MSG_OK:
	case MEDHA_MSG_STATUS: return 0;
	}
	return medha_why(why, whylen, err, "unknown message type %d", m->type);
}
