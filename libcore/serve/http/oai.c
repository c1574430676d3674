/*
 * oai.c: the OpenAI JSON of the HTTP front door (http.h) other than
 * the request bodies (parse.c): error bodies, response bodies and
 * stream chunks in OpenAI's shapes, and the router's figures as
 * Prometheus text. No sockets here; tests/http_test.c checks it alone.
 */
#include "serve/http/http.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- errors ---- */

int
medha_oai_error_set(struct medha_oai_error *e, int status, const char *type,
    const char *code, const char *param, const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	e->type = type;
	e->code = code;
	snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return status;
}

/*
 * A refusal of the prompt's token ids, in the wire's words ("prompt_ids[3]
 * = ...: outside the vocabulary"), in the API's: the field a client sent
 * is "prompt". 1 if it was one (e set), else 0.
 */
static int
prompt_ids_error(struct medha_oai_error *e, const char *why)
{
	if (strncmp(why, "prompt_ids[", 11) != 0)
		return 0;
	medha_oai_error_set(e, 400, "invalid_request_error", NULL, "prompt",
	    "prompt%s", why + 10);
	return 1;
}

void
medha_oai_error_submit(struct medha_oai_error *e, int code, const char *reason)
{
	if (prompt_ids_error(e, reason))
		return;
	if (code == MEDHA_ENOSPACE && strncmp(reason, "overloaded", 10) == 0)
		medha_oai_error_set(e, 429, "rate_limit_error",
		    "too_many_requests", NULL, "%s", reason);
	else if (code == MEDHA_ENOSPACE || code == MEDHA_EUNSUP ||
	    code == MEDHA_ETIMEOUT || code == MEDHA_EPEER)
		medha_oai_error_set(e, 503, "server_error",
		    "service_unavailable", NULL, "%s", reason);
	else if (code == MEDHA_ENOMEM || code == MEDHA_EIO)
		medha_oai_error_set(e, 500, "server_error", NULL, NULL, "%s",
		    reason);
	else
		medha_oai_error_set(e, 400, "invalid_request_error", NULL, NULL,
		    "%s", reason);
}

void
medha_oai_error_record(struct medha_oai_error *e,
    const struct medha_record *rec)
{
	const char *why = rec->reason[0] ? rec->reason : "no reason given";

	switch (rec->status) {
	case MEDHA_STATUS_REJECTED:
		if (prompt_ids_error(e, why))
			break;
		if (strncmp(why, "no replica ready", 16) == 0)
			medha_oai_error_set(e, 503, "server_error",
			    "service_unavailable", NULL, "%s", why);
		else if (strstr(why, "context") != NULL)
			medha_oai_error_set(e, 400, "invalid_request_error",
			    "context_length_exceeded", NULL, "%s", why);
		else
			medha_oai_error_set(e, 400, "invalid_request_error",
			    NULL, NULL, "%s", why);
		break;
	case MEDHA_STATUS_CANCELLED:
		medha_oai_error_set(e, 503, "server_error",
		    "service_unavailable", NULL, "request cancelled: %s", why);
		break;
	default:
		medha_oai_error_set(e, 500, "server_error", NULL, NULL,
		    "request failed: %s", why);
	}
}

/* jansson's output as a malloc'd string; v is released. */
static char *
dump(json_t *v, size_t *len)
{
	char *s;

	if (v == NULL)
		return NULL;
	s = json_dumps(v, JSON_COMPACT);
	json_decref(v);
	if (s != NULL && len != NULL)
		*len = strlen(s);
	return s;
}

static json_t *
error_obj(const struct medha_oai_error *e)
{
	return json_pack("{s:{s:s?,s:s,s:s?,s:s?}}", "error", "message",
	    e->message[0] ? e->message : NULL, "type",
	    e->type ? e->type : "server_error", "param",
	    e->param[0] ? e->param : NULL, "code", e->code);
}

char *
medha_oai_error_json(const struct medha_oai_error *e, size_t *len)
{
	struct medha_oai_error c = *e;
	size_t n;
	char *fixed = medha_utf8_fix(e->message, strlen(e->message), &n);

	/* a reason may quote bytes of the request */
	if (fixed == NULL)
		return NULL;
	snprintf(c.message, sizeof(c.message), "%s", fixed);
	free(fixed);
	return dump(error_obj(&c), len);
}

