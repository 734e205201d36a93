"""The guest's image: Debian's kernel, its virtio modules and busybox, extracted (never
installed) into a gzip'd cpio initramfs that this module writes itself, cached under
build/guest/<kernel-abi>/. perfbook.qemu.guest boots it (and re-exports these names)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from perfbook.core import guard
from perfbook.core.errors import MissingPrerequisite, PerfbookError
from perfbook.core.paths import build_dir
from perfbook.core.proc import term_with_parent

KERNEL_META = "linux-image-cloud-amd64"  # resolved to linux-image-<abi>-cloud-amd64
BUSYBOX_PKG = "busybox-static"
BEGIN = "@@PERFBOOK-BEGIN@@"
END_RE = re.compile(r"@@PERFBOOK-END rc=(-?\d+)@@")
INIT_MARK = "@@PERFBOOK-INIT@@"
# modules the guest loads (with their dependencies), in this order
BASE_MODULES = ("virtio_pci", "virtio_blk")
OPTIONAL_MODULES = ("virtio_rng", "virtio_balloon", "virtio-rng")
ARTEFACT_VERSION = 1  # bump when the initramfs layout changes


# --------------------------------------------------------------------------
# artefacts: kernel, modules, busybox, initramfs
# --------------------------------------------------------------------------
def guest_root() -> Path:
    return build_dir() / "guest"


def artefacts_cached(
    kernel_pkg: str | None = None, root: Path | None = None, extra_modules=()
) -> dict | None:
    """The newest complete cached artefact set (its info dict), or None.

    `root` is the cache directory (default build/guest); with `extra_modules`,
    only a set built with at least those extra modules counts."""
    root = Path(root) if root is not None else guest_root()
    if not root.is_dir():
        return None
    best = None
    for info_file in sorted(root.glob("*/artefacts.json")):
        try:
            info = json.loads(info_file.read_text())
        except (OSError, ValueError):
            continue
        if info.get("artefact_version") != ARTEFACT_VERSION:
            continue
        if kernel_pkg and info.get("kernel_package") != kernel_pkg:
            continue
        if not set(extra_modules) <= set(info.get("extra_modules", ())):
            continue
        d = info_file.parent
        if (d / "vmlinuz").is_file() and (d / "initramfs.cpio.gz").is_file():
            info["dir"] = str(d)
            best = info
    return best


def _run(cmd: list[str], cwd: Path | None = None, timeout: float = 300) -> str:
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise MissingPrerequisite(f"{cmd[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise PerfbookError(f"{' '.join(cmd[:3])} timed out after {timeout:.0f} s") from None
    if r.returncode != 0:
        last = (r.stderr.strip() or r.stdout.strip() or f"exit {r.returncode}").splitlines()[-1]
        raise MissingPrerequisite(f"{' '.join(cmd[:3])} failed: {last}")
    return r.stdout


def resolve_kernel_package(meta: str = KERNEL_META) -> str:
    """linux-image-cloud-amd64 -> linux-image-6.1.0-NN-cloud-amd64 (from apt's lists)."""
    out = _run(["apt-cache", "depends", meta])
    for line in out.splitlines():
        m = re.match(r"\s*Depends:\s*(linux-image-\S+)", line)
        if m and not m.group(1).endswith("-unsigned"):
            return m.group(1)
    raise MissingPrerequisite(f"apt-cache does not know {meta}; run apt-get update")


def _deb_version(deb: Path) -> str:
    return _run(["dpkg-deb", "-f", str(deb), "Version"]).strip()


def modinfo_depends(ko: Path) -> list[str]:
    """The 'depends=' list of a kernel module, read from its .modinfo strings."""
    data = ko.read_bytes()
    for m in re.finditer(rb"(?:^|\x00)depends=([^\x00]*)", data):
        val = m.group(1).decode(errors="replace")
        return [d for d in val.split(",") if d]
    return []


def module_closure(names, index: dict[str, Path]) -> list[str]:
    """Names of `names` and their dependencies, dependencies first.

    A dependency that is not in `index` is assumed built in and skipped.
    """
    order: list[str] = []
    seen: set[str] = set()

    def visit(n: str, stack: tuple = ()):
        key = n.replace("-", "_")
        if key in seen or key not in index:
            return
        if key in stack:
            raise PerfbookError(f"module dependency cycle at {key}")
        for dep in modinfo_depends(index[key]):
            visit(dep, stack + (key,))
        seen.add(key)
        order.append(key)

    for n in names:
        visit(n)
    return order


# -- host programs in the guest ----------------------------------------------
GUEST_LIB = "perfbook/lib"  # where binary_bundle puts libraries and ld.so in the guest


def parse_ldd(text: str, what: str = "the program") -> list[tuple[str, str]]:
    """(name in the guest, host path) for every library in ldd's output, and ("ld.so", path)
    for the dynamic loader; [] for a static program. A library ldd can't find is one line."""
    out = []
    for line in text.splitlines():
        if m := re.match(r"\s*(\S+) => not found", line):
            raise MissingPrerequisite(f"{what} needs {m.group(1)}, which this host does not have")
        if m := re.match(r"\s*(\S+) => (/\S+) \(0x[0-9a-f]+\)", line):
            out.append((m.group(1), m.group(2)))
        elif m := re.match(r"\s*(/\S*/ld-linux[^\s/]*) \(0x[0-9a-f]+\)", line):
            out.append(("ld.so", m.group(1)))
    return out


def binary_bundle(programs: dict[str, Path]) -> dict[str, Path | bytes]:
    """GuestConfig.files for dynamically linked host programs: each program, the libraries
    ldd resolves for it and the dynamic loader go under /perfbook, and /bin/<name> runs the
    program through that loader with that library path (the busybox guest has no libc)."""
    files: dict[str, Path | bytes] = {}
    for name, exe in programs.items():
        exe = Path(exe)
        if not exe.is_file():
            raise MissingPrerequisite(f"{exe} is missing")
        libs = parse_ldd(_run(["ldd", str(exe)]), str(exe)) if shutil.which("ldd") else []
        if not libs:  # static, or no ldd: the program alone
            files[f"bin/{name}"] = exe
            continue
        for so, path in libs:
            files[f"{GUEST_LIB}/{so}"] = Path(path)
        files[f"perfbook/libexec/{name}"] = exe
        files[f"bin/{name}"] = (
            f"#!/bin/sh\nexec /{GUEST_LIB}/ld.so --library-path /{GUEST_LIB} "
            f'/perfbook/libexec/{name} "$@"\n'
        ).encode()
    return files


# -- cpio (newc) ------------------------------------------------------------
def _cpio_entry(name: str, mode: int, data: bytes = b"", ino: int = 1) -> bytes:
    nb = name.encode() + b"\x00"
    hdr = "070701" + "".join(
        f"{v:08X}" for v in (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nb), 0)
    )
    out = hdr.encode() + nb
    out += b"\x00" * ((4 - len(out) % 4) % 4)
    out += data
    out += b"\x00" * ((4 - len(data) % 4) % 4)
    return out


