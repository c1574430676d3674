/*
 * gguf_test.c: the GGUF metadata reader (libcore/gguf.c) and model
 * shapes read through it (medha_model_resolve in libcore/pred.c).
 *
 * A small GGUF v3 file is written here byte by byte: a llama model's
 * hyper-parameters, a tokenizer array of strings and one key of every
 * value type, nested arrays included. It must read back exactly; every
 * prefix of it must be refused (and never crash: run under ASan); and
 * corrupted lengths, counts, magic, version and types must be refused
 * with a reason that says what is wrong.
 *
 * The array accessors are checked on the same file, and opening from
 * memory. (Tensor information is tested in gguf_tensor_test.c, the
 * writer in gguf_write_test.c, the tensor types in quant_test.c.)
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "sched/pred.h"
#include "testutil.h"

/* A file being built, and where some of its fields sit. */
struct buf {
	unsigned char b[4096];
	size_t n;
	size_t name_len;  /* u64 length of general.name's value */
	size_t arch_type; /* u32 type of general.architecture */
	size_t tok_count; /* u64 count of tokenizer.ggml.tokens */
	size_t tok_etype; /* u32 element type of that array */
	size_t tok_str3;  /* u64 length of its 4th string */
	size_t key0_len;  /* u64 length of the first key */
	size_t kv_count;  /* u64 count of metadata entries */
	size_t arch_val;  /* first byte of "llama" */
};

static void
put(struct buf *b, uint64_t v, int bytes)
{
	int i;

	assert_true(b->n + bytes <= sizeof(b->b));
	for (i = 0; i < bytes; i++)
		b->b[b->n++] = (unsigned char)(v >> (8 * i));
}

static void
put_str(struct buf *b, const char *s)
{
	put(b, strlen(s), 8);
	assert_true(b->n + strlen(s) <= sizeof(b->b));
	memcpy(b->b + b->n, s, strlen(s));
	b->n += strlen(s);
}

static void
key(struct buf *b, const char *k, int type)
{
	put_str(b, k);
	put(b, (uint64_t)type, 4);
}

static void
kv_u32(struct buf *b, const char *k, uint32_t v)
{
	key(b, k, MEDHA_GGUF_UINT32);
	put(b, v, 4);
}

static const char *tokens[] = {"<s>", "</s>", "a", "bb", "hello", " world",
    "\xe2\x96\x81x", "!", "?", "<unk>"};

/*
 * The test model: llama, 4 layers, hidden 256, 8 heads, 2 kv heads, ffn
 * 688, 10 tokens. Flags leave parts out or change them.
 */
enum {
	NO_KV_HEADS = 1,
	NO_NAME = 2,
	VOCAB_KEY = 4,
	ARCH_GPT2 = 8,
	NO_BLOCKS = 16,
	DUP_KEY = 32
};

