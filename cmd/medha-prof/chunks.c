/*
 * chunks.c: medha-prof --chunks, the paper's chunk-size study on a real
 * backend. One prompt is prefilled in chunks of each size from 32 up,
 * every chunk timed as a whole batch (every layer; the last chunk's
 * logits) at the context it really has; prompts shorter than the longest
 * are its prefixes. Printed: the batch time of a chunk against its size
 * and context, and each prompt's prefill time and its overhead against
 * the largest chunk; drawn with gnuplot(1) when asked.
 */
#include "medha-prof.h"

#include "sched/batchcost.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#define NCH 9 /* 32 .. 8192 */
#define NPR 8 /* prompt lengths: the longest, halved down to 1024 */
#define NCX 4 /* contexts shown for the batch time */

struct study {
	int64_t prompt;
	int nch, npr;
	int64_t chunk[NCH];
	int64_t plen[NPR]; /* ascending */
	double *t[NCH];    /* t[c][i]: chunk i of size chunk[c], s */
	double pre[NCH][NPR], pred[NCH][NPR]; /* prefill time; 0: n/a */
	int64_t ctx[NCX];
	double bt[NCH][NCX]; /* batch time at ctx, s */
};

/* The longest chunk not above plen: the baseline of that prompt. */
static int
base_of(const struct study *S, int j)
{
	int c, b = -1;

	for (c = 0; c < S->nch; c++)
		if (S->chunk[c] <= S->plen[j])
			b = c;
	return b;
}

static int
plot(const struct study *S, const char *png, const char *title)
{
	void (*oldpipe)(int);
	FILE *gp;
	int c, j, k, st, n;

	if ((gp = fopen(png, "w")) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", png, strerror(errno));
		return 1;
	}
	fclose(gp);
	oldpipe = signal(SIGPIPE, SIG_IGN);
	if ((gp = popen("exec gnuplot >/dev/null", "w")) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "gnuplot: %s", strerror(errno));
		signal(SIGPIPE, oldpipe);
		unlink(png);
		return 1;
	}
	fprintf(gp, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
	            "{ set terminal pngcairo size 1400,600 } "
	            "else { set terminal png size 1400,600 }\n"
	            "set termoption noenhanced\nset output ");
	medha_gp_quote(gp, png);
	fprintf(gp, "\nset multiplot layout 1,2 title ");
	medha_gp_quote(gp, title);
	fprintf(gp, " font ',13'\nset grid\nset logscale x 2\n"
	            "set xlabel 'chunk size (tokens)'\nset key top right\n"
	            "set ylabel 'prefill time over the largest chunk (%%)'\n"
	            "plot ");
	for (j = 0, n = 0; j < S->npr; j++)
		fprintf(gp, "%s'-' using 1:2 with linespoints lw 2 title "
		            "'prompt %lld'",
		    n++ ? ", " : "", (long long)S->plen[j]);
	fputc('\n', gp);
	for (j = 0; j < S->npr; j++) {
		int b = base_of(S, j);
		for (c = 0; c < S->nch; c++)
			if (S->pre[c][j] > 0)
				fprintf(gp, "%lld %.4f\n", (long long)S->chunk[c],
				    100 * (S->pre[c][j] / S->pre[b][j] - 1));
		fprintf(gp, "e\n");
	}
	fprintf(gp, "set logscale y\nset ylabel 'batch time (ms)'\n"
	            "set key top left\nplot ");
	for (k = 0, n = 0; k < NCX; k++)
		fprintf(gp, "%s'-' using 1:2 with linespoints lw 2 title "
		            "'context %lld'",
		    n++ ? ", " : "", (long long)S->ctx[k]);
	fputc('\n', gp);
	for (k = 0; k < NCX; k++) {
		for (c = 0; c < S->nch; c++)
			if (S->bt[c][k] > 0)
				fprintf(gp, "%lld %.4f\n", (long long)S->chunk[c],
				    1e3 * S->bt[c][k]);
		fprintf(gp, "e\n");
	}
	fprintf(gp, "unset multiplot\nset output\n");
	st = pclose(gp);
	signal(SIGPIPE, oldpipe);
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 127)
			medha_log(MEDHA_LOG_ERROR,
			    "gnuplot: not found; install gnuplot to use "
			    "--plot");
		else
			medha_log(MEDHA_LOG_ERROR,
			    "gnuplot failed; %s not written", png);
		unlink(png);
		return 1;
	}
	return 0;
}

