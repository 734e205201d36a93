#!/usr/bin/env bash
# Set up this checkout: system packages (root on Debian), the pinned Python
# environment, the tools package and the C harnesses. Idempotent and quick when
# nothing changed. Prints what is missing and which chapters that affects.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
say() { printf '[setup] %s\n' "$*"; }

# ---- 1. system packages -------------------------------------------------------
pkgs=(); cmds=(); comps=(); uses=()
while read -r pkg cmd comp use; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  pkgs+=("$pkg"); cmds+=("$cmd"); comps+=("$comp"); uses+=("$use")
done < tools/system-packages.txt

have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for i in "${!pkgs[@]}"; do
  if command -v dpkg-query >/dev/null; then have_pkg "${pkgs[$i]}" || missing+=("$i")
  elif [[ "${cmds[$i]}" != "-" ]]; then command -v "${cmds[$i]}" >/dev/null || missing+=("$i"); fi
done

enable_nonfree() {
  # netperf lives in Debian's non-free component; add it only if it's absent.
  local f=/etc/apt/sources.list.d/debian.sources
  if [[ -f $f ]]; then
    if ! grep -Eq '^Components:.*\bnon-free\b' "$f"; then
      say "enabling Debian's non-free component in $f (needed by: netperf)"
      sed -i -E '/^Components:/{/\bnon-free\b/!s/$/ non-free/}' "$f"
      return 0
    fi
  elif [[ -f /etc/apt/sources.list ]] && ! grep -Eq '^deb .* non-free' /etc/apt/sources.list; then
    say "enabling Debian's non-free component in /etc/apt/sources.list (needed by: netperf)"
    sed -i -E '/^deb .*debian/{/ non-free( |$)/!s/$/ non-free/}' /etc/apt/sources.list
    return 0
  fi
  return 1
}

