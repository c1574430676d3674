/*
 * lineio.c: lines in and out, zstd transparent (trace.h). The reader
 * looks at the first bytes of the stream for the zstd magic and then
 * either decompresses in blocks or reads plain lines with getline(), so
 * that it never seeks and works on pipes. The writer is its mirror
 * (optional zstd, level 3, with checksums).
 */
#include "io/trace.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <zstd.h>

#define LINE_LIMIT ((size_t)16 << 20) /* longest line, newline excluded */

static const unsigned char zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};

/* ---- line reader ---- */

struct medha_reader {
	FILE *f;   /* not owned */
	char *buf; /* text, unread part [pos, len), (cap) */
	size_t cap, pos, len;
	size_t scan; /* bytes after pos known to hold no newline */
	int eof;     /* all text is in buf */
	char *gl;    /* plain input: getline() buffer, (glcap) */
	size_t glcap;
	ZSTD_DCtx *dctx;   /* zstd input only */
	unsigned char *in; /* compressed bytes, (incap) */
	size_t incap;
	ZSTD_inBuffer zin; /* src = in */
	size_t zret;       /* last decompress hint; 0 = at a frame end */
	int err;           /* sticky error code */
	char why[160];     /* its reason */
};

static int
reader_fail(struct medha_reader *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	r->err = err;
	return err;
}

int
medha_reader_open(struct medha_reader **rp, FILE *f)
{
	struct medha_reader *r;
	unsigned char head[sizeof(zstd_magic)];
	size_t n = 0;
	int c;

	*rp = NULL;
	/* Read only while the bytes match the magic: no wait for more bytes
	 * behind a short first line on a pipe, and nothing to push back. */
	while (n < sizeof(head) && (c = getc(f)) != EOF) {
		head[n++] = (unsigned char)c;
		if (c != zstd_magic[n - 1])
			break;
	}
	if (ferror(f))
		return MEDHA_EIO;
	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->buf = malloc(r->cap = 1 << 16)) == NULL) {
		free(r);
		return MEDHA_ENOMEM;
	}
	r->f = f;
	if (n < sizeof(head) || memcmp(head, zstd_magic, n) != 0) {
		memcpy(r->buf, head, n); /* the start of the first line */
		r->len = n;
		*rp = r;
		return 0;
	}
	r->incap = ZSTD_DStreamInSize();
	if ((r->dctx = ZSTD_createDCtx()) == NULL ||
	    (r->in = malloc(r->incap)) == NULL) {
		medha_reader_close(r);
		return MEDHA_ENOMEM;
	}
	memcpy(r->in, head, n);
	r->zin.src = r->in;
	r->zin.size = n;
	r->zret = 1;
	*rp = r;
	return 0;
}

/* Moves the unread text to the front and makes room for need bytes. */
static int
reader_room(struct medha_reader *r, size_t need)
{
	size_t cap = r->cap;
	char *p;

	memmove(r->buf, r->buf + r->pos, r->len - r->pos);
	r->len -= r->pos;
	r->pos = 0;
	while (cap - r->len < need)
		cap *= 2;
	if (cap != r->cap) {
		if ((p = realloc(r->buf, cap)) == NULL)
			return reader_fail(r, MEDHA_ENOMEM, "out of memory");
		r->buf = p;
		r->cap = cap;
	}
	return 0;
}

/*
 * Appends more text to buf, always keeping a byte free for a final NUL:
 * for plain input one getline() (which returns at a newline, so lines on
 * a pipe are seen as they come), for zstd one decompression step.
 */
static int
reader_fill(struct medha_reader *r)
{
	ZSTD_outBuffer out;
	size_t ret;
	ssize_t n;

	if (r->dctx == NULL) {
		errno = 0;
		if ((n = getline(&r->gl, &r->glcap, r->f)) < 0) {
			if (ferror(r->f) || errno == ENOMEM)
				return reader_fail(r,
				    errno == ENOMEM ? MEDHA_ENOMEM : MEDHA_EIO,
				    "read error: %s", strerror(errno));
			r->eof = 1;
			return 0;
		}
		if (r->len - r->pos + n > LINE_LIMIT + 1)
			return reader_fail(r, MEDHA_EFORMAT,
			    "line longer than 16 MiB");
		if (reader_room(r, n + 1) != 0)
			return r->err;
		memcpy(r->buf + r->len, r->gl, n);
		r->len += n;
		return 0;
	}
	if (r->zin.pos == r->zin.size) {
		r->zin.size = fread(r->in, 1, r->incap, r->f);
		r->zin.pos = 0;
		if (r->zin.size == 0) {
			if (ferror(r->f))
				return reader_fail(r, MEDHA_EIO,
				    "read error: %s", strerror(errno));
			if (r->zret != 0)
				return reader_fail(r, MEDHA_EFORMAT,
				    "truncated zstd stream");
			r->eof = 1;
			return 0;
		}
	}
	if (reader_room(r, 4096) != 0)
		return r->err;
	out.dst = r->buf + r->len;
	out.size = r->cap - r->len - 1;
	out.pos = 0;
	ret = ZSTD_decompressStream(r->dctx, &out, &r->zin);
	if (ZSTD_isError(ret))
		return reader_fail(r, MEDHA_EFORMAT, "corrupt zstd stream: %s",
		    ZSTD_getErrorName(ret));
	r->zret = ret;
	r->len += out.pos;
	return 0;
}

