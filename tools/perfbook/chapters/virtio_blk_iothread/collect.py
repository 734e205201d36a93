"""virtio_blk_iothread: the measurement (the only part of the chapter that touches the host).

fio's disk is a scratch image written in full first (so that neither variant reads holes or
allocates); bonnie++'s is a second one with ext4 made on the host. Each round boots the variants in a seeded order; every boot runs a warm-up fio job, then the
round's fio jobs in a seeded shuffle, then bonnie++. One fio runs all of a boot's jobs one after the
other; for each job it prints a marker right before the job's I/O starts and one right after it
ends. At the first the host starts, for a storm job, flooding QEMU's main loop with QMP commands,
and snapshots the CPU time of every QEMU thread; at the second it snapshots again and stops the
storm. So the thread times cover the job's I/O (ramp and measured time) and nothing else; fio's
JSON and bonnie++'s CSV line travel over the serial port after the tools have finished. QEMU, its scratch directory and the guest are owned by
perfbook.qemu.guest.Runner; the storm thread is stopped on every exit path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import shutil
import statistics
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import pandas as pd

from perfbook.analysis.repetition import interleave, repetition
from perfbook.core.errors import PerfbookError
from perfbook.core.guard import check_interrupted
from perfbook.core.proc import run_group
from perfbook.probes import blockdev
from perfbook.qemu import guest, guest_image

from .analysis import event_idx_of
from .parse import bonnie_rows, fio_rows, split_output

try:
    from qemu.qmp import QMPClient
except ImportError:  # measure() then skips the storm
    QMPClient = None

IO_RE, IODONE_RE = re.compile(r"@@JOB-IO (\S+)@@"), re.compile(r"@@JOB-IODONE (\S+)@@")

MiB = 1 << 20
BONNIE_SPARE_MIB = 64  # bonnie++'s disk: its file plus room for ext4's metadata and journal


def job_plan(p: dict, rng) -> list[dict]:
    """One boot's fio jobs: the warm-up, then each job `repeats` times, plain and under the
    storm, in a seeded shuffle."""
    jobs = [
        {"job": f"{rw}_qd{q}", "rw": rw, "depth": q, "storm": st, "rep": r}
        for rw in p["rw"]
        for q in p["depths"]
        for st in (False, True)
        if not st or f"{rw}_qd{q}" in p["storm"]
        for r in range(p["repeats"])
    ]
    rng.shuffle(jobs)
    for i, j in enumerate(jobs):
        j.update(id=f"j{i}", position=i)
    warm = (
        [
            {
                "job": "warmup",
                "rw": "randread",
                "depth": max(p["depths"]),
                "storm": False,
                "rep": 0,
                "id": "warmup",
                "position": -1,
            }
        ]
        if p["fio_warmup_ms"]
        else []
    )
    return warm + jobs


def fio_jobfile(p: dict, plan: list[dict]) -> str:
    """One fio job file for the boot: the jobs one after the other (stonewall). fio runs a job's
    exec_prerun right before its I/O and exec_postrun right after it (their output goes to a
    file, so each writes its marker to the serial port itself): the host samples QEMU's threads,
    and starts and stops the storm, at these markers."""
    out = [
        "[global]",
        "filename=/dev/vda",
        "direct=1",
        "ioengine=libaio",
        "thread",
        "time_based",
        "norandommap",
        "randrepeat=0",
        "percentile_list=50:90:99:99.9",
        f"ramp_time={p['ramp_ms']}ms",
    ]
    for j in plan:
        seq = j["rw"] in ("read", "write")
        out += [
            f"[{j['id']}]",
            "stonewall",
            f"rw={j['rw']}",
            f"bs={'128k' if seq else '4k'}",
            f"iodepth={j['depth']}",
            f"runtime={p['fio_warmup_ms'] if j['job'] == 'warmup' else p['runtime_ms']}ms",
            f"exec_prerun=sh -c 'echo @@JOB-IO {j['id']}@@ >/dev/ttyS1'",
            f"exec_postrun=sh -c 'echo @@JOB-IODONE {j['id']}@@ >/dev/ttyS1'",
        ]
    return "\n".join(out) + "\n"


def guest_script(p: dict, plan: list[dict], with_bonnie: bool) -> str:
    """busybox sh: the facts, fio with every job, then bonnie++; each tool's output between
    markers after it has finished."""
    mib = p["bonnie_mib"]
    lines = [
        "set -u",
        "echo none > /sys/block/vda/queue/scheduler 2>/dev/null",
        'echo "INFO queues $(ls /sys/block/vda/mq | wc -l)"',
        'echo "INFO scheduler $(cat /sys/block/vda/queue/scheduler)"',
        'echo "INFO cpus $(nproc)"',
        'out() { echo "@@JOB-END $1 rc=$2@@"; echo "@@OUT-BEGIN $1@@"; cat $3; '
        "echo \"@@OUT-END $1@@\"; [ $2 = 0 ] || echo \"@@ERR $1 $(tail -c 300 /tmp/err | tr '\\n@' '  ')@@\"; }",
        "cat > /tmp/jobs.fio <<'EOF'",
        fio_jobfile(p, plan).rstrip("\n"),
        "EOF",
        "cd /tmp && fio --output-format=json --output=/tmp/out.json /tmp/jobs.fio >/tmp/err 2>&1; rc=$?",
        "out fio $rc /tmp/out.json",
    ]
    if with_bonnie:
        lines += [
            ": >/tmp/out.csv; mkdir -p /mnt",
            "mount -t ext4 /dev/vdb /mnt 2>/tmp/err; mrc=$?",
            f"if [ $mrc = 0 ]; then bonnie++ -d /mnt -s {mib} -r {p['guest_memory_mib']} -n 0 -f -D "
            "-u root -q "
            "-m guest -x 1 >/tmp/out.csv 2>/tmp/err; rc=$?; else rc=90; fi",
            "out bonnie $rc /tmp/out.csv",
            "umount /mnt 2>/dev/null",
        ]
    return "\n".join(lines) + "\n"


class Storm(threading.Thread):
    """Repeats one QMP command over QEMU's monitor as fast as the answers come (qemu.qmp),
    until stopped: the commands run in QEMU's main loop, under the big QEMU lock."""

    def __init__(self, sock, command: str):
        super().__init__(daemon=True)
        self.sock, self.command = sock, command
        self.commands, self.seconds, self.cpu, self.error = 0, 0.0, 0.0, None
        self.connected, self._halt = threading.Event(), threading.Event()

    def run(self):
        try:
            asyncio.run(self._loop())
        except Exception as e:  # noqa: BLE001 (reported by stop())
            self.error = f"{type(e).__name__}: {e}"
        self.connected.set()

    async def _loop(self):
        logging.getLogger("qemu.qmp").setLevel(logging.ERROR)
        c = QMPClient("perfbook")
        await asyncio.wait_for(c.connect(str(self.sock)), 10)
        self.connected.set()
        t0, c0 = time.monotonic(), time.thread_time()
        try:
            while not self._halt.is_set():
                await c.execute(self.command)
                self.commands += 1
        finally:
            self.seconds, self.cpu = time.monotonic() - t0, time.thread_time() - c0
            await c.disconnect()

    def stop(self):
        self._halt.set()
        self.join(timeout=20)
        if self.error or self.is_alive():
            raise PerfbookError(
                f"the QMP storm failed: {self.error or 'it did not stop within 20 s'}"
            )


