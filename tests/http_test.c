/*
 * http_test.c: the OpenAI JSON of the HTTP front door (serve/http/oai.c), with
 * no socket: request bodies into reqspecs (OpenAI's defaults, every
 * field, and a table of bodies that must be refused with their status,
 * param and code), chat messages through a ChatML template, the mapping
 * of the router's refusals and records to HTTP errors, the shapes of
 * responses, chunks and error bodies (parsed back with jansson), the
 * UTF-8 repair of generated text, and the Prometheus text of a metrics
 * snapshot. tests/sh/http.sh runs the whole front door.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "serve/http/http.h"

static int
parse(struct medha_oai_req *q, const char *body, int chat,
    const struct medha_tok *tok, struct medha_oai_error *e)
{
	return medha_oai_parse(q, body, strlen(body), chat, tok, e);
}

static void
test_defaults(void **state)
{
	struct medha_oai_req q;
	struct medha_oai_error e;

	(void)state;
	assert_int_equal(parse(&q, "{\"prompt\": \"Hello\"}", 0, NULL, &e), 0);
	assert_string_equal(q.spec.prompt, "Hello");
	assert_int_equal(q.spec.max_tokens, 16);
	assert_true(q.max_tokens_set);
	assert_true(q.spec.sampling.temp == 1 && q.spec.sampling.top_p == 1);
	assert_int_equal(q.spec.sampling.top_k, 0);
	assert_false(q.stream || q.include_usage || q.seed_set);
	assert_int_equal(q.n, 1);
	assert_int_equal(q.spec.n_stop, 0);
	assert_string_equal(q.model, "");
	assert_true(q.spec.cache_salt == 0); /* no tenant */
	medha_oai_req_clear(&q);
}

/* Tenants of the prefix cache: the body's cache_salt (vLLM's field and
 * rule), an API key's tenant and the two together, each the first 8
 * bytes (big-endian) of a SHA-256 under its label, as Python's hashlib
 * computes them:
 *   h = lambda l, d: int.from_bytes(sha256(l + b"\0" + d).digest()[:8])
 *   h(b"medha cache_salt", b"tenant-x")             0xaa33c01b8d05d6c4
 *   t = h(b"medha api key tenant", b"key-a")        0x003fbfd5955d09f7
 *   h(b"medha tenant salt", pack(">QQ", t, salt))   (below) */
static void
test_cache_salt(void **state)
{
	struct medha_oai_req q;
	struct medha_oai_error e;
	uint64_t s, t, u, v;

	(void)state;
	assert_int_equal(parse(&q,
	                     "{\"prompt\": \"x\", \"cache_salt\": "
	                     "\"tenant-x\"}",
	                     0, NULL, &e),
	    0);
	assert_true(q.spec.cache_salt == 0xaa33c01b8d05d6c4ULL);
	medha_oai_req_clear(&q);
	assert_int_equal(parse(&q,
	                     "{\"messages\": [], \"cache_salt\": null}", 1,
	                     NULL, &e),
	    400); /* chat takes the field (no template here: 400 later) */
	assert_null(strstr(e.message, "cache_salt"));
	/* vLLM's rule: a non-empty string */
	assert_int_equal(parse(&q, "{\"prompt\": \"x\", \"cache_salt\": \"\"}",
	                     0, NULL, &e),
	    400);
	assert_string_equal(e.param, "cache_salt");
	assert_string_equal(e.message,
	    "Parameter 'cache_salt' must be a non-empty string if provided.");
	assert_int_equal(parse(&q, "{\"prompt\": \"x\", \"cache_salt\": 7}",
	                     0, NULL, &e),
	    400);
	assert_string_equal(e.param, "cache_salt");

	assert_int_equal(medha_oai_salt("tenant-x", 8, &s), 0);
	assert_true(s == 0xaa33c01b8d05d6c4ULL);
	assert_int_equal(medha_oai_key_tenant("key-a", 5, &t), 0);
	assert_true(t == 0x003fbfd5955d09f7ULL);
	/* a key's requests: salted by the key, with or without a salt of
	   their own */
	assert_int_equal(medha_oai_salt_tenant(t, s, &u), 0);
	assert_true(u == 0x65f1a02985662d23ULL);
	assert_int_equal(medha_oai_salt_tenant(t, 0, &v), 0);
	assert_true(v == 0x548d2459b2b78a45ULL);
	/* no tenant: the salt as it is */
	assert_int_equal(medha_oai_salt_tenant(0, s, &u), 0);
	assert_true(u == s);
	assert_int_equal(medha_oai_salt_tenant(0, 0, &u), 0);
	assert_true(u == 0);
	/* another key, the same body salt: another salt */
	assert_int_equal(medha_oai_key_tenant("key-b", 5, &u), 0);
	assert_true(u != t);
	assert_int_equal(medha_oai_salt_tenant(u, s, &v), 0);
	assert_true(v != 0x65f1a02985662d23ULL && v != s);
}

