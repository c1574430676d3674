/*
 * link.c: the req/rep transport (link.h). The server keeps a pool of
 * rep contexts, each with one aio. A context is receiving (posted to
 * nng), held (its request handed to the caller, not yet answered) or
 * sending (its answer on the way, after which it receives again). nng's
 * threads run the aio callbacks, which only move contexts between those
 * states and queue what arrived under one mutex; everything else happens
 * on the caller's thread in medha_srv_next().
 *
 * With a secret (net/auth.h) the server keeps, for each connection that
 * has sent something, where it is in the handshake: the handshake's
 * frames are answered inside medha_srv_next(), and a message of a
 * connection that has not finished it is answered NOAUTH and never
 * handed out. A client authenticates its connection before its first
 * call on it (one handshake at a time, on a context of its own), and
 * sends a call again when the server answers NOAUTH (the connection
 * changed under it: the server took nothing from it).
 */
#include "net/link_impl.h"
#include "net/proto.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int
medha_link_nng_err(int rv)
{
	switch (rv) {
	case NNG_ENOMEM: return MEDHA_ENOMEM;
	case NNG_ETIMEDOUT: return MEDHA_ETIMEOUT;
	case NNG_EINVAL:
	case NNG_EADDRINVAL:
	case NNG_ENOTSUP: return MEDHA_EINVAL;
	case NNG_ECLOSED:
	case NNG_ECONNREFUSED:
	case NNG_ECONNRESET:
	case NNG_ECONNSHUT:
	case NNG_ECANCELED: return MEDHA_EPEER;
	default: return MEDHA_EIO;
	}
}

/* Post a receive on c (mutex held). */
static void
post_recv(struct medha_srv_call *c)
{
	c->state = C_RECV;
	c->s->receiving++;
	nng_ctx_recv(c->ctx, c->aio);
}

static void
call_cb(void *arg)
{
	struct medha_srv_call *c = arg;
	struct medha_srv *s = c->s;
	int rv = nng_aio_result(c->aio);

	pthread_mutex_lock(&s->mu);
	if (c->state == C_RECV) {
		s->receiving--;
		if (rv != 0) {
			c->state = C_DEAD;
			if (!s->closing && rv != NNG_ECLOSED)
				post_recv(c); /* a transient error */
			pthread_mutex_unlock(&s->mu);
			return;
		}
		c->msg = nng_aio_get_msg(c->aio);
		nng_aio_set_msg(c->aio, NULL);
		c->peer = nng_pipe_id(nng_msg_get_pipe(c->msg));
		c->state = C_HELD;
		c->next = NULL;
		if (s->in_tail != NULL)
			s->in_tail->next = c;
		else
			s->in_head = c;
		s->in_tail = c;
		s->held++;
		pthread_cond_signal(&s->cv);
	} else if (c->state == C_SEND) {
		if (rv != 0) {
			nng_msg_free(nng_aio_get_msg(c->aio));
			nng_aio_set_msg(c->aio, NULL);
		}
		c->state = C_DEAD;
		if (!s->closing && rv != NNG_ECLOSED)
			post_recv(c);
	}
	pthread_mutex_unlock(&s->mu);
}

/*
 * Whom a connection is from: its IP address over tcp, its process over
 * ipc; 0 for inproc (the process's own front door: not limited).
 */
static uint64_t
peer_key(nng_pipe p)
{
	nng_sockaddr sa;
	uint64_t pid = 0, k = 1469598103934665603ULL;

	if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid) == 0)
		return 1ULL << 62 | pid;
	if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0)
		return 2ULL << 62;
	if (sa.s_family == NNG_AF_INET)
		return 3ULL << 62 | sa.s_in.sa_addr;
	if (sa.s_family == NNG_AF_INET6) {
		/* by /64: one host has a whole one to pick addresses from */
		for (int i = 0; i < 8; i++)
			k = (k ^ sa.s_in6.sa_addr[i]) * 1099511628211ULL;
		return k | 1;
	}
	return sa.s_family == NNG_AF_INPROC ? 0 : 2ULL << 62;
}

/*
 * A new connection: admitted, or closed past the limits. With a secret
 * it is admitted as unproven, under the unproven connections' own cap
 * (a stranger's idle connections cannot keep a worker out), and counts
 * in the shared cap once it has proved the secret (link_adm_proven).
 */
