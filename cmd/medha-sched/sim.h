/*
 * sim.h: medha-sched --sim's run (sim.c).
 */
#ifndef MEDHA_SCHED_CMD_SIM_H
#define MEDHA_SCHED_CMD_SIM_H

#include "sched/pred.h"
#include "sched/sched.h"

/*
 * The trace at path (NULL: stdin) through the scheduler of cfg on pred
 * in virtual time: a record per request to out_path (NULL: stdout), a
 * line per batch to blog_path (NULL: none). Returns the exit status
 * (0, or 1 after logging why).
 */
int
sched_sim(const struct medha_sched_config *cfg, const struct medha_pred *pred,
    const char *path, const char *out_path, const char *blog_path);

#endif
