/*
 * kvmtsc: guest/host TSC alignment through the raw KVM API (no QEMU).
 *
 * Used by tools/tsc_alignment.py. Three subcommands, all printing CSV-ish
 * lines on stdout that the Python side parses:
 *
 *   kvmtsc facts [--freq-ms MS] [--freq-reps N]
 *       cpuid facts (hypervisor signature, invariant TSC, KVM timing leaf)
 *       and the TSC frequency measured against CLOCK_MONOTONIC_RAW.
 *       lines: "fact,<key>,<value>" and "freq,<rep>,<ns>,<cycles>"
 *
 *   kvmtsc skew --cpus A,B --rounds R --iters N
 *       cross-CPU TSC ping-pong. One thread per CPU shares a cache line.
 *       The initiator reads t1, hands over, the responder reads t2 and hands
 *       back, the initiator reads t3. With d = TSC(responder) - TSC(initiator)
 *       causality gives  t2 - t3 < d < t2 - t1  for every exchange.
 *       lines: "pp,<dir>,<round>,<i>,<t2-t1>,<t3-t2>"   (dir 0: A->B, 1: B->A)
 *
 *   kvmtsc run --cpus A[,B] --rounds R --samples N --warmup W
 *              --variants default,msr,attr [--pristine N] [--interactive 1]
 *       creates a VM and one vCPU, runs a real-mode guest that executes
 *       RDTSC, stores EDX:EAX in guest memory and does OUT 0x10
 *       (one I/O exit per guest reading). Every KVM_RUN is bracketed by two
 *       host LFENCE;RDTSC;LFENCE reads. Between blocks the guest TSC offset is
 *       changed through KVM_SET_DEVICE_ATTR (KVM_VCPU_TSC_CTRL /
 *       KVM_VCPU_TSC_OFFSET) or through a host-initiated KVM_SET_MSRS write of
 *       IA32_TSC, and read back with KVM_GET_DEVICE_ATTR.
 *       lines: "meta,<key>,<value>"
 *              "op,<seq>,<kind>,<variant>,<round>,<tsc_before>,<tsc_after>,<requested>,<readback>"
 *              "s,<variant>,<round>,<cpu>,<idx>,<warmup>,<before>,<guest>,<after>"
 *       With --interactive 1, R is a maximum: after each round it prints
 *       "round_done,<round>" and reads a line from stdin; "next" runs another
 *       round, anything else (or end of file) ends the run. The caller decides
 *       when the medians are tight enough (tools.stats.Repetition).
 *
 * Every fd is closed before exit; the kernel destroys the VM when the last
 * fd goes. PR_SET_PDEATHSIG makes the helper die with its parent.
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define GUEST_MEM   0x10000
#define GUEST_CODE  0x1000
#define GUEST_DATA  0x2000
#define GUEST_PORT  0x10
#define MSR_IA32_TSC 0x10

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static void die(const char *what)
{
	fprintf(stderr, "kvmtsc: %s: %s\n", what, strerror(errno));
	exit(2);
}

static inline uint64_t rdtsc_ordered(void)
{
	uint32_t lo, hi;
	__asm__ volatile("lfence\n\trdtsc\n\tlfence" : "=a"(lo), "=d"(hi) :: "memory");
	return ((uint64_t)hi << 32) | lo;
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		die("sched_setaffinity");
}

static int parse_list(const char *s, int *out, int max)
{
	int n = 0;
	char *copy = strdup(s), *tok, *save = NULL;
	for (tok = strtok_r(copy, ",", &save); tok && n < max; tok = strtok_r(NULL, ",", &save))
		out[n++] = atoi(tok);
	free(copy);
	return n;
}

/* ---------------------------------------------------------------- facts -- */

