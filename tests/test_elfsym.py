"""Symbol -> file offset on a PIE executable, a non-PIE executable and a shared library.

Two independent checks: the bytes at the computed file offset are the symbol's
code (read from its section), and -- as root -- a uprobe defined at that offset
fires exactly as often as the function is called.
"""

import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from conftest import need_root, need_tool
from perfbook.core.errors import PerfbookError
from perfbook.probes import elfsym

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
                return data[vaddr - a : vaddr - a + n]
    raise AssertionError("no section holds the symbol")


@pytest.mark.parametrize(
    "name,sym,etype",
    [
        ("pie", "target_fn", "ET_DYN"),
        ("nopie", "target_fn", "ET_EXEC"),
        ("libpb.so", "lib_fn", "ET_DYN"),
    ],
)
def test_offset_points_at_the_symbols_code(binaries, name, sym, etype):
    path = binaries / name
    loc = elfsym.locate(path, sym)
    assert loc.elf_type == etype and loc.executable_segment
    assert loc.file_offset == loc.vaddr - loc.seg_vaddr + loc.seg_offset
    raw = path.read_bytes()[loc.file_offset : loc.file_offset + loc.size]
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


@pytest.mark.parametrize(
    "name,run,sym",
    [
        ("pie", ["pie", "137"], "target_fn"),
        ("nopie", ["nopie", "137"], "target_fn"),
        ("libpb.so", ["uselib", "137"], "lib_fn"),
    ],
)
def test_live_uprobe_fires_at_the_computed_offset(binaries, name, run, sym):
    need_root("placing a uprobe")
    from perfbook.hoststate.tracefs import TraceSession, preflight

    if preflight():
        pytest.skip(preflight()[0])
    with TraceSession("elftest") as s:
        ev = s.add_uprobe("t", binaries / name, elfsym.file_offset(binaries / name, sym))
        s.enable(ev)
        subprocess.run([str(binaries / run[0]), run[1]], check=False)
        assert s.uprobe_hits()[ev] == 137


# --- IFUNC, symbol versions, duplicate local names, corrupt files -------------

IFUNC_SRC = r"""
static int impl_a(int x) { return x + 1; }
typedef int (*fn_t)(int);
static fn_t pb_resolver(void) { return impl_a; }
int pb_ifunc(int x) __attribute__((ifunc("pb_resolver")));
"""
VER_SRC = r"""
__attribute__((noinline)) int foo_old(int x) { return x + 1; }
__attribute__((noinline)) int foo_new(int x) { return x * 7 + 3; }
__asm__(".symver foo_old,foo@V1");
__asm__(".symver foo_new,foo@@V2");
"""
VER_MAP = "V1 { global: foo; local: *; };\nV2 { global: foo; } V1;\n"
DUP_A = "static __attribute__((noinline,used)) int dup(int x) { return x + 11; }\nint a_call(int x) { return dup(x); }\n"
DUP_B = (
    "static __attribute__((noinline,used)) int dup(int x) { return x * 13 + 5; }\nint a_call(int);\n"
    "int b_call(int x) { return dup(x); }\nint main(int c, char **v) { return a_call(c) + b_call(c); }\n"
)


@pytest.fixture(scope="module")
def special(tmp_path_factory):
    need_tool("cc", "gcc")
    d = tmp_path_factory.mktemp("elfspecial")
    for name, text in [
        ("ifunc.c", IFUNC_SRC),
        ("ver.c", VER_SRC),
        ("ver.map", VER_MAP),
        ("a.c", DUP_A),
        ("b.c", DUP_B),
    ]:
        (d / name).write_text(text)
    cc = lambda *a: subprocess.run(["cc", "-O2", *a], cwd=d, check=True, capture_output=True)
    cc("-shared", "-fPIC", "-o", "libifunc.so", "ifunc.c")
    cc("-shared", "-fPIC", "-Wl,--version-script=ver.map", "-o", "libver.so", "ver.c")
    cc("-o", "dup", "a.c", "b.c")
    return d


def _readelf_syms(path):
    """(value, size, type, bind, name) rows as binutils' readelf prints them."""
    out = subprocess.run(
        ["readelf", "-sW", str(path)], check=True, capture_output=True, text=True
    ).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].endswith(":") and f[0][:-1].isdigit():
            rows.append((int(f[1], 16), int(f[2], 0), f[3], f[4], f[7]))
    return rows


