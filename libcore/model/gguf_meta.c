/*
 * gguf_meta.c: typed lookups of GGUF metadata values (gguf.h): scalars,
 * strings and the elements of arrays, read from the offsets that gguf.c
 * recorded (and bounds-checked) when the file was opened. Nothing here
 * allocates; strings point into the mapping.
 */
#include "model/gguf_impl.h"

#include <string.h>

/*
 * An integer or bool value: *u is the value as unsigned (sign-extended
 * for signed types), *neg says it is negative, and then *s holds it.
 * Returns MEDHA_EFORMAT for the other types.
 */
static int
int_at(const unsigned char *p, int type, uint64_t *u, int64_t *s, int *neg)
{
	size_t n = gguf_type_size(type);
	uint64_t raw;

	switch (type) {
	case MEDHA_GGUF_UINT8:
	case MEDHA_GGUF_UINT16:
	case MEDHA_GGUF_UINT32:
	case MEDHA_GGUF_UINT64:
	case MEDHA_GGUF_BOOL:
		*u = gguf_le(p, n);
		*s = 0;
		*neg = 0;
		return 0;
	case MEDHA_GGUF_INT8:
	case MEDHA_GGUF_INT16:
	case MEDHA_GGUF_INT32:
	case MEDHA_GGUF_INT64:
		raw = gguf_le(p, n);
		if (n < 8 && (raw >> (8 * n - 1)) != 0)
			raw |= ~0ull << (8 * n); /* sign-extend */
		memcpy(s, &raw, sizeof(*s));
		*u = raw;
		*neg = *s < 0;
		return 0;
	}
	return MEDHA_EFORMAT;
}

static int
get_int(const struct medha_gguf *g, const struct gguf_kv *e, uint64_t *u,
    int64_t *s, int *neg)
{
	return int_at(g->map + e->val, e->type, u, s, neg);
}

int
medha_gguf_get_u64(const struct medha_gguf *g, const char *key, uint64_t *v)
{
	const struct gguf_kv *e = gguf_lookup(g, key);
	uint64_t u;
	int64_t s;
	int neg, rc;

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if ((rc = get_int(g, e, &u, &s, &neg)) != 0)
		return rc;
	if (neg)
		return MEDHA_ERANGE;
	*v = u;
	return 0;
}

int
medha_gguf_get_i64(const struct medha_gguf *g, const char *key, int64_t *v)
{
	const struct gguf_kv *e = gguf_lookup(g, key);
	uint64_t u;
	int64_t s;
	int neg, rc;

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if ((rc = get_int(g, e, &u, &s, &neg)) != 0)
		return rc;
	if (neg) {
		*v = s;
		return 0;
	}
	if (u > INT64_MAX)
		return MEDHA_ERANGE;
	*v = (int64_t)u;
	return 0;
}

int
medha_gguf_get_f64(const struct medha_gguf *g, const char *key, double *v)
{
	const struct gguf_kv *e = gguf_lookup(g, key);
	uint64_t u;
	uint32_t b32;
	int64_t s;
	float f;
	int neg;

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if (e->type == MEDHA_GGUF_FLOAT32) {
		b32 = (uint32_t)gguf_le(g->map + e->val, 4);
		memcpy(&f, &b32, sizeof(f));
		*v = f;
		return 0;
	}
	if (e->type == MEDHA_GGUF_FLOAT64) {
		u = gguf_le(g->map + e->val, 8);
		memcpy(v, &u, sizeof(*v));
		return 0;
	}
	if (get_int(g, e, &u, &s, &neg) != 0)
		return MEDHA_EFORMAT;
	*v = neg ? (double)s : (double)u;
	return 0;
}

int
medha_gguf_get_str(const struct medha_gguf *g, const char *key, const char **s,
    size_t *len)
{
	const struct gguf_kv *e = gguf_lookup(g, key);

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if (e->type != MEDHA_GGUF_STRING)
		return MEDHA_EFORMAT;
	*s = (const char *)g->map + e->val;
	*len = (size_t)e->n;
	return 0;
}

