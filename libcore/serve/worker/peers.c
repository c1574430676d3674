/*
 * peers.c: a live worker's links to the other workers of its replica
 * (peers.h). The backend does its own arithmetic around the collectives
 * it calls (TP all-gathers, the KVP merge of partial attention), which
 * this file implements over net/coll.h: straight between workers, at
 * the addresses the scheduler hands out with the first batch after any
 * worker (re)joined. SPP stages hand hidden states on over the same
 * links.
 */
#include "serve/worker/peers.h"

#include "net/link.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the layout and the links ---- */

int
wk_peers_init(struct wk_peers *p, const struct medha_worker_config *c,
    char *why, size_t whylen)
{
	memset(p, 0, sizeof(*p));
	if (medha_layout_init(&p->lay, c->tp, c->spp, c->kvp, c->rank) != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "rank %d: not below tp %d x spp %d x kvp %d", c->rank,
		    c->tp, c->spp, c->kvp);
	return 0;
}

/*
 * Where the other workers reach this one: --peer, or beside the
 * scheduler: ipc://PATH-wRANK.sock for ipc://PATH, tcp://HOST:0 (a free
 * port) for tcp://HOST:PORT.
 */
static void
peer_url(const struct medha_worker_config *o, char *url, size_t n)
{
	const char *colon;

	if (o->peer != NULL)
		snprintf(url, n, "%s", o->peer);
	else if (strncmp(o->addr, "tcp://", 6) == 0 &&
	    (colon = strrchr(o->addr, ':')) != NULL && colon > o->addr + 5)
		snprintf(url, n, "%.*s:0", (int)(colon - o->addr), o->addr);
	else {
		size_t len = strlen(o->addr);
		if (len > 5 && strcmp(o->addr + len - 5, ".sock") == 0)
			len -= 5;
		snprintf(url, n, "%.*s-w%d.sock", (int)len, o->addr, o->rank);
	}
}

int
wk_peers_open(struct wk_peers *p, const struct medha_worker_config *c,
    volatile sig_atomic_t *stop, volatile sig_atomic_t *drop, char *why,
    size_t whylen)
{
	char url[MEDHA_PROTO_URL_MAX], w2[384];
	int rc;

	if (medha_layout_size(&p->lay) == 1)
		return 0;
	peer_url(c, url, sizeof(url));
	if ((rc = medha_coll_open(&p->coll, url, w2, sizeof(w2))) != 0)
		return medha_why(why, whylen, rc, "--peer: %s", w2);
	medha_coll_stop_on(p->coll, stop);
	medha_coll_drop_on(p->coll, drop);
	return 0;
}

void
wk_peers_close(struct wk_peers *p)
{
	if (p->coll != NULL) {
		medha_coll_close(p->coll);
		p->coll = NULL;
	}
}

const char *
wk_peers_url(const struct wk_peers *p)
{
	return p->coll != NULL ? medha_coll_url(p->coll) : "";
}

int
wk_peers_take(struct wk_peers *p, struct medha_backend *be,
    const struct medha_msg_peers *t)
{
	struct medha_comm cm;
	struct wk_call c;
	const char **urls;
	char why[512];
	int rc;

	if (p->coll == NULL || t->n != medha_layout_size(&p->lay)) {
		medha_log(MEDHA_LOG_ERROR,
		    "scheduler sent a table of %d workers; this one is "
		    "rank %d of %d: starting over",
		    t->n, p->lay.rank, medha_layout_size(&p->lay));
		return -1;
	}
	p->kvp_tokens = t->kvp_tokens;
	if (t->gen == medha_coll_gen(p->coll))
		return 0;
	if ((urls = medha_calloc(t->n, sizeof(*urls))) == NULL)
		return -1;
	for (int i = 0; i < t->n; i++)
		urls[i] = t->urls[i];
	rc = medha_coll_peers(p->coll, t->gen, p->lay.rank, t->n, urls, why,
	    sizeof(why));
	free(urls);
	if (rc != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: starting over", why);
		return -1;
	}
	medha_log(MEDHA_LOG_INFO, "peers: generation %llu, %d workers",
	    (unsigned long long)t->gen, t->n);
	/* a backend with collectives of its own sets them up through ours
	   (cpu and sim have none: they use ours in each call) */
	wk_peers_comm(p, &c, 0, &cm);
	if ((rc = medha_backend_comm_init(be, &cm, why, sizeof(why))) != 0 &&
	    rc != MEDHA_EUNSUP) {
		medha_log(MEDHA_LOG_ERROR, "collectives: %s: starting over", why);
		return -1;
	}
	return 0;
}

/* ---- the collectives (struct medha_comm) ---- */

/* How long a collective waits for a peer: a stage before may be
 * running a long batch. */
#define COLL_WAIT 120.0

