/* prefork: a prefork worker pool and its load generator, for the cpu_pinning chapter.
 *
 * One run of this program is one trial of one variant:
 *
 *   master process
 *     |- N worker processes (fork): each builds a private table of WS bytes
 *     |    (64-byte nodes linked in one random cycle), accept()s ONE loopback
 *     |    TCP connection and serves requests on it until EOF.  A request is
 *     |    LOOKUPS dependent loads through the table (a pointer chase, so every
 *     |    step waits for its cache line), with one UDP round trip to the
 *     |    backend in the middle (a blocking recv: a sleep and a wakeup, like
 *     |    the memcached access of a bidding server).
 *     |- backend thread: echoes 16-byte UDP datagrams.
 *     `- load generator (main thread): N TCP connections, one per worker.
 *          --mode sat : closed loop, every connection always has one request;
 *          --mode rate: open loop at RATE requests/s (evenly spaced send
 *                       times); a request waits in a queue when every
 *                       connection is busy, and its latency counts from its
 *                       scheduled time, so queueing is not hidden.  The
 *                       generator sleeps in epoll_pwait2() between sends.
 *
 * Variants are per-task settings made by each worker right after fork (and by
 * the master's threads when --all-tasks 1): --pin 1 pins worker i to CPU i mod
 * NCPU with sched_setaffinity(); --policy batch uses SCHED_BATCH; --slice-ns
 * sets the EEVDF request size through sched_setattr(sched_runtime).
 *
 * Network: the program first moves into a network namespace of its own, with only
 * its loopback device, up (private_net): the listener and the backend are then out
 * of reach of every other user of the host, who could otherwise take a worker's
 * connection or push datagrams through the backend while the pool is measured.
 * It is the same loopback path as in the host's namespace.  Root gets a plain new
 * network namespace; another user gets one owned by a new user namespace, where
 * unprivileged user namespaces are allowed (else: an error).  The namespace ends
 * with the program.
 *
 * Timeline: warm-up (not recorded) then a measurement window.  At the window's
 * start and end the master reads /proc/stat and /proc/<pid>/sched of every
 * worker and of its own threads, and writes "pf_window_start"/"pf_window_end"
 * to --marker (an ftrace trace_marker) if given.  Output lines on stdout:
 *   key=value                       scalars
 *   T,phase,role,idx,pid,exec_ns,migrations,nvcsw,nivcsw,policy,slice_ns
 *   C,phase,cpu,user,nice,system,idle,iowait,irq,softirq,steal  (USER_HZ ticks)
 *   H,bin,count    latency histogram, bin = floor(20*log10(ns))
 *   R,idx,pid,utime_us,stime_us,nvcsw,nivcsw   whole-life rusage (wait4)
 * Errors: one line on stderr, exit status 2.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXW 64
#define NODE 64
#define MSG 16

struct pf_sched_attr {		/* the kernel's struct sched_attr (uapi/linux/sched/types.h) */
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
	uint32_t sched_util_min, sched_util_max;
};

/* parameters */
static int nworkers = 2, pin, policy_batch, all_tasks, mode_rate, ncpu;
static long ws_bytes = 384 * 1024, lookups = 20000, warmup_ms = 300, duration_ms = 1000;
static long slice_ns, seed = 1;
static double rate;
static const char *marker;

static pid_t workers[MAXW];
static volatile sig_atomic_t stop_sig;

static void fail(const char *fmt, const char *arg)
{
	fprintf(stderr, "prefork: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	exit(2);
}

static void fail_errno(const char *what)
{
	fprintf(stderr, "prefork: %s: %s\n", what, strerror(errno));
	exit(2);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long parse_long(const char *opt, const char *s, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi) {
		fprintf(stderr, "prefork: %s must be an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
		exit(2);
	}
	return v;
}

static int read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = read(fd, (char *)buf + got, len - got);
		if (r == 0)
			return 0;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		got += (size_t)r;
	}
	return 1;
}

static int write_full(int fd, const void *buf, size_t len)
{
	size_t put = 0;
	while (put < len) {
		ssize_t r = write(fd, (const char *)buf + put, len - put);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		put += (size_t)r;
	}
	return 0;
}

