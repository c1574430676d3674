/*
 * coll.c: collectives over nng push/pull (coll.h). A message is a 40-byte
 * header (magic, the sender's rank, the receiver's, the generation, the
 * tag, the link's sequence number) and the payload. Messages that
 * arrive before they are asked for wait in a small list, searched
 * newest last; it stays short because every message is asked for
 * within a batch or two of its arrival.
 *
 * Each link (sender, receiver) numbers its messages 1, 2, ... under a
 * peer table; a receiver takes from a sender only numbers above the
 * last it took (a link is one connection at a time, in order), so a
 * message sent again, by a peer or by whoever copied it off the wire,
 * is dropped before it can wait, and one for another rank too.
 *
 * With a secret (net/auth.h) every message ends with an HMAC-SHA256,
 * under it, of the table's identity (a digest of its generation and
 * every rank's address: the replica's, which no other replica shares),
 * the header and the payload; one whose MAC is wrong (a stranger that
 * reached the port, or a message of another replica) is dropped before
 * it is looked at. Older medha's messages (a 24-byte header of magic
 * "MCOL", no sequence) are dropped and said once: every worker of a
 * replica must run the same version (issue 39).
 *
 * A message of a later table than this endpoint's (its sender heard of
 * the table first: a worker restarted, and the scheduler's word reaches
 * the workers one after another) cannot be checked yet: it waits as it
 * came, MAC and all, in a list of its own (bounded as the waiting list;
 * past the bound it is dropped, said once) and goes through the checks
 * when its table comes, in the order it came.
 */
#include "net/coll.h"
#include "net/auth.h"
#include "net/link.h"

#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAGIC 0x324f434du     /* "MCO2" little-endian */
#define MAGIC_OLD 0x4c4f434du /* "MCOL": before issue 39 */
#define HDR 40
#define TABLE_ID 32 /* bytes of the table's identity, in the MAC */
#define F_MORE 1    /* flags: more pieces of the message follow */
#define F_CONT 2    /* flags: not the message's first piece */

struct waiting {
	int src;
	uint64_t gen, tag;
	nng_msg *m;
};

struct medha_coll {
	nng_socket pull;
	char url[256];
	uint64_t gen;
	int rank, n;
	nng_socket *push; /* (n) dialers; push[rank] unused */
	int *open;        /* (n) whether push[i] is open */
	struct lost *lost; /* this generation's, and older ones */
	struct waiting *w;
	int nw, wcap;
	size_t wbytes; /* the waiting messages' bytes */
	volatile sig_atomic_t *stop;
	volatile sig_atomic_t *drop; /* the batch waited for is void */
	size_t mac;      /* MEDHA_SHA256_LEN with a secret, else 0 */
	uint8_t *key;    /* (klen) the secret, as it was at open */
	size_t klen;
	int forged_seen; /* messages dropped for a wrong MAC */
	int old_seen;    /* of an older format */
	int64_t replayed; /* dropped: a number taken already, or for
	                     another rank */
	uint64_t *sseq;  /* (n) the last number sent to each rank */
	uint64_t *rseq;  /* (n) the last taken from each rank */
	nng_msg **part;  /* (n) a message whose pieces are coming, or NULL */
	uint8_t table[TABLE_ID]; /* the table's identity */
	nng_msg **early; /* (ne) of a later table, unchecked, as they came */
	int ne, ecap;
	size_t ebytes;   /* their bytes */
	int early_full_seen; /* dropped past the bound */
};

#define SLICE 0.2 /* s between looks at the stop and drop flags */
/* pieces queued to one peer: a whole message of the largest size, and
   some (nng's bound is 8192) */
#define SENDQ ((int)(MEDHA_COLL_MAX_MSG / MEDHA_COLL_PIECE) + 64)

/* Why a wait ends before its time (the stop or drop flag set), or NULL. */
static const char *
halted(const struct medha_coll *c)
{
	if (c->stop != NULL && *c->stop)
		return "stopping";
	if (c->drop != NULL && *c->drop)
		return "the batch was made void";
	return NULL;
}

/*
 * Whether rank i's connection closed in a generation: set from nng's
 * pipe callback (another thread). Kept until the endpoint closes, as a
 * callback of a closing socket may still be on its way.
 */
struct lost {
	struct lost *older;
	int n;
	int v[]; /* (n) */
};

