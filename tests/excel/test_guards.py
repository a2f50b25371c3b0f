"""jobs.excel.guards: what is refused before openpyxl opens a workbook, and that openpyxl parses
through defusedxml. Each refusal is one error row naming the part and the limit, and a good
workbook in the same call still lands."""

import os
import random
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import openpyxl.xml
import pytest

from jobs.config import ExcelConfig, QualityConfig
from jobs.excel.guards import _DTD_BLOCK, _SNIFF_BYTES, require_defusedxml
from jobs.excel.reader import open_sheets
from jobs.excel.stage import excel_to_chunks
from tests.conftest import REPO
from tests.excel.conftest import BOOK, MODEL, UNSTRUCTURED, book, chunks, work


def test_defusedxml_is_installed_and_required():
    require_defusedxml()  # raises if the package is missing
    import defusedxml  # noqa: F401


def test_file_size_limit():
    with pytest.raises(ValueError, match="max_file_bytes"):
        list(open_sheets(BOOK, ExcelConfig(max_file_bytes=10), Counter()))


def test_legacy_xls_is_refused_with_a_conversion_hint(plain):
    rows = excel_to_chunks([work(UNSTRUCTURED / "tests-example.xls"), work(BOOK)], excel=plain,
                           quality=QualityConfig(), embedding_model=MODEL)
    (err,) = [r for r in rows if r.get("error_stage")]
    assert err["error_class"] == "FileRefused" and "legacy .xls" in err["error_message"]
    assert "libreoffice --headless --convert-to xlsx FILE" in err["error_message"]
    assert "re-save it as .xlsx in Excel" in err["error_message"]


def _rezip(src, dst, replace: dict[str, bytes] | None = None, add: dict[str, bytes] | None = None):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, (replace or {}).get(info.filename, zin.read(info.filename)))
        for name, data in (add or {}).items():
            zout.writestr(name, data)
    return dst


def _refused(tmp_path, bad, excel, match):
    rows = excel_to_chunks([work(bad), work(BOOK)], excel=excel, quality=QualityConfig(), embedding_model=MODEL)
    (err,) = [r for r in rows if r.get("error_stage")]
    assert err["source_path"] == bad.name and err["error_class"] == "FileRefused"
    assert match in err["error_message"], err["error_message"]
    assert sum(r["row_kind"] == "chunk" for r in rows) == 6  # stanley-cups.xlsx, in the same call, still lands
    return err["error_message"]


def test_zip_bomb_is_refused_before_opening(tmp_path, plain):
    # 64 MiB of one byte deflates to ~64 KiB: a ratio of ~1000 where real sheets stay under 60.
    bomb = _rezip(BOOK, tmp_path / "bomb.xlsx", add={"xl/media/padding.bin": b"\0" * (64 * 1024 * 1024)})
    message = _refused(tmp_path, bomb, plain, "excel.max_compression_ratio=200")
    assert "xl/media/padding.bin expands" in message
    _refused(tmp_path, bomb, plain.model_copy(update={"max_uncompressed_bytes": 10 * 1024 * 1024}),
             "over excel.max_uncompressed_bytes=10,485,760")
    crowded = _rezip(BOOK, tmp_path / "crowded.xlsx", add={f"xl/media/image{i}.png": b"x" for i in range(20)})
    _refused(tmp_path, crowded, plain.model_copy(update={"max_zip_entries": 20}),
             "33 entries, over excel.max_zip_entries=20")


def test_billion_laughs_workbook_is_refused(tmp_path, plain):
    laughs = ('<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
              + "".join(f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i > 1 else "&lol;" * 10}">'
                        for i in range(1, 10))
              + ']>\n<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="1" uniqueCount="1">'
              '<si><t>&lol9;</t></si></sst>')
    bad = _rezip(BOOK, tmp_path / "laughs.xlsx", replace={"xl/sharedStrings.xml": laughs.encode()})
    message = _refused(tmp_path, bad, plain, "xl/sharedStrings.xml declares a DTD")
    assert "billion laughs" in message


def _written(tmp_path) -> Path:
    """A workbook openpyxl writes, with the parts every package has (docProps, _rels, styles, a sheet)."""
    return book(tmp_path / "written.xlsx", {"Passes": [["Name", "Team", "Passes"], ["Ada Lovelace", "Reds", 12],
                                                       ["Alan Turing", "Blues", 9]]})


_DOCTYPE = b'<!DOCTYPE x [<!ENTITY a "b">]>'


def _with_doctype(xml: bytes) -> bytes:
    """The part with a DTD right after its XML declaration, where a parser would read it."""
    head, sep, rest = xml.partition(b"?>")
    return head + sep + _DOCTYPE + rest if sep else _DOCTYPE + xml


@pytest.mark.parametrize("part", ["docProps/core.xml", "docProps/app.xml", "_rels/.rels", "xl/_rels/workbook.xml.rels",
                                  "[Content_Types].xml", "xl/styles.xml"])
def test_a_dtd_in_any_xml_part_is_refused_naming_the_part(tmp_path, plain, part):
    src = _written(tmp_path)
    with zipfile.ZipFile(src) as z:
        assert part in z.namelist()
        original = z.read(part)
    bad = _rezip(src, tmp_path / "doctype.xlsx", replace={part: _with_doctype(original)})
    message = _refused(tmp_path, bad, plain, f"zip entry {part} declares a DTD")
    assert "billion laughs" in message
    chunks(src, plain)  # the same workbook without the DTD reads