/* ---- UTF-8 ---- */

char *
medha_utf8_fix(const char *s, size_t len, size_t *outlen)
{
	char *out = medha_reallocarray(NULL, len + 1, 3); /* worst: all bad */
	size_t o = 0;

	if (out == NULL)
		return NULL;
	for (size_t i = 0; i < len;) {
		size_t k = medha_utf8_len(s + i, len - i);
		if (k == 0) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		} else {
			memcpy(out + o, s + i, k);
			o += k;
			i += k;
		}
	}
	out[o] = '\0';
	if (outlen != NULL)
		*outlen = o;
	return out;
}

/* Whether the m bytes at u begin a character that more bytes could make
 * whole (a lead byte alone always can; with more, they decide). */
static int
utf8_viable(const char *u, size_t m)
{
	unsigned char c = (unsigned char)u[0];
	size_t k = c >= 0xc2 && c <= 0xdf ? 2
	         : c >= 0xe0 && c <= 0xef ? 3
	         : c >= 0xf0 && c <= 0xf4 ? 4
	                                  : 0;
	char t[4];

	if (k == 0 || m >= k)
		return 0;
	if (m == 1)
		return 1;
	memcpy(t, u, m);
	memset(t + m, 0x80, k - m); /* the rest only sets low bits */
	return medha_utf8_len(t, k) == k;
}

/*
 * The bytes of s that medha_utf8_fix would turn into characters now,
 * decoding from the start as it does (a bad byte is one U+FFFD); the
 * rest, at most 3 bytes, begin a character not yet whole. *chars counts
 * the characters.
 */
static size_t
utf8_whole(const char *s, size_t n, int64_t *chars)
{
	size_t i = 0;

	while (i < n) {
		size_t k = medha_utf8_len(s + i, n - i);
		if (k == 0 && utf8_viable(s + i, n - i))
			break;
		i += k > 0 ? k : 1;
		(*chars)++;
	}
	return i;
}

size_t
medha_utf8_feed(struct medha_utf8_acc *a, const char *s, size_t n, char *out)
{
	size_t len = (size_t)a->n + n, w;

	memcpy(out, a->b, (size_t)a->n);
	if (n > 0)
		memcpy(out + a->n, s, n);
	w = utf8_whole(out, len, &a->chars);
	a->n = (int)(len - w); /* < 4: a viable start is shorter than 4 */
	memcpy(a->b, out + w, (size_t)a->n);
	return w;
}

size_t
medha_utf8_flush(struct medha_utf8_acc *a, char *out)
{
	size_t n = (size_t)a->n;

	memcpy(out, a->b, n);
	a->chars += a->n; /* each byte one U+FFFD */
	a->n = 0;
	return n;
}


/* ---- responses ---- */

static json_t *
usage_obj(const struct medha_record *rec)
{
	/* OpenAI's prompt_tokens_details.cached_tokens: the prompt tokens
	 * whose KV the prefix cache held */
	return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens",
	    (json_int_t)rec->prompt_tokens, "completion_tokens",
	    (json_int_t)rec->output_tokens, "total_tokens",
	    (json_int_t)(rec->prompt_tokens + rec->output_tokens),
	    "prompt_tokens_details", "cached_tokens",
	    (json_int_t)rec->cached_tokens);
}

static const char *
finish_str(int finish)
{
	return finish == MEDHA_FINISH_LENGTH ? "length" : "stop";
}

/*
 * Token k's name of lp (0 the drawn token id, 1 + i its top[i]; its
 * bytes in *raw, *rawlen, inside lp or in fallback): the bytes the
 * replica named it with (medha_token_lp_bytes; the front door keeps no
 * tokenizer for this), as text where they are whole UTF-8 characters,
 * else OpenAI's "bytes:\xe6\x9d" (each byte as \x and two hex digits);
 * "token_id:N", vLLM's, where it has none (a replica without a
 * tokenizer, or names over MEDHA_LP_BYTES_MAX bytes). malloc'd.
 */