static uint64_t ns_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int cmd_facts(int freq_ms, int reps)
{
	unsigned a, b, c, d;
	char sig[13] = {0};

	__cpuid(0x1, a, b, c, d);
	printf("fact,cpuid_hypervisor_bit,%u\n", (c >> 31) & 1);
	if ((c >> 31) & 1) {
		__cpuid(0x40000000, a, b, c, d);
		memcpy(sig, &b, 4); memcpy(sig + 4, &c, 4); memcpy(sig + 8, &d, 4);
		for (int i = 0; i < 12; i++)
			if (sig[i] && (sig[i] < 32 || sig[i] > 126 || sig[i] == ','))
				sig[i] = '?';
		printf("fact,hypervisor_signature,%s\n", sig);
		printf("fact,hypervisor_max_leaf,0x%x\n", a);
		if (a >= 0x40000010) {
			unsigned ta, tb, tc, td;
			__cpuid(0x40000010, ta, tb, tc, td);
			printf("fact,cpuid_40000010_tsc_khz,%u\n", ta);
		}
	}
	__cpuid(0x80000000, a, b, c, d);
	if (a >= 0x80000007) {
		__cpuid(0x80000007, a, b, c, d);
		printf("fact,cpuid_invariant_tsc,%u\n", (d >> 8) & 1);
	}
	__cpuid(0x0, a, b, c, d);
	if (a >= 0x15) {
		unsigned ea, eb, ec, ed;
		__cpuid(0x15, ea, eb, ec, ed);
		printf("fact,cpuid_15_ratio,%u/%u\n", eb, ea);
		printf("fact,cpuid_15_crystal_hz,%u\n", ec);
	}
	fflush(stdout);
	for (int r = 0; r < reps && !stop_flag; r++) {
		uint64_t n0 = ns_now(), t0 = rdtsc_ordered();
		struct timespec req = { freq_ms / 1000, (long)(freq_ms % 1000) * 1000000L };
		nanosleep(&req, NULL);
		uint64_t n1 = ns_now(), t1 = rdtsc_ordered();
		printf("freq,%d,%llu,%llu\n", r, (unsigned long long)(n1 - n0),
		       (unsigned long long)(t1 - t0));
	}
	return stop_flag ? 130 : 0;
}

/* ----------------------------------------------------------------- skew -- */

struct pp {
	_Alignas(64) atomic_ulong seq;
	int cpu_init, cpu_resp;
	long iters;
	uint64_t *t1, *t2, *t3;
};

static void *responder(void *arg)
{
	struct pp *p = arg;
	pin(p->cpu_resp);
	for (long i = 0; i < p->iters; i++) {
		unsigned long want = 2 * i + 1;
		while (atomic_load_explicit(&p->seq, memory_order_acquire) != want)
			__builtin_ia32_pause();
		p->t2[i] = rdtsc_ordered();
		atomic_store_explicit(&p->seq, want + 1, memory_order_release);
	}
	return NULL;
}

static void pingpong(struct pp *p)
{
	pthread_t th;
	atomic_store(&p->seq, 0);
	if (pthread_create(&th, NULL, responder, p) != 0)
		die("pthread_create");
	pin(p->cpu_init);
	for (long i = 0; i < p->iters; i++) {
		unsigned long go = 2 * i + 1;
		p->t1[i] = rdtsc_ordered();
		atomic_store_explicit(&p->seq, go, memory_order_release);
		while (atomic_load_explicit(&p->seq, memory_order_acquire) != go + 1)
			__builtin_ia32_pause();
		p->t3[i] = rdtsc_ordered();
	}
	pthread_join(th, NULL);
}

static int cmd_skew(int *cpus, int ncpu, int rounds, long iters)
{
	if (ncpu < 2) {
		fprintf(stderr, "kvmtsc: skew needs two CPUs (--cpus A,B)\n");
		return 2;
	}
	struct pp *p = aligned_alloc(64, sizeof(*p));
	memset(p, 0, sizeof(*p));
	p->iters = iters;
	p->t1 = calloc(iters, 8); p->t2 = calloc(iters, 8); p->t3 = calloc(iters, 8);
	if (!p->t1 || !p->t2 || !p->t3)
		die("calloc");
	for (int r = 0; r < rounds && !stop_flag; r++) {
		for (int dir = 0; dir < 2 && !stop_flag; dir++) {
			p->cpu_init = dir ? cpus[1] : cpus[0];
			p->cpu_resp = dir ? cpus[0] : cpus[1];
			pingpong(p);
			for (long i = 0; i < iters; i++)
				printf("pp,%d,%d,%ld,%lld,%lld\n", dir, r, i,
				       (long long)(p->t2[i] - p->t1[i]),
				       (long long)(p->t3[i] - p->t2[i]));
		}
	}
	free(p->t1); free(p->t2); free(p->t3); free(p);
	return stop_flag ? 130 : 0;
}

/* ------------------------------------------------------------------ run -- */

struct vm {
	int kvm, vm, vcpu;
	uint8_t *mem;
	struct kvm_run *run;
	size_t run_size;
	int seq;
	uint64_t created_tsc;
};

/*
 * No LFENCE before the guest's RDTSC: KVM's instruction emulator (used when a
 * vendor module such as PVM runs real-mode code by emulation) does not
 * implement it, and on VMX/SVM the few cycles of reordering it would prevent
 * are far below the width of a KVM_RUN bracket.
 */
