/*
 * parse.c: the OpenAI request bodies of the HTTP front door (http.h):
 * /v1/completions and /v1/chat/completions into a struct medha_reqspec
 * with OpenAI's defaults and refusals. A request field that medha does
 * not implement (n > 1, best_of > 1, echo, suffix, logit_bias, tools)
 * is refused with 400 rather than ignored, and so is a field
 * OpenAI does not define; the fields that change nothing (user,
 * metadata, store, ...) are accepted. No sockets here; tests/http_test.c
 * checks it alone.
 */
#include "serve/http/http.h"
#include "hmac.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *
jtype(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	default: return "null";
	}
}

#define BAD(e, param, ...)                                                    \
	medha_oai_error_set((e), 400, "invalid_request_error", NULL, (param), \
	    __VA_ARGS__)
#define UNSUP(e, param, ...)                                                  \
	medha_oai_error_set((e), 400, "invalid_request_error", "unsupported", \
	    (param), __VA_ARGS__)

/* A number in [lo, hi] at key, or null/absent (then *out is kept). */
static int
get_num(json_t *o, const char *key, double lo, double hi, double *out,
    struct medha_oai_error *e)
{
	json_t *v = json_object_get(o, key);

	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return BAD(e, key, "%s: expected a number, got %s", key,
		    jtype(v));
	double d = json_number_value(v);
	if (!(d >= lo && d <= hi))
		return BAD(e, key, "%s: %g is not in [%g, %g]", key, d, lo, hi);
	*out = d;
	return 0;
}

/* An integer in [lo, hi] at key, or null/absent (*set says which). */
static int
get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
    int *set, struct medha_oai_error *e)
{
	json_t *v = json_object_get(o, key);

	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_integer(v))
		return BAD(e, key, "%s: expected an integer, got %s", key,
		    jtype(v));
	json_int_t n = json_integer_value(v);
	if (n < lo || n > hi)
		return BAD(e, key, "%s: %lld is not in [%lld, %lld]", key,
		    (long long)n, (long long)lo, (long long)hi);
	*out = n;
	if (set != NULL)
		*set = 1;
	return 0;
}

static int
get_bool(json_t *o, const char *key, int *out, struct medha_oai_error *e)
{
	json_t *v = json_object_get(o, key);

	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return BAD(e, key, "%s: expected a boolean, got %s", key,
		    jtype(v));
	*out = json_is_true(v);
	return 0;
}

/* A string without NUL bytes, as a new C string. */
static int
dup_text(json_t *v, const char *param, char **out, struct medha_oai_error *e)
{
	size_t n = json_string_length(v);
	const char *s = json_string_value(v);

	if (memchr(s, '\0', n) != NULL)
		return BAD(e, param, "%s: a NUL character is not allowed",
		    param);
	if ((*out = strdup(s)) == NULL)
		return medha_oai_error_set(e, 500, "server_error", NULL, NULL,
		    "out of memory");
	return 0;
}

/* vLLM's stop_token_ids: ids that end the output as EOS does. */
static int
parse_stop_ids(json_t *o, struct medha_reqspec *rs, struct medha_oai_error *e)
{
	json_t *v = json_object_get(o, "stop_token_ids");
	size_t n;

	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_array(v))
		return BAD(e, "stop_token_ids",
		    "stop_token_ids: expected an array of token ids, got %s",
		    jtype(v));
	if ((n = json_array_size(v)) > MEDHA_STOP_IDS_MAX)
		return BAD(e, "stop_token_ids",
		    "stop_token_ids: at most %d ids, got %zu",
		    MEDHA_STOP_IDS_MAX, n);
	for (size_t i = 0; i < n; i++) {
		json_t *t = json_array_get(v, i);
		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) > INT32_MAX)
			return BAD(e, "stop_token_ids",
			    "stop_token_ids[%zu]: not a token id (an integer "
			    "in [0, 2147483647])",
			    i);
		rs->stop_ids[i] = (int32_t)json_integer_value(t);
	}
	rs->n_stop_ids = (int)n;
	return 0;
}

