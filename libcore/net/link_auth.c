/*
 * link_auth.c: the handshake of the links' shared secret (net/auth.h)
 * on link.c's server and client: the server answers it inside
 * medha_srv_next(), the client runs it on a context of its own. And
 * whether a server's peer is in its own process (an inproc://
 * connection, medha_srv_peer_local).
 */
#include "net/link_impl.h"
#include "net/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The handshake state of pipe, made (PA_NONE) if make; NULL if none. */
struct pauth *
link_pa_get(struct medha_srv *s, uint32_t pipe, int make)
{
	int lo = 0, hi = s->npa;

	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (s->pa[mid].pipe < pipe)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < s->npa && s->pa[lo].pipe == pipe)
		return &s->pa[lo];
	if (!make || s->npa >= PA_MAX)
		return NULL;
	if (s->npa == s->pacap) {
		int ncap = s->pacap ? 2 * s->pacap : 64;
		void *n = medha_reallocarray(s->pa, ncap, sizeof(*s->pa));
		if (n == NULL)
			return NULL;
		s->pa = n;
		s->pacap = ncap;
	}
	memmove(s->pa + lo + 1, s->pa + lo, (s->npa - lo) * sizeof(*s->pa));
	s->npa++;
	memset(&s->pa[lo], 0, sizeof(s->pa[lo]));
	s->pa[lo].pipe = pipe;
	return &s->pa[lo];
}

void
link_pa_drop(struct medha_srv *s, uint32_t pipe)
{
	struct pauth *a = link_pa_get(s, pipe, 0);

	if (a == NULL)
		return;
	for (int i = 0; i < a->npc; i++)
		free(a->pc[i].buf);
	memmove(a, a + 1, (size_t)(s->pa + s->npa - (a + 1)) * sizeof(*a));
	s->npa--;
}

static void
auth_reply(struct medha_srv *s, struct medha_srv_call *call, int kind,
    const void *body, size_t n)
{
	uint8_t f[MEDHA_AUTH_FRAME_MAX];

	medha_srv_reply(s, call, f, medha_auth_frame(f, kind, body, n));
}

/*
 * A message of a connection that has not proved the secret: the
 * handshake's next step, or NOAUTH for anything else (not taken). Or
 * a handshake's frame of a proven connection: a HELLO again (its client
 * missed the OK) is answered as the first was, the connection staying
 * proven (calls on its other contexts go on); anything else NOAUTH.
 */
void
link_srv_auth(struct medha_srv *s, const struct medha_srv_ev *ev)
{
	const uint8_t *p = (const uint8_t *)ev->data + MEDHA_AUTH_MAGIC_LEN + 1;
	const size_t body = ev->len - (MEDHA_AUTH_MAGIC_LEN + 1);
	struct pauth *a = link_pa_get(s, ev->peer, 1);
	int kind = medha_auth_kind(ev->data, ev->len);
	uint8_t out[MEDHA_AUTH_NONCE + MEDHA_SHA256_LEN], want[MEDHA_SHA256_LEN];

	if (a == NULL) {
		medha_srv_drop(s, ev->call);
		return;
	}
	if (kind == MEDHA_AUTH_HELLO && body == MEDHA_AUTH_NONCE) {
		memcpy(a->nc, p, MEDHA_AUTH_NONCE);
		if (medha_random(a->ns, MEDHA_AUTH_NONCE) != 0 ||
		    medha_auth_proof(s->key, s->klen, "server", a->nc, a->ns,
		        out + MEDHA_AUTH_NONCE) != 0) {
			a->chal = 0;
			medha_srv_drop(s, ev->call);
			return;
		}
		memcpy(out, a->ns, MEDHA_AUTH_NONCE);
		a->chal = 1;
		if (a->state != PA_OK)
			a->state = PA_CHAL;
		auth_reply(s, ev->call, MEDHA_AUTH_CHAL, out, sizeof(out));
		return;
	}
	if (kind == MEDHA_AUTH_PROOF && body == MEDHA_SHA256_LEN && a->chal &&
	    medha_auth_proof(s->key, s->klen, "client", a->ns, a->nc,
	        want) == 0) {
		a->chal = 0; /* a proof answers one challenge */
		if (medha_equal_ct(want, p, sizeof(want))) {
			if (a->state != PA_OK &&
			    link_adm_proven(s, ev->peer) != 0) {
				/* the shared cap is full: closed */
				a->state = PA_NONE;
				medha_srv_drop(s, ev->call);
				nng_pipe_close((nng_pipe){.id = ev->peer});
				return;
			}
			a->state = PA_OK;
			auth_reply(s, ev->call, MEDHA_AUTH_OK, NULL, 0);
			return;
		}
		if (a->state != PA_OK)
			a->state = PA_NONE;
		medha_log(MEDHA_LOG_WARN,
		    "connection %u: a wrong proof (another secret): refused",
		    ev->peer);
		auth_reply(s, ev->call, MEDHA_AUTH_NOAUTH, NULL, 0);
		return;
	}
	if (!a->warned)
		medha_log(MEDHA_LOG_WARN,
		    a->state == PA_OK
		        ? "connection %u: a handshake frame out of turn: not "
		          "taken"
		        : "connection %u: a message before it proved the "
		          "secret: not taken",
		    ev->peer);
	a->warned = 1;
	auth_reply(s, ev->call, MEDHA_AUTH_NOAUTH, NULL, 0);
}