static void
pipe_add_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct medha_srv *s = arg;
	uint64_t key = peer_key(p), refused = 0;
	int same = 0, full, nproven = 0;

	(void)ev;
	if (key == 0)
		return;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nadm; i++)
		if (s->adm[i].key == key && s->adm[i].proven == !s->auth)
			same++;
	if (s->auth)
		full = s->nunproven >= s->max_unproven ||
		    same >= s->unproven_per_peer;
	else {
		nproven = s->nadm;
		full = nproven >= s->max_pipes || same >= s->max_per_peer;
	}
	if (!full && s->nadm == s->admcap) {
		int ncap = s->admcap ? 2 * s->admcap : 64;
		void *n = medha_reallocarray(s->adm, ncap, sizeof(*s->adm));
		if (n == NULL)
			full = 1;
		else {
			s->adm = n;
			s->admcap = ncap;
		}
	}
	if (full)
		refused = ++s->refused;
	else {
		s->adm[s->nadm++] = (struct padm){(uint32_t)nng_pipe_id(p), key,
		    !s->auth, medha_now()};
		s->nunproven += s->auth;
	}
	pthread_mutex_unlock(&s->mu);
	if (!full)
		return;
	if (refused == 1 || refused % 1000 == 0)
		medha_log(MEDHA_LOG_WARN,
		    "a connection refused: %d %sconnections open, %d of them "
		    "from its peer (at most %d, %d from one peer; %llu "
		    "refused so far)",
		    s->auth ? s->nunproven : nproven,
		    s->auth ? "unproven " : "", same,
		    s->auth ? s->max_unproven : s->max_pipes,
		    s->auth ? s->unproven_per_peer : s->max_per_peer,
		    (unsigned long long)refused);
	nng_pipe_close(p);
}

int
link_adm_proven(struct medha_srv *s, uint32_t pipe)
{
	struct padm *a = NULL;
	int same = 0, nproven = 0, full;

	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nadm; i++)
		if (s->adm[i].pipe == pipe)
			a = &s->adm[i];
	if (a == NULL || a->proven) { /* inproc, or said twice */
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	for (int i = 0; i < s->nadm; i++) {
		nproven += s->adm[i].proven;
		same += s->adm[i].proven && s->adm[i].key == a->key;
	}
	full = nproven >= s->max_pipes || same >= s->max_per_peer;
	if (!full) {
		a->proven = 1;
		s->nunproven--;
	}
	pthread_mutex_unlock(&s->mu);
	if (full)
		medha_log(MEDHA_LOG_WARN,
		    "connection %u: proved the secret, but %d connections "
		    "are open, %d of them from its peer (at most %d, %d "
		    "from one peer): closed",
		    pipe, nproven, same, s->max_pipes, s->max_per_peer);
	return full ? -1 : 0;
}

/* With a secret: close the connections that have not proved it within
   HANDSHAKE_DEADLINE (s->mu not held; twice a second at most). */
static void
sweep_unproven(struct medha_srv *s)
{
	uint32_t late[64];
	int n = 0;
	double now = medha_now();

	pthread_mutex_lock(&s->mu);
	if (now - s->swept < 0.5 || s->nunproven == 0) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	s->swept = now;
	for (int i = 0; i < s->nadm && n < 64; i++)
		if (!s->adm[i].proven && now - s->adm[i].t0 > HANDSHAKE_DEADLINE)
			late[n++] = s->adm[i].pipe;
	s->late += (uint64_t)n;
	pthread_mutex_unlock(&s->mu);
	if (n > 0 && s->late == (uint64_t)n)
		medha_log(MEDHA_LOG_WARN, "a connection that did not prove "
		    "the secret within %.0f s closed (more are not logged)",
		    HANDSHAKE_DEADLINE);
	for (int i = 0; i < n; i++)
		nng_pipe_close((nng_pipe){.id = late[i]});
}

void
medha_srv_limits(struct medha_srv *s, int max_pipes, int per_peer)
{
	pthread_mutex_lock(&s->mu);
	s->max_pipes = max_pipes;
	s->max_per_peer = per_peer;
	pthread_mutex_unlock(&s->mu);
}

