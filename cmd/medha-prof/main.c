/*
 * medha-prof: profiles a backend on a model. By default it measures the
 * operators the runtime predictor composes batch times from (linear
 * layers by token count, attention by chunk and context, decode
 * attention by sequences and context, the output head) and writes a
 * medha-profile(5) table; --check times random mixed batches against
 * that table's predictions; --chunks runs the chunk-size study. Flags
 * and wiring only: measure.c, check.c and chunks.c do the work.
 */
#include "medha-prof.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <unistd.h>

static const char synopsis[] =
    "usage: medha-prof -m MODEL [-hqv] [--backend cpu|cuda] [-o FILE] "
    "[-t THREADS]\n"
    "           [--kv f16|f32|bf16] [--device N] [--reps N] "
    "[--attn-layers N]\n"
    "           [--clock wall|thread]"
    " [--max-tokens N]"
    " [--max-context N] [--decode-total N]\n"
    "           [--check N [--moe] [--seed S] [--predictor FILE]]\n"
    "       medha-prof -m MODEL --chunks [--prompt N] [--plot "
    "FILE.png]\n"
    "           [--predictor FILE] [-t THREADS] [--kv f16|f32|bf16] "
    "[--reps N]\n";

static const struct medha_help help_lines[] = {
    {"-h, --help", "print this help and exit"},
    {"-m, --model MODEL",
        "a GGUF file (cuda: or a shape name, llama3-8b)"},
    {"-o, --output FILE", "write the profile there (default: standard output)"},
    {"-q, --quick", "a few points per operator only (tests)"},
    {"-t, --threads THREADS",
        "threads of the backend (default: online CPUs)"},
    {"-v, --verbose", "more on stderr; --check: one line a batch"},
    {"--backend cpu|cuda", "the backend to profile (cpu)"},
    {"--device N", "cuda: the CUDA device (0)"},
    {"--kv f16|f32|bf16",
        "KV cache type, as the worker's (cpu f32, cuda bf16)"},
    {"--reps N", "runs of each point, the median kept (3)"},
    {"--attn-layers N", "layers run to time attention (0: all, the default)"},
    {"--clock wall|thread",
        "wall (default) or, cpu -t 1, the thread's CPU time"},
    {"--max-tokens N", "largest token count measured (2048)"},
    {"--max-context N", "largest context measured (8192)"},
    {"--decode-total N", "most KV tokens a decode point reads (65536)"},
    {"--check N", "then time N random mixed batches against the profile"},
    {"--moe", "--check: a mixture of experts' routed FFN batches only"},
    {"--seed S", "--check: the batches' seed (1)"},
    {"--predictor FILE", "--check, --chunks: this profile, not a new one"},
    {"--chunks", "the chunk-size study instead of a profile"},
    {"--prompt N", "--chunks: the prompt, a power of two (--max-context)"},
    {"--plot FILE.png", "--chunks: draw it with gnuplot(1)"},
};

enum {
	OPT_BACKEND = 256,
	OPT_KV,
	OPT_REPS,
	OPT_ATTN_LAYERS,
	OPT_MAX_TOKENS,
	OPT_MAX_CONTEXT,
	OPT_DECODE_TOTAL,
	OPT_CHECK,
	OPT_MOE,
	OPT_SEED,
	OPT_PREDICTOR,
	OPT_CHUNKS,
	OPT_PROMPT,
	OPT_PLOT,
	OPT_DEVICE,
	OPT_CLOCK,
};

static const struct option longopts[] = {
    {"help", no_argument, NULL, 'h'},
    {"model", required_argument, NULL, 'm'},
    {"output", required_argument, NULL, 'o'},
    {"quick", no_argument, NULL, 'q'},
    {"threads", required_argument, NULL, 't'},
    {"verbose", no_argument, NULL, 'v'},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"kv", required_argument, NULL, OPT_KV},
    {"reps", required_argument, NULL, OPT_REPS},
    {"attn-layers", required_argument, NULL, OPT_ATTN_LAYERS},
    {"max-tokens", required_argument, NULL, OPT_MAX_TOKENS},
    {"max-context", required_argument, NULL, OPT_MAX_CONTEXT},
    {"decode-total", required_argument, NULL, OPT_DECODE_TOTAL},
    {"check", required_argument, NULL, OPT_CHECK},
    {"moe", no_argument, NULL, OPT_MOE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"predictor", required_argument, NULL, OPT_PREDICTOR},
    {"chunks", no_argument, NULL, OPT_CHUNKS},
    {"prompt", required_argument, NULL, OPT_PROMPT},
    {"plot", required_argument, NULL, OPT_PLOT},
    {"clock", required_argument, NULL, OPT_CLOCK},
    {NULL, 0, NULL, 0},
};

