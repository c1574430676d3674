/*
 * netfault.c: a host's link with delay, jitter and loss, for
 * contrib/netns-hosts.sh and tests/sh/hosts.sh, where the kernel has no
 * netem. It sits between two tap devices of the switch namespace: one
 * bridged with the host's port, the other a port of the switch's bridge,
 * and carries every Ethernet frame across, each way, after
 *
 *	DELAY + a uniform draw in [-JITTER, +JITTER] milliseconds
 *
 * (never less than 0, and never before the frame ahead of it in the same
 * direction: frames keep their order, as on a wire), dropping each with
 * probability LOSS percent. The kernel hands a tap whole frames of at
 * most its MTU with their checksums done (a tap takes no offloads), so a
 * dropped frame is one lost TCP segment, retransmitted as over a real
 * lossy link.
 *
 * usage: netfault [-d DELAY] [-j JITTER] [-l LOSS] [-s SEED] [-x IP]...
 *                 TAP_A TAP_B
 *
 * -x IP (up to 16 times) drops every IPv4 packet and ARP message from or
 * to IP as well, whatever LOSS is: a partition of the host from those
 * hosts alone (-l 100 is a partition from all).
 *
 * TAP_A and TAP_B are taps made before (ip tuntap add mode tap), which
 * it attaches to. It runs until SIGTERM or SIGINT, then writes on
 * stderr, for each direction, the frames carried and dropped:
 *
 *	netfault: TAP_A -> TAP_B: N carried, M dropped
 *
 * and exits 0. While it is not running, nothing crosses (the taps are
 * down): contrib/netns-hosts.sh takes it out of the path instead. Exit
 * 2 on bad usage, 1 when a tap cannot be opened or fails.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MAX 65536 /* a tap's frames are at most its MTU; room to spare */
#define CUT_MAX 16      /* -x addresses */
#define QUEUE_MAX 4096  /* frames held each way; past it, dropped (a full queue) */

struct frame {
	struct frame *next;
	int64_t due; /* monotonic ns when it leaves */
	size_t len;
	unsigned char data[];
};

/* one direction: frames read from fd_in, written to fd_out once due */
struct dir {
	const char *from, *to;
	int fd_in, fd_out;
	struct frame *head, *tail;
	int held;
	int64_t last_due; /* the last frame queued leaves no earlier */
	unsigned long carried, dropped, overflow;
};

static volatile sig_atomic_t stop;
static uint32_t cut[CUT_MAX]; /* -x: addresses, network order */
static int ncut;
static uint64_t rng_state;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void usage(void)
{
	fprintf(stderr, "usage: netfault [-d DELAY] [-j JITTER] [-l LOSS] [-s SEED] [-x IP]... TAP_A TAP_B\n");
	exit(2);
}

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* a uniform draw in [0, 1) (splitmix64) */
static double uniform(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return (double)(z >> 11) / 9007199254740992.0;
}

/* NAME's value ARG as a number in [lo, hi], or usage */
static double number(const char *name, const char *arg, double lo, double hi)
{
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	if (errno || end == arg || *end || !(v >= lo && v <= hi)) {
		fprintf(stderr, "netfault: %s %s: expected a number from %g to %g\n",
		    name, arg, lo, hi);
		exit(2);
	}
	return v;
}

/* attach to the tap NAME, non-blocking; exit 1 if it cannot */
static int tap_open(const char *name)
{
	struct ifreq ifr;
	if (strlen(name) >= IFNAMSIZ) {
		fprintf(stderr, "netfault: %s: a name of at most %d characters\n",
		    name, IFNAMSIZ - 1);
		exit(2);
	}
	int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "netfault: /dev/net/tun: %s\n", strerror(errno));
		exit(1);
	}
	memset(&ifr, 0, sizeof ifr);
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
	strcpy(ifr.ifr_name, name);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		fprintf(stderr, "netfault: tap %s: %s\n", name, strerror(errno));
		exit(1);
	}
	return fd;
}

/* whether the frame f of n bytes is an IPv4 packet or ARP message from
 * or to a -x address */
static int is_cut(const unsigned char *f, ssize_t n)
{
	if (n < 14 || !ncut)
		return 0;
	int type = f[12] << 8 | f[13];
	int src, dst; /* offsets of the addresses */
	if (type == 0x0800 && n >= 34) {
		src = 26;
		dst = 30;
	} else if (type == 0x0806 && n >= 42) {
		src = 28;
		dst = 38;
	} else {
		return 0;
	}
	for (int i = 0; i < ncut; i++)
		if (!memcmp(f + src, &cut[i], 4) || !memcmp(f + dst, &cut[i], 4))
			return 1;
	return 0;
}