static void
test_fields(void **state)
{
	struct medha_oai_req q;
	struct medha_oai_error e;

	(void)state;
	assert_int_equal(parse(&q,
	                     "{\"model\": \"m\", \"prompt\": [\"Hi\"], "
	                     "\"max_tokens\": 5, \"temperature\": 0, "
	                     "\"top_p\": 0.5, \"top_k\": 40, \"seed\": 7, "
	                     "\"stop\": [\"\\n\", \"end\"], \"stream\": true, "
	                     "\"stream_options\": {\"include_usage\": true}, "
	                     "\"ignore_eos\": true, \"n\": 3, \"echo\": false, "
	                     "\"logprobs\": null, \"suffix\": null, "
	                     "\"user\": \"u\"}",
	                     0, NULL, &e),
	    0);
	assert_string_equal(q.model, "m");
	assert_string_equal(q.spec.prompt, "Hi");
	assert_int_equal(q.spec.max_tokens, 5);
	assert_true(q.spec.sampling.temp == 0);
	assert_true(q.spec.sampling.top_p == 0.5f);
	assert_int_equal(q.spec.sampling.top_k, 40);
	assert_true(q.seed_set && q.spec.sampling.seed == 7);
	assert_int_equal(q.spec.n_stop, 2);
	assert_string_equal(q.spec.stop[0], "\n");
	assert_string_equal(q.spec.stop[1], "end");
	assert_true(q.stream && q.include_usage && q.spec.ignore_eos);
	assert_int_equal(q.n, 3);
	medha_oai_req_clear(&q);

	/* token ids; one stop string; top_k -1 keeps all */
	assert_int_equal(parse(&q,
	                     "{\"prompt\": [1, 2, 2147483647], \"stop\": "
	                     "\"x\", \"top_k\": -1}",
	                     0, NULL, &e),
	    0);
	assert_null(q.spec.prompt);
	assert_int_equal(q.spec.prompt_tokens, 3);
	assert_int_equal(q.spec.prompt_ids[2], 2147483647);
	assert_int_equal(q.spec.n_stop, 1);
	assert_int_equal(q.spec.sampling.top_k, 0);
	medha_oai_req_clear(&q);

	/* vLLM's stop_token_ids; min_tokens 0, vLLM's default */
	assert_int_equal(parse(&q,
	                     "{\"prompt\": \"x\", \"stop_token_ids\": [2, 7], "
	                     "\"min_tokens\": 0}",
	                     0, NULL, &e),
	    0);
	assert_int_equal(q.spec.n_stop_ids, 2);
	assert_int_equal(q.spec.stop_ids[1], 7);
	assert_int_equal(q.spec.sampling.min_tokens, 0);
	medha_oai_req_clear(&q);

	/* min_tokens up to max_tokens; a chat's unset max_tokens is
	   checked once known (serve/http/prompt.c) */
	assert_int_equal(parse(&q,
	                     "{\"prompt\": \"x\", \"max_tokens\": 5, "
	                     "\"min_tokens\": 5}",
	                     0, NULL, &e),
	    0);
	assert_int_equal(q.spec.sampling.min_tokens, 5);
	medha_oai_req_clear(&q);

	/* a list of prompts, texts and token ids: n choices each */
	assert_int_equal(parse(&q,
	                     "{\"prompt\": [\"a\", [5, 6], \"c\"], \"n\": 2}",
	                     0, NULL, &e),
	    0);
	assert_int_equal(q.n_prompts, 3);
	assert_null(q.spec.prompt);
	assert_null(q.spec.prompt_ids);
	assert_string_equal(q.prompts[0].text, "a");
	assert_int_equal(q.prompts[1].n_ids, 2);
	assert_int_equal(q.prompts[1].ids[1], 6);
	assert_string_equal(q.prompts[2].text, "c");
	medha_oai_req_clear(&q);

	/* a seed up to 2^64 - 1 (jansson's integers stop at 2^63 - 1);
	   a "seed" elsewhere is not it */
	assert_int_equal(parse(&q,
	                     "{\"stop\": \"\\\"seed\\\": 1\", \"prompt\": \"x\", "
	                     "\"seed\" :\t18446744073709551615}",
	                     0, NULL, &e),
	    0);
	assert_true(q.seed_set && q.spec.sampling.seed == UINT64_MAX);
	medha_oai_req_clear(&q);
	assert_int_equal(parse(&q,
	                     "{\"prompt\": \"x\", \"seed\": 9223372036854775808}",
	                     0, NULL, &e),
	    0);
	assert_true(q.spec.sampling.seed == (uint64_t)1 << 63);
	medha_oai_req_clear(&q);

	/* top_p 0 keeps the most likely token, as on the wire and in
	   traces: taken, not refused */
	assert_int_equal(parse(&q, "{\"prompt\": \"x\", \"top_p\": 0}", 0,
	                     NULL, &e),
	    0);
	assert_true(q.spec.sampling.top_p == 0);
	medha_oai_req_clear(&q);
}

