/*
 * trace.h: traces in, result records out (doc/DESIGN.md section 4;
 * man/medha-trace.5 is normative).
 *
 * A trace is JSON Lines, one request a line; the reader also takes the
 * Azure LLM inference CSV (TIMESTAMP,ContextTokens,GeneratedTokens) and
 * Vidur's CSV (arrived_at,num_prefill_tokens,num_decode_tokens), told
 * apart by their header line. Any input may be zstd-compressed: the
 * reader looks at the first four bytes (the zstd magic), not at a name.
 *
 *	struct medha_trace_in *t;
 *	struct medha_reqspec rs;
 *	if (medha_trace_open(&t, stdin) != 0) ...
 *	while ((rc = medha_trace_next(t, &rs)) == 1)
 *		...;
 *	if (rc < 0) fprintf(stderr, "%s\n", medha_trace_error(t));
 *	medha_trace_close(t);
 */
#ifndef MEDHA_TRACE_H
#define MEDHA_TRACE_H

#include "medha.h"
#include "req.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- lines in and out, zstd transparent (lineio.c) ---- */

struct medha_reader;
/* Reads lines from f (not closed by the reader; caller owns f). */
int medha_reader_open(struct medha_reader **r, FILE *f);
/*
 * Next line, newline stripped, NUL-terminated; *line is valid until the
 * next call. Returns 1, 0 at end of input, or MEDHA_EIO / MEDHA_EFORMAT
 * (corrupt zstd frame) / MEDHA_ENOMEM. Lines longer than 16 MiB are
 * MEDHA_EFORMAT.
 */
int medha_reader_line(struct medha_reader *r, char **line, size_t *len);
/* Reason for the last error ("truncated zstd stream"); "" if none. Static
 * storage of r, valid until medha_reader_close(). */
const char *medha_reader_error(const struct medha_reader *r);
void medha_reader_close(struct medha_reader *r);

struct medha_writer;
/* Writes to f (caller owns f); zstd != 0 compresses (level 3). */
int medha_writer_open(struct medha_writer **w, FILE *f, int zstd);
int medha_writer_write(struct medha_writer *w, const void *buf, size_t len);
int medha_writer_printf(struct medha_writer *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The sticky error: 0, or the first write's failure (MEDHA_EIO, ...). */
int medha_writer_error(const struct medha_writer *w);
/* Ends the zstd frame and flushes f; returns MEDHA_EIO if any write failed. */
int medha_writer_close(struct medha_writer *w);
/* 1 if path ends in ".zst". */
int medha_path_is_zst(const char *path);

/* ---- traces ---- */

struct medha_trace_in;
int medha_trace_open(struct medha_trace_in **t, FILE *f);
/*
 * Next request into *rs (previous contents cleared). Returns 1, 0 at end,
 * or a negative code with medha_trace_error() naming the line and the
 * problem (e.g. "line 7: prompt_tokens: not an integer in [1, 1000000000]
 * (got 0)"). Every format is held to the limits of req.h
 * (MEDHA_TOKENS_MAX, MEDHA_TIME_MAX): a request returned is within them.
 * Blank lines and lines starting with '#' are skipped. *rs must start
 * zeroed (its prompt is freed); an id the input lacks becomes the 0-based
 * number of the request in the trace.
 */
int medha_trace_next(struct medha_trace_in *t, struct medha_reqspec *rs);
const char *medha_trace_error(const struct medha_trace_in *t);
void medha_trace_close(struct medha_trace_in *t);

/*
 * Parse one JSON trace line, its counts and times within the limits of
 * req.h; why gets a reason on MEDHA_EFORMAT. *rs is
 * overwritten (an earlier rs->prompt is not freed); on success a prompt
 * is owned by the caller (medha_reqspec_clear), on failure none is left.
 * A line without "id" leaves rs->id empty.
 */
int medha_reqspec_parse(const char *line, struct medha_reqspec *rs, char *why,
    size_t whylen);
/* Write rs as one JSON line (with newline); MEDHA_EINVAL (nothing
 * written) for what medha_reqspec_parse() would refuse. */
int medha_reqspec_write(struct medha_writer *w, const struct medha_reqspec *rs);

/* ---- records ---- */

/*
 * Parse one record line: counts within MEDHA_TOKENS_MAX, times any
 * finite number >= 0 (prefill_alone > 0), a "tbt" histogram as
 * medha_tbt_check() takes it; why gets a reason on MEDHA_EFORMAT. On
 * success *rec owns its token_ids, text and tbt (medha_record_clear);
 * on failure it is not touched.
 */
int medha_record_parse(const char *line, struct medha_record *rec, char *why,
    size_t whylen);
/* Write rec as one JSON line (with newline); MEDHA_EINVAL (nothing
 * written) for what medha_record_parse() would refuse of its times,
 * counts, names and tbt. */
int medha_record_write(struct medha_writer *w, const struct medha_record *rec);

#endif