static nng_duration
ms_of(double s)
{
	return s < 0 ? NNG_DURATION_INFINITE
	    : s > 86400 ? 86400000
	                : (nng_duration)ceil(s * 1e3);
}

static void
put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void
put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
get(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

int
medha_coll_open(struct medha_coll **cp, const char *url, char *why,
    size_t whylen)
{
	struct medha_coll *c;
	nng_listener l;
	int rv;

	*cp = NULL;
	if (url == NULL || strlen(url) >= sizeof(c->url) - 16)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "collectives: bad address");
	if ((rv = medha_auth_listen_ok(url, why, whylen)) != 0)
		return rv;
	if ((c = medha_calloc(1, sizeof(*c))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	c->rank = -1;
	c->key = medha_auth_copy(&c->klen);
	c->mac = c->key != NULL ? MEDHA_SHA256_LEN : 0;
	if ((rv = nng_pull0_open(&c->pull)) != 0) {
		free(c->key);
		free(c);
		return medha_why(why, whylen, MEDHA_ENOMEM,
		    "collectives: %s", nng_strerror(rv));
	}
	/* one piece at most: a larger frame, which would be buffered whole
	   before its MAC could be checked, closes its connection at its
	   length (issue 39) */
	nng_socket_set_size(c->pull, NNG_OPT_RECVMAXSZ,
	    MEDHA_COLL_PIECE + HDR + MEDHA_SHA256_LEN);
	if ((rv = nng_listen(c->pull, url, &l, 0)) != 0) {
		nng_close(c->pull);
		free(c->key);
		free(c);
		return medha_why(why, whylen, medha_link_nng_err(rv),
		    "collectives: cannot listen at %s: %s", url,
		    nng_strerror(rv));
	}
	snprintf(c->url, sizeof(c->url), "%s", url);
	if (strncmp(url, "tcp://", 6) == 0) {
		/* port 0: say the port picked */
		nng_sockaddr sa;
		const char *colon = strrchr(url, ':');
		if (nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) == 0 &&
		    (sa.s_family == NNG_AF_INET || sa.s_family == NNG_AF_INET6) &&
		    colon != NULL) {
			unsigned port = sa.s_family == NNG_AF_INET
			    ? sa.s_in.sa_port
			    : sa.s_in6.sa_port;
			port = ((port & 0xff) << 8) | (port >> 8); /* network order */
			snprintf(c->url, sizeof(c->url), "%.*s:%u",
			    (int)(colon - url), url, port);
		}
	}
	*cp = c;
	return 0;
}

/* A peer's connection closed: it died (or stopped) under this table. */
static void
on_pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)p;
	(void)ev;
	__atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
}

/* Whether rank i's connection closed since the table was set. */
static int
gone(const struct medha_coll *c, int i)
{
	return c->lost != NULL && i < c->lost->n &&
	    __atomic_load_n(&c->lost->v[i], __ATOMIC_ACQUIRE);
}

static void
drop_peers(struct medha_coll *c)
{
	for (int i = 0; i < c->n; i++)
		if (c->open[i])
			nng_close(c->push[i]);
	free(c->push);
	free(c->open);
	free(c->sseq);
	free(c->rseq);
	if (c->part != NULL)
		for (int i = 0; i < c->n; i++)
			if (c->part[i] != NULL)
				nng_msg_free(c->part[i]);
	free(c->part);
	c->part = NULL;
	c->push = NULL;
	c->open = NULL;
	c->sseq = NULL;
	c->rseq = NULL;
	c->n = 0;
	c->rank = -1;
}

void
medha_coll_close(struct medha_coll *c)
{
	if (c == NULL)
		return;
	drop_peers(c);
	nng_close(c->pull);
	while (c->lost != NULL) {
		struct lost *l = c->lost;
		c->lost = l->older;
		free(l);
	}
	for (int i = 0; i < c->nw; i++)
		nng_msg_free(c->w[i].m);
	free(c->w);
	for (int i = 0; i < c->ne; i++)
		nng_msg_free(c->early[i]);
	free(c->early);
	free(c->key);
	free(c);
}

void
medha_coll_stop_on(struct medha_coll *c, volatile sig_atomic_t *stop)
{
	c->stop = stop;
}

void
medha_coll_drop_on(struct medha_coll *c, volatile sig_atomic_t *drop)
{
	c->drop = drop;
}

