/*
 * trace.c: the JSON Lines formats of traces and result records
 * (jansson): a request read (medha_reqspec_parse) and written, a record
 * read and written, and the field helpers they share. The trace reader,
 * which tells JSON Lines from the Azure and Vidur CSVs, is trace_read.c.
 * Lines come and go through lineio.c, which hides zstd.
 * man/medha-trace.5 is the normative description of every format here.
 */
#include "io/trace.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

/* ---- JSON fields ---- */

/*
 * What v is, for messages: its value if a number (an integer exactly),
 * else its type.
 */
static const char *
json_what(json_t *v, char *buf, size_t len)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "null";
	case JSON_INTEGER:
		snprintf(buf, len, "%lld", (long long)json_integer_value(v));
		return buf;
	default: snprintf(buf, len, "%.9g", json_number_value(v)); return buf;
	}
}

/*
 * A time in seconds: a JSON number >= 0 (positive: > 0) and <= max
 * (MEDHA_TIME_MAX for what a trace asks; HUGE_VAL, any finite number, for
 * what a record says happened). An absent optional key leaves *out
 * alone. Returns 0 or MEDHA_EFORMAT, the reason naming the range.
 */
static int
json_time(json_t *o, const char *key, int required, int positive, double max,
    double *out, char *why, size_t whylen)
{
	json_t *v = json_object_get(o, key);
	const char *what;
	char buf[32];
	double d;

	if (v == NULL)
		return required
		    ? medha_why(why, whylen, MEDHA_EFORMAT, "%s: missing", key)
		    : 0;
	d = json_number_value(v);
	if (json_is_number(v) && isfinite(d) && d <= max &&
	    (positive ? d > 0 : d >= 0)) {
		*out = d;
		return 0;
	}
	what = json_what(v, buf, sizeof(buf));
	if (isfinite(max))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "%s: not a number in %c0, %.15g] (got %s)", key,
		    positive ? '(' : '[', max, what);
	return medha_why(why, whylen, MEDHA_EFORMAT,
	    "%s: not a %s number (got %s)", key,
	    positive ? "positive" : "non-negative", what);
}

/*
 * v, named name in messages, as an integer: a JSON integer (or a real
 * with no fraction, up to 2^53) in [min, max]. Returns 0 or
 * MEDHA_EFORMAT, the reason naming the value and the range.
 */
static int
json_int(json_t *v, const char *name, int64_t min, int64_t max, int64_t *out,
    char *why, size_t whylen)
{
	char buf[32];
	double d;

	if (json_is_integer(v) && json_integer_value(v) >= min &&
	    json_integer_value(v) <= max) {
		*out = json_integer_value(v);
		return 0;
	}
	d = json_real_value(v);
	if (json_is_real(v) && d >= (double)min && d <= (double)max &&
	    d <= 9007199254740992.0 && d == floor(d)) {
		*out = (int64_t)d;
		return 0;
	}
	return medha_why(why, whylen, MEDHA_EFORMAT,
	    "%s: not an integer in [%lld, %lld] (got %s)", name, (long long)min,
	    (long long)max, json_what(v, buf, sizeof(buf)));
}

/*
 * A count: json_int() of key's value. An absent optional key leaves *out
 * alone.
 */
static int
json_count(json_t *o, const char *key, int required, int64_t min, int64_t max,
    int64_t *out, char *why, size_t whylen)
{
	json_t *v = json_object_get(o, key);

	if (v == NULL)
		return required
		    ? medha_why(why, whylen, MEDHA_EFORMAT, "%s: missing", key)
		    : 0;
	return json_int(v, key, min, max, out, why, whylen);
}

/* "id": a string of 1 to MEDHA_ID_MAX - 1 bytes or an integer >= 0. */
static int
json_id(json_t *o, int required, char *id, char *why, size_t whylen)
{
	json_t *v = json_object_get(o, "id");
	char buf[32];
	size_t n;

	id[0] = '\0';
	if (v == NULL)
		return required
		    ? medha_why(why, whylen, MEDHA_EFORMAT, "id: missing")
		    : 0;
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		snprintf(id, MEDHA_ID_MAX, "%lld",
		    (long long)json_integer_value(v));
		return 0;
	}
	if (!json_is_string(v))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "id: not a string or non-negative integer (got %s)",
		    json_what(v, buf, sizeof(buf)));
	n = json_string_length(v);
	if (n == 0)
		return medha_why(why, whylen, MEDHA_EFORMAT, "id: empty");
	if (n > MEDHA_ID_MAX - 1)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "id: longer than %d bytes", MEDHA_ID_MAX - 1);
	memcpy(id, json_string_value(v), n + 1);
	return 0;
}