static int
parse_stop(json_t *o, struct medha_reqspec *rs, struct medha_oai_error *e)
{
	json_t *v = json_object_get(o, "stop"), *one[1], **list = one;
	size_t n = 1;

	if (v == NULL || json_is_null(v))
		return 0;
	if (json_is_string(v))
		one[0] = v;
	else if (json_is_array(v)) {
		n = json_array_size(v);
		if (n > MEDHA_STOP_MAX)
			return BAD(e, "stop",
			    "stop: at most %d strings, got %zu", MEDHA_STOP_MAX,
			    n);
		list = NULL;
	} else
		return BAD(e, "stop",
		    "stop: expected a string or an array of strings, got %s",
		    jtype(v));
	for (size_t i = 0; i < n; i++) {
		json_t *s = list != NULL ? list[i] : json_array_get(v, i);
		int rc;
		if (!json_is_string(s))
			return BAD(e, "stop",
			    "stop[%zu]: expected a string, got %s", i,
			    jtype(s));
		if (json_string_length(s) == 0)
			continue; /* matches nothing */
		if (json_string_length(s) > MEDHA_STOP_LEN)
			return BAD(e, "stop", "stop[%zu]: longer than %d bytes",
			    i, MEDHA_STOP_LEN);
		if ((rc = dup_text(s, "stop", &rs->stop[rs->n_stop], e)) != 0)
			return rc;
		rs->n_stop++;
	}
	return 0;
}

/* A prompt's token ids: an array of integers in [0, INT32_MAX]; what
 * names it in a message ("prompt", "prompt[2]"). */
static int
prompt_ids(json_t *v, const char *what, int32_t **ids, int64_t *nids,
    struct medha_oai_error *e)
{
	size_t n = json_array_size(v);

	if (n == 0)
		return BAD(e, "prompt", "%s: empty", what);
	if ((*ids = medha_reallocarray(NULL, n, sizeof(**ids))) == NULL)
		return medha_oai_error_set(e, 500, "server_error", NULL, NULL,
		    "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *t = json_array_get(v, i);
		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) > INT32_MAX)
			return BAD(e, "prompt",
			    "%s[%zu]: not a token id (an integer in [0, "
			    "2147483647])",
			    what, i);
		(*ids)[i] = (int32_t)json_integer_value(t);
	}
	*nids = (int64_t)n;
	return 0;
}

/*
 * The prompt of /v1/completions: a string or token ids, or a list of
 * them (strings, or arrays of token ids), each prompt n choices.
 */