/* Per-task scheduler settings of the variant, for the calling thread. */
static void apply_sched(void)
{
	if (!policy_batch && !slice_ns)
		return;
	struct pf_sched_attr a;
	memset(&a, 0, sizeof a);
	a.size = sizeof a;
	a.sched_policy = policy_batch ? 3 /* SCHED_BATCH */ : 0 /* SCHED_OTHER */;
	a.sched_runtime = (uint64_t)slice_ns;
	if (syscall(SYS_sched_setattr, 0, &a, 0) != 0)
		fail_errno("sched_setattr");
}

/* A network namespace of our own with its loopback device up (see the header). */
static void private_net(void)
{
	if (unshare(CLONE_NEWNET) != 0) {
		if (errno != EPERM)
			fail_errno("unshare(CLONE_NEWNET)");
		if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0)
			fail_errno("a private network namespace needs root or unprivileged user "
				   "namespaces; unshare(CLONE_NEWUSER|CLONE_NEWNET)");
	}
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0)
		fail_errno("loopback device of the private network namespace");
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
		fail_errno("bringing up the loopback device of the private network namespace");
	close(s);
}

/* ------------------------------------------------------------------ worker -- */
static uint32_t rng32(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (uint32_t)(*s >> 11);
}

static uint32_t chase(const uint32_t *table, uint32_t start, long steps)
{
	uint32_t i = start;
	for (long k = 0; k < steps; k++)
		i = table[(size_t)i * (NODE / 4)];
	return i;
}