/* Parses line as one JSON object; *root is to be json_decref()ed. */
static int
json_line(const char *line, json_t **root, char *why, size_t whylen)
{
	json_error_t e;

	*root = json_loads(line, JSON_REJECT_DUPLICATES, &e);
	if (*root == NULL)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "not JSON: %s (column %d)", e.text, e.column);
	if (!json_is_object(*root)) {
		json_decref(*root);
		*root = NULL;
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "not a JSON object");
	}
	return 0;
}

/* Writes a string literal. */
#define WLIT(w, lit) medha_writer_write((w), (lit), sizeof(lit) - 1)

/* Writes s as a JSON string; bytes that are not UTF-8 become U+FFFD. */
static int
write_jstr(struct medha_writer *w, const char *s)
{
	const char *run = s;
	char esc[8];
	int n;

	medha_writer_write(w, "\"", 1);
	while (*s != '\0') {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x80 && (n = (int)medha_utf8_len(s, SIZE_MAX)) > 0) {
			s += n;
			continue;
		}
		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
			s++;
			continue;
		}
		medha_writer_write(w, run, s - run);
		if (c >= 0x80)
			snprintf(esc, sizeof(esc), "\\ufffd");
		else if (c == '"' || c == '\\')
			snprintf(esc, sizeof(esc), "\\%c", c);
		else if (c == '\n' || c == '\t' || c == '\r')
			snprintf(esc, sizeof(esc), "\\%c",
			    c == '\n'       ? 'n'
			        : c == '\t' ? 't'
			                    : 'r');
		else
			snprintf(esc, sizeof(esc), "\\u%04x", c);
		medha_writer_write(w, esc, strlen(esc));
		run = ++s;
	}
	medha_writer_write(w, run, s - run);
	return medha_writer_write(w, "\"", 1);
}

/* Writes an id as a JSON integer if it is one (<= 18 digits), else a string. */
static int
write_id(struct medha_writer *w, const char *id)
{
	size_t n = strspn(id, "0123456789");

	if (id[n] == '\0' && n >= 1 && n <= 18 && (n == 1 || id[0] != '0'))
		return medha_writer_write(w, id, n);
	return write_jstr(w, id);
}

/* Writes n ids as a JSON array. */
static int
write_ids(struct medha_writer *w, const int32_t *ids, int64_t n)
{
	medha_writer_write(w, "[", 1);
	for (int64_t i = 0; i < n; i++)
		medha_writer_printf(w, i ? ", %d" : "%d", ids[i]);
	return medha_writer_write(w, "]", 1);
}

static int
id_valid(const char *id)
{
	return memchr(id, '\0', MEDHA_ID_MAX) != NULL;
}

/* ---- requests ---- */

/* A number in [lo, hi] under key, if present. */
static int
json_num(json_t *o, const char *key, double lo, double hi, double *out,
    char *why, size_t whylen)
{
	json_t *v = json_object_get(o, key);
	char buf[32];
	double d;

	if (v == NULL)
		return 0;
	d = json_number_value(v);
	if (!json_is_number(v) || !isfinite(d) || d < lo || d > hi)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "%s: not a number in [%g, %g] (got %s)", key, lo, hi,
		    json_what(v, buf, sizeof(buf)));
	*out = d;
	return 0;
}

/* temperature, top_k, top_p, seed, the penalties, min_p, min_tokens and
 * ignore_eos, each optional. */
