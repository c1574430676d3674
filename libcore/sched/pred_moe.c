/*
 * pred_moe.c: the runtime predictor's routed FFN of a mixture of
 * experts (issue 41) from a profile's moe_ffn rows (pred.h,
 * medha_pred_moe_ffn).
 *
 * A batch of T tokens each choosing k of E experts reads the weights of
 * about G(T) = E (1 - (1 - k / E)^T) experts (medha_moe_experts_touched)
 * and multiplies T k rows. G is concave: it climbs fast at small T and
 * flattens as every expert is read, so a time interpolated linearly in
 * T between two measured batch sizes falls short in between (the curve
 * bends above the chord). Within a segment [T0, T1] the time is taken
 * as a + b G(T) + c T, the experts' weights read and the rows
 * multiplied, and its share of the segment is the mean of the shares
 * of G and of T ((G(T) - G(T0)) / (G(T1) - G(T0)) and (T - T0) /
 * (T1 - T0)) weighted by how much each grows over the segment,
 * (G(T1) - G(T0)) / G(T1) and (T1 - T0) / T1: exact where the weights'
 * and the rows' times are equal at T1, and where G no longer grows
 * (every expert read) linear in T, the rows' time alone. (The shares
 * weighted alike jumped half a segment's step past T0 there: 18% off
 * on times the rows dominate, pred_test's test_moe_ffn.) Below the
 * first point the time scales with G, past the last it is the table's
 * extrapolation.
 */
#include "sched/pred.h"

double
medha_pred_moe_ffn(const struct medha_pred *p, int64_t tokens)
{
	const struct medha_model_config *c = &p->model.c;
	const double T = (double)tokens;
	const double *x, *y;
	double s, g, g0, g1, w, a;
	int n, i;

	if (tokens <= 0 || !(p->moe_share > 0) ||
	    !medha_table_row(p->table, MEDHA_OP_MOE_FFN, &x, &y, &n))
		return 0;
	s = p->moe_share * p->stage_layers; /* the stage's routed layers */
	g = medha_moe_experts_touched(c, T);
	if (T < x[0] || n < 2) {
		g0 = medha_moe_experts_touched(c, x[0]);
		return s * y[0] * (T < x[0] && g0 > 0 ? g / g0 : T / x[0]);
	}
	if (T >= x[n - 1]) {
		medha_table_lookup(p->table, MEDHA_OP_MOE_FFN, T, 0, &w);
		return s * w;
	}
	for (i = 0; i + 2 < n && x[i + 1] <= T; i++)
		;
	g0 = medha_moe_experts_touched(c, x[i]);
	g1 = medha_moe_experts_touched(c, x[i + 1]);
	w = (T - x[i]) / (x[i + 1] - x[i]);
	a = (x[i + 1] - x[i]) / x[i + 1]; /* T's growth, and G's */
	if (g1 - g0 > 1e-9 * g1)
		w = (a * w + (g1 - g0) / g1 * (g - g0) / (g1 - g0)) /
		    (a + (g1 - g0) / g1);
	return s * (y[i] + w * (y[i + 1] - y[i]));
}
