"""A minimal ELF reader for the checks of the Ascend kernel binaries (build_tools/ascend.py): sections with their
sizes and the symbol table, for 32- and 64-bit little- or big-endian files. No toolchain needed (the CANN toolkit's
own readelf is not on every build machine, and the checks must also run on the stand-in binaries of the tests).
"""
import struct
from dataclasses import dataclass

SHT_SYMTAB = 2
SHT_NOBITS = 8
SHN_UNDEF = 0
STT_FUNC = 2


class ElfError(ValueError):
    pass


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    type: int  # STT_*
    section: int  # st_shndx (0: undefined)


@dataclass(frozen=True)
class Elf:
    bits: int
    machine: int
    type: int  # e_type: 1 relocatable, 2 executable, 3 shared
    sections: dict  # name -> size in bytes (NOBITS sections included: their memory size)
    symbols: tuple  # of Symbol

    def defined(self, name):
        return any(s.name == name and s.section != SHN_UNDEF for s in self.symbols)


def parse(data):
    """The sections and symbols of the ELF image ``data`` (bytes); ``ElfError`` if it is not a well-formed ELF."""
    if len(data) < 52 or data[:4] != b"\x7fELF":
        raise ElfError("not an ELF file (bad magic)")
    bits = {1: 32, 2: 64}.get(data[4])
    end = {1: "<", 2: ">"}.get(data[5])
    if bits is None or end is None:
        raise ElfError(f"unknown ELF class/encoding {data[4]}/{data[5]}")
    try:
        if bits == 64:
            e_type, machine = struct.unpack_from(end + "HH", data, 16)
            shoff, = struct.unpack_from(end + "Q", data, 40)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 58)
            sh_fmt, sym_fmt = end + "IIQQQQIIQQ", end + "IBBHQQ"
        else:
            e_type, machine = struct.unpack_from(end + "HH", data, 16)
            shoff, = struct.unpack_from(end + "I", data, 32)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 46)
            sh_fmt, sym_fmt = end + "IIIIIIIIII", end + "IIIBBH"
        headers = []
        for i in range(shnum):
            f = struct.unpack_from(sh_fmt, data, shoff + i * shentsize)
            # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
            headers.append(f)
        if shnum and not 0 <= shstrndx < shnum:
            raise ElfError("section name table index out of range")

        def strings(hdr):
            off, size = hdr[4], hdr[5]
            if off + size > len(data):
                raise ElfError("string table past the end of the file")
            return data[off:off + size]

        def name_at(table, i):
            j = table.index(b"\0", i)
            return table[i:j].decode("utf-8", "replace")

        shstr = strings(headers[shstrndx]) if shnum else b""
        sections, symbols = {}, []
        for h in headers:
            name = name_at(shstr, h[0]) if shstr else ""
            if h[1] != SHT_NOBITS and h[4] + h[5] > len(data):
                raise ElfError(f"section {name!r} past the end of the file")
            if name:
                sections[name] = sections.get(name, 0) + h[5]
            if h[1] == SHT_SYMTAB:
                strtab = strings(headers[h[6]])
                entsize = h[9] or struct.calcsize(sym_fmt)
                for k in range(h[5] // entsize):
                    raw = struct.unpack_from(sym_fmt, data, h[4] + k * entsize)
                    if bits == 64:
                        st_name, info, _, shndx, value, size = raw
                    else:
                        st_name, value, size, info, _, shndx = raw
                    symbols.append(Symbol(name_at(strtab, st_name), value, size, info & 0xF, shndx))
    except (struct.error, IndexError, ValueError) as e:
        if isinstance(e, ElfError):
            raise
        raise ElfError(f"malformed ELF: {e}") from None
    return Elf(bits, machine, e_type, sections, tuple(symbols))


def write_minimal(symbols, text=b"\x00" * 16, machine=0x1029, bits=64):
    """A small well-formed little-endian ELF executable with a .text section and ``symbols`` (names) defined as
    functions in it: the stand-in linker output of the tests (tests/build/test_ascend_compile.py)."""
    if bits != 64:
        raise ValueError("only 64-bit images are written")
    shstr = b"\0.text\0.symtab\0.strtab\0.shstrtab\0"
    strtab = b"\0" + b"".join(s.encode() + b"\0" for s in symbols)
    name_offsets, pos = [], 1
    for s in symbols:
        name_offsets.append(pos)
        pos += len(s.encode()) + 1
    sym = struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0)
    for off in name_offsets:
        sym += struct.pack("<IBBHQQ", off, (1 << 4) | STT_FUNC, 0, 1, 0, len(text))
    body = bytearray(b"\0" * 64)
    text_off = len(body)
    body += text
    sym_off = len(body)
    body += sym
    str_off = len(body)
    body += strtab
    shstr_off = len(body)
    body += shstr
    while len(body) % 8:
        body += b"\0"
    shoff = len(body)
    sh = [(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
          (1, 1, 6, 0, text_off, len(text), 0, 0, 4, 0),
          (7, SHT_SYMTAB, 0, 0, sym_off, len(sym), 3, 1, 8, 24),
          (15, 3, 0, 0, str_off, len(strtab), 0, 0, 1, 0),
          (23, 3, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0)]
    for h in sh:
        body += struct.pack("<IIQQQQIIQQ", *h)
    header = struct.pack("<4sBBBBB7xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, 2, machine, 1, 0, 0, shoff, 0,
                         64, 0, 0, 64, len(sh), 4)
    body[:64] = header
    return bytes(body)