/* Bodies that must be refused: status, param ("" for null), code. */
static const struct {
	const char *body;
	int chat, status;
	const char *param, *code;
} bad[] = {
    {"", 0, 400, "", NULL},
    {"{\"prompt\": \"x\",", 0, 400, "", NULL},
    {"[1, 2]", 0, 400, "", NULL},
    /* a key twice, at the top and inside a message: refused */
    {"{\"prompt\": \"x\", \"max_tokens\": 2, \"max_tokens\": 1000000}", 0,
        400, "", NULL},
    {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\", "
     "\"content\": \"b\"}]}",
        1, 400, "", NULL},
    {"\"prompt\"", 0, 400, "", NULL},
    {"{\"prompt\": \"\xff\"}", 0, 400, "", NULL},
    {"{\"prompt\": \"a\\u0000b\"}", 0, 400, "", NULL},
    {"{}", 0, 400, "prompt", NULL},
    {"{\"prompt\": 5}", 0, 400, "prompt", NULL},
    {"{\"prompt\": []}", 0, 400, "prompt", NULL},
    {"{\"prompt\": [1, -1]}", 0, 400, "prompt", NULL},
    {"{\"prompt\": [1, 2.5]}", 0, 400, "prompt", NULL},
    {"{\"prompt\": [{\"a\": 1}, \"b\"]}", 0, 400, "prompt", NULL},
    {"{\"prompt\": [[\"a\"]]}", 0, 400, "prompt", NULL},
    {"{\"prompt\": [\"a\", []]}", 0, 400, "prompt", NULL},
    {"{\"prompt\": [1, \"a\"]}", 0, 400, "prompt", NULL},
    {"{\"prompt\": [\"a\", \"b\", \"c\", \"d\", \"e\"], \"n\": 16}", 0,
        400, "prompt", NULL},
    {"{\"prompt\": \"x\", \"seed\": 18446744073709551616}", 0, 400, "seed",
        NULL},
    {"{\"prompt\": \"x\", \"max_tokens\": 2, \"min_tokens\": 3}", 0, 400,
        "min_tokens", NULL},
    {"{\"prompt\": \"x\", \"min_tokens\": 17}", 0, 400, "min_tokens", NULL},
    {"{\"prompt\": \"x\", \"min_tokens\": -1}", 0, 400, "min_tokens", NULL},
    {"{\"prompt\": \"x\", \"stop_token_ids\": [1, -1]}", 0, 400,
        "stop_token_ids", NULL},
    {"{\"prompt\": \"x\", \"stop_token_ids\": 2}", 0, 400,
        "stop_token_ids", NULL},
    {"{\"prompt\": \"x\", \"max_tokens\": \"9\"}", 0, 400, "max_tokens", NULL},
    {"{\"prompt\": \"x\", \"max_tokens\": -1}", 0, 400, "max_tokens", NULL},
    {"{\"prompt\": \"x\", \"max_tokens\": 0}", 0, 400, "max_tokens", NULL},
    {"{\"prompt\": \"x\", \"max_tokens\": 1.5}", 0, 400, "max_tokens", NULL},
    {"{\"prompt\": \"x\", \"max_tokens\": 99999999999}", 0, 400, "max_tokens",
        NULL},
    {"{\"prompt\": \"x\", \"temperature\": 2.5}", 0, 400, "temperature", NULL},
    {"{\"prompt\": \"x\", \"temperature\": \"hot\"}", 0, 400, "temperature",
        NULL},
    {"{\"prompt\": \"x\", \"top_p\": -0.1}", 0, 400, "top_p", NULL},
    {"{\"prompt\": \"x\", \"seed\": 1.5}", 0, 400, "seed", NULL},
    {"{\"prompt\": \"x\", \"stream\": 1}", 0, 400, "stream", NULL},
    {"{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", 0,
        400, "stream_options", NULL},
    {"{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 0,
        400, "stop", NULL},
    {"{\"prompt\": \"x\", \"stop\": [1]}", 0, 400, "stop", NULL},
    {"{\"prompt\": \"x\", \"stop\": \"0123456789012345678901234567890123"
     "456789012345678901234567890123456789\"}",
        0, 400, "stop", NULL},
    {"{\"prompt\": \"x\", \"n\": 17}", 0, 400, "n", NULL},
    {"{\"prompt\": \"x\", \"n\": 0}", 0, 400, "n", NULL},
    {"{\"prompt\": \"x\", \"best_of\": 3}", 0, 400, "best_of", "unsupported"},
    {"{\"prompt\": \"x\", \"echo\": true}", 0, 400, "echo", "unsupported"},
    {"{\"prompt\": \"x\", \"logprobs\": 21}", 0, 400, "logprobs", NULL},
    {"{\"prompt\": \"x\", \"logprobs\": true}", 0, 400, "logprobs", NULL},
    {"{\"prompt\": \"x\", \"suffix\": \"y\"}", 0, 400, "suffix", "unsupported"},
    {"{\"prompt\": \"x\", \"presence_penalty\": 2.5}", 0, 400,
        "presence_penalty", NULL},
    {"{\"prompt\": \"x\", \"repetition_penalty\": 0}", 0, 400,
        "repetition_penalty", NULL},
    {"{\"prompt\": \"x\", \"min_p\": 1.5}", 0, 400, "min_p", NULL},
    {"{\"prompt\": \"x\", \"colour\": \"red\"}", 0, 400, "", NULL},
    {"{\"prompt\": \"x\", \"messages\": []}", 0, 400, "", NULL},
    {"{\"prompt\": \"x\", \"model\": 3}", 0, 400, "model", NULL},
    {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 1, 400, "",
        "chat_template_missing"},
    {"{\"messages\": []}", 1, 400, "messages", NULL},
    {"{\"messages\": \"hi\"}", 1, 400, "messages", NULL},
    {"{\"prompt\": \"x\"}", 1, 400, "", NULL},
};

