/*
 * proto_dec_get.c: the wire decoder's typed getters (proto_dec_impl.h).
 * Each reads one msgpack object of a message into a C field: an integer
 * in range, a number, a boolean, a bounded string copied or duplicated,
 * an array of so many elements, token ids, a map whose keys are all
 * among a message's known keys (none twice), and the keys that must be
 * there. A getter that fails writes its reason, with the field's path,
 * only when the decoder runs loud (proto_quiet).
 */
#include "net/proto_dec_impl.h"

#include <limits.h>
#include <string.h>

/* ---- typed getters ---- */

/* "a[i]" into buf. */
const char *
dec_join_idx(char *buf, size_t size, const char *a, uint32_t i)
{
	if (proto_quiet)
		buf[0] = '\0';
	else
		snprintf(buf, size, "%s[%u]", a, i);
	return buf;
}

int
dec_get_i64(struct dec *d, const msgpack_object *o, const char *path,
    int64_t *out)
{
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		*out = o->via.i64;
	else if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return BAD(d, path, "not an integer");
	else if (o->via.u64 > INT64_MAX)
		return BAD(d, path, "out of range");
	else
		*out = (int64_t)o->via.u64;
	return 0;
}

int
dec_get_int(struct dec *d, const msgpack_object *o, const char *path, int *out)
{
	int64_t v = 0;
	int rc;

	if ((rc = dec_get_i64(d, o, path, &v)) != 0)
		return rc;
	if (v < INT_MIN || v > INT_MAX)
		return BAD(d, path, "out of range");
	*out = (int)v;
	return 0;
}

/* A number: float64, float32 or an integer. */
int
dec_get_num(struct dec *d, const msgpack_object *o, const char *path,
    double *out)
{
	if (o->type == MSGPACK_OBJECT_FLOAT64 ||
	    o->type == MSGPACK_OBJECT_FLOAT32)
		*out = o->via.f64;
	else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		*out = (double)o->via.u64;
	else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		*out = (double)o->via.i64;
	else
		return BAD(d, path, "not a number");
	return 0;
}

int
dec_get_float(struct dec *d, const msgpack_object *o, const char *path,
    float *out)
{
	double v = 0;
	int rc;

	if ((rc = dec_get_num(d, o, path, &v)) != 0)
		return rc;
	*out = (float)v;
	return 0;
}

/*
 * A string (or, with bin, also a byte string) of lo to cap - 1 bytes
 * without NUL, copied NUL-terminated into dst.
 */
int
dec_get_str(struct dec *d, const msgpack_object *o, const char *path, int bin,
    char *dst, size_t cap, size_t lo)
{
	const char *p = o->via.str.ptr;
	size_t n = o->via.str.size;

	if (o->type != MSGPACK_OBJECT_STR &&
	    (!bin || o->type != MSGPACK_OBJECT_BIN))
		return BAD(d, path, "not a string");
	if (n < lo || n >= cap)
		return lo > 0
		    ? BAD(d, path, "not a string of %zu to %zu bytes", lo,
		          cap - 1)
		    : BAD(d, path, "not a string of at most %zu bytes",
		          cap - 1);
	if (n > 0 && memchr(p, '\0', n) != NULL)
		return BAD(d, path, "contains a NUL byte");
	if (n > 0)
		memcpy(dst, p, n);
	dst[n] = '\0';
	return 0;
}

/*
 * A string or byte string into a new NUL-terminated buffer *out (and its
 * length into *len if not NULL); without nul_ok it may not hold a NUL.
 */
int
dec_dup_text(struct dec *d, const msgpack_object *o, const char *path,
    int nul_ok, char **out, size_t *len)
{
	size_t n = o->via.str.size;

	if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN)
		return BAD(d, path, "not a string");
	if (!nul_ok && n > 0 && memchr(o->via.str.ptr, '\0', n) != NULL)
		return BAD(d, path, "contains a NUL byte");
	if ((*out = malloc(n + 1)) == NULL)
		return MEDHA_ENOMEM;
	if (n > 0)
		memcpy(*out, o->via.str.ptr, n);
	(*out)[n] = '\0';
	if (len != NULL)
		*len = n;
	return 0;
}

