/*
 * key.c: the HTTP front door's API keys (medha-router --api-key,
 * --api-key-file; issue 39). A request to a /v1/ route must carry one
 * of them as "Authorization: Bearer KEY", else it is answered 401 with
 * OpenAI's error object. /health and /metrics ask for none (a load
 * balancer's probe and a scraper), as vLLM's --api-key does.
 *
 * The keys are not kept: only HMAC-SHA256 of each under a random salt
 * drawn at open, so that the compare is of 32 bytes whatever the key's
 * length, and in constant time against every key (none ends it early).
 *
 * Each key is a tenant of the replicas' prefix caches (medha-router(1),
 * "Tenants"): its tenant is a hash of the key (medha_oai_key_tenant),
 * the same in every router and after a restart, which reveals nothing
 * of the key and leaves the router only in the salts of its requests
 * (medha_oai_salt_tenant: a hash of it again).
 */
#include "serve/http/impl.h"

#include "hmac.h"

struct http_keys {
	int n;
	uint8_t salt[32];
	uint8_t (*d)[MEDHA_SHA256_LEN];
	uint64_t *tenant; /* (n) each key's tenant, never 0 */
};


static int
digest(const struct http_keys *k, const char *key, size_t len,
    uint8_t out[MEDHA_SHA256_LEN])
{
	struct medha_buf part = {key, len};

	return medha_hmac_sha256(k->salt, sizeof(k->salt), &part, 1, out);
}

int
http_keys_open(struct http_keys **kp, const char *const *keys, int n,
    char *why, size_t whylen)
{
	struct http_keys *k;

	*kp = NULL;
	if (n == 0)
		return 0;
	if ((k = calloc(1, sizeof(*k))) == NULL ||
	    (k->d = calloc((size_t)n, sizeof(*k->d))) == NULL ||
	    (k->tenant = calloc((size_t)n, sizeof(*k->tenant))) == NULL) {
		if (k != NULL)
			free(k->d);
		free(k);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	if (medha_random(k->salt, sizeof(k->salt)) != 0) {
		http_keys_free(k);
		return medha_why(why, whylen, MEDHA_EIO, "no random bytes");
	}
	for (int i = 0; i < n; i++) {
		if (keys[i] == NULL || keys[i][0] == '\0' ||
		    strpbrk(keys[i], " \t\r\n") != NULL) {
			http_keys_free(k);
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "an API key is empty or has white space in it");
		}
		if (digest(k, keys[i], strlen(keys[i]), k->d[i]) != 0 ||
		    medha_oai_key_tenant(keys[i], strlen(keys[i]),
		        &k->tenant[i]) != 0) {
			http_keys_free(k);
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		}
	}
	k->n = n;
	*kp = k;
	return 0;
}

void
http_keys_free(struct http_keys *k)
{
	if (k == NULL)
		return;
	free(k->d);
	free(k->tenant);
	free(k);
}

int
http_keys_ok(const struct http_keys *k, const char *authorization,
    uint64_t *tenant)
{
	uint8_t d[MEDHA_SHA256_LEN];
	const char *t = authorization;
	int ok = 0;

	*tenant = 0;
	if (k == NULL)
		return 1;
	if (t == NULL || strncasecmp(t, "Bearer ", 7) != 0)
		return 0;
	for (t += 7; *t == ' '; t++)
		;
	if (digest(k, t, strcspn(t, " \t"), d) != 0)
		return 0;
	for (int i = 0; i < k->n; i++) {
		int eq = medha_equal_ct(d, k->d[i], sizeof(d)) != 0;
		ok |= eq;
		*tenant |= k->tenant[i] & (0 - (uint64_t)eq); /* no branch */
	}
	return ok;
}