static const uint8_t guest_code[] = {
	0x90, 0x90, 0x90,                   /* 1000: nop x3 (see below)     */
	0x0f, 0x31,                         /* 1003: rdtsc                  */
	0x66, 0xa3, 0x00, 0x20,             /* 1005: mov [0x2000], eax      */
	0x66, 0x89, 0x16, 0x04, 0x20,       /* 1009: mov [0x2004], edx      */
	0xe6, GUEST_PORT,                   /* 100e: out 0x10, al           */
	0xeb, 0xee,                         /* 1010: jmp 0x1000             */
};

static void vm_close(struct vm *v)
{
	if (v->run && v->run != MAP_FAILED)
		munmap(v->run, v->run_size);
	if (v->vcpu >= 0) close(v->vcpu);
	if (v->vm >= 0) close(v->vm);
	if (v->kvm >= 0) close(v->kvm);
	if (v->mem && v->mem != MAP_FAILED)
		munmap(v->mem, GUEST_MEM);
	v->run = NULL; v->mem = NULL; v->vcpu = v->vm = v->kvm = -1;
}

static int get_offset(struct vm *v, uint64_t *out)
{
	struct kvm_device_attr a = { .flags = 0, .group = KVM_VCPU_TSC_CTRL,
				     .attr = KVM_VCPU_TSC_OFFSET, .addr = (uint64_t)(uintptr_t)out };
	return ioctl(v->vcpu, KVM_GET_DEVICE_ATTR, &a);
}

static void log_op(struct vm *v, const char *kind, const char *variant, int round,
		   uint64_t t0, uint64_t t1, uint64_t requested)
{
	uint64_t rb = 0;
	if (get_offset(v, &rb) != 0)
		die("KVM_GET_DEVICE_ATTR(KVM_VCPU_TSC_OFFSET)");
	printf("op,%d,%s,%s,%d,%llu,%llu,%llu,%llu\n", v->seq++, kind, variant, round,
	       (unsigned long long)t0, (unsigned long long)t1,
	       (unsigned long long)requested, (unsigned long long)rb);
}

static void set_offset(struct vm *v, uint64_t off, const char *variant, int round)
{
	struct kvm_device_attr a = { .flags = 0, .group = KVM_VCPU_TSC_CTRL,
				     .attr = KVM_VCPU_TSC_OFFSET, .addr = (uint64_t)(uintptr_t)&off };
	uint64_t t0 = rdtsc_ordered();
	if (ioctl(v->vcpu, KVM_SET_DEVICE_ATTR, &a) != 0)
		die("KVM_SET_DEVICE_ATTR(KVM_VCPU_TSC_OFFSET)");
	uint64_t t1 = rdtsc_ordered();
	log_op(v, "set_attr", variant, round, t0, t1, off);
}

static void set_tsc_msr(struct vm *v, const char *kind, const char *variant, int round)
{
	struct { struct kvm_msrs hdr; struct kvm_msr_entry e; } m;
	memset(&m, 0, sizeof(m));
	m.hdr.nmsrs = 1;
	m.e.index = MSR_IA32_TSC;
	uint64_t t0 = rdtsc_ordered();
	m.e.data = t0;            /* "make the guest TSC read what the host reads now" */
	int r = ioctl(v->vcpu, KVM_SET_MSRS, &m);
	uint64_t t1 = rdtsc_ordered();
	if (r != 1)
		die("KVM_SET_MSRS(IA32_TSC)");
	/* "requested" holds the TSC value written (the host TSC at t0) */
	log_op(v, kind, variant, round, t0, t1, t0);
}

