/*
 * tok_file.c: the tokenizer of a GGUF file named by its path, with the
 * model's context length, for the front ends that tokenize text but run
 * no model (the router, its HTTP front door: tokenizer.h).
 */
#include "tok/tokenizer.h"

#include <stdio.h>

int
medha_tok_open_file(struct medha_tok **t, const char *path, int64_t *ctx_len,
    char *why, size_t whylen)
{
	struct medha_gguf *g;
	char key[128], arch[64], w[256];
	int rc;

	*t = NULL;
	*ctx_len = 0;
	if ((rc = medha_gguf_open(&g, path, w, sizeof(w))) == 0) {
		rc = medha_tok_open(t, g, w, sizeof(w));
		if (rc == 0 &&
		    medha_gguf_get_strbuf(g, "general.architecture", arch,
		        sizeof(arch)) == 0) {
			snprintf(key, sizeof(key), "%s.context_length", arch);
			if (medha_gguf_get_i64(g, key, ctx_len) != 0)
				*ctx_len = 0;
		}
		medha_gguf_close(g);
	}
	if (rc != 0 && why != NULL)
		snprintf(why, whylen, "%s: %s", path, w);
	return rc;
}
