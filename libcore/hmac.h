/*
 * hmac.h: SHA-256 and HMAC-SHA256 (OpenSSL's libcrypto underneath, a
 * vetted implementation; tests/hmac_test.c checks it against RFC 4231's
 * vectors), and random bytes from the kernel. The links' credential
 * (net/auth.h) and the model fingerprint (model/model.h) use them.
 *
 *	uint8_t mac[MEDHA_SHA256_LEN];
 *	const struct medha_buf parts[] = {{"label", 5}, {nonce, 32}};
 *	medha_hmac_sha256(key, keylen, parts, 2, mac);
 */
#ifndef MEDHA_HMAC_H
#define MEDHA_HMAC_H

#include "medha.h"

#include <stddef.h>
#include <stdint.h>

#define MEDHA_SHA256_LEN 32

/* A piece of a message: len bytes at p. */
struct medha_buf {
	const void *p;
	size_t len;
};

/*
 * HMAC-SHA256 of the n parts, one after the other, under key (klen
 * bytes) into out. Returns 0 or MEDHA_ENOMEM.
 */
int medha_hmac_sha256(const void *key, size_t klen,
    const struct medha_buf *parts, int n, uint8_t out[MEDHA_SHA256_LEN]);

/* SHA-256 of data given in pieces. */
struct medha_sha256;
int medha_sha256_new(struct medha_sha256 **h);
int medha_sha256_add(struct medha_sha256 *h, const void *p, size_t len);
/* The digest into out; h is freed. h may be NULL (then only freed). */
int medha_sha256_end(struct medha_sha256 *h, uint8_t out[MEDHA_SHA256_LEN]);

/* Whether the n bytes at a and b are equal, in a time that does not
   depend on where they differ. */
int medha_equal_ct(const void *a, const void *b, size_t n);

/* n random bytes from the kernel (getrandom). 0 or MEDHA_EIO. */
int medha_random(void *buf, size_t n);

/* The 64 lowercase hex digits of a digest, NUL-terminated, into out. */
void medha_hex(const uint8_t *d, size_t n, char *out);

#endif
