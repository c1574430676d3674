/*
 * gguf-dump.c: a small tool over libcore's GGUF reader, writer and
 * dequantizers, made for the reference checks (tests/ref/gguf_check.py
 * compares its output with the gguf Python package) and for looking into
 * a model by hand.
 *
 *	gguf-dump FILE            list tensors: name, type, dims, offset, bytes
 *	gguf-dump -k FILE         list metadata: key, type, value
 *	gguf-dump -a KEY FILE     print the elements of an array, one a line
 *	gguf-dump -t NAME FILE    dequantize a tensor: float32 LE on stdout
 *	gguf-dump -q TYPE         quantize float32 LE from stdin to TYPE
 *	gguf-dump -w FILE         write a small example model (fuzz seeds)
 *
 * Strings are printed with bytes below 0x20, 0x7f and backslash as \xHH.
 * Built by tests/sh/gguf-ref.sh and contrib/fuzz-gguf.sh with cc against
 * the libcore sources. Exit status 0, 1 on error, 2 on bad usage.
 */
#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"

static void
usage(void)
{
	fprintf(stderr,
	    "usage: gguf-dump [-k] [-a key] [-t name] file\n"
	    "       gguf-dump -q type\n"
	    "       gguf-dump -w file\n");
	exit(2);
}

static void
put_esc(const char *s, size_t n)
{
	size_t i;
	unsigned char c;

	for (i = 0; i < n; i++) {
		c = (unsigned char)s[i];
		if (c < 0x20 || c == 0x7f || c == '\\')
			printf("\\x%02x", c);
		else
			putchar(c);
	}
}

static int
print_str(void *arg, uint64_t i, const char *s, size_t len)
{
	(void)arg;
	(void)i;
	put_esc(s, len);
	putchar('\n');
	return 0;
}

static void
list_tensors(const struct medha_gguf *g)
{
	const struct medha_tensor *t;
	uint64_t i;
	int d;

	for (i = 0; i < medha_gguf_tensor_count(g); i++) {
		t = medha_gguf_tensor_at(g, i);
		printf("%s\t%s\t", t->name, medha_ggml_type_name(t->type));
		for (d = 0; d < t->n_dims; d++)
			printf("%s%lld", d > 0 ? "," : "", (long long)t->ne[d]);
		printf("\t%llu\t%zu\n",
		    (unsigned long long)(medha_gguf_data_offset(g) + t->offset),
		    t->nbytes);
	}
}

static void
list_kv(const struct medha_gguf *g)
{
	const char *k, *s;
	char key[4096];
	size_t i, kl, len;
	uint64_t u, n;
	int64_t v;
	double d;
	int type, et;

	for (i = 0; i < medha_gguf_kv_count(g); i++) {
		medha_gguf_kv_key(g, i, &k, &kl, &type);
		put_esc(k, kl);
		printf("\t%s\t", medha_gguf_type_name(type));
		if (kl >= sizeof(key) || memchr(k, '\0', kl) != NULL) {
			printf("?\n");
			continue;
		}
		memcpy(key, k, kl);
		key[kl] = '\0';
		if (type == MEDHA_GGUF_STRING) {
			medha_gguf_get_str(g, key, &s, &len);
			put_esc(s, len);
		} else if (type == MEDHA_GGUF_ARRAY) {
			medha_gguf_arr_len(g, key, &n, &et);
			printf("%s[%llu]", medha_gguf_type_name(et),
			    (unsigned long long)n);
		} else if (type == MEDHA_GGUF_FLOAT32) {
			medha_gguf_get_f64(g, key, &d);
			printf("%.9g", d);
		} else if (type == MEDHA_GGUF_FLOAT64) {
			medha_gguf_get_f64(g, key, &d);
			printf("%.17g", d);
		} else if (medha_gguf_get_i64(g, key, &v) == 0) {
			printf("%lld", (long long)v);
		} else if (medha_gguf_get_u64(g, key, &u) == 0) {
			printf("%llu", (unsigned long long)u);
		}
		putchar('\n');
	}
}

