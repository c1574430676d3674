/*
 * fuzz-http.c: a libFuzzer target for the HTTP front door's request
 * parser (libcore/serve/http/parse.c): the body of POST /v1/completions or,
 * when the first byte is odd, /v1/chat/completions (the rest of the
 * input is the body). With MEDHA_MODEL set to a GGUF, chat bodies are
 * formatted with its chat template; without, chat is refused (400).
 * A refusal must be a 4xx with a message whose error JSON is valid; a
 * request taken must have a prompt (text that is valid UTF-8, or token
 * ids), max_tokens in range and sampling parameters in OpenAI's ranges.
 * Built with ASan and UBSan, any crash, leak or abort is a bug.
 *
 *	sh contrib/fuzz-http.sh          # builds, seeds, runs FUZZ_SECONDS
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "tok/tokenizer.h"
#include "serve/http/http.h"

static struct medha_tok *tok;
static struct medha_gguf *gguf;

static void
let_go(void)
{
	medha_tok_close(tok);
	medha_gguf_close(gguf);
}

/* Whether s is valid UTF-8 to its NUL. */
static int
utf8_ok(const char *s)
{
	size_t n = strlen(s), i = 0, k;

	while (i < n) {
		if ((k = medha_utf8_len(s + i, n - i)) == 0)
			return 0;
		i += k;
	}
	return 1;
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *path = getenv("MEDHA_MODEL");
	char why[256];

	(void)argc;
	(void)argv;
	if (path == NULL || *path == '\0')
		return 0;
	if (medha_gguf_open(&gguf, path, why, sizeof(why)) != 0 ||
	    medha_tok_open(&tok, gguf, why, sizeof(why)) != 0) {
		fprintf(stderr, "fuzz-http: %s: %s\n", path, why);
		exit(1);
	}
	atexit(let_go); /* before the leak check */
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct medha_oai_req q;
	struct medha_oai_error e;
	int chat, rc;

	if (size == 0)
		return 0;
	chat = data[0] & 1;
	memset(&e, 0, sizeof(e));
	rc = medha_oai_parse(&q, (const char *)data + 1, size - 1, chat, tok,
	    &e);
	if (rc != 0) {
		size_t len;
		char *js;
		json_t *v;
		if (rc < 400 || rc > 499 || e.status != rc ||
		    e.message[0] == '\0' || e.type == NULL)
			abort(); /* a refusal is a 4xx that says why */
		if ((js = medha_oai_error_json(&e, &len)) == NULL)
			return 0; /* out of memory */
		if ((v = json_loadb(js, len, 0, NULL)) == NULL)
			abort(); /* the error body is JSON */
		json_decref(v);
		free(js);
		return 0;
	}
	const struct medha_reqspec *s = &q.spec;
	if (s->prompt == NULL && s->prompt_ids == NULL)
		abort(); /* a prompt, text or ids */
	if (s->prompt_ids != NULL && s->prompt_tokens < 1)
		abort();
	if (s->prompt != NULL && !utf8_ok(s->prompt))
		abort();
	if (s->max_tokens < 0 || s->max_tokens > MEDHA_OAI_MAX_TOKENS)
		abort();
	if (!(s->sampling.temp >= 0 && s->sampling.temp <= 2) ||
	    !(s->sampling.top_p >= 0 && s->sampling.top_p <= 1))
		abort();
	if (s->n_stop < 0 || s->n_stop > MEDHA_STOP_MAX)
		abort();
	for (int i = 0; i < s->n_stop; i++)
		if (s->stop[i] == NULL || strlen(s->stop[i]) > MEDHA_STOP_LEN)
			abort();
	medha_oai_req_clear(&q);
	return 0;
}
