"""virtio_features: the measurement (the only part of the chapter that touches the host).

It snapshots this host's virtio devices from sysfs, then boots tiny guests (perfbook.qemu.guest)
whose virtio-blk disks QEMU offers with different options, and stores the guests' sysfs
dumps raw. Decoding happens in analysis, from the committed text.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd

from perfbook.core.errors import MissingPrerequisite, PerfbookError
from perfbook.qemu import guest

from .featurebits.bits import SOURCES
from .parse import (
    BLOCK_ATTRS,
    DEVICE_ATTRS,
    GUEST_CONFIGS,
    QUEUE_ATTRS,
    SYSFS_VIRTIO,
    boot_plan,
    config_list,
    natural_key,
    parse_dump,
)


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def dump_sysfs(root: Path | str = SYSFS_VIRTIO) -> dict[str, str]:
    """Flat dump of what we decode, relative to /sys/bus/virtio/devices."""
    root = Path(root)
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for dev in sorted(root.iterdir(), key=lambda p: natural_key(p.name)):
        for a in DEVICE_ATTRS:
            v = _read(dev / a)
            if v is not None:
                out[f"{dev.name}/{a}"] = v
        drv = dev / "driver"
        if drv.exists():
            out[f"{dev.name}/driver"] = os.path.basename(os.readlink(drv))
        bdir = dev / "block"
        if bdir.is_dir():
            for disk in sorted(bdir.iterdir()):
                pre = f"{dev.name}/block/{disk.name}"
                for a in BLOCK_ATTRS:
                    v = _read(disk / a)
                    if v is not None:
                        out[f"{pre}/{a}"] = v
                for a in QUEUE_ATTRS:
                    v = _read(disk / "queue" / a)
                    if v is not None:
                        out[f"{pre}/queue/{a}"] = v
                mq = disk / "mq"
                if mq.is_dir():
                    out[f"{pre}/mq"] = str(len([x for x in mq.iterdir() if x.is_dir()]))
    return out


def dump_script() -> str:
    """The same dump as a busybox sh script (for a guest); prints 'path<TAB>value'. Values are
    read with the shell's own `read`, not `$(cat ...)`: under TCG each of those ~150 forks cost
    about 25 ms, most of the guest's time."""
    q = " ".join(QUEUE_ATTRS)
    b = " ".join(BLOCK_ATTRS)
    d = " ".join(DEVICE_ATTRS)
    return f"""cd /sys/bus/virtio/devices || exit 3
val() {{ v=; IFS= read -r v < "$1"; printf '%s\\t%s\\n' "$1" "$v"; }}
for dev in *; do
  [ -d "$dev" ] || continue
  for a in {d}; do [ -r "$dev/$a" ] && val "$dev/$a"; done
  [ -e "$dev/driver" ] && l=$(readlink $dev/driver) && printf '%s/driver\\t%s\\n' "$dev" "${{l##*/}}"
  for disk in $dev/block/*; do
    [ -d "$disk" ] || continue
    for a in {b}; do [ -r "$disk/$a" ] && val "$disk/$a"; done
    for a in {q}; do [ -r "$disk/queue/$a" ] && val "$disk/queue/$a"; done
    if [ -d "$disk/mq" ]; then
      n=0; for m in $disk/mq/*/; do [ -d "$m" ] && n=$((n + 1)); done
      printf '%s/mq\\t%s\\n' "$disk" "$n"
    fi
  done
done
"""


def toggle_script() -> str:
    """busybox sh: try to flip each virtio disk's cache_type and put it back.

    Prints 'virtioN/block/vdX/cache_type_write<TAB>ok|denied<TAB>value after'.
    """
    return r"""cd /sys/bus/virtio/devices || exit 3
for disk in */block/*; do
  old=; IFS= read -r old < $disk/cache_type
  [ -w "$disk/cache_type" ] || { printf '%s/cache_type_write\tdenied\t%s\n' "$disk" "$old"; continue; }
  if [ "$old" = "write back" ]; then new="write through"; else new="write back"; fi
  if echo "$new" > $disk/cache_type 2>/dev/null; then r=ok; else r=denied; fi
  after=; IFS= read -r after < $disk/cache_type
  echo "$old" > $disk/cache_type 2>/dev/null
  printf '%s/cache_type_write\t%s\t%s\n' "$disk" "$r" "$after"
done
"""