static int
json_sampling(json_t *o, struct medha_sampler_params *sp, int *ignore_eos,
    char *why, size_t whylen)
{
	double temp = sp->temp, top_p = sp->top_p;
	double pres = sp->presence_penalty, freq = sp->frequency_penalty,
	       rep = sp->repetition_penalty, min_p = sp->min_p;
	int64_t top_k = sp->top_k, seed = (int64_t)sp->seed;
	json_t *v;
	int rc;

	if ((rc = json_num(o, "temperature", 0, 100, &temp, why, whylen)) !=
	        0 ||
	    (rc = json_num(o, "presence_penalty", -2, 2, &pres, why,
	         whylen)) != 0 ||
	    (rc = json_num(o, "frequency_penalty", -2, 2, &freq, why,
	         whylen)) != 0 ||
	    (rc = json_num(o, "repetition_penalty", 0, 100, &rep, why,
	         whylen)) != 0 ||
	    (rc = json_num(o, "min_p", 0, 1, &min_p, why, whylen)) != 0 ||
	    (rc = json_num(o, "top_p", 0, 1, &top_p, why, whylen)) != 0 ||
	    (rc = json_count(o, "top_k", 0, 0, 1 << 24, &top_k, why, whylen)) !=
	        0 ||
	    (rc = json_count(o, "seed", 0, 0, INT64_MAX, &seed, why, whylen)) !=
	        0 ||
	    (rc = json_count(o, "min_tokens", 0, 0, MEDHA_TOKENS_MAX,
	         &sp->min_tokens, why, whylen)) != 0)
		return rc;
	if ((v = json_object_get(o, "ignore_eos")) != NULL) {
		if (!json_is_boolean(v))
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "ignore_eos: not a boolean");
		*ignore_eos = json_is_true(v);
	}
	sp->temp = (float)temp;
	sp->top_p = (float)top_p;
	sp->presence_penalty = (float)pres;
	sp->frequency_penalty = (float)freq;
	sp->repetition_penalty = (float)rep;
	sp->min_p = (float)min_p;
	sp->top_k = (int)top_k;
	sp->seed = (uint64_t)seed;
	return 0;
}

/* "stop": a string or an array of up to MEDHA_STOP_MAX strings. */
static int
json_stop(json_t *o, struct medha_reqspec *rs, char *why, size_t whylen)
{
	json_t *v = json_object_get(o, "stop"), *e;
	size_t i, n;

	if (v == NULL || json_is_null(v))
		return 0;
	n = json_is_array(v) ? json_array_size(v) : 1;
	if (!json_is_array(v) && !json_is_string(v))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "stop: not a string or an array of strings");
	if (n > MEDHA_STOP_MAX)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "stop: more than %d strings", MEDHA_STOP_MAX);
	for (i = 0; i < n; i++) {
		e = json_is_array(v) ? json_array_get(v, i) : v;
		if (!json_is_string(e) || json_string_length(e) == 0 ||
		    json_string_length(e) > MEDHA_STOP_LEN ||
		    strlen(json_string_value(e)) != json_string_length(e))
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "stop: each must be a string of 1 to %d bytes "
			    "without NUL",
			    MEDHA_STOP_LEN);
		if ((rs->stop[i] = strdup(json_string_value(e))) == NULL)
			return MEDHA_ENOMEM;
		rs->n_stop = (int)i + 1;
	}
	return 0;
}

/*
 * The array v of token ids (each an integer in [0, INT32_MAX]) into a
 * malloc'd *out of *n ids (at least one element allocated). key names
 * it in reasons. 0, MEDHA_EFORMAT or MEDHA_ENOMEM (*out then NULL).
 */
static int
json_ids(json_t *v, const char *key, int32_t **out, int64_t *n, char *why,
    size_t whylen)
{
	size_t i, len = json_array_size(v);

	*out = medha_reallocarray(NULL, len ? len : 1, sizeof(int32_t));
	if (*out == NULL)
		return MEDHA_ENOMEM;
	for (i = 0; i < len; i++) {
		json_t *e = json_array_get(v, i);
		char buf[32];

		if (!json_is_integer(e) || json_integer_value(e) < 0 ||
		    json_integer_value(e) > INT32_MAX) {
			free(*out);
			*out = NULL;
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "%s[%zu]: not a token id in [0, %d] (got %s)", key,
			    i, INT32_MAX, json_what(e, buf, sizeof(buf)));
		}
		(*out)[i] = (int32_t)json_integer_value(e);
	}
	*n = (int64_t)len;
	return 0;
}

/* "prompt_ids": an array of token ids >= 0; sets prompt_tokens. */
static int
json_prompt_ids(json_t *o, struct medha_reqspec *rs, char *why, size_t whylen)
{
	json_t *v = json_object_get(o, "prompt_ids");
	size_t n;

	if (v == NULL)
		return 0;
	if (!json_is_array(v) || (n = json_array_size(v)) == 0)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "prompt_ids: not a non-empty array");
	if (rs->prompt_tokens != 0 && rs->prompt_tokens != (int64_t)n)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "prompt_tokens: %lld but prompt_ids has %zu",
		    (long long)rs->prompt_tokens, n);
	return json_ids(v, "prompt_ids", &rs->prompt_ids, &rs->prompt_tokens,
	    why, whylen);
}