static char *
token_text(const struct medha_token_lp *lp, int k, int32_t id,
    char fallback[32], const char **raw, size_t *rawlen)
{
	size_t i = 0, m;
	const char *b = medha_token_lp_bytes(lp, k, rawlen);
	char *t;

	if (b == NULL) {
		snprintf(fallback, 32, "token_id:%d", id);
		b = fallback;
		*rawlen = strlen(fallback);
	}
	*raw = b;
	while (i < *rawlen && (m = medha_utf8_len(b + i, *rawlen - i)) > 0)
		i += m;
	if (i == *rawlen)
		return medha_utf8_fix(b, *rawlen, NULL);
	if ((t = malloc(6 + 4 * *rawlen + 1)) == NULL)
		return NULL;
	memcpy(t, "bytes:", 6);
	for (i = 0; i < *rawlen; i++)
		snprintf(t + 6 + 4 * i, 5, "\\x%02x", (unsigned char)b[i]);
	t[6 + 4 * *rawlen] = '\0';
	return t;
}

static json_t *
bytes_arr(const char *raw, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a != NULL && i < n; i++)
		json_array_append_new(a, json_integer((unsigned char)raw[i]));
	return a;
}

/*
 * OpenAI's logprobs object for n tokens: chat's {"content": [{token,
 * logprob, bytes, top_logprobs}]}, completions' {tokens, token_logprobs,
 * top_logprobs, text_offset}; null where none were asked for.
 */
static json_t *
logprobs_obj(const struct medha_oai_head *hd, const int32_t *ids,
    const struct medha_token_lp *lps, int64_t n)
{
	json_t *content, *tokens, *tlp, *top, *off;
	char fb[32], whole[MEDHA_LP_BYTES_MAX + 4];
	const char *raw;
	size_t rl;
	struct medha_utf8_acc at0 = {0}, *at = hd->text_off;

	if (lps == NULL || ids == NULL)
		return json_null();
	if (at == NULL)
		at = &at0;
	content = json_array(), tokens = json_array(), tlp = json_array();
	top = json_array(), off = json_array();
	for (int64_t i = 0; i < n; i++) {
		char *t = token_text(&lps[i], 0, ids[i], fb, &raw, &rl);
		json_t *tops = hd->chat ? json_array() : json_object();
		if (t == NULL)
			continue;
		for (int k = 0; k < lps[i].ntop; k++) {
			char fb2[32];
			const char *raw2;
			size_t rl2;
			char *u = token_text(&lps[i], 1 + k, lps[i].top[k].id,
			    fb2, &raw2, &rl2);
			if (u == NULL)
				continue;
			if (hd->chat)
				json_array_append_new(tops,
				    json_pack("{s:s,s:f,s:o}", "token", u,
				        "logprob", (double)lps[i].top[k].logprob,
				        "bytes", bytes_arr(raw2, rl2)));
			else
				json_object_set_new(tops, u,
				    json_real(lps[i].top[k].logprob));
			free(u);
		}
		if (hd->chat)
			json_array_append_new(content,
			    json_pack("{s:s,s:f,s:o,s:o}", "token", t, "logprob",
			        (double)lps[i].logprob, "bytes", bytes_arr(raw, rl),
			        "top_logprobs", tops));
		else {
			json_array_append_new(tokens, json_string(t));
			json_array_append_new(tlp, json_real(lps[i].logprob));
			json_array_append_new(top, tops);
			/* the character (of the text made valid) where
			   its first byte is: a token that ends inside
			   one gives the next token the same offset */
			json_array_append_new(off, json_integer(at->chars));
		}
		medha_utf8_feed(at, raw, rl, whole);
		free(t);
	}
	if (hd->chat) {
		json_decref(tokens), json_decref(tlp), json_decref(top);
		json_decref(off);
		return json_pack("{s:o}", "content", content);
	}
	json_decref(content);
	return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens,
	    "token_logprobs", tlp, "top_logprobs", top, "text_offset", off);
}

