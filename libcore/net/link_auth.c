/*
 * link_auth.c: the handshake of the links' shared secret (net/auth.h)
 * on link.c's server and client: the server answers it inside
 * medha_srv_next(), the client runs it on a context of its own.
 */
#include "net/link_impl.h"

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
 * handshake's next step, or NOAUTH for anything else (not taken).
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
			medha_srv_drop(s, ev->call);
			return;
		}
		memcpy(out, a->ns, MEDHA_AUTH_NONCE);
		a->state = PA_CHAL;
		auth_reply(s, ev->call, MEDHA_AUTH_CHAL, out, sizeof(out));
		return;
	}
	if (kind == MEDHA_AUTH_PROOF && body == MEDHA_SHA256_LEN &&
	    a->state == PA_CHAL &&
	    medha_auth_proof(s->key, s->klen, "client", a->ns, a->nc,
	        want) == 0) {
		if (medha_equal_ct(want, p, sizeof(want))) {
			if (link_adm_proven(s, ev->peer) != 0) {
				/* the shared cap is full: closed */
				medha_srv_drop(s, ev->call);
				nng_pipe_close((nng_pipe){.id = ev->peer});
				return;
			}
			a->state = PA_OK;
			auth_reply(s, ev->call, MEDHA_AUTH_OK, NULL, 0);
			return;
		}
		a->state = PA_NONE;
		medha_log(MEDHA_LOG_WARN,
		    "connection %u: a wrong proof (another secret): refused",
		    ev->peer);
		auth_reply(s, ev->call, MEDHA_AUTH_NOAUTH, NULL, 0);
		return;
	}
	if (!a->warned)
		medha_log(MEDHA_LOG_WARN,
		    "connection %u: a message before it proved the secret: "
		    "not taken",
		    ev->peer);
	a->warned = 1;
	auth_reply(s, ev->call, MEDHA_AUTH_NOAUTH, NULL, 0);
}

/* Why a handshake failed, logged once for c (callers retry). */
void
link_cli_tell(struct medha_cli *c, const char *msg)
{
	if (!__atomic_exchange_n(&c->told, 1, __ATOMIC_RELAXED))
		medha_log(MEDHA_LOG_ERROR, "%s", msg);
}

/* One step of the handshake: frame out, the answer of kind want in. */
static int
auth_step(struct medha_cli *c, const uint8_t *f, size_t n, double timeout,
    int want, uint8_t *body, size_t blen, uint32_t *pipe)
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
	    timeout, MEDHA_AUTH_CHAL, chal, sizeof(chal), &p1);
	if (rc == MEDHA_EAUTH)
		link_cli_tell(c, "the server did not answer the secret's "
		            "challenge (it has none, or is no medha server)");
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
	    timeout, MEDHA_AUTH_OK, NULL, 0, &p2);
	if (rc == MEDHA_EAUTH)
		link_cli_tell(c, "the server refused this program's proof: it "
		            "has another secret");
	if (rc == 0 && p1 == p2) {
		pthread_mutex_lock(&c->mu);
		c->authed = p2;
		pthread_mutex_unlock(&c->mu);
	}
	/* p1 != p2: the connection changed on the way; the next call
	   tries again */
out:
	pthread_mutex_unlock(&c->amu);
	return rc;
}