def _no_phase(kind: str):
    return nullcontext()


class Sampler:
    """GuestConfig.on_line: for each fio job, the storm started and QEMU's threads snapshot at
    its I/O marker, the snapshot and the storm's end at its done marker. Between the two the
    run's phase clock (ctx.phase) charges "warmup" (the unrecorded job) or "measured"."""

    def __init__(self, p: dict, plan: list[dict], phase=_no_phase):
        self.p, self.jobs = p, {j["id"]: j for j in plan}
        self.open: dict = {}
        self.deltas: dict = {}
        self.storms: dict = {}
        self.storm: Storm | None = None
        self.phase, self._in_phase = phase, None

    def on_line(self, line: str, live: guest.LiveGuest):
        if m := IO_RE.fullmatch(line):  # fio's I/O starts (ramp, then the measured time)
            if self.jobs[m.group(1)]["storm"]:
                self.storm = Storm(live.qmp, self.p["storm_command"])
                self.storm.start()
                if not self.storm.connected.wait(15) or self.storm.error:
                    self.stop_storm()
            self.open[m.group(1)] = (time.monotonic(), guest.thread_times(live.pid))
            self.end_phase()
            self._in_phase = self.phase("warmup" if m.group(1) == "warmup" else "measured")
            self._in_phase.__enter__()
        elif m := IODONE_RE.fullmatch(line):
            after, t1 = guest.thread_times(live.pid), time.monotonic()
            self.end_phase()
            t0, before = self.open.pop(m.group(1))
            self.deltas[m.group(1)] = (guest.thread_delta(before, after, live.pid), t1 - t0)
            if self.storm is not None:
                self.stop_storm(m.group(1))

    def end_phase(self):
        ph, self._in_phase = self._in_phase, None
        if ph is not None:
            ph.__exit__(None, None, None)

    def stop_storm(self, jid: str | None = None):
        s, self.storm = self.storm, None
        if s is not None:
            s.stop()
            if jid:
                self.storms[jid] = s