static void
check_error_json(const struct medha_oai_error *e)
{
	size_t len = 0;
	char *js = medha_oai_error_json(e, &len);
	json_error_t err;
	json_t *o, *x;
	char *msg = medha_utf8_fix(e->message, strlen(e->message), NULL);

	assert_non_null(js);
	assert_int_equal(len, strlen(js));
	assert_non_null(o = json_loads(js, 0, &err));
	assert_true(json_is_object(x = json_object_get(o, "error")));
	assert_string_equal(json_string_value(json_object_get(x, "message")),
	    msg);
	free(msg);
	assert_true(json_is_string(json_object_get(x, "type")));
	if (e->param[0] == '\0')
		assert_true(json_is_null(json_object_get(x, "param")));
	else
		assert_string_equal(json_string_value(
		                        json_object_get(x, "param")),
		    e->param);
	if (e->code == NULL)
		assert_true(json_is_null(json_object_get(x, "code")));
	else
		assert_string_equal(json_string_value(
		                        json_object_get(x, "code")),
		    e->code);
	json_decref(o);
	free(js);
}

static void
test_refused(void **state)
{
	struct medha_oai_req q;
	struct medha_oai_error e;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&e, 0, sizeof(e));
		int rc = parse(&q, bad[i].body, bad[i].chat, NULL, &e);
		if (rc != bad[i].status || strcmp(e.param, bad[i].param) != 0 ||
		    (bad[i].code == NULL) != (e.code == NULL) ||
		    (e.code != NULL && strcmp(e.code, bad[i].code) != 0))
			fail_msg("%s: %d param \"%s\" code %s (%s)",
			    bad[i].body, rc, e.param, e.code ? e.code : "null",
			    e.message);
		assert_string_equal(e.type, "invalid_request_error");
		assert_true(e.message[0] != '\0');
		check_error_json(&e);
		/* nothing is owned after a refusal */
		assert_null(q.spec.prompt);
		assert_null(q.spec.prompt_ids);
		assert_int_equal(q.spec.n_stop, 0);
	}
}

/* A byte-level BPE tokenizer with ChatML's special tokens, no template. */
static struct medha_tok *
chatml_tok(void)
{
	static const char *const toks[] = {"<|endoftext|>", "<|im_start|>",
	    "<|im_end|>", "a", "b", "c", "\xc4\x8a", "ab"};
	static const int32_t types[] = {3, 3, 3, 1, 1, 1, 1, 1};
	static const char *const merges[] = {"a b"};
	struct medha_gguf_writer *w;
	struct medha_gguf *g;
	struct medha_tok *t = NULL;
	char path[64], why[256];
	int fd;

	snprintf(path, sizeof(path), "/tmp/http_test.XXXXXX");
	assert_true((fd = mkstemp(path)) >= 0);
	close(fd);
	assert_int_equal(medha_gguf_writer_open(&w, path), 0);
	medha_gguf_writer_add_str(w, "general.architecture", "llama");
	medha_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
	medha_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 8);
	medha_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, 8);
	medha_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, 1);
	medha_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
	assert_int_equal(medha_gguf_writer_close(w), 0);
	assert_int_equal(medha_gguf_open(&g, path, why, sizeof(why)), 0);
	unlink(path);
	if (medha_tok_open(&t, g, why, sizeof(why)) != 0)
		fail_msg("tokenizer: %s", why);
	medha_gguf_close(g);
	return t;
}

static void
test_chat(void **state)
{
	struct medha_tok *t = chatml_tok();
	struct medha_oai_req q;
	struct medha_oai_error e;

	(void)state;
	assert_int_equal(parse(&q,
	                     "{\"model\": \"m\", \"messages\": ["
	                     "{\"role\": \"developer\", \"content\": \"Be "
	                     "brief.\"},"
	                     "{\"role\": \"user\", \"content\": [{\"type\": "
	                     "\"text\", \"text\": \"Hi\"}, {\"type\": "
	                     "\"text\", \"text\": \"there\"}]},"
	                     "{\"role\": \"assistant\", \"content\": \"Yo\"},"
	                     "{\"role\": \"user\", \"content\": \"2+2?\"}], "
	                     "\"max_completion_tokens\": 9}",
	                     1, t, &e),
	    0);
	assert_string_equal(q.spec.prompt,
	    "<|im_start|>system\nBe brief.<|im_end|>\n"
	    "<|im_start|>user\nHi\nthere<|im_end|>\n"
	    "<|im_start|>assistant\nYo<|im_end|>\n"
	    "<|im_start|>user\n2+2?<|im_end|>\n"
	    "<|im_start|>assistant\n");
	assert_true(q.chat && q.max_tokens_set);
	assert_int_equal(q.spec.max_tokens, 9);
	medha_oai_req_clear(&q);

	/* no max_tokens: left for the front door to fill in */
	assert_int_equal(parse(&q,
	                     "{\"messages\": [{\"role\": \"user\", "
	                     "\"content\": \"x\"}]}",
	                     1, t, &e),
	    0);
	assert_false(q.max_tokens_set);
	medha_oai_req_clear(&q);

	static const char *const refused[] = {
	    "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}",
	    "{\"messages\": [{\"content\": \"x\"}]}",
	    "{\"messages\": [\"x\"]}",
	    "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
	    "{\"messages\": [{\"role\": \"user\"}]}",
	    "{\"messages\": [{\"role\": \"user\", \"content\": null}]}",
	    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
	    "\"max_completion_tokens\": 0}",
	    "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
	    "\"image_url\"}]}]}",
	    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
	    "\"suffix\": \"y\"}",
	    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
	    "\"tools\": [{}]}",
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		if (parse(&q, refused[i], 1, t, &e) != 400)
			fail_msg("not refused: %s", refused[i]);
		assert_string_equal(e.type, "invalid_request_error");
		check_error_json(&e);
	}
	medha_tok_close(t);
}