static void
pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct medha_srv *s = arg;

	(void)ev;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nadm; i++)
		if (s->adm[i].pipe == (uint32_t)nng_pipe_id(p)) {
			s->nunproven -= !s->adm[i].proven;
			s->adm[i] = s->adm[--s->nadm];
			break;
		}
	if (s->ngone == s->gone_cap) {
		int ncap = s->gone_cap ? 2 * s->gone_cap : 16;
		uint32_t *n = medha_reallocarray(s->gone, ncap, sizeof(*n));
		if (n == NULL) { /* lost news of one peer: logged */
			pthread_mutex_unlock(&s->mu);
			medha_log(MEDHA_LOG_ERROR,
			    "out of memory noting a closed connection");
			return;
		}
		s->gone = n;
		s->gone_cap = ncap;
	}
	s->gone[s->ngone++] = nng_pipe_id(p);
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* One more context, receiving (mutex held). */
static int
add_call(struct medha_srv *s)
{
	struct medha_srv_call *c;

	if (s->ncalls == s->cap) {
		int ncap = s->cap ? 2 * s->cap : 64;
		void *n = medha_reallocarray(s->calls, ncap, sizeof(*s->calls));
		if (n == NULL)
			return MEDHA_ENOMEM;
		s->calls = n;
		s->cap = ncap;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return MEDHA_ENOMEM;
	c->s = s;
	if (nng_ctx_open(&c->ctx, s->sock) != 0) {
		free(c);
		return MEDHA_ENOMEM;
	}
	if (nng_aio_alloc(&c->aio, call_cb, c) != 0) {
		nng_ctx_close(c->ctx);
		free(c);
		return MEDHA_ENOMEM;
	}
	s->calls[s->ncalls++] = c;
	post_recv(c);
	return 0;
}

int
medha_srv_open(struct medha_srv **sp, const char *url, char *why, size_t whylen)
{
	struct medha_srv *s;
	pthread_condattr_t ca;
	int rv;

	*sp = NULL;
	if ((rv = medha_auth_listen_ok(url, why, whylen)) != 0)
		return rv;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	s->key = medha_auth_copy(&s->klen);
	s->auth = s->key != NULL;
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	if ((rv = nng_rep0_open(&s->sock)) != 0) {
		free(s);
		return medha_why(why, whylen, medha_link_nng_err(rv), "rep socket: %s",
		    nng_strerror(rv));
	}
	/* with a secret, no frame of more than a piece: a larger request
	   comes in pieces, taken only once its connection has proved the
	   secret (link_srv_piece) */
	nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ,
	    s->auth ? MEDHA_AUTH_PIECE_HDR + MEDHA_LINK_PIECE + 64 /* the
	                                                   SP headers */
	            : MEDHA_LINK_MAX_FRAME);
	{
		/* room under the open-file limit for the rest of the
		   process (model, threads' pipes, the peers' sockets) */
		struct rlimit rl;
		rlim_t n = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur
		                                              : 1024;
		n = n > 64 + 16 ? n - 64 : 16;
		s->max_pipes = n > MEDHA_LINK_MAX_PIPES ? MEDHA_LINK_MAX_PIPES
		                                        : (int)n;
		if (s->auth) { /* the unproven's share of the budget */
			int u = s->max_pipes / 2;
			s->max_unproven = u > UNPROVEN_MAX ? UNPROVEN_MAX
			    : u > 4 ? u
			            : 4;
			s->unproven_per_peer = s->max_unproven / 4 > 2
			    ? s->max_unproven / 4
			    : 2;
			if (s->max_pipes - s->max_unproven >= 8)
				s->max_pipes -= s->max_unproven;
		}
		s->max_per_peer = s->max_pipes / 4 > 4 ? s->max_pipes / 4 : 4;
	}
	nng_pipe_notify(s->sock, NNG_PIPE_EV_ADD_PRE, pipe_add_cb, s);
	nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, pipe_cb, s);
	if ((rv = nng_listen(s->sock, url, NULL, 0)) != 0) {
		medha_srv_close(s);
		if (strstr(url, "://") == NULL)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "cannot listen at %s: not an address (ipc://PATH "
			    "or tcp://HOST:PORT)",
			    url);
		return medha_why(why, whylen,
		    rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? MEDHA_EINVAL
		                                              : MEDHA_EIO,
		    "cannot listen at %s: %s", url, nng_strerror(rv));
	}
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < MIN_RECEIVING; i++)
		if (add_call(s) != 0) {
			pthread_mutex_unlock(&s->mu);
			medha_srv_close(s);
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		}
	pthread_mutex_unlock(&s->mu);
	*sp = s;
	return 0;
}