/* Collective kinds in tags (MEDHA_COLL_TAG): hidden states between
 * stages, KVP partial attention; the backend's TP all-gathers are
 * TAG_TP + its kind (0-3; 4-6 on a routed layer: cpu/cpu_impl.h). */
enum { TAG_STAGE = 1, TAG_KVP = 2, TAG_TP = 8 };

/* Host memory only: net/coll.h reaches no device. */
static int
host_only(int mem, char *why, size_t whylen)
{
	return mem == MEDHA_MEM_HOST
	    ? 0
	    : medha_why(why, whylen, MEDHA_EUNSUP,
	          "collectives over nng: host memory only");
}

/* The TP ranks of this worker's stage and group, in rank order. */
static void
tp_group(const struct wk_peers *p, int *group)
{
	for (int i = 0; i < p->lay.tp; i++)
		group[i] = medha_layout_rank(&p->lay, i, p->lay.rs, p->lay.rg);
}

static int
all_gather(void *arg, int layer, int kind, const void *mine, size_t len,
    void *all, int mem, char *why, size_t whylen)
{
	const struct wk_call *t = arg;
	int group[MEDHA_TP_MAX], rc;

	if ((rc = host_only(mem, why, whylen)) != 0)
		return rc;
	tp_group(t->p, group);
	return medha_coll_all_gather(t->p->coll, group, t->p->lay.tp,
	    MEDHA_COLL_TAG(t->bseq, layer, TAG_TP + kind), mine, len, all,
	    COLL_WAIT, why, whylen);
}

static int
all_reduce(void *arg, int layer, int kind, float *x, size_t n, int mem,
    char *why, size_t whylen)
{
	const struct wk_call *t = arg;
	int group[MEDHA_TP_MAX], rc;

	if ((rc = host_only(mem, why, whylen)) != 0)
		return rc;
	tp_group(t->p, group);
	return medha_coll_all_reduce(t->p->coll, group, t->p->lay.tp,
	    MEDHA_COLL_TAG(t->bseq, layer, TAG_TP + kind), x, n, COLL_WAIT,
	    why, whylen);
}

/* KVP: the same TP rank and stage in group g. */
static int
exchange(void *arg, int layer, int g, const void *buf, size_t len,
    void *rbuf, size_t rlen, int mem, char *why, size_t whylen)
{
	const struct wk_call *t = arg;
	const struct wk_peers *p = t->p;
	const uint64_t tag = MEDHA_COLL_TAG(t->bseq, layer, TAG_KVP);
	int peer, rc;

	if ((rc = host_only(mem, why, whylen)) != 0)
		return rc;
	if (g < 0 || g >= p->lay.kvp || g == p->lay.rg)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "KVP exchange with group %d of %d", g, p->lay.kvp);
	peer = medha_layout_rank(&p->lay, p->lay.rt, p->lay.rs, g);
	if ((rc = medha_coll_send(p->coll, peer, tag, buf, len, COLL_WAIT, why,
	         whylen)) != 0)
		return rc;
	return medha_coll_recv(p->coll, peer, tag, rbuf, rlen, COLL_WAIT, why,
	    whylen);
}

/* SPP: the stage after (or before) on the same TP rank and group; the
 * tag names the receiving stage. */
int
wk_peers_send_next(void *arg, const void *buf, size_t len, int mem,
    char *why, size_t whylen)
{
	const struct wk_call *t = arg;
	const struct wk_peers *p = t->p;
	int rc;

	if ((rc = host_only(mem, why, whylen)) != 0)
		return rc;
	return medha_coll_send(p->coll,
	    medha_layout_rank(&p->lay, p->lay.rt, p->lay.rs + 1, p->lay.rg),
	    MEDHA_COLL_TAG(t->bseq, p->lay.rs + 1, TAG_STAGE), buf, len,
	    COLL_WAIT, why, whylen);
}

int
wk_peers_recv_prev(void *arg, void *buf, size_t len, int mem, char *why,
    size_t whylen)
{
	const struct wk_call *t = arg;
	const struct wk_peers *p = t->p;
	int rc;

	if ((rc = host_only(mem, why, whylen)) != 0)
		return rc;
	return medha_coll_recv(p->coll,
	    medha_layout_rank(&p->lay, p->lay.rt, p->lay.rs - 1, p->lay.rg),
	    MEDHA_COLL_TAG(t->bseq, p->lay.rs, TAG_STAGE), buf, len, COLL_WAIT,
	    why, whylen);
}

void
wk_peers_comm(const struct wk_peers *p, struct wk_call *c, uint64_t bseq,
    struct medha_comm *cm)
{
	*c = (struct wk_call){p, bseq};
	*cm = (struct medha_comm){all_gather, all_reduce, exchange,
	    wk_peers_send_next, wk_peers_recv_prev, p->lay.tp, p->lay.rt,
	    p->lay.kvp, p->lay.rg, c};
}