const char *
medha_coll_url(const struct medha_coll *c)
{
	return c->url;
}

uint64_t
medha_coll_gen(const struct medha_coll *c)
{
	return c->gen;
}

int
medha_coll_rank(const struct medha_coll *c)
{
	return c->rank;
}

int
medha_coll_size(const struct medha_coll *c)
{
	return c->n;
}

/* Drop the waiting messages of generations before gen. */
static void
forget_before(struct medha_coll *c, uint64_t gen)
{
	int j = 0;

	for (int i = 0; i < c->nw; i++)
		if (c->w[i].gen < gen) {
			c->wbytes -= nng_msg_len(c->w[i].m);
			nng_msg_free(c->w[i].m);
		} else
			c->w[j++] = c->w[i];
	c->nw = j;
}

/*
 * The identity of the table of generation gen (every member computes the
 * same): SHA-256 of the generation and every rank's address. 0 or
 * MEDHA_ENOMEM.
 */
static int
table_id(struct medha_coll *c, uint64_t gen, int n, const char *const *urls)
{
	struct medha_sha256 *h;
	uint8_t g[8];

	put64(g, gen);
	if (medha_sha256_new(&h) != 0)
		return MEDHA_ENOMEM;
	medha_sha256_add(h, "medha coll table", 16);
	medha_sha256_add(h, g, sizeof(g));
	for (int i = 0; i < n; i++)
		medha_sha256_add(h, urls[i] != NULL ? urls[i] : "",
		    urls[i] != NULL ? strlen(urls[i]) + 1 : 1);
	return medha_sha256_end(h, c->table);
}

/* Whether a message of src numbered seq (this generation) may be
 * taken: a number above the last taken from src. */
static int
fresh(struct medha_coll *c, int src, uint64_t seq)
{
	if (seq <= c->rseq[src]) {
		if (c->replayed++ == 0)
			medha_log(MEDHA_LOG_WARN,
			    "collectives: a message from rank %d numbered %llu, "
			    "taken already (%llu), dropped: sent again (more "
			    "are not logged)",
			    src, (unsigned long long)seq,
			    (unsigned long long)c->rseq[src]);
		return 0;
	}
	c->rseq[src] = seq;
	return 1;
}

static void take_early(struct medha_coll *c);

int
medha_coll_peers(struct medha_coll *c, uint64_t gen, int rank, int n,
    const char *const *urls, char *why, size_t whylen)
{
	int rv;

	if (n < 1 || n > MEDHA_COLL_MAX_PEERS || rank < 0 || rank >= n)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "collectives: rank %d of %d", rank, n);
	drop_peers(c);
	forget_before(c, gen);
	c->gen = gen;
	if ((c->push = medha_calloc(n, sizeof(*c->push))) == NULL ||
	    (c->open = medha_calloc(n, sizeof(*c->open))) == NULL ||
	    (c->sseq = medha_calloc(n, sizeof(*c->sseq))) == NULL ||
	    (c->rseq = medha_calloc(n, sizeof(*c->rseq))) == NULL ||
	    (c->part = medha_calloc(n, sizeof(*c->part))) == NULL ||
	    table_id(c, gen, n, urls) != 0) {
		drop_peers(c);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	{
		struct lost *l = medha_calloc(1, sizeof(*l) +
		    (size_t)n * sizeof(l->v[0]));
		if (l == NULL) {
			drop_peers(c);
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		}
		l->n = n;
		l->older = c->lost;
		c->lost = l;
	}
	c->n = n;
	c->rank = rank;
	for (int i = 0; i < n; i++) {
		if (i == rank)
			continue;
		if ((rv = nng_push0_open(&c->push[i])) != 0) {
			drop_peers(c);
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "collectives: %s", nng_strerror(rv));
		}
		c->open[i] = 1;
		nng_pipe_notify(c->push[i], NNG_PIPE_EV_REM_POST, on_pipe_gone,
		    &c->lost->v[i]);
		/* a message's pieces queue here rather than wait for the
		   receiver: every member of an all-gather sends all its
		   pieces before it receives any, and with nothing queued
		   the second piece each way waits on a receiver that is
		   itself sending (a deadlock past one piece: 1 MiB) */
		nng_socket_set_int(c->push[i], NNG_OPT_SENDBUF, SENDQ);
		nng_socket_set_ms(c->push[i], NNG_OPT_RECONNMINT, 10);
		nng_socket_set_ms(c->push[i], NNG_OPT_RECONNMAXT, 500);
		if (urls[i] == NULL ||
		    (rv = nng_dial(c->push[i], urls[i], NULL,
		         NNG_FLAG_NONBLOCK)) != 0) {
			int e = urls[i] == NULL ? NNG_EADDRINVAL : rv;
			drop_peers(c);
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "collectives: rank %d at %s: %s", i,
			    urls[i] ? urls[i] : "(none)", nng_strerror(e));
		}
	}
	take_early(c);
	return 0;
}