/* An array of lo to hi elements. */
int
dec_get_arr(struct dec *d, const msgpack_object *o, const char *path,
    uint32_t lo, uint32_t hi)
{
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return BAD(d, path, "not an array");
	if (o->via.array.size < lo || o->via.array.size > hi)
		return lo == hi
		    ? BAD(d, path, "not an array of %u", lo)
		    : BAD(d, path, "not an array of %u to %u", lo, hi);
	return 0;
}

/*
 * An array of lo to hi token ids into a new array *ids (never NULL on
 * success, even when empty).
 */
int
dec_get_ids(struct dec *d, const msgpack_object *o, const char *path,
    uint32_t lo, uint32_t hi, int32_t **ids, int64_t *n)
{
	const msgpack_object *e;
	uint32_t i, cnt;
	char buf[192];
	int rc;

	if ((rc = dec_get_arr(d, o, path, lo, hi)) != 0)
		return lo == 1 && o->type == MSGPACK_OBJECT_ARRAY &&
		        o->via.array.size == 0
		    ? BAD(d, path, "not a non-empty array")
		    : rc;
	cnt = o->via.array.size;
	if ((*ids = malloc((cnt ? cnt : 1) * sizeof(**ids))) == NULL)
		return MEDHA_ENOMEM;
	*n = cnt;
	for (i = 0; i < cnt; i++) {
		e = &o->via.array.ptr[i];
		if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
		    e->via.u64 > INT32_MAX)
			return BAD(d, dec_join_idx(buf, sizeof(buf), path, i),
			    "not a token id");
		(*ids)[i] = (int32_t)e->via.u64;
	}
	return 0;
}

/* A key for a reason: at most 32 bytes, odd bytes as '?'. */
static const char *
key_text(char *buf, size_t size, const msgpack_object *k)
{
	size_t i, n = k->via.str.size;

	if (n > 32)
		n = 32;
	if (n > size - 1)
		n = size - 1;
	for (i = 0; i < n; i++) {
		char ch = k->via.str.ptr[i];
		buf[i] = ch >= 0x20 && ch < 0x7f && ch != '"' ? ch : '?';
	}
	buf[n] = '\0';
	return buf;
}

/*
 * A map whose keys are all strings among keys[0..nkeys), none twice:
 * vals[k] gets key k's value, or NULL.
 */
int
dec_get_map(struct dec *d, const msgpack_object *o, const char *path,
    const char *const *keys, int nkeys, const msgpack_object **vals)
{
	const msgpack_object_kv *kv;
	char kbuf[40];
	uint32_t i;
	int k;

	for (k = 0; k < nkeys; k++)
		vals[k] = NULL;
	if (o->type != MSGPACK_OBJECT_MAP)
		return BAD(d, path, "not a map");
	for (i = 0; i < o->via.map.size; i++) {
		kv = &o->via.map.ptr[i];
		if (kv->key.type != MSGPACK_OBJECT_STR)
			return BAD(d, path, "a key is not a string");
		for (k = 0; k < nkeys; k++)
			if (strlen(keys[k]) == kv->key.via.str.size &&
			    memcmp(keys[k], kv->key.via.str.ptr,
			        kv->key.via.str.size) == 0)
				break;
		if (k == nkeys)
			return BAD(d, path, "unknown key \"%s\"",
			    key_text(kbuf, sizeof(kbuf), &kv->key));
		if (vals[k] != NULL)
			return BAD(d, path, "key \"%s\" given twice", keys[k]);
		vals[k] = &kv->val;
	}
	return 0;
}

