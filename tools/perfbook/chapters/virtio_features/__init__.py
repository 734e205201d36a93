"""Chapter 'virtio_features': virtio feature bits decoded from sysfs, on this host and
inside tiny QEMU guests whose virtio-blk disks are offered with different options.

  parse.py         the sysfs files read and the guest disk configurations; sysfs dumps ->
                   device, bit and block-disk records (pure)
  featurebits/     the bit tables (every name, its C macro and where it comes from) and the
                   decoder: feature strings -> named bits (pure)
  collect.py       measure(ctx): the host snapshot and the guest boots
  analysis.py      VirtioData (the dumps decoded once), the guests' disks, the two bit matrices
  tables.py        the tables the page shows, and the runs table's columns
  prose.py         every value the prose quotes, and the platform banner's note
  figures.py       the two heatmaps
  key_findings.py  the key findings
"""

from __future__ import annotations

from perfbook.core.errors import ParameterError
from perfbook.framework.contract import Chapter, Param, Table
from perfbook.qemu import guest

from .parse import GUEST_CONFIGS, OPTION_KEYS, SYSFS_VIRTIO, config_list

# the configs table's opt_<key> columns: only those of the configs a run booted are present;
# the on/off ones are true, false or missing (a config that did not set it)
_OPTION_TYPES = {"cache": "str", "num_queues": "int"}


class VirtioFeatures(Chapter):
    name = "virtio_features"
    title = "virtio feature bits decoded from sysfs, on this host and inside guests"
    # Nothing repeats: one guest boot per vCPU count (default: 2 boots, ~12 s under TCG on 2
    # CPUs), the host's and the guests' sysfs read once. Where /dev/kvm exists but a KVM guest
    # never reaches init (this host), kvm_boot_timeout passes before the TCG fallback; a KVM
    # guest reaches init within about a second, so 4 s (quick: 3 s) is margin, not 10 s. About
    # 17 s in all (plan_s).
    plan_s = {
        "quick": 5,
        "default": 17,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "guest": True,
            "configs": "default,writethrough+config-wce=off,legacy+scsi=on,packed=on",
            "accel": "auto",
            "kvm_boot_timeout": 3.0,
            "boot_timeout": 90.0,
            "separate_boots": False,
        },
        "default": {
            "guest": True,
            "configs": "all",
            "accel": "auto",
            "kvm_boot_timeout": 4.0,
            "boot_timeout": 150.0,
            "separate_boots": False,
        },
        "full": {
            "guest": True,
            "configs": "all",
            "accel": "auto",
            "kvm_boot_timeout": 20.0,
            "boot_timeout": 180.0,
            "separate_boots": True,
        },
    }
    params = {
        "guest": Param(bool, help="boot the tiny guests (false: only this host's snapshot)"),
        "configs": Param(str, help='"all" or a comma-separated list of guest disk configs'),
        "accel": Param(
            str,
            choices=("auto", "kvm", "tcg"),
            help="auto: KVM if the guest boots in time, else TCG",
        ),
        "kvm_boot_timeout": Param(
            float, min=1, max=900, help="seconds a KVM guest gets to reach its init"
        ),
        "boot_timeout": Param(float, min=1, max=900, help="seconds a guest gets to run its script"),
        "separate_boots": Param(
            bool, help="one guest per disk config instead of one per vCPU count"
        ),
    }
    tables = {
        "sysfs": Table(source="str", boot="int", path="str", value="str"),
        "configs": Table(
            boot="int",
            config="str",
            serial="str",
            cpus="int",
            qemu_options="str",
            **{f"opt_{k}": _OPTION_TYPES.get(k, "bool") for k in OPTION_KEYS},
            optional=tuple(f"opt_{k}" for k in OPTION_KEYS),
        ),
        "boots": Table(
            boot="int",
            cpus="int",
            n_disks="int",
            accel="str",
            accel_note="str",
            boot_seconds="float",
            total_seconds="float",
            rc="int",
            guest_kernel="str",
            qemu_version="str",
            qemu_cmdline="str",
        ),
    }
    reference = ("virtio_features",)
    needs_text = "QEMU for the guest part, with KVM where /dev/kvm works and TCG elsewhere"

    def check(self, p: dict) -> None:
        names = config_list(p["configs"])
        unknown = [c for c in names if c not in GUEST_CONFIGS]
        if unknown or not names:
            raise ParameterError(
                f"unknown guest config(s) {unknown or p['configs']!r}; "
                f"known: all, {', '.join(GUEST_CONFIGS)}"
            )

    def preflight(self) -> list[str]:
        """The host snapshot needs only sysfs; without virtio devices and QEMU there is nothing."""
        if SYSFS_VIRTIO.is_dir() and any(SYSFS_VIRTIO.iterdir()):
            return []
        g = guest.preflight()
        if not g:
            return []
        return [f"this host has no virtio devices in {SYSFS_VIRTIO} and no guest can run: {g[0]}"]

    def load(self, data_dir=None):
        """Every dataset (analysis.VirtioData: the sysfs dumps decoded once)."""
        return self.part("analysis").VirtioData(self, data_dir)


chapter = VirtioFeatures()