/* One piece (more: others follow) of a message to dst, by end. */
static int
send_piece(struct medha_coll *c, int dst, uint64_t tag, const void *buf,
    size_t len, int flags, double end, char *why, size_t whylen)
{
	nng_msg *m;
	uint8_t *p;
	const char *h;
	int rv;

	/* (queued, a send to a peer gone would not wait to fail) */
	if (gone(c, dst))
		return medha_why(why, whylen, MEDHA_EPEER,
		    "collectives: rank %d went away", dst);
	if (nng_msg_alloc(&m, HDR + len + c->mac) != 0)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	p = nng_msg_body(m);
	put32(p, MAGIC);
	put32(p + 4, (uint32_t)c->rank);
	put32(p + 8, (uint32_t)dst);
	put32(p + 12, (uint32_t)flags);
	put64(p + 16, c->gen);
	put64(p + 24, tag);
	put64(p + 32, ++c->sseq[dst]);
	if (len > 0)
		memcpy(p + HDR, buf, len);
	if (c->mac > 0) {
		struct medha_buf part[2] = {{c->table, TABLE_ID},
		    {p, HDR + len}};
		if (medha_hmac_sha256(c->key, c->klen, part, 2,
		        p + HDR + len) != 0) {
			nng_msg_free(m);
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		}
	}
	for (;;) {
		double left = end < 0 ? SLICE : end - medha_now();
		nng_socket_set_ms(c->push[dst], NNG_OPT_SENDTIMEO,
		    ms_of(left < SLICE ? left : SLICE));
		rv = nng_sendmsg(c->push[dst], m, 0);
		if (rv != NNG_ETIMEDOUT || (end >= 0 && medha_now() >= end))
			break;
		if ((h = halted(c)) != NULL) {
			nng_msg_free(m);
			return medha_why(why, whylen, MEDHA_EPEER,
			    "collectives: %s", h);
		}
		if (gone(c, dst)) {
			nng_msg_free(m);
			return medha_why(why, whylen, MEDHA_EPEER,
			    "collectives: rank %d went away", dst);
		}
	}
	if (rv != 0) {
		nng_msg_free(m);
		return medha_why(why, whylen, medha_link_nng_err(rv),
		    "collectives: sending to rank %d: %s", dst,
		    nng_strerror(rv));
	}
	return 0;
}

int
medha_coll_send(struct medha_coll *c, int dst, uint64_t tag,
    const void *buf, size_t len, double timeout, char *why, size_t whylen)
{
	double end = timeout < 0 ? -1 : medha_now() + timeout;
	size_t off = 0;
	int rc;

	if (dst < 0 || dst >= c->n || dst == c->rank)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "collectives: send to rank %d of %d (I am %d)", dst, c->n,
		    c->rank);
	if (len > MEDHA_COLL_MAX_MSG)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "collectives: %zu bytes is too large a message", len);
	/* in pieces: the receiver takes no larger frame from anyone */
	for (;;) {
		size_t n = len - off < MEDHA_COLL_PIECE ? len - off
		                                        : MEDHA_COLL_PIECE;
		int more = off + n < len;
		if ((rc = send_piece(c, dst, tag, (const uint8_t *)buf + off, n,
		         (more ? F_MORE : 0) | (off > 0 ? F_CONT : 0), end, why,
		         whylen)) != 0 ||
		    !more)
			return rc;
		off += n;
	}
}

/* Whether m (with a secret) ends with the MAC of what comes before. */
static int
mac_ok(const struct medha_coll *c, nng_msg *m)
{
	uint8_t want[MEDHA_SHA256_LEN];
	const uint8_t *p = nng_msg_body(m);
	size_t n = nng_msg_len(m) - c->mac;
	struct medha_buf part[2] = {{c->table, TABLE_ID}, {p, n}};

	if (c->mac == 0)
		return 1;
	return medha_hmac_sha256(c->key, c->klen, part, 2, want) == 0 &&
	    medha_equal_ct(want, p + n, sizeof(want));
}

