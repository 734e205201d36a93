"""environment.yml is the one list of pins; the pip route installs exactly it."""

import re
import subprocess
import sys
from importlib import metadata

import yaml

from conftest import ROOT


def env_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return dict(p.split("==") for p in pip)


def test_every_pip_dependency_is_pinned_exactly():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert pip, "environment.yml has no pip list"
    for line in pip:
        assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[A-Za-z0-9_.+\-]+", line), (
            f"not an exact pin: {line}"
        )


def test_required_packages_are_listed():
    pins = {k.lower() for k in env_pins()}
    for name in (
        "jupyter-book",
        "pandas",
        "seaborn",
        "papermill",
        "nbval",
        "pyelftools",
        "ipykernel",
        "pytest",
        "scipy",
        "myst-nb",
    ):
        assert name in pins, f"{name} is missing from environment.yml"
    assert env_pins()["jupyter-book"].startswith("1."), (
        "the book is Jupyter Book 1.x (Sphinx engine)"
    )


def lock_pins():
    lines = (ROOT / "tools" / "requirements.lock").read_text().splitlines()
    return dict(ln.split("==") for ln in lines if ln and not ln.startswith("#"))


def test_the_lock_and_environment_yml_hold_the_same_pins():
    """tools/setup.sh installs tools/requirements.lock; Binder and conda read environment.yml:
    both must give the same environment."""
    assert lock_pins() == env_pins()


def test_setup_installs_the_lock_and_the_package():
    script = (ROOT / "tools" / "setup.sh").read_text()
    assert "reqs=tools/requirements.lock" in script and '-r "$reqs"' in script
    assert "-e . >build/pip-editable.log" in script


def test_every_declared_dependency_is_pinned_in_the_lock():
    """pyproject.toml declares what the package needs; the lock must pin each of them (an
    added dependency without `uv pip compile` would leave readers' machines without it)."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        wanted += extra
    pins = {k.lower().replace("_", "-").replace(".", "-"): v for k, v in lock_pins().items()}
    missing = []
    for line in wanted:
        req = Requirement(line)
        name = req.name.lower().replace("_", "-").replace(".", "-")
        if name not in pins or not req.specifier.contains(pins[name], prereleases=True):
            missing.append(f"{line} (lock: {pins.get(name, 'absent')})")
    assert not missing, (
        "pyproject.toml needs what tools/requirements.lock does not pin: " + "; ".join(missing)
    )


def test_installed_versions_match_the_pins():
    """The environment running the tests is the pinned one: nothing drifted."""
    drift = []
    for name, want in env_pins().items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            drift.append(f"{name}: not installed")
            continue
        if have != want:
            drift.append(f"{name}: installed {have}, pinned {want}")
    assert not drift, "installed packages differ from environment.yml: " + "; ".join(drift)


def test_every_module_the_setup_compiles_ahead_is_installed():
    """tools/perfbook/dev/bytecode.py names the entry points whose bytecode setup writes; a renamed or
    dropped one would silently leave its modules to be compiled again by every process."""
    import importlib.util

    from perfbook.dev import bytecode

    gone = [n for g in bytecode.GROUPS.values() for n in g if importlib.util.find_spec(n) is None]
    for n in (n for g in bytecode.WHOLE.values() for n in g):  # packages, compiled as directories
        spec = importlib.util.find_spec(n)
        if spec is None or not spec.submodule_search_locations:
            gone.append(n)
    assert not gone, f"tools/perfbook/dev/bytecode.py names modules that are not installed: {gone}"
    assert set(bytecode.GROUPS) == set(bytecode.WHOLE)
    script = (ROOT / "tools" / "setup.sh").read_text()
    for group in bytecode.GROUPS:  # setup runs every group, with the variable unset
        assert f'env -u PYTHONDONTWRITEBYTECODE "$PY" -m perfbook bytecode {group}' in script


def test_the_bytecode_step_refuses_an_unknown_group():
    out = subprocess.run(
        [sys.executable, "-m", "perfbook", "bytecode", "everything"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "usage: python -m perfbook bytecode notebooks|book" in out.stderr


def test_the_bytecode_step_names_what_it_could_not_import(monkeypatch, capsys):
    """A module an upgrade renamed shows in build/bytecode.log (setup sends main()'s line
    there), not only in the test above."""
    from perfbook.dev import bytecode

    monkeypatch.setitem(bytecode.GROUPS, "book", ["json", "no_such_module_perfbook"])
    monkeypatch.setitem(bytecode.WHOLE, "book", ["no_such_package_perfbook"])
    assert bytecode.warm("book") == ["no_such_module_perfbook", "no_such_package_perfbook"]
    monkeypatch.setattr("perfbook.core.proc.die_with_parent", lambda: None)
    assert bytecode.main(["book"]) == 0
    assert capsys.readouterr().out.strip() == (
        "[bytecode] book: compiled; not found or not importable: "
        "no_such_module_perfbook, no_such_package_perfbook"
    )