/*
 * "prefix": [["name", tokens], ...], the named segments the prompt
 * starts with (req.h, struct medha_seg); their tokens sum to at most
 * prompt_tokens, which must be known.
 */
static int
json_prefix(json_t *o, struct medha_reqspec *rs, char *why, size_t whylen)
{
	json_t *v = json_object_get(o, "prefix");
	size_t n;
	int64_t sum = 0;

	if (v == NULL)
		return 0;
	if (!json_is_array(v) || (n = json_array_size(v)) == 0 ||
	    n > MEDHA_SEG_MAX)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "prefix: not an array of 1 to %d segments", MEDHA_SEG_MAX);
	if ((rs->prefix = medha_calloc(n, sizeof(*rs->prefix))) == NULL)
		return MEDHA_ENOMEM;
	rs->n_prefix = (int)n;
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(v, i), *nm, *t;
		if (!json_is_array(e) || json_array_size(e) != 2 ||
		    !json_is_string(nm = json_array_get(e, 0)) ||
		    json_string_length(nm) == 0 ||
		    json_string_length(nm) >= MEDHA_SEG_NAME ||
		    strlen(json_string_value(nm)) != json_string_length(nm) ||
		    !json_is_integer(t = json_array_get(e, 1)) ||
		    json_integer_value(t) < 1 ||
		    json_integer_value(t) > MEDHA_TOKENS_MAX)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "prefix[%zu]: not [name of 1 to %d bytes, tokens "
			    "in [1, %lld]]",
			    i, MEDHA_SEG_NAME - 1, (long long)MEDHA_TOKENS_MAX);
		memcpy(rs->prefix[i].name, json_string_value(nm),
		    json_string_length(nm));
		rs->prefix[i].tokens = json_integer_value(t);
		sum += rs->prefix[i].tokens;
	}
	if (sum > rs->prompt_tokens)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "prefix: %lld tokens, more than prompt_tokens (%lld)",
		    (long long)sum, (long long)rs->prompt_tokens);
	return 0;
}

int
medha_reqspec_parse(const char *line, struct medha_reqspec *rs, char *why,
    size_t whylen)
{
	json_t *root, *p;
	int rc;

	memset(rs, 0, sizeof(*rs));
	rs->sampling = medha_sampling_greedy;
	if ((rc = json_line(line, &root, why, whylen)) != 0)
		return rc;
	if ((rc = json_id(root, 0, rs->id, why, whylen)) != 0 ||
	    (rc = json_time(root, "arrival", 1, 0, MEDHA_TIME_MAX, &rs->arrival,
	         why, whylen)) != 0 ||
	    (rc = json_count(root, "prompt_tokens", 0, 1, MEDHA_TOKENS_MAX,
	         &rs->prompt_tokens, why, whylen)) != 0 ||
	    (rc = json_count(root, "max_tokens", 1, 0, MEDHA_TOKENS_MAX,
	         &rs->max_tokens, why, whylen)) != 0 ||
	    (rc = json_count(root, "output_tokens", 0, 1, MEDHA_TOKENS_MAX,
	         &rs->output_tokens, why, whylen)) != 0 ||
	    (rc = json_time(root, "ttft_slo", 0, 1, MEDHA_TIME_MAX,
	         &rs->ttft_slo, why, whylen)) != 0 ||
	    (rc = json_time(root, "tpot_slo", 0, 1, MEDHA_TIME_MAX,
	         &rs->tpot_slo, why, whylen)) != 0)
		goto out;
	if ((rc = json_sampling(root, &rs->sampling, &rs->ignore_eos, why,
	         whylen)) != 0)
		goto out;
	if (rs->sampling.min_tokens > rs->max_tokens) {
		rc = medha_why(why, whylen, MEDHA_EFORMAT,
		    "min_tokens: %lld, more than max_tokens (%lld)",
		    (long long)rs->sampling.min_tokens,
		    (long long)rs->max_tokens);
		goto out;
	}
	if (
	    (rc = json_stop(root, rs, why, whylen)) != 0 ||
	    (rc = json_prompt_ids(root, rs, why, whylen)) != 0 ||
	    (rc = json_prefix(root, rs, why, whylen)) != 0)
		goto out;
	if ((p = json_object_get(root, "prompt")) != NULL) {
		if (!json_is_string(p)) {
			rc = medha_why(why, whylen, MEDHA_EFORMAT,
			    "prompt: not a string");
			goto out;
		}
		if ((rs->prompt = strdup(json_string_value(p))) == NULL) {
			rc = MEDHA_ENOMEM;
			goto out;
		}
	} else if (rs->prompt_tokens == 0)
		rc = medha_why(why, whylen, MEDHA_EFORMAT,
		    "prompt_tokens: missing (and no prompt or prompt_ids)");
out:
	json_decref(root);
	if (rc != 0)
		medha_reqspec_clear(rs);
	return rc;
}

