/*
 * cpu_mm.c: the matrix product of the CPU backend: y (n, rows) = x (n,
 * k) times W transposed, W in its stored type, x in the form cpu_ops.c
 * rounds it to for that type.
 *
 * A product is split into tasks of a few dozen to MM_ROWS_MAX weight
 * rows (about four tasks per thread, so that each thread streams long
 * runs of weights and the hardware prefetchers keep up; software
 * prefetches run PF_AHEAD bytes ahead as well). A task walks its rows
 * against the tokens in blocks of MM_TOKENS tokens, so that the
 * activations stay in cache, with register tiles of 4 rows by 4, 2 or 1
 * tokens (or, for one token, one row at a time where long rows stream
 * better). Every (row, token) dot product does the same operations in
 * the same order whatever tile it falls in: results never depend on the
 * batch or the threads.
 *
 * Two kinds of dot product:
 *  - integer (Q8_0, Q4_0, Q4_1 weights with Q8 activations): a block's
 *    dot is eight int32 lanes of four byte products each (VNNI vpdpbusd
 *    where the compiler targets it, AVX2 maddubs otherwise, or scalar),
 *    converted and accumulated as acc = fma(dw * dx, lanes, acc); the
 *    result is the horizontal sum (plus, for Q4_1, the fma-accumulated
 *    sum of m * s): the operations of ggml's x86 vec_dot kernels;
 *  - packed integer (the same weights, and the K-quants, Q5_0, Q5_1,
 *    IQ4_NL and IQ4_XS in cpu_mm_packk.c's layout, where the build has
 *    AVX512-VNNI,
 *    or AVX2 with FMA and F16C, outside reference and llama.cpp modes:
 *    medha_pack): eight rows interleaved four bytes at a time, so one
 *    vpdpbusd (AVX2: vpmaddubsw) makes four products for each of eight
 *    rows and a block's dot is summed exactly in int32 before one
 *    conversion, acc = fma(dw * dx, (float)sum, acc) per block; a third
 *    of the vector work of the lane-wise kernel, which converts and
 *    scales eight lanes per block and pair. The sums being exact, both
 *    instruction sets give the same bits;
 *  - float (everything else, all weights in reference mode, and those
 *    of the packed kernel's types that have no pack): F32,
 *    F16 and BF16 rows are converted as they are loaded, other types are
 *    dequantized a tile at a time with medha_dequant_row(); one 16-wide
 *    (AVX2: 8-wide) fma accumulator per pair, then its horizontal sum.
 *
 * This file splits a product into tasks and runs them; the three kinds
 * of dot product are cpu_mm_q8.c, cpu_mm_pack.c and cpu_mm_f.c, and
 * what the four files share is in cpu_mm_impl.h.
 */
#include "cpu/cpu_mm_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MM_ROWS_MIN 16  /* weight rows per task, at least */
#define MM_ROWS_MAX 256 /* and at most */
#define MM_TOKENS 64    /* tokens per cache block of a task */

/* ---- the product: tasks of MM_ROWS rows over every job ---- */

/*
 * The activations' form a job multiplies: medha_act_form's, but the
 * types only the packed kernel of cpu_mm_packk.c multiplies in integers
 * take the float path where the weight has no pack.
 */
static int
mm_form(const struct medha_mm *mm, int ref)
{
	int form = medha_act_form(mm->w->type, ref);

	if (form == MEDHA_ACT_Q8 && mm->pk == NULL &&
	    mm_pk_type(mm->w->type))
		return 0;
	return form;
}

struct mm_run {
	struct medha_act *a;
	const struct medha_mm *mm;
	int nmm;
	int ref;
	int first[8]; /* first task of each job, and the total at [nmm] */
	int rows[8];  /* rows per task of each job */
};

static void
mm_task(void *arg, int i, int thread)
{
	struct mm_run *m = arg;
	const struct medha_act *a = m->a;
	const struct medha_mm *job;
	float *scr = a->scratch + a->scratch_per * (size_t)thread;
	int j = 0, rows, r0, r1, tb0, tb1, form;

	while (i >= m->first[j + 1])
		j++;
	job = &m->mm[j];
	rows = (int)job->w->ne[1];
	r0 = (i - m->first[j]) * m->rows[j];
	r1 = r0 + m->rows[j] < rows ? r0 + m->rows[j] : rows;
	form = mm_form(job, m->ref);
	for (tb0 = 0; tb0 < a->n; tb0 = tb1) {
		tb1 = tb0 + MM_TOKENS < a->n ? tb0 + MM_TOKENS : a->n;
#ifdef PACK8
		if (job->pk != NULL && form == MEDHA_ACT_Q8) {
			if (mm_pk_type(job->pk->type))
				mm_pk_task(a, job->pk, r0, r1, job->y, rows,
				    tb0, tb1);
			else
				mm_p8_task(a, job->pk, r0, r1, job->y, rows,
				    tb0, tb1);
			continue;
		}
#endif
		if (form == MEDHA_ACT_Q8)
			mm_q8_task(a, job->w, r0, r1, job->y, rows, tb0, tb1);
		else
			mm_f_task(a, job->w, form, m->ref, r0, r1, job->y, rows,
			    tb0, tb1, scr);
	}
}

int
medha_mm_forms(const struct medha_mm *mm, int nmm, int ref)
{
	int j, need = 0;

	for (j = 0; j < nmm; j++)
		need |= mm_form(&mm[j], ref);
	return need;
}