def build_cpio(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A newc cpio archive from (path, mode, data) entries; mode includes the type bits."""
    buf = io.BytesIO()
    for i, (name, mode, data) in enumerate(entries, start=2):
        buf.write(_cpio_entry(name.lstrip("/"), mode, data, ino=i))
    buf.write(_cpio_entry("TRAILER!!!", 0, b"", ino=0))
    return buf.getvalue()


DIR, REG, LNK = 0o040000, 0o100000, 0o120000

INIT_SCRIPT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
echo "@@PERFBOOK-INIT@@ $(cut -d' ' -f1 /proc/uptime)" > /dev/console
for m in $(cat /etc/modules.order); do
  insmod /lib/modules/$m.ko 2>/dev/console || echo "insmod $m failed" > /dev/console
done
# give asynchronous probing a moment: wait until every virtio device has a driver
i=0
while [ $i -lt 50 ]; do
  pending=0
  for d in /sys/bus/virtio/devices/*; do
    [ -e "$d" ] || continue
    [ -e "$d/driver" ] || pending=1
  done
  [ $pending -eq 0 ] && break
  sleep 0.1; i=$((i+1))
done
echo 1 > /proc/sys/kernel/printk
stty -F /dev/ttyS1 raw -echo 2>/dev/null
{
  echo "@@PERFBOOK-BEGIN@@"
  sh /perfbook/script.sh
  echo "@@PERFBOOK-END rc=$?@@"
} > /dev/ttyS1 2>&1
sync
reboot -f
"""


def ensure_artefacts(
    progress=None,
    kernel_pkg: str | None = None,
    *,
    meta: str = KERNEL_META,
    extra_modules=(),
    root: Path | None = None,
) -> dict:
    """Kernel + initramfs for the guest, fetched and built once, then cached.

    Returns the artefact info: dir, kernel_package, kernel_version, busybox_version,
    modules. Raises MissingPrerequisite (one line) if Debian's packages can't be had.
    `meta` is the Debian meta package that names the kernel when `kernel_pkg` is None;
    `extra_modules` are loaded after the base ones (with their dependencies; each
    must be a module of the package or built in); `root` is the cache directory
    (default build/guest). The kernel's config is kept beside it as 'config'.
    """
    say = progress or (lambda s: None)
    have = artefacts_cached(kernel_pkg, root=root, extra_modules=extra_modules)
    if have is not None:
        return have
    for tool in ("apt-get", "apt-cache", "dpkg-deb"):
        if not shutil.which(tool):
            raise MissingPrerequisite(
                f"{tool} is missing: the guest kernel comes from Debian's packages"
            )
    pkg = kernel_pkg or resolve_kernel_package(meta)
    abi = pkg.removeprefix("linux-image-")
    root = Path(root) if root is not None else guest_root()
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=root))
    try:
        say(f"fetching {pkg} and {BUSYBOX_PKG} with apt-get download (once; cached in {root})")
        _run(["apt-get", "download", pkg, BUSYBOX_PKG], cwd=work, timeout=600)
        debs = {p.name.split("_")[0]: p for p in work.glob("*.deb")}
        if pkg not in debs or BUSYBOX_PKG not in debs:
            raise MissingPrerequisite(f"apt-get download did not deliver {pkg} and {BUSYBOX_PKG}")
        kver, bver = _deb_version(debs[pkg]), _deb_version(debs[BUSYBOX_PKG])
        xk, xb = work / "k", work / "b"
        _run(["dpkg-deb", "-x", str(debs[pkg]), str(xk)])
        _run(["dpkg-deb", "-x", str(debs[BUSYBOX_PKG]), str(xb)])
        vmlinuz = next((xk / "boot").glob("vmlinuz-*"), None)
        busybox = xb / "bin" / "busybox"
        if vmlinuz is None or not busybox.is_file():
            raise PerfbookError(f"{pkg} or {BUSYBOX_PKG} has an unexpected layout")
        index = {p.name[:-3].replace("-", "_"): p for p in (xk / "lib" / "modules").rglob("*.ko")}
        order = module_closure(BASE_MODULES, index)
        config = "".join(p.read_text(errors="replace") for p in (xk / "boot").glob("config-*"))
        for mod, opt in (("virtio_pci", "CONFIG_VIRTIO_PCI"), ("virtio_blk", "CONFIG_VIRTIO_BLK")):
            if mod not in order and f"{opt}=y" not in config:
                raise PerfbookError(
                    f"{pkg} has neither {mod}.ko nor {opt}=y: the guest could not see its disks"
                )
        opt = [m for m in module_closure(OPTIONAL_MODULES, index) if m not in order]
        order += opt
        builtin = "".join(
            p.read_text(errors="replace")
            for p in (xk / "lib" / "modules").glob("*/modules.builtin")
        )
        builtin_names = {
            Path(line.strip()).name[:-3].replace("-", "_")
            for line in builtin.splitlines()
            if line.strip()
        }
        missing = [
            m
            for m in extra_modules
            if m.replace("-", "_") not in index and m.replace("-", "_") not in builtin_names
        ]
        if missing:
            raise PerfbookError(f"{pkg} has no module {missing[0]} (neither a .ko nor built in)")
        order += [m for m in module_closure(extra_modules, index) if m not in order]
        entries = [
            ("bin", DIR | 0o755, b""),
            ("dev", DIR | 0o755, b""),
            ("proc", DIR | 0o755, b""),
            ("sys", DIR | 0o755, b""),
            ("etc", DIR | 0o755, b""),
            ("tmp", DIR | 0o1777, b""),
            ("lib", DIR | 0o755, b""),
            ("lib/modules", DIR | 0o755, b""),
            ("perfbook", DIR | 0o755, b""),
            ("bin/busybox", REG | 0o755, busybox.read_bytes()),
            ("bin/sh", LNK | 0o777, b"busybox"),
            ("init", REG | 0o755, INIT_SCRIPT.encode()),
            ("etc/modules.order", REG | 0o644, ("\n".join(order) + "\n").encode()),
        ]
        entries += [(f"lib/modules/{m}.ko", REG | 0o644, index[m].read_bytes()) for m in order]
        dest = root / abi
        tmpdest = Path(tempfile.mkdtemp(prefix=f".{abi}-", dir=root))
        shutil.copy2(vmlinuz, tmpdest / "vmlinuz")
        (tmpdest / "config").write_text(config)
        with gzip.open(tmpdest / "initramfs.cpio.gz", "wb", compresslevel=6) as f:
            f.write(build_cpio(entries))
        info = {
            "artefact_version": ARTEFACT_VERSION,
            "kernel_package": pkg,
            "kernel_version": kver,
            "kernel_release": vmlinuz.name.removeprefix("vmlinuz-"),
            "busybox_package": BUSYBOX_PKG,
            "busybox_version": bver,
            "modules": order,
            "extra_modules": list(extra_modules),
        }
        (tmpdest / "artefacts.json").write_text(json.dumps(info, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(tmpdest, dest)
        info["dir"] = str(dest)
        say(f"guest kernel {pkg} {kver}, busybox {bver}, modules: {', '.join(order)}")
        return info
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for stale in root.glob(f".{abi}-*"):
            shutil.rmtree(stale, ignore_errors=True)


def prefetch(say=print) -> int:
    """`python -m perfbook prefetch-guest`: fetch and build the guest kernel now. tools/setup.sh runs
    it beside the Python packages' install, so the first guest chapter does not wait for it. A
    failure is only reported (exit 1, one line): that chapter fetches it again and says why.
    SIGTERM, SIGINT or the death of its parent (PR_SET_PDEATHSIG) stop it with its scratch
    directory removed (ensure_artefacts' finally)."""
    parent = os.getppid()
    term_with_parent()
    if os.getppid() != parent:  # the parent was gone before the request took effect
        return 130
    try:
        with guard.interruptible():
            info = ensure_artefacts(say)
    except KeyboardInterrupt:
        return 130
    except PerfbookError as e:  # MissingPrerequisite is one
        say(" ".join(str(e).split()))
        return 1
    say(f"cached in {info['dir']}")
    return 0


def main(argv: list[str]) -> int:
    """`perfbook prefetch-guest` (tools/setup.sh runs it beside the package install)."""
    return prefetch()
