/*
 * fuzz-gguf.c: a libFuzzer target for the GGUF reader (libcore/model/gguf*.c)
 * and the dequantizers (libcore/model/quant.c). Each input is opened from
 * memory; on success every metadata value is read through the typed
 * lookups (arrays element by element) and the first row of every tensor
 * is dequantized. The reader must refuse bad input with a reason and
 * never read out of bounds: built with ASan and UBSan, any crash is a bug.
 *
 *	sh contrib/fuzz-gguf.sh          # builds, seeds, runs FUZZ_SECONDS
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

static int
each_str(void *arg, uint64_t i, const char *s, size_t len)
{
	size_t *sum = arg;

	(void)i;
	if (len > 0)
		*sum += (unsigned char)s[0] + (unsigned char)s[len - 1];
	return 0;
}

/* Read the value of one key through every accessor that fits it. */
static void
walk_kv(const struct medha_gguf *g, size_t i)
{
	const char *k, *s;
	char key[256], buf[64];
	size_t kl, len, sum = 0;
	uint64_t u, n;
	int64_t v;
	double d;
	int type, et;
	float *f;
	int32_t *in;

	if (medha_gguf_kv_key(g, i, &k, &kl, &type) != 0)
		abort();
	if (kl >= sizeof(key) || memchr(k, '\0', kl) != NULL)
		return;
	memcpy(key, k, kl);
	key[kl] = '\0';
	if (medha_gguf_find(g, key) < 0)
		abort(); /* the index must find every key */
	(void)medha_gguf_get_u64(g, key, &u);
	(void)medha_gguf_get_i64(g, key, &v);
	(void)medha_gguf_get_f64(g, key, &d);
	(void)medha_gguf_get_str(g, key, &s, &len);
	(void)medha_gguf_get_strbuf(g, key, buf, sizeof(buf));
	if (medha_gguf_arr_len(g, key, &n, &et) != 0)
		return;
	(void)medha_gguf_arr_strings(g, key, each_str, &sum);
	if (n > (1u << 20))
		return;
	f = malloc((size_t)(n + 1) * sizeof(*f));
	in = malloc((size_t)(n + 1) * sizeof(*in));
	if (f != NULL && in != NULL) {
		(void)medha_gguf_arr_f32(g, key, f, n);
		(void)medha_gguf_arr_i32(g, key, in, n);
	}
	free(f);
	free(in);
}

static void
walk_tensor(const struct medha_gguf *g, uint64_t i)
{
	const struct medha_tensor *t = medha_gguf_tensor_at(g, i), *u;
	char why[256];
	float *row;

	if (t == NULL)
		abort();
	if (medha_gguf_tensor_get(g, t->name) != t)
		abort(); /* names are unique and all indexed */
	if (medha_gguf_tensor_lookup(g, t->name, &u, why, sizeof(why)) != 0)
		return;
	/* a row's bytes are within nbytes, and nbytes within the file */
	if (medha_ggml_row_bytes(t->type, t->ne[0]) > t->nbytes)
		abort();
	if ((row = malloc((size_t)t->ne[0] * sizeof(*row))) == NULL)
		return;
	if (medha_dequant_row(t->type, t->data, row, t->ne[0]) != 0)
		abort();
	free(row);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct medha_gguf *g;
	char why[512];
	uint64_t i;
	size_t k;

	why[0] = '\0';
	if (medha_gguf_open_mem(&g, data, size, why, sizeof(why)) != 0) {
		if (why[0] == '\0')
			abort(); /* every refusal says why */
		return 0;
	}
	for (k = 0; k < medha_gguf_kv_count(g); k++)
		walk_kv(g, k);
	for (i = 0; i < medha_gguf_tensor_count(g); i++)
		walk_tensor(g, i);
	medha_gguf_close(g);
	return 0;
}