static void worker(int idx, int lfd, int udp_port, int ready_fd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		_exit(1);
	prctl(PR_SET_NAME, "pf-worker");
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	if (pin) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(idx % ncpu, &set);
		if (sched_setaffinity(0, sizeof set, &set) != 0)
			fail_errno("sched_setaffinity");
	}
	apply_sched();

	/* private table: one random cycle through all nodes (Sattolo's shuffle) */
	size_t n = (size_t)ws_bytes / NODE;
	uint32_t *table = aligned_alloc(4096, n * NODE);
	uint32_t *perm = malloc(n * sizeof *perm);
	if (!table || !perm)
		fail_errno("malloc");
	uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)(seed * 1000 + idx + 1);
	for (size_t i = 0; i < n; i++)
		perm[i] = (uint32_t)i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = rng32(&s) % i;
		uint32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
	}
	memset(table, 0, n * NODE);
	for (size_t i = 0; i < n; i++)
		table[(size_t)perm[i] * (NODE / 4)] = perm[(i + 1) % n];
	free(perm);

	int u = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in b = {.sin_family = AF_INET, .sin_port = htons(udp_port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (u < 0 || connect(u, (struct sockaddr *)&b, sizeof b) != 0)
		fail_errno("worker udp socket");
	char one = 1;
	if (write(ready_fd, &one, 1) != 1)
		_exit(1);
	close(ready_fd);

	int c = accept(lfd, NULL, NULL);
	if (c < 0)
		_exit(1);
	close(lfd);
	int on = 1;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
	uint64_t msg[2], echo[2];
	for (;;) {
		int r = read_full(c, msg, MSG);
		if (r <= 0)
			break;
		uint32_t pos = (uint32_t)(msg[0] % n);
		pos = chase(table, pos, lookups / 2);
		echo[0] = msg[0];
		echo[1] = pos;
		if (send(u, echo, MSG, 0) != MSG || recv(u, echo, MSG, 0) != MSG)
			break;
		pos = chase(table, (uint32_t)(echo[1] % n), lookups - lookups / 2);
		msg[1] = pos;		/* the answer, so the chase can't be optimised away */
		if (write_full(c, msg, MSG) != 0)
			break;
	}
	_exit(0);
}

/* ------------------------------------------------------------------ backend -- */
static int udp_fd;
static volatile pid_t backend_tid;

static void *backend(void *arg)
{
	(void)arg;
	backend_tid = (pid_t)syscall(SYS_gettid);
	prctl(PR_SET_NAME, "pf-backend");
	if (all_tasks)
		apply_sched();
	char buf[64];
	struct sockaddr_in from;
	for (;;) {
		socklen_t fl = sizeof from;
		ssize_t r = recvfrom(udp_fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		sendto(udp_fd, buf, (size_t)r, 0, (struct sockaddr *)&from, fl);
	}
	return NULL;
}

/* ---------------------------------------------------------------- snapshots -- */
struct tstat { long long exec_ns, migrations, nvcsw, nivcsw, policy, slice; };

static int read_sched(const char *path, struct tstat *t)
{
	memset(t, 0, sizeof *t);
	t->policy = -1;
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[256];
	while (fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		*colon = 0;
		char *key = line;
		while (*key == ' ')
			key++;
		char *end = key + strlen(key);
		while (end > key && end[-1] == ' ')
			*--end = 0;
		const char *val = colon + 1;
		if (!strcmp(key, "se.sum_exec_runtime")) {
			/* "ms.nnnnnn": milliseconds with six decimals */
			long long ms = 0, frac = 0;
			char fr[16] = "";
			if (sscanf(val, " %lld.%15[0-9]", &ms, fr) >= 1) {
				size_t l = strlen(fr);
				for (size_t i = 0; i < 6; i++)
					frac = frac * 10 + (i < l ? fr[i] - '0' : 0);
			}
			t->exec_ns = ms * 1000000 + frac;
		} else if (!strcmp(key, "se.nr_migrations"))
			t->migrations = atoll(val);
		else if (!strcmp(key, "nr_voluntary_switches"))
			t->nvcsw = atoll(val);
		else if (!strcmp(key, "nr_involuntary_switches"))
			t->nivcsw = atoll(val);
		else if (!strcmp(key, "policy"))
			t->policy = atoll(val);
		else if (!strcmp(key, "se.slice"))
			t->slice = atoll(val);
	}
	fclose(f);
	return 0;
}

#define MAXOUT (1 << 16)
static char outbuf[MAXOUT * 4];
static size_t outlen;

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(outbuf + outlen, sizeof outbuf - outlen, fmt, ap);
	va_end(ap);
	if (n > 0 && outlen + (size_t)n < sizeof outbuf)
		outlen += (size_t)n;
}

static pid_t main_tid;

static void snapshot(const char *phase)
{
	char path[96];
	struct tstat t;
	for (int i = 0; i < nworkers; i++) {
		snprintf(path, sizeof path, "/proc/%d/sched", workers[i]);
		if (read_sched(path, &t) == 0)
			out("T,%s,worker,%d,%d,%lld,%lld,%lld,%lld,%lld,%lld\n", phase, i, workers[i],
			    t.exec_ns, t.migrations, t.nvcsw, t.nivcsw, t.policy, t.slice);
	}
	pid_t tids[2] = {main_tid, backend_tid};
	const char *roles[2] = {"loadgen", "backend"};
	for (int k = 0; k < 2; k++) {
		snprintf(path, sizeof path, "/proc/self/task/%d/sched", tids[k]);
		if (read_sched(path, &t) == 0)
			out("T,%s,%s,0,%d,%lld,%lld,%lld,%lld,%lld,%lld\n", phase, roles[k], tids[k],
			    t.exec_ns, t.migrations, t.nvcsw, t.nivcsw, t.policy, t.slice);
	}
	FILE *f = fopen("/proc/stat", "r");
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		int cpu;
		unsigned long long v[8];
		if (strncmp(line, "cpu", 3) || line[3] < '0' || line[3] > '9')
			continue;	/* the "cpu " total line */
		if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu,
			   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 9)
			out("C,%s,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n", phase, cpu,
			    v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
	}
	if (f)
		fclose(f);
}

static int marker_fd = -1;

static void mark(const char *what)
{
	if (marker_fd >= 0 && write(marker_fd, what, strlen(what)) < 0)
		marker_fd = -1;
}

/* --------------------------------------------------------------- load gen -- */
struct conn { int fd; int busy; uint64_t t_ref; uint64_t id; };