def test_ifunc_symbol_is_accepted_and_points_at_the_resolver(special):
    need_tool("readelf", "binutils")
    rows = _readelf_syms(special / "libifunc.so")
    assert any(r[2] == "IFUNC" and r[4] == "pb_ifunc" for r in rows)  # really type 10
    resolver = {r[0] for r in rows if r[4] == "pb_resolver"}
    loc = elfsym.locate(special / "libifunc.so", "pb_ifunc")
    assert loc.ifunc and loc.executable_segment
    assert {loc.vaddr} == resolver


def _loaded_address(lib, name):
    """Where the dynamic linker binds a plain reference to `name`, relative to the load base."""
    import ctypes

    h = ctypes.CDLL(str(lib))
    addr = ctypes.cast(getattr(h, name), ctypes.c_void_p).value
    real = str(lib.resolve())
    with open("/proc/self/maps") as f:
        bases = [
            int(l.split("-")[0], 16)
            for l in f
            if l.rstrip().endswith(real) and int(l.split()[2], 16) == 0
        ]
    return h, addr - min(bases)


def test_plain_name_resolves_to_the_default_version(special):
    lib = special / "libver.so"
    h, rel = _loaded_address(lib, "foo")
    assert h.foo(2) == 17  # the dynamic linker's foo is foo_new (x*7+3)
    loc = elfsym.locate(lib, "foo")
    assert loc.vaddr == rel and loc.version == "V2"
    assert elfsym.locate(lib, "foo@@V2").vaddr == rel
    assert elfsym.locate(lib, "foo@V2").vaddr == rel


def test_versioned_name_selects_the_compat_version(special):
    need_tool("readelf", "binutils")
    lib = special / "libver.so"
    old = {r[0] for r in _readelf_syms(lib) if r[4] == "foo_old"}
    loc = elfsym.locate(lib, "foo@V1")
    assert {loc.vaddr} == old and loc.version == "V1"
    assert loc.vaddr != elfsym.locate(lib, "foo").vaddr
    with pytest.raises(PerfbookError, match="foo@@V1"):  # V1 is not the default
        elfsym.locate(lib, "foo@@V1")
    with pytest.raises(PerfbookError, match="not found"):
        elfsym.locate(lib, "foo@V9")


def test_duplicate_local_names_are_an_error_listing_them(special):
    need_tool("readelf", "binutils")
    dups = [r for r in _readelf_syms(special / "dup") if r[4] == "dup"]
    assert len({r[0] for r in dups}) == 2 and all(r[3] == "LOCAL" for r in dups)
    with pytest.raises(PerfbookError, match="ambiguous") as ei:
        elfsym.locate(special / "dup", "dup")
    msg = str(ei.value)
    assert "\n" not in msg
    for value, size, *_ in dups:
        assert f"{value:#x} size {size}" in msg
    assert elfsym.locate(special / "dup", "main").size > 0


@pytest.mark.parametrize("cut", ["header", "half", "last_byte", "shstrndx", "entsize"])
def test_truncated_or_corrupt_elf_is_our_one_line_error(special, tmp_path, cut):
    import struct

    raw = bytearray((special / "libver.so").read_bytes())
    if cut == "header":
        raw = raw[:40]
    elif cut == "half":
        raw = raw[: len(raw) // 2]
    elif cut == "last_byte":
        raw = raw[:-1]
    else:
        with open(special / "libver.so", "rb") as f:
            elf = ELFFile(f)
            shoff, shentsize = elf.header["e_shoff"], elf.header["e_shentsize"]
            dynsym = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".dynsym")
        if cut == "shstrndx":  # e_shstrndx (offset 62 in an ELF64 header) beyond the table
            struct.pack_into("<H", raw, 62, 0xFFF0)
        else:  # .dynsym's sh_entsize (offset 56 in Elf64_Shdr) = 0
            struct.pack_into("<Q", raw, shoff + dynsym * shentsize + 56, 0)
    bad = tmp_path / f"bad-{cut}.so"
    bad.write_bytes(bytes(raw))
    with pytest.raises(PerfbookError) as ei:
        elfsym.locate(bad, "foo")
    assert str(bad) in str(ei.value) and "\n" not in str(ei.value)
