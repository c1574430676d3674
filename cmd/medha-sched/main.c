/*
 * medha-sched: a replica's scheduler. With --sim it runs the scheduler
 * core in virtual time against the runtime predictor: a trace in on
 * stdin (or FILE), one result record per request out on stdout. Flags
 * and wiring only; every decision lives in libcore/sched/sched*.c.
 */
#include "../common.h"
#include "sched/pred.h"
#include "sched/sched.h"
#include "sched/sim.h"
#include "io/trace.h"
#include "net/link.h"
#include "serve/replica.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char synopsis[] =
    "usage: medha-sched -l ADDR [-v] [-c N|adaptive] [-m MODEL] "
    "[-p POLICY]\n"
    "           [--drain-timeout S] [--max-queue N] [--predictor "
    "FILE]\n"
    "           [--target-batch-time S] [--workers N] [...]\n"
    "       medha-sched --sim GPU -m MODEL [-v] [-b FILE] [-c N|adaptive]\n"
    "           [-o FILE] [-p POLICY] [--block-size N] [--deadline-floor S]\n"
    "           [--deadline-mult X] [--ep] [--kv-blocks N] [--kvp N]\n"
    "           [--kvp-max-tokens N] [--long-tpot X] [--max-chunk N]\n"
    "           [--max-prefills N] [--mem-util X] [--min-chunk N]\n"
    "           [--no-prefix-cache] [--preempt-below N] [--profile FILE]\n"
    "           [--reserve est|max|vllm] [--share-cap X] [--spp N]\n"
    "           [--target-batch-time S] [--tp N] [FILE]\n";

/* -h: the synopsis, then every option with a line on it (medha-sched(1)) */
static const struct medha_help help_lines[] = {
    {NULL, "Live replica (-l ADDR):"},
    {"-l, --listen ADDR", "be a live replica listening at ADDR"},
    {"-m, --model MODEL",
        "tokenizer and shape from this GGUF, not the workers'"},
    {"--drain-timeout S",
        "how long a stop waits for requests in flight (30 s)"},
    {"--max-queue N", "most requests in flight; more are refused (100000)"},
    {"--recover-timeout S", "a lost worker's requests: recomputed S s (120)"},
    {"--workers N", "workers to wait for, tp x spp x kvp (1, at most 4096)"},
    LINK_HELP,
    {NULL, "Simulation (--sim GPU):"},
    {"--sim GPU", "simulate on a100, h100 (80 GB) or h200 (141 GB)"},
    {"-m, --model MODEL",
        "a shape name (gemma3-27b, others: man page) or a GGUF"},
    {"-b, --batch-log FILE",
        "a line per batch: time, latency, decodes, id:chunk:kv"},
    {"-o, --output FILE",
        "write records to FILE, not stdout (.zst: compressed)"},
    {"--block-size N", "KV block size in tokens (16)"},
    {"--ep", "TP GPUs hold E / tp experts whole, not slices of all"},
    {"--kv-blocks N", "KV blocks per KVP group (default: from GPU memory)"},
    {"--kvp N", "KVP groups (1, at most 64)"},
    {"--mem-util X", "fraction of GPU memory usable (0.9)"},
    {"--spp N", "pipeline stages (1)"},
    {"--tp N", "tensor-parallel GPUs per stage (1); must fit heads"},
    {"FILE", "trace: JSON Lines or Azure/Vidur CSV (default: stdin)"},
    {NULL, "Both modes:"},
    {"-c, --chunk N|adaptive",
        "N tokens per batch (fixed), or adaptive (default)"},
    {"-h, --help", "print this help and exit"},
    {"-p, --policy POLICY",
        "fcfs, edf, lrs, medha (default) or sarathi (-c 512)"},
    {"-v, --verbose", "more messages on stderr, a summary; repeat for more"},
    {"--deadline-floor S", "shortest default TTFT deadline, in seconds (0.5)"},
    {"--deadline-mult X",
        "default TTFT deadline: X x prefill time alone (1.5)"},
    {"--kvp-max-tokens N",
        "request KV tokens per group, block-aligned (no limit)"},
    {"--long-tpot X", "long decodes' TPOT: X x their time alone (1.5)"},
    {"--max-chunk N", "largest adaptive chunk in tokens (8192)"},
    {"--max-prefills N", "most prefills in one batch (64)"},
    {"--min-chunk N", "fewest tokens in a batch without decodes (predictor)"},
    {"--no-prefix-cache", "prefill every prompt whole: no prefix cache"},
    {"--preempt-below N", "prompts this long never preempted (5 s of prefill)"},
    {"--predictor, --profile FILE",
        "operator times from a medha-profile(5) table"},
    {"--reserve est|max|vllm",
        "reserve an output estimate, all max_tokens, or as vLLM"},
    {"--share-cap X", "medha: most of a batch a long prefill gives up (0.5)"},
    {"--target-batch-time S",
        "adaptive chunks' target batch latency, seconds (0.05)"},
};