static void
test_error_mapping(void **state)
{
	struct medha_oai_error e;
	struct medha_record rec;

	(void)state;
	medha_oai_error_submit(&e, MEDHA_ENOSPACE,
	    "overloaded: 5 requests in flight");
	assert_int_equal(e.status, 429);
	assert_string_equal(e.type, "rate_limit_error");
	medha_oai_error_submit(&e, MEDHA_ENOSPACE, "no replica is ready");
	assert_int_equal(e.status, 503);
	assert_string_equal(e.message, "no replica is ready");
	medha_oai_error_submit(&e, MEDHA_EUNSUP,
	    "shutting down: not accepting requests");
	assert_int_equal(e.status, 503);
	medha_oai_error_submit(&e, MEDHA_EFORMAT, "submit: request.id");
	assert_int_equal(e.status, 400);
	check_error_json(&e);

	memset(&rec, 0, sizeof(rec));
	rec.status = MEDHA_STATUS_REJECTED;
	snprintf(rec.reason, sizeof(rec.reason),
	    "9 prompt + 9000 output tokens exceed the model's context of "
	    "8192");
	medha_oai_error_record(&e, &rec);
	assert_int_equal(e.status, 400);
	/* held at the router until it gave up: the service's fault */
	snprintf(rec.reason, sizeof(rec.reason),
	    "no replica ready within 30 s");
	medha_oai_error_record(&e, &rec);
	assert_int_equal(e.status, 503);
	snprintf(rec.reason, sizeof(rec.reason),
	    "9 prompt + 9000 output tokens exceed the model's context of "
	    "8192");
	medha_oai_error_record(&e, &rec);
	assert_string_equal(e.code, "context_length_exceeded");
	rec.status = MEDHA_STATUS_REJECTED;
	snprintf(rec.reason, sizeof(rec.reason), "the prompt is empty");
	medha_oai_error_record(&e, &rec);
	assert_int_equal(e.status, 400);
	assert_null(e.code);
	/* the wire's field (prompt_ids) in the API's words (prompt) */
	snprintf(rec.reason, sizeof(rec.reason),
	    "prompt_ids[1] = 99999999: outside the vocabulary (49152)");
	medha_oai_error_record(&e, &rec);
	assert_int_equal(e.status, 400);
	assert_string_equal(e.param, "prompt");
	assert_string_equal(e.message,
	    "prompt[1] = 99999999: outside the vocabulary (49152)");
	medha_oai_error_submit(&e, MEDHA_EINVAL,
	    "prompt_ids[0] = 70000: outside the vocabulary (49152)");
	assert_int_equal(e.status, 400);
	assert_string_equal(e.param, "prompt");
	check_error_json(&e);
	rec.status = MEDHA_STATUS_FAILED;
	snprintf(rec.reason, sizeof(rec.reason),
	    "replica ipc:///r1: silent for too long");
	medha_oai_error_record(&e, &rec);
	assert_int_equal(e.status, 500);
	assert_non_null(strstr(e.message, "ipc:///r1"));
	rec.status = MEDHA_STATUS_CANCELLED;
	medha_oai_error_record(&e, &rec);
	assert_int_equal(e.status, 503);
	/* a reason with bad bytes still gives valid JSON */
	medha_oai_error_set(&e, 400, "invalid_request_error", NULL, "x",
	    "bad \xff\xfe bytes");
	check_error_json(&e);
}