/*
 * A message m of src (MAC and number checked, MAC cut off): a whole
 * one, returned; a piece with more to come, kept (NULL); the last
 * piece, the message of all of them, returned. Pieces of one message
 * come one after another on their link: one of another generation or
 * tag drops what was kept.
 */
static nng_msg *
assemble(struct medha_coll *c, nng_msg *m, int src, uint64_t gen,
    uint64_t tag)
{
	const uint8_t *p = nng_msg_body(m);
	uint32_t flags = (uint32_t)get(p + 12, 4);
	nng_msg *pm = c->part[src];

	if (pm != NULL && (flags & F_CONT)) {
		const uint8_t *q = nng_msg_body(pm);
		if (get(q + 16, 8) == gen && get(q + 24, 8) == tag &&
		    nng_msg_len(pm) - HDR <=
		        MEDHA_COLL_MAX_MSG - (nng_msg_len(m) - HDR) &&
		    nng_msg_append(pm, p + HDR, nng_msg_len(m) - HDR) == 0) {
			nng_msg_free(m);
			c->part[src] = NULL;
			if (!(flags & F_MORE))
				return pm;
			c->part[src] = pm;
			return NULL;
		}
	}
	if (pm != NULL || (flags & F_CONT)) { /* a message broken off */
		medha_log(MEDHA_LOG_WARN, "collectives: a message in pieces "
		    "from rank %d broken off: dropped", src);
		if (pm != NULL)
			nng_msg_free(pm);
		c->part[src] = NULL;
		if (flags & F_CONT) {
			nng_msg_free(m);
			return NULL;
		}
	}
	if (!(flags & F_MORE))
		return m;
	c->part[src] = m;
	return NULL;
}

/* The waiting message from src under tag (this generation), or -1. */
static int
find_waiting(const struct medha_coll *c, int src, uint64_t tag)
{
	for (int i = 0; i < c->nw; i++)
		if (c->w[i].src == src && c->w[i].tag == tag &&
		    c->w[i].gen == c->gen)
			return i;
	return -1;
}

/*
 * Take message m (of this table): keep it waiting, or, past the limits
 * (coll.h), drop it and every waiting one (their memory goes back) and
 * return MEDHA_ENOSPACE; 0 when kept.
 */
static int
keep(struct medha_coll *c, nng_msg *m, int src, uint64_t tag)
{
	size_t len = nng_msg_len(m);

	if (c->nw > 0 && (c->nw >= MEDHA_COLL_MAX_WAITING ||
	                     len > MEDHA_COLL_MAX_WAITING_BYTES - c->wbytes ||
	                     c->wbytes > MEDHA_COLL_MAX_WAITING_BYTES))
		goto full;
	if (c->nw == c->wcap) {
		int cap = c->wcap ? 2 * c->wcap : 16;
		void *n;
		if ((n = medha_reallocarray(c->w, cap, sizeof(*c->w))) == NULL)
			goto full;
		c->w = n;
		c->wcap = cap;
	}
	c->w[c->nw++] = (struct waiting){src, c->gen, tag, m};
	c->wbytes += len;
	return 0;
full:
	nng_msg_free(m);
	forget_before(c, UINT64_MAX);
	free(c->w);
	c->w = NULL;
	c->wcap = 0;
	return MEDHA_ENOSPACE;
}

/*
 * Keep frame m, of a later table than this one, as it came; past the
 * bounds of the waiting list it is dropped (said once).
 */
static void
early_keep(struct medha_coll *c, nng_msg *m)
{
	size_t len = nng_msg_len(m);

	if (c->ne >= MEDHA_COLL_MAX_WAITING ||
	    len > MEDHA_COLL_MAX_WAITING_BYTES - c->ebytes)
		goto drop;
	if (c->ne == c->ecap) {
		int cap = c->ecap ? 2 * c->ecap : 16;
		void *n;
		if ((n = medha_reallocarray(c->early, cap, sizeof(*c->early))) ==
		    NULL)
			goto drop;
		c->early = n;
		c->ecap = cap;
	}
	c->early[c->ne++] = m;
	c->ebytes += len;
	return;
drop:
	if (c->early_full_seen++ == 0)
		medha_log(MEDHA_LOG_WARN,
		    "collectives: %d messages of %zu bytes of a later peer "
		    "table wait already (at most %d, %zu bytes): one dropped "
		    "(more are not logged)",
		    c->ne, c->ebytes, MEDHA_COLL_MAX_WAITING,
		    MEDHA_COLL_MAX_WAITING_BYTES);
	nng_msg_free(m);
}

