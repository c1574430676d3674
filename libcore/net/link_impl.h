/*
 * link_impl.h: what net/link.c and net/link_auth.c (the handshake of
 * net/auth.h) share: the server's and the client's insides.
 */
#ifndef MEDHA_NET_LINK_IMPL_H
#define MEDHA_NET_LINK_IMPL_H

#include "net/auth.h"
#include "net/link.h"

#include <nng/nng.h>

#include <pthread.h>
#include <stdint.h>

#define MIN_RECEIVING 4 /* contexts kept posted for new requests */

enum { C_RECV, C_HELD, C_SEND, C_DEAD };

struct medha_srv_call {
	struct medha_srv *s;
	nng_ctx ctx;
	nng_aio *aio;
	int state;                   /* C_* */
	nng_msg *msg;                /* the request while held */
	uint32_t peer;               /* its pipe */
	struct medha_srv_call *next; /* inbox link */
};

/* A connection's place in the handshake (auth.h). A proven one may
   say HELLO again (its client missed the OK: issue 39): it stays
   proven meanwhile, the new challenge in chal. */
enum { PA_NONE, PA_CHAL, PA_OK };
#define PA_PIECES 8 /* requests in pieces at once, per connection */
struct pauth {
	uint32_t pipe;
	int state; /* PA_* */
	int chal;  /* a challenge sent (nc, ns), its proof not yet come */
	int warned;
	uint8_t nc[MEDHA_AUTH_NONCE], ns[MEDHA_AUTH_NONCE];
	struct {
		uint32_t id;
		uint8_t *buf;
		size_t len, cap;
	} pc[PA_PIECES]; /* a proven connection's requests in pieces */
	int npc;
};
#define PA_MAX 65536 /* connections followed at most */

/* An admitted connection and the peer it is from (peer_key); with a
   secret, whether it has proved it yet, and since when it is open. */
struct padm {
	uint32_t pipe;
	uint64_t key;
	int proven;
	double t0;
};

/* With a secret, a connection that has not proved it within this many
   seconds is closed, and such connections have a cap of their own (at
   most UNPROVEN_MAX, and a quarter of that from one peer), outside the
   shared one, which counts only the proven (issue 39). */
#define HANDSHAKE_DEADLINE 5.0
#define UNPROVEN_MAX 64

struct medha_srv {
	nng_socket sock;
	/* (mu) connections admitted, and the limits: a cap for the
	   socket and a share for one peer, past which a new connection
	   is closed at once */
	struct padm *adm;
	int nadm, admcap;
	int max_pipes, max_per_peer;
	int max_unproven, unproven_per_peer; /* with a secret */
	int nunproven;
	double swept; /* medha_now() of the last deadline sweep */
	uint64_t refused, late;
	int auth;         /* a secret is set: connections must prove it */
	uint8_t *key;     /* (klen) the secret, as it was at open */
	size_t klen;
	struct pauth *pa; /* (npa) by pipe, ascending */
	int npa, pacap;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct medha_srv_call **calls; /* (ncalls) every context */
	int ncalls, cap;
	int receiving; /* contexts in C_RECV */
	int held;      /* contexts in C_HELD (inbox included) */
	struct medha_srv_call *in_head, *in_tail; /* arrived, not taken */
	uint32_t *gone;                           /* closed pipes, not taken */
	int ngone, gone_cap;
	int woken; /* medha_srv_wake() since the last medha_srv_next() */
	int closing;
};

#define CLI_MAX_CTX 16

struct medha_cli {
	nng_socket sock;
	nng_dialer dialer; /* (dmu) of url: medha_cli_redial */
	char *url;         /* (after the struct) */
	pthread_mutex_t dmu;
	int nctx, nopen;
	/* the callers' contexts, and one more (index nctx) for the
	   handshake; nopen of them open */
	nng_ctx ctx[CLI_MAX_CTX + 1];
	nng_aio *aio[CLI_MAX_CTX + 1];
	int npipes;     /* live connections */
	uint64_t epoch; /* connections lost so far */
	pthread_mutex_t mu;
	/* with a secret: each call's request, kept to send it again after
	   NOAUTH; the connection the handshake last proved itself on */
	int auth, told; /* a secret; NOAUTH logged once */
	uint8_t *key;   /* (klen) the secret, as it was at open */
	size_t klen;
	void *req[CLI_MAX_CTX];
	size_t reqlen[CLI_MAX_CTX];
	double tmo[CLI_MAX_CTX];
	uint32_t pipe, authed; /* (mu) the live connection; the proven */
	uint32_t piece_id;     /* the last request sent in pieces */
	pthread_mutex_t amu;   /* one handshake at a time */
	char authwhy[320];     /* (mu) why the last handshake failed, with
	                          what the server answered */
};

/* link_auth.c: the server's side of the handshake (srv_next's mutex not
   held), and the client's */
struct pauth *link_pa_get(struct medha_srv *s, uint32_t pipe, int make);
void link_pa_drop(struct medha_srv *s, uint32_t pipe);
void link_srv_auth(struct medha_srv *s, const struct medha_srv_ev *ev);
void link_cli_tell(struct medha_cli *c, const char *msg);
/* why with the reason of the last failed handshake when rc is
   MEDHA_EAUTH (else medha_strerror(rc)); rc */
int link_cli_why(struct medha_cli *c, int rc, char *why, size_t whylen);
/* link.c: pipe has proved the secret: 0, or -1 when the shared cap is
   full (then it is to be closed) */
int link_adm_proven(struct medha_srv *s, uint32_t pipe);
int link_cli_auth(struct medha_cli *c, double timeout, int force);
/* link.c: a call on context i (the handshake's included), in halves */
int link_raw_send(struct medha_cli *c, int i, const void *req, size_t len,
    double timeout);
int link_raw_wait(struct medha_cli *c, int i, void **rep, size_t *replen,
    uint32_t *pipe);
/* link_auth.c: a request larger than MEDHA_LINK_PIECE, with a secret:
   all pieces but the last sent on context k, each answered OK (k is the
   handshake's: taken under amu), and the last into *last (malloc'd,
   *lastlen bytes) for the caller to send where the answer is awaited;
   *last NULL: send req whole. 0, or an error. */
int link_cli_pieces(struct medha_cli *c, int k, const void *req, size_t len,
    double timeout, void **last, size_t *lastlen);
/* a request whole on context i: in pieces if need be */
int link_send_whole(struct medha_cli *c, int i, const void *req, size_t len,
    double timeout);
/* the server's side: ev a piece of a proven connection; 1 when it was
   answered here (ev cleared), 0 when ev is now the request whole */
int link_srv_piece(struct medha_srv *s, struct medha_srv_ev *ev);

#endif