int
medha_srv_listen(struct medha_srv *s, const char *url, char *why, size_t whylen)
{
	int rv = medha_auth_listen_ok(url, why, whylen);

	if (rv != 0)
		return rv;
	rv = nng_listen(s->sock, url, NULL, 0);
	if (rv == 0)
		return 0;
	return medha_why(why, whylen,
	    rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? MEDHA_EINVAL
	                                              : MEDHA_EIO,
	    "cannot listen at %s: %s", url, nng_strerror(rv));
}

void
medha_srv_close(struct medha_srv *s)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->mu);
	s->closing = 1;
	pthread_mutex_unlock(&s->mu);
	nng_close(s->sock); /* every aio completes with NNG_ECLOSED */
	for (int i = 0; i < s->ncalls; i++) {
		struct medha_srv_call *c = s->calls[i];
		nng_aio_free(c->aio); /* waits for its callback */
		if (c->msg != NULL)
			nng_msg_free(c->msg);
		free(c);
	}
	free(s->calls);
	free(s->gone);
	free(s->pa);
	free(s->adm);
	free(s->key);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int
medha_srv_next(struct medha_srv *s, double timeout, struct medha_srv_ev *ev)
{
	struct timespec until;
	struct medha_srv_call *c;
	int rc = 0;

	memset(ev, 0, sizeof(*ev));
	clock_gettime(CLOCK_MONOTONIC, &until);
	if (timeout > 0) {
		double sec =
		    (double)until.tv_sec + until.tv_nsec * 1e-9 + timeout;
		until.tv_sec = (time_t)sec;
		until.tv_nsec = (long)((sec - (double)until.tv_sec) * 1e9);
	}
	pthread_mutex_lock(&s->mu);
	/* keep enough contexts posted for new requests */
	while (s->receiving < MIN_RECEIVING && s->ncalls < MEDHA_LINK_MAX_CALLS)
		if ((rc = add_call(s)) != 0)
			break;
	while (s->ngone == 0 && s->in_head == NULL && !s->woken && timeout > 0)
		if (pthread_cond_timedwait(&s->cv, &s->mu, &until) != 0)
			break;
	s->woken = 0;
	if (s->auth) {
		pthread_mutex_unlock(&s->mu);
		sweep_unproven(s);
		pthread_mutex_lock(&s->mu);
	}
	if (s->ngone > 0) {
		ev->kind = MEDHA_SRV_GONE;
		ev->peer = s->gone[0];
		memmove(s->gone, s->gone + 1, --s->ngone * sizeof(*s->gone));
	} else if ((c = s->in_head) != NULL) {
		s->in_head = c->next;
		if (s->in_head == NULL)
			s->in_tail = NULL;
		ev->kind = MEDHA_SRV_CALL;
		ev->peer = c->peer;
		ev->call = c;
		ev->data = nng_msg_body(c->msg);
		ev->len = nng_msg_len(c->msg);
	}
	pthread_mutex_unlock(&s->mu);
	if (s->auth && ev->kind == MEDHA_SRV_GONE)
		link_pa_drop(s, ev->peer);
	else if (s->auth && ev->kind == MEDHA_SRV_CALL) {
		const struct pauth *a = link_pa_get(s, ev->peer, 0);
		int kind = medha_auth_kind(ev->data, ev->len);
		/* a handshake's frame is never the caller's, from a proven
		   connection either: its client missed the OK (a timeout)
		   and says HELLO again (issue 39: the scheduler took such
		   a HELLO for a message, "type 0xc1", and the worker gave
		   up) */
		if (a == NULL || a->state != PA_OK ||
		    (kind != 0 && kind != MEDHA_AUTH_PIECE)) {
			/* answered here; the caller sees a timeout */
			link_srv_auth(s, ev);
			memset(ev, 0, sizeof(*ev));
		} else if (kind == MEDHA_AUTH_PIECE)
			link_srv_piece(s, ev); /* answered, or now whole */
	}
	return rc == MEDHA_ENOMEM && ev->kind == MEDHA_SRV_TIMEOUT ? rc : 0;
}

