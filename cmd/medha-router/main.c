/*
 * medha-router: the front door of one or more replicas (net/router.h).
 * Flags and wiring only.
 */
#include "medha.h"
#include "net/router.h"

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
	    " [-v]\n"
	    "           [--drain-timeout S] [--max-queue N] "
	    "[--status-interval S]\n");
}

static volatile sig_atomic_t stop;

static void
on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

enum { OPT_DRAIN = 256, OPT_MAXQ, OPT_STATUS };

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
	    {"drain-timeout", required_argument, NULL, OPT_DRAIN},
	    {"help", no_argument, NULL, 'h'},
	    {"listen", required_argument, NULL, 'l'},
	    {"max-queue", required_argument, NULL, OPT_MAXQ},
	    {"replica", required_argument, NULL, 'r'},
	    {"status-interval", required_argument, NULL, OPT_STATUS},
	    {"verbose", no_argument, NULL, 'v'},
	    {NULL, 0, NULL, 0},
	};
	static const char *reps[MEDHA_ROUTER_MAX_REPLICAS];
	struct medha_router_config c;
	struct medha_router *r;
	struct sigaction sa;
	char why[512];
	int ch, rc;

	medha_progname = "medha-router";
	medha_router_config_default(&c);
	c.replicas = reps;
	while ((ch = getopt_long(argc, argv, "hl:r:v", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': usage(stdout); return 0;
		case 'l': c.listen = optarg; break;
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
	if ((rc = medha_router_open(&r, &c, why, sizeof(why))) != 0) {
		fprintf(stderr, "medha-router: %s\n", why);
		return rc == MEDHA_EINVAL ? 2 : 1;
	}
	rc = medha_router_run(r, &stop);
	medha_router_close(r);
	if (rc != 0) {
		fprintf(stderr, "medha-router: %s\n", medha_strerror(rc));
		return 1;
	}
	return 0;
}