/* Choice i of a whole response: text (len bytes) and rec's logprobs. */
static json_t *
choice_obj(const struct medha_oai_head *hd, int i, const char *text,
    size_t len, const struct medha_record *rec)
{
	size_t n;
	char *t = medha_utf8_fix(text != NULL ? text : "", text ? len : 0, &n);
	json_t *choice;
	struct medha_utf8_acc off = {0};
	struct medha_oai_head h1 = *hd;

	if (t == NULL)
		return NULL;
	h1.text_off = &off; /* each choice's text_offset from 0 */
	hd = &h1;
	if (hd->chat)
		choice = json_pack("{s:i,s:{s:s,s:s%},s:o,s:s}", "index", i,
		    "message", "role", "assistant", "content", t, n, "logprobs",
		    logprobs_obj(hd, rec->token_ids, hd->logprobs ? rec->logprobs : NULL,
		        rec->n_token_ids),
		    "finish_reason", finish_str(rec->finish_reason));
	else
		choice = json_pack("{s:i,s:s%,s:o,s:s}", "index", i, "text", t,
		    n, "logprobs",
		    logprobs_obj(hd, rec->token_ids, hd->logprobs ? rec->logprobs : NULL,
		        rec->n_token_ids),
		    "finish_reason", finish_str(rec->finish_reason));
	free(t);
	return choice;
}

static char *
response(const struct medha_oai_head *hd, json_t *choices,
    const struct medha_record *usage, size_t *outlen)
{
	json_t *o;

	if (choices == NULL)
		return NULL;
	o = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o,s:n}", "id", hd->id, "object",
	    hd->chat ? "chat.completion" : "text_completion", "created",
	    (json_int_t)hd->created, "model", hd->model, "choices", choices,
	    "usage", usage_obj(usage), "system_fingerprint");
	return dump(o, outlen);
}

char *
medha_oai_response(const struct medha_oai_head *hd, const char *text,
    size_t len, const struct medha_record *rec, size_t *outlen)
{
	json_t *c = choice_obj(hd, 0, text, len, rec);

	return c != NULL ? response(hd, json_pack("[o]", c), rec, outlen) : NULL;
}

char *
medha_oai_response_n(const struct medha_oai_head *hd,
    struct medha_record *const *recs, int n, const struct medha_record *usage,
    size_t *outlen)
{
	json_t *a = json_array(), *c;

	for (int i = 0; a != NULL && i < n; i++) {
		const char *t = recs[i]->text != NULL ? recs[i]->text : "";
		if ((c = choice_obj(hd, i, t, strlen(t), recs[i])) == NULL ||
		    json_array_append_new(a, c) != 0) {
			json_decref(a);
			return NULL;
		}
	}
	return response(hd, a, usage, outlen);
}

char *
medha_oai_chunk(const struct medha_oai_head *hd, const char *text, size_t len,
    int role, int finish, const struct medha_record *rec, int include_usage,
    size_t *outlen)
{
	json_t *o, *choices;
	char *js, *out;
	size_t jn;

	if (rec != NULL)
		choices = json_array();
	else {
		size_t n;
		char *t = medha_utf8_fix(text != NULL ? text : "",
		    text ? len : 0, &n);
		json_t *fin =
		    finish ? json_string(finish_str(finish)) : json_null();
		json_t *c;
		if (t == NULL)
			return NULL;
		if (hd->chat) {
			json_t *delta = json_object();
			if (role)
				json_object_set_new(delta, "role",
				    json_string("assistant"));
			if (n > 0 || role)
				json_object_set_new(delta, "content",
				    json_stringn(t, n));
			c = json_pack("{s:i,s:o,s:o,s:o}", "index", hd->index, "delta",
			    delta, "logprobs",
			    logprobs_obj(hd, hd->ids, hd->logprobs ? hd->lps : NULL,
			        hd->n_lps),
			    "finish_reason", fin);
		} else
			c = json_pack("{s:i,s:s%,s:o,s:o}", "index", hd->index, "text",
			    t, n, "logprobs",
			    logprobs_obj(hd, hd->ids, hd->logprobs ? hd->lps : NULL,
			        hd->n_lps),
			    "finish_reason", fin);
		free(t);
		choices = json_pack("[o]", c);
	}
	o = json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", hd->id, "object",
	    hd->chat ? "chat.completion.chunk" : "text_completion", "created",
	    (json_int_t)hd->created, "model", hd->model, "choices", choices);
	if (o != NULL && rec != NULL)
		json_object_set_new(o, "usage", usage_obj(rec));
	else if (o != NULL && include_usage)
		json_object_set_new(o, "usage", json_null());
	if ((js = dump(o, &jn)) == NULL)
		return NULL;
	if ((out = malloc(jn + 9)) != NULL) {
		memcpy(out, "data: ", 6);
		memcpy(out + 6, js, jn);
		memcpy(out + 6 + jn, "\n\n", 3);
		*outlen = jn + 8;
	}
	free(js);
	return out;
}

