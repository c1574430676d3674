/*
 * link.h: the transport under the wire protocol (man/medha-proto.7): nng
 * req/rep sockets over ipc:// or tcp://, carrying opaque frames (the
 * codec in net/proto.h gives them meaning).
 *
 * A server (medha-sched) listens with a rep socket and answers every
 * request exactly once, but may hold a request for as long as it likes
 * before answering (a long poll): that is how tokens stream to clients
 * and batches go out to workers without either side polling in a loop.
 * Each request it holds occupies one nng context; the pool of contexts
 * grows as requests are held, up to MEDHA_LINK_MAX_CALLS. The server is
 * driven from one thread: medha_srv_next() hands out the next request or
 * the news that a peer's connection closed; nng's own threads only queue.
 *
 * A client (medha-worker, medha-trace replay, the router) dials with a
 * req socket that keeps redialling until the server is there, and makes
 * calls on numbered contexts: one call at a time per context, any number
 * of contexts at once from different threads. Requests are never resent
 * behind the caller's back (a resent submit would run twice).
 *
 *	struct medha_srv *s;
 *	struct medha_srv_ev ev;
 *	medha_srv_open(&s, "ipc:///tmp/medha.sock", why, sizeof(why));
 *	while (medha_srv_next(s, 1.0, &ev) >= 0)
 *		if (ev.kind == MEDHA_SRV_CALL)
 *			medha_srv_reply(s, ev.call, answer, n);
 *	medha_srv_close(s);
 *
 *	struct medha_cli *c;
 *	medha_cli_open(&c, "ipc:///tmp/medha.sock", 2, why, sizeof(why));
 *	medha_cli_call(c, 0, req, n, &rep, &repn, 5.0);	(free(rep))
 */
#ifndef MEDHA_LINK_H
#define MEDHA_LINK_H

#include "medha.h"

#include <stddef.h>
#include <stdint.h>

#define MEDHA_LINK_MAX_FRAME                                    \
	(64u << 20)               /* bytes; a peer that sends a \
	                             larger frame is disconnected */
#define MEDHA_LINK_MAX_CALLS 8192 /* requests a server holds */
/*
 * With a secret a server takes no frame larger than this (and its
 * framing): a client sends a larger request in pieces, each answered,
 * which the server takes only from a connection that has proved the
 * secret, so a stranger's frame closes its connection at its length,
 * before it is buffered (issue 39).
 */
#define MEDHA_LINK_PIECE (64u << 10)
/*
 * Connections a server takes at most: the open-file limit less 64, at
 * most this; one peer (an IP address over tcp, a process over ipc) a
 * quarter of them. A connection past either is closed as it opens
 * (the peer's dialer tries again later), so that one peer's idle
 * connections cannot keep others, or a worker that must reconnect, out.
 */
#define MEDHA_LINK_MAX_PIPES 16384

struct medha_srv;
struct medha_srv_call; /* one request held by the server */

enum medha_srv_ev_kind {
	MEDHA_SRV_TIMEOUT = 0, /* nothing happened within the timeout */
	MEDHA_SRV_CALL,        /* a request: answer it with medha_srv_reply */
	MEDHA_SRV_GONE,        /* a peer's connection closed */
};

struct medha_srv_ev {
	int kind;      /* MEDHA_SRV_* */
	uint32_t peer; /* the connection (nng pipe id) it came from / closed */
	struct medha_srv_call *call; /* MEDHA_SRV_CALL: the request */
	const void *data;            /* its bytes, valid until answered */
	size_t len;
};

/*
 * Listen at url (ipc://PATH, tcp://HOST:PORT or inproc://NAME). On success *s
 * is the caller's, for medha_srv_close(). Returns 0, MEDHA_EINVAL (a bad url),
 * MEDHA_EIO (cannot listen: address in use, no permission) or
 * MEDHA_ENOMEM, with why.
 */
int
medha_srv_open(struct medha_srv **s, const char *url, char *why, size_t whylen);
void medha_srv_close(struct medha_srv *s);

/*
 * Listen at one more url with the same socket (an inproc:// address for
 * a client in the same process, such as the router's HTTP front door):
 * its peers are served exactly as those of the first. Returns 0,
 * MEDHA_EINVAL (a bad url) or MEDHA_EIO (cannot listen), with why.
 */
int medha_srv_listen(struct medha_srv *s, const char *url, char *why,
    size_t whylen);

/*
 * Wait up to timeout seconds (0: do not wait) for the next event into
 * *ev. Closed connections are reported before further requests. A
 * medha_srv_wake() from another thread ends the wait early (kind
 * MEDHA_SRV_TIMEOUT). Returns 0, or MEDHA_ENOMEM.
 */
int
medha_srv_next(struct medha_srv *s, double timeout, struct medha_srv_ev *ev);

/*
 * Answer a request with len bytes of buf (copied) and let go of it. A
 * request whose peer is gone may be answered all the same (the answer is
 * dropped) or let go without one (medha_srv_drop). Returns 0 or
 * MEDHA_ENOMEM (the request is let go unanswered).
 */
int medha_srv_reply(struct medha_srv *s, struct medha_srv_call *call,
    const void *buf, size_t len);
void medha_srv_drop(struct medha_srv *s, struct medha_srv_call *call);

/* Other limits than the defaults above (tests). */
void medha_srv_limits(struct medha_srv *s, int max_pipes, int per_peer);

/* From any thread: make the next or current medha_srv_next() return. */
void medha_srv_wake(struct medha_srv *s);

