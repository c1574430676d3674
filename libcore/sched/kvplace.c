/*
 * kvplace.c: KV blocks per KVP group and the placement of each request's
 * KV pieces on groups (kvplace.h). Pure bookkeeping: no clock, no I/O.
 */
#include "sched/kvplace.h"

#include <string.h>

static int64_t
overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1)
{
	int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;

	return hi > lo ? hi - lo : 0;
}

/* a / b rounded up, for a >= 0 and b >= 1, without forming a + b - 1
 * (which overflows for an a near INT64_MAX) */
static int64_t
div_up(int64_t a, int64_t b)
{
	return a / b + (a % b != 0);
}

static int64_t
blocks(const struct medha_kvplace *pl, int64_t tokens)
{
	return tokens > 0 ? div_up(tokens, pl->block_size) : 0;
}

/* Blocks piece i of a request of kv tokens costs, less the `shared`
 * blocks of the prefix index it uses there (medha_kvplace_window). */
static int64_t
piece_cost(const struct medha_kvplace *pl, int i, int64_t kv, int64_t shared)
{
	int64_t b = blocks(pl, medha_kvplace_in_piece(pl, i, 0, kv)) - shared;
	int64_t w;

	if (pl->win_layers == 0 || b <= 0)
		return b;
	w = b < pl->win_blocks ? b : pl->win_blocks;
	return div_up((int64_t)(pl->layers - pl->win_layers) * b +
	        (int64_t)pl->win_layers * w,
	    pl->layers);
}

int
medha_kvplace_window(struct medha_kvplace *pl, int layers, int win_layers,
    int64_t win_tokens)
{
	if (layers < 1 || win_layers < 0 || win_layers > layers ||
	    win_tokens < 1 || win_tokens > INT64_MAX / 2)
		return MEDHA_EINVAL;
	pl->layers = layers;
	pl->win_layers = win_layers;
	pl->win_blocks = div_up(win_tokens, pl->block_size) + 1;
	if (pl->group_tokens == pl->cap_blocks * pl->block_size) {
		/* limited by memory alone: a piece spans the most blocks of
		   positions whose cost a group holds */
		int64_t g = layers - win_layers, lim, b;
		lim = INT64_MAX / pl->block_size / pl->kvp;
		if (g == 0 || pl->cap_blocks > (INT64_MAX - 1) / layers)
			b = lim;
		else {
			b = ((pl->cap_blocks * layers) -
			        (int64_t)win_layers * pl->win_blocks) /
			    g;
			if (b < pl->cap_blocks)
				b = pl->cap_blocks;
			if (b > lim)
				b = lim;
		}
		while (b > pl->cap_blocks &&
		    div_up(g * b +
		            (int64_t)win_layers *
		                (b < pl->win_blocks ? b : pl->win_blocks),
		        layers) > pl->cap_blocks)
			b--;
		pl->group_tokens = b * pl->block_size;
		pl->mem_pieces = 1;
	}
	return 0;
}

/* Pieces of group_tokens that need tokens make: at least 1, and right
 * for any need up to INT64_MAX (callers compare it with kvp as an
 * int64_t before narrowing it). */
static int64_t
pieces(const struct medha_kvplace *pl, int64_t need)
{
	int64_t n = need > 0 ? div_up(need, pl->group_tokens) : 0;

	return n < 1 ? 1 : n;
}

int
medha_kvplace_init(struct medha_kvplace *pl, int kvp, int block_size,
    int64_t cap_blocks, int64_t max_tokens)
{
	memset(pl, 0, sizeof(*pl));
	/* cap_blocks bounded so that the end of every piece, up to
	   kvp x group_tokens, fits an int64_t */
	if (kvp < 1 || kvp > MEDHA_KVP_MAX || block_size < 1 ||
	    cap_blocks < 1 || cap_blocks > INT64_MAX / block_size / kvp ||
	    max_tokens < 0 || (max_tokens > 0 && max_tokens % block_size != 0))
		return MEDHA_EINVAL;
	pl->kvp = kvp;
	pl->block_size = block_size;
	pl->cap_blocks = cap_blocks;
	pl->group_tokens = cap_blocks * block_size;
	if (max_tokens > 0 && max_tokens < pl->group_tokens)
		pl->group_tokens = max_tokens;
	return 0;
}

int64_t
medha_kvplace_in_piece(const struct medha_kvplace *pl, int i, int64_t from,
    int64_t to)
{
	int64_t lo = (int64_t)i * pl->group_tokens;

	return overlap(from, to, lo, lo + pl->group_tokens);
}

