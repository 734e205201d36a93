"""Chapter 'virtio_blk_iothread': the virtio-blk data plane of 2013 and the iothread that
replaced it. Does giving a virtio-blk disk its own I/O thread change what the guest gets, and
does the I/O really leave QEMU's main loop?

Each round boots one guest per variant (iothread off, on; order shuffled per round): the boot
is the unit of repetition. Both guests have an `-object iothread,id=io0`; only "on" attaches the
disk to it, and both have the same virtio-blk event_idx, recorded per boot. In each boot fio
runs its jobs once each (random and sequential, queue depth 1 and more; some again while the
host floods QEMU's main loop with QMP commands), then, in the first bonnie_rounds rounds,
bonnie++ as in the seed, with a file of at least twice the guest's RAM. Around every job the
host samples the CPU time of each of QEMU's threads (/proc/<pid>/task).

  collect.py       measure(ctx): the image, the guests, the samples, the QMP storm
  parse.py         the guest's output, fio's JSON, bonnie++'s CSV line -> rows
  analysis.py      medians, on/off effects, CPU per thread class, the seed's table
  tables.py        the tables the page shows, and the runs table's columns
  prose.py         every value the prose quotes, and the platform banner's note
  figures.py       IOPS and effects, CPU per thread class, the effects over every host
  key_findings.py  the key findings
"""

from __future__ import annotations

from perfbook.core.errors import ParameterError
from perfbook.framework.contract import REPETITION, Chapter, Param, Table, repetition_params
from perfbook.qemu import guest

RW = ("randread", "randwrite", "read", "write")
VARIANTS = ("off", "on")
STORM_COMMANDS = ("query-block", "query-status", "query-qmp-schema")
_COMMON = {
    "variants": None,
    "cache": "none",
    "aio": "native",
    "num_queues": None,
    "guest_cpus": 1,
    "guest_memory_mib": 512,
    "storm_command": "query-block",
    "accel": "auto",
    "kvm_boot_timeout": 4.0,
    "boot_timeout": 150.0,
    "seed": 1,
    "rep_warmup": 0,
    "stall_seconds": 30.0,
    "stall_reboots": 2,
    "event_idx": "auto",
}