static void
test_shapes(void **state)
{
	struct medha_oai_head hd = {"cmpl-1", "m.gguf", 1700000000, 0, 0, NULL,
	    NULL, 0, NULL, 0};
	struct medha_record rec;
	json_error_t err;
	json_t *o, *c;
	size_t n = 0;
	char *s;

	(void)state;
	memset(&rec, 0, sizeof(rec));
	rec.prompt_tokens = 5;
	rec.output_tokens = 3;
	rec.cached_tokens = 4;
	rec.finish_reason = MEDHA_FINISH_LENGTH;
	s = medha_oai_response(&hd, " Paris\xc3", 7, &rec, &n);
	assert_non_null(o = json_loadb(s, n, 0, &err));
	assert_string_equal(json_string_value(json_object_get(o, "object")),
	    "text_completion");
	assert_int_equal(json_integer_value(json_object_get(o, "created")),
	    1700000000);
	c = json_array_get(json_object_get(o, "choices"), 0);
	assert_string_equal(json_string_value(json_object_get(c, "text")),
	    " Paris\xef\xbf\xbd");
	assert_string_equal(json_string_value(
	                        json_object_get(c, "finish_reason")),
	    "length");
	assert_int_equal(json_integer_value(
	                     json_object_get(json_object_get(o, "usage"),
	                         "total_tokens")),
	    8);
	assert_int_equal(json_integer_value(json_object_get(
	                     json_object_get(json_object_get(o, "usage"),
	                         "prompt_tokens_details"),
	                     "cached_tokens")),
	    4);
	json_decref(o);
	free(s);

	/* n choices: index i, choice i's text, usage as given */
	{
		struct medha_record r2 = rec, *recs[2] = {&rec, &r2};
		rec.text = "a";
		r2.text = "b";
		s = medha_oai_response_n(&hd, recs, 2, &rec, &n);
		rec.text = NULL;
		assert_non_null(o = json_loadb(s, n, 0, &err));
		c = json_object_get(o, "choices");
		assert_int_equal(json_array_size(c), 2);
		assert_int_equal(json_integer_value(json_object_get(
		                     json_array_get(c, 1), "index")),
		    1);
		assert_string_equal(json_string_value(json_object_get(
		                        json_array_get(c, 1), "text")),
		    "b");
		json_decref(o);
		free(s);
	}

	hd.chat = 1;
	hd.id = "chatcmpl-1";
	rec.finish_reason = MEDHA_FINISH_STOP;
	s = medha_oai_response(&hd, "4", 1, &rec, &n);
	assert_non_null(o = json_loadb(s, n, 0, &err));
	assert_string_equal(json_string_value(json_object_get(o, "object")),
	    "chat.completion");
	c = json_array_get(json_object_get(o, "choices"), 0);
	assert_string_equal(json_string_value(
	                        json_object_get(json_object_get(c, "message"),
	                            "content")),
	    "4");
	assert_string_equal(json_string_value(
	                        json_object_get(c, "finish_reason")),
	    "stop");
	json_decref(o);
	free(s);

	/* chunks: the role chunk, a text chunk, the usage chunk */
	s = medha_oai_chunk(&hd, "", 0, 1, 0, NULL, 1, &n);
	assert_memory_equal(s, "data: {", 7);
	assert_memory_equal(s + n - 2, "\n\n", 2);
	assert_non_null(o = json_loadb(s + 6, n - 8, 0, &err));
	assert_string_equal(json_string_value(json_object_get(o, "object")),
	    "chat.completion.chunk");
	assert_true(json_is_null(json_object_get(o, "usage")));
	c = json_array_get(json_object_get(o, "choices"), 0);
	assert_string_equal(json_string_value(
	                        json_object_get(json_object_get(c, "delta"),
	                            "role")),
	    "assistant");
	assert_true(json_is_null(json_object_get(c, "finish_reason")));
	json_decref(o);
	free(s);
	s = medha_oai_chunk(&hd, "hi", 2, 0, MEDHA_FINISH_STOP, NULL, 0, &n);
	assert_non_null(o = json_loadb(s + 6, n - 8, 0, &err));
	assert_null(json_object_get(o, "usage"));
	c = json_array_get(json_object_get(o, "choices"), 0);
	assert_string_equal(json_string_value(
	                        json_object_get(json_object_get(c, "delta"),
	                            "content")),
	    "hi");
	assert_string_equal(json_string_value(
	                        json_object_get(c, "finish_reason")),
	    "stop");
	json_decref(o);
	free(s);
	s = medha_oai_chunk(&hd, NULL, 0, 0, 0, &rec, 1, &n);
	assert_non_null(o = json_loadb(s + 6, n - 8, 0, &err));
	assert_int_equal(json_array_size(json_object_get(o, "choices")), 0);
	assert_int_equal(json_integer_value(
	                     json_object_get(json_object_get(o, "usage"),
	                         "prompt_tokens")),
	    5);
	assert_int_equal(json_integer_value(json_object_get(
	                     json_object_get(json_object_get(o, "usage"),
	                         "prompt_tokens_details"),
	                     "cached_tokens")),
	    4);
	json_decref(o);
	free(s);
}

/*
 * Logprobs' names from the bytes the replica sent with them, no
 * tokenizer here: whole characters as text, a character split across
 * tokens in OpenAI's "bytes:\\x.." form, text_offset the character its
 * first byte is in, "token_id:N" where no bytes came.
 */
static void
test_logprob_names(void **state)
{
	struct medha_oai_head hd = {"cmpl-1", "m.gguf", 1700000000, 0, 1, NULL,
	    NULL, 0, NULL, 0};
	static const char *const piece[] = {"A", "\xe6\x9d", "\xb1"};
	static const char *const want[] = {"A", "bytes:\\xe6\\x9d",
	    "bytes:\\xb1", "token_id:13"};
	static const int off[] = {0, 1, 1, 2};
	int32_t ids[] = {10, 11, 12, 13};
	struct medha_token_lp lps[4];
	struct medha_record rec;
	json_error_t err;
	json_t *o, *lp, *x;
	size_t n = 0;
	char *s;

	(void)state;
	memset(lps, 0, sizeof(lps));
	for (int i = 0; i < 4; i++) {
		lps[i].logprob = -0.5f;
		lps[i].ntop = 1;
		lps[i].top[0] = (struct medha_logprob){20 + i, -1.0f};
		if (i < 3)
			assert_int_equal(medha_token_lp_name(&lps[i], piece[i],
			                     strlen(piece[i])),
			    0);
	}
	assert_int_equal(medha_token_lp_name(&lps[0], "\xe6", 1), 0);
	memset(&rec, 0, sizeof(rec));
	rec.token_ids = ids;
	rec.logprobs = lps;
	rec.n_token_ids = 4;
	rec.output_tokens = 4;
	s = medha_oai_response(&hd, "A\xe6\x9d\xb1", 4, &rec, &n);
	assert_non_null(o = json_loadb(s, n, 0, &err));
	lp = json_object_get(json_array_get(json_object_get(o, "choices"), 0),
	    "logprobs");
	for (int i = 0; i < 4; i++) {
		assert_string_equal(json_string_value(json_array_get(
		                        json_object_get(lp, "tokens"), i)),
		    want[i]);
		assert_int_equal(json_integer_value(json_array_get(
		                     json_object_get(lp, "text_offset"), i)),
		    off[i]);
	}
	x = json_array_get(json_object_get(lp, "top_logprobs"), 0);
	assert_non_null(json_object_get(x, "bytes:\\xe6"));
	x = json_array_get(json_object_get(lp, "top_logprobs"), 1);
	assert_non_null(json_object_get(x, "token_id:21"));
	json_decref(o);
	free(s);

	/* chat: the bytes arrays are the replica's bytes */
	hd.chat = 1;
	s = medha_oai_response(&hd, "A\xe6\x9d\xb1", 4, &rec, &n);
	assert_non_null(o = json_loadb(s, n, 0, &err));
	lp = json_object_get(json_object_get(json_array_get(json_object_get(o,
	                                                        "choices"),
	                                         0),
	                         "logprobs"),
	    "content");
	x = json_array_get(lp, 1);
	assert_string_equal(json_string_value(json_object_get(x, "token")),
	    want[1]);
	assert_int_equal(json_array_size(json_object_get(x, "bytes")), 2);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(x,
	                                                       "bytes"),
	                     0)),
	    0xe6);
	x = json_array_get(json_object_get(json_array_get(lp, 0),
	                       "top_logprobs"),
	    0);
	assert_string_equal(json_string_value(json_object_get(x, "token")),
	    "bytes:\\xe6");
	json_decref(o);
	free(s);
}

