"""The second host's boot: its PID 1, the script that runs the measure step, QEMU's
command line and the initramfs (perfbook.dev.secondhost re-exports these names)."""

from __future__ import annotations

import gzip
import re
import shlex
import statistics
from pathlib import Path

import numpy as np

from perfbook.core.errors import ParameterError, PerfbookError
from perfbook.core.paths import repo_root
from perfbook.qemu import guest

GUEST_ADDR = "10.0.2.15/24"  # QEMU user networking's guest address; restrict=on: no way out
ROOT_TAG, OUT_TAG = "hostroot", "out"


# --------------------------------------------------------------------------
# what runs in the guest
# --------------------------------------------------------------------------
INIT_TEMPLATE = r"""#!/bin/busybox sh
# perfbook.dev.secondhost: PID 1 in the initramfs; builds the root and switches to it
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "@@PERFBOOK-INIT@@ $(cut -d' ' -f1 /proc/uptime)" > /dev/console
fail() {
  echo "secondhost init: $*" > /dev/console
  { echo "@@PERFBOOK-BEGIN@@"; echo "secondhost init failed: $*"; echo "@@PERFBOOK-END rc=99@@"; } > /dev/ttyS1
  sync; poweroff -f
}
for m in $(cat /etc/modules.order); do
  insmod /lib/modules/$m.ko 2>/dev/console || echo "insmod $m failed" > /dev/console
done
mkdir -p /lower /upper /newroot
mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=loose,msize=262144 @ROOT_TAG@ /lower \
  || fail "cannot mount the parent's / (9p tag @ROOT_TAG@)"
mount -t tmpfs -o mode=0755 upper /upper && mkdir -p /upper/u /upper/w || fail "tmpfs"
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w overlay /newroot \
  || fail "overlayfs over 9p"
# this machine's own identity; nothing of the parent's container
echo @MACHINE_ID@ > /newroot/etc/machine-id
rm -f /newroot/.dockerenv /newroot/run/.containerenv
mkdir -p /newroot/boot && cp /secondhost/config /newroot/boot/config-@RELEASE@
mkdir -p /newroot/out
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=262144 @OUT_TAG@ /newroot/out \
  || fail "cannot mount the results share (9p tag @OUT_TAG@)"
mount -t ext4 /dev/vda /newroot/var/tmp || fail "cannot mount the scratch disk /dev/vda at /var/tmp"
chmod 1777 /newroot/var/tmp
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
mount -t tmpfs -o mode=0755,nosuid,nodev run /newroot/run
mount -t tmpfs -o mode=1777,nosuid,nodev tmp /newroot/tmp
cp /secondhost/run.sh /newroot/run/perfbook-secondhost.sh
exec switch_root /newroot /bin/bash /run/perfbook-secondhost.sh
fail "switch_root"
"""

RUN_TEMPLATE = r"""#!/bin/bash
# perfbook.dev.secondhost: PID 1 of the second host after switch_root (the parent's userland)
exec >/dev/ttyS1 2>&1
stty -F /dev/ttyS1 raw -echo 2>/dev/null
echo "@@PERFBOOK-BEGIN@@"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
export PERFBOOK_HOST_LABEL=@LABEL@
export PERFBOOK_HOST_NOTE=@NOTE@
finish() {
  echo "@@PERFBOOK-END rc=$1@@"
  sync
  echo o > /proc/sysrq-trigger
  sleep 120
}
mkdir -p /dev/shm /dev/pts /run/lock
mount -t tmpfs -o mode=1777,nosuid,nodev shm /dev/shm
mount -t devpts -o mode=620,ptmxmode=666 devpts /dev/pts
ln -sf /proc/self/fd /dev/fd; ln -sf fd/0 /dev/stdin; ln -sf fd/1 /dev/stdout; ln -sf fd/2 /dev/stderr
hostname perfbook-secondhost
ip link set lo up || finish 97
# a NIC with an IPv4 address, as on any machine (getaddrinfo's AI_ADDRCONFIG wants one);
# QEMU's user network with restrict=on lets nothing out
nic=$(ls /sys/class/net | grep -v '^lo$' | head -n 1)
[ -n "$nic" ] && ip addr add @GUEST_ADDR@ dev "$nic" && ip link set "$nic" up || finish 94
cd @REPO@ || finish 96
echo "second host up at $(cut -d' ' -f1 /proc/uptime) s; kernel $(uname -r)"
PYTHONPATH=tools .venv/bin/python -c '
import json
from perfbook.data import hostinfo
f = hostinfo.host_facts()
json.dump(f, open("/out/facts.json", "w"), indent=1, sort_keys=True)
open("/out/host_id", "w").write(f["host_id"])
print("second host id", f["host_id"], "-", f["description"])
' || finish 98
.venv/bin/python -c 'from perfbook.dev.secondhost import cpu_selfcheck; print(cpu_selfcheck())' || finish 93
rc=0
@COMMANDS@
cp build/measure-status.jsonl /out/status.jsonl 2>/dev/null
mkdir -p /out/notebooks
@NOTEBOOKS@
gid=$(cat /out/host_id)
if [ -d "data/runs/$gid" ]; then mkdir -p /out/runs && cp -a "data/runs/$gid" /out/runs/ || rc=95; fi
dmesg 2>/dev/null | tail -n 60 > /out/dmesg-tail.log
finish $rc
"""