/* read every frame waiting on d's input; queue or drop each */
static void take(struct dir *d, double delay, double jitter, double loss)
{
	static unsigned char buf[FRAME_MAX];
	for (;;) {
		ssize_t n = read(d->fd_in, buf, sizeof buf);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			fprintf(stderr, "netfault: read %s: %s\n", d->from, strerror(errno));
			exit(1);
		}
		if (n == 0)
			return;
		if (is_cut(buf, n) || (loss > 0 && uniform() * 100 < loss)) {
			d->dropped++;
			continue;
		}
		if (d->held >= QUEUE_MAX) {
			d->overflow++;
			continue;
		}
		double ms = delay + (jitter > 0 ? (2 * uniform() - 1) * jitter : 0);
		int64_t due = now_ns() + (ms > 0 ? (int64_t)(ms * 1e6) : 0);
		if (due < d->last_due)
			due = d->last_due;
		d->last_due = due;
		struct frame *f = malloc(sizeof *f + (size_t)n);
		if (!f) {
			fprintf(stderr, "netfault: out of memory\n");
			exit(1);
		}
		f->next = NULL;
		f->due = due;
		f->len = (size_t)n;
		memcpy(f->data, buf, (size_t)n);
		if (d->tail)
			d->tail->next = f;
		else
			d->head = f;
		d->tail = f;
		d->held++;
	}
}

/* write d's frames that are due; the ns until the next is, or -1 */
static int64_t give(struct dir *d)
{
	int64_t now = now_ns();
	while (d->head && d->head->due <= now) {
		struct frame *f = d->head;
		/* a full tap queue drops it, as a full device queue would */
		if (write(d->fd_out, f->data, f->len) < 0 && errno != EAGAIN &&
		    errno != EIO) {
			fprintf(stderr, "netfault: write %s: %s\n", d->to, strerror(errno));
			exit(1);
		}
		d->carried++;
		d->head = f->next;
		if (!d->head)
			d->tail = NULL;
		d->held--;
		free(f);
	}
	return d->head ? d->head->due - now : -1;
}

int main(int argc, char **argv)
{
	double delay = 0;  /* -d: ms added to every frame */
	double jitter = 0; /* -j: ms, +- around the delay */
	double loss = 0;   /* -l: percent of frames dropped */
	rng_state = 1;     /* -s: the draws' seed */
	int c;
	while ((c = getopt(argc, argv, "d:j:l:s:x:")) != -1) {
		switch (c) {
		case 'd': delay = number("-d", optarg, 0, 10000); break;
		case 'j': jitter = number("-j", optarg, 0, 10000); break;
		case 'l': loss = number("-l", optarg, 0, 100); break;
		case 's': rng_state = (uint64_t)number("-s", optarg, 0, 4294967295.0); break;
		case 'x':
			if (ncut == CUT_MAX || inet_pton(AF_INET, optarg, &cut[ncut]) != 1) {
				fprintf(stderr, "netfault: -x %s: expected an IPv4 address (at most %d)\n",
				    optarg, CUT_MAX);
				exit(2);
			}
			ncut++;
			break;
		default: usage();
		}
	}
	if (argc - optind != 2)
		usage();
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	/* the signals come only inside ppoll, so none is missed between
	 * the check of stop and the wait */
	sigset_t block, open_mask;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &open_mask);
	sigdelset(&open_mask, SIGTERM);
	sigdelset(&open_mask, SIGINT);
	int a = tap_open(argv[optind]), b = tap_open(argv[optind + 1]);
	struct dir dirs[2] = {
		{ .from = argv[optind], .to = argv[optind + 1], .fd_in = a, .fd_out = b },
		{ .from = argv[optind + 1], .to = argv[optind], .fd_in = b, .fd_out = a },
	};
	while (!stop) {
		int64_t wait = -1;
		for (int i = 0; i < 2; i++) {
			int64_t w = give(&dirs[i]);
			if (w >= 0 && (wait < 0 || w < wait))
				wait = w;
		}
		struct pollfd p[2] = { { .fd = a, .events = POLLIN }, { .fd = b, .events = POLLIN } };
		struct timespec ts = { wait / 1000000000, wait % 1000000000 };
		int n = ppoll(p, 2, wait >= 0 ? &ts : NULL, &open_mask);
		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "netfault: poll: %s\n", strerror(errno));
			return 1;
		}
		for (int i = 0; i < 2; i++)
			if (n > 0 && (p[i].revents & POLLIN))
				take(&dirs[i], delay, jitter, loss);
	}
	for (int i = 0; i < 2; i++)
		fprintf(stderr, "netfault: %s -> %s: %lu carried, %lu dropped%s\n",
		    dirs[i].from, dirs[i].to, dirs[i].carried,
		    dirs[i].dropped + dirs[i].overflow,
		    dirs[i].overflow ? " (some for a full queue)" : "");
	return 0;
}