static void vm_open(struct vm *v)
{
	v->kvm = v->vm = v->vcpu = -1;
	v->kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (v->kvm < 0)
		die("open /dev/kvm");
	int api = ioctl(v->kvm, KVM_GET_API_VERSION, 0);
	printf("meta,api_version,%d\n", api);
	int cap = ioctl(v->kvm, KVM_CHECK_EXTENSION, KVM_CAP_VCPU_ATTRIBUTES);
	printf("meta,cap_vcpu_attributes,%d\n", cap);
	printf("meta,cap_tsc_control,%d\n", ioctl(v->kvm, KVM_CHECK_EXTENSION, KVM_CAP_TSC_CONTROL));
	printf("meta,cap_get_tsc_khz,%d\n", ioctl(v->kvm, KVM_CHECK_EXTENSION, KVM_CAP_GET_TSC_KHZ));
	v->run_size = ioctl(v->kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	v->vm = ioctl(v->kvm, KVM_CREATE_VM, 0);
	if (v->vm < 0)
		die("KVM_CREATE_VM");
	v->mem = mmap(NULL, GUEST_MEM, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (v->mem == MAP_FAILED)
		die("mmap guest memory");
	memcpy(v->mem + GUEST_CODE, guest_code, sizeof(guest_code));
	struct kvm_userspace_memory_region reg = {
		.slot = 0, .guest_phys_addr = 0, .memory_size = GUEST_MEM,
		.userspace_addr = (uint64_t)(uintptr_t)v->mem,
	};
	if (ioctl(v->vm, KVM_SET_USER_MEMORY_REGION, &reg) < 0)
		die("KVM_SET_USER_MEMORY_REGION");
	uint64_t t0 = rdtsc_ordered();
	v->vcpu = ioctl(v->vm, KVM_CREATE_VCPU, 0);
	uint64_t t1 = rdtsc_ordered();
	if (v->vcpu < 0)
		die("KVM_CREATE_VCPU");
	v->created_tsc = t0 + (t1 - t0) / 2;
	log_op(v, "create_vcpu", "created", -1, t0, t1, 0);
	int khz = ioctl(v->vcpu, KVM_GET_TSC_KHZ, 0);
	printf("meta,kvm_get_tsc_khz,%d\n", khz);
	v->run = mmap(NULL, v->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, v->vcpu, 0);
	if (v->run == MAP_FAILED)
		die("mmap kvm_run");
	struct kvm_sregs sregs;
	if (ioctl(v->vcpu, KVM_GET_SREGS, &sregs) < 0)
		die("KVM_GET_SREGS");
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	sregs.ds.base = 0;
	sregs.ds.selector = 0;
	if (ioctl(v->vcpu, KVM_SET_SREGS, &sregs) < 0)
		die("KVM_SET_SREGS");
	struct kvm_regs regs;
	memset(&regs, 0, sizeof(regs));
	regs.rip = GUEST_CODE;
	regs.rflags = 0x2;
	if (ioctl(v->vcpu, KVM_SET_REGS, &regs) < 0)
		die("KVM_SET_REGS");
}

/* One KVM_RUN that must end in the guest's OUT: returns 0, or -1 on EINTR. */
static int one_sample(struct vm *v, uint64_t *before, uint64_t *guest, uint64_t *after)
{
	uint64_t b = rdtsc_ordered();
	int r = ioctl(v->vcpu, KVM_RUN, 0);
	uint64_t a = rdtsc_ordered();
	if (r < 0) {
		if (errno == EINTR)
			return -1;
		die("KVM_RUN");
	}
	if (v->run->exit_reason != KVM_EXIT_IO || v->run->io.port != GUEST_PORT) {
		fprintf(stderr, "kvmtsc: unexpected exit reason %u (port 0x%x, suberror %u)\n",
			v->run->exit_reason, v->run->io.port,
			v->run->exit_reason == KVM_EXIT_INTERNAL_ERROR ? v->run->internal.suberror : 0);
		exit(3);
	}
	uint64_t g;
	memcpy(&g, v->mem + GUEST_DATA, 8);
	*before = b; *guest = g; *after = a;
	return 0;
}

static int block(struct vm *v, const char *variant, int round, int cpu, int warmup, int samples)
{
	pin(cpu);
	for (int i = 0; i < warmup + samples; i++) {
		uint64_t b, g, a;
		if (stop_flag || one_sample(v, &b, &g, &a) < 0)
			return -1;
		printf("s,%s,%d,%d,%d,%d,%llu,%llu,%llu\n", variant, round, cpu,
		       i - warmup, i < warmup ? 1 : 0,
		       (unsigned long long)b, (unsigned long long)g, (unsigned long long)a);
	}
	return 0;
}

/* Interactive runs: the caller says after each round whether to go on. */
static int next_round_wanted(int round)
{
	char line[64];
	printf("round_done,%d\n", round);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 0;
	return strncmp(line, "next", 4) == 0;
}

static int cmd_run(int *cpus, int ncpu, int rounds, int samples, int warmup,
		   const char *variants_arg, int pristine, int interactive)
{
	struct vm v;
	memset(&v, 0, sizeof(v));
	v.kvm = v.vm = v.vcpu = -1;
	char vbuf[256];
	const char *variants[8];
	int nvar = 0;
	snprintf(vbuf, sizeof(vbuf), "%s", variants_arg);
	for (char *save = NULL, *t = strtok_r(vbuf, ",", &save); t && nvar < 8; t = strtok_r(NULL, ",", &save)) {
		if (strcmp(t, "default") && strcmp(t, "msr") && strcmp(t, "attr")) {
			fprintf(stderr, "kvmtsc: unknown variant %s (default, msr, attr)\n", t);
			return 2;
		}
		variants[nvar++] = t;
	}
	vm_open(&v);
	printf("meta,pid,%d\n", (int)getpid());
	uint64_t created = 0;
	if (get_offset(&v, &created) != 0)
		die("KVM_GET_DEVICE_ATTR");
	fflush(stdout);
	int rc = 0;
	/* The offset KVM chose at creation, untouched by us. */
	if (pristine > 0 && block(&v, "created", -1, cpus[0], warmup, pristine) < 0)
		rc = 130;
	/* "default" puts back the offset KVM chose at creation. If the API reads
	 * it back as 0 (a vendor module that drops offsets), use what KVM's
	 * creation path computes instead: 0 - host TSC at creation. */
	uint64_t dflt = created ? created : (uint64_t)0 - v.created_tsc;
	printf("meta,default_offset,%llu\n", (unsigned long long)dflt);
	printf("meta,default_offset_source,%s\n", created ? "readback" : "computed");
	for (int r = 0; r < rounds && !rc; r++) {
		for (int k = 0; k < nvar && !rc; k++) {
			const char *var = variants[(k + r) % nvar];  /* rotate the order */
			if (!strcmp(var, "default")) {
				set_offset(&v, dflt, var, r);
			} else if (!strcmp(var, "attr")) {
				set_offset(&v, 0, var, r);
			} else {
				/* step away first so the MSR write is not "matched" */
				set_offset(&v, dflt, var, r);
				set_tsc_msr(&v, "set_msr", var, r);
				/* a second write soon after: KVM's TSC matching
				 * treats it as a synchronization attempt */
				set_tsc_msr(&v, "set_msr_again", var, r);
			}
			for (int c = 0; c < ncpu && !rc; c++)
				if (block(&v, var, r, cpus[(c + r) % ncpu], warmup, samples) < 0)
					rc = 130;
			fflush(stdout);
		}
		if (interactive && !rc && r + 1 < rounds && !next_round_wanted(r))
			break;
	}
	fflush(stdout);
	vm_close(&v);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: kvmtsc facts|skew|run [options]\n");
		return 2;
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;       /* no SA_RESTART: KVM_RUN returns EINTR */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	setvbuf(stdout, NULL, _IOFBF, 1 << 20);

	int cpus[8] = {0}, ncpu = 1, rounds = 4, samples = 200, warmup = 20, pristine = 0;
	int interactive = 0;
	long iters = 2000;
	int freq_ms = 100, freq_reps = 5;
	const char *variants = "default,msr,attr";
	for (int i = 2; i < argc; i++) {
		const char *o = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (!val) { fprintf(stderr, "kvmtsc: %s needs a value\n", o); return 2; }
		if (!strcmp(o, "--cpus")) ncpu = parse_list(val, cpus, 8);
		else if (!strcmp(o, "--rounds")) rounds = atoi(val);
		else if (!strcmp(o, "--samples")) samples = atoi(val);
		else if (!strcmp(o, "--warmup")) warmup = atoi(val);
		else if (!strcmp(o, "--pristine")) pristine = atoi(val);
		else if (!strcmp(o, "--iters")) iters = atol(val);
		else if (!strcmp(o, "--variants")) variants = val;
		else if (!strcmp(o, "--freq-ms")) freq_ms = atoi(val);
		else if (!strcmp(o, "--freq-reps")) freq_reps = atoi(val);
		else if (!strcmp(o, "--interactive")) interactive = atoi(val);
		else { fprintf(stderr, "kvmtsc: unknown option %s\n", o); return 2; }
		i++;
	}
	int rc;
	if (!strcmp(argv[1], "facts"))
		rc = cmd_facts(freq_ms, freq_reps);
	else if (!strcmp(argv[1], "skew"))
		rc = cmd_skew(cpus, ncpu, rounds, iters);
	else if (!strcmp(argv[1], "run"))
		rc = cmd_run(cpus, ncpu, rounds, samples, warmup, variants, pristine, interactive);
	else {
		fprintf(stderr, "kvmtsc: unknown command %s\n", argv[1]);
		rc = 2;
	}
	fflush(stdout);
	return rc;
}