/*
 * A frame m off the wire, checked in this order: its format, its table
 * (a later one's waits as it is: early_keep), its MAC, its sender and
 * receiver, its number (fresh), its pieces (assemble). 1 with *out a
 * whole message of this table from *src under *tag, its MAC cut off; 0
 * when m was dropped or kept (a piece, or of a later table).
 */
static int
take(struct medha_coll *c, nng_msg *m, nng_msg **out, int *src,
    uint64_t *tag)
{
	const uint8_t *p = nng_msg_body(m);
	uint64_t mgen, mseq;
	int msrc, mdst;

	*out = NULL;
	if (nng_msg_len(m) >= 4 && get(p, 4) == MAGIC_OLD) {
		if (c->old_seen++ == 0)
			medha_log(MEDHA_LOG_ERROR,
			    "collectives: a message of an older medha (no "
			    "sequence numbers) dropped: every worker of a "
			    "replica must run the same version (more are not "
			    "logged)");
		nng_msg_free(m);
		return 0;
	}
	if (nng_msg_len(m) < HDR + c->mac || get(p, 4) != MAGIC) {
		medha_log(MEDHA_LOG_WARN,
		    "collectives: a malformed message dropped");
		nng_msg_free(m);
		return 0;
	}
	mgen = get(p + 16, 8);
	if (mgen > c->gen) {
		/* its MAC is under a table not known here yet */
		early_keep(c, m);
		return 0;
	}
	if (!mac_ok(c, m)) {
		if (c->forged_seen++ == 0)
			medha_log(MEDHA_LOG_WARN,
			    "collectives: a message without the secret's MAC "
			    "dropped (more are not logged)");
		nng_msg_free(m);
		return 0;
	}
	nng_msg_chop(m, c->mac);
	msrc = (int)get(p + 4, 4);
	mdst = (int)get(p + 8, 4);
	mseq = get(p + 32, 8);
	if (mgen < c->gen || msrc < 0 || msrc >= c->n || msrc == c->rank) {
		/* from before a restart, or from no peer of this table:
		   nobody will ask for it */
		nng_msg_free(m);
		return 0;
	}
	/* sent again, or to another rank: dropped before it can wait */
	if (mdst != c->rank || !fresh(c, msrc, mseq)) {
		if (mdst != c->rank)
			c->replayed++;
		nng_msg_free(m);
		return 0;
	}
	*tag = get(p + 24, 8);
	if ((m = assemble(c, m, msrc, mgen, *tag)) == NULL)
		return 0; /* a piece, kept (or dropped) */
	*src = msrc;
	*out = m;
	return 1;
}

/*
 * A new table: the frames that came ahead of it, in the order they
 * came, through take(); its messages wait to be asked for, a later
 * table's wait on, an older one's go.
 */
static void
take_early(struct medha_coll *c)
{
	nng_msg **e = c->early;
	int ne = c->ne;
	uint64_t tag;
	nng_msg *m;
	int src;

	c->early = NULL;
	c->ne = c->ecap = 0;
	c->ebytes = 0;
	for (int i = 0; i < ne; i++) {
		if (get(nng_msg_body(e[i]) + 16, 8) < c->gen) {
			nng_msg_free(e[i]);
			continue;
		}
		if (take(c, e[i], &m, &src, &tag) == 1 &&
		    keep(c, m, src, tag) != 0)
			medha_log(MEDHA_LOG_WARN,
			    "collectives: the messages that came ahead of "
			    "peer table %llu are past the waiting list's "
			    "bounds: all dropped",
			    (unsigned long long)c->gen);
	}
	free(e);
}