def fill_image(path, mib: int) -> None:
    """Write the image in full (zeros) and flush it: every block allocated before any boot."""
    block = bytes(MiB)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())


def bonnie_image(path, mib: int) -> None:
    """bonnie++'s disk: allocated in full, then ext4 (extents: direct I/O into new blocks stays
    direct, where ext2's block maps fall back to buffered writes), its inode tables and journal
    written now rather than by the guest's lazy-init thread during the test."""
    fill_image(path, mib)
    r = run_group(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-E",
            "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
            str(path),
        ],
        timeout=300,
    )
    if r.returncode != 0:
        raise PerfbookError(
            f"mkfs.ext4 of bonnie++'s image failed: {(r.stderr or r.stdout).strip()[-200:]}"
        )


def _redact(cmd: list[str]) -> str:
    return " ".join(
        re.sub(
            r"/(?:[^/\s,=]+/)*(?:guest|virtio_blk_iothread)-\d+-[^/]+/(?:run-[^/]+/)?",
            "SCRATCH/",
            a.replace(str(guest.guest_root()), "build/guest"),
        )
        for a in cmd[1:]
    )


def boot_once(r, p, variant, plan, with_bonnie, images, files, tables, rnd, boot, phase=_no_phase):
    """One guest: run the plan, parse, append to the tables; returns {job key: IOPS values}.
    `images` are the fio disk (vda) and bonnie++'s (vdb), both on io0 when iothread is on.
    `phase` is ctx.phase: the guest's life is "boot" but for its fio jobs (Sampler)."""
    disks = [
        guest.DiskSpec(
            label=label,
            path=img,
            cache=p["cache"],
            aio=p["aio"],
            iothread="io0" if variant == "on" else None,
            num_queues=p["num_queues"],
            event_idx={"on": True, "off": False}.get(p["event_idx"]),
            tcg_extra={"event_idx": "off"} if p["event_idx"] == "auto" else {},
        )
        for label, img in zip(("data", "bonnie"), images)
    ]
    s = Sampler(p, plan, phase)
    cfg = guest.GuestConfig(
        disks=disks,
        iothreads=["io0"],
        cpus=p["guest_cpus"],
        memory_mib=p["guest_memory_mib"],
        files=files,
        thread_names=True,
        qmp=bool(p["storm"]),
        on_line=s.on_line,
        stall_seconds=p["stall_seconds"],
    )
    try:
        with phase("boot"):
            try:
                res = r.run(guest_script(p, plan, with_bonnie), cfg)
            finally:
                s.end_phase()
    finally:
        s.stop_storm()
    if res.rc != 0:
        raise PerfbookError(f"the guest script failed with status {res.rc} (iothread {variant})")
    info, out = split_output(res.output)
    tables["boots"].append(
        {
            "round": rnd,
            "boot": boot,
            "variant": variant,
            "accel": res.accel,
            "accel_note": res.accel_note,
            "boot_seconds": res.boot_seconds,
            "total_seconds": res.total_seconds,
            "queues": int(info.get("queues") or 0),
            "scheduler": info.get("scheduler", ""),
            "guest_cpus": int(info.get("cpus") or 0),
            "qemu_version": res.qemu_version,
            "guest_kernel": res.kernel,
            "qemu_cmdline": _redact(res.cmdline),
            "event_idx": event_idx_of(" ".join(res.cmdline)),
        }
    )
    key = {"round": rnd, "boot": boot, "variant": variant}
    for tool in ("fio", "bonnie") if with_bonnie else ("fio",):
        o = out.get(tool)
        if o is None or o.get("rc") != 0:
            raise PerfbookError(
                f"{tool} in the guest (iothread {variant}) failed: {((o or {}).get('err') or 'no output')[:200]}"
            )
    lines = [
        ln for ln in out.get("bonnie", {}).get("out", "").splitlines() if ln.startswith("1.98,")
    ]
    if with_bonnie and not lines:
        raise PerfbookError(f"bonnie++ printed no CSV line: {out['bonnie']['out'][-200:]!r}")
    tables["bonnie"] += [{**key, **row} for row in bonnie_rows(lines[-1])] if lines else []
    rows, got = fio_rows(out["fio"]["out"]), {}
    for j in plan:
        if j["id"] not in rows or j["id"] not in s.deltas:
            raise PerfbookError(
                f"fio job {j['job']} (iothread {variant}) left no result or no markers"
            )
        if j["job"] == "warmup":
            continue
        row = rows[j["id"]]
        tables["fio"].append(
            {**key, **{k: j[k] for k in ("position", "job", "rw", "depth", "storm", "rep")}, **row}
        )
        delta, wall = s.deltas[j["id"]]
        tables["threads"] += [
            {
                **key,
                "job": j["job"],
                "storm": j["storm"],
                "rep": j["rep"],
                "cls": c,
                **v,
                "wall_s": wall,
            }
            for c, v in delta.items()
        ]
        if j["storm"]:
            st = s.storms[j["id"]]
            tables["storm"].append(
                {
                    **key,
                    "job": j["job"],
                    "rep": j["rep"],
                    "command": st.command,
                    "commands": st.commands,
                    "seconds": st.seconds,
                    "client_cpu_s": st.cpu,
                }
            )
        got.setdefault(experiment(j), []).append(row["iops"])
    return got


