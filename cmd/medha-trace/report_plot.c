/*
 * report_plot.c: medha-trace report --plot. gnuplot draws the CDFs of
 * TTFT, TPOT and end-to-end latency, with the SLOs, into a temporary
 * file (the samples pass through files in a temporary directory too);
 * the picture is checked whole and copied to its place with every write
 * checked, as gnuplot says nothing of a failed one.
 */
#include "report.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- plot ---- */

/* One CDF line of a panel: samples of a class and metric. */
struct line {
	const char *file; /* name in the temporary directory */
	int cls, metric;
	size_t n; /* samples written */
};

/* Writes "x cdf" lines; a log axis cannot show x <= 0. */
static int
write_cdf(const char *path, const struct series *s, double scale, int logx,
    size_t *written)
{
	FILE *f;
	size_t i;

	*written = 0;
	if ((f = fopen(path, "w")) == NULL)
		return -1;
	for (i = 0; i < s->n; i++)
		if (!logx || s->v[i] > 0) {
			fprintf(f, "%.9g %.9g\n", scale * s->v[i],
			    (double)(i + 1) / s->n);
			(*written)++;
		}
	return fclose(f) != 0 ? -1 : 0;
}

/*
 * A PNG that gnuplot says it wrote, checked (it ends with the IEND
 * chunk: gnuplot exits 0 on a failed write) and copied to dst with every
 * write checked. 0, or 1 after logging why.
 */
static int
png_copy(const char *src, const char *dst)
{
	static const unsigned char iend[8] = {'I', 'E', 'N', 'D', 0xae, 0x42,
	    0x60, 0x82};
	unsigned char buf[65536];
	FILE *in, *out;
	size_t n;
	long size;
	int err = 0;

	if ((in = fopen(src, "rb")) == NULL ||
	    fseek(in, -(long)sizeof(iend), SEEK_END) != 0 ||
	    (size = ftell(in)) < 0 ||
	    fread(buf, 1, sizeof(iend), in) != sizeof(iend) ||
	    memcmp(buf, iend, sizeof(iend)) != 0 || fseek(in, 0, SEEK_SET)) {
		medha_log(MEDHA_LOG_ERROR,
		    "gnuplot did not write the whole picture (a full disk?); "
		    "%s not written",
		    dst);
		if (in != NULL)
			fclose(in);
		return 1;
	}
	if ((out = fopen(dst, "wb")) == NULL)
		err = errno;
	while (err == 0 && (n = fread(buf, 1, sizeof(buf), in)) > 0)
		if (fwrite(buf, 1, n, out) != n)
			err = errno != 0 ? errno : EIO;
	if (err == 0 && ferror(in))
		err = EIO;
	if (out != NULL && fclose(out) != 0 && err == 0)
		err = errno != 0 ? errno : EIO;
	fclose(in);
	if (err != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: write error: %s", dst,
		    strerror(err));
		return 1;
	}
	return 0;
}

/* One colour a class in every panel: all, short, long. */
static const char *cls_colour[NCLS] = {"#555555", "#1f77b4", "#d62728"};

/* The SLOs of line l's class (slo: 0 TTFT, 1 TPOT, -1 none), or NULL. */
static const struct series *
slo_of(const struct cls *cls, const struct line *l, int slo)
{
	return slo < 0 ? NULL : &cls[l->cls].slo[slo];
}

/* Each curve's SLO, its median where requests differ: a dashed line of
 * its colour (n: the samples of each line, none drawn for none). */
static void
slo_arrows(FILE *gp, const struct cls *cls, const struct line *lines,
    const size_t *n, int slo, double scale)
{
	fprintf(gp, "unset arrow\n");
	for (int j = 0; j < 2 && lines[j].file != NULL; j++) {
		const struct series *so = slo_of(cls, &lines[j], slo);
		if (n[j] == 0 || so == NULL || so->n == 0)
			continue;
		fprintf(gp,
		    "set arrow from %.9g, graph 0 to %.9g, graph 1 nohead "
		    "dt 2 lw 2 lc rgb '%s'\n",
		    scale * percentile(so, 0.5), scale * percentile(so, 0.5),
		    cls_colour[lines[j].cls]);
	}
}

