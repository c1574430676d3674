/*
 * gguf_tensor.c: the tensor information of a GGUF file (gguf.h), read
 * at open after the metadata, and the lookups of tensors by index and by
 * name.
 *
 * Each tensor information entry is (little-endian):
 *
 *	string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset
 *
 * where offset counts from the data section, which starts at the first
 * multiple of general.alignment (default 32) after the last entry. The
 * entries are read in one pass; the data section's start is then known
 * and a second pass checks each tensor's data against the file. Names are
 * copied into one block so that they can be handed out NUL-terminated; an
 * index sorted by name serves the lookups and catches duplicates.
 */
#include "model/gguf_impl.h"

#include <string.h>

/* Where an entry's name lies and where the entry starts (for messages). */
struct tinfo {
	size_t name_off;
	size_t name_len;
	size_t info_off;
	uint64_t nbytes; /* known types: the size of the data */
};

/* Name a tensor for messages: printable bytes of its name, shortened. */
static void
tensor_ctx(struct gguf_rd *r, uint64_t i, const char *name, size_t len)
{
	char k[52];
	size_t j, n = len < 48 ? len : 48;

	for (j = 0; j < n; j++)
		k[j] = name[j] >= 0x20 && name[j] < 0x7f && name[j] != '"'
		    ? name[j]
		    : '?';
	k[n] = '\0';
	snprintf(r->ctx, sizeof(r->ctx), "tensor %llu (\"%s%s\")",
	    (unsigned long long)i, k, len > n ? "..." : "");
}

/* One tensor information entry, into t (name left NULL) and ti. */
static int
read_info(struct medha_gguf *g, struct gguf_rd *r, uint64_t i,
    struct medha_tensor *t, struct tinfo *ti)
{
	uint64_t len, v, nelem = 1, rowb;
	uint32_t nd, type;
	int d, rc, be;

	ti->info_off = r->off;
	snprintf(r->ctx, sizeof(r->ctx), "tensor %llu", (unsigned long long)i);
	if ((rc = gguf_rd_str(r, "name", MEDHA_GGUF_NAME_MAX, &ti->name_off,
	         &len)) != 0)
		return rc;
	ti->name_len = (size_t)len;
	if (len == 0)
		return gguf_fail(r, MEDHA_EFORMAT, "empty name");
	if (memchr(r->p + ti->name_off, '\0', ti->name_len) != NULL)
		return gguf_fail(r, MEDHA_EFORMAT, "name holds a NUL byte");
	tensor_ctx(r, i, (const char *)r->p + ti->name_off, ti->name_len);
	if ((rc = gguf_rd_u32(r, "dimension count", &nd)) != 0)
		return rc;
	if (nd < 1 || nd > MEDHA_GGUF_DIMS_MAX)
		return gguf_fail(r, MEDHA_EFORMAT,
		    "%u dimensions (1 to %d allowed)", nd, MEDHA_GGUF_DIMS_MAX);
	t->n_dims = (int)nd;
	for (d = 0; d < MEDHA_GGUF_DIMS_MAX; d++)
		t->ne[d] = 1;
	for (d = 0; d < (int)nd; d++) {
		if ((rc = gguf_rd_u64(r, "dimension", &v)) != 0)
			return rc;
		if (v == 0 || v > INT64_MAX)
			return gguf_fail(r, MEDHA_EFORMAT,
			    "dimension %d is %llu (must be 1 to 2^63-1)", d,
			    (unsigned long long)v);
		if (nelem > INT64_MAX / v)
			return gguf_fail(r, MEDHA_EFORMAT,
			    "dimensions overflow: %llu elements times "
			    "dimension %d of %llu",
			    (unsigned long long)nelem, d,
			    (unsigned long long)v);
		nelem *= v;
		t->ne[d] = (int64_t)v;
	}
	if ((rc = gguf_rd_u32(r, "type", &type)) != 0)
		return rc;
	if (type >= GGUF_TYPE_MAX)
		return gguf_fail(r, MEDHA_EFORMAT, "type %u is no tensor type",
		    type);
	t->type = (int)type;
	if ((rc = gguf_rd_u64(r, "data offset", &t->offset)) != 0)
		return rc;
	if (t->offset % g->alignment != 0)
		return gguf_fail(r, MEDHA_EFORMAT,
		    "data offset %llu is not a multiple of the alignment %llu",
		    (unsigned long long)t->offset,
		    (unsigned long long)g->alignment);
	ti->nbytes = 0;
	if ((be = medha_ggml_block_elems(t->type)) == 0)
		return 0; /* unknown type: refused when asked for */
	if (t->ne[0] % be != 0)
		return gguf_fail(r, MEDHA_EFORMAT,
		    "row length %lld is not a multiple of the %s block size %d",
		    (long long)t->ne[0], medha_ggml_type_name(t->type), be);
	/* rows of ne[0]: a row's bytes fit (ne[0] < 2^63, <= 4 bytes each
	 * in every type) but the whole may not */
	rowb = (uint64_t)(t->ne[0] / be) *
	    (uint64_t)medha_ggml_block_bytes(t->type);
	v = nelem / (uint64_t)t->ne[0];
	if (v > UINT64_MAX / rowb)
		return gguf_fail(r, MEDHA_EFORMAT,
		    "data size overflows: %llu rows of %llu bytes",
		    (unsigned long long)v, (unsigned long long)rowb);
	ti->nbytes = v * rowb;
	return 0;
}