static int
print_array(const struct medha_gguf *g, const char *key)
{
	uint64_t n, i;
	int et, rc;
	float *f;
	int32_t *v;

	if ((rc = medha_gguf_arr_len(g, key, &n, &et)) != 0)
		return rc;
	if (et == MEDHA_GGUF_STRING)
		return medha_gguf_arr_strings(g, key, print_str, NULL);
	f = calloc((size_t)n + 1, sizeof(*f));
	v = calloc((size_t)n + 1, sizeof(*v));
	if (f == NULL || v == NULL)
		return MEDHA_ENOMEM;
	if (medha_gguf_arr_i32(g, key, v, n) == 0) {
		for (i = 0; i < n; i++)
			printf("%d\n", v[i]);
	} else if ((rc = medha_gguf_arr_f32(g, key, f, n)) == 0) {
		for (i = 0; i < n; i++)
			printf("%.9g\n", f[i]);
	}
	free(f);
	free(v);
	return rc;
}

static int
dequant(const struct medha_gguf *g, const char *name)
{
	const struct medha_tensor *t;
	char why[256];
	int64_t r, rows;
	size_t rowb;
	float *row;
	int rc;

	if ((rc = medha_gguf_tensor_lookup(g, name, &t, why, sizeof(why))) !=
	    0) {
		warnx("%s", why);
		return rc;
	}
	rows = t->ne[1] * t->ne[2] * t->ne[3];
	rowb = medha_ggml_row_bytes(t->type, t->ne[0]);
	if ((row = calloc((size_t)t->ne[0], sizeof(*row))) == NULL)
		return MEDHA_ENOMEM;
	for (r = 0; r < rows; r++) {
		if ((rc = medha_dequant_row(t->type,
		         (const char *)t->data + (size_t)r * rowb, row,
		         t->ne[0])) != 0)
			break;
		if (fwrite(row, sizeof(*row), (size_t)t->ne[0], stdout) !=
		    (size_t)t->ne[0]) {
			rc = MEDHA_EIO;
			break;
		}
	}
	free(row);
	return rc;
}