struct out {
	struct medha_writer *rec;
	struct medha_writer *blog;
	int progress; /* stderr is a terminal */
	int werr;     /* errno of a failed write of records, or 0 */
	int berr;     /* of the batch log */
};

static int
on_record(void *arg, const struct medha_record *rec)
{
	struct out *o = arg;
	int rc;

	errno = 0;
	if ((rc = medha_record_write(o->rec, rec)) != 0 && o->werr == 0)
		o->werr = errno ? errno : EIO;
	return rc;
}

static int
on_batch(void *arg, const struct medha_sched *s,
    const struct medha_sched_batch *b)
{
	struct out *o = arg;
	int rc;

	rc = medha_writer_printf(o->blog, "%.6f %.6f %d", b->start, b->latency,
	    b->n_decode);
	for (int i = 0; i < b->n_items && rc == 0; i++) {
		const struct medha_sched_item *it = &b->items[i];
		if (it->decode)
			continue;
		rc = medha_writer_printf(o->blog, " %s:%lld:%lld",
		    medha_sched_req(s, it->req)->spec.id, (long long)it->tokens,
		    (long long)it->kv);
	}
	if (rc == 0)
		rc = medha_writer_write(o->blog, "\n", 1);
	return rc;
}

static void
on_progress(void *arg, double now, size_t done, size_t total)
{
	struct out *o = arg;

	if (o->progress)
		progress("t=%.0fs  %zu/%zu requests done ", now, done, total);
}

enum {
	OPT_SIM = 256,
	OPT_BLOCK,
	OPT_DFLOOR,
	OPT_DMULT,
	OPT_EP,
	OPT_KVBLOCKS,
	OPT_KVP,
	OPT_KVPMAX,
	OPT_LONGTPOT,
	OPT_MAXCHUNK,
	OPT_MAXPRE,
	OPT_MEMUTIL,
	OPT_MINCHUNK,
	OPT_NOPREFIX,
	OPT_PREEMPT,
	OPT_PROFILE,
	OPT_RESERVE,
	OPT_SHARE,
	OPT_SPP,
	OPT_TARGET,
	OPT_TP,
	OPT_DRAIN,
	OPT_MAXQ,
	OPT_WORKERS,
	OPT_RECOVER,
};

static const struct option longopts[] = {
    {"batch-log", required_argument, NULL, 'b'},
    {"block-size", required_argument, NULL, OPT_BLOCK},
    {"chunk", required_argument, NULL, 'c'},
    {"deadline-floor", required_argument, NULL, OPT_DFLOOR},
    {"deadline-mult", required_argument, NULL, OPT_DMULT},
    {"drain-timeout", required_argument, NULL, OPT_DRAIN},
    {"ep", no_argument, NULL, OPT_EP},
    {"help", no_argument, NULL, 'h'},
    {"kv-blocks", required_argument, NULL, OPT_KVBLOCKS},
    {"kvp", required_argument, NULL, OPT_KVP},
    {"kvp-max-tokens", required_argument, NULL, OPT_KVPMAX},
    {"listen", required_argument, NULL, 'l'},
    {"long-tpot", required_argument, NULL, OPT_LONGTPOT},
    {"max-chunk", required_argument, NULL, OPT_MAXCHUNK},
    {"max-prefills", required_argument, NULL, OPT_MAXPRE},
    {"max-queue", required_argument, NULL, OPT_MAXQ},
    {"mem-util", required_argument, NULL, OPT_MEMUTIL},
    {"min-chunk", required_argument, NULL, OPT_MINCHUNK},
    {"model", required_argument, NULL, 'm'},
    {"no-prefix-cache", no_argument, NULL, OPT_NOPREFIX},
    {"output", required_argument, NULL, 'o'},
    {"policy", required_argument, NULL, 'p'},
    {"predictor", required_argument, NULL, OPT_PROFILE},
    {"preempt-below", required_argument, NULL, OPT_PREEMPT},
    {"profile", required_argument, NULL, OPT_PROFILE},
    {"recover-timeout", required_argument, NULL, OPT_RECOVER},
    {"reserve", required_argument, NULL, OPT_RESERVE},
    {"share-cap", required_argument, NULL, OPT_SHARE},
    {"sim", required_argument, NULL, OPT_SIM},
    {"spp", required_argument, NULL, OPT_SPP},
    {"target-batch-time", required_argument, NULL, OPT_TARGET},
    {"tp", required_argument, NULL, OPT_TP},
    {"verbose", no_argument, NULL, 'v'},
    {"workers", required_argument, NULL, OPT_WORKERS},
    LINK_LONGOPTS,
    {NULL, 0, NULL, 0},
};