static void on_signal(int sig)
{
	stop_sig = sig;
}

static void kill_workers(void)
{
	for (int i = 0; i < nworkers; i++)
		if (workers[i] > 0)
			kill(workers[i], SIGKILL);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void usage(void)
{
	fprintf(stderr, "usage: prefork --mode sat|rate [--rate R] [--workers N] [--pin 0|1] "
		"[--policy normal|batch] [--slice-ns NS] [--all-tasks 0|1] [--ws-bytes B] "
		"[--lookups L] [--warmup-ms MS] [--duration-ms MS] [--seed S] [--marker PATH]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *mode = NULL;
	ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i];
		if (i + 1 >= argc)
			usage();
		const char *v = argv[++i];
		if (!strcmp(o, "--mode"))
			mode = v;
		else if (!strcmp(o, "--rate")) {
			char *end;
			rate = strtod(v, &end);
			if (*end || end == v || !(rate > 0) || rate > 1e7)
				fail("--rate must be a number in (0, 1e7], got '%s'", v);
		} else if (!strcmp(o, "--workers"))
			nworkers = (int)parse_long(o, v, 1, MAXW);
		else if (!strcmp(o, "--pin"))
			pin = (int)parse_long(o, v, 0, 1);
		else if (!strcmp(o, "--policy")) {
			if (!strcmp(v, "batch"))
				policy_batch = 1;
			else if (strcmp(v, "normal"))
				fail("--policy must be normal or batch, got '%s'", v);
		} else if (!strcmp(o, "--slice-ns"))
			slice_ns = parse_long(o, v, 0, 100000000);
		else if (!strcmp(o, "--all-tasks"))
			all_tasks = (int)parse_long(o, v, 0, 1);
		else if (!strcmp(o, "--ws-bytes"))
			ws_bytes = parse_long(o, v, 4096, 1L << 32);
		else if (!strcmp(o, "--lookups"))
			lookups = parse_long(o, v, 2, 100000000);
		else if (!strcmp(o, "--warmup-ms"))
			warmup_ms = parse_long(o, v, 0, 600000);
		else if (!strcmp(o, "--duration-ms"))
			duration_ms = parse_long(o, v, 10, 600000);
		else if (!strcmp(o, "--seed"))
			seed = parse_long(o, v, 0, 1L << 30);
		else if (!strcmp(o, "--marker"))
			marker = v;
		else
			fail("unknown option '%s'", o);
	}
	if (!mode)
		fail("%s", "--mode is required (sat or rate)");
	if (!strcmp(mode, "rate"))
		mode_rate = 1;
	else if (strcmp(mode, "sat"))
		fail("--mode must be sat or rate, got '%s'", mode);
	if (mode_rate && !(rate > 0))
		fail("%s", "--mode rate needs --rate");
	if (marker) {
		marker_fd = open(marker, O_WRONLY | O_CLOEXEC);
		if (marker_fd < 0)
			fail_errno(marker);
	}
	private_net();

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_NAME, "pf-loadgen");
	main_tid = (pid_t)syscall(SYS_gettid);

	/* sockets: TCP listener for the workers, UDP echo for the backend */
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, MAXW) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &al) != 0)
		fail_errno("listen socket");
	udp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in ub = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t ubl = sizeof ub;
	if (udp_fd < 0 || bind(udp_fd, (struct sockaddr *)&ub, sizeof ub) != 0 ||
	    getsockname(udp_fd, (struct sockaddr *)&ub, &ubl) != 0)
		fail_errno("backend socket");

	int ready[2];
	if (pipe(ready) != 0)
		fail_errno("pipe");
	for (int i = 0; i < nworkers; i++) {
		pid_t p = fork();
		if (p < 0) {
			kill_workers();
			fail_errno("fork");
		}
		if (p == 0) {
			close(ready[0]);
			worker(i, lfd, ntohs(ub.sin_port), ready[1]);
		}
		workers[i] = p;
	}
	close(ready[1]);
	for (int i = 0; i < nworkers; i++) {
		char c;
		if (read(ready[0], &c, 1) != 1) {
			kill_workers();
			fail("%s", "a worker died before it was ready");
		}
	}
	close(ready[0]);
	if (all_tasks)
		apply_sched();
	pthread_t bt;
	if (pthread_create(&bt, NULL, backend, NULL) != 0) {
		kill_workers();
		fail("%s", "pthread_create failed");
	}

	struct conn conns[MAXW];
	int ep = epoll_create1(EPOLL_CLOEXEC);
	for (int i = 0; i < nworkers; i++) {
		int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) != 0) {
			kill_workers();
			fail_errno("connect");
		}
		int on = 1;
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
		conns[i] = (struct conn){.fd = c};
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
		epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
	}
	while (!backend_tid && !stop_sig)
		sched_yield();

	/* latencies of requests completed inside the window */
	size_t cap = 1 << 16, nlat = 0;
	uint64_t *lat = malloc(cap * sizeof *lat);
	/* open-loop queue of scheduled send times (ring buffer) */
	size_t qcap = 1 << 20, qhead = 0, qlen = 0;
	uint64_t *queue = malloc(qcap * sizeof *queue);
	if (!lat || !queue) {
		kill_workers();
		fail_errno("malloc");
	}
	uint64_t t0 = now_ns();
	uint64_t w_start = t0 + (uint64_t)warmup_ms * 1000000ull;
	uint64_t w_end = w_start + (uint64_t)duration_ms * 1000000ull;
	uint64_t period = mode_rate ? (uint64_t)(1e9 / rate) : 0, next_send = t0;
	uint64_t sent = 0, done_window = 0, issued_window = 0, id = 0;
	long long queue_max = 0, dropped = 0;
	int in_window = 0, finished = 0, rr = 0;

	while (!stop_sig) {
		uint64_t now = now_ns();
		if (!in_window && now >= w_start) {
			snapshot("start");
			mark("pf_window_start");
			in_window = 1;
		}
		if (in_window && !finished && now >= w_end) {
			snapshot("end");
			mark("pf_window_end");
			finished = 1;
			break;
		}
		if (mode_rate) {
			while (next_send <= now) {
				if (qlen < qcap) {
					queue[(qhead + qlen) % qcap] = next_send;
					qlen++;
				} else
					dropped++;
				next_send += period;
			}
			if ((long long)qlen > queue_max)
				queue_max = (long long)qlen;
		}
		int first = rr;
		for (int k = 0; k < nworkers; k++) {
			int i = (first + k) % nworkers;	/* round robin over idle connections */
			if (conns[i].busy)
				continue;
			uint64_t ref;
			if (mode_rate) {
				if (!qlen)
					break;
				ref = queue[qhead];
				qhead = (qhead + 1) % qcap;
				qlen--;
			} else
				ref = now_ns();
			uint64_t msg[2] = {++id * 2654435761ull, 0};
			if (write_full(conns[i].fd, msg, MSG) != 0) {
				kill_workers();
				fail_errno("send request");
			}
			conns[i].busy = 1;
			rr = (i + 1) % nworkers;
			conns[i].t_ref = ref;
			conns[i].id = msg[0];
			sent++;
			if (in_window)
				issued_window++;
		}
		/* sleep until a response, the next scheduled send or the window's
		 * edge, with nanosecond resolution (epoll_wait's milliseconds would
		 * make the open loop spin below 1 ms between sends) */
		uint64_t deadline = in_window ? w_end : w_start;
		if (mode_rate && next_send < deadline)
			deadline = next_send;
		uint64_t now2 = now_ns();
		uint64_t wait = deadline > now2 ? deadline - now2 : 0;
		struct timespec tmo = {.tv_sec = (time_t)(wait / 1000000000ull),
				       .tv_nsec = (long)(wait % 1000000000ull)};
		struct epoll_event evs[MAXW];
		int ne = epoll_pwait2(ep, evs, MAXW, &tmo, NULL);
		if (ne < 0 && errno != EINTR) {
			kill_workers();
			fail_errno("epoll_wait");
		}
		for (int k = 0; k < ne; k++) {
			int i = (int)evs[k].data.u32;
			uint64_t resp[2];
			if (read_full(conns[i].fd, resp, MSG) != 1) {
				kill_workers();
				fail("%s", "a worker closed its connection");
			}
			uint64_t t = now_ns();
			conns[i].busy = 0;
			if (in_window && t < w_end) {
				done_window++;
				if (nlat == cap) {
					cap *= 2;
					lat = realloc(lat, cap * sizeof *lat);
					if (!lat) {
						kill_workers();
						fail_errno("realloc");
					}
				}
				lat[nlat++] = t - conns[i].t_ref;
			}
		}
	}
	if (stop_sig) {
		kill_workers();
		fprintf(stderr, "prefork: interrupted by signal %d\n", (int)stop_sig);
		return 130;
	}
	/* drain: close our ends; each worker sees EOF after its current request */
	for (int i = 0; i < nworkers; i++)
		close(conns[i].fd);
	out("R_header=idx,pid,utime_us,stime_us,nvcsw,nivcsw\n");
	for (int i = 0; i < nworkers; i++) {
		int st;
		struct rusage ru;
		if (wait4(workers[i], &st, 0, &ru) == workers[i])
			out("R,%d,%d,%ld,%ld,%ld,%ld\n", i, workers[i],
			    ru.ru_utime.tv_sec * 1000000L + ru.ru_utime.tv_usec,
			    ru.ru_stime.tv_sec * 1000000L + ru.ru_stime.tv_usec, ru.ru_nvcsw, ru.ru_nivcsw);
		workers[i] = 0;
	}

	qsort(lat, nlat, sizeof *lat, cmp_u64);
	/* bin b holds [10^(b/20), 10^((b+1)/20)) ns; edges by repeated
	 * multiplication, so no libm is needed */
	static double edge[401];
	edge[0] = 1.0;
	for (int b = 1; b <= 400; b++)
		edge[b] = edge[b - 1] * 1.1220184543019634;	/* 10^(1/20) */
	long hist[400] = {0};
	double sum = 0;
	for (size_t i = 0, b = 0; i < nlat; i++) {	/* lat is sorted: walk the edges */
		sum += (double)lat[i];
		while (b < 399 && (double)lat[i] >= edge[b + 1])
			b++;
		hist[b]++;
	}
	for (int b = 0; b < 400; b++)
		if (hist[b])
			out("H,%d,%ld\n", b, hist[b]);
