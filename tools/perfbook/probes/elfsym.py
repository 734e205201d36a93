"""Symbol -> file offset, the number a uprobe definition needs.

uprobe_events wants PATH:OFFSET where OFFSET is a position in the *file*, not
a virtual address. For a symbol at virtual address V inside the PT_LOAD
segment with (p_vaddr, p_offset):

    file_offset = V - p_vaddr + p_offset

This holds for non-PIE executables (p_vaddr around 0x400000), PIE executables
and shared libraries (p_vaddr near 0, but text segments usually start at a
p_offset different from 0), because it uses the segment that holds the
symbol. Subtracting "the text segment start" only works when p_vaddr - p_offset
equals that start, which is what the 2013 recipe silently assumed.

Which symbol a name means:

* ``name@VERSION`` asks for that symbol version (``name@@VERSION`` for the
  default one); a plain ``name`` means what the dynamic linker binds a new
  reference to: the unversioned symbol or the *default* version (``@@``, the
  one not marked hidden in ``.gnu.version``), never a compat version.
  Versions come from ``.gnu.version``/``.gnu.version_d`` for ``.dynsym`` and
  from the ``name@V``/``name@@V`` spelling GNU ld leaves in ``.symtab``.
* GNU IFUNC symbols (``STT_GNU_IFUNC``, type 10, which pyelftools names
  ``STT_LOOS``) are accepted, but their value is the *resolver*: a uprobe at
  that offset fires when the dynamic linker resolves the symbol (about once per
  process), not on each call. ``SymbolLocation.ifunc`` says so; probe the
  implementation the resolver returns to count calls.
* Several distinct definitions of one name (e.g. two ``static`` functions in two
  translation units) are ambiguous: we raise an error listing them instead of
  picking one.
* A truncated or corrupt file raises a one-line PerfbookError naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elftools.elf.constants import P_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerDefSection, GNUVerSymSection

from perfbook.core.errors import PerfbookError


@dataclass(frozen=True)
class SymbolLocation:
    path: str
    symbol: str
    vaddr: int
    size: int
    file_offset: int
    seg_vaddr: int
    seg_offset: int
    elf_type: str  # ET_EXEC (non-PIE) or ET_DYN (PIE or shared library)
    executable_segment: bool
    version: str | None = None  # symbol version (None: unversioned)
    ifunc: bool = False  # STT_GNU_IFUNC: the offset is the resolver's


# st_info type 10 is STT_GNU_IFUNC on GNU systems; pyelftools calls it STT_LOOS.
_FUNC_TYPES = ("STT_FUNC", "STT_NOTYPE", "STT_GNU_IFUNC", "STT_LOOS", 10)
_IFUNC_TYPES = ("STT_GNU_IFUNC", "STT_LOOS", 10)


@dataclass(frozen=True)
class _Candidate:
    name: str
    version: str | None
    default: bool  # unversioned or the default (@@) version
    sym: object
    table: str


def _verdef_names(elf: ELFFile) -> dict[int, str]:
    names = {}
    for sec in elf.iter_sections():
        if isinstance(sec, GNUVerDefSection):
            for verdef, aux in sec.iter_versions():
                first = next(iter(aux), None)
                if first is not None:
                    names[verdef["vd_ndx"]] = first.name
    return names


def _candidates(elf: ELFFile):
    """Every defined function-like symbol as (base name, version, default?)."""
    verdefs = None
    versym = None
    for sec in elf.iter_sections():
        if isinstance(sec, GNUVerSymSection):
            versym = sec
    for secname in (".symtab", ".dynsym"):
        sec = elf.get_section_by_name(secname)
        if sec is None:
            continue
        for i, s in enumerate(sec.iter_symbols()):
            if s["st_shndx"] == "SHN_UNDEF" or s["st_info"]["type"] not in _FUNC_TYPES:
                continue
            name, version, default = s.name, None, True
            if "@" in name:  # .symtab spelling: foo@V1, foo@@V2
                name, sep, version = name.partition("@")
                default = version.startswith("@")
                version = version.lstrip("@")
            elif secname == ".dynsym" and versym is not None:
                ndx = versym.get_symbol(i)["ndx"]
                if isinstance(ndx, int) and (ndx & 0x7FFF) >= 2:
                    if verdefs is None:
                        verdefs = _verdef_names(elf)
                    version = verdefs.get(ndx & 0x7FFF)
                    default = not ndx & 0x8000
                    if version is None:  # not ours (verneed): not a definition here
                        continue
            yield _Candidate(name, version, default, s, secname)


def _describe(c: _Candidate) -> str:
    v = "" if c.version is None else ("@@" if c.default else "@") + c.version
    return (
        f"{c.name}{v} at {c.sym['st_value']:#x} size {c.sym['st_size']} "
        f"({c.sym['st_info']['bind']}, {c.table})"
    )


def _pick(elf: ELFFile, path: Path, symbol: str) -> _Candidate:
    name, sep, want = symbol.partition("@")
    want_default = want.startswith("@")
    want = want.lstrip("@") if sep else None
    if sep and not want:
        raise PerfbookError(f"bad symbol {symbol!r}: expected NAME, NAME@VERSION or NAME@@VERSION")
    same_name = [c for c in _candidates(elf) if c.name == name]
    if want is None:
        found = [c for c in same_name if c.default]
    else:
        found = [c for c in same_name if c.version == want and (c.default or not want_default)]
    if not found:
        if same_name:
            have = ", ".join(sorted({_describe(c) for c in same_name}))
            raise PerfbookError(f"symbol {symbol!r} not found in {path}; it has only: {have}")
        raise PerfbookError(
            f"symbol {symbol!r} not found in {path} (stripped, or not defined there)"
        )
    by_addr: dict[int, _Candidate] = {}
    for c in found:  # .symtab and .dynsym repeat the same symbol
        by_addr.setdefault(c.sym["st_value"], c)
    if len(by_addr) > 1:
        listing = "; ".join(
            _describe(c) for c in sorted(by_addr.values(), key=lambda c: c.sym["st_value"])
        )
        raise PerfbookError(
            f"symbol {symbol!r} is ambiguous in {path}, {len(by_addr)} definitions: {listing}"
        )
    return next(iter(by_addr.values()))


def locate(path: str | Path, symbol: str) -> SymbolLocation:
    """Where ``symbol`` (``name``, ``name@VERSION`` or ``name@@VERSION``) sits in the file.

    For a GNU IFUNC symbol the result is the resolver's offset (``ifunc`` is
    True): a uprobe there counts resolutions, not calls.
    """
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise PerfbookError(f"cannot open {path}: {e.strerror}") from None
    with f:
        try:
            elf = ELFFile(f)
        except Exception:
            raise PerfbookError(f"{path} is not an ELF file (or its header is truncated)") from None
        try:
            return _locate(elf, path, symbol)
        except PerfbookError:
            raise
        except Exception as e:  # elftools' ELFError/ELFParseError, struct/construct errors, ...
            detail = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise PerfbookError(
                f"{path} is a truncated or corrupt ELF file ({type(e).__name__}: {detail})"
            ) from None


def _locate(elf: ELFFile, path: Path, symbol: str) -> SymbolLocation:
    c = _pick(elf, path, symbol)
    sym = c.sym
    v = sym["st_value"]
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_LOAD":
            continue
        lo, hi = seg["p_vaddr"], seg["p_vaddr"] + seg["p_filesz"]
        if lo <= v < hi:
            return SymbolLocation(
                str(path),
                symbol,
                v,
                sym["st_size"],
                v - seg["p_vaddr"] + seg["p_offset"],
                seg["p_vaddr"],
                seg["p_offset"],
                elf.header["e_type"],
                bool(seg["p_flags"] & P_FLAGS.PF_X),
                c.version,
                sym["st_info"]["type"] in _IFUNC_TYPES,
            )
    raise PerfbookError(
        f"symbol {symbol!r} at {v:#x} lies in no file-backed PT_LOAD segment of {path}"
    )


def file_offset(path: str | Path, symbol: str) -> int:
    return locate(path, symbol).file_offset