def test_a_dtd_is_found_anywhere_in_a_part_in_utf16_and_under_any_name(tmp_path, plain):
    src = _written(tmp_path)
    rng = random.Random(3)
    # Past the first MiB, split across two of the scan's reads; random text keeps the compression
    # ratio of a real part, so the zip-bomb guard is not what refuses it.
    boundary = _SNIFF_BYTES + _DTD_BLOCK
    prefix = '<?xml version="1.0"?><root><a>'
    filler = "".join(rng.choice("abcdefghij klmnop") for _ in range(boundary - 4 - len(prefix) - len("</a>")))
    late = f"{prefix}{filler}</a>".encode()
    assert len(late) < boundary < len(late) + len(_DOCTYPE)
    bad = _rezip(src, tmp_path / "late.xlsx", add={"customXml/item1.xml": late + _DOCTYPE + b"</root>"})
    _refused(tmp_path, bad, plain, "zip entry customXml/item1.xml declares a DTD")

    utf16 = ('\ufeff<?xml version="1.0" encoding="UTF-16"?><!doctype x [<!entity a "b">]><x/>').encode("utf-16-le")
    bad = _rezip(src, tmp_path / "utf16.xlsx", replace={"docProps/app.xml": utf16})
    _refused(tmp_path, bad, plain, "zip entry docProps/app.xml declares a DTD")

    # openpyxl follows relationships, not names: XML in a part called .bin is scanned as XML.
    bad = _rezip(src, tmp_path / "renamed.xlsx", add={"xl/media/sheet.bin": b'  <?xml version="1.0"?>' + _DOCTYPE + b"<x/>"})
    _refused(tmp_path, bad, plain, "zip entry xl/media/sheet.bin declares a DTD")
    png = b"\x89PNG\r\n\x1a\n" + b"<!DOCTYPE" * 3  # binary that happens to hold the bytes: not XML, not scanned
    chunks(_rezip(src, tmp_path / "image.xlsx", add={"xl/media/image1.png": png}), plain)


def test_an_encoding_that_would_hide_a_dtd_from_the_scan_is_refused(tmp_path, plain):
    src = _written(tmp_path)
    for encoding in ("cp037", "UTF-7"):
        part = f'<?xml version="1.0" encoding="{encoding}"?>'.encode() + "<x/>".encode("cp037")
        bad = _rezip(src, tmp_path / f"{encoding}.xlsx", replace={"docProps/core.xml": part})
        _refused(tmp_path, bad, plain, f"zip entry docProps/core.xml declares encoding '{encoding}'")
    latin = b'<?xml version="1.0" encoding="ISO-8859-1"?><x>caf\xe9</x>'  # an ASCII superset reads
    chunks(_rezip(src, tmp_path / "latin.xlsx", add={"customXml/item1.xml": latin}), plain)


def test_openpyxl_without_defusedxml_is_refused_with_the_reason(tmp_path, plain, monkeypatch):
    monkeypatch.setattr(openpyxl.xml, "DEFUSEDXML", False)
    with pytest.raises(RuntimeError, match=r"openpyxl is not using defusedxml \(openpyxl.xml.DEFUSEDXML is False"):
        require_defusedxml()
    rows = excel_to_chunks([work(BOOK)], excel=plain, quality=QualityConfig(), embedding_model=MODEL)
    (err,) = rows
    assert err["error_stage"] and "openpyxl is not using defusedxml" in err["error_message"]


def test_openpyxl_told_by_the_environment_not_to_use_defusedxml_is_refused():
    """The real switch, in a fresh process: openpyxl reads OPENPYXL_DEFUSEDXML once, when imported."""
    env = dict(os.environ, OPENPYXL_DEFUSEDXML="False")
    proc = subprocess.run([sys.executable, "-c", "from jobs.excel.guards import require_defusedxml; require_defusedxml()"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "OPENPYXL_DEFUSEDXML='False' in this process's environment" in proc.stderr


def test_an_xls_file_the_default_globs_find_fails_alone_with_the_conversion_hint(tmp_path, plain):
    from jobs.config import InputConfig
    from jobs.sources.discover import discover

    (tmp_path / "Reports").mkdir()
    (tmp_path / "Reports" / "Q1.XLS").write_bytes((UNSTRUCTURED / "tests-example.xls").read_bytes())
    (tmp_path / "cups.xlsx").write_bytes(BOOK.read_bytes())
    (tmp_path / "Reports" / "big.xlsb").write_bytes(b"PK\x03\x04binary workbook")
    found = discover([tmp_path], InputConfig().include, InputConfig().exclude)
    assert [(f.source_path, f.source_type) for f in found] == [
        ("cups.xlsx", "excel"), ("Reports/Q1.XLS", "excel"), ("Reports/big.xlsb", "excel")]
    rows = excel_to_chunks([work(Path(f.abs_path), f.source_path) for f in found], excel=plain,
                           quality=QualityConfig(), embedding_model=MODEL)
    xls, xlsb = [r for r in rows if r.get("error_stage")]
    assert xls["source_path"] == "Reports/Q1.XLS" and xls["error_class"] == "FileRefused"
    assert "legacy .xls" in xls["error_message"] and "libreoffice --headless --convert-to xlsx" in xls["error_message"]
    assert xlsb["source_path"] == "Reports/big.xlsb" and "binary .xlsb workbook" in xlsb["error_message"]
    assert any(r["source_path"] == "cups.xlsx" and r["row_kind"] == "chunk" for r in rows)