static void
test_utf8(void **state)
{
	static const struct {
		const char *in;
		size_t len;
		const char *out;
	} c[] = {
	    {"plain", 5, "plain"},
	    {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9,
	        "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"},
	    {"a\xffz", 3, "a\xef\xbf\xbdz"},
	    {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"}, /* overlong */
	    {"\xed\xa0\x80", 3,
	        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
	    {"\xe2\x82", 2, "\xef\xbf\xbd\xef\xbf\xbd"}, /* cut short */
	    {"a\0b", 3, NULL},
	};
	size_t n;

	(void)state;
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		char *s = medha_utf8_fix(c[i].in, c[i].len, &n);
		assert_non_null(s);
		if (c[i].out == NULL) {
			assert_int_equal(n, 3);
			assert_memory_equal(s, "a\0b", 3);
		} else {
			assert_int_equal(n, strlen(c[i].out));
			assert_string_equal(s, c[i].out);
		}
		free(s);
	}
}

/* Characters in valid UTF-8 s. */
static int64_t
count_chars(const char *s, size_t n)
{
	int64_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xc0) != 0x80;
	return k;
}

/*
 * A text fed in pieces (split at every pair of places): each piece's
 * whole part made valid, joined with the flushed rest, is the whole
 * text made valid; every part is whole characters (valid as it is),
 * and the characters counted are those of the whole.
 */
static void
test_utf8_feed(void **state)
{
	static const char *const texts[] = {
	    "\xe6\x9d\xb1\xe4\xba\xac\xe3\x80\x81", /* 東京、 */
	    "\xd0\x9f\xd1\x80\xd0\xb8 \xf0\x9f\x8d\x95!",
	    "a\xffz\xe2\x82\xc3\xa9\xf0\x9f\x98", /* bad, cut */
	    "\xe0\x80\xaf\xed\xa0\x80\xf4\x90\x80\x80\xc2",
	};
	char out[64], part[64];
	size_t n;

	(void)state;
	for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
		size_t len = strlen(texts[t]);
		char *want = medha_utf8_fix(texts[t], len, &n);
		assert_non_null(want);
		for (size_t a = 0; a <= len; a++)
			for (size_t b = a; b <= len; b++) {
				struct medha_utf8_acc acc = {0};
				size_t cut[] = {0, a, b, len}, o = 0, w;
				for (int k = 0; k < 3; k++) {
					w = medha_utf8_feed(&acc, texts[t] + cut[k],
					    cut[k + 1] - cut[k], part);
					char *f = medha_utf8_fix(part, w, &w);
					assert_non_null(f);
					memcpy(out + o, f, w);
					o += w;
					free(f);
					assert_true(acc.n >= 0 && acc.n <= 3);
				}
				w = medha_utf8_flush(&acc, part);
				char *f = medha_utf8_fix(part, w, &w);
				memcpy(out + o, f, w);
				o += w;
				free(f);
				assert_int_equal(o, n);
				assert_memory_equal(out, want, n);
				assert_int_equal(acc.chars, count_chars(want, n));
			}
		free(want);
	}
	/* a piece is held only while it can still become a character */
	{
		struct medha_utf8_acc acc = {0};
		assert_int_equal(medha_utf8_feed(&acc, "\xe6\x9d", 2, part), 0);
		assert_int_equal(acc.n, 2);
		assert_int_equal(medha_utf8_feed(&acc, "\xb1", 1, part), 3);
		assert_memory_equal(part, "\xe6\x9d\xb1", 3);
		assert_int_equal(acc.chars, 1);
		/* E0 80 can never be whole: out at once, 2 characters */
		assert_int_equal(medha_utf8_feed(&acc, "\xe0\x80", 2, part), 2);
		assert_int_equal(acc.n, 0);
		assert_int_equal(acc.chars, 3);
	}
}