/* Why a handshake failed: logged once for c (callers retry), and kept
   for link_cli_why. */
void
link_cli_tell(struct medha_cli *c, const char *msg)
{
	pthread_mutex_lock(&c->mu);
	snprintf(c->authwhy, sizeof(c->authwhy), "%s", msg);
	pthread_mutex_unlock(&c->mu);
	if (!__atomic_exchange_n(&c->told, 1, __ATOMIC_RELAXED))
		medha_log(MEDHA_LOG_ERROR, "%s", msg);
}

int
link_cli_why(struct medha_cli *c, int rc, char *why, size_t whylen)
{
	pthread_mutex_lock(&c->mu);
	if (rc == MEDHA_EAUTH && c->authwhy[0] != '\0')
		medha_why(why, whylen, rc, "%s", c->authwhy);
	else
		medha_why(why, whylen, rc, "%s", medha_strerror(rc));
	pthread_mutex_unlock(&c->mu);
	return rc;
}

/* What the server answered, when it was not the handshake's next
   frame: a frame of another kind, a message (an ERROR's reason), or
   bytes that are neither. */
static void
auth_saw(const void *rep, size_t len, char *out, size_t n)
{
	static const char *const kinds[] = {"?", "HELLO", "CHAL", "PROOF",
	    "OK", "NOAUTH", "PIECE"};
	int kind = medha_auth_kind(rep, len);
	struct medha_msg m;
	char why[160];

	if (kind > 0 && kind <= MEDHA_AUTH_PIECE)
		snprintf(out, n, "a %s frame of %zu bytes", kinds[kind], len);
	else if (medha_msg_decode(&m, rep, len, why, sizeof(why)) == 0) {
		if (m.type == MEDHA_MSG_ERROR)
			snprintf(out, n, "an ERROR message (%s: %.120s)",
			    medha_strerror(m.error.code), m.error.reason);
		else
			snprintf(out, n, "a %s message",
			    medha_msg_type_name(m.type));
		medha_msg_clear(&m);
	} else
		snprintf(out, n, "%zu bytes that are no frame or message of "
		    "medha's (%.100s)", len, why);
}

/* One step of the handshake: frame out, the answer of kind want in
   (else MEDHA_EAUTH, and what came instead in saw). */
static int
auth_step(struct medha_cli *c, const uint8_t *f, size_t n, double timeout,
    int want, uint8_t *body, size_t blen, uint32_t *pipe, char *saw,
    size_t sawlen)
{
	void *rep;
	size_t len;
	int rc;

	if ((rc = link_raw_send(c, c->nctx, f, n, timeout)) != 0 ||
	    (rc = link_raw_wait(c, c->nctx, &rep, &len, pipe)) != 0)
		return rc;
	rc = medha_auth_kind(rep, len) == want &&
	        len == MEDHA_AUTH_MAGIC_LEN + 1 + blen
	    ? 0
	    : MEDHA_EAUTH;
	if (rc == 0 && blen > 0)
		memcpy(body, (uint8_t *)rep + MEDHA_AUTH_MAGIC_LEN + 1, blen);
	if (rc != 0)
		auth_saw(rep, len, saw, sawlen);
	free(rep);
	return rc;
}

/*
 * Prove the secret on the live connection unless it has been (force:
 * again). The server must prove it first: one that cannot (another
 * secret, or none) is refused with MEDHA_EAUTH.
 */