def disk(name: str):
    """The guest.DiskSpec of a guest configuration; its label is the disk's serial."""
    label = re.sub(r"[^A-Za-z0-9_.-]", "-", name.replace("smp2:", ""))[:20].strip("-") or "d"
    return guest.DiskSpec(label=label, **GUEST_CONFIGS[name])


def host_rows() -> list[dict]:
    """This host's sysfs dump as rows of the sysfs table (disk serials redacted)."""
    rows = []
    for k, v in dump_sysfs().items():
        if k.endswith("/serial"):
            v = "(redacted)"  # a host disk serial can identify the machine
        rows.append({"source": "host", "boot": -1, "path": k, "value": v})
    return rows


def plan_of(p: dict) -> list[tuple[int, list[str]]]:
    """The boots a run's parameters ask for: [(cpus, [config names])]."""
    return boot_plan(config_list(p["configs"]), p["separate_boots"]) if p["guest"] else []


def _cmdline(args: list[str]) -> str:
    """QEMU's arguments with the machine-specific paths replaced by placeholders."""
    return " ".join(
        re.sub(
            r"/(?:[^/\s,=]+/)*guest-\d+-[^/]+/run-[^/]+/",
            "SCRATCH/",
            a.replace(str(guest.guest_root()), "build/guest"),
        )
        for a in args
    )


def measure(ctx) -> None:
    p, w = ctx.p, ctx.writer
    plan = plan_of(p)
    w.extra["_tool_cmds"] = {"qemu": [guest.QEMU, "--version"]}
    w.extra["decoder_sources"] = SOURCES
    prog = ctx.progress(1 + len(plan))
    sysfs_rows = host_rows()
    prog.step(f"host snapshot: {len({r['path'].split('/')[0] for r in sysfs_rows})} virtio devices")
    if not sysfs_rows:
        w.skip("host", f"this host has no virtio devices in {SYSFS_VIRTIO}")
    cfg_rows, boot_rows = [], []
    runner = None
    if not p["guest"]:
        w.skip("guests", "guest=False was asked for")
    elif g := guest.preflight():
        w.skip("guests", g[0])
    else:
        runner = guest.Runner(
            accel=p["accel"],
            kvm_boot_timeout=p["kvm_boot_timeout"],
            timeout=p["boot_timeout"],
            progress=prog.note,
        )
        try:  # fetches/builds the guest kernel once; QEMU and its scratch go with the undo stack
            ctx.undo.enter_context(runner)
        except MissingPrerequisite as e:  # e.g. Debian's kernel package can't be fetched
            w.skip("guests", str(e))
            runner = None
    if runner is not None:
        w.extra["guest_artefacts"] = {
            k: v for k, v in (runner.artefacts or {}).items() if k != "dir"
        }
        script = dump_script() + toggle_script()
        for bi, (cpus, cfgs) in enumerate(plan):
            disks = [disk(c) for c in cfgs]
            res = runner.run(
                script, guest.GuestConfig(disks=disks, cpus=cpus, rng=True, balloon=True)
            )
            if res.rc != 0:
                raise PerfbookError(f"the guest script failed with status {res.rc} (boot {bi})")
            for k, v in parse_dump(res.output).items():
                sysfs_rows.append({"source": "guest", "boot": bi, "path": k, "value": v})
            for c, d in zip(cfgs, disks):
                cfg_rows.append(
                    {
                        "boot": bi,
                        "config": c,
                        "serial": d.label,
                        "cpus": cpus,
                        "qemu_options": d.describe(),
                        **{f"opt_{k}": v for k, v in GUEST_CONFIGS[c].items()},
                    }
                )
            boot_rows.append(
                {
                    "boot": bi,
                    "cpus": cpus,
                    "n_disks": len(disks),
                    "accel": res.accel,
                    "accel_note": res.accel_note,
                    "boot_seconds": res.boot_seconds,
                    "total_seconds": res.total_seconds,
                    "rc": res.rc,
                    "guest_kernel": res.kernel,
                    "qemu_version": res.qemu_version,
                    "qemu_cmdline": _cmdline(res.cmdline[1:]),
                }
            )
            prog.step(
                f"boot {bi + 1}/{len(plan)}: {res.accel}, {len(disks)} disk(s), "
                f"{res.total_seconds:.1f} s"
            )
    w.add_table("sysfs", pd.DataFrame(sysfs_rows, columns=["source", "boot", "path", "value"]))
    if cfg_rows:
        w.add_table("configs", pd.DataFrame(cfg_rows))
        w.add_table("boots", pd.DataFrame(boot_rows))