int
medha_srv_reply(struct medha_srv *s, struct medha_srv_call *c, const void *buf,
    size_t len)
{
	nng_msg *m = NULL;

	if (nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, buf, len) != 0) {
		if (m != NULL)
			nng_msg_free(m);
		medha_srv_drop(s, c);
		return MEDHA_ENOMEM;
	}
	pthread_mutex_lock(&s->mu);
	nng_msg_free(c->msg);
	c->msg = NULL;
	s->held--;
	c->state = C_SEND;
	nng_aio_set_msg(c->aio, m);
	nng_ctx_send(c->ctx, c->aio);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void
medha_srv_drop(struct medha_srv *s, struct medha_srv_call *c)
{
	pthread_mutex_lock(&s->mu);
	nng_msg_free(c->msg);
	c->msg = NULL;
	s->held--;
	post_recv(c); /* a new receive forgets the unanswered request */
	pthread_mutex_unlock(&s->mu);
}

void
medha_srv_wake(struct medha_srv *s)
{
	pthread_mutex_lock(&s->mu);
	s->woken = 1;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

int
medha_srv_held(const struct medha_srv *s)
{
	return s->held;
}

/* ---- client ---- */

static void
cli_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct medha_cli *c = arg;

	pthread_mutex_lock(&c->mu);
	if (ev == NNG_PIPE_EV_ADD_POST) {
		c->npipes++;
		c->pipe = (uint32_t)nng_pipe_id(p);
	} else {
		c->npipes--;
		c->epoch++;
		if (c->pipe == (uint32_t)nng_pipe_id(p))
			c->pipe = 0;
	}
	pthread_mutex_unlock(&c->mu);
}

int
medha_cli_open(struct medha_cli **cp, const char *url, int nctx, char *why,
    size_t whylen)
{
	struct medha_cli *c;
	int rv, i;

	*cp = NULL;
	if (nctx < 1 || nctx > CLI_MAX_CTX)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%d contexts, not in [1, %d]", nctx, CLI_MAX_CTX);
	if ((c = calloc(1, sizeof(*c) + strlen(url) + 1)) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	c->url = strcpy((char *)(c + 1), url); /* to dial it again */
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->amu, NULL);
	pthread_mutex_init(&c->dmu, NULL);
	c->key = medha_auth_copy(&c->klen);
	c->auth = c->key != NULL;
	if ((rv = nng_req0_open(&c->sock)) != 0) {
		free(c);
		return medha_why(why, whylen, medha_link_nng_err(rv), "req socket: %s",
		    nng_strerror(rv));
	}
	nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME,
	    NNG_DURATION_INFINITE);
	nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, MEDHA_LINK_MAX_FRAME);
	nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 20);
	nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 500);
	nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_POST, cli_pipe_cb, c);
	nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, cli_pipe_cb, c);
	for (i = 0; i <= nctx; i++) {
		if ((rv = nng_ctx_open(&c->ctx[i], c->sock)) != 0 ||
		    (rv = nng_aio_alloc(&c->aio[i], NULL, NULL)) != 0) {
			c->nopen = i;
			medha_cli_close(c);
			return medha_why(why, whylen, medha_link_nng_err(rv),
			    "context: %s", nng_strerror(rv));
		}
		c->nopen = i + 1;
	}
	c->nctx = nctx;
	if ((rv = nng_dial(c->sock, url, &c->dialer, NNG_FLAG_NONBLOCK)) != 0) {
		medha_cli_close(c);
		if (strstr(url, "://") == NULL)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "cannot dial %s: not an address (ipc://PATH or "
			    "tcp://HOST:PORT)",
			    url);
		return medha_why(why, whylen,
		    rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? MEDHA_EINVAL
		                                              : medha_link_nng_err(rv),
		    "cannot dial %s: %s", url, nng_strerror(rv));
	}
	*cp = c;
	return 0;
}

void
medha_cli_close(struct medha_cli *c)
{
	if (c == NULL)
		return;
	nng_close(c->sock);
	for (int i = 0; i < c->nopen; i++)
		if (c->aio[i] != NULL)
			nng_aio_free(c->aio[i]);
	for (int i = 0; i < CLI_MAX_CTX; i++)
		free(c->req[i]);
	free(c->key);
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->amu);
	pthread_mutex_destroy(&c->dmu);
	free(c);
}

