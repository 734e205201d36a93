"""Chapter 'virtio_features': virtio feature bits decoded from sysfs, on this host and
inside tiny QEMU guests whose virtio-blk disks are offered with different options.

  bits.py            the bit tables: every name, its C macro and where it comes from
  decode.py          feature strings -> named bits (pure)
  spec.py            the sysfs files read and the guest disk configurations
  parse.py           sysfs dumps -> device, bit and block-disk records (pure)
  collect.py         measure(ctx): the host snapshot and the guest boots
  analysis.py        decoded frames, tables and findings() for the prose
  analysis_guest.py  the guests' disks and the two bit matrices
  figures.py         the two heatmaps
"""
from __future__ import annotations

from functools import cached_property

from perfbook.framework.contract import Chapter, Param, Table
from perfbook.data.dataset import Data
from perfbook.core.errors import ParameterError
from . import analysis, figures  # noqa: F401  (the notebook's entry points)
from .analysis import findings  # noqa: F401
from .spec import GUEST_CONFIGS, OPTION_KEYS, SYSFS_VIRTIO, config_list

# the configs table's opt_<key> columns: only those of the configs a run booted are present;
# the on/off ones are true, false or missing (a config that did not set it)
_OPTION_TYPES = {"cache": "str", "num_queues": "int"}


class VirtioData(Data):
    """The datasets, with the committed sysfs dumps decoded once (devices, bits, blocks) and
    the seed's strings."""

    @cached_property
    def _decoded(self):
        return analysis.decoded_tables(self["sysfs"], self["configs"], self["boots"])

    @property
    def devices(self):
        return self._decoded[0]

    @property
    def bits(self):
        return self._decoded[1]

    @property
    def blocks(self):
        return self._decoded[2]

    @cached_property
    def seed(self):
        # every column as text: a guessed type would turn a feature string into a number and
        # drop its leading zeros (bits 0 and 1)
        return self.reference("virtio_features", dtype=str)


class VirtioFeatures(Chapter):
    name = "virtio_features"
    title = "virtio feature bits decoded from sysfs, on this host and inside guests"
    # Nothing repeats: one guest boot per vCPU count (default: 2 boots, ~12 s under TCG on 2
    # CPUs), the host's and the guests' sysfs read once. Where /dev/kvm exists but a KVM guest
    # never reaches init (this host), kvm_boot_timeout passes before the TCG fallback; a KVM
    # guest reaches init within about a second, so 4 s (quick: 3 s) is margin, not 10 s. About
    # 17 s in all (plan_s).
    plan_s = {"quick": 5, "default": 17}   # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {"guest": True, "configs": "default,writethrough+config-wce=off,legacy+scsi=on,packed=on",
                  "accel": "auto", "kvm_boot_timeout": 3.0, "boot_timeout": 90.0, "separate_boots": False},
        "default": {"guest": True, "configs": "all", "accel": "auto", "kvm_boot_timeout": 4.0,
                    "boot_timeout": 150.0, "separate_boots": False},
        "full": {"guest": True, "configs": "all", "accel": "auto", "kvm_boot_timeout": 20.0,
                 "boot_timeout": 180.0, "separate_boots": True},
    }
    params = {
        "guest": Param(bool, help="boot the tiny guests (false: only this host's snapshot)"),
        "configs": Param(str, help='"all" or a comma-separated list of guest disk configs'),
        "accel": Param(str, choices=("auto", "kvm", "tcg"),
                       help="auto: KVM if the guest boots in time, else TCG"),
        "kvm_boot_timeout": Param(float, min=1, max=900, help="seconds a KVM guest gets to reach its init"),
        "boot_timeout": Param(float, min=1, max=900, help="seconds a guest gets to run its script"),
        "separate_boots": Param(bool, help="one guest per disk config instead of one per vCPU count"),
    }
    tables = {
        "sysfs": Table(source="str", boot="int", path="str", value="str"),
        "configs": Table(boot="int", config="str", serial="str", cpus="int", qemu_options="str",
                         **{f"opt_{k}": _OPTION_TYPES.get(k, "bool") for k in OPTION_KEYS},
                         optional=tuple(f"opt_{k}" for k in OPTION_KEYS)),
        "boots": Table(boot="int", cpus="int", n_disks="int", accel="str", accel_note="str",
                       boot_seconds="float", total_seconds="float", rc="int", guest_kernel="str",
                       qemu_version="str", qemu_cmdline="str"),
    }
    reference = ("virtio_features",)

    def check(self, p: dict) -> None:
        names = config_list(p["configs"])
        unknown = [c for c in names if c not in GUEST_CONFIGS]
        if unknown or not names:
            raise ParameterError(f"unknown guest config(s) {unknown or p['configs']!r}; "
                                 f"known: all, {', '.join(GUEST_CONFIGS)}")

    def preflight(self) -> list[str]:
        """The host snapshot needs only sysfs; without virtio devices and QEMU there is nothing."""
        if SYSFS_VIRTIO.is_dir() and any(SYSFS_VIRTIO.iterdir()):
            return []
        from perfbook.qemu import guest
        g = guest.preflight()
        if not g:
            return []
        return [f"this host has no virtio devices in {SYSFS_VIRTIO} and no guest can run: {g[0]}"]


    def load(self, data_dir=None) -> VirtioData:
        return VirtioData(self, data_dir)

    def run_columns(self, m) -> dict:
        return analysis.run_columns(m)


from .claims import KEY_FINDINGS  # noqa: E402
VirtioFeatures.key_findings = KEY_FINDINGS


def _platform_notes(self, D):
    from perfbook.analysis.findings import per_host_note, sections
    from .analysis import boot_findings
    return per_host_note(D, sections(boot_findings), lambda g: f"its QEMU guests ran under {g['accel_used']}"
                         + (f" ({g['accel_note']})" if g.get("accel_note") else ""))


VirtioFeatures.platform_notes = _platform_notes
VirtioFeatures.needs_text = 'QEMU for the guest part, with KVM where /dev/kvm works and TCG elsewhere'
chapter = VirtioFeatures()