/* 1 if rs's prefix is one json_prefix() takes. */
static int
prefix_valid(const struct medha_reqspec *rs)
{
	int64_t sum = 0;

	if (rs->n_prefix == 0)
		return 1;
	if (rs->n_prefix < 0 || rs->n_prefix > MEDHA_SEG_MAX ||
	    rs->prefix == NULL)
		return 0;
	for (int i = 0; i < rs->n_prefix; i++) {
		const struct medha_seg *g = &rs->prefix[i];
		size_t len = strnlen(g->name, sizeof(g->name));
		if (len == 0 || len == sizeof(g->name) || g->tokens < 1 ||
		    g->tokens > MEDHA_TOKENS_MAX)
			return 0;
		sum += g->tokens;
	}
	return sum <= rs->prompt_tokens;
}

int
medha_reqspec_write(struct medha_writer *w, const struct medha_reqspec *rs)
{
	/* what medha_reqspec_parse() would refuse is not written */
	if (!id_valid(rs->id) || !(rs->arrival >= 0) ||
	    !(rs->arrival <= MEDHA_TIME_MAX) || rs->prompt_tokens < 0 ||
	    rs->prompt_tokens > MEDHA_TOKENS_MAX ||
	    (rs->prompt_tokens == 0 && rs->prompt == NULL) ||
	    rs->max_tokens < 0 || rs->max_tokens > MEDHA_TOKENS_MAX ||
	    rs->output_tokens < 0 || rs->output_tokens > MEDHA_TOKENS_MAX ||
	    !(rs->ttft_slo >= 0) || !(rs->ttft_slo <= MEDHA_TIME_MAX) ||
	    !(rs->tpot_slo >= 0) || !(rs->tpot_slo <= MEDHA_TIME_MAX) ||
	    rs->sampling.min_tokens < 0 ||
	    rs->sampling.min_tokens > rs->max_tokens || !prefix_valid(rs))
		return MEDHA_EINVAL;
	medha_writer_write(w, "{", 1);
	if (rs->id[0] != '\0') {
		medha_writer_write(w, "\"id\": ", 6);
		write_id(w, rs->id);
		medha_writer_write(w, ", ", 2);
	}
	medha_writer_printf(w, "\"arrival\": %.9g", rs->arrival);
	if (rs->prompt_tokens > 0)
		medha_writer_printf(w, ", \"prompt_tokens\": %lld",
		    (long long)rs->prompt_tokens);
	if (rs->prompt != NULL) {
		medha_writer_write(w, ", \"prompt\": ", 12);
		write_jstr(w, rs->prompt);
	}
	medha_writer_printf(w, ", \"max_tokens\": %lld",
	    (long long)rs->max_tokens);
	if (rs->output_tokens > 0)
		medha_writer_printf(w, ", \"output_tokens\": %lld",
		    (long long)rs->output_tokens);
	if (rs->ttft_slo > 0)
		medha_writer_printf(w, ", \"ttft_slo\": %.9g", rs->ttft_slo);
	if (rs->tpot_slo > 0)
		medha_writer_printf(w, ", \"tpot_slo\": %.9g", rs->tpot_slo);
	if (rs->prompt_ids != NULL) {
		WLIT(w, ", \"prompt_ids\": ");
		write_ids(w, rs->prompt_ids, rs->prompt_tokens);
	}
	for (int i = 0; i < rs->n_prefix; i++) {
		medha_writer_printf(w, "%s",
		    i == 0 ? ", \"prefix\": [[" : ", [");
		write_jstr(w, rs->prefix[i].name);
		medha_writer_printf(w, ", %lld]%s",
		    (long long)rs->prefix[i].tokens,
		    i == rs->n_prefix - 1 ? "]" : "");
	}
	if (rs->sampling.temp > 0)
		medha_writer_printf(w,
		    ", \"temperature\": %.9g, \"top_k\": %d, \"top_p\": %.9g"
		    ", \"seed\": %llu",
		    rs->sampling.temp, rs->sampling.top_k, rs->sampling.top_p,
		    (unsigned long long)rs->sampling.seed);
	{
		static const char *const names[] = {"presence_penalty",
		    "frequency_penalty", "repetition_penalty", "min_p"};
		const float v[] = {rs->sampling.presence_penalty,
		    rs->sampling.frequency_penalty,
		    rs->sampling.repetition_penalty, rs->sampling.min_p};
		for (int i = 0; i < 4; i++)
			if (v[i] != 0)
				medha_writer_printf(w, ", \"%s\": %.9g", names[i],
				    v[i]);
	}
	if (rs->sampling.min_tokens > 0)
		medha_writer_printf(w, ", \"min_tokens\": %lld",
		    (long long)rs->sampling.min_tokens);
	if (rs->ignore_eos)
		WLIT(w, ", \"ignore_eos\": true");
	for (int i = 0; i < rs->n_stop; i++) {
		if (i == 0)
			WLIT(w, ", \"stop\": [");
		else
			WLIT(w, ", ");
		write_jstr(w, rs->stop[i]);
		if (i == rs->n_stop - 1)
			medha_writer_write(w, "]", 1);
	}
	return medha_writer_write(w, "}\n", 2);
}

