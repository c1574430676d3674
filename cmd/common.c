/*
 * common.c: the command-line helpers every medha program links (see
 * common.h): one copy of what medha-prof, -router, -sched, -trace and
 * -worker each carried their own of: flag numbers that exit 2, -h and
 * usage printing, output files ("-" for stdout, ".zst" compressed, the
 * close of stdout checked), die(), and a few small utilities.
 */
#include "common.h"

#include "engine/backend.h"
#include "io/trace.h"
#include "net/auth.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

/* ---- exits ---- */

/* medha_log of an error from a va_list (medha_log takes none) */
static void
log_error(const char *fmt, va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	medha_log(MEDHA_LOG_ERROR, "%s", msg);
}

void
die(int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_error(fmt, ap);
	va_end(ap);
	exit(status);
}

void
log_server(int verbose)
{
	medha_log_stamp = verbose >= 2 ? MEDHA_STAMP_MONO : MEDHA_STAMP_WALL;
	medha_log_level = MEDHA_LOG_INFO + verbose;
}

/* ---- flag numbers ---- */

int64_t
flag_i64(const char *flag, const char *arg, int64_t lo, int64_t hi)
{
	int64_t v;

	if (medha_flag_i64(flag, arg, lo, hi, &v) != 0)
		exit(2);
	return v;
}

double
flag_f64(const char *flag, const char *arg, double lo, double hi, int lo_open)
{
	double v;

	if (medha_flag_f64(flag, arg, lo, hi, lo_open, &v) != 0)
		exit(2);
	return v;
}

/* ---- -h and usage ---- */

void
help_exit(const char *synopsis, const struct medha_help *lines, size_t n)
{
	fputs(synopsis, stdout);
	exit(medha_help_print(lines, n));
}

void
usage_exit(const char *synopsis)
{
	fputs(synopsis, stderr);
	exit(2);
}

void
usage_fail(const char *synopsis, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_error(fmt, ap);
	va_end(ap);
	usage_exit(synopsis);
}

/* ---- output files ---- */

FILE *
out_open(const char *path, struct medha_writer **w)
{
	FILE *f = stdout;
	int rc;

	if (path != NULL && strcmp(path, "-") != 0 &&
	    (f = fopen(path, "w")) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (w == NULL)
		return f;
	rc = medha_writer_open(w, f,
	    path != NULL && f != stdout && medha_path_is_zst(path));
	if (rc != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s", medha_strerror(rc));
		if (f != stdout)
			fclose(f);
		return NULL;
	}
	return f;
}

int
out_finish(FILE *f, struct medha_writer *w)
{
	int err = 0;

	if (w != NULL && medha_writer_close(w) != 0)
		err = errno != 0 ? errno : EIO;
	if (f != stdout && fclose(f) != 0 && err == 0)
		err = errno != 0 ? errno : EIO;
	errno = err;
	return err != 0 ? -1 : 0;
}

int
out_close(const char *path, FILE *f, struct medha_writer *w)
{
	if (out_finish(f, w) != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: write error: %s",
		    f != stdout && path != NULL ? path : "stdout",
		    strerror(errno));
		return 1;
	}
	return 0;
}

int
stdout_close(int status)
{
	int bad = ferror(stdout);

	errno = 0;
	if (fclose(stdout) != 0)
		bad = 1;
	if (bad && status == 0) {
		medha_log(MEDHA_LOG_ERROR, "stdout: %s",
		    errno != 0 ? strerror(errno) : "write error");
		return 1;
	}
	return status;
}

/* ---- a server's stop ---- */

volatile sig_atomic_t stop_requested;

static void
on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

void
catch_stop(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* ---- small utilities ---- */

void
progress(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "\r%s: ", medha_progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

int
online_cpus(int max)
{
	long nc = sysconf(_SC_NPROCESSORS_ONLN);

	return nc > 0 && nc < max ? (int)nc : 1;
}

uint64_t
splitmix64(uint64_t *x)
{
	return medha_mix64(*x += 0x9e3779b97f4a7c15ULL);
}

/*
 * The whole trace at path (NULL or "-": stdin), prompt texts dropped,
 * ids and prefixes kept (each medha_reqspec_clear'd by the caller);
 * exits 1 with the line at fault on bad input.
 */
struct medha_reqspec *
read_trace_all(const char *path, size_t *np)
{
	FILE *f = stdin;
	struct medha_trace_in *t;
	struct medha_reqspec *v = NULL, rs;
	size_t n = 0, cap = 0;
	int rc;

	if (path != NULL && strcmp(path, "-") != 0 &&
	    (f = fopen(path, "rb")) == NULL)
		die(1, "%s: %s", path, strerror(errno));
	errno = 0;
	if ((rc = medha_trace_open(&t, f)) != 0)
		die(1, "%s: %s", path != NULL ? path : "stdin",
		    rc == MEDHA_EIO && errno != 0 ? strerror(errno)
		                                  : medha_strerror(rc));
	memset(&rs, 0, sizeof(rs));
	while ((rc = medha_trace_next(t, &rs)) == 1) {
		if (n == cap) {
			cap = cap ? 2 * cap : 1024;
			if ((v = medha_reallocarray(v, cap, sizeof(*v))) ==
			    NULL)
				die(1, "out of memory");
		}
		v[n++] = rs; /* its ids and prefix move: their keys */
		free(rs.prompt); /* the text is not kept: the counts are */
		v[n - 1].prompt = NULL; /* (it was freed twice: at exit) */
		memset(&rs, 0, sizeof(rs));
	}
	if (rc < 0)
		die(1, "%s: %s", path != NULL ? path : "stdin",
		    medha_trace_error(t));
	medha_reqspec_clear(&rs);
	medha_trace_close(t);
	if (f != stdin)
		fclose(f);
	*np = n;
	return v;
}

const char *
cuda_gpu_name(int device, char *name, size_t len)
{
	/* "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB" */
	static const char *known[] = {"h200", "h100", "a100"};
	struct medha_backend_device d;
	char why[256];

	if (len > 0)
		name[0] = '\0';
	/* the registry's device question: no CUDA header here */
	if (medha_backend_device("cuda", device, &d, why, sizeof(why)) != 0)
		return NULL;
	snprintf(name, len, "%s", d.name);
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcasestr(d.name, known[i]) != NULL)
			return known[i];
	return NULL;
}

static const char *secret_file;

void
link_flag(int opt, const char *arg)
{
	if (opt == OPT_SECRET)
		secret_file = arg;
	else
		medha_auth_insecure(1);
}

void
link_auth(void)
{
	const char *f = secret_file != NULL ? secret_file
	                                    : getenv("MEDHA_SECRET_FILE");
	char why[512];

	if (f != NULL && *f != '\0' && medha_auth_load(f, why, sizeof(why)) != 0)
		die(1, "%s", why);
}