int
medha_kvplace_fits_ever(const struct medha_kvplace *pl, int64_t need, char *why,
    size_t whylen)
{
	int64_t first = need < pl->group_tokens ? need : pl->group_tokens;

	if (pieces(pl, need) > pl->kvp &&
	    (pl->mem_pieces ||
	        pl->group_tokens == pl->cap_blocks * pl->block_size)) {
		medha_why(why, whylen, 0,
		    "needs %lld KV blocks, the replica has %d group(s) of %lld",
		    (long long)blocks(pl, need), pl->kvp,
		    (long long)pl->cap_blocks);
		return 0;
	}
	if (pieces(pl, need) > pl->kvp) {
		medha_why(why, whylen, 0,
		    "needs %lld KVP groups of %lld tokens, the replica has %d",
		    (long long)pieces(pl, need), (long long)pl->group_tokens,
		    pl->kvp);
		return 0;
	}
	if (piece_cost(pl, 0, first, 0) > pl->cap_blocks) {
		medha_why(why, whylen, 0,
		    "needs %lld KV blocks on one group, a group has %lld",
		    (long long)piece_cost(pl, 0, first, 0),
		    (long long)pl->cap_blocks);
		return 0;
	}
	return 1;
}

/* Work of piece i still pending once `done` prompt tokens are handed
 * out: it drains evenly from the piece's start to the prompt's end. */
static int64_t
work_left(const struct medha_kvplace *pl, const struct medha_kvlease *l, int i,
    int64_t done)
{
	int64_t lo = (int64_t)i * pl->group_tokens;

	if (lo < l->start)
		lo = l->start;
	if (l->work[i] == 0 || done >= l->prompt)
		return 0;
	if (done <= lo)
		return l->work[i];
	return (int64_t)((double)l->work[i] * (double)(l->prompt - done) /
	    (double)(l->prompt - lo));
}

/* The group for a piece of nb blocks: least pending work, then most free
 * blocks, then the first from pl->next on; -1 if none has room. */
static int
pick_group(const struct medha_kvplace *pl, const int *used, int64_t nb)
{
	int best = -1;

	for (int k = 0; k < pl->kvp; k++) {
		int g = (pl->next + k) % pl->kvp;
		if (used[g] || pl->cap_blocks - pl->res[g] - pl->held[g] < nb)
			continue;
		if (best < 0 || pl->pend[g] < pl->pend[best] ||
		    (pl->pend[g] == pl->pend[best] &&
		        pl->res[g] < pl->res[best]))
			best = g;
	}
	return best;
}

int
medha_kvplace_admit_work(struct medha_kvplace *pl, struct medha_kvlease *l,
    int64_t need, int64_t prompt, const int64_t *work)
{
	return medha_kvplace_admit_pin(pl, l, need, prompt, 0, work, NULL,
	    NULL);
}

int64_t
medha_kvplace_over(const struct medha_kvplace *pl, int g)
{
	int64_t over = pl->res[g] + pl->cached[g] - pl->cap_blocks;

	return over > 0 ? over : 0;
}

int
medha_kvplace_admit_pin(struct medha_kvplace *pl, struct medha_kvlease *l,
    int64_t need, int64_t prompt, int64_t start, const int64_t *work,
    const int64_t *shared, const int *pin)
{
	int64_t np = pieces(pl, need);
	int used[MEDHA_KVP_MAX] = {0};
	int n;

	l->n_groups = 0;
	if (np > pl->kvp) /* before narrowing: (int) of 2^32 + 1 is 1 */
		return MEDHA_ENOSPACE;
	n = (int)np;
	for (int i = 0; i < n; i++) {
		int64_t nb;
		int best;
		l->shared[i] = shared != NULL ? shared[i] : 0;
		nb = piece_cost(pl, i, need, l->shared[i]);
		best = pick_group(pl, used, nb);
		if (pin != NULL && pin[i] >= 0) /* its cached blocks' group */
			best = used[pin[i]] || pl->cap_blocks - pl->res[pin[i]] -
			        pl->held[pin[i]] < nb
			    ? -1
			    : pin[i];
		if (best < 0) {
			for (int j = 0; j < i; j++)
				pl->res[l->groups[j]] -= l->res_blocks[j];
			l->n_groups = 0;
			return MEDHA_ENOSPACE;
		}
		used[best] = 1;
		l->groups[i] = best;
		l->res_blocks[i] = nb;
		l->n_groups = i + 1;
		pl->res[best] += nb;
	}
	l->prompt = prompt;
	l->need = need;
	l->start = start;
	l->done = start;
	/* pending: what is left of each piece's work with nothing handed
	   out yet, which is none of it where no prompt token is left to
	   prefill (prompt 0, or all of it cached): release takes back
	   work_left(), so the group must not be charged more */
	for (int i = 0; i < n; i++) {
		l->work[i] = work != NULL
		    ? work[i]
		    : medha_kvplace_in_piece(pl, i, 0, prompt);
		pl->pend[l->groups[i]] += work_left(pl, l, i, l->done);
	}
	pl->next = (l->groups[n - 1] + 1) % pl->kvp;
	return 0;
}

int
medha_kvplace_admit(struct medha_kvplace *pl, struct medha_kvlease *l,
    int64_t need, int64_t prompt)
{
	return medha_kvplace_admit_work(pl, l, need, prompt, NULL);
}