/* ---- records ---- */

/* finish_reason, reason, token_ids and text, each optional. */
static int
json_record_extra(json_t *o, struct medha_record *r, char *why, size_t whylen)
{
	json_t *v;

	if ((v = json_object_get(o, "finish_reason")) != NULL &&
	    !json_is_null(v) &&
	    (!json_is_string(v) ||
	        (r->finish_reason = medha_finish_parse(json_string_value(v))) <
	            0))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "finish_reason: not \"length\" or \"stop\"");
	if ((v = json_object_get(o, "reason")) != NULL) {
		if (!json_is_string(v))
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "reason: not a string");
		snprintf(r->reason, sizeof(r->reason), "%s",
		    json_string_value(v));
	}
	if ((v = json_object_get(o, "text")) != NULL) {
		if (!json_is_string(v))
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "text: not a string");
		if ((r->text = strdup(json_string_value(v))) == NULL)
			return MEDHA_ENOMEM;
	}
	if ((v = json_object_get(o, "token_ids")) != NULL) {
		if (!json_is_array(v))
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "token_ids: not an array");
		return json_ids(v, "token_ids", &r->token_ids, &r->n_token_ids,
		    why, whylen);
	}
	return 0;
}

/*
 * "tbt", optional: [[bucket, count], ...], buckets ascending (req.h,
 * man/medha-trace.5), at most one gap for each output token after the
 * first.
 */
static int
json_tbt(json_t *o, struct medha_record *r, char *why, size_t whylen)
{
	json_t *v = json_object_get(o, "tbt"), *e;
	struct medha_tbt *h = &r->tbt;
	int64_t b, n, total = 0, gaps = r->output_tokens - 1;
	char name[48];
	size_t i;

	if (v == NULL)
		return 0;
	if (!json_is_array(v) || json_array_size(v) > MEDHA_TBT_BUCKETS)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "tbt: not an array of at most %d [bucket, count] pairs",
		    MEDHA_TBT_BUCKETS);
	if (json_array_size(v) == 0)
		return 0;
	if ((h->bin = medha_reallocarray(NULL, json_array_size(v),
	         sizeof(*h->bin))) == NULL)
		return MEDHA_ENOMEM;
	h->cap = (int)json_array_size(v);
	for (i = 0; i < json_array_size(v); i++) {
		int rc;

		e = json_array_get(v, i);
		if (!json_is_array(e) || json_array_size(e) != 2)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "tbt[%zu]: not a [bucket, count] pair", i);
		snprintf(name, sizeof(name), "tbt[%zu]: bucket", i);
		if ((rc = json_int(json_array_get(e, 0), name, 0,
		         MEDHA_TBT_BUCKETS - 1, &b, why, whylen)) != 0)
			return rc;
		if (i > 0 && b <= h->bin[i - 1].bucket)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "tbt[%zu]: bucket %lld not above the one before "
			    "(%d)",
			    i, (long long)b, h->bin[i - 1].bucket);
		snprintf(name, sizeof(name), "tbt[%zu]: count", i);
		if ((rc = json_int(json_array_get(e, 1), name, 1,
		         MEDHA_TOKENS_MAX, &n, why, whylen)) != 0)
			return rc;
		h->bin[i].bucket = (int32_t)b;
		h->bin[i].count = n;
		h->n = (int)i + 1;
		total += n;
	}
	if (total > (gaps > 0 ? gaps : 0))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "tbt: %lld gaps, more than output_tokens - 1 (%lld)",
		    (long long)total, (long long)(gaps > 0 ? gaps : 0));
	return 0;
}