static int
tbyname_cmp(const void *a, const void *b)
{
	const struct medha_tensor *x = *(const struct medha_tensor *const *)a;
	const struct medha_tensor *y = *(const struct medha_tensor *const *)b;

	return strcmp(x->name, y->name);
}

/* general.alignment if present (a power of two), else 32. */
static int
read_alignment(struct medha_gguf *g, struct gguf_rd *r)
{
	uint64_t a;
	int rc;

	g->alignment = 32;
	rc = medha_gguf_get_u64(g, "general.alignment", &a);
	if (rc == MEDHA_ENOTFOUND)
		return 0;
	snprintf(r->ctx, sizeof(r->ctx), "metadata key \"general.alignment\"");
	if (rc != 0)
		return gguf_fail(r, MEDHA_EFORMAT,
		    "not an unsigned integer (%s)", medha_strerror(rc));
	if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_ALIGN_MAX)
		return gguf_fail(r, MEDHA_EFORMAT,
		    "alignment %llu is not a power of two up to %u",
		    (unsigned long long)a, GGUF_ALIGN_MAX);
	g->alignment = a;
	return 0;
}

static int
by_offset(const void *a, const void *b)
{
	const struct medha_tensor *x = *(const struct medha_tensor *const *)a;
	const struct medha_tensor *y = *(const struct medha_tensor *const *)b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* No two tensors' data share a byte (one pointed at another's is a
 * corrupt or hostile file, not a model). */
static int
check_overlap(struct medha_gguf *g, struct gguf_rd *r, const struct tinfo *ti)
{
	const struct medha_tensor **v;
	uint64_t i, m = 0;

	if (g->n_tensors < 2)
		return 0;
	if ((v = medha_reallocarray(NULL, (size_t)g->n_tensors,
	         sizeof(*v))) == NULL)
		return gguf_fail(r, MEDHA_ENOMEM, "out of memory");
	for (i = 0; i < g->n_tensors; i++)
		if (g->tensors[i].nbytes > 0)
			v[m++] = &g->tensors[i];
	qsort(v, (size_t)m, sizeof(*v), by_offset);
	for (i = 1; i < m; i++)
		if (v[i]->offset < v[i - 1]->offset + v[i - 1]->nbytes) {
			uint64_t k = (uint64_t)(v[i] - g->tensors);
			tensor_ctx(r, k, v[i]->name, strlen(v[i]->name));
			r->off = ti[k].info_off;
			int rc = gguf_fail(r, MEDHA_EFORMAT,
			    "data at offset %llu overlaps that of %s "
			    "(%zu bytes at %llu)",
			    (unsigned long long)v[i]->offset, v[i - 1]->name,
			    v[i - 1]->nbytes,
			    (unsigned long long)v[i - 1]->offset);
			free(v);
			return rc;
		}
	free(v);
	return 0;
}

