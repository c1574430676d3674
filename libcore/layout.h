/*
 * layout.h: a replica's workers as a grid of tp x spp x kvp (TP ranks
 * within a pipeline stage, SPP stages, KVP groups) and one worker's
 * place in it. A worker's rank is rank_tp + tp * (rank_spp + spp *
 * rank_kvp) (medha-proto(7)): the TP ranks of a stage are neighbours,
 * then the stages of a KVP group, then the groups.
 *
 *	struct medha_layout l;
 *	if (medha_layout_init(&l, 2, 2, 2, 5) != 0) ...;
 *	(l.rt 1, l.rs 0, l.rg 1; the stage after: medha_layout_rank(&l,
 *	l.rt, l.rs + 1, l.rg) = 7)
 */
#ifndef MEDHA_LAYOUT_H
#define MEDHA_LAYOUT_H

#include "medha.h"

struct medha_layout {
	int tp, spp, kvp; /* the grid, each at least 1 */
	int rank;         /* this worker's, in [0, tp * spp * kvp) */
	int rt, rs, rg;   /* its TP rank, SPP stage and KVP group */
};

/* Workers in the grid. */
static inline int
medha_layout_size(const struct medha_layout *l)
{
	return l->tp * l->spp * l->kvp;
}

/* The rank of the worker at TP rank rt, stage rs, group rg of l's grid. */
static inline int
medha_layout_rank(const struct medha_layout *l, int rt, int rs, int rg)
{
	return rt + l->tp * (rs + l->spp * rg);
}

/*
 * *l: the grid tp x spp x kvp and the place of rank in it. 0, or
 * MEDHA_EINVAL (l unchanged) when a size is below 1 or rank is not in
 * the grid.
 */
static inline int
medha_layout_init(struct medha_layout *l, int tp, int spp, int kvp, int rank)
{
	if (tp < 1 || spp < 1 || kvp < 1 || rank < 0 ||
	    rank >= tp * spp * kvp)
		return MEDHA_EINVAL;
	*l = (struct medha_layout){tp, spp, kvp, rank, rank % tp,
	    rank / tp % spp, rank / (tp * spp)};
	return 0;
}

#endif