int
medha_record_parse(const char *line, struct medha_record *rec, char *why,
    size_t whylen)
{
	struct medha_record r;
	json_t *root, *v;
	int rc, ok, have_ttft, have_tpot;

	memset(&r, 0, sizeof(r));
	if ((rc = json_line(line, &root, why, whylen)) != 0)
		return rc;
	v = json_object_get(root, "status");
	if (v == NULL) {
		rc = medha_why(why, whylen, MEDHA_EFORMAT, "status: missing");
		goto out;
	}
	if (!json_is_string(v) ||
	    (r.status = medha_status_parse(json_string_value(v))) < 0) {
		rc = medha_why(why, whylen, MEDHA_EFORMAT,
		    "status: not one of \"ok\", \"rejected\", \"failed\", "
		    "\"cancelled\"");
		goto out;
	}
	ok = r.status == MEDHA_STATUS_OK;
	have_ttft = json_object_get(root, "ttft") != NULL;
	have_tpot = json_object_get(root, "tpot_mean") != NULL;
	/* times: any finite number >= 0 (a record's clock runs on past the
	   trace's last arrival); counts: at most MEDHA_TOKENS_MAX, which
	   keeps a reader's sum of them from overflowing */
	if ((rc = json_id(root, 1, r.id, why, whylen)) != 0 ||
	    (rc = json_time(root, "arrival", 1, 0, HUGE_VAL, &r.arrival, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "first_token", ok, 0, HUGE_VAL,
	         &r.first_token, why, whylen)) != 0 ||
	    (rc = json_time(root, "finish", ok, 0, HUGE_VAL, &r.finish, why,
	         whylen)) != 0 ||
	    (rc = json_count(root, "prompt_tokens", 1, 0, MEDHA_TOKENS_MAX,
	         &r.prompt_tokens, why, whylen)) != 0 ||
	    (rc = json_count(root, "output_tokens", 1, 0, MEDHA_TOKENS_MAX,
	         &r.output_tokens, why, whylen)) != 0 ||
	    (rc = json_time(root, "ttft", 0, 0, HUGE_VAL, &r.ttft, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "tpot_mean", 0, 0, HUGE_VAL, &r.tpot_mean,
	         why, whylen)) != 0 ||
	    (rc = json_time(root, "tpot_max", 0, 0, HUGE_VAL, &r.tpot_max, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "ttft_slo", 0, 0, HUGE_VAL, &r.ttft_slo, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "tpot_slo", 0, 0, HUGE_VAL, &r.tpot_slo, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "prefill_alone", 0, 1, HUGE_VAL,
	         &r.prefill_alone, why, whylen)) != 0 ||
	    (rc = json_count(root, "cached_tokens", 0, 0, MEDHA_TOKENS_MAX,
	         &r.cached_tokens, why, whylen)) != 0 ||
	    (rc = json_count(root, "preemptions", 0, 0, MEDHA_TOKENS_MAX,
	         &r.preemptions, why, whylen)) != 0 ||
	    (rc = json_time(root, "queue_time", 0, 0, HUGE_VAL, &r.queue_time,
	         why, whylen)) != 0)
		goto out;
	if ((rc = json_record_extra(root, &r, why, whylen)) != 0 ||
	    (rc = json_tbt(root, &r, why, whylen)) != 0)
		goto out;
	/* Times in order: a token cannot come before its request. */
	if (ok && r.first_token < r.arrival) {
		rc = medha_why(why, whylen, MEDHA_EFORMAT,
		    "first_token %.9g is before arrival %.9g", r.first_token,
		    r.arrival);
		goto out;
	}
	if (ok && r.finish < r.first_token) {
		rc = medha_why(why, whylen, MEDHA_EFORMAT,
		    "finish %.9g is before first_token %.9g", r.finish,
		    r.first_token);
		goto out;
	}
	/* Derive what a terse writer left out. */
	if (!have_ttft && ok)
		r.ttft = r.first_token - r.arrival;
	if (!have_tpot && ok && r.output_tokens >= 2)
		r.tpot_mean =
		    (r.finish - r.first_token) / (r.output_tokens - 1);
	*rec = r;
out:
	json_decref(root);
	if (rc != 0)
		medha_record_clear(&r);
	return rc;
}

