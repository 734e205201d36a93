"""Chapter parameters: merge a profile with overrides, and validate them.

Every error is a ParameterError whose message says what to pass instead.
"""
from __future__ import annotations

from .errors import ParameterError


def merge(profile: str, profiles: dict, common: dict, overrides: dict) -> dict:
    """profiles[profile] + common, then the non-None overrides; unknown keys fail."""
    if profile not in profiles:
        raise ParameterError(f"profile must be one of {tuple(profiles)}, got {profile!r}")
    p = {**profiles[profile], **common}
    for k, v in overrides.items():
        if k not in p:
            raise ParameterError(f"unknown parameter {k!r}; known: {', '.join(sorted(p))}")
        if v is not None:
            p[k] = v
    return p


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_ints(p: dict, minimums: dict[str, int]) -> None:
    """Each p[k] must be an integer >= minimums[k]."""
    for k, lo in minimums.items():
        v = p[k]
        if not is_int(v) or v < lo:
            raise ParameterError(f"{k} must be an integer >= {lo}, got {v!r}")


def choose_list(value, allowed, what: str, default=None) -> list[str]:
    """A list (or comma-separated string) whose items all come from `allowed`."""
    if value is None:
        value = list(default if default is not None else allowed)
    elif isinstance(value, str):
        value = [x.strip() for x in value.split(",") if x.strip()]
    value = list(value)
    unknown = [x for x in value if x not in allowed]
    if unknown or not value:
        raise ParameterError(f"unknown {what} {', '.join(map(str, unknown)) or '(empty list)'}; "
                             f"choose from {', '.join(allowed)}")
    return list(dict.fromkeys(value))


def begin_collect(params_fn, preflight_fn, profile: str, overrides: dict, data_dir):
    """The start of every collect(): validated parameters first (bad input stops here),
    then the host check (MissingPrerequisite: a skip), then the data directory."""
    from .errors import MissingPrerequisite
    from .paths import resolve_data_dir
    p = params_fn(profile, **overrides)
    reasons = preflight_fn()
    if reasons:
        raise MissingPrerequisite(reasons[0])
    return p, resolve_data_dir(data_dir)