/* Second pass: names into one block, data within the file, no twins. */
static int
check_tensors(struct medha_gguf *g, struct gguf_rd *r, struct tinfo *ti,
    size_t names)
{
	struct medha_tensor *t;
	uint64_t i, n = g->n_tensors, room;
	char *p;
	int rc;

	if ((g->names = malloc(names)) == NULL)
		return gguf_fail(r, MEDHA_ENOMEM, "out of memory");
	p = g->names;
	for (i = 0; i < n; i++) {
		t = &g->tensors[i];
		memcpy(p, g->map + ti[i].name_off, ti[i].name_len);
		p[ti[i].name_len] = '\0';
		t->name = p;
		p += ti[i].name_len + 1;
		g->tbyname[i] = t;
		if (medha_ggml_block_elems(t->type) == 0)
			continue;
		room = g->data_off > g->size ? 0 : g->size - g->data_off;
		if (t->offset > room || ti[i].nbytes > room - t->offset) {
			tensor_ctx(r, i, t->name, ti[i].name_len);
			r->off = ti[i].info_off;
			return gguf_fail(r, MEDHA_ETRUNC,
			    "data of %llu bytes at offset %llu of the data "
			    "section (file offset %llu) runs past the end of "
			    "the file",
			    (unsigned long long)ti[i].nbytes,
			    (unsigned long long)t->offset,
			    (unsigned long long)(g->data_off + t->offset));
		}
		t->data = g->map + g->data_off + t->offset;
		t->nbytes = (size_t)ti[i].nbytes;
	}
	if ((rc = check_overlap(g, r, ti)) != 0)
		return rc;
	qsort(g->tbyname, (size_t)n, sizeof(*g->tbyname), tbyname_cmp);
	for (i = 1; i < n; i++)
		if (strcmp(g->tbyname[i - 1]->name, g->tbyname[i]->name) == 0) {
			t = (struct medha_tensor *)g->tbyname[i];
			tensor_ctx(r, (uint64_t)(t - g->tensors), t->name,
			    strlen(t->name));
			r->off = ti[t - g->tensors].info_off;
			return gguf_fail(r, MEDHA_EFORMAT,
			    "duplicate name (first as tensor %llu)",
			    (unsigned long long)(g->tbyname[i - 1] -
			        g->tensors));
		}
	return 0;
}

int
gguf_read_tensors(struct medha_gguf *g, struct gguf_rd *r)
{
	struct tinfo *ti;
	uint64_t i, n = g->n_tensors;
	size_t names = 0;
	int rc;

	if ((rc = read_alignment(g, r)) != 0)
		return rc;
	snprintf(r->ctx, sizeof(r->ctx), "tensor information");
	if (n > GGUF_TENSOR_MAX)
		return gguf_fail(r, MEDHA_EFORMAT,
		    "tensor count %llu exceeds the limit of %u",
		    (unsigned long long)n, GGUF_TENSOR_MAX);
	if (n > gguf_left(r) / GGUF_TENSOR_MIN_BYTES)
		return gguf_fail(r, MEDHA_ETRUNC,
		    "%llu tensors announced but only %zu bytes follow the "
		    "metadata",
		    (unsigned long long)n, gguf_left(r));
	g->tensors = medha_calloc((size_t)n, sizeof(*g->tensors));
	g->tbyname = medha_calloc((size_t)n, sizeof(*g->tbyname));
	ti = medha_calloc((size_t)n, sizeof(*ti));
	if (g->tensors == NULL || g->tbyname == NULL || ti == NULL) {
		free(ti);
		return gguf_fail(r, MEDHA_ENOMEM, "out of memory");
	}
	for (i = 0; i < n; i++) {
		if ((rc = read_info(g, r, i, &g->tensors[i], &ti[i])) != 0) {
			free(ti);
			return rc;
		}
		names += ti[i].name_len + 1; /* at most the file size + n */
	}
	/* r->off <= size, and the alignment is at most 2^30 */
	g->data_off =
	    ((uint64_t)r->off + g->alignment - 1) & ~(g->alignment - 1);
	rc = check_tensors(g, r, ti, names == 0 ? 1 : names);
	free(ti);
	return rc;
}

void
gguf_free_tensors(struct medha_gguf *g)
{
	free(g->tensors);
	free(g->tbyname);
	free(g->names);
}

uint64_t
medha_gguf_alignment(const struct medha_gguf *g)
{
	return g->alignment;
}

uint64_t
medha_gguf_data_offset(const struct medha_gguf *g)
{
	return g->data_off;
}

const struct medha_tensor *
medha_gguf_tensor_at(const struct medha_gguf *g, uint64_t i)
{
	if (i >= g->n_tensors)
		return NULL;
	return &g->tensors[i];
}

const struct medha_tensor *
medha_gguf_tensor_get(const struct medha_gguf *g, const char *name)
{
	size_t lo = 0, hi = (size_t)g->n_tensors, mid;
	int c;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		c = strcmp(name, g->tbyname[mid]->name);
		if (c == 0)
			return g->tbyname[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

int
medha_gguf_tensor_lookup(const struct medha_gguf *g, const char *name,
    const struct medha_tensor **tp, char *why, size_t whylen)
{
	const struct medha_tensor *t = medha_gguf_tensor_get(g, name);

	*tp = NULL;
	if (t == NULL)
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "no tensor named \"%s\"", name);
	if (t->data == NULL && medha_ggml_block_elems(t->type) == 0)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "tensor \"%s\": type %d is not supported by this build",
		    name, t->type);
	*tp = t;
	return 0;
}