class VirtioBlkIothread(Chapter):
    name = "virtio_blk_iothread"
    title = "The virtio-blk data plane and the iothread that replaced it"
    # On 2 CPUs under TCG a boot (with fio's ~82 MiB of libraries) takes ~4 s, fio's start-up in
    # the emulated CPU ~1.5 s, and a job its ramp plus run time; where /dev/kvm exists but a KVM
    # guest never reaches init (this host), kvm_boot_timeout goes first (once per run). The boot
    # is the unit of repetition: each round boots every variant once (seeded order), and each
    # boot runs each job once (repeats=1), so every finding rests on one value per boot. The
    # default runs the jobs the findings and the main tables need (random reads at QD1 and 32,
    # QD1 again under the storm) for 5 fixed rounds: 5 boots per variant, the least whose
    # Hodges-Lehmann intervals reach their coverage (98.4 % for each half of a union bound).
    # Between boots IOPS differ far more than between runs in a boot (here 600 to 3,300 at QD1),
    # so the default buys boots, not run time: 300 ms jobs after a 100 ms ramp, and no warm-up
    # job (the ramp warms each job; the first job's IOPS in a boot showed no penalty). A boot
    # then takes ~9 s here (4 s to init, fio's start, 3 jobs, the shutdown): 88 s for the 10
    # (2026-11-29, other work using 20 % of the CPUs); a whole default measure, alone, 100 s
    # (86 s of boots, 13 s of fio's measured jobs: the manifest's phases), so plan_s is 95.
    # bonnie++ needs a file of twice the guest's RAM (check()): 1 GiB beside the 512 MiB guest
    # takes many minutes under TCG, so only full runs it. Quick is one round of 2 boots (300 ms
    # under TCG still holds hundreds of requests at queue depth 1), a smoke test.
    plan_s = {
        "quick": 15,
        "default": 95,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "rw": ["randread"],
            "depths": [1, 32],
            "storm": ["randread_qd1"],
            "runtime_ms": 300,
            "ramp_ms": 100,
            "fio_warmup_ms": 200,
            "repeats": 1,
            "disk_mib": 64,
            "bonnie_mib": 0,
            "bonnie_rounds": 0,
            "rep_target": 0.10,
            "rep_min_runs": 1,
            "rep_max_runs": 1,
            "rep_budget_s": 60.0,
            **_COMMON,
            "kvm_boot_timeout": 3.0,
        },  # as every quick guest chapter's
        "default": {
            "rw": ["randread"],
            "depths": [1, 32],
            "storm": ["randread_qd1"],
            "runtime_ms": 300,
            "ramp_ms": 100,
            "fio_warmup_ms": 0,
            "repeats": 1,
            "disk_mib": 64,
            "bonnie_mib": 0,
            "bonnie_rounds": 0,
            "rep_target": 0.05,
            "rep_min_runs": 5,
            "rep_max_runs": 5,
            "rep_budget_s": 300.0,
            **_COMMON,
        },
        "full": {
            "rw": list(RW),
            "depths": [1, 4, 32],
            "storm": ["randread_qd1", "randread_qd32", "randwrite_qd1"],
            "runtime_ms": 3000,
            "ramp_ms": 500,
            "fio_warmup_ms": 1000,
            "repeats": 1,
            "disk_mib": 512,
            "bonnie_mib": 1024,
            "bonnie_rounds": 5,
            "rep_target": 0.03,
            "rep_min_runs": 10,
            "rep_max_runs": 12,
            "rep_budget_s": 3600.0,
            **_COMMON,
            "boot_timeout": 3600.0,
            "stall_seconds": 3600.0,
            "stall_reboots": 4,
        },  # 10 rounds: none_saturated's 24 cells each need 99.8 %. bonnie++'s 1 GiB (twice the
        # guest's 512 MiB; at 256 MiB the guest script fails) prints nothing for many minutes
        # under TCG: the boot's and the stall watchdog's limits are the longest allowed
    }
    params = {
        "variants": Param(
            list, choices=VARIANTS, nullable=True, help="iothread off and/or on (None: both)"
        ),
        "rw": Param(list, choices=RW, help="fio patterns (random: 4 KiB, sequential: 128 KiB)"),
        "depths": Param(
            object, help="fio queue depths: a list (or comma-separated string) of 1..256"
        ),
        "storm": Param(
            object, help="jobs (e.g. randread_qd1) run again under a QMP storm; [] for none"
        ),
        "storm_command": Param(
            str, choices=STORM_COMMANDS, help="the QMP command the storm repeats"
        ),
        "runtime_ms": Param(int, min=200, max=600_000, help="fio's measured time per job"),
        "ramp_ms": Param(int, min=0, max=60_000, help="fio's ramp (unmeasured) before each job"),
        "fio_warmup_ms": Param(
            int, min=0, max=600_000, help="an unrecorded fio job at the start of each boot"
        ),
        "repeats": Param(int, min=1, max=20, help="runs of each job per boot (shuffled)"),
        "disk_mib": Param(
            int, min=16, max=4096, help="fio's disk (a scratch image, written in full first)"
        ),
        "bonnie_mib": Param(
            int,
            min=0,
            max=2048,
            help="bonnie++'s file size, on a second disk with ext4 (0: no bonnie++); at least "
            "twice guest_memory_mib, or the guest's page cache serves its block input",
        ),
        "bonnie_rounds": Param(int, min=0, help="rounds whose boots run bonnie++"),
        "cache": Param(
            str,
            choices=("none", "writeback", "writethrough", "directsync", "unsafe"),
            help="-drive cache=",
        ),
        "aio": Param(str, choices=("native", "threads", "io_uring"), help="-drive aio="),
        "num_queues": Param(
            int, min=1, max=16, nullable=True, help="virtio-blk num-queues (None: QEMU's default)"
        ),
        "event_idx": Param(
            str,
            choices=("auto", "on", "off"),
            help="virtio-blk event_idx (auto: off under TCG, "
            "where an iothread-off guest stalls with it, QEMU's default under KVM)",
        ),
        "guest_cpus": Param(int, min=1, max=8, help="the guest's vCPUs"),
        "guest_memory_mib": Param(
            int, min=256, max=4096, help="the guest's memory (fio's libraries take ~90 MiB)"
        ),
        **guest.boot_params(3600),
        "stall_seconds": Param(
            float,
            min=5,
            max=3600,
            help="a guest that prints nothing for this long "
            "(no job began or ended) is stopped and booted again",
        ),
        "stall_reboots": Param(
            int,
            min=0,
            max=20,
            help="stalled guests booted again in one run; one more fails the run",
        ),
        **repetition_params("rep_"),
        "seed": Param(int, min=0, help="seed of the shuffled orders"),
    }
    tables = {
        "fio": Table(
            round="int",
            boot="int",
            variant="str",
            position="int",
            job="str",
            rw="str",
            depth="int",
            storm="bool",
            rep="int",
            iops="float",
            bw_kib_s="float",
            lat_mean_us="float",
            clat_p50_us="float",
            clat_p90_us="float",
            clat_p99_us="float",
            clat_p999_us="float",
            guest_usr_pct="float",
            guest_sys_pct="float",
            ios="int",
        ),
        "threads": Table(
            round="int",
            boot="int",
            variant="str",
            job="str",
            storm="bool",
            rep="int",
            cls="str",
            threads="int",
            user_s="float",
            sys_s="float",
            wall_s="float",
        ),
        "storm": Table(
            round="int",
            boot="int",
            variant="str",
            job="str",
            rep="int",
            command="str",
            commands="int",
            seconds="float",
            client_cpu_s="float",
        ),
        "bonnie": Table(
            round="int",
            boot="int",
            variant="str",
            item="str",
            value="float",
            unit="str",
            cpu_pct="float",
            latency_us="float",
        ),
        "boots": Table(
            round="int",
            boot="int",
            variant="str",
            accel="str",
            accel_note="str",
            boot_seconds="float",
            total_seconds="float",
            queues="int",
            scheduler="str",
            guest_cpus="int",
            qemu_version="str",
            guest_kernel="str",
            qemu_cmdline="str",
            event_idx="str",  # the fio disk's, as QEMU was given it (analysis.event_idx_of)
            optional=("event_idx",),  # older datasets: analysis.boots_table infers it
        ),
        "repetition": REPETITION,
    }
    reference = ("virtio_blk_iothread",)
    quote_needs = ("fio", "threads", "boots")
    needs_tools = {
        "qemu-system-x86_64": "qemu-system-x86",
        "fio": "fio",
        "bonnie++": "bonnie++",
        "ldd": "libc-bin",
        "mkfs.ext4": "e2fsprogs",
    }
    needs_text = (
        "a QEMU guest (KVM where it boots, TCG otherwise); qemu.qmp for the main-loop storm"
    )

    def check(self, p: dict) -> None:
        # lazy: scipy.stats, 0.67 s on top of the declaration's 0.35 s (-X importtime)
        from perfbook.analysis.repetition import repetition_settings

        repetition_settings(p, "rep_")
        p["variants"] = [v for v in VARIANTS if v in (p["variants"] or VARIANTS)]
        d = p["depths"]
        d = (
            [int(x) for x in d.split(",") if x.strip()]
            if isinstance(d, str)
            else ([d] if isinstance(d, int) else d)
        )
        if (
            not isinstance(d, (list, tuple))
            or not d
            or not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 256 for x in d)
        ):
            raise ParameterError(
                f"depths must be a non-empty list of integers in 1..256, got {p['depths']!r}"
            )
        p["depths"] = sorted(set(d))
        s = p["storm"]
        s = [x.strip() for x in s.split(",") if x.strip()] if isinstance(s, str) else list(s or [])
        jobs = [f"{rw}_qd{q}" for rw in p["rw"] for q in p["depths"]]
        bad = [x for x in s if x not in jobs]
        if bad:
            raise ParameterError(
                f"storm job(s) {', '.join(bad)} are not among this run's jobs ({', '.join(jobs)})"
            )
        p["storm"] = s
        if 0 < p["bonnie_mib"] < 2 * p["guest_memory_mib"]:
            raise ParameterError(
                f"bonnie_mib ({p['bonnie_mib']}) must be at least twice guest_memory_mib "
                f"({p['guest_memory_mib']}), or 0: a smaller file fits in the guest's page cache, "
                "which then serves bonnie++'s block input"
            )
        if p["aio"] == "native" and p["cache"] not in ("none", "directsync"):
            raise ParameterError("aio=native needs cache=none or directsync")

    def preflight(self) -> list[str]:
        return guest.preflight() + super().preflight()


chapter = VirtioBlkIothread()
