"""A dataset's manifest: its schema version, its fields, the migrations of older schemas,
and the typed view every reader gets (perfbook.data.dataset.load_manifest checks a manifest against
its directory, then migrates it here)."""

from __future__ import annotations

from pathlib import Path

SCHEMA = 4  # see Manifest and migrate() for what each version changed

REQUIRED = ("schema", "chapter", "run_id", "host", "parameters", "started", "finished", "tables")


# The manifest's own fields; everything a chapter records beyond them lives in "facts".
FIELDS = (
    "schema",
    "chapter",
    "run_id",
    "host",
    "profile",
    "parameters",
    "tools",
    "git",
    "started",
    "finished",
    "tables",
    "skipped",
    "notes",
    "facts",
    "disturbance",
    "phases",
)


def migrate(m: dict) -> dict:
    """A manifest of any schema this code reads, as the current schema (in memory: a
    committed dataset is never rewritten).

    1 -> 2: the profile moves from parameters["profile"] to its own field (None when the
            run did not record it), and a chapter's own facts (top-level keys beyond the
            manifest's fields) move under "facts".
    2 -> 3: "disturbance", the run monitor's record (perfbook.hoststate.monitor: steal time, load, gaps
            and the verdict `disturbed`), None for a run that had no monitor.
    3 -> 4: "phases", the seconds of the collect per kind (perfbook.core.phases: framework,
            boot, setup, warmup, measured, other, restore), None for a run that did not say.
    """
    m = dict(m)
    if m["schema"] == 1:
        params = dict(m["parameters"])
        m["profile"] = params.pop("profile", None)
        m["parameters"] = params
        m["facts"] = {k: m.pop(k) for k in list(m) if k not in FIELDS}
        m["schema"] = 2
    if m["schema"] == 2:
        m["disturbance"] = None
        m["schema"] = 3
    if m["schema"] == 3:
        m["phases"] = None
        m["schema"] = 4
    m.setdefault("skipped", {})
    m.setdefault("notes", [])
    m.setdefault("tools", {})
    m.setdefault("disturbance", None)
    m.setdefault("phases", None)
    return m


class Manifest(dict):
    """A dataset's manifest, validated and migrated to the current schema (load_manifest).

    The fields (FIELDS) are also attributes: m.run_id, m.host_id, m.profile, m.parameters,
    m.facts (what the chapter recorded), m.host (the host facts), m.disturbance (the run
    monitor's record, None before schema 3), m.path (the directory)."""

    def __init__(self, data: dict, path: Path | None = None):
        super().__init__(data)
        self.path = path

    def __getattr__(self, name):
        if name in FIELDS:
            return self[name]
        raise AttributeError(name)

    @property
    def host_id(self) -> str:
        return self["host"]["host_id"]

    @property
    def seconds(self) -> float | None:
        """How long the collect took (started to finished), or None where the manifest does not
        say (a field missing or not a time)."""
        # lazy: datetime only for the few readers of a run's time
        import datetime as dt

        try:
            t = dt.datetime.fromisoformat(self["finished"]) - dt.datetime.fromisoformat(
                self["started"]
            )
        except (KeyError, TypeError, ValueError):
            return None
        return t.total_seconds()

    @property
    def key(self) -> tuple[str, str]:
        return (self.host_id, self["run_id"])

    @property
    def label(self) -> str:
        """host/run, as tables and legends name a dataset."""
        return f"{self.host_id}/{self['run_id']}"