int
medha_reader_line(struct medha_reader *r, char **lp, size_t *lenp)
{
	char *line, *nl;
	size_t n;

	while (r->err == 0) {
		line = r->buf + r->pos;
		nl = memchr(line + r->scan, '\n', r->len - r->pos - r->scan);
		if (nl == NULL && !r->eof) {
			r->scan = r->len - r->pos;
			if (r->scan > LINE_LIMIT)
				return reader_fail(r, MEDHA_EFORMAT,
				    "line longer than 16 MiB");
			reader_fill(r);
			continue;
		}
		n = nl != NULL ? (size_t)(nl - line) : r->len - r->pos;
		if (nl == NULL && n == 0)
			return 0;
		line[n] = '\0'; /* the newline, or the byte kept free */
		r->pos += nl != NULL ? n + 1 : n;
		r->scan = 0;
		if (n > 0 && line[n - 1] == '\r')
			line[--n] = '\0';
		if (memchr(line, '\0', n) != NULL)
			return reader_fail(r, MEDHA_EFORMAT,
			    "line holds a NUL byte");
		*lp = line;
		*lenp = n;
		return 1;
	}
	return r->err;
}

const char *
medha_reader_error(const struct medha_reader *r)
{
	return r->err != 0 ? r->why : "";
}

void
medha_reader_close(struct medha_reader *r)
{
	if (r == NULL)
		return;
	ZSTD_freeDCtx(r->dctx);
	free(r->in);
	free(r->buf);
	free(r->gl);
	free(r);
}

/* ---- writer ---- */

struct medha_writer {
	FILE *f;         /* not owned */
	ZSTD_CCtx *cctx; /* NULL for plain output */
	void *out;       /* compressed bytes, (outcap) */
	size_t outcap;
	int err; /* sticky */
};

int
medha_writer_open(struct medha_writer **wp, FILE *f, int zstd)
{
	struct medha_writer *w;

	*wp = NULL;
	if ((w = calloc(1, sizeof(*w))) == NULL)
		return MEDHA_ENOMEM;
	w->f = f;
	if (zstd) {
		w->outcap = ZSTD_CStreamOutSize();
		w->cctx = ZSTD_createCCtx();
		w->out = malloc(w->outcap);
		if (w->cctx == NULL || w->out == NULL) {
			ZSTD_freeCCtx(w->cctx);
			free(w->out);
			free(w);
			return MEDHA_ENOMEM;
		}
		ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, 3);
		/* as the zstd tool does: damage is found, not passed on */
		ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
	}
	*wp = w;
	return 0;
}

/* Runs the compressor over in with mode, writing what it produces. */
static int
writer_zstd(struct medha_writer *w, ZSTD_inBuffer *in, ZSTD_EndDirective mode)
{
	ZSTD_outBuffer out;
	size_t ret;

	do {
		out.dst = w->out;
		out.size = w->outcap;
		out.pos = 0;
		ret = ZSTD_compressStream2(w->cctx, &out, in, mode);
		if (ZSTD_isError(ret))
			return w->err = MEDHA_EIO;
		if (out.pos > 0 && fwrite(w->out, 1, out.pos, w->f) != out.pos)
			return w->err = MEDHA_EIO;
	} while (mode == ZSTD_e_end ? ret != 0 : in->pos < in->size);
	return 0;
}

int
medha_writer_write(struct medha_writer *w, const void *buf, size_t len)
{
	ZSTD_inBuffer in = {buf, len, 0};

	if (w->err != 0)
		return w->err;
	if (len == 0)
		return 0;
	if (w->cctx != NULL)
		return writer_zstd(w, &in, ZSTD_e_continue);
	if (fwrite(buf, 1, len, w->f) != len)
		return w->err = MEDHA_EIO;
	return 0;
}

int
medha_writer_printf(struct medha_writer *w, const char *fmt, ...)
{
	char small[512], *p = small;
	va_list ap, ap2;
	int n, rc;

	va_start(ap, fmt);
	va_copy(ap2, ap);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		va_end(ap2);
		return w->err = MEDHA_EINVAL;
	}
	if ((size_t)n >= sizeof(small)) {
		if ((p = malloc((size_t)n + 1)) == NULL) {
			va_end(ap2);
			return w->err = MEDHA_ENOMEM;
		}
		vsnprintf(p, (size_t)n + 1, fmt, ap2);
	}
	va_end(ap2);
	rc = medha_writer_write(w, p, n);
	if (p != small)
		free(p);
	return rc;
}

int
medha_writer_error(const struct medha_writer *w)
{
	return w->err;
}

int
medha_writer_close(struct medha_writer *w)
{
	ZSTD_inBuffer in = {NULL, 0, 0};
	int err;

	if (w == NULL)
		return 0;
	if (w->cctx != NULL && w->err == 0)
		writer_zstd(w, &in, ZSTD_e_end);
	if (fflush(w->f) != 0 || ferror(w->f))
		w->err = MEDHA_EIO;
	err = w->err;
	ZSTD_freeCCtx(w->cctx);
	free(w->out);
	free(w);
	return err;
}

int
medha_path_is_zst(const char *path)
{
	size_t n = strlen(path);

	return n >= 4 && strcmp(path + n - 4, ".zst") == 0;
}