def boot_until_done(
    r, p, variant, plan, with_bonnie, images, files, tables, rnd, boot, w, prog, phase=_no_phase
):
    """boot_once, and the same boot again when its guest stalls: its script printed nothing for
    stall_seconds (guest.GuestStalled). A stalled boot leaves no rows; each is recorded in the
    manifest (stalled_boots, with where the guest stood), and one more than stall_reboots in a
    run fails it."""
    stalls = w.extra["stalled_boots"]
    while True:
        try:
            return boot_once(
                r, p, variant, plan, with_bonnie, images, files, tables, rnd, boot, phase=phase
            )
        except guest.GuestStalled as e:
            for rows in tables.values():
                rows.clear()
            stalls.append({"round": rnd, "boot": boot, "variant": variant, "why": str(e)[:500]})
            if len(stalls) > p["stall_reboots"]:
                raise PerfbookError(
                    f"{len(stalls)} guests stalled, more than stall_reboots ({p['stall_reboots']}) "
                    f"allows; the last: {e}"
                ) from None
            prog.note(
                f"round {rnd + 1} iothread {variant}: the guest stalled; booting it again ({e})"
            )


def experiment(j: dict) -> str:
    return f"{j['job']}{' +storm' if j['storm'] else ''} IOPS"


def measure(ctx) -> None:
    """Measure this host into ctx.writer (the framework publishes it)."""
    p, w = dict(ctx.p), ctx.writer
    rng = random.Random(p["seed"])
    if QMPClient is None:
        if p["storm"]:
            w.skip(
                "storm",
                "the Python package qemu.qmp is missing (tools/setup.sh installs environment.yml's pins)",
            )
        p["storm"] = []
    scratch = ctx.scratch()
    images = [scratch.path("disk.img")]
    files = {
        **guest_image.binary_bundle({"fio": _which("fio"), "bonnie++": _which("bonnie++")}),
        "etc/passwd": b"root:x:0:0:root:/:/bin/sh\n",
        "etc/group": b"root:x:0:\n",
    }
    w.extra["_tool_cmds"] = {"qemu-system": [guest.QEMU, "--version"], "fio": ["fio", "--version"]}
    w.extra["scratch_fs"] = blockdev.mount_of(scratch.dir.parent)
    w.extra["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]  # other work on the host
    if not ctx.p["storm"]:
        w.skip("storm", "no storm jobs were asked for (storm=[])")
    if not p["bonnie_mib"] or not p["bonnie_rounds"]:
        w.skip("bonnie", "bonnie++ was not asked for (bonnie_mib or bonnie_rounds is 0)")
    with ctx.phase("setup"):
        fill_image(images[0], p["disk_mib"])
        if p["bonnie_mib"] and p["bonnie_rounds"]:
            images.append(scratch.path("bonnie.img"))
            bonnie_image(images[1], p["bonnie_mib"] + BONNIE_SPARE_MIB)
    probe = job_plan(p, random.Random(0))
    keys = sorted({experiment(j) for j in probe if j["job"] != "warmup"})
    reps = {e: repetition(e, p["variants"], p, "rep_") for e in keys}
    tables = {k: [] for k in ("fio", "threads", "storm", "bonnie", "boots")}
    w.extra["stalled_boots"] = []  # guests stopped by the stall watchdog and booted again
    prog = ctx.progress(len(p["variants"]) * (p["rep_min_runs"] + p["rep_warmup"]))
    boot = 0
    with guest.Runner(
        accel=p["accel"],
        kvm_boot_timeout=p["kvm_boot_timeout"],
        timeout=p["boot_timeout"],
        progress=prog.note,
    ) as r:
        w.extra["guest_artefacts"] = {k: v for k, v in (r.artefacts or {}).items() if k != "dir"}
        for rounds in interleave(reps.values()):
            first = next(iter(rounds.values()))
            rnd = first.index - p["rep_warmup"]
            if first.index >= p["rep_min_runs"] + p["rep_warmup"]:
                prog.total += len(p["variants"])
            order = list(p["variants"])
            rng.shuffle(order)
            for v in order:
                check_interrupted()
                plan = [
                    j for j in job_plan(p, rng) if j["job"] == "warmup" or experiment(j) in rounds
                ]
                bon = 0 <= rnd < p["bonnie_rounds"] and p["bonnie_mib"] > 0
                t = {k: [] for k in tables}
                got = boot_until_done(
                    r, p, v, plan, bon, images, files, t, rnd, boot, w, prog, phase=ctx.phase
                )
                for e, vals in got.items():  # one value per boot: rounds, not repeats, are n
                    reps[e].add(v, statistics.median(vals))
                if rnd >= 0:
                    for k in tables:
                        tables[k] += t[k]
                prog.step(
                    f"round {rnd + 1} iothread {v}: {len(plan)} jobs, "
                    f"{t['boots'][0]['accel']}, {t['boots'][0]['total_seconds']:.0f} s"
                )
                boot += 1
    for name, rows in (("fio", tables["fio"]), ("storm", tables["storm"])):
        empty = [x for x in rows if not x.get("ios" if name == "fio" else "commands")]
        if empty:
            w.reject(
                f"{len(empty)} {name} run(s) did nothing (first: {empty[0]['job']}, iothread {empty[0]['variant']})"
            )
    w.extra["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    stopped = [x.stopped_by for x in reps.values()]
    prog.note(
        "repetition stopped: "
        + ", ".join(f"{stopped.count(x)} by {x}" for x in sorted(set(stopped)))
    )
    w.add_table("repetition", pd.DataFrame([x for rp in reps.values() for x in rp.records()]))
    for k, rows in tables.items():
        w.add_table(k, pd.DataFrame(rows, columns=list(ctx.chapter.tables[k].columns)))


def _which(name: str):
    exe = shutil.which(name)
    if not exe:
        raise PerfbookError(f"{name} is not installed")
    return Path(exe)
