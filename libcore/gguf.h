/*
 * gguf.h: a bounds-checked reader of GGUF files (the llama.cpp
 * ecosystem's single-file model format), versions 2 and 3, little-endian.
 *
 * This first part reads the header and every metadata key/value; tensor
 * information and data are left alone (their start is recorded for the
 * reader that will map tensors later). The file is mapped read-only and
 * nothing is copied: every count, length and offset is checked against
 * the file size and the limits below before it is used, so a truncated
 * or hostile file gives MEDHA_ETRUNC or MEDHA_EFORMAT with a reason, never
 * a crash or a large allocation. (As with any mapped file, truncating the
 * file while it is open is not defended against.)
 *
 *	struct medha_gguf *g;
 *	char why[256];
 *	uint64_t layers;
 *	if (medha_gguf_open(&g, "model.gguf", why, sizeof(why)) != 0)
 *		errx(1, "%s", why);
 *	if (medha_gguf_get_u64(g, "llama.block_count", &layers) != 0)
 *		...;
 *	medha_gguf_close(g);
 */
#ifndef MEDHA_GGUF_H
#define MEDHA_GGUF_H

#include "medha.h"

#include <stddef.h>
#include <stdint.h>

/* Value types, numbered as in the file. */
enum medha_gguf_type {
	MEDHA_GGUF_UINT8 = 0,
	MEDHA_GGUF_INT8 = 1,
	MEDHA_GGUF_UINT16 = 2,
	MEDHA_GGUF_INT16 = 3,
	MEDHA_GGUF_UINT32 = 4,
	MEDHA_GGUF_INT32 = 5,
	MEDHA_GGUF_FLOAT32 = 6,
	MEDHA_GGUF_BOOL = 7,
	MEDHA_GGUF_STRING = 8,
	MEDHA_GGUF_ARRAY = 9,
	MEDHA_GGUF_UINT64 = 10,
	MEDHA_GGUF_INT64 = 11,
	MEDHA_GGUF_FLOAT64 = 12,
};

#define MEDHA_GGUF_KEY_MAX (64u << 10) /* longest key, bytes (spec: 65535) */
#define MEDHA_GGUF_STR_MAX (16u << 20) /* longest string value, bytes */
#define MEDHA_GGUF_DEPTH_MAX 8         /* deepest nesting of arrays */

struct medha_gguf; /* opaque: the mapping and an index of the metadata */

/*
 * Map path and index its metadata. On success *g is the caller's, to be
 * released with medha_gguf_close(). On failure *g is NULL and why (if not
 * NULL) names the problem without the path, which the caller prefixes:
 * e.g. "metadata key 1 (\"general.name\"): string length 1000 runs past the
 * end of the file (892 bytes left) (at offset 101 of 993)". Returns 0,
 * MEDHA_EIO (open, stat or map failed), MEDHA_ETRUNC, MEDHA_EFORMAT,
 * MEDHA_EUNSUP (version other than 2 or 3, big-endian file) or
 * MEDHA_ENOMEM.
 */
int medha_gguf_open(struct medha_gguf **g, const char *path, char *why,
    size_t whylen);
/* Unmap and free; g may be NULL. Pointers taken from g die with it. */
void medha_gguf_close(struct medha_gguf *g);

uint32_t medha_gguf_version(const struct medha_gguf *g);
/* Number of tensors the header announces (not yet read). */
uint64_t medha_gguf_tensor_count(const struct medha_gguf *g);
/* File offset where the tensor information starts (after the metadata). */
uint64_t medha_gguf_tensor_info_offset(const struct medha_gguf *g);

/* Metadata entries, in file order: 0 <= i < medha_gguf_kv_count(g). */
size_t medha_gguf_kv_count(const struct medha_gguf *g);
/*
 * Key and type of entry i. The key points into the mapping, is keylen
 * bytes long and is NOT NUL-terminated; it lives until medha_gguf_close().
 */
int medha_gguf_kv_key(const struct medha_gguf *g, size_t i, const char **key,
    size_t *keylen, int *type);
/* Index of key (an O(log n) search), or MEDHA_ENOTFOUND. */
int medha_gguf_find(const struct medha_gguf *g, const char *key);

/*
 * Typed lookups by key. Each returns 0, MEDHA_ENOTFOUND (no such key) or
 * MEDHA_EFORMAT (the value has another type); get_u64 and get_i64 take any
 * integer type or bool and return MEDHA_ERANGE when the value does not fit;
 * get_f64 takes floats and integers.
 */
int
medha_gguf_get_u64(const struct medha_gguf *g, const char *key, uint64_t *v);
int medha_gguf_get_i64(const struct medha_gguf *g, const char *key, int64_t *v);
int medha_gguf_get_f64(const struct medha_gguf *g, const char *key, double *v);
/*
 * A string value: *s points into the mapping (valid until close), is
 * *len bytes long and is NOT NUL-terminated.
 */
int medha_gguf_get_str(const struct medha_gguf *g, const char *key,
    const char **s, size_t *len);
/* Copy a string value into buf as a C string, truncated to fit (bufsz > 0). */
int medha_gguf_get_strbuf(const struct medha_gguf *g, const char *key,
    char *buf, size_t bufsz);
/* Element count and element type (NULL to skip) of an array value. */
int medha_gguf_arr_len(const struct medha_gguf *g, const char *key, uint64_t *n,
    int *elem_type);

/* Name of a value type ("uint32", "array", ...); "unknown" if out of range. */
const char *medha_gguf_type_name(int type);

#endif
