/*
 * medha-sched: a replica's scheduler. With --sim it runs the scheduler
 * core in virtual time against the runtime predictor: a trace in on
 * stdin (or FILE), one result record per request out on stdout. Flags
 * and wiring only; every decision lives in libcore/sched/sched*.c.
 */
#include "../common.h"
#include "sim.h"
#include "engine/measure.h"
#include "sched/pred.h"
#include "sched/sched.h"
#include "io/trace.h"
#include "net/link.h"
#include "serve/replica/replica.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
    "           [--reserve est|max|vllm] [--sched-link L[,B]] [--share-cap X]\n"
    "           [--spp N] [--spp-link L[,B]] [--kvp-link L[,B]]\n"
    "           [--target-batch-time S] [--tp N] [--tp-link L[,B]] [FILE]\n";

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
    {"--sim GPU", "simulate on a100, h100 (80 GB), h200 (141 GB) or cpu"},
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
    {"--kvp-link L[,B]", "KVP link: L s one way, B bits/s (100mbit; none: 0)"},
    {"--mem-util X", "fraction of GPU memory usable (0.9)"},
    {"--sched-link L[,B]", "scheduler to workers link, as --kvp-link"},
    {"--spp N", "pipeline stages (1)"},
    {"--spp-link L[,B]", "link between stages, as --kvp-link"},
    {"--tp N", "tensor-parallel GPUs per stage (1); must fit heads"},
    {"--tp-link L[,B]", "link between TP ranks, as --kvp-link"},
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
	OPT_TPLINK,
	OPT_SPPLINK,
	OPT_KVPLINK,
	OPT_SCHEDLINK,
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
    {"kvp-link", required_argument, NULL, OPT_KVPLINK},
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
    {"sched-link", required_argument, NULL, OPT_SCHEDLINK},
    {"share-cap", required_argument, NULL, OPT_SHARE},
    {"sim", required_argument, NULL, OPT_SIM},
    {"spp", required_argument, NULL, OPT_SPP},
    {"spp-link", required_argument, NULL, OPT_SPPLINK},
    {"target-batch-time", required_argument, NULL, OPT_TARGET},
    {"tp", required_argument, NULL, OPT_TP},
    {"tp-link", required_argument, NULL, OPT_TPLINK},
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
	struct medha_net net;          /* --tp-link ... --sched-link */
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

/* --KIND-link's argument into n's link k (netcost.h); exits 2 if bad */
static void
net_flag(struct medha_net *n, int k, const char *arg)
{
	char why[256];

	if (medha_wire_parse(arg, &n->w[k], why, sizeof(why)) != 0)
		die(2, "--%s-link: %s", medha_net_name(k), why);
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
		case OPT_TPLINK:
		case OPT_SPPLINK:
		case OPT_KVPLINK:
		case OPT_SCHEDLINK:
			net_flag(&a->net, ch - OPT_TPLINK, optarg);
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
		if (medha_net_any(&a->net))
			die(2,
			    "the --*-link flags are the simulator's "
			    "(--sim): live, the links are real");
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
	struct medha_gpu cpu;
	struct medha_pred_model model;
	char why[256] = "";
	int rc;

	/* cpu: this machine, one thread, as a cpu worker's replica
	   measures it (its profile, --profile, gives the times) */
	if (strcasecmp(a->gpu_name, "cpu") == 0) {
		if (medha_gpu_measure_cpu(&cpu, 1) != 0)
			die(1, "--sim cpu: out of memory");
		gpu = &cpu;
	} else if ((gpu = medha_gpu_find(a->gpu_name)) == NULL)
		die(1,
		    "--sim: unknown GPU %s (built in: a100, h100, h200; "
		    "or cpu)",
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
	pred->net = a->net;

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
	status = sched_sim(&a.cfg, &pred, argc == 1 ? argv[0] : NULL,
	    a.out_path, a.blog_path);
	medha_pred_free(&pred);
	return stdout_close(status);
}
