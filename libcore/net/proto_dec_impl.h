/*
 * proto_dec_impl.h: what the three parts of the wire decoder share and
 * nothing else includes. proto_dec_get.c holds the typed getters: each
 * reads one msgpack object into a C field, checking its type, range or
 * keys, and on failure writes "<message>: <path>: <problem>" into the
 * decoder's reason. proto_dec_req.c decodes the two shapes that travel
 * inside messages, a request (SUBMIT) and a record (an EVENTS finish);
 * proto_dec.c decodes the frame and each message's body. Internal names
 * carry a dec_ prefix; the decoder's public entry is medha_msg_decode
 * (net/proto.h), and what it shares with the encoder is proto_impl.h.
 */
#ifndef MEDHA_PROTO_DEC_IMPL_H
#define MEDHA_PROTO_DEC_IMPL_H

#include "net/proto_impl.h"

#include <msgpack.h>

/* The decoder of one frame: what its reasons name and where they go. */
struct dec {
	const char *msg; /* message name, for reasons */
	char *why;
	size_t whylen;
};

#define BAD(d, path, ...)                                                  \
	proto_fail((d)->why, (d)->whylen, MEDHA_EFORMAT, (d)->msg, (path), \
	    __VA_ARGS__)

/*
 * The typed getters (proto_dec_get.c). Each checks the object o found at
 * path and returns 0, MEDHA_EFORMAT with the reason written through
 * BAD, or (those that allocate) MEDHA_ENOMEM. Paths are built only when
 * loud (proto_quiet): dec_join and dec_join_idx write an empty one.
 */
const char *dec_join_idx(char *buf, size_t size, const char *a, uint32_t i);
int dec_get_i64(struct dec *d, const msgpack_object *o, const char *path,
    int64_t *out);
int
dec_get_int(struct dec *d, const msgpack_object *o, const char *path, int *out);
int dec_get_num(struct dec *d, const msgpack_object *o, const char *path,
    double *out);
int dec_get_float(struct dec *d, const msgpack_object *o, const char *path,
    float *out);
int dec_get_str(struct dec *d, const msgpack_object *o, const char *path,
    int bin, char *dst, size_t cap, size_t lo);
int dec_dup_text(struct dec *d, const msgpack_object *o, const char *path,
    int nul_ok, char **out, size_t *len);
int dec_get_arr(struct dec *d, const msgpack_object *o, const char *path,
    uint32_t lo, uint32_t hi);
int dec_get_ids(struct dec *d, const msgpack_object *o, const char *path,
    uint32_t lo, uint32_t hi, int32_t **ids, int64_t *n);
int dec_get_map(struct dec *d, const msgpack_object *o, const char *path,
    const char *const *keys, int nkeys, const msgpack_object **vals);
int dec_need(struct dec *d, const char *path, const char *const *keys,
    int nkeys, const msgpack_object **vals, uint32_t mask);

/*
 * The smallest getters are inline: they run on every item of a BATCH,
 * and called across files they cost the decoder some 2% more
 * instructions.
 */

/* "a.b", or b alone when a is empty, into buf. */
static inline const char *
dec_join(char *buf, size_t size, const char *a, const char *b)
{
	if (proto_quiet)
		buf[0] = '\0';
	else
		snprintf(buf, size, "%s%s%s", a, a[0] != '\0' ? "." : "", b);
	return buf;
}

static inline int
dec_get_u64(struct dec *d, const msgpack_object *o, const char *path,
    uint64_t *out)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return BAD(d, path, "not a non-negative integer");
	*out = o->via.u64;
	return 0;
}

static inline int
dec_get_bool(struct dec *d, const msgpack_object *o, const char *path, int *out)
{
	if (o->type != MSGPACK_OBJECT_BOOLEAN)
		return BAD(d, path, "not a boolean");
	*out = o->via.boolean;
	return 0;
}

/* A request (SUBMIT's body) into rs (proto_dec_req.c). */
int
dec_reqspec(struct dec *d, const msgpack_object *o, struct medha_reqspec *rs);

/* [logprob, [[id, logprob(, bytes)], ...](, bytes)] into *lp (the top:
   at most 20; bytes, the drawn token's name, or NULL: none). */
int dec_lp(struct dec *d, const msgpack_object *lpv, const msgpack_object *top,
    const msgpack_object *bytes, const char *path, struct medha_token_lp *lp);
/* An array of n of those, malloc'd into *lps. */
int dec_lps(struct dec *d, const msgpack_object *o, const char *path,
    int64_t n, struct medha_token_lp **lps);
/*
 * A record (an EVENTS finish) into r; pfx is the path of o, for reasons
 * (proto_dec_req.c).
 */
int dec_record(struct dec *d, const msgpack_object *o, const char *pfx,
    struct medha_record *r);

#endif
