/*
 * probench: per-call cost of user-space trace points.
 *
 * It calls one "target" in a timed loop, in batches, and prints one CSV line
 * per batch (batch,iters,ns). The probes themselves (uprobe, uretprobe, perf,
 * BPF) are attached from outside by tools/trace_overhead.py; this program only
 * decides what each loop iteration calls:
 *
 *   none        call pb_ret, an empty function (the harness's own cost)
 *   syscall     write(2) of 9 bytes to /dev/null (the bare syscall path)
 *   marker      write(2) of 9 bytes to a trace_marker file (--marker PATH)
 *   marker_raw  write(2) of a 4-byte id + 4 bytes to trace_marker_raw (--marker)
 *   ret         call pb_ret      (probe it: its first instruction is `ret`,
 *                                 which x86 uprobes single-step out of line)
 *   push        call pb_push     (first instruction `push %rbp`, which x86
 *                                 uprobes emulate without single-stepping)
 *   nop5        call pb_nop5     (first instruction a 5-byte nop, which newer
 *                                 kernels may rewrite into a call)
 *
 * The three probe targets are written in assembly so that their first
 * instruction does not depend on the compiler or its flags.
 *
 * Usage: probench --target T [--iters N] [--batches B] [--warmup W]
 *                 [--cpu C] [--marker PATH]
 * Exit status 2 and one line on stderr for bad arguments.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void pb_ret(void);
void pb_push(void);
void pb_nop5(void);

__asm__(
    ".text\n"
    ".globl pb_ret\n.type pb_ret,@function\n.p2align 4\n"
    "pb_ret:\n\tret\n.size pb_ret,.-pb_ret\n"
    ".globl pb_push\n.type pb_push,@function\n.p2align 4\n"
    "pb_push:\n\tpush %rbp\n\tmov %rsp,%rbp\n\tpop %rbp\n\tret\n.size pb_push,.-pb_push\n"
    ".globl pb_nop5\n.type pb_nop5,@function\n.p2align 4\n"
    "pb_nop5:\n\t.byte 0x0f,0x1f,0x44,0x00,0x00\n\tret\n.size pb_nop5,.-pb_nop5\n");

static int out_fd = -1;
static const char text_msg[9] = "perfbook\n";
static struct { uint32_t id; uint32_t payload; } raw_msg = { 0x70620001u, 42u };

static void do_write_text(void)
{
    if (write(out_fd, text_msg, sizeof text_msg) < 0) {
        perror("probench: write");
        exit(1);
    }
}

static void do_write_raw(void)
{
    if (write(out_fd, &raw_msg, sizeof raw_msg) < 0) {
        perror("probench: write");
        exit(1);
    }
}

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t run_batch(void (*volatile fn)(void), long iters)
{
    uint64_t t0 = now_ns();
    for (long i = 0; i < iters; i++)
        fn();
    return now_ns() - t0;
}

static void die_usage(const char *msg)
{
    fprintf(stderr, "probench: %s\n", msg);
    exit(2);
}

static long parse_long(const char *s, const char *what, long min)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s must be an integer >= %ld (got '%s')", what, min, s);
        die_usage(buf);
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *target = NULL, *marker = NULL;
    long iters = 10000, batches = 10, warmup = 2, cpu = -1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            die_usage("every option takes a value");
        const char *v = argv[++i];
        if (!strcmp(a, "--target")) target = v;
        else if (!strcmp(a, "--iters")) iters = parse_long(v, "--iters", 1);
        else if (!strcmp(a, "--batches")) batches = parse_long(v, "--batches", 1);
        else if (!strcmp(a, "--warmup")) warmup = parse_long(v, "--warmup", 0);
        else if (!strcmp(a, "--cpu")) cpu = parse_long(v, "--cpu", -1);
        else if (!strcmp(a, "--marker")) marker = v;
        else {
            char buf[160];
            snprintf(buf, sizeof buf, "unknown option '%s'", a);
            die_usage(buf);
        }
    }
    if (!target)
        die_usage("--target is required (none, syscall, marker, marker_raw, ret, push, nop5)");

    void (*fn)(void) = NULL;
    if (!strcmp(target, "none") || !strcmp(target, "ret")) fn = pb_ret;
    else if (!strcmp(target, "push")) fn = pb_push;
    else if (!strcmp(target, "nop5")) fn = pb_nop5;
    else if (!strcmp(target, "syscall")) { fn = do_write_text; marker = "/dev/null"; }
    else if (!strcmp(target, "marker")) fn = do_write_text;
    else if (!strcmp(target, "marker_raw")) fn = do_write_raw;
    else {
        char buf[160];
        snprintf(buf, sizeof buf, "unknown target '%s'", target);
        die_usage(buf);
    }
    if (fn == do_write_text || fn == do_write_raw) {
        if (!marker)
            die_usage("this target needs --marker PATH");
        out_fd = open(marker, O_WRONLY);
        if (out_fd < 0) {
            fprintf(stderr, "probench: cannot open %s: %s\n", marker, strerror(errno));
            return 1;
        }
    }
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET((int)cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set)) {
            fprintf(stderr, "probench: cannot pin to CPU %ld: %s\n", cpu, strerror(errno));
            return 1;
        }
    }

    /* Cost of the two clock reads around a batch, amortised over iters later. */
    uint64_t timer = UINT64_MAX;
    for (int i = 0; i < 101; i++) {
        uint64_t t0 = now_ns(), t1 = now_ns();
        if (t1 - t0 < timer) timer = t1 - t0;
    }
    printf("# target=%s iters=%ld batches=%ld warmup=%ld cpu=%ld timer_ns=%llu\n",
           target, iters, batches, warmup, cpu, (unsigned long long)timer);
    for (long w = 0; w < warmup; w++)
        run_batch(fn, iters);
    printf("batch,iters,ns\n");
    for (long b = 0; b < batches; b++) {
        uint64_t ns = run_batch(fn, iters);
        printf("%ld,%ld,%llu\n", b, iters, (unsigned long long)ns);
    }
    fflush(stdout);
    if (out_fd >= 0)
        close(out_fd);
    return 0;
}