static int
parse_prompt(json_t *o, struct medha_oai_req *q, struct medha_oai_error *e)
{
	struct medha_reqspec *rs = &q->spec;
	json_t *v = json_object_get(o, "prompt");
	size_t n;
	int n1 = q->n > 1 ? q->n : 1, rc;

	if (v == NULL || json_is_null(v))
		return BAD(e, "prompt", "prompt: required");
	if (json_is_array(v) && json_array_size(v) == 1 &&
	    json_is_string(json_array_get(v, 0)))
		v = json_array_get(v, 0); /* a list of one text */
	if (json_is_string(v))
		return dup_text(v, "prompt", &rs->prompt, e);
	if (!json_is_array(v))
		return BAD(e, "prompt",
		    "prompt: expected a string, an array of token ids or a "
		    "list of either, got %s",
		    jtype(v));
	if ((n = json_array_size(v)) == 0)
		return BAD(e, "prompt", "prompt: empty");
	if (json_is_integer(json_array_get(v, 0)))
		return prompt_ids(v, "prompt", &rs->prompt_ids,
		    &rs->prompt_tokens, e);
	if (n > (size_t)(MEDHA_OAI_MAX_CHOICES / n1))
		return BAD(e, "prompt",
		    "prompt: %zu prompts of %d choices each, at most %d "
		    "choices in all",
		    n, n1, MEDHA_OAI_MAX_CHOICES);
	if ((q->prompts = medha_calloc(n, sizeof(*q->prompts))) == NULL)
		return medha_oai_error_set(e, 500, "server_error", NULL, NULL,
		    "out of memory");
	q->n_prompts = (int)n;
	for (size_t i = 0; i < n; i++) {
		json_t *x = json_array_get(v, i);
		char what[32];
		snprintf(what, sizeof(what), "prompt[%zu]", i);
		if (json_is_string(x))
			rc = dup_text(x, "prompt", &q->prompts[i].text, e);
		else if (json_is_array(x))
			rc = prompt_ids(x, what, &q->prompts[i].ids,
			    &q->prompts[i].n_ids, e);
		else
			rc = BAD(e, "prompt",
			    "%s: expected a string or an array of token ids, "
			    "got %s",
			    what, jtype(x));
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* A message's content: a string or an array of {"type": "text"} parts. */
static int
content_text(json_t *c, size_t i, char **out, struct medha_oai_error *e)
{
	size_t n, len = 0;
	char *s;

	/* OpenAI takes none only beside tool_calls, which medha refuses */
	if (c == NULL || json_is_null(c))
		return BAD(e, "messages", "messages[%zu].content: required", i);
	if (json_is_string(c))
		return dup_text(c, "messages", out, e);
	if (!json_is_array(c))
		return BAD(e, "messages",
		    "messages[%zu].content: expected a string or an array of "
		    "text parts, got %s",
		    i, jtype(c));
	n = json_array_size(c);
	for (size_t k = 0; k < n; k++) {
		json_t *p = json_array_get(c, k), *t;
		const char *ty;
		if (!json_is_object(p) ||
		    !json_is_string(json_object_get(p, "type")))
			return BAD(e, "messages",
			    "messages[%zu].content[%zu]: expected an object "
			    "with a type",
			    i, k);
		ty = json_string_value(json_object_get(p, "type"));
		if (strcmp(ty, "text") != 0)
			return UNSUP(e, "messages",
			    "messages[%zu].content[%zu]: parts of type %.40s "
			    "are not supported (only text)",
			    i, k, ty);
		t = json_object_get(p, "text");
		if (!json_is_string(t))
			return BAD(e, "messages",
			    "messages[%zu].content[%zu].text: expected a "
			    "string",
			    i, k);
		if (memchr(json_string_value(t), '\0', json_string_length(t)))
			return BAD(e, "messages",
			    "messages: a NUL character is not allowed");
		len += json_string_length(t) + 1;
	}
	if ((s = malloc(len + 1)) == NULL)
		goto done;
	len = 0;
	for (size_t k = 0; k < n; k++) { /* parts joined by newlines */
		json_t *t = json_object_get(json_array_get(c, k), "text");
		if (k > 0)
			s[len++] = '\n';
		memcpy(s + len, json_string_value(t), json_string_length(t));
		len += json_string_length(t);
	}
	s[len] = '\0';
	*out = s;
done:
	if (*out == NULL)
		return medha_oai_error_set(e, 500, "server_error", NULL, NULL,
		    "out of memory");
	return 0;
}

static int
parse_messages(json_t *o, const struct medha_tok *tok, struct medha_reqspec *rs,
    struct medha_oai_error *e)
{
	json_t *v = json_object_get(o, "messages");
	struct medha_tok_msg *msgs;
	char **texts;
	size_t n;
	int rc = 0;

	if (v == NULL || json_is_null(v))
		return BAD(e, "messages", "messages: required");
	if (!json_is_array(v))
		return BAD(e, "messages", "messages: expected an array, got %s",
		    jtype(v));
	if ((n = json_array_size(v)) == 0)
		return BAD(e, "messages", "messages: empty");
	if (tok == NULL)
		return medha_oai_error_set(e, 400, "invalid_request_error",
		    "chat_template_missing", NULL,
		    "chat completions need the model's chat template: start "
		    "medha-router with -m MODEL, or use /v1/completions");
	msgs = medha_calloc(n, sizeof(*msgs));
	texts = medha_calloc(n, sizeof(*texts));
	if (msgs == NULL || texts == NULL) {
		rc = medha_oai_error_set(e, 500, "server_error", NULL, NULL,
		    "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		json_t *m = json_array_get(v, i), *role;
		const char *r;
		if (!json_is_object(m)) {
			rc = BAD(e, "messages",
			    "messages[%zu]: expected an object, got %s", i,
			    jtype(m));
			break;
		}
		role = json_object_get(m, "role");
		if (!json_is_string(role)) {
			rc = BAD(e, "messages",
			    "messages[%zu].role: expected a string", i);
			break;
		}
		r = json_string_value(role);
		if (strcmp(r, "developer") == 0)
			r = "system";
		if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 &&
		    strcmp(r, "assistant") != 0) {
			rc = UNSUP(e, "messages",
			    "messages[%zu].role: %.40s is not supported "
			    "(system, developer, user, assistant)",
			    i, json_string_value(role));
			break;
		}
		if (json_object_get(m, "tool_calls") != NULL &&
		    !json_is_null(json_object_get(m, "tool_calls"))) {
			rc = UNSUP(e, "messages",
			    "messages[%zu].tool_calls: tools are not supported",
			    i);
			break;
		}
		msgs[i].role = r;
		rc = content_text(json_object_get(m, "content"), i, &texts[i],
		    e);
		msgs[i].content = texts[i];
	}
	if (rc == 0) {
		int t = medha_tok_chat_msgs(tok, msgs, n, 1, &rs->prompt, NULL);
		if (t == MEDHA_EUNSUP)
			rc =
			    medha_oai_error_set(e, 400, "invalid_request_error",
			        "chat_template_missing", NULL,
			        "the model's chat template is not one medha "
			        "can render (Jinja it cannot read, and neither "
			        "ChatML nor Llama-3)");
		else if (t == MEDHA_EINVAL)
			rc = medha_oai_error_set(e, 400, "invalid_request_error",
			    NULL, "messages",
			    "the model's chat template refused these messages "
			    "(roles that do not alternate, or a role it does "
			    "not take)");
		else if (t != 0)
			rc = medha_oai_error_set(e, 500, "server_error", NULL,
			    NULL, "chat template: %s", medha_strerror(t));
	}
out:
	for (size_t i = 0; texts != NULL && i < n; i++)
		free(texts[i]);
	free(texts);
	free(msgs);
	return rc;
}

/* Fields that are accepted when they ask for nothing medha lacks. */
static int
unsupported(json_t *o, int chat, struct medha_oai_req *q,
    struct medha_oai_error *e)
{
	json_t *v;
	int64_t n = 1;
	int b = 0;

	/* n choices: n requests upstream with one prompt, whose KV the
	 * prefix cache computes once */
	if (get_int(o, "n", 1, MEDHA_OAI_MAX_N, &n, NULL, e) != 0)
		return e->status;
	q->n = (int)n;
	n = 1;
	if (get_int(o, "best_of", 1, INT32_MAX, &n, NULL, e) != 0)
		return e->status;
	if (n != 1)
		return UNSUP(e, "best_of", "best_of: only 1 is supported");
	if (get_bool(o, "echo", &b, e) != 0)
		return e->status;
	if (b)
		return UNSUP(e, "echo", "echo: not supported");
	v = json_object_get(o, "suffix");
	if (v != NULL && !json_is_null(v) &&
	    !(json_is_string(v) && json_string_length(v) == 0))
		return UNSUP(e, "suffix", "suffix: not supported");
	v = json_object_get(o, "logit_bias");
	if (v != NULL && !json_is_null(v) &&
	    !(json_is_object(v) && json_object_size(v) == 0))
		return UNSUP(e, "logit_bias", "logit_bias: not supported");
	v = json_object_get(o, "tools");
	if (v != NULL && !json_is_null(v) &&
	    !(json_is_array(v) && json_array_size(v) == 0))
		return UNSUP(e, "tools", "tools: not supported");
	v = json_object_get(o, "response_format");
	if (v != NULL && !json_is_null(v) &&
	    !(json_is_object(v) && json_is_string(json_object_get(v, "type")) &&
	        strcmp(json_string_value(json_object_get(v, "type")), "text") ==
	            0))
		return UNSUP(e, "response_format",
		    "response_format: only {\"type\": \"text\"} is supported");
	(void)chat;
	return 0;
}

/*
 * Log-probabilities: completions' "logprobs", an integer (the top ones
 * beside the chosen token's, 0 to 20; OpenAI's limit is 5, vLLM's 20);
 * chat's "logprobs", a boolean, and "top_logprobs", 0 to 20 with it.
 */
static int
parse_logprobs(json_t *o, int chat, struct medha_sampler_params *sp,
    struct medha_oai_error *e)
{
	int64_t top = 0;
	int on = 0, tset = 0;

	if (!chat) {
		if (get_int(o, "logprobs", 0, MEDHA_TOP_LOGPROBS_MAX, &top,
		        &tset, e) != 0)
			return e->status;
		sp->logprobs = tset;
		sp->top_logprobs = (int)top;
		return 0;
	}
	if (get_bool(o, "logprobs", &on, e) != 0 ||
	    get_int(o, "top_logprobs", 0, MEDHA_TOP_LOGPROBS_MAX, &top, &tset,
	        e) != 0)
		return e->status;
	if (tset && top > 0 && !on)
		return BAD(e, "top_logprobs",
		    "top_logprobs: needs \"logprobs\": true");
	sp->logprobs = on;
	sp->top_logprobs = on ? (int)top : 0;
	return 0;
}

/* OpenAI's presence and frequency penalties, vLLM's repetition penalty
 * (> 0; 1 is none) and min_p (model/sample.h). */
static int
sampling_extras(json_t *o, struct medha_sampler_params *sp,
    struct medha_oai_error *e)
{
	double pres = 0, freq = 0, rep = 1, min_p = 0;

	if (get_num(o, "presence_penalty", -2, 2, &pres, e) != 0 ||
	    get_num(o, "frequency_penalty", -2, 2, &freq, e) != 0 ||
	    get_num(o, "repetition_penalty", 0, 100, &rep, e) != 0 ||
	    get_num(o, "min_p", 0, 1, &min_p, e) != 0)
		return e->status;
	if (rep == 0)
		return BAD(e, "repetition_penalty",
		    "repetition_penalty: must be > 0 (1 is none)");
	sp->presence_penalty = (float)pres;
	sp->frequency_penalty = (float)freq;
	sp->repetition_penalty = rep == 1 ? 0 : (float)rep;
	sp->min_p = (float)min_p;
	return 0;
}

/*
 * A seed past INT64_MAX, up to 2^64 - 1 (OpenAI's seed is any integer;
 * vLLM's reach 2^63 - 1): jansson holds integers as long long and calls
 * a larger one bad JSON. The body's top-level "seed" is found here;
 * when its digits are such a number they are read into *seed (*big set)
 * and blanked to "0" in *copy (malloc'd, the caller's: the body to give
 * jansson; NULL when the body needs no change). 0, or 400 for a seed
 * past 2^64 - 1 (e set).
 */
static int
big_seed(const char *b, size_t len, char **copy, uint64_t *seed, int *big,
    struct medha_oai_error *e)
{
	int depth = 0;
	size_t i = 0;

	*copy = NULL;
	*big = 0;
	while (i < len) {
		char c = b[i];
		if (c == '"') {
			size_t at = ++i, j;
			while (i < len && b[i] != '"')
				i += b[i] == '\\' ? 2 : 1;
			if (i >= len)
				return 0; /* jansson says why */
			j = ++i;
			while (j < len && strchr(" \t\r\n", b[j]) != NULL)
				j++;
			if (depth != 1 || j >= len || b[j] != ':' ||
			    i - at - 1 != 4 || memcmp(b + at, "seed", 4) != 0)
				continue;
			j++;
			while (j < len && strchr(" \t\r\n", b[j]) != NULL)
				j++;
			size_t d0 = j;
			while (j < len && b[j] >= '0' && b[j] <= '9')
				j++;
			if (j - d0 < 19 || (j < len && strchr(".eE", b[j])) ||
			    b[d0] == '0')
				continue; /* jansson's, or not a number */
			char digits[32];
			if (j - d0 < sizeof(digits)) {
				memcpy(digits, b + d0, j - d0);
				digits[j - d0] = '\0';
			}
			errno = 0;
			unsigned long long v = j - d0 < sizeof(digits)
			    ? strtoull(digits, NULL, 10) : 0;
			if (j - d0 >= sizeof(digits) || errno == ERANGE)
				return BAD(e, "seed",
				    "seed: at most 18446744073709551615");
			if (v <= INT64_MAX)
				continue;
			if ((*copy = malloc(len)) == NULL)
				return medha_oai_error_set(e, 500,
				    "server_error", NULL, NULL,
				    "out of memory");
			memcpy(*copy, b, len);
			memset(*copy + d0, ' ', j - d0);
			(*copy)[d0] = '0';
			*seed = v;
			*big = 1;
			return 0;
		}
		depth += c == '{' || c == '[';
		depth -= c == '}' || c == ']';
		i++;
	}
	return 0;
}

/* vLLM's cache_salt: a non-empty string, as medha_oai_salt() */
static int
parse_cache_salt(json_t *o, struct medha_reqspec *rs,
    struct medha_oai_error *e)
{
	json_t *v = json_object_get(o, "cache_salt");

	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_string(v) || json_string_length(v) == 0)
		return BAD(e, "cache_salt", /* vLLM's words */
		    "Parameter 'cache_salt' must be a non-empty string if "
		    "provided.");
	if (medha_oai_salt(json_string_value(v), json_string_length(v),
	        &rs->cache_salt) != 0)
		return medha_oai_error_set(e, 500, "server_error", NULL, NULL,
		    "out of memory");
	return 0;
}

static const char *const known_completion[] = {"model", "prompt", "max_tokens",
    "temperature", "top_p", "seed", "stop", "stream", "stream_options", "top_k",
    "ignore_eos", "n", "best_of", "echo", "logprobs", "suffix",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_p",
    "logit_bias", "user", "stop_token_ids", "min_tokens", "cache_salt",
    NULL};
static const char *const known_chat[] = {"model", "messages", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "seed", "stop", "stream",
    "stream_options", "top_k", "ignore_eos", "n", "logprobs", "top_logprobs",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_p",
    "logit_bias", "user", "stop_token_ids", "min_tokens", "tools",
    "tool_choice", "parallel_tool_calls", "response_format", "metadata",
    "store", "service_tier", "cache_salt", NULL};

int
medha_oai_parse(struct medha_oai_req *q, const char *body, size_t len, int chat,
    const struct medha_tok *tok, struct medha_oai_error *e)
{
	struct medha_reqspec *rs = &q->spec;
	json_error_t jerr;
	json_t *o, *v;
	const char *key;
	char *copy;
	uint64_t seed = 0;
	double d;
	int64_t n;
	int rc, big;

	memset(q, 0, sizeof(*q));
	q->chat = chat;
	if ((rc = big_seed(body, len, &copy, &seed, &big, e)) != 0)
		return rc;
	/* a key given twice is refused, as the wire protocol and traces
	   do: with the last taken, "max_tokens": 2, "max_tokens": 1000000
	   ran as a million where a proxy checked the first */
	o = json_loadb(copy != NULL ? copy : body, len,
	    JSON_REJECT_DUPLICATES, &jerr);
	free(copy);
	if (o == NULL)
		return BAD(e, NULL,
		    "We could not parse the JSON body of your request: %s "
		    "(at byte %d)",
		    jerr.text, jerr.position);
	if (!json_is_object(o)) {
		rc = BAD(e, NULL,
		    "the request body must be a JSON object, not %s", jtype(o));
		goto fail;
	}
	json_object_foreach(o, key, v)
	{
		const char *const *k = chat ? known_chat : known_completion;
		while (*k != NULL && strcmp(*k, key) != 0)
			k++;
		if (*k == NULL) {
			rc = BAD(e, NULL,
			    "Unrecognized request argument supplied: %.64s",
			    key);
			goto fail;
		}
	}
	v = json_object_get(o, "model");
	if (v != NULL && !json_is_null(v)) {
		if (!json_is_string(v)) {
			rc = BAD(e, "model", "model: expected a string, got %s",
			    jtype(v));
			goto fail;
		}
		snprintf(q->model, sizeof(q->model), "%s",
		    json_string_value(v));
	}
	if ((rc = unsupported(o, chat, q, e)) != 0)
		goto fail;
	rs->sampling.temp = 1; /* OpenAI's defaults */
	rs->sampling.top_p = 1;
	rs->max_tokens = chat ? 0 : 16;
	q->max_tokens_set = !chat;
	{
		int set = 0;
		/* at least 1, as vLLM: 0 would still run a prefill whose
		 * token is no output (the wire's max_tokens 0) */
		if ((rc = get_int(o, "max_tokens", 1, MEDHA_OAI_MAX_TOKENS,
		         &rs->max_tokens, &set, e)) != 0)
			goto fail;
		if (chat &&
		    (rc = get_int(o, "max_completion_tokens", 1,
		         MEDHA_OAI_MAX_TOKENS, &rs->max_tokens, &set, e)) != 0)
			goto fail;
		q->max_tokens_set |= set;
	}
	/* vLLM's min_tokens (model/sample.h), at most max_tokens where it
	 * is given (else once it is known: prompt.c) */
	if ((rc = get_int(o, "min_tokens", 0, MEDHA_OAI_MAX_TOKENS,
	         &rs->sampling.min_tokens, NULL, e)) != 0)
		goto fail;
	if (q->max_tokens_set &&
	    (rc = medha_oai_min_tokens_check(rs, e)) != 0)
		goto fail;
	d = rs->sampling.temp;
	if ((rc = get_num(o, "temperature", 0, MEDHA_TEMP_MAX, &d, e)) != 0)
		goto fail;
	rs->sampling.temp = (float)d;
	d = rs->sampling.top_p;
	/* 0 keeps the most likely token, as everywhere (sample.c) */
	if ((rc = get_num(o, "top_p", 0, 1, &d, e)) != 0)
		goto fail;
	rs->sampling.top_p = (float)d;
	n = 0;
	if ((rc = get_int(o, "top_k", -1, MEDHA_PROTO_TOPK_MAX, &n, NULL, e)) !=
	    0)
		goto fail;
	rs->sampling.top_k = n < 0 ? 0 : (int)n; /* -1: all, as vLLM */
	if ((rc = sampling_extras(o, &rs->sampling, e)) != 0 ||
	    (rc = parse_logprobs(o, chat, &rs->sampling, e)) != 0)
		goto fail;
	v = json_object_get(o, "seed");
	if (v != NULL && !json_is_null(v)) {
		if (!json_is_integer(v)) {
			rc = BAD(e, "seed", "seed: expected an integer, got %s",
			    jtype(v));
			goto fail;
		}
		rs->sampling.seed = big ? seed
		                        : (uint64_t)json_integer_value(v);
		q->seed_set = 1;
	}
	if ((rc = get_bool(o, "ignore_eos", &rs->ignore_eos, e)) != 0 ||
	    (rc = get_bool(o, "stream", &q->stream, e)) != 0)
		goto fail;
	v = json_object_get(o, "stream_options");
	if (v != NULL && !json_is_null(v)) {
		if (!json_is_object(v)) {
			rc = BAD(e, "stream_options",
			    "stream_options: expected an object, got %s",
			    jtype(v));
			goto fail;
		}
		if (!q->stream) {
			rc = BAD(e, "stream_options",
			    "stream_options: only allowed when stream is "
			    "true");
			goto fail;
		}
		if ((rc = get_bool(v, "include_usage", &q->include_usage, e)) !=
		    0)
			goto fail;
	}
	if ((rc = parse_stop(o, rs, e)) != 0 ||
	    (rc = parse_stop_ids(o, rs, e)) != 0 ||
	    (rc = parse_cache_salt(o, rs, e)) != 0)
		goto fail;
	rc = chat ? parse_messages(o, tok, rs, e) : parse_prompt(o, q, e);
	if (rc != 0)
		goto fail;
	json_decref(o);
	return 0;
fail:
	json_decref(o);
	medha_oai_req_clear(q);
	return rc;
}

/* *out: the first 8 bytes of SHA-256(label, NUL, the n bytes at p),
 * never 0. 0 or MEDHA_ENOMEM. */
static int
salt_hash(const char *label, const void *p, size_t n, uint64_t *out)
{
	struct medha_sha256 *h = NULL;
	uint8_t d[MEDHA_SHA256_LEN];
	int rc;

	*out = 0;
	if ((rc = medha_sha256_new(&h)) != 0)
		return rc;
	if ((rc = medha_sha256_add(h, label, strlen(label) + 1)) != 0 ||
	    (rc = medha_sha256_add(h, p, n)) != 0) {
		(void)medha_sha256_end(h, NULL);
		return rc;
	}
	if ((rc = medha_sha256_end(h, d)) != 0)
		return rc;
	for (int i = 0; i < 8; i++)
		*out = *out << 8 | d[i];
	*out += *out == 0;
	return 0;
}

int
medha_oai_salt(const char *s, size_t n, uint64_t *out)
{
	return salt_hash("medha cache_salt", s, n, out);
}

int
medha_oai_key_tenant(const char *key, size_t n, uint64_t *out)
{
	return salt_hash("medha api key tenant", key, n, out);
}

int
medha_oai_salt_tenant(uint64_t tenant, uint64_t salt, uint64_t *out)
{
	uint8_t b[16];

	*out = salt;
	if (tenant == 0)
		return 0;
	for (int i = 0; i < 8; i++) {
		b[i] = (uint8_t)(tenant >> (56 - 8 * i));
		b[8 + i] = (uint8_t)(salt >> (56 - 8 * i));
	}
	return salt_hash("medha tenant salt", b, sizeof(b), out);
}

int
medha_oai_min_tokens_check(const struct medha_reqspec *rs,
    struct medha_oai_error *e)
{
	if (rs->sampling.min_tokens <= rs->max_tokens)
		return 0;
	return BAD(e, "min_tokens",
	    "min_tokens must be less than or equal to max_tokens=%lld, got "
	    "%lld",
	    (long long)rs->max_tokens, (long long)rs->sampling.min_tokens);
}

void
medha_oai_req_clear(struct medha_oai_req *q)
{
	for (int i = 0; i < q->n_prompts; i++) {
		free(q->prompts[i].text);
		free(q->prompts[i].ids);
	}
	free(q->prompts);
	medha_reqspec_clear(&q->spec);
	memset(q, 0, sizeof(*q));
}