void
medha_cli_abort(struct medha_cli *c)
{
	nng_close(c->sock); /* again in medha_cli_close: harmless */
}

int
medha_cli_redial(struct medha_cli *c)
{
	pthread_mutex_lock(&c->dmu);
	nng_dialer_close(c->dialer); /* its connection with it */
	int rv = nng_dial(c->sock, c->url, &c->dialer, NNG_FLAG_NONBLOCK);
	pthread_mutex_unlock(&c->dmu);
	return rv != 0 ? medha_link_nng_err(rv) : 0;
}

int
medha_cli_connected(const struct medha_cli *c)
{
	int n;

	pthread_mutex_lock((pthread_mutex_t *)&c->mu);
	n = c->npipes;
	pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
	return n > 0;
}

uint64_t
medha_cli_epoch(const struct medha_cli *c)
{
	uint64_t e;

	pthread_mutex_lock((pthread_mutex_t *)&c->mu);
	e = c->epoch;
	pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
	return e;
}

/* Send on context i (the handshake's included) and post the receive. */
int
link_raw_send(struct medha_cli *c, int i, const void *req, size_t len,
    double timeout)
{
	nng_aio *aio = c->aio[i];
	nng_msg *m = NULL;
	int rv;

	nng_aio_set_timeout(aio,
	    timeout < 0 ? NNG_DURATION_INFINITE
	                : (nng_duration)(timeout * 1e3));
	if (nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, req, len) != 0) {
		if (m != NULL)
			nng_msg_free(m);
		return MEDHA_ENOMEM;
	}
	nng_aio_set_msg(aio, m);
	nng_ctx_send(c->ctx[i], aio);
	nng_aio_wait(aio);
	if ((rv = nng_aio_result(aio)) != 0) {
		nng_msg_free(nng_aio_get_msg(aio));
		nng_aio_set_msg(aio, NULL);
		return medha_link_nng_err(rv);
	}
	nng_ctx_recv(c->ctx[i], aio);
	return 0;
}

/* The answer on context i; *pipe (if not NULL) the connection it came on. */
int
link_raw_wait(struct medha_cli *c, int i, void **rep, size_t *replen,
    uint32_t *pipe)
{
	nng_aio *aio = c->aio[i];
	nng_msg *m;
	int rv;

	*rep = NULL;
	*replen = 0;
	nng_aio_wait(aio);
	if ((rv = nng_aio_result(aio)) != 0)
		return medha_link_nng_err(rv);
	m = nng_aio_get_msg(aio);
	nng_aio_set_msg(aio, NULL);
	if (pipe != NULL)
		*pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(m));
	*replen = nng_msg_len(m);
	if ((*rep = malloc(*replen ? *replen : 1)) == NULL) {
		nng_msg_free(m);
		return MEDHA_ENOMEM;
	}
	memcpy(*rep, nng_msg_body(m), *replen);
	nng_msg_free(m);
	return 0;
}

int
medha_cli_send(struct medha_cli *c, int i, const void *req, size_t len,
    double timeout)
{
	int rc;

	if (i < 0 || i >= c->nctx)
		return MEDHA_EINVAL;
	if (c->auth) {
		void *copy = malloc(len ? len : 1);
		if (copy == NULL)
			return MEDHA_ENOMEM;
		memcpy(copy, req, len);
		free(c->req[i]);
		c->req[i] = copy;
		c->reqlen[i] = len;
		c->tmo[i] = timeout;
		if ((rc = link_cli_auth(c, timeout, 0)) != 0)
			return rc;
	}
	return link_send_whole(c, i, req, len, timeout);
}

int
medha_cli_wait(struct medha_cli *c, int i, void **rep, size_t *replen)
{
	int rc;

	*rep = NULL;
	*replen = 0;
	if (i < 0 || i >= c->nctx)
		return MEDHA_EINVAL;
	for (int tries = 0;; tries++) {
		if ((rc = link_raw_wait(c, i, rep, replen, NULL)) != 0)
			return rc;
		if (medha_auth_kind(*rep, *replen) != MEDHA_AUTH_NOAUTH)
			return 0;
		free(*rep);
		*rep = NULL;
		*replen = 0;
		if (!c->auth) {
			link_cli_tell(c, "the server wants the shared secret: "
			            "give --secret-file FILE (or "
			            "$MEDHA_SECRET_FILE)");
			return MEDHA_EAUTH;
		}
		/* not taken: the connection changed since its handshake */
		if (tries == 2) {
			link_cli_tell(c, "the server answered NOAUTH to a "
			            "message three times, each after a new "
			            "handshake");
			return MEDHA_EAUTH;
		}
		if ((rc = link_cli_auth(c, c->tmo[i], 1)) != 0 ||
		    (rc = link_send_whole(c, i, c->req[i], c->reqlen[i],
		         c->tmo[i])) != 0)
			return rc;
	}
}