/* The file name without directories and ".gguf", for the comment. */
static void
short_name(const char *path, char *out, size_t len)
{
	const char *b = strrchr(path, '/');
	size_t n;

	b = b != NULL ? b + 1 : path;
	n = strlen(b);
	if (n > 5 && strcmp(b + n - 5, ".gguf") == 0)
		n -= 5;
	if (n >= len)
		n = len - 1;
	memcpy(out, b, n);
	out[n] = '\0';
	/* the comment is key=value words: no spaces */
	for (char *p = out; *p != '\0'; p++)
		if (*p == ' ' || *p == '\t')
			*p = '_';
}

/*
 * The predictor for --check and --chunks: the model's shape, the device
 * (for operators a profile lacks: the cpu measured here, or cuda's GPU
 * from the built-in ones), the table.
 */
static int
load_pred(struct medha_pred *p, const struct prof *P, const char *table,
    char *why, size_t whylen)
{
	struct medha_pred_model m;
	struct medha_gpu g;
	char w2[512];
	int rc;

	if ((rc = medha_model_resolve_why(P->model, &m, w2, sizeof(w2))) != 0)
		return medha_why(why, whylen, rc, "%s: %s", P->model, w2);
	if (strcmp(P->gpu, "cpu") != 0)
		g = *medha_gpu_find(P->gpu);
	else if ((rc = medha_gpu_measure_cpu(&g, P->threads)) != 0)
		return medha_why(why, whylen, rc, "measuring the cpu: %s",
		    medha_strerror(rc));
	m.kv_bytes = strcmp(P->kv, "f32") == 0 ? 4 : 2;
	if ((rc = medha_pred_init(p, &g, &m, 1, 1, 1)) != 0)
		return medha_why(why, whylen, rc, "predictor: %s",
		    medha_strerror(rc));
	if ((rc = medha_pred_load_table(p, table, w2, sizeof(w2))) != 0) {
		medha_pred_free(p);
		return medha_why(why, whylen, rc, "%s: %s", table, w2);
	}
	return 0;
}

/* The command line: what each flag set (its default in parse_args). */
struct args {
	struct prof P;         /* -m -q -t --backend --kv and the points */
	const char *out;       /* -o (NULL: stdout) */
	const char *predictor; /* --predictor: a table measured already */
	const char *png;       /* --plot */
	int64_t check;         /* --check: batches to time (0: none) */
	int moe_only;          /* --moe: the routed FFN batches only */
	int64_t prompt;        /* --prompt (0: from --max-context) */
	uint64_t seed;         /* --seed */
	int chunks;            /* --chunks */
	int verbose;           /* -v, repeated */
	int device_set;        /* --device given */
};