static void
test_metrics(void **state)
{
	struct medha_router_metrics m;
	struct medha_router_replica_stat rep[2];
	struct medha_http_stats st;
	size_t len = 0;
	char *s;

	(void)state;
	memset(&m, 0, sizeof(m));
	memset(rep, 0, sizeof(rep));
	memset(&st, 0, sizeof(st));
	m.ready = 1;
	snprintf(m.model, sizeof(m.model), "smol.gguf");
	m.requests[MEDHA_STATUS_OK] = 3;
	m.finished[MEDHA_FINISH_STOP] = 2;
	m.finished[MEDHA_FINISH_LENGTH] = 1;
	medha_hist_add(&m.e2e, medha_router_e2e_le, 0.7);
	medha_hist_add(&m.queue, medha_router_ttft_le, 0.02);
	m.prompt_tokens = 30;
	medha_hist_add(&m.ttft, medha_router_ttft_le, 0.02);
	medha_hist_add(&m.ttft, medha_router_ttft_le, 0.3);
	medha_hist_add(&m.ttft, medha_router_ttft_le, 1000);
	rep[0] = (struct medha_router_replica_stat){.url = "ipc:///a\"b",
	    .up = 1,
	    .ready = 1,
	    .kv_blocks = 100,
	    .kv_used = 7,
	    .pending = 4,
	    .queue = 1};
	rep[1] = (struct medha_router_replica_stat){.url = "tcp://h:1"};
	m.nreplicas = 2;
	m.rep = rep;
	st.responses[0] = 5;                /* 200 */
	st.responses[MEDHA_HTTP_CODES] = 1; /* other */
	s = medha_oai_metrics(&m, &st, &len);
	assert_non_null(s);
	assert_int_equal(len, strlen(s));
	assert_non_null(strstr(s, "# TYPE medha_requests_total counter\n"));
	assert_non_null(strstr(s,
	    "medha_requests_total{model_name=\"smol.gguf\",status=\"ok\"} "
	    "3\n"));
	assert_non_null(strstr(s,
	    "medha_requests_finished_total{model_name=\"smol.gguf\","
	    "finish_reason=\"stop\"} 2\n"));
	assert_non_null(strstr(s,
	    "medha_requests_finished_total{model_name=\"smol.gguf\","
	    "finish_reason=\"length\"} 1\n"));
	assert_non_null(
	    strstr(s, "# TYPE medha_e2e_request_latency_seconds histogram\n"));
	assert_non_null(strstr(s,
	    "medha_request_queue_time_seconds_bucket{model_name=\"smol.gguf\","
	    "le=\"0.025\"} 1\n"));
	assert_non_null(strstr(s,
	    "medha_e2e_request_latency_seconds_bucket{model_name=\"smol.gguf\","
	    "le=\"0.5\"} 0\n"));
	assert_non_null(strstr(s,
	    "medha_e2e_request_latency_seconds_bucket{model_name=\"smol.gguf\","
	    "le=\"1\"} 1\n"));
	assert_non_null(
	    strstr(s, "# TYPE medha_time_to_first_token_seconds histogram\n"));
	assert_non_null(strstr(s,
	    "medha_time_to_first_token_seconds_bucket{model_name=\"smol.gguf\",le=\"0.025\"} 1\n"));
	assert_non_null(strstr(s,
	    "medha_time_to_first_token_seconds_bucket{model_name=\"smol.gguf\",le=\"0.5\"} 2\n"));
	assert_non_null(strstr(s,
	    "medha_time_to_first_token_seconds_bucket{model_name=\"smol.gguf\",le=\"60\"} 2\n"));
	assert_non_null(strstr(s,
	    "medha_time_to_first_token_seconds_bucket{model_name=\"smol.gguf\",le=\"+Inf\"} 3\n"));
	assert_non_null(
	    strstr(s, "medha_time_to_first_token_seconds_count{model_name=\"smol.gguf\"} 3\n"));
	assert_non_null(
	    strstr(s, "medha_kv_blocks_used{replica=\"ipc:///a\\\"b\"} 7\n"));
	assert_non_null(
	    strstr(s, "medha_replica_up{replica=\"tcp://h:1\"} 0\n"));
	assert_non_null(strstr(s, "medha_requests_queued 1\n"));
	assert_non_null(strstr(s, "medha_requests_running 3\n"));
	assert_non_null(
	    strstr(s, "medha_http_responses_total{code=\"200\"} 5\n"));
	assert_non_null(
	    strstr(s, "medha_http_responses_total{code=\"other\"} 1\n"));
	/* every line is a comment or "name[{labels}] value" */
	for (char *l = s; *l != '\0';) {
		char *e = strchr(l, '\n');
		assert_non_null(e);
		if (*l != '#')
			assert_non_null(memchr(l, ' ', (size_t)(e - l)));
		l = e + 1;
	}
	free(s);
	/* without the router: only the front door's own figures */
	s = medha_oai_metrics(NULL, &st, &len);
	assert_non_null(strstr(s, "medha_http_requests_in_progress 0\n"));
	assert_null(strstr(s, "medha_requests_total"));
	free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_fields),
	    cmocka_unit_test(test_cache_salt),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_chat),
	    cmocka_unit_test(test_error_mapping),
	    cmocka_unit_test(test_shapes),
	    cmocka_unit_test(test_logprob_names),
	    cmocka_unit_test(test_utf8),
	    cmocka_unit_test(test_utf8_feed),
	    cmocka_unit_test(test_metrics),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