int
medha_cli_call(struct medha_cli *c, int i, const void *req, size_t len,
    void **rep, size_t *replen, double timeout)
{
	int rc;

	*rep = NULL;
	*replen = 0;
	if ((rc = medha_cli_send(c, i, req, len, timeout)) != 0)
		return rc;
	return medha_cli_wait(c, i, rep, replen);
}

int
medha_cli_msg_send(struct medha_cli *c, int ctx, const struct medha_msg *m,
    double timeout, char *why, size_t whylen)
{
	void *buf;
	size_t len;
	int rc;

	if ((rc = medha_msg_encode(m, &buf, &len, why, whylen)) != 0)
		return rc;
	rc = medha_cli_send(c, ctx, buf, len, timeout);
	free(buf);
	if (rc != 0)
		return link_cli_why(c, rc, why, whylen);
	return 0;
}

int
medha_cli_msg_wait(struct medha_cli *c, int ctx, struct medha_msg *rep,
    char *why, size_t whylen)
{
	void *in;
	size_t inlen;
	int rc;

	if ((rc = medha_cli_wait(c, ctx, &in, &inlen)) != 0)
		return link_cli_why(c, rc, why, whylen);
	rc = medha_msg_decode(rep, in, inlen, why, whylen);
	free(in);
	return rc;
}

int
medha_cli_msg(struct medha_cli *c, int ctx, const struct medha_msg *m,
    struct medha_msg *rep, double timeout, char *why, size_t whylen)
{
	int rc;

	if ((rc = medha_cli_msg_send(c, ctx, m, timeout, why, whylen)) != 0)
		return rc;
	return medha_cli_msg_wait(c, ctx, rep, why, whylen);
}

void
medha_srv_msg(struct medha_srv *s, struct medha_srv_call *call,
    const struct medha_msg *m)
{
	void *buf;
	size_t len;
	char why[256];

	if (medha_msg_encode(m, &buf, &len, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "cannot encode %s: %s",
		    medha_msg_type_name(m->type), why);
		medha_srv_drop(s, call);
		return;
	}
	medha_srv_reply(s, call, buf, len);
	free(buf);
}

void
medha_srv_error(struct medha_srv *s, struct medha_srv_call *call, int code,
    const char *fmt, ...)
{
	struct medha_msg m = {.type = MEDHA_MSG_ERROR};
	va_list ap;

	m.error.code = code;
	va_start(ap, fmt);
	vsnprintf(m.error.reason, sizeof(m.error.reason), fmt, ap);
	va_end(ap);
	medha_srv_msg(s, call, &m);
}

struct exit_by {
	double s;
	int rc;
	int gen; /* exit_gen when armed */
};

static int exit_gen; /* medha_link_exit_by_off() disarms what is armed */

static void *
exit_by_main(void *arg)
{
	struct exit_by e = *(struct exit_by *)arg;

	free(arg);
	usleep((useconds_t)(e.s * 1e6));
	if (__atomic_load_n(&exit_gen, __ATOMIC_ACQUIRE) != e.gen)
		return NULL;
	medha_log(MEDHA_LOG_WARN, "closing the sockets takes too long: "
	    "exiting");
	_exit(e.rc);
	return NULL;
}

void
medha_link_exit_by_off(void)
{
	__atomic_add_fetch(&exit_gen, 1, __ATOMIC_ACQ_REL);
}

void
medha_link_exit_by(double s, int rc)
{
	struct exit_by *e = malloc(sizeof(*e));
	pthread_attr_t a;
	pthread_t t;

	if (e == NULL)
		return;
	e->s = s;
	e->rc = rc;
	e->gen = __atomic_load_n(&exit_gen, __ATOMIC_ACQUIRE);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, exit_by_main, e) != 0)
		free(e);
	pthread_attr_destroy(&a);
}