/* The getopt_long loop: fills *a; -h and a bad flag exit here. */
static void
parse_args(struct args *a, int argc, char *argv[])
{
	struct prof *P = &a->P;
	const struct medha_backend_kind *bk;
	int ch;

	*a = (struct args){
	    .P = {.backend = "cpu",
	        .reps = 3,
	        .attn_layers = 0,
	        .max_tokens = 2048,
	        .max_context = 8192,
	        .decode_total = 65536},
	    .check = 0,
	    .prompt = 0,
	    .seed = 1,
	};
	while ((ch = getopt_long(argc, argv, "hm:o:qt:v", longopts, NULL)) !=
	    -1) {
		switch (ch) {
		case 'h': HELP_EXIT(synopsis, help_lines);
		case 'm': P->model = optarg; break;
		case 'o': a->out = optarg; break;
		case 'q': P->quick = 1; break;
		case 't':
			P->threads = (int)flag_i64("-t", optarg, 1, 256);
			break;
		case 'v': a->verbose++; break;
		case OPT_BACKEND:
			/* a kind that computes and can fill a context
			   (whether it is built here: check_backend) */
			if ((bk = medha_backend_find(optarg)) == NULL ||
			    !(bk->caps & MEDHA_BACKEND_COMPUTES) ||
			    !(bk->caps & MEDHA_BACKEND_FILL))
				die(2, "--backend: %s: %s", optarg,
				    bk == NULL ? "expected cpu or cuda"
				    : !(bk->caps & MEDHA_BACKEND_COMPUTES)
				        ? "the sim backend has nothing to "
				          "measure (its times are the "
				          "predictor's)"
				        : "it cannot fill a context");
			P->backend = optarg;
			break;
		case OPT_KV:
			if (strcmp(optarg, "f16") != 0 &&
			    strcmp(optarg, "f32") != 0 &&
			    strcmp(optarg, "bf16") != 0)
				die(2, "--kv: %s: expected f16, f32 or bf16",
				    optarg);
			P->kv = optarg;
			break;
		case OPT_DEVICE:
			P->device = (int)flag_i64("--device", optarg, 0, 255);
			a->device_set = 1;
			break;
		case OPT_REPS:
			P->reps = (int)flag_i64("--reps", optarg, 1, 64);
			break;
		case OPT_ATTN_LAYERS:
			P->attn_layers =
			    (int)flag_i64("--attn-layers", optarg, 0, 4096);
			break;
		case OPT_MAX_TOKENS:
			P->max_tokens =
			    flag_i64("--max-tokens", optarg, 32, 8192);
			break;
		case OPT_MAX_CONTEXT:
			P->max_context =
			    flag_i64("--max-context", optarg, 256, 131072);
			break;
		case OPT_DECODE_TOTAL:
			P->decode_total = flag_i64("--decode-total", optarg,
			    256, (int64_t)1 << 24);
			break;
		case OPT_CHECK:
			a->check = flag_i64("--check", optarg, 1, 100000);
			break;
		case OPT_SEED:
			a->seed =
			    (uint64_t)flag_i64("--seed", optarg, 0, INT64_MAX);
			break;
		case OPT_PREDICTOR: a->predictor = optarg; break;
		case OPT_CHUNKS: a->chunks = 1; break;
		case OPT_MOE: a->moe_only = 1; break;
		case OPT_PROMPT:
			a->prompt = flag_i64("--prompt", optarg, 64, 131072);
			if (a->prompt & (a->prompt - 1))
				die(2, "--prompt: %s: not a power of two",
				    optarg);
			break;
		case OPT_PLOT: a->png = optarg; break;
		case OPT_CLOCK:
			if (strcmp(optarg, "wall") != 0 &&
			    strcmp(optarg, "thread") != 0)
				die(2, "--clock: %s: expected wall or thread",
				    optarg);
			P->thread_clock = strcmp(optarg, "thread") == 0;
			break;
		default: usage_exit(synopsis);
		}
	}
}

/*
 * The backend's flags (exit 2): --kv's type against the backend's (cpu
 * f32 or f16, cuda bf16 or f16; the default the first), --device with
 * cuda only, a kind built here. Sets P->kv and P->gpu: "cpu", or the
 * built-in GPU cuda's device is (h100 for one the predictor does not
 * know, with a warning).
 */
static void
check_backend(struct prof *P, int device_set)
{
	int cuda = strcmp(P->backend, "cuda") == 0;
	char name[256];

	if (P->kv == NULL)
		P->kv = cuda ? "bf16" : "f32";
	if (cuda && strcmp(P->kv, "f32") == 0)
		die(2, "--kv f32: the cuda backend keeps its KV cache in bf16 "
		       "or f16");
	if (!cuda && strcmp(P->kv, "bf16") == 0)
		die(2, "--kv bf16 goes with --backend cuda (cpu: f32 or f16)");
	if (!cuda && device_set)
		die(2, "--device goes with --backend cuda");
	if (medha_backend_find(P->backend)->open == NULL)
		die(2, "--backend: %s: not built into this program%s",
		    P->backend,
		    cuda ? " (built without nvcc, or with CUDA=0)" : "");
	P->gpu = "cpu";
	if (cuda && (P->gpu = cuda_gpu_name(P->device, name,
	                 sizeof(name))) == NULL) {
		if (name[0] != '\0')
			medha_log(MEDHA_LOG_WARN,
			    "CUDA device %d (%s) is none the predictor knows: "
			    "the profile is labelled h100",
			    P->device, name);
		P->gpu = "h100";
	}
}