static void
print_study(const struct study *S, const struct prof *P, int predicted)
{
	int c, j, k;

	printf("chunk-size study: %s on the %s backend, %d threads, KV %s; "
	       "one prompt of %lld tokens\n\n",
	    P->name, P->be->info.name, P->threads, P->kv,
	    (long long)S->prompt);
	printf("batch time (ms) of one chunk after a context of\n%6s |",
	    "chunk");
	for (k = 0; k < NCX; k++)
		printf(" %9lld", (long long)S->ctx[k]);
	printf("\n");
	for (c = 0; c < S->nch; c++) {
		printf("%6lld |", (long long)S->chunk[c]);
		for (k = 0; k < NCX; k++)
			if (S->bt[c][k] > 0)
				printf(" %9.2f", 1e3 * S->bt[c][k]);
			else
				printf(" %9s", "-");
		printf("\n");
	}
	printf("\nprefill time (s) and its overhead against the largest "
	       "chunk%s, by prompt length\n%6s |",
	    predicted ? " (measured / predicted)" : "", "chunk");
	for (j = 0; j < S->npr; j++)
		printf(predicted ? " %26lld" : " %16lld", (long long)S->plen[j]);
	printf("\n");
	for (c = 0; c < S->nch; c++) {
		printf("%6lld |", (long long)S->chunk[c]);
		for (j = 0; j < S->npr; j++) {
			int b = base_of(S, j);
			if (S->pre[c][j] <= 0) {
				printf(predicted ? " %26s" : " %16s", "-");
				continue;
			}
			printf(" %7.3f %+7.1f%%", S->pre[c][j],
			    100 * (S->pre[c][j] / S->pre[b][j] - 1));
			if (predicted)
				printf(" /%+7.1f%%",
				    100 * (S->pred[c][j] / S->pred[b][j] - 1));
		}
		printf("\n");
	}
}

int
prof_chunks(struct prof *P, int64_t prompt, const char *png,
    const struct medha_pred *p, char *why, size_t whylen)
{
	const int L = P->be->info.shape.n_layers;
	struct study S;
	struct prof_time t;
	int c, j, k, i, n, rc = 0, total = 0, done = 0;
	char title[512];

	memset(&S, 0, sizeof(S));
	S.prompt = prompt;
	for (int64_t ch = 32; ch <= prompt && ch <= 8192 && S.nch < NCH;
	     ch *= 2)
		S.chunk[S.nch++] = ch;
	if (S.nch < 2)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "a prompt of %lld tokens: at least 64 for two chunk sizes",
		    (long long)prompt);
	/* prompt lengths: the prompt, halved while at least 1024 */
	{
		int64_t v[NPR];
		int m = 0;
		for (int64_t l = prompt; l >= 1024 && m < NPR; l /= 2)
			v[m++] = l;
		if (m == 0)
			v[m++] = prompt;
		for (j = 0; j < m; j++)
			S.plen[j] = v[m - 1 - j];
		S.npr = m;
	}
	for (k = 0; k < NCX; k++)
		S.ctx[k] = prompt * k / NCX / 32 * 32;
	for (c = 0; c < S.nch; c++)
		total += (int)(prompt / S.chunk[c]);
	for (c = 0; c < S.nch; c++) {
		n = (int)(prompt / S.chunk[c]);
		if ((S.t[c] = medha_calloc((size_t)n, sizeof(double))) == NULL) {
			rc = medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
			goto out;
		}
		for (i = 0; i < n; i++, done++) {
			struct prof_item it = {S.chunk[c], i * S.chunk[c],
			    i == n - 1};
			prof_progress(P, "chunks", done, total);
			/* a large chunk is few batches: repeat those */
			if ((rc = prof_time(P, &it, 1, 0, L,
			         S.chunk[c] >= 1024 ? P->reps : 1, &t, why,
			         whylen)) != 0)
				goto out;
			S.t[c][i] = t.total;
		}
	}
	prof_progress(P, "chunks", total, total);
	for (c = 0; c < S.nch; c++) {
		for (j = 0; j < S.npr; j++) {
			if (S.chunk[c] > S.plen[j])
				continue;
			n = (int)(S.plen[j] / S.chunk[c]);
			for (i = 0; i < n; i++) {
				S.pre[c][j] += S.t[c][i];
				if (p != NULL)
					S.pred[c][j] += medha_cost_lone(p,
					    S.chunk[c], i * S.chunk[c])
					                    .latency;
			}
		}
		/* a chunk that starts exactly there (none: "-") */
		for (k = 0; k < NCX; k++) {
			i = (int)(S.ctx[k] / S.chunk[c]);
			if (S.ctx[k] % S.chunk[c] == 0 && i < prompt / S.chunk[c])
				S.bt[c][k] = S.t[c][i];
		}
	}
	print_study(&S, P, p != NULL);
	if (png != NULL) {
		snprintf(title, sizeof(title),
		    "chunked prefill of %s, %s backend, %d threads", P->name,
		    P->be->info.name, P->threads);
		if (plot(&S, png, title) != 0)
			rc = medha_why(why, whylen, MEDHA_EIO,
			    "%s: no plot drawn", png);
		else
			printf("\nplot: %s\n", png);
	}
out:
	for (c = 0; c < NCH; c++)
		free(S.t[c]);
	return rc;
}