# what the guest script's exit codes mean (besides the measure step's own)
RC_MEANING = {
    99: "the initramfs could not build the root (see the console log)",
    98: "the guest could not read its host facts",
    97: "loopback did not come up",
    96: "the checkout is not at the same path in the guest",
    95: "copying the results back failed",
    94: "the network card did not come up",
    93: "the emulated CPU failed the numerical self-check: choose another --cpu-model",
}


def cpu_selfcheck(n: int = 100001, seed: int = 1) -> str:
    """Check numpy's vectorized sort, argsort, median and matmul against plain Python.

    An emulator that gets a SIMD instruction wrong makes every statistic wrong
    without a sign; this runs in the guest before anything is measured."""
    rng = np.random.default_rng(seed)
    n |= 1  # odd: the median is one element, exact in every dtype
    for dt in (np.uint64, np.int64, np.float64, np.uint32, np.int32, np.float32):
        a = (rng.random(n) * 1e6).astype(dt)
        ref = sorted(a.tolist())
        # numpy's default (SIMD) sort on purpose: it is the code under test
        if np.sort(a).tolist() != ref or a[np.argsort(a)].tolist() != ref:  # portability: see above
            raise PerfbookError(
                f"emulated CPU self-check failed: numpy sorts {dt.__name__} wrongly"
            )
        if float(np.median(a)) != float(statistics.median(ref)):
            raise PerfbookError(
                f"emulated CPU self-check failed: numpy's median of {dt.__name__} is wrong"
            )
    m = rng.random((24, 24))
    ref = [[sum(m[i, k] * m[k, j] for k in range(24)) for j in range(24)] for i in range(24)]
    if float(np.max(np.abs(m @ m - np.array(ref)))) > 1e-9:
        raise PerfbookError("emulated CPU self-check failed: numpy's matrix product is wrong")
    return f"emulated CPU self-check passed (numpy {np.__version__}: sort, argsort, median of 6 dtypes; matmul)"


def init_script(mid: str, release: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{32}", mid):
        raise ParameterError(f"machine id must be 32 hex digits, got {mid!r}")
    if not re.fullmatch(r"[A-Za-z0-9._+-]+", release):
        raise ParameterError(f"bad kernel release {release!r}")
    return (
        INIT_TEMPLATE.replace("@ROOT_TAG@", ROOT_TAG)
        .replace("@OUT_TAG@", OUT_TAG)
        .replace("@MACHINE_ID@", mid)
        .replace("@RELEASE@", release)
    )


def run_script(steps: list, label: str, note: str, repo: Path | None = None) -> str:
    cmds = []
    for s in steps:
        argv = " ".join(shlex.quote(a) for a in s.measure_argv())
        cmds.append(
            f"echo '[secondhost] measure {s.chapter} (profile {s.profile})'\n{argv} || rc=$?"
        )
    return (
        RUN_TEMPLATE.replace("@LABEL@", shlex.quote(label))
        .replace("@NOTE@", shlex.quote(note))
        .replace("@REPO@", shlex.quote(str(repo or repo_root())))
        .replace("@GUEST_ADDR@", GUEST_ADDR)
        .replace("@COMMANDS@", "\n".join(cmds) if cmds else ":")
        .replace(
            "@NOTEBOOKS@",
            "\n".join(
                f"cp build/measure/{s.chapter}.ipynb /out/notebooks/ 2>/dev/null" for s in steps
            )
            or ":",
        )
    )


def qemu_cmdline(spec, artefacts: dict, scratch: Path, initrd: Path) -> list[str]:
    """The QEMU command: TCG, the parent's / read-only as 9p, a results share, a scratch disk."""
    return [
        guest.QEMU,
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-machine",
        "pc",
        "-accel",
        "tcg,thread=multi",
        "-cpu",
        spec.cpu_model,
        "-m",
        str(int(spec.memory_mib)),
        "-smp",
        str(int(spec.cpus)),
        "-kernel",
        str(Path(artefacts["dir"]) / "vmlinuz"),
        "-initrd",
        str(initrd),
        "-append",
        "console=ttyS0 panic=-1 loglevel=4 rdinit=/secondhost/init",
        "-serial",
        f"file:{scratch / 'console.log'}",
        "-serial",
        f"file:{scratch / 'result.log'}",
        "-virtfs",
        f"local,path=/,mount_tag={ROOT_TAG},security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
        f"local,path={scratch / 'out'},mount_tag={OUT_TAG},security_model=none,multidevs=remap",
        "-drive",
        f"file={scratch / 'disk.img'},format=raw,if=none,id=scratch,cache=none,aio=threads",
        "-device",
        "virtio-blk-pci,drive=scratch,serial=scratch",
        "-netdev",
        "user,id=net0,restrict=on",
        "-device",
        "virtio-net-pci,netdev=net0",
        "-device",
        "virtio-rng-pci",
    ]


def initrd_bytes(artefacts: dict, init: str, run: str) -> bytes:
    """perfbook.qemu.guest's initramfs (busybox + modules) plus our init, script and kernel config."""
    base = (Path(artefacts["dir"]) / "initramfs.cpio.gz").read_bytes()
    config = (Path(artefacts["dir"]) / "config").read_bytes()
    extra = guest.build_cpio(
        [
            ("secondhost", guest.DIR | 0o755, b""),
            ("secondhost/init", guest.REG | 0o755, init.encode()),
            ("secondhost/run.sh", guest.REG | 0o755, run.encode()),
            ("secondhost/config", guest.REG | 0o644, config),
        ]
    )
    return base + gzip.compress(extra)