/* The command line: what each flag set (its default in parse_args). */
struct args {
	const char *listen;            /* -l: live mode's address */
	const char *gpu_name;          /* --sim: the simulator's GPU */
	const char *model_name;        /* -m */
	const char *out_path;          /* -o (NULL: stdout) */
	const char *blog_path;         /* -b (NULL: no batch log) */
	const char *profile;           /* --profile, --predictor */
	int64_t workers;               /* --workers */
	int64_t max_queue;             /* --max-queue */
	double drain;                  /* --drain-timeout, seconds */
	int tp, spp, kvp, ep;          /* --tp, --spp, --kvp, --ep */
	int verbose;                   /* -v, repeated */
	int chunk_set, target_set;     /* -c, --target-batch-time given */
	struct medha_sched_config cfg; /* -c, -p and the scheduler flags */
};

/* medha-sched -l: a live replica until SIGTERM or SIGINT. */
static int
run_live(const struct args *a)
{
	struct medha_replica_config c;
	struct medha_replica *r;
	char why[512];
	int rc;

	medha_replica_config_default(&c);
	c.listen = a->listen;
	c.workers = (int)a->workers;
	c.sched = a->cfg;
	c.model = a->model_name;
	c.predictor = a->profile;
	c.drain_timeout = a->drain;
	c.max_queue = a->max_queue;
	c.target_auto = !a->target_set;
	catch_stop();
	if ((rc = medha_replica_open(&r, &c, why, sizeof(why))) != 0)
		die(rc == MEDHA_EINVAL ? 2 : 1, "%s", why);
	rc = medha_replica_run(r, &stop_requested);
	medha_link_exit_by(3, rc != 0);
	medha_replica_close(r);
	if (rc != 0)
		die(1, "%s", medha_strerror(rc));
	return 0;
}

