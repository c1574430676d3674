/*
 * report.h: what medha-trace report's table (report.c) and its plot
 * (report_plot.c) share: the classes of requests and their samples.
 */
#ifndef MEDHA_TRACE_REPORT_H
#define MEDHA_TRACE_REPORT_H

#include "medha-trace.h"

enum { CLS_ALL, CLS_SHORT, CLS_LONG, NCLS };
enum { M_TTFT, M_TPOT, M_E2E, NMETRIC };

extern const char *const cls_names[NCLS];
extern const char *const metric_names[NMETRIC];

struct series {
	double *v; /* (n), sorted once reading is done */
	size_t n, cap;
};

struct cls {
	int64_t requests;
	int64_t completed;        /* status "ok" */
	int64_t met;              /* completed within both SLOs */
	int64_t out_tokens;       /* of completed requests */
	double first_arrival;     /* throughput span: first arrival ... */
	double last_finish;       /* ... to last finish */
	struct series m[NMETRIC]; /* s; TPOT only with >= 2 output tokens */
	struct series ttft_norm;  /* TTFT / prefill_alone, where known */
	struct medha_tbt tbt;     /* every gap of the records that keep them */
	double tbt_max;           /* s: the longest of those gaps */
	struct series slo[2];     /* ttft_slo, tpot_slo where > 0 (the plot) */
};

/* q-quantile of sorted s, linear between order statistics (numpy's). */
double percentile(const struct series *s, double q);

/*
 * The CDFs of cls drawn by gnuplot(1) into png, with title (or NULL)
 * and the SLOs; 0, or 1 after logging why (no picture left behind).
 */
int report_plot(const char *png, const char *title, const struct cls *cls);

#endif
