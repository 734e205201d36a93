"""The scheduler's debugfs knobs: inventory, writes and their undoing (collect side: the only
module besides collect.py that touches the kernel)."""
from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

from perfbook.hoststate.knobs import KnobSession
from .parse import parse_sched_debug
from .spec import DEBUGFS, SEED_KNOBS


class SchedKnobs(KnobSession):
    """The scheduler's debugfs directory (perfbook.hoststate.knobs.KnobSession: debugfs mounted if it is
    not, every knob written put back when the session ends, and recorded so that the sweep
    restores it after a SIGKILL), with the inventory this chapter needs. `root` and `mount`
    exist for tests on a fake tree."""

    def __init__(self, root: Path = DEBUGFS, mount: bool = True, log=print):
        super().__init__(root, mount=mount, log=log)

    @property
    def sched(self) -> Path:
        return self.root / "sched"

    def set(self, name: str, value: str) -> None:
        super().set(Path("sched") / name, value)

    def restore(self, name: str) -> None:
        super().restore(Path("sched") / name)

    def available(self) -> bool:
        return self.sched.is_dir()

    def files(self) -> list[str]:
        if not self.available():
            return []
        return sorted(p.name for p in self.sched.iterdir() if p.is_file())

    def probe(self, name: str) -> dict:
        """Can this knob be read / opened for writing? (nothing is written)"""
        path = self.sched / name
        out = {"name": name, "exists": path.is_file(), "readable": False, "writable": False,
               "value": None, "error": None}
        if not out["exists"]:
            return out
        try:
            out["value"] = path.read_text().strip()
            out["readable"] = True
        except OSError as e:
            out["error"] = f"read: {errno.errorcode.get(e.errno, e.errno)}"
        try:
            fd = os.open(path, os.O_WRONLY)
            os.close(fd)
            out["writable"] = True
        except OSError as e:
            w = f"open for writing: {errno.errorcode.get(e.errno, e.errno)}"
            out["error"] = f"{out['error']}; {w}" if out["error"] else w
        return out


def lockdown_hint() -> str | None:
    """'Lockdown: ...' from the kernel log, if the kernel said so (best effort)."""
    try:
        r = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln for ln in r.stdout.splitlines() if "Lockdown:" in ln and "debugfs" in ln]
    if not lines:
        return None
    return lines[-1].split("Lockdown:", 1)[1].split(":", 1)[-1].strip()


def knob_inventory(knobs: SchedKnobs) -> tuple[list[dict], dict]:
    """Which scheduler knobs exist here, and which the seed's kernel had."""
    rows = []
    debug_vals = {}
    if knobs.available() and (knobs.sched / "debug").is_file():
        try:
            debug_vals = parse_sched_debug((knobs.sched / "debug").read_text())
        except OSError:
            pass
    files = knobs.files()
    for name in files:
        if name == "debug":
            continue
        pr = knobs.probe(name)
        rows.append({"knob": f"debugfs sched/{name}", "era": "now", "exists_here": True,
                     "readable_here": pr["readable"], "writable_here": pr["writable"],
                     "value_here": pr["value"], "error": pr["error"],
                     "seed_value": None, "tuned_value": None})
    for old, info in SEED_KNOBS.items():
        proc = Path("/proc/sys/kernel") / old
        rows.append({"knob": f"sysctl kernel.{old}", "era": "seed (procfs, until 5.12)",
                     "exists_here": proc.exists(), "readable_here": None, "writable_here": None,
                     "value_here": None, "error": None,
                     "seed_value": info["seed_value"], "tuned_value": info["tuned_value"]})
        mid = info["debugfs_5_13"]
        if mid not in files:
            rows.append({"knob": f"debugfs sched/{mid}", "era": "5.13 to 6.5 (debugfs)",
                         "exists_here": False, "readable_here": None, "writable_here": None,
                         "value_here": None, "error": None, "seed_value": None,
                         "tuned_value": None})
    for k, v in sorted(debug_vals.items()):
        rows.append({"knob": f"sched/debug {k}", "era": "now", "exists_here": True,
                     "readable_here": True, "writable_here": False, "value_here": v,
                     "error": None, "seed_value": None, "tuned_value": None})
    return rows, debug_vals


def debugfs_unusable(knobs: SchedKnobs, name: str, is_root: bool) -> str | None:
    """Why the debugfs knob sched/<name> can't be written here (None: it can)."""
    if not is_root:
        return f"not root: debugfs knob sched/{name} needs root"
    if not knobs.available():
        return "debugfs has no sched/ directory here (not mounted, or not mountable)"
    pr = knobs.probe(name)
    if not pr["exists"]:
        return f"this kernel has no debugfs knob sched/{name}"
    if not pr["writable"] or not pr["readable"]:
        hint = lockdown_hint()
        why = f"sched/{name} exists but can't be used even as root ({pr['error']})"
        if hint:
            why += f"; the kernel log says: Lockdown: {hint}"
        return why
    return None
