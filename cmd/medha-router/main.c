/*
 * medha-router: the front door of one or more replicas (serve/router.h),
 * and with --http its OpenAI-compatible HTTP front door (serve/http.h), a
 * client of the router at an inproc:// address. Flags and wiring only.
 */
#include "medha.h"
#include "serve/http.h"
#include "net/link.h"
#include "serve/router.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: medha-router -l ADDR -r REPLICA_ADDR [-r REPLICA_ADDR ...]"
	    " [-v] [-m MODEL]\n"
	    "           [--drain-timeout S] [--http HOST:PORT] "
	    "[--http-max-body BYTES]\n"
	    "           [--hold-timeout S] [--http-max-conns N] [--max-queue N]\n"
	    "           [--status-interval S]\n");
}

/* -h: the synopsis, then every option with a line on it (medha-router(1)) */
static const struct medha_help help_lines[] = {
    {"-l, --listen ADDR",
        "where clients connect: ipc://PATH or tcp://HOST:PORT"},
    {"-r, --replica REPLICA_ADDR",
        "a replica's scheduler, once each (at most 1024)"},
    {"-m, --model MODEL",
        "--http: GGUF for tokenizer, chat template, model id"},
    {"-v, --verbose", "log more: retries on another replica, clients gone"},
    {"-h, --help", "print this help and exit"},
    {"--drain-timeout S",
        "on SIGTERM/SIGINT, wait for requests in flight (30 s)"},
    {"--hold-timeout S", "wait for a ready replica (30 s); 0: refuse at once"},
    {"--http HOST:PORT", "serve the HTTP front door there (port 0: any free)"},
    {"--http-max-body BYTES",
        "largest request body (1048576, at most 33554432)"},
    {"--http-max-conns N",
        "HTTP requests answered at once; more get 429 (1024)"},
    {"--max-queue N", "requests in flight at most; more refused (100000)"},
    {"--status-interval S", "seconds between STATUS calls to a replica (0.1)"},
};

static int
help(void)
{
	usage(stdout);
	return medha_help_print(help_lines,
	    sizeof(help_lines) / sizeof(help_lines[0]));
}

static volatile sig_atomic_t stop;

static void
on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

enum {
	OPT_DRAIN = 256,
	OPT_HTTP,
	OPT_HTTP_BODY,
	OPT_HTTP_CONNS,
	OPT_MAXQ,
	OPT_STATUS,
	OPT_HOLD
};

/* The router's address for its own HTTP front door (one per process). */
#define HTTP_UPSTREAM "inproc://medha-router-http"

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
	    {"drain-timeout", required_argument, NULL, OPT_DRAIN},
	    {"help", no_argument, NULL, 'h'},
	    {"hold-timeout", required_argument, NULL, OPT_HOLD},
	    {"http", required_argument, NULL, OPT_HTTP},
	    {"http-max-body", required_argument, NULL, OPT_HTTP_BODY},
	    {"http-max-conns", required_argument, NULL, OPT_HTTP_CONNS},
	    {"listen", required_argument, NULL, 'l'},
	    {"max-queue", required_argument, NULL, OPT_MAXQ},
	    {"model", required_argument, NULL, 'm'},
	    {"replica", required_argument, NULL, 'r'},
	    {"status-interval", required_argument, NULL, OPT_STATUS},
	    {"verbose", no_argument, NULL, 'v'},
	    {NULL, 0, NULL, 0},
	};
	static const char *reps[MEDHA_ROUTER_MAX_REPLICAS];
	struct medha_router_config c;
	struct medha_http_config hc;
	struct medha_router *r;
	struct medha_http *http = NULL;
	struct sigaction sa;
	char why[512];
	int ch, rc;

	medha_progname = "medha-router";
	medha_router_config_default(&c);
	medha_http_config_default(&hc);
	c.replicas = reps;
	while ((ch = getopt_long(argc, argv, "hl:m:r:v", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return help();
		case 'l': c.listen = optarg; break;
		case 'm': hc.model = optarg; break;
		case 'r':
			if (c.nreplicas == MEDHA_ROUTER_MAX_REPLICAS) {
				fprintf(stderr,
				    "medha-router: more than %d replicas\n",
				    MEDHA_ROUTER_MAX_REPLICAS);
				return 2;
			}
			reps[c.nreplicas++] = optarg;
			break;
		case 'v': medha_log_level++; break;
		case OPT_DRAIN:
			if (medha_flag_f64("--drain-timeout", optarg, 0, 1e6, 0,
			        &c.drain_timeout) != 0)
				return 2;
			break;
		case OPT_HOLD:
			if (medha_flag_f64("--hold-timeout", optarg, 0, 1e6, 0,
			        &c.hold_timeout) != 0)
				return 2;
			break;
		case OPT_HTTP: hc.listen = optarg; break;
		case OPT_HTTP_BODY:
			if (medha_flag_i64("--http-max-body", optarg, 1,
			        MEDHA_PROTO_MAX_FRAME / 2, &hc.max_body) != 0)
				return 2;
			break;
		case OPT_HTTP_CONNS:
			if (medha_flag_i64("--http-max-conns", optarg, 1,
			        1 << 20, &hc.max_conns) != 0)
				return 2;
			break;
		case OPT_MAXQ:
			if (medha_flag_i64("--max-queue", optarg, 1, 1 << 30,
			        &c.max_queue) != 0)
				return 2;
			break;
		case OPT_STATUS:
			if (medha_flag_f64("--status-interval", optarg, 0, 60,
			        1, &c.status_interval) != 0)
				return 2;
			break;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "medha-router: unexpected argument: %s\n",
		    argv[optind]);
		usage(stderr);
		return 2;
	}
	if (c.listen == NULL || c.nreplicas == 0) {
		fprintf(stderr, "medha-router: %s is required\n",
		    c.listen == NULL ? "-l ADDR" : "at least one -r ADDR");
		usage(stderr);
		return 2;
	}
	for (int i = 0; i < c.nreplicas; i++)
		if (strcmp(reps[i], c.listen) == 0) {
			fprintf(stderr,
			    "medha-router: %s: the router's own address\n",
			    reps[i]);
			return 2;
		}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (hc.listen == NULL && hc.model != NULL) {
		fprintf(stderr, "medha-router: -m MODEL needs --http\n");
		return 2;
	}
	if ((rc = medha_router_open(&r, &c, why, sizeof(why))) != 0) {
		fprintf(stderr, "medha-router: %s\n", why);
		return rc == MEDHA_EINVAL ? 2 : 1;
	}
	if (hc.listen != NULL) {
		hc.upstream = HTTP_UPSTREAM;
		hc.router = r;
		if ((rc = medha_router_listen(r, HTTP_UPSTREAM, why,
		         sizeof(why))) != 0 ||
		    (rc = medha_http_open(&http, &hc, why, sizeof(why))) != 0) {
			fprintf(stderr, "medha-router: %s\n", why);
			medha_router_close(r);
			return rc == MEDHA_EINVAL ? 2 : 1;
		}
	}
	rc = medha_router_run(r, &stop);
	medha_link_exit_by(3, rc != 0);
	medha_http_close(http);
	medha_router_close(r);
	if (rc != 0) {
		fprintf(stderr, "medha-router: %s\n", medha_strerror(rc));
		return 1;
	}
	return 0;
}
