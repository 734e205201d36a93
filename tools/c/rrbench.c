/* rrbench: a minimal request/response latency harness (UDP or TCP).
 *
 * Unlike netperf's omni RR test, which folds every transaction into a
 * histogram of integer microseconds, the client here keeps every single
 * transaction's latency in nanoseconds (CLOCK_MONOTONIC), so that the whole
 * distribution can be analysed afterwards.
 *
 *   rrbench server -P udp|tcp [-b ADDR] [-p PORT] [-q REQ] [-r RESP]
 *       binds (port 0 = any free port), prints "ready PORT" on stdout, then
 *       answers every REQ-byte request with a RESP-byte response until killed
 *       (TCP: until the client closes its connection).
 *
 *   rrbench client -P udp|tcp -H ADDR -p PORT [-l SECONDS] [-w WARMUP_SECONDS]
 *                  [-q REQ] [-r RESP] -o FILE
 *       runs transactions for WARMUP seconds without recording, then for
 *       SECONDS while recording.  FILE receives two arrays back to back:
 *       uint32 latency_ns[n] and uint16 start_phase_ns[n] (the start time's
 *       nanoseconds within its microsecond, used to model netperf's
 *       microsecond timestamps).  The last stdout line is
 *       "n=N lost=L elapsed_ns=E".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int is_tcp;
static const char *addr = "127.0.0.1";
static int port;
static double seconds = 1.0, warmup = 0.2;
static size_t req_size = 1, resp_size = 1;
static const char *outfile;

static void die(const char *what)
{
	fprintf(stderr, "rrbench: %s: %s\n", what, strerror(errno));
	exit(2);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Read exactly len bytes from a stream socket (TCP may split a message). */
static int read_full(int fd, char *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = recv(fd, buf + got, len - got, 0);
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

static int write_full(int fd, const char *buf, size_t len)
{
	size_t put = 0;
	while (put < len) {
		ssize_t w = send(fd, buf + put, len - put, 0);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		put += (size_t)w;
	}
	return 0;
}

static struct sockaddr_in make_addr(const char *a, int p)
{
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)p);
	if (inet_pton(AF_INET, a, &sa.sin_addr) != 1) {
		fprintf(stderr, "rrbench: %s is not an IPv4 address\n", a);
		exit(2);
	}
	return sa;
}

static int run_server(void)
{
	struct sockaddr_in sa = make_addr(addr, port);
	socklen_t sl = sizeof(sa);
	int one = 1;
	int fd = socket(AF_INET, is_tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("bind");
	if (is_tcp && listen(fd, 4) < 0)
		die("listen");
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
		die("getsockname");
	printf("ready %d\n", ntohs(sa.sin_port));
	fflush(stdout);

	size_t bufsz = (req_size > resp_size ? req_size : resp_size) + 1;
	char *buf = calloc(1, bufsz);
	if (!buf)
		die("calloc");
	if (is_tcp) {
		for (;;) {
			int c = accept(fd, NULL, NULL);
			if (c < 0) {
				if (errno == EINTR)
					continue;
				die("accept");
			}
			for (;;) {
				int r = read_full(c, buf, req_size);
				if (r <= 0)
					break;
				if (write_full(c, buf, resp_size) < 0)
					break;
			}
			close(c);
		}
	}
	for (;;) {
		struct sockaddr_in peer;
		socklen_t pl = sizeof(peer);
		ssize_t r = recvfrom(fd, buf, bufsz, 0, (struct sockaddr *)&peer, &pl);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			die("recvfrom");
		}
		if (sendto(fd, buf, resp_size, 0, (struct sockaddr *)&peer, pl) < 0 && errno != EINTR)
			die("sendto");
	}
	return 0;
}

static int run_client(void)
{
	if (!outfile) {
		fprintf(stderr, "rrbench: client needs -o FILE\n");
		return 2;
	}
	struct sockaddr_in sa = make_addr(addr, port);
	int fd = socket(AF_INET, is_tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
	if (fd < 0)
		die("socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
	if (!is_tcp) {
		/* a lost datagram must not hang the run: give up on it after 1 s */
		struct timeval tv = {1, 0};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	size_t bufsz = (req_size > resp_size ? req_size : resp_size) + 1;
	char *buf = calloc(1, bufsz);
	size_t cap = 1 << 20, n = 0;
	uint32_t *lat = malloc(cap * sizeof(*lat));
	uint16_t *phase = malloc(cap * sizeof(*phase));
	if (!buf || !lat || !phase)
		die("malloc");
	uint64_t lost = 0;
	uint64_t t_start = now_ns();
	uint64_t t_rec = t_start + (uint64_t)(warmup * 1e9);
	uint64_t t_end = t_rec + (uint64_t)(seconds * 1e9);
	uint64_t t0;
	while ((t0 = now_ns()) < t_end) {
		int ok;
		if (is_tcp) {
			if (write_full(fd, buf, req_size) < 0)
				die("send");
			ok = read_full(fd, buf, resp_size);
			if (ok == 0) {
				fprintf(stderr, "rrbench: server closed the connection\n");
				return 2;
			}
			if (ok < 0)
				die("recv");
		} else {
			if (send(fd, buf, req_size, 0) < 0)
				die("send");
			ssize_t r;
			do
				r = recv(fd, buf, bufsz, 0);
			while (r < 0 && errno == EINTR);
			if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				lost++;
				continue;
			}
			if (r < 0)
				die("recv");
		}
		uint64_t t1 = now_ns();
		if (t0 < t_rec)
			continue; /* warm-up transaction */
		if (n == cap) {
			cap *= 2;
			lat = realloc(lat, cap * sizeof(*lat));
			phase = realloc(phase, cap * sizeof(*phase));
			if (!lat || !phase)
				die("realloc");
		}
		uint64_t d = t1 - t0;
		lat[n] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		phase[n] = (uint16_t)(t0 % 1000);
		n++;
	}
	uint64_t elapsed = now_ns() - t_rec;
	close(fd);
	FILE *f = fopen(outfile, "wb");
	if (!f)
		die(outfile);
	if (fwrite(lat, sizeof(*lat), n, f) != n || fwrite(phase, sizeof(*phase), n, f) != n)
		die("fwrite");
	if (fclose(f) != 0)
		die("fclose");
	printf("n=%zu lost=%llu elapsed_ns=%llu\n", n, (unsigned long long)lost,
	       (unsigned long long)elapsed);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: rrbench server|client -P udp|tcp [-H addr] [-b addr] [-p port]\n"
			"       [-l seconds] [-w warmup] [-q req] [-r resp] [-o file]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	int server = !strcmp(argv[1], "server");
	if (!server && strcmp(argv[1], "client"))
		usage();
	int opt;
	optind = 2;
	while ((opt = getopt(argc, argv, "P:H:b:p:l:w:q:r:o:")) != -1) {
		switch (opt) {
		case 'P':
			if (!strcmp(optarg, "tcp"))
				is_tcp = 1;
			else if (strcmp(optarg, "udp"))
				usage();
			break;
		case 'H':
		case 'b':
			addr = optarg;
			break;
		case 'p':
			port = atoi(optarg);
			break;
		case 'l':
			seconds = atof(optarg);
			break;
		case 'w':
			warmup = atof(optarg);
			break;
		case 'q':
			req_size = (size_t)atol(optarg);
			break;
		case 'r':
			resp_size = (size_t)atol(optarg);
			break;
		case 'o':
			outfile = optarg;
			break;
		default:
			usage();
		}
	}
	if (req_size < 1 || resp_size < 1 || seconds <= 0 || warmup < 0)
		usage();
	return server ? run_server() : run_client();
}