/* The getopt_long loop: fills *a; -h and a bad flag exit here. */
static void
parse_args(struct args *a, int argc, char *argv[])
{
	struct medha_sched_config *cfg = &a->cfg;
	int ch;

	*a = (struct args){
	    .workers = 1,
	    .max_queue = 100000,
	    .drain = 30,
	    .tp = 1,
	    .spp = 1,
	    .kvp = 1,
	};
	medha_sched_config_default(cfg);
	cfg->prefix_cache = 1;
	while ((ch = getopt_long(argc, argv, "b:c:hl:m:o:p:v", longopts,
	            NULL)) != -1) {
		switch (ch) {
		case 'b': a->blog_path = optarg; break;
		case 'c':
			if (strcmp(optarg, "adaptive") == 0)
				cfg->chunk = 0;
			else
				cfg->chunk =
				    flag_i64("--chunk", optarg, 1, 1 << 24);
			a->chunk_set = 1;
			break;
		case 'h': HELP_EXIT(synopsis, help_lines);
		case 'l': a->listen = optarg; break;
		case 'm': a->model_name = optarg; break;
		case 'o': a->out_path = optarg; break;
		case 'p':
			if ((cfg->policy = medha_policy_parse(optarg)) < 0)
				die(2,
				    "--policy: %s: expected sarathi, fcfs, "
				    "edf, lrs or medha",
				    optarg);
			break;
		case 'v': a->verbose++; break;
		case OPT_SIM: a->gpu_name = optarg; break;
		case OPT_BLOCK:
			cfg->block_size =
			    flag_i64("--block-size", optarg, 1, 4096);
			break;
		case OPT_DFLOOR:
			cfg->deadline_floor =
			    flag_f64("--deadline-floor", optarg, 0, 1e9, 0);
			break;
		case OPT_DMULT:
			cfg->deadline_mult =
			    flag_f64("--deadline-mult", optarg, 1e-3, 1e6, 0);
			break;
		case OPT_EP: a->ep = 1; break;
		case OPT_KVBLOCKS:
			cfg->kv_blocks = flag_i64("--kv-blocks", optarg, 1,
			    INT64_MAX / 65536);
			break;
		case OPT_KVP:
			a->kvp = flag_i64("--kvp", optarg, 1, MEDHA_KVP_MAX);
			break;
		case OPT_KVPMAX:
			cfg->kvp_max_tokens = flag_i64("--kvp-max-tokens",
			    optarg, 1, INT64_MAX / 65536);
			break;
		case OPT_LONGTPOT:
			cfg->long_tpot =
			    flag_f64("--long-tpot", optarg, 0, 1e6, 0);
			break;
		case OPT_MAXCHUNK:
			cfg->max_chunk =
			    flag_i64("--max-chunk", optarg, 32, 1 << 24);
			break;
		case OPT_MAXPRE:
			cfg->max_prefills =
			    flag_i64("--max-prefills", optarg, 1, 1 << 20);
			break;
		case OPT_MEMUTIL:
			cfg->mem_util =
			    flag_f64("--mem-util", optarg, 0.01, 1, 0);
			break;
		case OPT_MINCHUNK:
			cfg->min_chunk =
			    flag_i64("--min-chunk", optarg, 32, 1 << 24);
			break;
		case OPT_NOPREFIX: cfg->prefix_cache = 0; break;
		case OPT_PREEMPT:
			cfg->preempt_below = flag_i64("--preempt-below",
			    optarg, 1, INT64_MAX / 65536);
			break;
		case OPT_PROFILE: a->profile = optarg; break;
		case OPT_RESERVE:
			if ((cfg->reserve = medha_reserve_parse(optarg)) < 0)
				die(2,
				    "--reserve: %s: expected est, max or vllm",
				    optarg);
			break;
		case OPT_SHARE:
			cfg->share_cap =
			    flag_f64("--share-cap", optarg, 0, 1, 0);
			break;
		case OPT_SPP: a->spp = flag_i64("--spp", optarg, 1, 1024); break;
		case OPT_TARGET:
			cfg->target = flag_f64("--target-batch-time", optarg,
			    1e-6, 1e6, 0);
			a->target_set = 1;
			break;
		case OPT_TP: a->tp = flag_i64("--tp", optarg, 1, 1024); break;
		case OPT_RECOVER:
			cfg->recover_timeout =
			    flag_f64("--recover-timeout", optarg, 0, 1e6, 0);
			break;
		case OPT_DRAIN:
			a->drain =
			    flag_f64("--drain-timeout", optarg, 0, 1e6, 0);
			break;
		case OPT_MAXQ:
			a->max_queue =
			    flag_i64("--max-queue", optarg, 1, 1 << 30);
			break;
		case OPT_WORKERS:
			a->workers = flag_i64("--workers", optarg, 1, 4096);
			break;
		case OPT_SECRET:
		case OPT_INSECURE: link_flag(ch, optarg); break;
		default: usage_exit(synopsis);
		}
	}
}

/*
 * The checks between flags, and of the nfiles trace files left after
 * them; sarathi's default budget is set here. Exits 2 on a usage error.
 */
