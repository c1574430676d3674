/*
 * hmac.c: SHA-256 and HMAC-SHA256 over OpenSSL's libcrypto (hmac.h).
 * The HMAC method is fetched once; each MAC has a context of its own,
 * so that any thread may compute one.
 */
#include "hmac.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static EVP_MAC *hmac;

static void
fetch(void)
{
	hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

int
medha_hmac_sha256(const void *key, size_t klen, const struct medha_buf *parts,
    int n, uint8_t out[MEDHA_SHA256_LEN])
{
	OSSL_PARAM params[2];
	EVP_MAC_CTX *c;
	size_t outl = 0;
	int ok;

	pthread_once(&once, fetch);
	if (hmac == NULL || (c = EVP_MAC_CTX_new(hmac)) == NULL)
		return MEDHA_ENOMEM;
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
	    (char *)"SHA256", 0);
	params[1] = OSSL_PARAM_construct_end();
	/* an empty key is a key of no bytes, not "none" */
	ok = EVP_MAC_init(c, klen ? key : (const void *)"", klen, params);
	for (int i = 0; ok && i < n; i++)
		if (parts[i].len > 0)
			ok = EVP_MAC_update(c, parts[i].p, parts[i].len);
	ok = ok && EVP_MAC_final(c, out, &outl, MEDHA_SHA256_LEN) &&
	    outl == MEDHA_SHA256_LEN;
	EVP_MAC_CTX_free(c);
	return ok ? 0 : MEDHA_ENOMEM;
}

struct medha_sha256 {
	EVP_MD_CTX *c;
};

int
medha_sha256_new(struct medha_sha256 **hp)
{
	struct medha_sha256 *h;

	*hp = NULL;
	if ((h = calloc(1, sizeof(*h))) == NULL)
		return MEDHA_ENOMEM;
	if ((h->c = EVP_MD_CTX_new()) == NULL ||
	    !EVP_DigestInit_ex(h->c, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(h->c);
		free(h);
		return MEDHA_ENOMEM;
	}
	*hp = h;
	return 0;
}

int
medha_sha256_add(struct medha_sha256 *h, const void *p, size_t len)
{
	return len == 0 || EVP_DigestUpdate(h->c, p, len) ? 0 : MEDHA_ENOMEM;
}

int
medha_sha256_end(struct medha_sha256 *h, uint8_t out[MEDHA_SHA256_LEN])
{
	unsigned int n = 0;
	int ok;

	if (h == NULL)
		return 0;
	ok = out == NULL ||
	    (EVP_DigestFinal_ex(h->c, out, &n) && n == MEDHA_SHA256_LEN);
	EVP_MD_CTX_free(h->c);
	free(h);
	return ok ? 0 : MEDHA_ENOMEM;
}

int
medha_equal_ct(const void *a, const void *b, size_t n)
{
	return CRYPTO_memcmp(a, b, n) == 0;
}

int
medha_random(void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n > 0) {
		ssize_t k = getrandom(p, n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return MEDHA_EIO;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

void
medha_hex(const uint8_t *d, size_t n, char *out)
{
	static const char x[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = x[d[i] >> 4];
		out[2 * i + 1] = x[d[i] & 15];
	}
	out[2 * n] = '\0';
}