/* float32 rows from stdin, whole blocks, quantized to stdout. */
static int
quant(int type)
{
	int be = medha_ggml_block_elems(type),
	    bb = medha_ggml_block_bytes(type);
	float x[MEDHA_QK_K];
	unsigned char q[4 * MEDHA_QK_K];
	size_t n;
	int rc;

	if (be == 0)
		return MEDHA_EUNSUP;
	while ((n = fread(x, sizeof(x[0]), (size_t)be, stdin)) == (size_t)be) {
		if ((rc = medha_quant_row(type, x, q, be)) != 0)
			return rc;
		if (fwrite(q, 1, (size_t)bb, stdout) != (size_t)bb)
			return MEDHA_EIO;
	}
	return n == 0 && !ferror(stdin) ? 0 : MEDHA_EINVAL;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* A finite fp16 scale in about [-1, 1] at p. */
static void
put_scale(unsigned char *p)
{
	uint16_t h = medha_fp32_to_fp16(((float)(rnd() % 2001) - 1000) / 999);

	p[0] = (unsigned char)h;
	p[1] = (unsigned char)(h >> 8);
}

/* The example model: metadata of every kind, a tensor of every type. */
static int
write_example(const char *path)
{
	static const int types[] = {MEDHA_GGML_F32, MEDHA_GGML_F16,
	    MEDHA_GGML_BF16, MEDHA_GGML_Q8_0, MEDHA_GGML_Q4_0, MEDHA_GGML_Q4_1,
	    MEDHA_GGML_Q4_K, MEDHA_GGML_Q6_K};
	static const char *toks[] = {"<s>", "</s>", "a", " b", "\xe2\x96\x81"};
	static const float scores[] = {0, 0, -1.5f, -2.5f, -3};
	static const int32_t ttype[] = {3, 3, 1, 1, 1};
	unsigned char *data[8];
	struct medha_gguf_writer *w;
	float x[2 * MEDHA_QK_K];
	char name[32];
	int64_t ne[4];
	size_t nb, j;
	int i, b, rc;

	if ((rc = medha_gguf_writer_open(&w, path)) != 0)
		return rc;
	medha_gguf_writer_add_str(w, "general.architecture", "llama");
	medha_gguf_writer_add_u32(w, "general.alignment", 32);
	medha_gguf_writer_add_u32(w, "llama.block_count", 1);
	medha_gguf_writer_add_i32(w, "test.i32", -7);
	medha_gguf_writer_add_u64(w, "llama.context_length", 4096);
	medha_gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f);
	medha_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 1);
	medha_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 5);
	medha_gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", scores, 5);
	medha_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", ttype, 5);
	for (i = 0; i < 8; i++) {
		ne[0] = medha_ggml_block_elems(types[i]) == 1
		    ? 64
		    : medha_ggml_block_elems(types[i]);
		ne[1] = 2;
		ne[2] = ne[3] = 1;
		nb = 2 * medha_ggml_row_bytes(types[i], ne[0]);
		if ((data[i] = malloc(nb)) == NULL)
			return MEDHA_ENOMEM;
		for (j = 0; j < 2 * (size_t)ne[0]; j++)
			x[j] = ((float)(rnd() % 20001) - 10000) / 3000;
		if (medha_quant_row(types[i], x, data[i], 2 * ne[0]) != 0) {
			/* K-quants: random bytes with finite scales */
			for (j = 0; j < nb; j++)
				data[i][j] = (unsigned char)rnd();
			for (b = 0; b < 2; b++)
				if (types[i] == MEDHA_GGML_Q4_K) {
					put_scale(data[i] + 144 * b);
					put_scale(data[i] + 144 * b + 2);
				} else {
					put_scale(data[i] + 210 * b + 208);
				}
		}
		snprintf(name, sizeof(name), "t.%s",
		    medha_ggml_type_name(types[i]));
		medha_gguf_writer_add_tensor(w, name, types[i], 2, ne, data[i],
		    nb);
	}
	rc = medha_gguf_writer_close(w);
	for (i = 0; i < 8; i++)
		free(data[i]);
	return rc;
}

int
main(int argc, char *argv[])
{
	struct medha_gguf *g;
	const char *arr = NULL, *tname = NULL, *qtype = NULL;
	char why[512];
	int ch, kv = 0, wr = 0, rc;

	while ((ch = getopt(argc, argv, "a:hkq:t:w")) != -1) {
		switch (ch) {
		case 'a': arr = optarg; break;
		case 'k': kv = 1; break;
		case 'q': qtype = optarg; break;
		case 't': tname = optarg; break;
		case 'w': wr = 1; break;
		default: usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (qtype != NULL) {
		if (argc != 0 || medha_ggml_type_from_name(qtype) < 0)
			usage();
		rc = quant(medha_ggml_type_from_name(qtype));
		if (rc != 0)
			errx(1, "quantize: %s", medha_strerror(rc));
		return fclose(stdout) != 0;
	}
	if (argc != 1)
		usage();
	if (wr) {
		if ((rc = write_example(argv[0])) != 0)
			errx(1, "%s: %s", argv[0], medha_strerror(rc));
		return 0;
	}
	if ((rc = medha_gguf_open(&g, argv[0], why, sizeof(why))) != 0)
		errx(1, "%s: %s", argv[0], why);
	if (kv)
		list_kv(g);
	else if (arr != NULL)
		rc = print_array(g, arr);
	else if (tname != NULL)
		rc = dequant(g, tname);
	else
		list_tensors(g);
	medha_gguf_close(g);
	if (rc != 0)
		errx(1, "%s: %s", argv[0], medha_strerror(rc));
	if (fclose(stdout) != 0)
		err(1, "stdout");
	return 0;
}
