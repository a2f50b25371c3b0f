"""What must hold before openpyxl opens a workbook, checked from the file and its zip directory.

openpyxl parses untrusted XML and inflates whatever the zip holds, so the checks come first:
file size, legacy and binary formats (refused with how to convert them), zip bombs (entry count,
summed size, compression ratio) and DTDs ("billion laughs") in any part that is or looks like XML.
`require_defusedxml` insists that openpyxl parses through defusedxml. Every refusal is a
FileRefused (jobs/errors.py: a data fault, and a ValueError) naming the limit and its `excel.` config
key (defusedxml itself is a dependency: without it this module does not import).
"""

from __future__ import annotations

import codecs
import os
import re
import zipfile
import zlib
from pathlib import Path

import defusedxml.ElementTree
import openpyxl.xml
from openpyxl.xml import functions

from jobs.config import ExcelConfig
from jobs.errors import FileRefused

__all__ = ["LEGACY_HINT", "check_workbook_file", "require_defusedxml"]


def require_defusedxml() -> None:
    """openpyxl parses untrusted XML; insist that it does so through defusedxml.

    defusedxml being importable is not enough: openpyxl decides once, when it is first imported,
    whether to use it (`openpyxl.xml.DEFUSEDXML`, off when OPENPYXL_DEFUSEDXML is anything but
    "True"), and binds its parsers then (openpyxl.xml.functions: `iterparse` reads every sheet and
    the shared strings). So the flag and the bound parser are what is checked."""
    env = os.environ.get("OPENPYXL_DEFUSEDXML")
    why = f"OPENPYXL_DEFUSEDXML={env!r} in this process's environment" if env not in (None, "True") else \
        "defusedxml was not importable when openpyxl was first imported"
    if not openpyxl.xml.DEFUSEDXML:
        raise RuntimeError(f"openpyxl is not using defusedxml (openpyxl.xml.DEFUSEDXML is False: {why}); workbooks "
                           "are not read without it. Unset OPENPYXL_DEFUSEDXML (or set it to True) and restart")
    if functions.iterparse is not defusedxml.ElementTree.iterparse:
        parser = f"{getattr(functions.iterparse, '__module__', '?')}.{getattr(functions.iterparse, '__name__', '?')}"
        raise RuntimeError(f"openpyxl's XML parser is {parser}, not defusedxml's; workbooks are not read without it "
                           "(openpyxl.xml.functions was replaced after import?)")


_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # BIFF .xls, and password-protected .xlsx, live in OLE2
LEGACY_HINT = ("re-save it as .xlsx in Excel (File › Save As › Excel Workbook) or run "
               "`libreoffice --headless --convert-to xlsx FILE`")
_RATIO_MIN_BYTES = 1024 * 1024  # small parts (themes, styles) compress wildly without harm; the summed size covers them
_DTD = re.compile(rb"<!(?:DOCTYPE|ENTITY)", re.I)  # a DTD is where entity bombs ("billion laughs") are declared
_DTD_CARRY = len(b"<!DOCTYPE") - 1  # bytes kept from one block to the next, so a split marker is still seen
_DTD_BLOCK = 1024 * 1024  # decompressed bytes held at a time while a part is scanned
_XML_PARTS = (".xml", ".rels", ".vml")  # always scanned, whatever they hold
_SNIFF_BYTES = 512  # any other part is scanned when it opens like XML: openpyxl follows the package's
# relationships, not file names, so a sheet or a drawing may live in a part named anything
_BOMS = b"\xef\xbb\xbf\xff\xfe"  # the bytes of the UTF-8 and UTF-16 byte order marks
_DECLARED_ENCODING = re.compile(rb"^<\?xml\s[^>]*?\bencoding\s*=\s*[\"']([^\"']{1,40})[\"']")