/*
 * The checks between flags (exit 2), then --prompt's default: the
 * largest power of two within --max-context, which --chunks stretches
 * to a longer --prompt.
 */
static void
check_args(struct args *a, int argc, char *argv[])
{
	if (optind != argc)
		usage_fail(synopsis, "%s: unexpected argument", argv[optind]);
	if (a->P.model == NULL)
		usage_fail(synopsis, "-m MODEL is required");
	if (a->chunks && (a->check > 0 || a->out != NULL))
		die(2, "--chunks takes neither --check nor -o");
	if (!a->chunks && (a->png != NULL || a->prompt > 0))
		die(2, "--plot and --prompt go with --chunks");
	if (a->moe_only && a->check == 0)
		die(2, "--moe goes with --check");
	if (a->predictor != NULL && !a->chunks && a->check == 0)
		die(2, "--predictor goes with --check or --chunks");
	if (a->predictor != NULL && a->out != NULL)
		die(2, "--predictor FILE is measured already: no -o");
	if (a->prompt == 0) {
		a->prompt = 64;
		while (a->prompt * 2 <= a->P.max_context)
			a->prompt *= 2;
	}
	if (a->chunks && a->prompt > a->P.max_context)
		a->P.max_context = a->prompt;
	check_backend(&a->P, a->device_set);
	if (a->P.thread_clock &&
	    (strcmp(a->P.backend, "cpu") != 0 || a->P.threads != 1))
		die(2,
		    "--clock thread goes with --backend cpu and -t 1 (the "
		    "one thread that runs every task)");
}

/*
 * --chunks --predictor: warn when the profile does not cover the chunks
 * (up to the prompt, at most 8192) and the contexts (up to the prompt
 * less the smallest chunk, 32) the study predicts: past its grid the
 * table extrapolates, and a short profile can be far off.
 */
static void
check_cover(const struct medha_pred *p, const char *path, int64_t prompt)
{
	int64_t chunk = prompt < 8192 ? prompt : 8192, ctx = prompt - 32;
	double t, kv, lt, lkv;

	if (!medha_table_extent(p->table, MEDHA_OP_ATTN_PREFILL, &t, &kv) ||
	    !medha_table_extent(p->table, MEDHA_OP_LINEAR, &lt, &lkv)) {
		medha_log(MEDHA_LOG_WARN,
		    "%s: no linear or attn_prefill rows: the predictions are "
		    "the analytic model's",
		    path);
		return;
	}
	if (t < (double)chunk || lt < (double)chunk || kv < (double)ctx)
		medha_log(MEDHA_LOG_WARN,
		    "%s measured chunks of up to %.0f tokens (linear %.0f) "
		    "after up to %.0f cached; this study predicts chunks of "
		    "up to %lld after up to %lld, extrapolated: profile with "
		    "--max-tokens %lld --max-context %lld to cover it",
		    path, t, lt, kv, (long long)chunk, (long long)ctx,
		    (long long)chunk, (long long)(prompt > 256 ? prompt : 256));
}

