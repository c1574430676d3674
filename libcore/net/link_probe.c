/*
 * link_probe.c: is anybody there (link.h's medha_link_probe and
 * medha_link_refused): a plain socket's connect to a link's address, so
 * that a program can tell "nothing listens there" from "not answering
 * yet" before nng's dialer retries for ever.
 */
#include "net/link.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A non-blocking connect of fd to sa, a second at most: 0 or errno. */
static int
probe_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int err = 0;
	socklen_t el = sizeof(err);

	if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0)
		return errno;
	if (connect(fd, sa, len) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return errno;
	if (poll(&p, 1, 1000) != 1)
		return ETIMEDOUT;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
		return errno;
	return err;
}

int
medha_link_probe(const char *url, char *why, size_t whylen)
{
	int err = 0, fd;

	if (strncmp(url, "ipc://", 6) == 0) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		if (strlen(url + 6) >= sizeof(sa.sun_path))
			return 0;
		strcpy(sa.sun_path, url + 6);
		if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0)
			return 0;
		err = probe_connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		close(fd);
	} else if (strncmp(url, "tcp://", 6) == 0) {
		char host[256];
		const char *h = url + 6, *colon = strrchr(h, ':');
		struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
		size_t hl;
		if (colon == NULL || (hl = (size_t)(colon - h)) >= sizeof(host))
			return 0;
		memcpy(host, h, hl);
		host[hl] = '\0';
		if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
			memmove(host, host + 1, hl - 2);
			host[hl - 2] = '\0';
		}
		if (getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai) !=
		    0)
			return 0;
		if ((fd = socket(ai->ai_family, SOCK_STREAM, 0)) >= 0) {
			err = probe_connect(fd, ai->ai_addr, ai->ai_addrlen);
			close(fd);
		}
		freeaddrinfo(ai);
	}
	if (err != ECONNREFUSED && err != ENOENT)
		return 0;
	return medha_why(why, whylen, MEDHA_EPEER, "%s: nothing listens there "
	    "(%s)", url, strerror(err));
}

int
medha_link_refused(const char *url, int *n, char *why, size_t whylen)
{
	if (medha_link_probe(url, why, whylen) == 0) {
		*n = 0;
		return 0;
	}
	return ++*n >= (strncmp(url, "ipc://", 6) == 0 ? MEDHA_LINK_REFUSALS_IPC
	                                               : MEDHA_LINK_REFUSALS_TCP);
}
