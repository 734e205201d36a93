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
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elftools.elf.constants import P_FLAGS
from elftools.elf.elffile import ELFFile

from .errors import PerfbookError


@dataclass(frozen=True)
class SymbolLocation:
    path: str
    symbol: str
    vaddr: int
    size: int
    file_offset: int
    seg_vaddr: int
    seg_offset: int
    elf_type: str        # ET_EXEC (non-PIE) or ET_DYN (PIE or shared library)
    executable_segment: bool


def _symbols(elf: ELFFile):
    for secname in (".symtab", ".dynsym"):
        sec = elf.get_section_by_name(secname)
        if sec is not None:
            yield from sec.iter_symbols()


def locate(path: str | Path, symbol: str) -> SymbolLocation:
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise PerfbookError(f"cannot open {path}: {e.strerror}") from None
    with f:
        try:
            elf = ELFFile(f)
        except Exception:
            raise PerfbookError(f"{path} is not an ELF file") from None
        sym = None
        for s in _symbols(elf):
            if s.name == symbol and s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC", "STT_NOTYPE"):
                sym = s
                break
        if sym is None:
            raise PerfbookError(f"symbol {symbol!r} not found in {path} (stripped, or not defined there)")
        v = sym["st_value"]
        for seg in elf.iter_segments():
            if seg["p_type"] != "PT_LOAD":
                continue
            lo, hi = seg["p_vaddr"], seg["p_vaddr"] + seg["p_filesz"]
            if lo <= v < hi:
                return SymbolLocation(
                    str(path), symbol, v, sym["st_size"], v - seg["p_vaddr"] + seg["p_offset"],
                    seg["p_vaddr"], seg["p_offset"], elf.header["e_type"],
                    bool(seg["p_flags"] & P_FLAGS.PF_X))
        raise PerfbookError(f"symbol {symbol!r} at {v:#x} lies in no file-backed PT_LOAD segment of {path}")


def file_offset(path: str | Path, symbol: str) -> int:
    return locate(path, symbol).file_offset