static void
build(struct buf *b, uint32_t version, int flags)
{
	size_t i, nkv = 23;
	float f;
	uint32_t fb;
	double d;
	uint64_t db;

	memset(b, 0, sizeof(*b));
	if (flags & (NO_KV_HEADS | NO_NAME | NO_BLOCKS))
		nkv -= !!(flags & NO_KV_HEADS) + !!(flags & NO_NAME) +
		    !!(flags & NO_BLOCKS);
	nkv += !!(flags & VOCAB_KEY) + !!(flags & DUP_KEY);
	put(b, 0x46554747, 4); /* "GGUF" */
	put(b, version, 4);
	put(b, 0, 8); /* tensors */
	b->kv_count = b->n;
	put(b, nkv, 8);

	b->key0_len = b->n;
	key(b, "general.architecture", MEDHA_GGUF_STRING);
	b->arch_type = b->n - 4;
	b->arch_val = b->n + 8;
	put_str(b, flags & ARCH_GPT2 ? "gpt2!" : "llama");
	if (!(flags & NO_NAME)) {
		key(b, "general.name", MEDHA_GGUF_STRING);
		b->name_len = b->n;
		put_str(b, "tiny llama");
	}
	kv_u32(b, "general.alignment", 32);
	if (!(flags & NO_BLOCKS))
		kv_u32(b, "llama.block_count", 4);
	kv_u32(b, "llama.context_length", 2048);
	kv_u32(b, "llama.embedding_length", 256);
	kv_u32(b, "llama.feed_forward_length", 688);
	kv_u32(b, "llama.attention.head_count", 8);
	if (!(flags & NO_KV_HEADS))
		kv_u32(b, "llama.attention.head_count_kv", 2);
	if (flags & VOCAB_KEY)
		kv_u32(b, "llama.vocab_size", 32000);
	if (flags & DUP_KEY)
		kv_u32(b, "llama.context_length", 4096);
	key(b, "llama.rope.freq_base", MEDHA_GGUF_FLOAT32);
	f = 500000.0f;
	memcpy(&fb, &f, 4);
	put(b, fb, 4);
	key(b, "tokenizer.ggml.model", MEDHA_GGUF_STRING);
	put_str(b, "gpt2");
	key(b, "tokenizer.ggml.tokens", MEDHA_GGUF_ARRAY);
	b->tok_etype = b->n;
	put(b, MEDHA_GGUF_STRING, 4);
	b->tok_count = b->n;
	put(b, 10, 8);
	for (i = 0; i < 10; i++) {
		if (i == 3)
			b->tok_str3 = b->n;
		put_str(b, tokens[i]);
	}
	key(b, "tokenizer.ggml.token_type", MEDHA_GGUF_ARRAY);
	put(b, MEDHA_GGUF_INT32, 4);
	put(b, 10, 8);
	for (i = 0; i < 10; i++)
		put(b, (uint64_t)(i < 2 ? 3 : 1), 4);
	/* [[1, 2], [], [3]] of uint8 */
	key(b, "test.nested", MEDHA_GGUF_ARRAY);
	put(b, MEDHA_GGUF_ARRAY, 4);
	put(b, 3, 8);
	put(b, MEDHA_GGUF_UINT8, 4);
	put(b, 2, 8);
	put(b, 1, 1);
	put(b, 2, 1);
	put(b, MEDHA_GGUF_UINT8, 4);
	put(b, 0, 8);
	put(b, MEDHA_GGUF_UINT8, 4);
	put(b, 1, 8);
	put(b, 3, 1);
	key(b, "test.u8", MEDHA_GGUF_UINT8);
	put(b, 200, 1);
	key(b, "test.i8", MEDHA_GGUF_INT8);
	put(b, (uint8_t)-5, 1);
	key(b, "test.u16", MEDHA_GGUF_UINT16);
	put(b, 65535, 2);
	key(b, "test.i16", MEDHA_GGUF_INT16);
	put(b, (uint16_t)-300, 2);
	key(b, "test.i32", MEDHA_GGUF_INT32);
	put(b, (uint32_t)-70000, 4);
	key(b, "test.u64", MEDHA_GGUF_UINT64);
	put(b, UINT64_MAX, 8);
	key(b, "test.i64", MEDHA_GGUF_INT64);
	put(b, (uint64_t)INT64_MIN, 8);
	key(b, "test.f64", MEDHA_GGUF_FLOAT64);
	d = -0.125;
	memcpy(&db, &d, 8);
	put(b, db, 8);
	key(b, "test.bool", MEDHA_GGUF_BOOL);
	put(b, 1, 1);
}

