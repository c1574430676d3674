/*
 * proto_impl.h: what the three parts of the wire codec share and nothing
 * else includes. proto.c holds the message names, the clear functions
 * and the checks that a message's struct is one the protocol allows;
 * proto_enc.c writes msgpack, proto_dec.c reads it (its typed getters in
 * proto_dec_get.c, requests and records in proto_dec_req.c). Both
 * directions run the same checks (proto_check), so the encoder refuses
 * exactly the structs the decoder would never produce. Internal names
 * carry a plain proto_ prefix; the public API is net/proto.h.
 */
#ifndef MEDHA_PROTO_IMPL_H
#define MEDHA_PROTO_IMPL_H

#include "net/proto.h"

#include <stdarg.h>

#define PROTO_DEPTH 8 /* deepest nesting of arrays and maps in a frame */
#define PROTO_RECORD_REASON ((int)sizeof(((struct medha_record *)0)->reason))

/*
 * The decoder's first gate, on the raw bytes: p[0..len) must be one
 * msgpack value of the types the protocol uses (no ext, no reserved
 * byte), nested at most PROTO_DEPTH deep, whose arrays and maps claim no
 * more elements than there are bytes left, with nothing after it. Only
 * then may msgpack-c build its tree, whose size is then bounded by len's.
 * Returns 0 or MEDHA_EFORMAT with "frame: ..." in why.
 */
int proto_scan(const uint8_t *p, size_t len, char *why, size_t whylen);

/*
 * Check every field of m (of type m->type) against the protocol's ranges.
 * Returns 0 or err (MEDHA_EINVAL for the encoder, MEDHA_EFORMAT for the
 * decoder) with "<message>: <field>: <problem>" in why.
 */
int proto_check(const struct medha_msg *m, int err, char *why, size_t whylen);

/*
 * Quiet mode: the checks and the decoder first run with proto_quiet set,
 * building no field paths and no reasons (snprintf on every field cost
 * more than the decoding itself); only when they fail do they run again
 * loud, for the reason. PROTO_PATH writes a path only when loud.
 */
extern _Thread_local int proto_quiet;
#define PROTO_PATH(buf, ...)                                   \
	do {                                                   \
		if (proto_quiet)                               \
			(buf)[0] = '\0';                       \
		else                                           \
			snprintf((buf), sizeof(buf), __VA_ARGS__); \
	} while (0)

/*
 * Write "<msg>: <path>: <fmt...>" into why and return err; an empty path
 * leaves out its part.
 */
int
proto_fail(char *why, size_t whylen, int err, const char *msg, const char *path,
    const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* 1 if p[0..n) is well-formed UTF-8 (no overlongs, no surrogates). */
int proto_utf8_valid(const char *p, size_t n);

/* 1 if s is one of the backends a HELLO may name. */
int proto_backend_valid(const char *s);

#endif