static void
check_args(struct args *a, int nfiles)
{
	if (nfiles > 1)
		usage_fail(synopsis, "one trace file at most (%d given)",
		    nfiles);
	/* sarathi is a fixed budget: Sarathi-Serve's 512 unless given */
	if (a->cfg.policy == MEDHA_POLICY_SARATHI && !a->chunk_set)
		a->cfg.chunk = 512;
	if (a->cfg.policy == MEDHA_POLICY_SARATHI && a->cfg.chunk == 0)
		usage_fail(synopsis,
		    "--policy sarathi takes a fixed token budget (-c N), not "
		    "adaptive chunks");
	if ((a->gpu_name == NULL) == (a->listen == NULL))
		usage_fail(synopsis, "give -l ADDR (a live replica) or "
		    "--sim GPU (the simulator)");
	if (a->listen != NULL) {
		if (nfiles > 0)
			die(2, "-l takes no trace file: clients submit "
			    "requests");
		return;
	}
	if (a->model_name == NULL)
		usage_fail(synopsis, "-m MODEL is required");
	if (a->cfg.kvp_max_tokens % a->cfg.block_size != 0)
		die(2, "--kvp-max-tokens must be a multiple of the block "
		    "size (%d)", a->cfg.block_size);
}

/*
 * --sim: the predictor of the model split over the GPUs (with
 * --profile's table). Exits 1 on what cannot be simulated; returns 1
 * (logged, nothing left to free) when no KV fits beside the weights.
 */
static int
sim_pred(struct medha_pred *pred, const struct args *a)
{
	const struct medha_sched_config *cfg = &a->cfg;
	const struct medha_gpu *gpu;
	struct medha_pred_model model;
	char why[256] = "";
	int rc;

	if ((gpu = medha_gpu_find(a->gpu_name)) == NULL)
		die(1, "--sim: unknown GPU %s (built in: a100, h100, h200)",
		    a->gpu_name);
	if ((rc = medha_model_resolve_why(a->model_name, &model, why,
	         sizeof(why))) != 0)
		die(1, "-m %s: %s%s", a->model_name,
		    why[0] ? why : medha_strerror(rc),
		    rc == MEDHA_ENOTFOUND ? " (built in: " MEDHA_MODEL_NAMES ")"
		                          : "");
	if ((rc = medha_pred_init(pred, gpu, &model, a->tp, a->spp, a->kvp)) !=
	    0)
		die(1,
		    "cannot split %s (%d layers, %d query heads, %d KV heads) "
		    "over tp %d spp %d kvp %d: tp must divide the query "
		    "heads, spp at most the layers",
		    model.name, model.c.n_layers, model.c.n_heads,
		    model.c.n_kv_heads, a->tp, a->spp, a->kvp);
	if (a->ep && medha_pred_set_ep(pred, why, sizeof(why)) != 0)
		die(1, "--ep: %s", why);
	why[0] = '\0';
	if (a->profile != NULL &&
	    (rc = medha_pred_load_table(pred, a->profile, why, sizeof(why))) !=
	        0)
		die(1, "%s: %s", a->profile, why[0] ? why : medha_strerror(rc));

	if (cfg->kv_blocks == 0 &&
	    medha_pred_kv_capacity(pred, cfg->mem_util) < cfg->block_size) {
		double gib = 1024.0 * 1024 * 1024;
		medha_log(MEDHA_LOG_ERROR,
		    "%s does not fit on %s with tp %d spp %d: %.1f GiB of "
		    "weights a worker, and 1 GiB of activations, in the %.1f "
		    "GiB that --mem-util %.2f leaves of %.0f GiB: no room for "
		    "KV",
		    model.name, gpu->name, a->tp, a->spp,
		    medha_pred_weight_bytes(pred) / gib,
		    gpu->mem_bytes * cfg->mem_util / gib, cfg->mem_util,
		    gpu->mem_bytes / gib);
		medha_pred_free(pred);
		return 1;
	}
	return 0;
}

/*
 * --sim: the trace (path; NULL: stdin) through the scheduler in virtual
 * time, a record per request to -o, a line per batch to -b. Returns the
 * exit status (0, or 1 after logging why).
 */