/* --chunks: the study, predicted too with --predictor. Returns the status. */
static int
run_chunks(struct args *a)
{
	struct medha_pred pred;
	int have_pred = a->predictor != NULL, status = 1;
	char why[1024];

	if (have_pred &&
	    load_pred(&pred, &a->P, a->predictor, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s", why);
		return 1;
	}
	if (have_pred)
		check_cover(&pred, a->predictor, a->prompt);
	if (prof_chunks(&a->P, a->prompt, a->png, have_pred ? &pred : NULL, why,
	        sizeof(why)) != 0)
		medha_log(MEDHA_LOG_ERROR, "%s", why);
	else
		status = 0;
	if (have_pred)
		medha_pred_free(&pred);
	return status;
}

/*
 * The table measured and written to dst (NULL: standard output) whole
 * or not at all: to dst.part, renamed when complete. Returns 0, or 1
 * after logging why.
 */
static int
write_table(struct prof *P, const char *dst)
{
	char why[1024], part[4300];
	FILE *f;
	int rc;

	if (dst != NULL) {
		snprintf(part, sizeof(part), "%s.part", dst);
		if ((f = out_open(part, NULL)) == NULL)
			return 1;
	} else
		f = stdout;
	rc = prof_table(P, f, why, sizeof(why));
	if (out_finish(f, NULL) != 0 && rc == 0)
		rc = medha_why(why, sizeof(why), MEDHA_EIO, "%s",
		    strerror(errno));
	if (rc != 0) {
		if (f != stdout)
			unlink(part);
		medha_log(MEDHA_LOG_ERROR, "%s", why);
		return 1;
	}
	if (dst != NULL && rename(part, dst) != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", dst, strerror(errno));
		unlink(part);
		return 1;
	}
	return 0;
}

/*
 * The profile (unless --predictor gives one), then --check's batches
 * timed against it. Returns the exit status.
 */
static int
run_profile(struct args *a)
{
	const char *predictor = a->predictor;
	char why[1024], tmp[4200];
	struct medha_pred pred;
	struct prof_moe_check mc = {0};
	int status = 1, made_tmp = 0, have_pred = 0;

	/* a mixture of experts' check batches, measured in the profile's
	   sweeps when it is made here */
	if (a->check > 0 && prof_moe_layers(&a->P) > 0) {
		if (prof_moe_batches(&mc, (int)a->check, a->seed) != 0) {
			medha_why(why, sizeof(why), MEDHA_ENOMEM,
			    "out of memory");
			goto fail;
		}
		a->P.mc = &mc;
	}
	if (predictor == NULL) {
		/* the table: to -o, to standard output, or for --check
		   alone to a file of its own */
		const char *dst = a->out;
		if (dst == NULL && a->check > 0) {
			const char *td = getenv("TMPDIR");
			snprintf(tmp, sizeof(tmp), "%s/medha-prof.%ld.csv",
			    td != NULL && *td != '\0' ? td : "/tmp",
			    (long)getpid());
			dst = tmp;
			made_tmp = 1;
		}
		if (write_table(&a->P, dst) != 0)
			goto done;
		predictor = dst;
		if (a->out != NULL)
			medha_log(MEDHA_LOG_INFO, "profile written to %s",
			    a->out);
	}
	if (a->check > 0) {
		if (load_pred(&pred, &a->P, predictor, why, sizeof(why)) != 0)
			goto fail;
		have_pred = 1;
		if (a->moe_only && prof_moe_layers(&a->P) == 0) {
			medha_why(why, sizeof(why), MEDHA_EINVAL,
			    "--moe: %s has no routed layers", a->P.model);
			goto fail;
		}
		if (!a->moe_only && prof_check(&a->P, &pred, (int)a->check,
		                        a->seed, why, sizeof(why)) != 0)
			goto fail;
		if (prof_moe_layers(&a->P) > 0 &&
		    prof_check_moe(&a->P, &pred, &mc, why, sizeof(why)) != 0)
			goto fail;
	}
	status = 0;
	goto done;
fail:
	medha_log(MEDHA_LOG_ERROR, "%s", why);
done:
	if (made_tmp)
		unlink(tmp);
	if (have_pred)
		medha_pred_free(&pred);
	a->P.mc = NULL;
	prof_moe_check_free(&mc);
	return status;
}

int
main(int argc, char *argv[])
{
	struct args a;
	struct prof *P = &a.P;
	char name[128], why[1024];
	int status;

	medha_progname = "medha-prof";
	argv[0] = (char *)medha_progname; /* getopt says it, not the path */
	parse_args(&a, argc, argv);
	check_args(&a, argc, argv);
	medha_log_level = MEDHA_LOG_WARN + a.verbose;
	P->progress = isatty(STDERR_FILENO);
	if (P->threads == 0)
		P->threads = online_cpus(256);
	short_name(P->model, name, sizeof(name));
	P->name = name;
	if (prof_open(P, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", P->model, why);
		prof_close(P);
		return 1;
	}
	medha_log(MEDHA_LOG_INFO, "%s: %d layers, %d threads, KV pool %lld "
	                          "blocks",
	    P->model, P->be->info.shape.n_layers, P->threads,
	    (long long)P->be->info.n_blocks);
	status = a.chunks ? run_chunks(&a) : run_profile(&a);
	prof_close(P);
	return stdout_close(status);
}