/* ---- Prometheus text ---- */

const int medha_http_codes[MEDHA_HTTP_CODES] = {200, 400, 404, 405, 408, 411,
    413, 429, 500, 501, 503, 504};

struct sbuf {
	char *p;
	size_t n, cap;
	int err;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (b->err)
		return;
	for (;;) {
		va_start(ap, fmt);
		k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
		va_end(ap);
		if (k < 0) {
			b->err = 1;
			return;
		}
		if ((size_t)k < b->cap - b->n) {
			b->n += (size_t)k;
			return;
		}
		size_t ncap = 2 * b->cap + (size_t)k + 1;
		char *np = realloc(b->p, ncap);
		if (np == NULL) {
			b->err = 1;
			return;
		}
		b->p = np;
		b->cap = ncap;
	}
}

static void
head(struct sbuf *b, const char *name, const char *type, const char *help)
{
	sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \, " and newline escaped (at most 300 bytes). */
static const char *
label(const char *s, char *buf, size_t len)
{
	size_t o = 0;

	for (; s != NULL && *s != '\0' && o + 3 < len; s++) {
		if (*s == '\\' || *s == '"')
			buf[o++] = '\\', buf[o++] = *s;
		else if (*s == '\n')
			buf[o++] = '\\', buf[o++] = 'n';
		else
			buf[o++] = *s;
	}
	buf[o] = '\0';
	return buf;
}

/* ml: the model_name label, 'model_name="..."' (vLLM's). */
static void
hist(struct sbuf *b, const char *name, const char *help,
    const struct medha_hist *h, const double *le, const char *ml)
{
	uint64_t c = 0;

	head(b, name, "histogram", help);
	for (int i = 0; i < MEDHA_HIST_BUCKETS; i++) {
		c += h->n[i];
		sb_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, ml, le[i],
		    (unsigned long long)c);
	}
	sb_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, ml,
	    (unsigned long long)h->count);
	sb_printf(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, ml,
	    h->sum, name, ml, (unsigned long long)h->count);
}

/* The prefix cache's counters and the preemptions, from the records
 * (ml as hist's). */
static void
kv_metrics(struct sbuf *b, const struct medha_router_metrics *m,
    const char *ml)
{
	head(b, "medha_preemptions_total", "counter",
	    "Times the requests that ended were preempted (their KV given "
	    "up for another's next token, and recomputed).");
	sb_printf(b, "medha_preemptions_total{%s} %lld\n", ml,
	    (long long)m->preemptions);
	head(b, "medha_prefix_cache_queries_total", "counter",
	    "Prompt tokens of the requests that ended, looked up in the "
	    "prefix cache.");
	sb_printf(b, "medha_prefix_cache_queries_total{%s} %lld\n", ml,
	    (long long)m->prompt_tokens);
	head(b, "medha_prefix_cache_hits_total", "counter",
	    "Of them, the tokens whose KV came from the prefix cache.");
	sb_printf(b, "medha_prefix_cache_hits_total{%s} %lld\n", ml,
	    (long long)m->cached_tokens);
	head(b, "medha_prefix_cache_hit_requests_total", "counter",
	    "Requests that ended with a cached prompt token or more.");
	sb_printf(b, "medha_prefix_cache_hit_requests_total{%s} %lld\n", ml,
	    (long long)m->cache_hits);
	head(b, "medha_prefix_cache_evictions_total", "counter",
	    "KV blocks the replicas' prefix caches evicted.");
	sb_printf(b, "medha_prefix_cache_evictions_total{%s} %lld\n", ml,
	    (long long)m->cache_evictions);
}

/* The replicas' progress guarantee (medha-sched(1)), from their STATUS. */
static void
progress_metrics(struct sbuf *b, const struct medha_router_metrics *m,
    const char *ml)
{
	head(b, "medha_progress_batches_total", "counter",
	    "Batches whose decodes alone filled the target time and that "
	    "ran over it to give a waiting prefill its smallest chunk.");
	sb_printf(b, "medha_progress_batches_total{%s} %lld\n", ml,
	    (long long)m->progress_batches);
}