int
medha_record_write(struct medha_writer *w, const struct medha_record *rec)
{
	const double *t[] = {&rec->arrival, &rec->first_token, &rec->finish,
	    &rec->ttft, &rec->tpot_mean, &rec->tpot_max, &rec->ttft_slo,
	    &rec->tpot_slo, &rec->prefill_alone};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!isfinite(*t[i]) || *t[i] < 0)
			return MEDHA_EINVAL;
	if (!id_valid(rec->id) || rec->id[0] == '\0' ||
	    rec->prompt_tokens < 0 || rec->output_tokens < 0 ||
	    rec->status < 0 || rec->status >= MEDHA_STATUS_COUNT ||
	    rec->finish_reason < 0 ||
	    rec->finish_reason >= MEDHA_FINISH_COUNT ||
	    memchr(rec->reason, '\0', sizeof(rec->reason)) == NULL ||
	    medha_tbt_check(&rec->tbt, rec->output_tokens - 1, NULL, 0) != 0)
		return MEDHA_EINVAL;
	medha_writer_write(w, "{\"id\": ", 7);
	write_id(w, rec->id);
	medha_writer_printf(w,
	    ", \"arrival\": %.9g, \"first_token\": %.9g, \"finish\": %.9g"
	    ", \"prompt_tokens\": %lld, \"output_tokens\": %lld"
	    ", \"ttft\": %.9g, \"tpot_mean\": %.9g, \"tpot_max\": %.9g"
	    ", \"ttft_slo\": %.9g, \"tpot_slo\": %.9g, \"status\": \"%s\"",
	    rec->arrival, rec->first_token, rec->finish,
	    (long long)rec->prompt_tokens, (long long)rec->output_tokens,
	    rec->ttft, rec->tpot_mean, rec->tpot_max, rec->ttft_slo,
	    rec->tpot_slo, medha_status_name(rec->status));
	if (rec->prefill_alone > 0)
		medha_writer_printf(w, ", \"prefill_alone\": %.9g",
		    rec->prefill_alone);
	if (rec->cached_tokens > 0)
		medha_writer_printf(w, ", \"cached_tokens\": %lld",
		    (long long)rec->cached_tokens);
	if (rec->preemptions > 0)
		medha_writer_printf(w, ", \"preemptions\": %lld",
		    (long long)rec->preemptions);
	if (rec->queue_time > 0)
		medha_writer_printf(w, ", \"queue_time\": %.9g",
		    rec->queue_time);
	if (rec->finish_reason != MEDHA_FINISH_NONE)
		medha_writer_printf(w, ", \"finish_reason\": \"%s\"",
		    medha_finish_name(rec->finish_reason));
	if (rec->reason[0] != '\0') {
		WLIT(w, ", \"reason\": ");
		write_jstr(w, rec->reason);
	}
	for (i = 0; i < (size_t)rec->tbt.n; i++)
		medha_writer_printf(w, "%s[%d, %lld]%s",
		    i == 0 ? ", \"tbt\": [" : ", ", rec->tbt.bin[i].bucket,
		    (long long)rec->tbt.bin[i].count,
		    i + 1 == (size_t)rec->tbt.n ? "]" : "");
	if (rec->token_ids != NULL) {
		WLIT(w, ", \"token_ids\": ");
		write_ids(w, rec->token_ids, rec->n_token_ids);
	}
	if (rec->text != NULL) {
		WLIT(w, ", \"text\": ");
		write_jstr(w, rec->text);
	}
	medha_writer_write(w, "}\n", 2);
	return medha_writer_error(w);
}