int
report_plot(const char *png, const char *title, const struct cls *cls)
{
	static const struct {
		const char *xlabel;
		int logx;
		double scale;
		int slo; /* the SLO drawn: 0 TTFT, 1 TPOT, -1 none */
		struct line lines[2];
	} panels[] = {
	    {"TTFT of short requests (s)", 1, 1, 0,
	        {{"ttft-short", CLS_SHORT, M_TTFT, 0}, {NULL, 0, 0, 0}}},
	    {"TTFT of long requests (s)", 1, 1, 0,
	        {{"ttft-long", CLS_LONG, M_TTFT, 0}, {NULL, 0, 0, 0}}},
	    {"TPOT (ms)", 1, 1e3, 1,
	        {{"tpot-short", CLS_SHORT, M_TPOT, 0},
	            {"tpot-long", CLS_LONG, M_TPOT, 0}}},
	    {"end-to-end latency (s)", 1, 1, -1,
	        {{"e2e-short", CLS_SHORT, M_E2E, 0},
	            {"e2e-long", CLS_LONG, M_E2E, 0}}},
	};
	const size_t np = sizeof(panels) / sizeof(panels[0]);
	char dir[4096], path[4200], pic[4200];
	struct stat sb;
	const char *tmp;
	size_t n[4][2] = {{0}};
	void (*oldpipe)(int);
	size_t i, j;
	FILE *gp;
	int st, drawn, status = 1;

	if ((gp = fopen(png, "w")) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", png, strerror(errno));
		return 1;
	}
	fclose(gp);
	/* removed on failure only if a file of ours (never /dev/full) */
	if (stat(png, &sb) != 0 || !S_ISREG(sb.st_mode))
		sb.st_mode = 0;
	if ((tmp = getenv("TMPDIR")) == NULL || *tmp == '\0')
		tmp = "/tmp";
	snprintf(dir, sizeof(dir), "%s/medha-trace.XXXXXX", tmp);
	if (mkdtemp(dir) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", dir, strerror(errno));
		if (S_ISREG(sb.st_mode))
			unlink(png);
		return 1;
	}
	snprintf(pic, sizeof(pic), "%s/plot.png", dir);
	for (i = 0; i < np; i++)
		for (j = 0; j < 2 && panels[i].lines[j].file != NULL; j++) {
			const struct line *l = &panels[i].lines[j];

			snprintf(path, sizeof(path), "%s/%s", dir, l->file);
			if (write_cdf(path, &cls[l->cls].m[l->metric],
			        panels[i].scale, panels[i].logx,
			        &n[i][j]) != 0) {
				medha_log(MEDHA_LOG_ERROR, "%s: %s", path,
				    strerror(errno));
				goto clean;
			}
		}

	oldpipe = signal(SIGPIPE, SIG_IGN);
	if ((gp = popen("exec gnuplot >/dev/null", "w")) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "gnuplot: %s", strerror(errno));
		signal(SIGPIPE, oldpipe);
		goto clean;
	}
	fprintf(gp,
	    "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
	    "{ set terminal pngcairo size 1200,900 } "
	    "else { set terminal png size 1200,900 }\n"
	    "set output ");
	medha_gp_quote(gp, pic);
	/* the key below each panel, where it covers no curve */
	fprintf(gp, "\nset multiplot layout 2,2 title ");
	{
		char t[1024];
		snprintf(t, sizeof(t), "%s%s%lld requests, %lld completed",
		    title != NULL ? title : "", title != NULL ? ": " : "",
		    (long long)cls[CLS_ALL].requests,
		    (long long)cls[CLS_ALL].completed);
		medha_gp_quote(gp, t);
	}
	fprintf(gp,
	    " font ',14'\n"
	    "set grid\nset key below horizontal\nset ylabel 'CDF'\n"
	    "set yrange [0:1.02]\nset offsets 0, graph 0.05, 0, 0\n");
	for (i = 0; i < np; i++) {
		fprintf(gp, "set xlabel '%s'\n%s logscale x\n",
		    panels[i].xlabel, panels[i].logx ? "set" : "unset");
		drawn = 0;
		slo_arrows(gp, cls, panels[i].lines, n[i], panels[i].slo,
		    panels[i].scale);
		for (j = 0; j < 2 && panels[i].lines[j].file != NULL; j++) {
			const struct series *so =
			    slo_of(cls, &panels[i].lines[j], panels[i].slo);
			if (n[i][j] == 0)
				continue;
			fprintf(gp, "%s", drawn++ == 0 ? "plot " : ", ");
			snprintf(path, sizeof(path), "%s/%s", dir,
			    panels[i].lines[j].file);
			medha_gp_quote(gp, path);
			fprintf(gp,
			    " using 1:2 with steps lw 2 lc rgb '%s' "
			    "title '%s (n=%zu)",
			    cls_colour[panels[i].lines[j].cls],
			    cls_names[panels[i].lines[j].cls], n[i][j]);
			if (so != NULL && so->n > 0)
				fprintf(gp, ", %sSLO %.3g, dashed",
				    so->v[0] != so->v[so->n - 1] ? "median "
				                                 : "",
				    panels[i].scale * percentile(so, 0.5));
			fprintf(gp, "'");
		}
		if (drawn == 0)
			fprintf(gp,
			    "\nset label 1 'no data' at graph 0.5,0.5 "
			    "center\nunset logscale x\n"
			    "set xrange [0:1]\nplot -1 notitle\n"
			    "unset label 1\nset autoscale x");
		fprintf(gp, "\n");
	}
	fprintf(gp, "unset multiplot\nset output\n");
	st = pclose(gp);
	signal(SIGPIPE, oldpipe);
	if (st == -1)
		medha_log(MEDHA_LOG_ERROR, "gnuplot: %s", strerror(errno));
	else if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
		medha_log(MEDHA_LOG_ERROR,
		    "gnuplot: not found; "
		    "install gnuplot to use --plot");
	else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		medha_log(MEDHA_LOG_ERROR, "gnuplot failed; %s not written",
		    png);
	else
		status = png_copy(pic, png);
clean:
	unlink(pic);
	for (i = 0; i < np; i++)
		for (j = 0; j < 2 && panels[i].lines[j].file != NULL; j++) {
			snprintf(path, sizeof(path), "%s/%s", dir,
			    panels[i].lines[j].file);
			unlink(path);
		}
	rmdir(dir);
	if (status != 0 && S_ISREG(sb.st_mode))
		unlink(png); /* no half-drawn picture */
	return status;
}