int
link_cli_auth(struct medha_cli *c, double timeout, int force)
{
	uint8_t f[MEDHA_AUTH_FRAME_MAX], nc[MEDHA_AUTH_NONCE],
	    chal[MEDHA_AUTH_NONCE + MEDHA_SHA256_LEN], want[MEDHA_SHA256_LEN];
	char saw[200], msg[320];
	uint32_t p1 = 0, p2 = 0;
	int rc;

	pthread_mutex_lock(&c->amu);
	pthread_mutex_lock(&c->mu);
	rc = !force && c->pipe != 0 && c->pipe == c->authed;
	pthread_mutex_unlock(&c->mu);
	if (rc) {
		pthread_mutex_unlock(&c->amu);
		return 0;
	}
	if ((rc = medha_random(nc, sizeof(nc))) != 0)
		goto out;
	rc = auth_step(c, f, medha_auth_frame(f, MEDHA_AUTH_HELLO, nc, sizeof(nc)),
	    timeout, MEDHA_AUTH_CHAL, chal, sizeof(chal), &p1, saw,
	    sizeof(saw));
	if (rc == MEDHA_EAUTH) {
		snprintf(msg, sizeof(msg), "the server did not answer the "
		    "secret's challenge (it has none, or is no medha server): "
		    "HELLO answered with %s", saw);
		link_cli_tell(c, msg);
	}
	if (rc != 0)
		goto out;
	if ((rc = medha_auth_proof(c->key, c->klen, "server", nc, chal,
	         want)) != 0)
		goto out;
	if (!medha_equal_ct(want, chal + MEDHA_AUTH_NONCE, sizeof(want))) {
		link_cli_tell(c, "the server's proof is wrong: it has another "
		            "secret");
		rc = MEDHA_EAUTH;
		goto out;
	}
	if ((rc = medha_auth_proof(c->key, c->klen, "client", chal, nc,
	         want)) != 0)
		goto out;
	rc = auth_step(c, f, medha_auth_frame(f, MEDHA_AUTH_PROOF, want,
	                         sizeof(want)),
	    timeout, MEDHA_AUTH_OK, NULL, 0, &p2, saw, sizeof(saw));
	if (rc == MEDHA_EAUTH && p2 != p1) {
		/* the proof went on a new connection, which had not seen
		   the challenge: no refusal, the next call tries again */
		rc = MEDHA_EPEER;
		goto out;
	}
	if (rc == MEDHA_EAUTH) {
		snprintf(msg, sizeof(msg), "the server refused this program's "
		    "proof (it has another secret): PROOF answered with %s",
		    saw);
		link_cli_tell(c, msg);
	}
	if (rc == 0 && p1 == p2) {
		pthread_mutex_lock(&c->mu);
		c->authed = p2;
		c->authwhy[0] = '\0';
		pthread_mutex_unlock(&c->mu);
	}
	/* p1 != p2: the connection changed on the way; the next call
	   tries again */
out:
	pthread_mutex_unlock(&c->amu);
	return rc;
}


/* ---- requests in pieces (MEDHA_LINK_PIECE) ---- */

int
link_srv_piece(struct medha_srv *s, struct medha_srv_ev *ev)
{
	const uint8_t *p = ev->data;
	struct pauth *a = link_pa_get(s, ev->peer, 0);
	size_t n = ev->len - MEDHA_AUTH_PIECE_HDR;
	uint32_t id;
	int last, k;
	nng_msg *m;

	if (ev->len < MEDHA_AUTH_PIECE_HDR || a == NULL) {
		medha_srv_drop(s, ev->call);
		memset(ev, 0, sizeof(*ev));
		return 1;
	}
	id = (uint32_t)p[9] | (uint32_t)p[10] << 8 | (uint32_t)p[11] << 16 |
	    (uint32_t)p[12] << 24;
	last = p[13] != 0;
	for (k = 0; k < a->npc && a->pc[k].id != id; k++)
		;
	if (k == a->npc) {
		if (last) { /* its first pieces went on another connection */
			auth_reply(s, ev->call, MEDHA_AUTH_NOAUTH, NULL, 0);
			memset(ev, 0, sizeof(*ev));
			return 1;
		}
		if (a->npc == PA_PIECES) { /* the oldest let go */
			free(a->pc[0].buf);
			memmove(a->pc, a->pc + 1, (PA_PIECES - 1) * sizeof(a->pc[0]));
			a->npc--;
			k = a->npc;
		}
		memset(&a->pc[k], 0, sizeof(a->pc[k]));
		a->pc[k].id = id;
		a->npc++;
	}
	if (a->pc[k].len + n > MEDHA_LINK_MAX_FRAME) {
		medha_log(MEDHA_LOG_WARN, "connection %u: a request in pieces "
		    "of more than %u bytes: refused", ev->peer,
		    MEDHA_LINK_MAX_FRAME);
		goto drop;
	}
	if (a->pc[k].len + n > a->pc[k].cap) {
		size_t cap = a->pc[k].cap ? 2 * a->pc[k].cap : 4 * n + 1;
		void *nb;
		while (cap < a->pc[k].len + n)
			cap *= 2;
		if ((nb = realloc(a->pc[k].buf, cap)) == NULL)
			goto drop;
		a->pc[k].buf = nb;
		a->pc[k].cap = cap;
	}
	memcpy(a->pc[k].buf + a->pc[k].len, p + MEDHA_AUTH_PIECE_HDR, n);
	a->pc[k].len += n;
	if (!last) {
		auth_reply(s, ev->call, MEDHA_AUTH_OK, NULL, 0);
		memset(ev, 0, sizeof(*ev));
		return 1;
	}
	/* the request whole, in place of its last piece */
	if (nng_msg_alloc(&m, 0) != 0 ||
	    nng_msg_append(m, a->pc[k].buf, a->pc[k].len) != 0) {
		if (m != NULL)
			nng_msg_free(m);
		goto drop;
	}
	nng_msg_free(ev->call->msg);
	ev->call->msg = m;
	ev->data = nng_msg_body(m);
	ev->len = nng_msg_len(m);
	free(a->pc[k].buf);
	memmove(&a->pc[k], &a->pc[k + 1], (size_t)(a->npc - k - 1) *
	    sizeof(a->pc[0]));
	a->npc--;
	return 0;
drop:
	free(a->pc[k].buf);
	memmove(&a->pc[k], &a->pc[k + 1], (size_t)(a->npc - k - 1) *
	    sizeof(a->pc[0]));
	a->npc--;
	medha_srv_drop(s, ev->call);
	memset(ev, 0, sizeof(*ev));
	return 1;
}

