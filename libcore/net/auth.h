/*
 * auth.h: the credential every link of a deployment shares (issue 28,
 * man/medha-proto.7 "AUTHENTICATION"): a secret read from a file, with
 * which
 *  - each connection to a server (net/link.h: a scheduler's or a
 *    router's socket) answers a challenge before its first message is
 *    taken: the client sends HELLO with a nonce, the server answers with
 *    a nonce and its proof, HMAC-SHA256(secret, "medha server" || the
 *    client's nonce || its own), the client answers with its proof,
 *    HMAC(secret, "medha client" || the server's nonce || its own), and
 *    the server says OK; until then the server answers any other
 *    message with NOAUTH and takes nothing from it, and a client that
 *    gets no valid proof sends nothing (a server without the secret is
 *    refused too);
 *  - each message between a replica's workers (net/coll.h) carries an
 *    HMAC of its header and payload, and one without a valid one is
 *    dropped.
 * The secret is the process's (medha_auth_load, or medha_auth_set in
 * tests) and is set before any link opens. Without one the links are as
 * before: open to whoever reaches them, so a server refuses to listen
 * on a tcp address that is not loopback unless told it may
 * (medha_auth_insecure).
 */
#ifndef MEDHA_NET_AUTH_H
#define MEDHA_NET_AUTH_H

#include "medha.h"
#include "hmac.h"

#include <stddef.h>
#include <stdint.h>

#define MEDHA_AUTH_MIN 16   /* bytes of secret, at least */
#define MEDHA_AUTH_MAX 4096 /* and at most */
#define MEDHA_AUTH_NONCE 32

/*
 * Read the secret from path: its bytes but one trailing newline, 16 to
 * 4096 of them, at least 16 not white space. The file must be a regular
 * file (checked before it is opened: a FIFO would wait for ever) that
 * neither its group nor others may read or write. Returns 0, MEDHA_EIO
 * or MEDHA_EINVAL, with why.
 */
int medha_auth_load(const char *path, char *why, size_t whylen);
/* Set the secret to n bytes of k (n 0: none). */
void medha_auth_set(const void *k, size_t n);
/* The secret, *n bytes, or NULL when there is none. */
const uint8_t *medha_auth_secret(size_t *n);
/* Allow listening on a non-loopback tcp address without a secret. */
void medha_auth_insecure(int yes);
/* Whether it was allowed (medha-router's --http asks it too). */
int medha_auth_is_insecure(void);
/* Whether HOST of "HOST:PORT" is loopback: 127.0.0.0/8, localhost,
   [::1]. */
int medha_auth_loopback(const char *hostport);
/*
 * Read a private file (what names it in why: "secret file", "API key
 * file"): refused before it is opened unless it is a regular file (a
 * FIFO would wait for ever), and unless neither its group nor others
 * may read or write it; then at most cap bytes of it into out, *len of
 * them. Returns 0, MEDHA_EIO or MEDHA_EINVAL, with why.
 */
int medha_auth_read(const char *what, const char *path, void *out, size_t cap,
    size_t *len, char *why, size_t whylen);

/*
 * Whether a server may listen at url: 0, or MEDHA_EINVAL with why when
 * url is a tcp address that is not loopback, there is no secret and
 * insecure was not set.
 */
int medha_auth_listen_ok(const char *url, char *why, size_t whylen);

/* ---- the handshake's frames (net/link.c) ---- */

/* A frame begins with these 8 bytes (0xc1 is no msgpack byte, so no
   message of net/proto.h begins so), then its kind. */
#define MEDHA_AUTH_MAGIC "\xc1MEDHA-A"
#define MEDHA_AUTH_MAGIC_LEN 8
enum {
	MEDHA_AUTH_HELLO = 1, /* client: nonce */
	MEDHA_AUTH_CHAL,      /* server: nonce, proof */
	MEDHA_AUTH_PROOF,     /* client: proof */
	MEDHA_AUTH_OK,        /* server: taken */
	MEDHA_AUTH_NOAUTH,    /* server: not taken: authenticate first */
	MEDHA_AUTH_PIECE,     /* client, proven: id (4), last (1), bytes:
	                         a piece of a request larger than
	                         MEDHA_LINK_PIECE (net/link.h); the server
	                         answers OK to each but the last, and hands
	                         out the request whole with the last */
};
#define MEDHA_AUTH_PIECE_HDR (MEDHA_AUTH_MAGIC_LEN + 1 + 4 + 1)
/* The most bytes a frame takes. */
#define MEDHA_AUTH_FRAME_MAX \
	(MEDHA_AUTH_MAGIC_LEN + 1 + MEDHA_AUTH_NONCE + MEDHA_SHA256_LEN)

/* The kind of frame buf is (MEDHA_AUTH_*), or 0 if it is none. */
int medha_auth_kind(const void *buf, size_t len);
/* A frame of kind with the n bytes of body into out; its length. */
size_t medha_auth_frame(uint8_t *out, int kind, const void *body, size_t n);
/*
 * A link's own copy of the secret, taken when it opens (NULL, *n 0: no
 * secret then); the caller frees it.
 */
uint8_t *medha_auth_copy(size_t *n);
/*
 * The proof of side ("server" or "client") over nonce a then nonce b,
 * under key (klen bytes). 0 or MEDHA_ENOMEM.
 */
int medha_auth_proof(const uint8_t *key, size_t klen, const char *side,
    const uint8_t *a, const uint8_t *b, uint8_t out[MEDHA_SHA256_LEN]);

#endif