def check_workbook_file(path: Path, cfg: ExcelConfig) -> None:
    """Refuse, with a FileRefused naming the limit and its config key, what must not reach openpyxl."""
    size = path.stat().st_size
    if size > cfg.max_file_bytes:
        raise FileRefused(f"workbook is {size:,} bytes, over excel.max_file_bytes={cfg.max_file_bytes:,}")
    with open(path, "rb") as fh:
        magic = fh.read(8)
    if path.suffix.lower() == ".xls" or magic == _OLE2_MAGIC:
        raise FileRefused(f"legacy .xls workbook (or a password-protected one), which openpyxl cannot read; {LEGACY_HINT}")
    if path.suffix.lower() == ".xlsb":
        raise FileRefused(f"binary .xlsb workbook, which openpyxl cannot read; {LEGACY_HINT}")
    if not zipfile.is_zipfile(path):
        raise FileRefused("not an .xlsx/.xlsm file (not a zip archive); re-save it from Excel as .xlsx")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise FileRefused(f"not a readable zip archive ({exc}); re-save it from Excel as .xlsx") from exc
    with archive:
        infos = archive.infolist()
        if len(infos) > cfg.max_zip_entries:
            raise FileRefused(f"workbook zip holds {len(infos):,} entries, over excel.max_zip_entries={cfg.max_zip_entries:,}")
        total = sum(i.file_size for i in infos)
        if total > cfg.max_uncompressed_bytes:
            raise FileRefused(f"workbook expands to {total:,} bytes, over excel.max_uncompressed_bytes="
                             f"{cfg.max_uncompressed_bytes:,} (a zip bomb?)")
        for info in infos:
            ratio = info.file_size / max(info.compress_size, 1)
            if info.file_size >= _RATIO_MIN_BYTES and ratio > cfg.max_compression_ratio:
                raise FileRefused(f"zip entry {info.filename} expands {ratio:,.0f}x ({info.compress_size:,} -> "
                                 f"{info.file_size:,} bytes), over excel.max_compression_ratio="
                                 f"{cfg.max_compression_ratio:g} (a zip bomb?)")
        for info in infos:
            if not info.is_dir():
                _refuse_dtd(archive, info)


def _markup(block: bytes) -> bytes:
    """The ASCII markup of a block: UTF-16 (and UTF-32) parts hold it with NUL bytes in between."""
    return block.replace(b"\x00", b"")


def _refuse_dtd(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """Refuse a part that declares a DTD anywhere in it, or an encoding this scan cannot read.

    Every part whose name says XML is scanned, and every other part that opens like XML; the whole
    part, decompressed a block at a time (memory stays at one block, whatever the part's size). A
    DTD is only legal before the root element, but an XML parser is not what decides here: a marker
    anywhere is refused, at the cost of refusing a workbook no spreadsheet program writes."""
    name = info.filename
    try:
        with archive.open(info) as fh:
            block = fh.read(_SNIFF_BYTES)  # an image is not decompressed further than this
            head = _markup(block).lstrip(_BOMS).lstrip()
            if not name.lower().endswith(_XML_PARTS) and not head.startswith(b"<"):
                return  # an image, a binary: nothing parses it as XML
            declared = _DECLARED_ENCODING.match(head)
            if declared and not _markup_is_ascii(declared.group(1).decode("ascii", "replace")):
                raise FileRefused(f"zip entry {name} declares encoding {declared.group(1).decode('ascii', 'replace')!r}, "
                                 "in which a DTD cannot be told apart; Excel writes UTF-8. Re-save the workbook in Excel")
            carry = b""
            while block:
                text = carry + _markup(block)
                if _DTD.search(text):
                    raise FileRefused(f"zip entry {name} declares a DTD (<!DOCTYPE/<!ENTITY), which Excel never "
                                     "writes; refused as a possible entity-expansion ('billion laughs') attack")
                carry = text[-_DTD_CARRY:]
                block = fh.read(_DTD_BLOCK)
    except (RuntimeError, NotImplementedError, zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        # encrypted, an unknown compression method, a torn or corrupt entry (CRC, deflate stream)
        raise FileRefused(f"zip entry {name} cannot be read ({exc}); re-save the workbook in Excel") from exc


def _markup_is_ascii(encoding: str) -> bool:
    """Whether markup in `encoding` reads as ASCII once NUL bytes are dropped: UTF-8 and the other
    ASCII supersets, and UTF-16/UTF-32. EBCDIC code pages and UTF-7, which some XML parsers accept,
    would hide a `<!DOCTYPE` from the scan."""
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        return False  # unknown to Python: openpyxl's parser could not read it either
    if info.name.startswith(("utf-16", "utf-32")):
        return True
    try:
        return _markup("<!DOCTYPE ENTITY>".encode(info.name)) == b"<!DOCTYPE ENTITY>" and info.name != "utf-7"
    except (UnicodeError, LookupError):
        return False