/* 1 when peer's connection is an inproc:// one (a client in this
 * process), else 0 (another process, or gone). */
int medha_srv_peer_local(const struct medha_srv *s, uint32_t peer);

/* Requests now held (answered neither yet), for logs and tests. */
int medha_srv_held(const struct medha_srv *s);

struct medha_cli;

/*
 * Dial url with nctx (1..16) contexts; the dialer keeps retrying in the
 * background, so the server may start later. Returns 0, MEDHA_EINVAL or
 * MEDHA_ENOMEM, with why.
 */
int medha_cli_open(struct medha_cli **c, const char *url, int nctx, char *why,
    size_t whylen);
void medha_cli_close(struct medha_cli *c);

/*
 * From any thread: end every call in progress on c and every later one
 * (MEDHA_EPEER), so that threads blocked in calls return; the owner then
 * joins them and calls medha_cli_close().
 */
void medha_cli_abort(struct medha_cli *c);

/*
 * From any thread: c's connection (or its attempt to connect) dropped
 * and a fresh one dialled; a call in progress goes out again on it. After a partition heals, a connection TCP kept backs off its
 * retransmissions (a minute after a minute's cut), and an attempt begun
 * during it its SYNs, where a fresh one connects at once. 0, or an
 * error (then c dials no more).
 */
int medha_cli_redial(struct medha_cli *c);

/*
 * Send len bytes of req on context ctx and wait for the answer, at most
 * timeout seconds for each of the two (< 0: forever). On success *rep
 * (malloc'd, the caller's) holds *replen bytes. Returns 0,
 * MEDHA_ETIMEOUT, MEDHA_EPEER (closed) or MEDHA_ENOMEM.
 */
int medha_cli_call(struct medha_cli *c, int ctx, const void *req, size_t len,
    void **rep, size_t *replen, double timeout);

/*
 * The same in two halves, so that the caller can work while the answer
 * comes: medha_cli_send() sends and posts the receive (0, or the errors
 * above); medha_cli_wait() waits for the answer (the timeout given to
 * the send). A context is in one call at a time: every send is followed
 * by its wait.
 */
int medha_cli_send(struct medha_cli *c, int ctx, const void *req, size_t len,
    double timeout);
int medha_cli_wait(struct medha_cli *c, int ctx, void **rep, size_t *replen);

/* 1 if the client has a live connection to the server now. */
int medha_cli_connected(const struct medha_cli *c);

/*
 * Whether anything listens at url (ipc:// or tcp://) now: one plain
 * connect, at most a second, closed at once (no message is exchanged,
 * so a server sees no peer). MEDHA_EPEER when it was refused (nothing
 * listens, or no such ipc path), with why; 0 when a connection was made
 * or it cannot tell (another scheme, a name that does not resolve, a
 * timeout), for the dialer to keep trying.
 */
int medha_link_probe(const char *url, char *why, size_t whylen);

/*
 * For a client that has no connection yet, once a second: probe url and
 * count its refusals in a row in *n (a connection or "cannot tell"
 * resets it). 1 (why set) once they are MEDHA_LINK_REFUSALS_IPC for
 * ipc (a server started beside the client has made its socket by then),
 * MEDHA_LINK_REFUSALS_TCP for tcp (a port may be slower to open, or on
 * another host); else 0.
 */
#define MEDHA_LINK_REFUSALS_IPC 2
#define MEDHA_LINK_REFUSALS_TCP 5
int medha_link_refused(const char *url, int *n, char *why, size_t whylen);

/*
 * Connections to the server lost so far. A server forgets what a
 * connection asked for when it closes (medha-sched cancels a client's
 * requests), so a change between two readings means that what was
 * started before the first may be gone.
 */
uint64_t medha_cli_epoch(const struct medha_cli *c);

struct medha_msg; /* net/proto.h */

/*
 * medha_cli_call() with messages: encode m (net/proto.h), call on
 * context ctx, decode the answer into *rep (the caller's, for
 * medha_msg_clear()). Returns 0, the codec's or the call's error, with a
 * reason in why.
 */
int medha_cli_msg(struct medha_cli *c, int ctx, const struct medha_msg *m,
    struct medha_msg *rep, double timeout, char *why, size_t whylen);
/* ... and in two halves (see medha_cli_send) */
int medha_cli_msg_send(struct medha_cli *c, int ctx, const struct medha_msg *m,
    double timeout, char *why, size_t whylen);
int medha_cli_msg_wait(struct medha_cli *c, int ctx, struct medha_msg *rep,
    char *why, size_t whylen);

/*
 * medha_srv_reply() with messages: encode m and answer call with it (a
 * message that cannot be encoded is logged and the call dropped);
 * medha_srv_error() answers an ERROR of code with a printf-style reason.
 */
void medha_srv_msg(struct medha_srv *s, struct medha_srv_call *call,
    const struct medha_msg *m);
void medha_srv_error(struct medha_srv *s, struct medha_srv_call *call, int code,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));


/* For the net modules: an nng error (NNG_E*) as a MEDHA_E* code. */
int medha_link_nng_err(int rv);

/*
 * After a program has stopped (its work done, "stopped" logged): exit
 * with status rc within s seconds whatever closing its sockets does.
 * nng 1.5 may block for ever closing a socket whose peer went away, so a
 * clean stop must not wait on it. Starts a thread; returns at once.
 */
void medha_link_exit_by(double s, int rc);
/* The sockets closed after all: what medha_link_exit_by armed does
   nothing. */
void medha_link_exit_by_off(void);

#endif