int
medha_gguf_get_strbuf(const struct medha_gguf *g, const char *key, char *buf,
    size_t bufsz)
{
	const char *s;
	size_t len;
	int rc;

	MEDHA_ASSERT(bufsz > 0);
	if ((rc = medha_gguf_get_str(g, key, &s, &len)) != 0)
		return rc;
	if (len > bufsz - 1)
		len = bufsz - 1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return 0;
}

int
medha_gguf_arr_len(const struct medha_gguf *g, const char *key, uint64_t *n,
    int *elem_type)
{
	const struct gguf_kv *e = gguf_lookup(g, key);

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if (e->type != MEDHA_GGUF_ARRAY)
		return MEDHA_EFORMAT;
	*n = e->n;
	if (elem_type != NULL)
		*elem_type = e->elem_type;
	return 0;
}

int
medha_gguf_arr_strings(const struct medha_gguf *g, const char *key,
    int (*fn)(void *arg, uint64_t i, const char *s, size_t len), void *arg)
{
	const struct gguf_kv *e = gguf_lookup(g, key);
	size_t off;
	uint64_t i, len;
	int rc;

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if (e->type != MEDHA_GGUF_ARRAY || e->elem_type != MEDHA_GGUF_STRING)
		return MEDHA_EFORMAT;
	off = e->val;
	for (i = 0; i < e->n; i++) {
		/* checked at open; checked again so a bug cannot overrun */
		if (g->size - off < 8)
			return MEDHA_EFORMAT;
		len = gguf_le(g->map + off, 8);
		off += 8;
		if (len > g->size - off)
			return MEDHA_EFORMAT;
		if ((rc = fn(arg, i, (const char *)g->map + off,
		         (size_t)len)) != 0)
			return rc;
		off += (size_t)len;
	}
	return 0;
}

/* The array entry for key with n fixed-size numeric elements, or an error. */
static int
num_array(const struct medha_gguf *g, const char *key, uint64_t n,
    const struct gguf_kv **ep)
{
	const struct gguf_kv *e = gguf_lookup(g, key);

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if (e->type != MEDHA_GGUF_ARRAY || gguf_type_size(e->elem_type) == 0)
		return MEDHA_EFORMAT;
	if (e->n != n)
		return MEDHA_EINVAL;
	*ep = e;
	return 0;
}

int
medha_gguf_arr_f32(const struct medha_gguf *g, const char *key, float *out,
    uint64_t n)
{
	const struct gguf_kv *e;
	const unsigned char *p;
	size_t esz;
	uint64_t i, u;
	uint32_t b32;
	int64_t s;
	double d;
	float f;
	int neg, rc;

	if ((rc = num_array(g, key, n, &e)) != 0)
		return rc;
	esz = gguf_type_size(e->elem_type);
	p = g->map + e->val;
	for (i = 0; i < n; i++, p += esz) {
		switch (e->elem_type) {
		case MEDHA_GGUF_FLOAT32:
			b32 = (uint32_t)gguf_le(p, 4);
			memcpy(&f, &b32, sizeof(f));
			out[i] = f;
			break;
		case MEDHA_GGUF_FLOAT64:
			u = gguf_le(p, 8);
			memcpy(&d, &u, sizeof(d));
			out[i] = (float)d;
			break;
		default:
			if ((rc = int_at(p, e->elem_type, &u, &s, &neg)) != 0)
				return rc;
			out[i] = neg ? (float)s : (float)u;
		}
	}
	return 0;
}

int
medha_gguf_arr_i32(const struct medha_gguf *g, const char *key, int32_t *out,
    uint64_t n)
{
	const struct gguf_kv *e;
	const unsigned char *p;
	size_t esz;
	uint64_t i, u;
	int64_t s;
	int neg, rc;

	if ((rc = num_array(g, key, n, &e)) != 0)
		return rc;
	esz = gguf_type_size(e->elem_type);
	p = g->map + e->val;
	for (i = 0; i < n; i++, p += esz) {
		if ((rc = int_at(p, e->elem_type, &u, &s, &neg)) != 0)
			return rc;
		if (neg ? s < INT32_MIN : u > INT32_MAX)
			return MEDHA_ERANGE;
		out[i] = neg ? (int32_t)s : (int32_t)u;
	}
	return 0;
}
