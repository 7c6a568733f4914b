"""Which GPU architectures a linked CUDA binary carries code for.

The `.nv_fatbin` section of an ELF executable holds fat-binary containers:
a 16-byte header (magic 0xBA55ED50, version, header size, payload size)
followed by entries, each with a kind (1 = PTX, 2 = ELF cubin), the SM
number and flags (bit 0x100000 marks an arch-specific `a` target such as
sm_120a).  This is what `cuobjdump --list-elf` reports; reading it here needs
no CUDA tools, so the build checks every binary carries exactly the lane's
architecture.
"""

from __future__ import annotations

import io
import struct

from elftools.elf.elffile import ELFFile

FATBIN_MAGIC = 0xBA55ED50
_HEADER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQ")
KIND_PTX = 1
KIND_ELF = 2
ARCH_SPECIFIC = 0x100000


def _entries(section: bytes):
    offset = 0
    while offset + _HEADER.size <= len(section):
        magic, _version, header_size, payload_size = _HEADER.unpack_from(section, offset)
        if magic != FATBIN_MAGIC:
            break
        position = offset + header_size
        end = position + payload_size
        while position + _ENTRY.size <= end:
            kind, _u1, entry_header, size, _csize, _u2, _minor, _major, arch, _noff, _nlen, flags = _ENTRY.unpack_from(section, position)
            yield kind, arch, flags
            position += entry_header + size
        offset = end
        # Containers are 8-byte aligned one after another.
        offset += (-offset) % 8


def _name(prefix: str, arch: int, flags: int) -> str:
    return f"{prefix}_{arch}{'a' if flags & ARCH_SPECIFIC else ''}"


def fatbin_contents(elf_bytes: bytes) -> tuple[set[str], set[str]]:
    """(cubin architectures, PTX architectures) of the linked `.nv_fatbin` section."""
    elf = ELFFile(io.BytesIO(elf_bytes))
    section = elf.get_section_by_name(".nv_fatbin")
    if section is None:
        return set(), set()
    cubins: set[str] = set()
    ptx: set[str] = set()
    for kind, arch, flags in _entries(section.data()):
        if kind == KIND_ELF:
            cubins.add(_name("sm", arch, flags))
        elif kind == KIND_PTX:
            ptx.add(_name("compute", arch, flags))
    return cubins, ptx


def cubin_architectures(elf_bytes: bytes) -> set[str]:
    return fatbin_contents(elf_bytes)[0]
