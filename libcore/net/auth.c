/*
 * auth.c: the process's secret and the handshake's pieces (auth.h).
 */
#include "net/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint8_t secret[MEDHA_AUTH_MAX];
static size_t secret_len;
static int insecure;

void
medha_auth_set(const void *k, size_t n)
{
	if (n > sizeof(secret))
		n = sizeof(secret);
	if (n > 0)
		memcpy(secret, k, n);
	secret_len = n;
}

const uint8_t *
medha_auth_secret(size_t *n)
{
	*n = secret_len;
	return secret_len > 0 ? secret : NULL;
}

void
medha_auth_insecure(int yes)
{
	insecure = yes;
}

int
medha_auth_is_insecure(void)
{
	return insecure;
}

/* How many of the n bytes of p are not white space. */
static size_t
nonblank(const uint8_t *p, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += !(p[i] == ' ' || p[i] == '\t' || p[i] == '\n' ||
		    p[i] == '\r' || p[i] == '\v' || p[i] == '\f');
	return k;
}

int
medha_auth_read(const char *what, const char *path, void *out, size_t cap,
    size_t *len, char *why, size_t whylen)
{
	uint8_t *buf = out;
	struct stat st;
	ssize_t n;
	int fd;

	*len = 0;
	/* a FIFO or a device is refused before it is opened (opening a
	   FIFO waits for a writer for ever), and opened without waiting in
	   case one took the file's place since */
	if (stat(path, &st) != 0)
		return medha_why(why, whylen, MEDHA_EIO, "%s %s: %s", what,
		    path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%s %s: not a regular file", what, path);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0)
		return medha_why(why, whylen, MEDHA_EIO, "%s %s: %s", what,
		    path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%s %s: not a regular file", what, path);
	}
	if (st.st_mode & 077) {
		close(fd);
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%s %s: mode %03o: its group or others may use it "
		    "(chmod 600 it)",
		    what, path, (unsigned)(st.st_mode & 0777));
	}
	while (*len < cap && (n = read(fd, buf + *len, cap - *len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			memset(buf, 0, *len);
			return medha_why(why, whylen, MEDHA_EIO, "%s %s: %s",
			    what, path, strerror(e));
		}
		*len += (size_t)n;
	}
	close(fd);
	return 0;
}

int
medha_auth_load(const char *path, char *why, size_t whylen)
{
	uint8_t buf[MEDHA_AUTH_MAX + 2];
	size_t len, solid;
	int rc;

	if ((rc = medha_auth_read("secret file", path, buf, sizeof(buf), &len,
	         why, whylen)) != 0)
		return rc;
	if (len > 0 && buf[len - 1] == '\n')
		len--;
	if (len < MEDHA_AUTH_MIN || len > MEDHA_AUTH_MAX) {
		memset(buf, 0, sizeof(buf));
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "secret file %s: %zu%s bytes, not %d to %d", path, len,
		    len > MEDHA_AUTH_MAX ? " or more" : "", MEDHA_AUTH_MIN,
		    MEDHA_AUTH_MAX);
	}
	if ((solid = nonblank(buf, len)) < MEDHA_AUTH_MIN) {
		memset(buf, 0, sizeof(buf));
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "secret file %s: %zu bytes but blanks, not at least %d",
		    path, solid, MEDHA_AUTH_MIN);
	}
	medha_auth_set(buf, len);
	memset(buf, 0, sizeof(buf));
	return 0;
}

int
medha_auth_loopback(const char *hostport)
{
	const char *colon = strrchr(hostport, ':');
	size_t n = colon != NULL ? (size_t)(colon - hostport)
	                         : strlen(hostport);

	if (n == 9 && strncmp(hostport, "localhost", 9) == 0)
		return 1;
	if (n == 5 && strncmp(hostport, "[::1]", 5) == 0)
		return 1;
	return n > 4 && strncmp(hostport, "127.", 4) == 0;
}

int
medha_auth_listen_ok(const char *url, char *why, size_t whylen)
{
	const char *sep;

	if (secret_len > 0 || insecure || url == NULL ||
	    strncmp(url, "ipc://", 6) == 0 || strncmp(url, "inproc://", 9) == 0)
		return 0;
	if ((sep = strstr(url, "://")) != NULL &&
	    (strncmp(url, "tcp", 3) == 0) && medha_auth_loopback(sep + 3))
		return 0;
	return medha_why(why, whylen, MEDHA_EINVAL,
	    "will not listen at %s without a secret: anyone who reaches it "
	    "could join or submit; give --secret-file FILE (or "
	    "$MEDHA_SECRET_FILE) to every program, or --insecure",
	    url);
}

int
medha_auth_kind(const void *buf, size_t len)
{
	const uint8_t *p = buf;

	if (len < MEDHA_AUTH_MAGIC_LEN + 1 ||
	    memcmp(p, MEDHA_AUTH_MAGIC, MEDHA_AUTH_MAGIC_LEN) != 0)
		return 0;
	return p[MEDHA_AUTH_MAGIC_LEN];
}

size_t
medha_auth_frame(uint8_t *out, int kind, const void *body, size_t n)
{
	memcpy(out, MEDHA_AUTH_MAGIC, MEDHA_AUTH_MAGIC_LEN);
	out[MEDHA_AUTH_MAGIC_LEN] = (uint8_t)kind;
	if (n > 0)
		memcpy(out + MEDHA_AUTH_MAGIC_LEN + 1, body, n);
	return MEDHA_AUTH_MAGIC_LEN + 1 + n;
}

uint8_t *
medha_auth_copy(size_t *n)
{
	uint8_t *k;

	*n = 0;
	if (secret_len == 0 || (k = malloc(secret_len)) == NULL)
		return NULL;
	memcpy(k, secret, secret_len);
	*n = secret_len;
	return k;
}

int
medha_auth_proof(const uint8_t *key, size_t klen, const char *side,
    const uint8_t *a, const uint8_t *b, uint8_t out[MEDHA_SHA256_LEN])
{
	struct medha_buf parts[4] = {{"medha ", 6}, {side, strlen(side)},
	    {a, MEDHA_AUTH_NONCE}, {b, MEDHA_AUTH_NONCE}};

	return medha_hmac_sha256(key, klen, parts, 4, out);
}