#define PCT(p) (nlat ? lat[(size_t)((p) * (double)(nlat - 1) + 0.5)] : 0)
	printf("mode=%s\nworkers=%d\nncpu=%d\npin=%d\npolicy=%s\nslice_ns=%ld\nall_tasks=%d\n"
	       "ws_bytes=%ld\nnodes=%ld\nlookups=%ld\nrate=%.3f\nwarmup_ms=%ld\nduration_ms=%ld\n",
	       mode, nworkers, ncpu, pin, policy_batch ? "batch" : "normal", slice_ns, all_tasks,
	       ws_bytes, ws_bytes / NODE, lookups, rate, warmup_ms, duration_ms);
	printf("window_ns=%llu\ncompleted=%llu\nissued=%llu\nsent_total=%llu\nqueue_max=%lld\n"
	       "dropped=%lld\nlat_n=%zu\nlat_mean_ns=%.0f\nlat_p50_ns=%llu\nlat_p90_ns=%llu\n"
	       "lat_p99_ns=%llu\nlat_p999_ns=%llu\nlat_max_ns=%llu\n",
	       (unsigned long long)(w_end - w_start), (unsigned long long)done_window,
	       (unsigned long long)issued_window, (unsigned long long)sent, queue_max, dropped, nlat,
	       nlat ? sum / (double)nlat : 0.0, (unsigned long long)PCT(0.50),
	       (unsigned long long)PCT(0.90), (unsigned long long)PCT(0.99),
	       (unsigned long long)PCT(0.999), (unsigned long long)(nlat ? lat[nlat - 1] : 0));
	fwrite(outbuf, 1, outlen, stdout);
	printf("end=ok\n");
	return 0;
}
