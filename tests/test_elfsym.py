"""Symbol -> file offset on a PIE executable, a non-PIE executable and a shared library.

Two independent checks: the bytes at the computed file offset are the symbol's
code (read from its section), and -- as root -- a uprobe defined at that offset
fires exactly as often as the function is called.
"""
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from conftest import need_root, need_tool
from tools import elfsym
from tools.errors import PerfbookError

SRC = r"""
#include <stdlib.h>
__attribute__((noinline)) int target_fn(int x) { return x * 3 + 1; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1, s = 0;
    for (int i = 0; i < n; i++) s += target_fn(i);
    return s == -1;
}
"""
LIB = r"""
__attribute__((noinline)) int lib_fn(int x) { return x ^ 0x5a; }
"""
LIB_MAIN = r"""
#include <stdlib.h>
int lib_fn(int);
int main(int argc, char **argv) { int n = atoi(argv[1]), s = 0; for (int i = 0; i < n; i++) s += lib_fn(i); return s == -1; }
"""


@pytest.fixture(scope="module")
def binaries(tmp_path_factory):
    need_tool("gcc")
    d = tmp_path_factory.mktemp("elf")
    (d / "t.c").write_text(SRC)
    (d / "lib.c").write_text(LIB)
    (d / "m.c").write_text(LIB_MAIN)
    cc = lambda *a: subprocess.run(["gcc", "-O2", *a], cwd=d, check=True, capture_output=True)
    cc("-pie", "-fPIE", "-o", "pie", "t.c")
    cc("-no-pie", "-fno-PIE", "-o", "nopie", "t.c")
    cc("-shared", "-fPIC", "-o", "libpb.so", "lib.c")
    cc("-o", "uselib", "m.c", "-L.", "-lpb", f"-Wl,-rpath,{d}")
    return d


def _bytes_from_section(path, vaddr, n):
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for sec in elf.iter_sections():
            a = sec["sh_addr"]
            if a and a <= vaddr < a + sec["sh_size"] and sec["sh_type"] == "SHT_PROGBITS":
                data = sec.data()
                return data[vaddr - a: vaddr - a + n]
    raise AssertionError("no section holds the symbol")


@pytest.mark.parametrize("name,sym,etype", [("pie", "target_fn", "ET_DYN"),
                                            ("nopie", "target_fn", "ET_EXEC"),
                                            ("libpb.so", "lib_fn", "ET_DYN")])
def test_offset_points_at_the_symbols_code(binaries, name, sym, etype):
    path = binaries / name
    loc = elfsym.locate(path, sym)
    assert loc.elf_type == etype and loc.executable_segment
    assert loc.file_offset == loc.vaddr - loc.seg_vaddr + loc.seg_offset
    raw = path.read_bytes()[loc.file_offset: loc.file_offset + loc.size]
    assert raw == _bytes_from_section(path, loc.vaddr, loc.size)


def test_nonpie_offset_is_not_the_virtual_address(binaries):
    loc = elfsym.locate(binaries / "nopie", "target_fn")
    assert loc.vaddr >= 0x400000 and loc.file_offset < 0x400000


def test_missing_symbol_and_non_elf_are_clear_errors(binaries, tmp_path):
    with pytest.raises(PerfbookError, match="not found"):
        elfsym.locate(binaries / "pie", "no_such_function")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(PerfbookError, match="not an ELF"):
        elfsym.locate(tmp_path / "x.txt", "main")


@pytest.mark.parametrize("name,run,sym", [("pie", ["pie", "137"], "target_fn"),
                                          ("nopie", ["nopie", "137"], "target_fn"),
                                          ("libpb.so", ["uselib", "137"], "lib_fn")])
def test_live_uprobe_fires_at_the_computed_offset(binaries, name, run, sym):
    need_root("placing a uprobe")
    from tools.tracefs import TraceSession, preflight
    if preflight():
        pytest.skip(preflight()[0])
    with TraceSession("elftest") as s:
        ev = s.add_uprobe("t", binaries / name, elfsym.file_offset(binaries / name, sym))
        s.enable(ev)
        subprocess.run([str(binaries / run[0]), run[1]], check=False)
        assert s.uprobe_hits()[ev] == 137
