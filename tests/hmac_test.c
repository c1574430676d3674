/*
 * hmac_test.c: HMAC-SHA256 (libcore/hmac.c) against RFC 4231's test
 * cases 1 to 4, 6 and 7 (case 5 is a truncated MAC), its message given
 * whole and in pieces; SHA-256 against FIPS 180-2's "abc" and the empty
 * string, whole and in pieces; random bytes that differ between calls.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "hmac.h"

static void
unhex(const char *h, uint8_t *out)
{
	for (size_t i = 0; h[2 * i] != '\0'; i++) {
		unsigned v;
		sscanf(h + 2 * i, "%2x", &v);
		out[i] = (uint8_t)v;
	}
}

static void
check(const void *key, size_t klen, const void *msg, size_t mlen,
    const char *want)
{
	uint8_t mac[MEDHA_SHA256_LEN], exp[MEDHA_SHA256_LEN];
	char hex[2 * MEDHA_SHA256_LEN + 1];
	struct medha_buf whole = {msg, mlen};
	struct medha_buf parts[3];

	unhex(want, exp);
	assert_int_equal(medha_hmac_sha256(key, klen, &whole, 1, mac), 0);
	medha_hex(mac, sizeof(mac), hex);
	assert_string_equal(hex, want);
	/* the same message in three pieces, one of them empty */
	parts[0] = (struct medha_buf){msg, mlen / 3};
	parts[1] = (struct medha_buf){"", 0};
	parts[2] = (struct medha_buf){(const uint8_t *)msg + mlen / 3,
	    mlen - mlen / 3};
	assert_int_equal(medha_hmac_sha256(key, klen, parts, 3, mac), 0);
	assert_true(medha_equal_ct(mac, exp, sizeof(mac)));
	mac[31] ^= 1;
	assert_false(medha_equal_ct(mac, exp, sizeof(mac)));
}

static void
test_rfc4231(void **state)
{
	uint8_t k[131], d[50];

	(void)state;
	memset(k, 0x0b, 20);
	check(k, 20, "Hi There", 8,
	    "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	check("Jefe", 4, "what do ya want for nothing?", 28,
	    "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	memset(k, 0xaa, 20);
	memset(d, 0xdd, 50);
	check(k, 20, d, 50,
	    "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
	for (int i = 0; i < 25; i++)
		k[i] = (uint8_t)(i + 1);
	memset(d, 0xcd, 50);
	check(k, 25, d, 50,
	    "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
	memset(k, 0xaa, 131);
	check(k, 131, "Test Using Larger Than Block-Size Key - Hash Key First",
	    54,
	    "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
	static const char m7[] =
	    "This is a test using a larger than block-size key and a larger "
	    "than block-size data. The key needs to be hashed before being "
	    "used by the HMAC algorithm.";
	check(k, 131, m7, sizeof(m7) - 1,
	    "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

static void
test_sha256(void **state)
{
	struct medha_sha256 *h;
	uint8_t d[MEDHA_SHA256_LEN];
	char hex[2 * MEDHA_SHA256_LEN + 1];

	(void)state;
	assert_int_equal(medha_sha256_new(&h), 0);
	assert_int_equal(medha_sha256_add(h, "a", 1), 0);
	assert_int_equal(medha_sha256_add(h, "bc", 2), 0);
	assert_int_equal(medha_sha256_end(h, d), 0);
	medha_hex(d, sizeof(d), hex);
	assert_string_equal(hex,
	    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(medha_sha256_new(&h), 0);
	assert_int_equal(medha_sha256_end(h, d), 0);
	medha_hex(d, sizeof(d), hex);
	assert_string_equal(hex,
	    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void
test_random(void **state)
{
	uint8_t a[32], b[32];

	(void)state;
	assert_int_equal(medha_random(a, sizeof(a)), 0);
	assert_int_equal(medha_random(b, sizeof(b)), 0);
	assert_memory_not_equal(a, b, sizeof(a));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rfc4231),
	    cmocka_unit_test(test_sha256),
	    cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