static int
run_sim(const struct args *a, const struct medha_pred *pred, const char *path)
{
	const char *out_path = a->out_path, *blog_path = a->blog_path;
	struct medha_sim_stats st;
	struct medha_sim_hooks hooks;
	struct medha_reqspec *reqs;
	struct out o;
	FILE *of = NULL, *bf = NULL;
	size_t n;
	double t0, wall;
	int rc, status;

	reqs = read_trace_all(path, &n);
	memset(&o, 0, sizeof(o));
	o.progress = isatty(STDERR_FILENO);
	status = 1; /* until it all went well */
	if ((of = out_open(out_path, &o.rec)) == NULL)
		goto out;
	if (blog_path != NULL && (bf = out_open(blog_path, &o.blog)) == NULL)
		goto out;
	memset(&hooks, 0, sizeof(hooks));
	hooks.arg = &o;
	hooks.record = on_record;
	hooks.batch = blog_path != NULL ? on_batch : NULL;
	hooks.progress = on_progress;

	t0 = medha_now();
	rc = medha_sim_run(&a->cfg, pred, reqs, n, &hooks, &st);
	wall = medha_now() - t0;
	if (o.progress)
		fputc('\n', stderr);
	if (rc != 0 && o.werr != 0) {
		medha_log(MEDHA_LOG_ERROR, "writing records to %s: %s",
		    out_path != NULL ? out_path : "stdout", strerror(o.werr));
		goto out;
	}
	if (rc != 0) {
		medha_log(MEDHA_LOG_ERROR, "simulation failed: %s",
		    rc < 0 ? medha_strerror(rc) : "write error");
		goto out;
	}
	rc = out_finish(of, o.rec);
	o.rec = NULL;
	of = NULL;
	if (rc != 0) {
		medha_log(MEDHA_LOG_ERROR, "writing records to %s: %s",
		    out_path != NULL ? out_path : "stdout", strerror(errno));
		goto out;
	}
	if (o.blog != NULL) {
		rc = out_finish(bf, o.blog);
		o.blog = NULL;
		bf = NULL;
		if (rc != 0) {
			medha_log(MEDHA_LOG_ERROR,
			    "writing the batch log failed");
			goto out;
		}
	}
	medha_log(MEDHA_LOG_INFO,
	    "%zu requests, %lld iterations, %lld tokens, %.1f s virtual "
	    "(stage 0 busy %.1f%%), %.2f s wall",
	    n, (long long)st.iterations, (long long)st.tokens, st.end,
	    st.end > 0 ? 100 * st.busy / st.end : 0, wall);
	medha_log(MEDHA_LOG_INFO,
	    "progress guarantee: %lld batches over their target by a "
	    "32-token chunk, %.3f s added in all",
	    (long long)st.progress.batches, st.progress.extra);
	medha_log(MEDHA_LOG_INFO,
	    "prefix cache: %lld of %lld admissions hit, %lld tokens; %lld "
	    "blocks cached, %lld evicted",
	    (long long)st.prefix.hits, (long long)st.prefix.queries,
	    (long long)st.prefix.hit_tokens, (long long)st.prefix.inserted,
	    (long long)st.prefix.evictions);
	medha_log(MEDHA_LOG_INFO, "memory: reserve %s, %lld preemptions "
	    "(--preempt-below %lld)", medha_reserve_name(a->cfg.reserve),
	    (long long)st.preemptions, (long long)st.preempt_below);
	status = 0;
out:
	/* on a failure, what is open is let go (its errors moot; NULL: no-op) */
	medha_writer_close(o.rec);
	medha_writer_close(o.blog);
	if (of != NULL && of != stdout)
		fclose(of);
	if (bf != NULL && bf != stdout)
		fclose(bf);
	for (size_t i = 0; i < n; i++)
		medha_reqspec_clear(&reqs[i]);
	free(reqs);
	return status;
}

int
main(int argc, char *argv[])
{
	struct args a;
	struct medha_pred pred;
	int status;

	medha_progname = "medha-sched";
	argv[0] = (char *)medha_progname; /* getopt says it, not the path */
	parse_args(&a, argc, argv);
	argc -= optind;
	argv += optind;
	check_args(&a, argc);
	medha_log_level = MEDHA_LOG_WARN + a.verbose;
	link_auth();
	if (a.listen != NULL) {
		log_server(a.verbose);
		return run_live(&a);
	}
	a.cfg.window_kv = 1; /* a GPU backend frees what no window sees */
	if (sim_pred(&pred, &a) != 0)
		return 1;
	status = run_sim(&a, &pred, argc == 1 ? argv[0] : NULL);
	medha_pred_free(&pred);
	return stdout_close(status);
}