/* Each of the keys whose bit is set in need must be there. */
int
dec_need(struct dec *d, const char *path, const char *const *keys, int nkeys,
    const msgpack_object **vals, uint32_t mask)
{
	char buf[96];

	for (int k = 0; k < nkeys; k++)
		if ((mask >> k & 1) && vals[k] == NULL)
			return BAD(d, dec_join(buf, sizeof(buf), path, keys[k]),
			    "missing");
	return 0;
}

/* A token's name: bytes (or a string) into lp, after those before. */
static int
dec_lp_name(struct dec *d, const msgpack_object *o, const char *path,
    struct medha_token_lp *lp)
{
	if (o->type != MSGPACK_OBJECT_BIN && o->type != MSGPACK_OBJECT_STR)
		return BAD(d, path, "not a token's bytes");
	if (medha_token_lp_name(lp, o->via.bin.ptr, o->via.bin.size) != 0)
		return BAD(d, path, "names over %d bytes together",
		    MEDHA_LP_BYTES_MAX);
	return 0;
}

int
dec_lp(struct dec *d, const msgpack_object *lpv, const msgpack_object *top,
    const msgpack_object *bytes, const char *path, struct medha_token_lp *lp)
{
	char buf[192];
	int rc;

	if ((rc = dec_get_float(d, lpv, path, &lp->logprob)) != 0)
		return rc;
	if (!(lp->logprob <= 0))
		return BAD(d, path, "not a log-probability (<= 0)");
	if ((rc = dec_get_arr(d, top, path, 0, MEDHA_TOP_LOGPROBS_MAX)) != 0)
		return rc;
	lp->ntop = (int)top->via.array.size;
	if (bytes != NULL && (rc = dec_lp_name(d, bytes, path, lp)) != 0)
		return rc;
	for (int i = 0; i < lp->ntop; i++) {
		const msgpack_object *e = &top->via.array.ptr[i];
		dec_join_idx(buf, sizeof(buf), path, (uint32_t)i);
		if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size < 2 ||
		    e->via.array.size > 3 ||
		    e->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
		    e->via.array.ptr[0].via.u64 > INT32_MAX)
			return BAD(d, buf,
			    "not a [token id, logprob(, bytes)] array");
		lp->top[i].id = (int32_t)e->via.array.ptr[0].via.u64;
		if ((rc = dec_get_float(d, &e->via.array.ptr[1], buf,
		         &lp->top[i].logprob)) != 0)
			return rc;
		if (!(lp->top[i].logprob <= 0))
			return BAD(d, buf, "not a log-probability (<= 0)");
		if (e->via.array.size < 3)
			continue;
		/* named in order: the drawn token and those before it */
		if (lp->nnamed != 1 + i)
			return BAD(d, buf,
			    "bytes where the tokens before have none");
		if ((rc = dec_lp_name(d, &e->via.array.ptr[2], buf, lp)) != 0)
			return rc;
	}
	return 0;
}

int
dec_lps(struct dec *d, const msgpack_object *o, const char *path, int64_t n,
    struct medha_token_lp **lps)
{
	char buf[192];
	int rc;

	if ((rc = dec_get_arr(d, o, path, 0, UINT32_MAX)) != 0)
		return rc;
	if ((int64_t)o->via.array.size != n)
		return BAD(d, path, "%u, not one a token (%lld)",
		    o->via.array.size, (long long)n);
	if ((*lps = medha_calloc(n > 0 ? (size_t)n : 1, sizeof(**lps))) == NULL)
		return MEDHA_ENOMEM;
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *e = &o->via.array.ptr[i];
		dec_join_idx(buf, sizeof(buf), path, i);
		if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size < 2 ||
		    e->via.array.size > 3)
			return BAD(d, buf, "not [logprob, top(, bytes)]");
		if ((rc = dec_lp(d, &e->via.array.ptr[0], &e->via.array.ptr[1],
		         e->via.array.size > 2 ? &e->via.array.ptr[2] : NULL,
		         buf, &(*lps)[i])) != 0)
			return rc;
	}
	return 0;
}