int
link_cli_pieces(struct medha_cli *c, int k, const void *req, size_t len,
    double timeout, void **last, size_t *lastlen)
{
	const uint8_t *q = req;
	uint8_t *f;
	uint32_t id;
	size_t off = 0;
	int rc = 0;

	*last = NULL;
	*lastlen = 0;
	if (!c->auth || len <= MEDHA_LINK_PIECE)
		return 0;
	if ((f = malloc(MEDHA_AUTH_PIECE_HDR + MEDHA_LINK_PIECE)) == NULL)
		return MEDHA_ENOMEM;
	id = __atomic_add_fetch(&c->piece_id, 1, __ATOMIC_RELAXED);
	memcpy(f, MEDHA_AUTH_MAGIC, MEDHA_AUTH_MAGIC_LEN);
	f[MEDHA_AUTH_MAGIC_LEN] = MEDHA_AUTH_PIECE;
	for (int i = 0; i < 4; i++)
		f[9 + i] = (uint8_t)(id >> (8 * i));
	if (k == c->nctx)
		pthread_mutex_lock(&c->amu);
	for (;;) {
		size_t n = len - off > MEDHA_LINK_PIECE ? MEDHA_LINK_PIECE
		                                        : len - off;
		void *rep;
		size_t rlen;
		f[13] = off + n == len;
		memcpy(f + MEDHA_AUTH_PIECE_HDR, q + off, n);
		off += n;
		if (off == len) {
			*last = f;
			*lastlen = MEDHA_AUTH_PIECE_HDR + n;
			f = NULL;
			break;
		}
		if ((rc = link_raw_send(c, k, f, MEDHA_AUTH_PIECE_HDR + n,
		         timeout)) != 0 ||
		    (rc = link_raw_wait(c, k, &rep, &rlen, NULL)) != 0)
			break;
		rc = medha_auth_kind(rep, rlen) == MEDHA_AUTH_OK ? 0
		                                                 : MEDHA_EAUTH;
		free(rep);
		if (rc != 0)
			break;
	}
	if (k == c->nctx)
		pthread_mutex_unlock(&c->amu);
	free(f);
	return rc;
}

int
link_send_whole(struct medha_cli *c, int i, const void *req, size_t len,
    double timeout)
{
	void *last;
	size_t n;
	int rc;

	if ((rc = link_cli_pieces(c, i, req, len, timeout, &last, &n)) != 0)
		return rc;
	if (last == NULL)
		return link_raw_send(c, i, req, len, timeout);
	rc = link_raw_send(c, i, last, n, timeout);
	free(last);
	return rc;
}

/* ---- a peer in this process ---- */

int
medha_srv_peer_local(const struct medha_srv *s, uint32_t peer)
{
	nng_pipe p = NNG_PIPE_INITIALIZER;
	nng_sockaddr sa;

	(void)s; /* a pipe id names one connection in the process */
	p.id = peer;
	return nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) == 0 &&
	    sa.s_family == NNG_AF_INPROC;
}
