"""What the experiment is: paths, protocols, pinning modes, the lab's addresses, the bins of
our histogram and the tolerances fixed in advance. No I/O."""
from __future__ import annotations

PATHS = ("loopback", "veth")
PROTOS = ("udp", "tcp")
PINS = ("none", "split", "same")
PIN_HELP = {"none": "no pinning (scheduler decides)",
            "split": "client on CPU 0, server on CPU 1",
            "same": "client and server both on CPU 1"}

VETH_NET = "198.18.7."          # RFC 2544 benchmarking range, only inside our namespaces
CLI_ADDR, SRV_ADDR = VETH_NET + "1", VETH_NET + "2"
# The loopback namespace's lo also carries this address (/32, nothing is sent to it): netperf
# resolves "127.0.0.1" with getaddrinfo(AI_ADDRCONFIG), and glibc (check_pf.c) then returns
# IPv4 results only where some IPv4 address other than 127.0.0.1 exists. The round trips
# still go from 127.0.0.1 to 127.0.0.1.
LO_EXTRA_ADDR = "198.18.6.1"
LATENCY_KEYS = ("MIN_LATENCY", "MEAN_LATENCY", "P50_LATENCY", "P90_LATENCY",
                "P99_LATENCY", "MAX_LATENCY", "STDDEV_LATENCY")

# histogram of our samples: log-spaced bins, this many per decade, from 0.1 us
HIST_PER_DECADE = 200
HIST_LO_US = 0.1

SCHED_PINS = ("same", "split")       # the pinning modes of the scheduler-tracepoint runs
SCHED_ROLES = ("server", "client")   # run_rrbench's pids order: sched_stage's rows per pin

CELL = ["host_id", "path", "proto", "pin"]
PCT_ORDER = ["P50", "P90", "P99", "P99.9", "max"]

# The stated tolerance of the cross-validation. netperf and rrbench are run on the same
# path but not on the same transactions, so the comparison allows:
#   q: netperf's own quantization at that value (one histogram bucket + 1 us for its
#      microsecond timestamps, see netperf_hist.bucket_width_us);
#   s: run-to-run variation and harness differences: REL_TOL of our value, or the range
#      of that percentile over the repetitions of either tool if that is wider (two tools
#      can't be expected to agree better than one tool agrees with itself).
REL_TOL = {"p50": 0.15, "p90": 0.15, "p99": 0.35}

RANK_RULE = ("netperf 2.7.0 src/netlib.c HIST_get_percentile: num = (int)(p * total); the "
             "percentile is interpolated inside the bucket holding the num-th smallest integer-us "
             "latency and truncated, so it lies in that bucket's [lower, upper] edges")
