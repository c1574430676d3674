/*
 * coll.h: the collectives between the workers of one replica (doc/DESIGN.md
 * sections 5 and 7), over nng for the cpu and sim backends: point-to-
 * point send/recv of hidden states between SPP stages, the TP
 * all-reduce, and the all-gather of KVP partial attention outputs: the
 * live worker's implementation of a backend's collectives (engine/
 * backend.h struct medha_comm) in host memory. A backend with its own
 * (cuda over NCCL) bootstraps them through these (backend.h says how).
 *
 * Each worker listens at one address (a pull socket) and dials every
 * peer it sends to (a push socket each), so every message goes straight
 * from its sender to its receiver. A message carries the sender's rank,
 * the receiver's, a sequence number of its link (one taken already is
 * dropped: a copy sent again never waits; issue 39), the generation of
 * the peer table it was sent under and a 64-bit tag
 * that the caller makes unique per use (batch, layer, kind: see
 * MEDHA_COLL_TAG), so messages of pipelined batches that arrive out of
 * order wait in a mailbox until they are asked for, and a message left
 * over from an older generation (a peer restarted) is dropped. When the
 * connection to a peer closes (it died), every wait on that peer under
 * the same table ends at once with MEDHA_EPEER ("rank R went away")
 * instead of running to its timeout; the next table clears it.
 *
 * Reductions are deterministic: every member receives every other's
 * buffer and adds them in rank order, so all members hold the same bits
 * whatever order the messages came in.
 *
 *	struct medha_coll *c;
 *	medha_coll_open(&c, "ipc:///tmp/w0.sock", why, sizeof(why));
 *	(tell the others medha_coll_url(c); learn theirs)
 *	medha_coll_peers(c, gen, rank, n, urls, why, sizeof(why));
 *	int tp[2] = { 0, 1 };
 *	medha_coll_all_reduce(c, tp, 2, MEDHA_COLL_TAG(bseq, layer, 0), x,
 *	    n, 10.0, why, sizeof(why));
 *	medha_coll_close(c);
 *
 * One thread at a time per endpoint.
 */
#ifndef MEDHA_COLL_H
#define MEDHA_COLL_H

#include "medha.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define MEDHA_COLL_MAX_PEERS 4096
/* bytes in one message at most */
#define MEDHA_COLL_MAX_MSG ((size_t)1 << 30)
/* a message goes in pieces of this many bytes at most (the last
   shorter), each with its own header, number and MAC: a connection that
   sends a larger frame is closed at its length, before any of it is
   buffered, so a stranger without the secret costs a piece at most
   (issue 39) */
#define MEDHA_COLL_PIECE ((size_t)1 << 20)
/* messages waiting to be asked for, at most, and their bytes (beyond
   the first: one message of any size may wait); past either the table
   is emptied and the receive fails, so that a flood costs one batch,
   not the worker. Frames of a later peer table than the endpoint's,
   which cannot be checked until it comes, wait in a list of their own
   under the same two bounds; past them the frame is dropped */
#define MEDHA_COLL_MAX_WAITING 4096
#define MEDHA_COLL_MAX_WAITING_BYTES ((size_t)64 << 20)

/* A tag from a batch sequence number, a layer and a kind (< 256). */
#define MEDHA_COLL_TAG(bseq, layer, kind)                      \
	(((uint64_t)(bseq) << 24) | ((uint64_t)(layer) & 0xffff) << 8 | \
	    ((uint64_t)(kind) & 0xff))

struct medha_coll;

/*
 * Listen at url (ipc://PATH, tcp://HOST:PORT; port 0 picks a free one,
 * and medha_coll_url() then says which). Returns 0, MEDHA_EINVAL,
 * MEDHA_EIO (cannot listen) or MEDHA_ENOMEM, with why.
 */
int medha_coll_open(struct medha_coll **c, const char *url, char *why,
    size_t whylen);
void medha_coll_close(struct medha_coll *c);

/* The address peers dial (url as given, or with the port picked). */
const char *medha_coll_url(const struct medha_coll *c);

/*
 * The peer table of generation gen: this endpoint is rank of n, and
 * urls[i] is rank i's address (urls[rank] is not dialled). A new
 * generation drops the old dialers and every message waiting from an
 * older one. Returns 0, MEDHA_EINVAL or MEDHA_ENOMEM, with why.
 */
int medha_coll_peers(struct medha_coll *c, uint64_t gen, int rank, int n,
    const char *const *urls, char *why, size_t whylen);

/*
 * A flag (the caller's, e.g. set by a signal handler) that ends every
 * wait of c within a fifth of a second once non-zero: the call then
 * returns MEDHA_EPEER ("stopping").
 */
void medha_coll_stop_on(struct medha_coll *c, volatile sig_atomic_t *stop);

/*
 * A second flag, set while the batch being run was made void (a worker
 * of the replica lost), cleared by its owner before the next: it ends
 * every wait of c as the stop flag does, the call then returning
 * MEDHA_EPEER ("the batch was made void"). NULL: none.
 */
void medha_coll_drop_on(struct medha_coll *c, volatile sig_atomic_t *drop);

/* The generation, rank and size set by medha_coll_peers (0, -1, 0 before). */
uint64_t medha_coll_gen(const struct medha_coll *c);
int medha_coll_rank(const struct medha_coll *c);
int medha_coll_size(const struct medha_coll *c);

/*
 * Send len bytes of buf to rank dst under tag, waiting at most timeout
 * seconds for the peer to take it. Returns 0, MEDHA_EINVAL (a bad rank),
 * MEDHA_ETIMEOUT, MEDHA_EPEER (stopping, or the peer went away) or
 * MEDHA_ENOMEM, with why.
 */
int medha_coll_send(struct medha_coll *c, int dst, uint64_t tag,
    const void *buf, size_t len, double timeout, char *why, size_t whylen);

/*
 * Receive exactly len bytes from rank src under tag into buf, waiting at
 * most timeout seconds. A message of another length under that tag is
 * MEDHA_EFORMAT. Returns 0, MEDHA_EINVAL, MEDHA_ETIMEOUT, MEDHA_EFORMAT,
 * MEDHA_EPEER (stopping, or src went away with nothing more sent) or
 * MEDHA_ENOSPACE (too many messages waiting), with why.
 */
int medha_coll_recv(struct medha_coll *c, int src, uint64_t tag, void *buf,
    size_t len, double timeout, char *why, size_t whylen);

/*
 * Among the n ranks of group (this endpoint's among them, the same list
 * in the same order on every member): x (count floats) becomes the sum
 * of every member's x, added in the group's order. n = 1 is a no-op.
 */
int medha_coll_all_reduce(struct medha_coll *c, const int *group, int n,
    uint64_t tag, float *x, size_t count, double timeout, char *why,
    size_t whylen);

/*
 * Among the n ranks of group: all (n * len bytes) gets member i's mine
 * at all + i * len, this endpoint's own included.
 */
int medha_coll_all_gather(struct medha_coll *c, const int *group, int n,
    uint64_t tag, const void *mine, size_t len, void *all, double timeout,
    char *why, size_t whylen);

#endif
