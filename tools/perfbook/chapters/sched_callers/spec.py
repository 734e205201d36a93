"""sched_callers: what the chapter measures (shared by collect and analysis)."""
from __future__ import annotations

# tracer -> what it is. Each one counts the kernel stacks at a context switch (or at a call of
# schedule()), system-wide, while one workload runs; "none" is the untraced baseline of the
# probe effect.
TRACERS: dict[str, str] = {
    "none": "nothing armed (the baseline of the probe effect)",
    "ftrace_function": "function tracer in a private instance, set_ftrace_filter=schedule, "
                       "options/func_stack_trace",
    "ftrace_hist": "hist trigger on sched:sched_switch keyed on the kernel stack (in-kernel counting)",
    "ftrace_trigger": "`stacktrace` trigger on sched:sched_switch: one stack per switch into a "
                      "private instance's ring buffer",
    "bpftrace": "bpftrace: tracepoint:sched:sched_switch { @[kstack(N)] = count(); }",
    "perf": "perf record -a -g -e sched:sched_switch, then perf script",
    "dynevent": "fprobe or kprobe dynamic event on schedule with a stack trace",
}
DEFAULT_TRACERS = tuple(t for t in TRACERS if t != "none")

# workload -> what it does (collect builds the command line from the parameters)
WORKLOADS: dict[str, str] = {
    "sleep": "sleep 1 (the seed's first workload: an idle machine for one second)",
    "dd": "dd of a few MiB from /dev/zero to a scratch file with conv=fsync (a write and a flush)",
    "hackbench": "hackbench -g N from rt-tests (the seed's second workload: N groups of 20 "
                 "senders and 20 receivers over sockets)",
}
EXPERIMENT = "hackbench seconds"

# frames a tracer's own machinery puts above the scheduler: dropped before counting
TRACING_FRAMES = ("trace_event_raw_event_", "__traceiter_", "perf_trace_", "__bpf_trace_",
                  "bpf_trace_run", "__perf_event_overflow", "perf_tp_event", "event_triggers_call",
                  "trace_event_buffer_commit", "stacktrace_trigger", "__trace_stack")

# entry points into __schedule(): the function that called it
ENTRIES = {
    "schedule": "schedule(): a task blocks or yields (what the seed probed)",
    "schedule_idle": "schedule_idle(): the idle loop (do_idle) hands the CPU over, without schedule()",
    "__cond_resched": "cond_resched(): a voluntary preemption point, straight into __schedule",
    "preempt_schedule_irq": "preemption on return from an interrupt to kernel code",
    "preempt_schedule_common": "preempt_enable() found need_resched set",
    "preempt_schedule": "preempt_enable() found need_resched set",
    "preempt_schedule_notrace": "preempt_enable_notrace() found need_resched set",
    "schedule_rtlock": "a sleeping spinlock (PREEMPT_RT)",
}