if (( ${#missing[@]} )); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null && [[ -f /etc/debian_version ]]; then
    names=(); need_nonfree=0
    for i in "${missing[@]}"; do names+=("${pkgs[$i]}"); [[ "${comps[$i]}" == non-free ]] && need_nonfree=1; done
    (( need_nonfree )) && enable_nonfree || true
    say "installing Debian packages: ${names[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
    # one by one, so that one unavailable package doesn't block the others
    for n in "${names[@]}"; do
      apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$n" >/dev/null 2>&1 \
        || say "could not install $n (see: apt-get install $n)"
    done
    still=(); for i in "${missing[@]}"; do have_pkg "${pkgs[$i]}" || still+=("$i"); done
    missing=("${still[@]+"${still[@]}"}")
  fi
  if (( ${#missing[@]} )); then
    say "missing system packages (run this setup as root on Debian to install them):"
    for i in "${missing[@]}"; do say "  ${pkgs[$i]}: ${uses[$i]}"; done
  fi
else
  say "system packages: all present"
fi

# ---- 2. Python environment -----------------------------------------------------
# conda users who activated the env from environment.yml keep it; everyone
# else gets .venv with exactly the same pins.
reqs=tools/requirements.lock   # the one list of exact pins (pyproject.toml says how it is made)
mkdir -p build
stamp_want=$(sha256sum "$reqs" pyproject.toml | sha256sum | cut -c1-16)
if [[ -n "${CONDA_PREFIX:-}" && "$(basename "${CONDA_PREFIX}")" == perfbook ]]; then
  PY="$CONDA_PREFIX/bin/python"; say "using the active conda env $CONDA_PREFIX"
else
  PY="$ROOT/.venv/bin/python"
  if [[ ! -x $PY ]]; then
    say "creating .venv"
    # without pip of its own (3 s saved) where python3's pip can install uv into it
    # (pip --python); ensurepip adds it later if the install falls back to pip
    if python3 -m pip --version >/dev/null 2>&1; then venv_args=(--without-pip); else venv_args=(); fi
    python3 -m venv "${venv_args[@]+"${venv_args[@]}"}" .venv \
      || { say "python3 -m venv failed: install python3-venv"; exit 1; }
  fi
fi
# the guest kernel (Debian's cloud kernel and busybox, cached in build/guest) is fetched beside
# the packages' install rather than by the first guest chapter; stopped with setup (trap, and
# PR_SET_PDEATHSIG inside it)
prefetch=
if command -v qemu-system-x86_64 >/dev/null && command -v apt-get >/dev/null; then
  # from tools/: it may run before the package is installed (it needs the standard library only)
  PYTHONPATH="$ROOT/tools${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m perfbook prefetch-guest > build/guest-prefetch.log 2>&1 &
  prefetch=$!
  trap 'if [[ -n $prefetch ]]; then kill -TERM "$prefetch" 2>/dev/null; wait "$prefetch" 2>/dev/null; fi' EXIT
fi
stamp="$(dirname "$PY")/../.perfbook-stamp"
if [[ "$(cat "$stamp" 2>/dev/null)" != "$stamp_want" ]]; then
  say "installing the pinned Python packages ($(grep -c "==" "$reqs") pins from $reqs)"
  # uv (pinned here too) installs the same pins in about 5 s where pip takes 40-70 s from a
  # fresh clone on this project's 2-core machine; the bytecode is written after it, for what
  # our runs import only (tools/perfbook/dev/bytecode.py). No cache of its own is left in $HOME. Where uv
  # cannot be fetched or cannot reach the index pip's configuration names, pip does it, as before.
  uv_pin=$(grep -E '^uv==' "$reqs" || true)
  if "$PY" -m pip --version >/dev/null 2>&1; then pip=("$PY" -m pip); else pip=(python3 -m pip --python "$PY"); fi
  if [[ -n $uv_pin ]] && "${pip[@]}" install -q --disable-pip-version-check "$uv_pin" >build/uv.log 2>&1 \
     && "$(dirname "$PY")/uv" pip install -q --no-cache --native-tls \
          --python "$PY" -r "$reqs" >>build/uv.log 2>&1; then
    editable=("$(dirname "$PY")/uv" pip install -q --no-cache --python "$PY")
  else
    [[ -n $uv_pin ]] && say "uv could not install the pins (build/uv.log says why); installing with pip"
    "$PY" -m pip --version >/dev/null 2>&1 || "$PY" -m ensurepip -q >>build/uv.log 2>&1 \
      || { say "no pip in $PY and ensurepip failed: install python3-venv"; exit 1; }
    "$PY" -m pip install -q --disable-pip-version-check -r "$reqs"
    editable=("$PY" -m pip install -q --disable-pip-version-check)
  fi
  "${editable[@]}" --no-deps --no-build-isolation -e . >build/pip-editable.log 2>&1 \
    || { cat build/pip-editable.log; exit 1; }
  # bytecode for what our runs import (tools/perfbook/dev/bytecode.py: 9 s here), not for the whole
  # environment (uv's --compile-bytecode: 20 s); two processes, one per core
  env -u PYTHONDONTWRITEBYTECODE "$PY" -m perfbook bytecode notebooks >build/bytecode.log 2>&1 &
  bytecode=$!
  env -u PYTHONDONTWRITEBYTECODE "$PY" -m perfbook bytecode book >>build/bytecode.log 2>&1 || true
  wait "$bytecode" || true
  echo "$stamp_want" > "$stamp"
else
  say "Python packages: up to date"
fi
echo "$PY" > build/python
# the notebooks' kernel (tools/perfbook/book/jupyter/kernel.py), reached over Unix sockets in the private state
# directory through the provisioner it names (tools/perfbook/book/jupyter/provisioner.py, an entry point of the
# editable install above); written on every setup, since reinstalling ipykernel puts its own back
"$PY" -c 'import perfbook.book.jupyter.kernel as k; k.install_kernelspec()'

# ---- 3. C harnesses ---------------------------------------------------------------
if command -v gcc >/dev/null; then
  "$PY" -c 'import perfbook.probes.cbuild as c, pathlib
for s in sorted(pathlib.Path("tools/c").glob("*.c")): print("[setup] built", c.binary(s.stem))'
else
  say "no gcc: the C harnesses are not built; chapters render from committed data only"
fi
if [[ -n $prefetch ]]; then
  if wait "$prefetch"; then say "guest kernel: $(tail -n 1 build/guest-prefetch.log)"
  else say "guest kernel not fetched now ($(tail -n 1 build/guest-prefetch.log)); the first guest chapter fetches it"; fi
  prefetch=
fi
say "done"