int
medha_coll_recv(struct medha_coll *c, int src, uint64_t tag, void *buf,
    size_t len, double timeout, char *why, size_t whylen)
{
	double end = timeout < 0 ? -1 : medha_now() + timeout;
	nng_msg *m = NULL;
	const char *h;
	int i, rv;

	if (src < 0 || src >= c->n || src == c->rank)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "collectives: receive from rank %d of %d (I am %d)", src,
		    c->n, c->rank);
	if ((i = find_waiting(c, src, tag)) >= 0) {
		m = c->w[i].m;
		c->wbytes -= nng_msg_len(m);
		c->w[i] = c->w[--c->nw];
	}
	while (m == NULL) {
		double left = end < 0 ? -1 : end - medha_now();
		uint64_t mtag;
		int msrc;

		if (end >= 0 && left <= 0)
			return medha_why(why, whylen, MEDHA_ETIMEOUT,
			    "collectives: nothing from rank %d in %.0f s", src,
			    timeout);
		if ((h = halted(c)) != NULL)
			return medha_why(why, whylen, MEDHA_EPEER,
			    "collectives: %s", h);
		nng_socket_set_ms(c->pull, NNG_OPT_RECVTIMEO,
		    ms_of(left < 0 || left > SLICE ? SLICE : left));
		if ((rv = nng_recvmsg(c->pull, &m, 0)) != 0) {
			m = NULL;
			/* nothing left from src: is it still there? */
			if (rv == NNG_ETIMEDOUT && gone(c, src))
				return medha_why(why, whylen, MEDHA_EPEER,
				    "collectives: rank %d went away", src);
			if (rv == NNG_ETIMEDOUT)
				continue;
			return medha_why(why, whylen, medha_link_nng_err(rv),
			    "collectives: %s", nng_strerror(rv));
		}
		if (take(c, m, &m, &msrc, &mtag) == 0)
			continue; /* dropped, a piece, or of a later table */
		if (msrc == src && mtag == tag)
			break;
		int was = c->nw;
		size_t bytes = c->wbytes;
		if (keep(c, m, msrc, mtag) != 0)
			return medha_why(why, whylen, MEDHA_ENOSPACE,
			    "collectives: %d messages of %zu bytes were "
			    "waiting (at most %d, %zu bytes): all dropped",
			    was, bytes, MEDHA_COLL_MAX_WAITING,
			    MEDHA_COLL_MAX_WAITING_BYTES);
		m = NULL;
	}
	if (nng_msg_len(m) - HDR != len) {
		size_t got = nng_msg_len(m) - HDR;
		nng_msg_free(m);
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "collectives: %zu bytes from rank %d, expected %zu", got,
		    src, len);
	}
	if (len > 0)
		memcpy(buf, (const uint8_t *)nng_msg_body(m) + HDR, len);
	nng_msg_free(m);
	return 0;
}

/* This endpoint's index in group, or -1. */
static int
index_in(const struct medha_coll *c, const int *group, int n)
{
	for (int i = 0; i < n; i++)
		if (group[i] == c->rank)
			return i;
	return -1;
}

int
medha_coll_all_gather(struct medha_coll *c, const int *group, int n,
    uint64_t tag, const void *mine, size_t len, void *all, double timeout,
    char *why, size_t whylen)
{
	int me = index_in(c, group, n), rc;

	if (me < 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "collectives: rank %d is not in the group", c->rank);
	memcpy((uint8_t *)all + (size_t)me * len, mine, len);
	for (int i = 0; i < n; i++)
		if (i != me && (rc = medha_coll_send(c, group[i], tag, mine,
		                    len, timeout, why, whylen)) != 0)
			return rc;
	for (int i = 0; i < n; i++)
		if (i != me &&
		    (rc = medha_coll_recv(c, group[i], tag,
		         (uint8_t *)all + (size_t)i * len, len, timeout, why,
		         whylen)) != 0)
			return rc;
	return 0;
}

int
medha_coll_all_reduce(struct medha_coll *c, const int *group, int n,
    uint64_t tag, float *x, size_t count, double timeout, char *why,
    size_t whylen)
{
	float *all;
	int rc;

	if (n == 1 && index_in(c, group, n) == 0)
		return 0;
	if ((all = medha_calloc((size_t)n * (count ? count : 1),
	         sizeof(float))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	rc = medha_coll_all_gather(c, group, n, tag, x, count * sizeof(float),
	    all, timeout, why, whylen);
	if (rc == 0) {
		memcpy(x, all, count * sizeof(float));
		for (int i = 1; i < n; i++) {
			const float *y = all + (size_t)i * count;
			for (size_t j = 0; j < count; j++)
				x[j] += y[j];
		}
	}
	free(all);
	return rc;
}