int
medha_mm_run(struct medha_threadpool *tp, struct medha_act *a,
    const struct medha_mm *mm, int nmm, int ref)
{
	struct mm_run run;
	int j, need = 0, form, nt;

	if (nmm < 1 || nmm > 7)
		return MEDHA_EINVAL;
	for (j = 0; j < nmm; j++) {
		if (mm[j].w->ne[0] != a->k ||
		    medha_ggml_row_bytes(mm[j].w->type, a->k) == 0)
			return MEDHA_EINVAL;
		form = mm_form(&mm[j], ref);
		if (form == 0 && mm[j].w->type != MEDHA_GGML_F32 &&
		    medha_ggml_block_elems(mm[j].w->type) == 0)
			return MEDHA_EUNSUP;
		need |= form & ~a->have;
	}
	medha_act_prepare(tp, a, need);
	run.a = a;
	run.mm = mm;
	run.nmm = nmm;
	run.ref = ref;
	run.first[0] = 0;
	nt = tp != NULL ? medha_threadpool_size(tp) : 1;
	for (j = 0; j < nmm; j++) {
		int64_t rows = mm[j].w->ne[1], per = rows / (4 * nt);
		per = (per + MM_ROWS_MIN - 1) / MM_ROWS_MIN * MM_ROWS_MIN;
		per = per < MM_ROWS_MIN ? MM_ROWS_MIN
		    : per > MM_ROWS_MAX ? MM_ROWS_MAX
		                        : per;
		run.rows[j] = (int)per;
		run.first[j + 1] = run.first[j] + (int)((rows + per - 1) / per);
	}
	if (tp != NULL)
		medha_threadpool_run(tp, run.first[nmm], mm_task, &run);
	else
		for (j = 0; j < run.first[nmm]; j++)
			mm_task(&run, j, 0);
	return 0;
}

int
medha_cpu_matmul(struct medha_threadpool *tp, const struct medha_tensor *w,
    const float *x, int n, float *y, int ref)
{
	struct medha_act a;
	struct medha_pack pk;
	struct medha_mm mm = {w, y, NULL};
	int rc;

	memset(&a, 0, sizeof(a));
	if (n < 1 || w->ne[0] < 1 || w->ne[0] > INT32_MAX)
		return MEDHA_EINVAL;
	if (!ref && (rc = medha_pack_make(&pk, w)) != MEDHA_EUNSUP) {
		if (rc != 0)
			return rc;
		mm.pk = &pk;
	}
	if ((rc = medha_act_set(&a, x, n, (int)w->ne[0],
	         tp != NULL ? medha_threadpool_size(tp) : 1)) == 0)
		rc = medha_mm_run(tp, &a, &mm, 1, ref);
	medha_act_free(&a);
	if (mm.pk != NULL)
		medha_pack_free(&pk);
	return rc;
}

/*
 * The rate of the products the forward pass runs, measured: the first
 * rows of w (at most 4M weights: a layer's share of the caches, as in a
 * prefill the weights are reused by every token of a chunk) times n
 * made-up activations, repacked as the backend repacks it, the
 * activations' Q8 form made anew each time (as each product group of a
 * forward pass makes it), best of three.
 */
int
medha_cpu_mm_rate(const struct medha_tensor *w, int n, int threads,
    double *flops)
{
	struct medha_tensor v = *w;
	struct medha_threadpool *tp = NULL;
	struct medha_act a;
	struct medha_pack pk;
	struct medha_mm mm = {&v, NULL, NULL};
	float *x = NULL;
	double best = 1e30;
	int64_t rows;
	int rc;

	*flops = 0;
	memset(&a, 0, sizeof(a));
	if (n < 1 || w->n_dims != 2 || w->ne[0] < 1 || w->ne[0] > INT32_MAX ||
	    w->ne[1] < 1 || w->data == NULL)
		return MEDHA_EINVAL;
	if (medha_ggml_row_bytes(w->type, w->ne[0]) == 0)
		return MEDHA_EUNSUP; /* a type (or row length) it has not */
	rows = ((int64_t)1 << 22) / w->ne[0];
	rows = rows < 8 ? 8 : rows / 8 * 8;
	if (rows < v.ne[1])
		v.ne[1] = rows;
	v.nbytes = medha_ggml_row_bytes(v.type, v.ne[0]) * (size_t)v.ne[1];
	if ((rc = medha_pack_make(&pk, &v)) == 0)
		mm.pk = &pk;
	else if (rc != MEDHA_EUNSUP)
		return rc;
	x = medha_reallocarray(NULL, (size_t)n * (size_t)v.ne[0], sizeof(*x));
	mm.y = medha_reallocarray(NULL, (size_t)n * (size_t)v.ne[1],
	    sizeof(float));
	if (x == NULL || mm.y == NULL ||
	    (threads > 1 && medha_threadpool_init(&tp, threads) != 0)) {
		rc = MEDHA_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < (size_t)n * (size_t)v.ne[0]; i++)
		x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
	for (int r = 0; r < 4; r++) { /* the first one warms up */
		double t0 = medha_now();
		if ((rc = medha_act_set(&a, x, n, (int)v.ne[0],
		         tp != NULL ? medha_threadpool_size(tp) : 1)) != 0 ||
		    (rc = medha_mm_run(tp, &a, &mm, 1, 0)) != 0)
			goto out;
		t0 = medha_now() - t0;
		if (r > 0 && t0 < best)
			best = t0;
	}
	*flops = 2.0 * n * (double)v.ne[0] * (double)v.ne[1] / best;
out:
	medha_act_free(&a);
	medha_threadpool_free(tp);
	free(x);
	free(mm.y);
	if (mm.pk != NULL)
		medha_pack_free(&pk);
	return rc;
}