/*
 * A mixture of experts' load, from the replicas' STATUS: tokens routed
 * to each expert (summed over the routed layers) and the most loaded
 * expert's count over the mean, 1 when balanced; none for a dense model.
 */
static void
expert_metrics(struct sbuf *b, const struct medha_router_metrics *m,
    const char *ml)
{
	int64_t sum = 0, max = 0;

	if (m->n_experts <= 0)
		return;
	head(b, "medha_expert_tokens_total", "counter",
	    "Tokens routed to each expert of a mixture of experts, summed "
	    "over its routed layers (a token counts once for every expert "
	    "it chose).");
	for (int e = 0; e < m->n_experts; e++) {
		sb_printf(b, "medha_expert_tokens_total{%s,expert=\"%d\"} %lld\n",
		    ml, e, (long long)m->experts[e]);
		sum += m->experts[e];
		max = m->experts[e] > max ? m->experts[e] : max;
	}
	head(b, "medha_expert_load_imbalance", "gauge",
	    "The most loaded expert's tokens over the mean of all experts' "
	    "(1: balanced; 0 before any token).");
	sb_printf(b, "medha_expert_load_imbalance{%s} %.6g\n", ml,
	    sum > 0 ? (double)max * m->n_experts / (double)sum : 0.0);
}

char *
medha_oai_metrics(const struct medha_router_metrics *m,
    const struct medha_http_stats *s, size_t *len)
{
	struct sbuf b = {0};
	char lb[320], ml[360];

	if ((b.p = malloc(b.cap = 4096)) == NULL)
		return NULL;
	b.p[0] = '\0';
	head(&b, "medha_http_responses_total", "counter",
	    "HTTP responses of the front door, by status code (a stream "
	    "counts when it starts).");
	for (int i = 0; i <= MEDHA_HTTP_CODES; i++)
		if (i < MEDHA_HTTP_CODES)
			sb_printf(&b,
			    "medha_http_responses_total{code=\"%d\"} %llu\n",
			    medha_http_codes[i],
			    (unsigned long long)s->responses[i]);
		else
			sb_printf(&b,
			    "medha_http_responses_total{code=\"other\"} "
			    "%llu\n",
			    (unsigned long long)s->responses[i]);
	head(&b, "medha_http_requests_in_progress", "gauge",
	    "HTTP requests being answered now.");
	sb_printf(&b, "medha_http_requests_in_progress %lld\n",
	    (long long)s->in_progress);
	head(&b, "medha_http_streams", "gauge",
	    "Server-sent event streams open now.");
	sb_printf(&b, "medha_http_streams %lld\n", (long long)s->streams);
	if (m == NULL)
		goto out;
	head(&b, "medha_router_ready", "gauge",
	    "1 while a replica is ready and the router is not stopping.");
	sb_printf(&b, "medha_router_ready %d\n", m->ready);
	head(&b, "medha_uptime_seconds", "gauge",
	    "Seconds since the router started.");
	sb_printf(&b, "medha_uptime_seconds %.3f\n", m->uptime);
	/* the requests' figures carry the model, as vLLM's do */
	snprintf(ml, sizeof(ml), "model_name=\"%s\"",
	    label(m->model, lb, sizeof(lb)));
	head(&b, "medha_requests_total", "counter",
	    "Requests that ended, by the status of their record (every "
	    "client of the router).");
	for (int i = 0; i < MEDHA_STATUS_COUNT; i++)
		sb_printf(&b, "medha_requests_total{%s,status=\"%s\"} %lld\n",
		    ml, medha_status_name(i), (long long)m->requests[i]);
	head(&b, "medha_requests_finished_total", "counter",
	    "Completed requests by finish reason: stop (end of generation "
	    "or a stop string) or length (max_tokens).");
	for (int i = 1; i < MEDHA_FINISH_COUNT; i++)
		sb_printf(&b,
		    "medha_requests_finished_total{%s,finish_reason=\"%s\"} "
		    "%lld\n",
		    ml, medha_finish_name(i), (long long)m->finished[i]);
	head(&b, "medha_requests_refused_total", "counter",
	    "Requests the router refused at once (overloaded, no replica "
	    "ready, stopping).");
	sb_printf(&b, "medha_requests_refused_total{%s} %lld\n", ml,
	    (long long)m->refused);
	head(&b, "medha_prompt_tokens_total", "counter",
	    "Prompt tokens of the requests that ended.");
	sb_printf(&b, "medha_prompt_tokens_total{%s} %lld\n", ml,
	    (long long)m->prompt_tokens);
	head(&b, "medha_generation_tokens_total", "counter",
	    "Tokens generated for the requests that ended.");
	sb_printf(&b, "medha_generation_tokens_total{%s} %lld\n", ml,
	    (long long)m->generation_tokens);
	kv_metrics(&b, m, ml);
	progress_metrics(&b, m, ml);
	expert_metrics(&b, m, ml);
	hist(&b, "medha_time_to_first_token_seconds",
	    "Time to first token of each completed request, on the "
	    "router's clock.",
	    &m->ttft, medha_router_ttft_le, ml);
	hist(&b, "medha_time_per_output_token_seconds",
	    "Mean time per output token of each completed request of two "
	    "tokens or more.",
	    &m->tpot, medha_router_tpot_le, ml);
	hist(&b, "medha_request_queue_time_seconds",
	    "Time from arrival (at the router) to the request's first batch, "
	    "of each request that had one.",
	    &m->queue, medha_router_ttft_le, ml);
	hist(&b, "medha_e2e_request_latency_seconds",
	    "End-to-end latency (arrival to last token) of each completed "
	    "request, on its replica's clock.",
	    &m->e2e, medha_router_e2e_le, ml);
	{
		int64_t q = 0, run = 0;
		for (int i = 0; i < m->nreplicas; i++)
			if (m->rep[i].up) {
				q += m->rep[i].queue;
				run += m->rep[i].pending - m->rep[i].queue;
			}
		head(&b, "medha_requests_in_flight", "gauge",
		    "Requests accepted by the router that have not ended.");
		sb_printf(&b, "medha_requests_in_flight %lld\n",
		    (long long)m->in_flight);
		head(&b, "medha_requests_held", "gauge",
		    "Of those, waiting at the router for a ready replica.");
		sb_printf(&b, "medha_requests_held %lld\n",
		    (long long)m->held);
		head(&b, "medha_requests_queued", "gauge",
		    "Requests the replicas hold that wait for their first "
		    "batch.");
		sb_printf(&b, "medha_requests_queued %lld\n", (long long)q);
		head(&b, "medha_requests_running", "gauge",
		    "Requests the replicas hold that have had a batch.");
		sb_printf(&b, "medha_requests_running %lld\n", (long long)run);
	}
	static const struct {
		const char *name, *type, *help;
	} per[] = {
	    {"medha_replica_up", "gauge",
	        "1 while the replica answers (within 3 s)."},
	    {"medha_replica_ready", "gauge",
	        "1 while the replica answers and has all its workers."},
	    {"medha_replica_workers", "gauge",
	        "Workers connected to the replica (fewer than wanted: "
	        "degraded)."},
	    {"medha_replica_workers_wanted", "gauge",
	        "Workers the replica is made of."},
	    {"medha_replica_requests", "gauge",
	        "Requests in flight on the replica (its STATUS)."},
	    {"medha_replica_requests_queued", "gauge",
	        "Of those, waiting for their first batch."},
	    {"medha_kv_blocks", "gauge", "KV blocks of the replica."},
	    {"medha_kv_blocks_used", "gauge",
	        "KV blocks of the replica held by requests (cached blocks "
	        "they share counted once)."},
	    {"medha_kv_block_tokens", "gauge", "Tokens per KV block."},
	};
	for (size_t k = 0; k < sizeof(per) / sizeof(per[0]); k++) {
		head(&b, per[k].name, per[k].type, per[k].help);
		for (int i = 0; i < m->nreplicas; i++) {
			const struct medha_router_replica_stat *r = &m->rep[i];
			int64_t v[] = {r->up, r->ready, r->workers,
			    r->workers_wanted, r->pending, r->queue,
			    r->kv_blocks, r->kv_used, r->block_size};
			sb_printf(&b, "%s{replica=\"%s\"} %lld\n", per[k].name,
			    label(r->url, lb, sizeof(lb)), (long long)v[k]);
		}
	}
out:
	if (b.err) {
		free(b.p);
		return NULL;
	}
	*len = b.n;
	return b.p;
}