int
medha_kvplace_grow(struct medha_kvplace *pl, struct medha_kvlease *l,
    int64_t kv, int *group)
{
	int64_t np = pieces(pl, kv);
	int used[MEDHA_KVP_MAX] = {0};

	*group = -1;
	if (np > pl->kvp)
		return MEDHA_ENOSPACE;
	for (int i = 0; i < l->n_groups; i++)
		used[l->groups[i]] = 1;
	for (int i = 0; i < (int)np; i++) {
		int64_t nb = piece_cost(pl, i, kv, 0);
		int g;
		if (i >= l->n_groups) { /* a new piece, output tokens only */
			if ((g = pick_group(pl, used, nb)) < 0)
				return MEDHA_ENOSPACE;
			used[g] = 1;
			l->groups[i] = g;
			l->res_blocks[i] = 0;
			l->shared[i] = 0;
			l->work[i] = 0;
			l->n_groups = i + 1;
			pl->next = (g + 1) % pl->kvp;
		}
		g = l->groups[i];
		nb = piece_cost(pl, i, kv, l->shared[i]) - l->res_blocks[i];
		if (nb <= 0)
			continue;
		if (pl->cap_blocks - pl->res[g] - pl->held[g] < nb) {
			*group = g;
			return MEDHA_ENOSPACE;
		}
		l->res_blocks[i] += nb;
		pl->res[g] += nb;
	}
	if (kv > l->need)
		l->need = kv;
	return 0;
}

int
medha_kvplace_to_index(struct medha_kvplace *pl, struct medha_kvlease *l, int i,
    int apply)
{
	int g = l->groups[i];
	int64_t now, extra;

	if (pl->win_layers == 0) {
		if (l->res_blocks[i] < 1)
			return MEDHA_ENOSPACE;
		now = l->res_blocks[i] - 1;
	} else {
		now = piece_cost(pl, i, l->need, l->shared[i] + 1);
		if (now < 0)
			now = 0;
	}
	extra = 1 - (l->res_blocks[i] - now);
	/* asked before the index counts the block, done after */
	if (!apply)
		return extra > 0 &&
		        pl->cap_blocks - pl->res[g] - pl->cached[g] < extra
		    ? MEDHA_ENOSPACE
		    : 0;
	pl->res[g] -= l->res_blocks[i] - now;
	l->res_blocks[i] = now;
	l->shared[i]++;
	return 0;
}

void
medha_kvplace_release(struct medha_kvplace *pl, struct medha_kvlease *l)
{
	for (int i = 0; i < l->n_groups; i++) {
		pl->res[l->groups[i]] -= l->res_blocks[i];
		pl->pend[l->groups[i]] -= work_left(pl, l, i, l->done);
	}
	l->n_groups = 0;
}

void
medha_kvplace_prefilled(struct medha_kvplace *pl, struct medha_kvlease *l,
    int64_t from, int64_t to)
{
	MEDHA_ASSERT(from == l->done); /* handed out in order */
	for (int i = 0; i < l->n_groups; i++)
		pl->pend[l->groups[i]] -=
		    work_left(pl, l, i, l->done) - work_left(pl, l, i, to);
	l->done = to;
}

int
medha_kvplace_entered(const struct medha_kvplace *pl,
    const struct medha_kvlease *l, int64_t kv)
{
	int64_t n = pieces(pl, kv);

	return n > l->n_groups ? l->n_groups : (int)n;
}

int
medha_kvplace_check_lease(const struct medha_kvplace *pl,
    const struct medha_kvlease *l, int64_t kv, int64_t *sum, char *why,
    size_t whylen)
{
	if (l->n_groups == 0 && kv > 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%lld KV tokens but no group", (long long)kv);
	for (int i = 0; i < l->n_groups; i++) {
		int64_t used = piece_cost(pl, i, kv, l->shared[i]);
		sum[l->groups[i]] += l->res_blocks[i];
		if (used > l->res_blocks[i])
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "uses %lld blocks of group %d, reserved %lld "
			    "(and %lld cached)",
			    (long long)used, l->groups[i],
			    (long long)l->res_blocks[i],
			    (long long)l->shared[i]);
	}
	/* KV past the last piece lies on no group: no reservation */
	if (kv > 0 && pieces(pl, kv) > l->n_groups)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%lld KV tokens span %lld pieces of %lld tokens, "
		    "reserved %d",
		    (long long)kv, (long long)pieces(pl, kv),
		    (long long)pl->group_tokens, l->n_groups);
	return 0;
}

int
medha_kvplace_check(const struct medha_kvplace *pl, const int64_t *sum,
    char *why, size_t whylen)
{
	for (int g = 0; g < pl->kvp; g++)
		if (sum[g] != pl->res[g] ||
		    pl->res[g] + pl->cached[g] > pl->cap_blocks ||
		    pl->res[g] < 0 || pl->pend[g] < 0 || pl->held[g] < 0 ||
		    pl->held[g] > pl->cached[g])
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "group %d: reserved %lld (leases say %lld), cached "
			    "%lld (%lld held) of %lld blocks, %lld tokens "
			    "pending",
			    g, (long long)pl->res[g], (long long)sum[g],
			    (long long)pl->cached[g], (long long)pl->held[g],
			    (long long)pl->cap_blocks, (long long)pl->pend[g]);
	return 0;
}