/* Write the first n bytes of b to a new file; the caller unlinks path. */
static void
write_file(const struct buf *b, size_t n, char *path, size_t len)
{
	FILE *f;

	f = tmp_file(path, len);
	assert_int_equal(fwrite(b->b, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* Open the first n bytes of b; returns the code, why filled. */
static int
open_bytes(const struct buf *b, size_t n, struct medha_gguf **g, char *why,
    size_t whylen)
{
	char path[64];
	int rc;

	write_file(b, n, path, sizeof(path));
	rc = medha_gguf_open(g, path, why, whylen);
	unlink(path);
	return rc;
}

static void
test_read_back(void **state)
{
	struct medha_gguf *g;
	struct buf b;
	char why[256], s[64];
	const char *k, *str;
	size_t kl, len;
	uint64_t u, n;
	int64_t i;
	double d;
	int type;

	(void)state;
	build(&b, 3, 0);
	assert_int_equal(open_bytes(&b, b.n, &g, why, sizeof(why)), 0);
	assert_int_equal(medha_gguf_version(g), 3);
	assert_int_equal(medha_gguf_kv_count(g), 23);
	assert_int_equal(medha_gguf_tensor_count(g), 0);
	assert_int_equal(medha_gguf_tensor_info_offset(g), b.n);

	assert_int_equal(medha_gguf_kv_key(g, 0, &k, &kl, &type), 0);
	assert_int_equal(kl, strlen("general.architecture"));
	assert_memory_equal(k, "general.architecture", kl);
	assert_int_equal(type, MEDHA_GGUF_STRING);
	assert_int_equal(medha_gguf_kv_key(g, 23, &k, &kl, &type),
	    MEDHA_EINVAL);
	assert_int_equal(medha_gguf_find(g, "general.name"), 1);
	assert_int_equal(medha_gguf_find(g, "test.bool"), 22);
	assert_int_equal(medha_gguf_find(g, "general"), MEDHA_ENOTFOUND);
	assert_int_equal(medha_gguf_find(g, "test.bool.x"), MEDHA_ENOTFOUND);

	assert_int_equal(medha_gguf_get_u64(g, "llama.block_count", &u), 0);
	assert_int_equal(u, 4);
	assert_int_equal(medha_gguf_get_u64(g, "test.u8", &u), 0);
	assert_int_equal(u, 200);
	assert_int_equal(medha_gguf_get_u64(g, "test.u16", &u), 0);
	assert_int_equal(u, 65535);
	assert_int_equal(medha_gguf_get_u64(g, "test.u64", &u), 0);
	assert_true(u == UINT64_MAX);
	assert_int_equal(medha_gguf_get_i64(g, "test.u64", &i), MEDHA_ERANGE);
	assert_int_equal(medha_gguf_get_u64(g, "test.i8", &u), MEDHA_ERANGE);
	assert_int_equal(medha_gguf_get_i64(g, "test.i8", &i), 0);
	assert_int_equal(i, -5);
	assert_int_equal(medha_gguf_get_i64(g, "test.i16", &i), 0);
	assert_int_equal(i, -300);
	assert_int_equal(medha_gguf_get_i64(g, "test.i32", &i), 0);
	assert_int_equal(i, -70000);
	assert_int_equal(medha_gguf_get_i64(g, "test.i64", &i), 0);
	assert_true(i == INT64_MIN);
	assert_int_equal(medha_gguf_get_u64(g, "test.bool", &u), 0);
	assert_int_equal(u, 1);
	assert_int_equal(medha_gguf_get_f64(g, "llama.rope.freq_base", &d), 0);
	assert_true(d == 500000.0);
	assert_int_equal(medha_gguf_get_f64(g, "test.f64", &d), 0);
	assert_true(d == -0.125);
	assert_int_equal(medha_gguf_get_f64(g, "test.i16", &d), 0);
	assert_true(d == -300);
	assert_int_equal(medha_gguf_get_u64(g, "test.f64", &u), MEDHA_EFORMAT);
	assert_int_equal(medha_gguf_get_u64(g, "general.name", &u),
	    MEDHA_EFORMAT);
	assert_int_equal(medha_gguf_get_u64(g, "nope", &u), MEDHA_ENOTFOUND);

	assert_int_equal(medha_gguf_get_str(g, "general.name", &str, &len), 0);
	assert_int_equal(len, 10);
	assert_memory_equal(str, "tiny llama", 10);
	assert_int_equal(medha_gguf_get_strbuf(g, "general.name", s, 5), 0);
	assert_string_equal(s, "tiny");
	assert_int_equal(medha_gguf_get_str(g, "test.u8", &str, &len),
	    MEDHA_EFORMAT);

	assert_int_equal(medha_gguf_arr_len(g, "tokenizer.ggml.tokens", &n,
	                     &type),
	    0);
	assert_int_equal(n, 10);
	assert_int_equal(type, MEDHA_GGUF_STRING);
	assert_int_equal(medha_gguf_arr_len(g, "test.nested", &n, &type), 0);
	assert_int_equal(n, 3);
	assert_int_equal(type, MEDHA_GGUF_ARRAY);
	assert_int_equal(medha_gguf_arr_len(g, "test.u8", &n, NULL),
	    MEDHA_EFORMAT);
	assert_string_equal(medha_gguf_type_name(MEDHA_GGUF_FLOAT64),
	    "float64");
	assert_string_equal(medha_gguf_type_name(13), "unknown");
	medha_gguf_close(g);
	medha_gguf_close(NULL);

	/* version 2 has the same layout */
	build(&b, 2, 0);
	assert_int_equal(open_bytes(&b, b.n, &g, why, sizeof(why)), 0);
	assert_int_equal(medha_gguf_version(g), 2);
	medha_gguf_close(g);
}

static void
test_resolve(void **state)
{
	struct medha_pred_model m;
	struct medha_pred p;
	struct buf b;
	char path[64], why[256];

	(void)state;
	build(&b, 3, 0);
	write_file(&b, b.n, path, sizeof(path));
	assert_int_equal(medha_model_resolve(path, &m), 0);
	assert_string_equal(m.name, "tiny llama");
	assert_int_equal(m.c.n_layers, 4);
	assert_int_equal(m.c.dim, 256);
	assert_int_equal(m.c.n_heads, 8);
	assert_int_equal(m.c.n_kv_heads, 2);
	assert_int_equal(m.c.head_dim, 32);
	assert_int_equal(m.c.ffn_dim, 688);
	assert_int_equal(m.c.vocab, 10);
	assert_true(m.w_bytes == 2 && m.kv_bytes == 2);
	assert_int_equal(medha_pred_init(&p, medha_gpu_find("a100"), &m, 2, 2,
	                     1),
	    0);
	assert_true(medha_pred_linear(&p, 100) > 0);
	assert_true(medha_pred_kv_capacity(&p, 0.9) > 0);
	medha_pred_free(&p);
	unlink(path);

	/* defaults: kv heads = heads, name = file name; vocab_size key */
	build(&b, 3, NO_KV_HEADS | NO_NAME | VOCAB_KEY);
	write_file(&b, b.n, path, sizeof(path));
	assert_int_equal(medha_model_resolve_why(path, &m, why, sizeof(why)),
	    0);
	assert_int_equal(m.c.n_kv_heads, 8);
	assert_int_equal(m.c.vocab, 32000);
	assert_string_equal(m.name, strrchr(path, '/') + 1);
	unlink(path);

	build(&b, 3, ARCH_GPT2);
	write_file(&b, b.n, path, sizeof(path));
	assert_int_equal(medha_model_resolve_why(path, &m, why, sizeof(why)),
	    MEDHA_EUNSUP);
	assert_non_null(strstr(why,
	    "general.architecture: \"gpt2!\" is not supported"));
	unlink(path);

	build(&b, 3, NO_BLOCKS);
	write_file(&b, b.n, path, sizeof(path));
	assert_int_equal(medha_model_resolve_why(path, &m, why, sizeof(why)),
	    MEDHA_EFORMAT);
	assert_non_null(strstr(why, "missing key llama.block_count"));
	unlink(path);

	assert_int_equal(medha_model_resolve_why("/nonexistent.gguf", &m, why,
	                     sizeof(why)),
	    MEDHA_ENOTFOUND);
	assert_non_null(strstr(why, "neither a built-in model nor a file"));
	/* a path that is there but is no model says what it is */
	assert_int_equal(medha_model_resolve_why("/tmp", &m, why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "a directory, not a GGUF file"));
	assert_int_equal(medha_model_resolve_why("/dev/null", &m, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "not a regular file"));
}

/* Every prefix of the file is refused, and nothing leaks or crashes. */
static void
test_truncations(void **state)
{
	struct medha_pred_model m;
	struct medha_gguf *g;
	struct buf b;
	char path[64], why[256];
	size_t n;
	int rc;

	(void)state;
	build(&b, 3, 0);
	for (n = 0; n < b.n; n++) {
		why[0] = '\0';
		g = (struct medha_gguf *)&b; /* must be reset to NULL */
		rc = open_bytes(&b, n, &g, why, sizeof(why));
		if (rc != MEDHA_ETRUNC && rc != MEDHA_EFORMAT)
			fail_msg("prefix of %zu bytes: %d (%s)", n, rc, why);
		assert_null(g);
		assert_true(strlen(why) > 0);
		if (n > 24 && strstr(why, "offset") == NULL)
			fail_msg("prefix of %zu bytes: reason \"%s\" gives no "
			         "offset",
			    n, why);
	}
	/* and through the model resolver */
	write_file(&b, b.n - 1, path, sizeof(path));
	assert_int_equal(medha_model_resolve_why(path, &m, why, sizeof(why)),
	    MEDHA_ETRUNC);
	assert_non_null(strstr(why, "test.bool"));
	unlink(path);
}

/* Patch b at off with an n-byte value, open, expect rc and reason. */
static void
corrupt(int flags, size_t which, uint64_t v, int bytes, int want,
    const char *reason)
{
	struct medha_gguf *g;
	struct buf b;
	char why[256];
	size_t off, i;
	int rc;

	build(&b, 3, flags);
	off = *(size_t *)((char *)&b + which);
	for (i = 0; i < (size_t)bytes; i++)
		b.b[off + i] = (unsigned char)(v >> (8 * i));
	why[0] = '\0';
	rc = open_bytes(&b, b.n, &g, why, sizeof(why));
	if (rc != want || strstr(why, reason) == NULL)
		fail_msg("got %d \"%s\", want %d \"%s\"", rc, why, want,
		    reason);
	assert_null(g);
}

#define AT(f) offsetof(struct buf, f)

static void
test_corrupt(void **state)
{
	struct medha_gguf *g;
	struct buf b;
	char why[256];
	unsigned int seed = 1;
	int i, j;

	(void)state;
	corrupt(0, AT(name_len), 4294967295u, 8, MEDHA_EFORMAT,
	    "metadata key 1 (\"general.name\"): string length 4294967295 "
	    "exceeds the limit");
	corrupt(0, AT(name_len), 1000, 8, MEDHA_ETRUNC,
	    "string length 1000 runs past the end of the file");
	corrupt(0, AT(key0_len), 1u << 20, 8, MEDHA_EFORMAT,
	    "metadata key 0: key length 1048576 exceeds the limit");
	corrupt(0, AT(key0_len), 0, 8, MEDHA_EFORMAT, "empty key");
	corrupt(0, AT(tok_count), UINT64_MAX, 8, MEDHA_EFORMAT,
	    "(\"tokenizer.ggml.tokens\"): array count 18446744073709551615 "
	    "exceeds the limit");
	corrupt(0, AT(tok_count), 1000000, 8, MEDHA_ETRUNC,
	    "array of 1000000 string elements runs past the end");
	corrupt(0, AT(tok_str3), 1u << 30, 8, MEDHA_EFORMAT,
	    "(\"tokenizer.ggml.tokens\"): element 3: string length");
	corrupt(0, AT(tok_etype), 13, 4, MEDHA_EFORMAT,
	    "unknown array element type 13");
	corrupt(0, AT(arch_type), 13, 4, MEDHA_EFORMAT,
	    "(\"general.architecture\"): unknown value type 13");
	corrupt(0, AT(arch_type), 0xffffffffu, 4, MEDHA_EFORMAT,
	    "unknown value type 4294967295");
	corrupt(0, AT(kv_count), UINT64_MAX, 8, MEDHA_EFORMAT,
	    "metadata count 18446744073709551615 exceeds the limit");
	corrupt(0, AT(kv_count), 1000, 8, MEDHA_ETRUNC,
	    "1000 metadata entries cannot fit");
	corrupt(0, AT(kv_count), 30, 8, MEDHA_ETRUNC, "metadata key 23:");
	corrupt(DUP_KEY, AT(kv_count), 24, 8, MEDHA_EFORMAT,
	    "(\"llama.context_length\"): duplicate key (first as metadata "
	    "key 4)");
	/* header fields at fixed places: magic, version, tensor count */
	build(&b, 3, 0);
	b.b[0] = 'g';
	assert_int_equal(open_bytes(&b, b.n, &g, why, sizeof(why)),
	    MEDHA_EFORMAT);
	assert_non_null(strstr(why, "bad magic 67 47 55 46"));
	for (i = 0; i < 4; i++) {
		static const uint32_t v[] = {0, 1, 4, 0x03000000};
		static const char *r[] = {"version 0 not", "version 1 not",
		    "version 4 not", "big-endian"};

		build(&b, v[i], 0);
		assert_int_equal(open_bytes(&b, b.n, &g, why, sizeof(why)),
		    MEDHA_EUNSUP);
		assert_non_null(strstr(why, r[i]));
	}
	build(&b, 3, 0);
	b.b[8] = 5; /* 5 tensors but no tensor information */
	assert_int_equal(open_bytes(&b, b.n, &g, why, sizeof(why)),
	    MEDHA_ETRUNC);
	assert_non_null(strstr(why, "5 tensors announced"));

	/* arrays nested deeper than the limit */
	memset(&b, 0, sizeof(b));
	put(&b, 0x46554747, 4);
	put(&b, 3, 4);
	put(&b, 0, 8);
	put(&b, 1, 8);
	key(&b, "deep", MEDHA_GGUF_ARRAY);
	for (i = 0; i < 12; i++) {
		put(&b, MEDHA_GGUF_ARRAY, 4);
		put(&b, 1, 8);
	}
	put(&b, MEDHA_GGUF_UINT8, 4);
	put(&b, 0, 8);
	assert_int_equal(open_bytes(&b, b.n, &g, why, sizeof(why)),
	    MEDHA_EFORMAT);
	assert_non_null(strstr(why, "nested deeper than 8"));
	assert_non_null(strstr(why, "element 0.0.0"));

	/* not a file, no file */
	assert_int_equal(medha_gguf_open(&g, "/tmp", why, sizeof(why)),
	    MEDHA_EFORMAT);
	assert_int_equal(medha_gguf_open(&g, "/nonexistent/m.gguf", why,
	                     sizeof(why)),
	    MEDHA_EIO);
	assert_int_equal(medha_gguf_open(&g, "/nonexistent/m.gguf", NULL, 0),
	    MEDHA_EIO);

	/* random byte damage: an answer either way, never a crash */
	for (i = 0; i < 300; i++) {
		build(&b, 3, 0);
		for (j = 0; j < 1 + i % 4; j++)
			b.b[rand_r(&seed) % b.n] = (unsigned char)rand_r(&seed);
		if (open_bytes(&b, b.n, &g, why, sizeof(why)) == 0)
			medha_gguf_close(g);
		else
			assert_null(g);
	}
}

struct collect {
	char s[10][16];
	uint64_t n, stop;
};

static int
collect(void *arg, uint64_t i, const char *s, size_t len)
{
	struct collect *c = arg;

	assert_true(i == c->n && len < 16);
	memcpy(c->s[i], s, len);
	c->s[i][len] = '\0';
	c->n++;
	return c->n == c->stop ? 42 : 0;
}

static void
test_arrays(void **state)
{
	struct medha_gguf *g, *gm;
	struct collect c;
	struct buf b;
	char why[256];
	int32_t v[10];
	float f[10];
	int i;

	(void)state;
	build(&b, 3, 0);
	assert_int_equal(open_bytes(&b, b.n, &g, why, sizeof(why)), 0);
	memset(&c, 0, sizeof(c));
	assert_int_equal(medha_gguf_arr_strings(g, "tokenizer.ggml.tokens",
	                     collect, &c),
	    0);
	assert_int_equal(c.n, 10);
	for (i = 0; i < 10; i++)
		assert_string_equal(c.s[i], tokens[i]);
	memset(&c, 0, sizeof(c));
	c.stop = 3; /* fn's non-zero value stops the walk */
	assert_int_equal(medha_gguf_arr_strings(g, "tokenizer.ggml.tokens",
	                     collect, &c),
	    42);
	assert_int_equal(c.n, 3);
	assert_int_equal(medha_gguf_arr_strings(g, "tokenizer.ggml.token_type",
	                     collect, &c),
	    MEDHA_EFORMAT);
	assert_int_equal(medha_gguf_arr_strings(g, "general.name", collect, &c),
	    MEDHA_EFORMAT);
	assert_int_equal(medha_gguf_arr_strings(g, "nope", collect, &c),
	    MEDHA_ENOTFOUND);

	assert_int_equal(medha_gguf_arr_i32(g, "tokenizer.ggml.token_type", v,
	                     10),
	    0);
	assert_int_equal(medha_gguf_arr_f32(g, "tokenizer.ggml.token_type", f,
	                     10),
	    0);
	for (i = 0; i < 10; i++) {
		assert_int_equal(v[i], i < 2 ? 3 : 1);
		assert_true(f[i] == (i < 2 ? 3.0f : 1.0f));
	}
	assert_int_equal(medha_gguf_arr_i32(g, "tokenizer.ggml.token_type", v,
	                     9),
	    MEDHA_EINVAL);
	assert_int_equal(medha_gguf_arr_f32(g, "tokenizer.ggml.tokens", f, 10),
	    MEDHA_EFORMAT);
	assert_int_equal(medha_gguf_arr_i32(g, "test.nested", v, 3),
	    MEDHA_EFORMAT);
	assert_int_equal(medha_gguf_arr_i32(g, "test.u8", v, 1), MEDHA_EFORMAT);
	assert_int_equal(medha_gguf_arr_f32(g, "nope", f, 1), MEDHA_ENOTFOUND);

	/* the same bytes from memory read the same */
	assert_int_equal(medha_gguf_open_mem(&gm, b.b, b.n, why, sizeof(why)),
	    0);
	assert_int_equal(medha_gguf_kv_count(gm), medha_gguf_kv_count(g));
	assert_int_equal(medha_gguf_arr_i32(gm, "tokenizer.ggml.token_type", v,
	                     10),
	    0);
	assert_int_equal(v[0], 3);
	medha_gguf_close(gm);
	medha_gguf_close(g);
	assert_int_equal(medha_gguf_open_mem(&gm, b.b, 10, why, sizeof(why)),
	    MEDHA_ETRUNC);
	assert_null(gm);
	assert_non_null(strstr(why, "shorter than the 24-byte GGUF header"));

	/* integers that do not fit int32, floats: refused by arr_i32 */
	memset(&b, 0, sizeof(b));
	put(&b, 0x46554747, 4);
	put(&b, 3, 4);
	put(&b, 0, 8);
	put(&b, 2, 8);
	key(&b, "big", MEDHA_GGUF_ARRAY);
	put(&b, MEDHA_GGUF_UINT32, 4);
	put(&b, 2, 8);
	put(&b, 7, 4);
	put(&b, 3000000000u, 4);
	key(&b, "f64", MEDHA_GGUF_ARRAY);
	put(&b, MEDHA_GGUF_FLOAT64, 4);
	put(&b, 1, 8);
	put(&b, 0x3ff8000000000000ull, 8); /* 1.5 */
	assert_int_equal(medha_gguf_open_mem(&g, b.b, b.n, why, sizeof(why)),
	    0);
	assert_int_equal(medha_gguf_arr_i32(g, "big", v, 2), MEDHA_ERANGE);
	assert_int_equal(medha_gguf_arr_f32(g, "big", f, 2), 0);
	assert_true(f[0] == 7.0f && f[1] == 3e9f);
	assert_int_equal(medha_gguf_arr_i32(g, "f64", v, 1), MEDHA_EFORMAT);
	assert_int_equal(medha_gguf_arr_f32(g, "f64", f, 1), 0);
	assert_true(f[0] == 1.5f);
	medha_gguf_close(g);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_read_back),
	    cmocka_unit_test(test_resolve),
	    cmocka_unit_test(test_truncations),
	    cmocka_unit_test(test_corrupt),
	    cmocka_unit_test(test_arrays),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
