"""Bugs are bugs (jobs/errors.py is_bug): a stage fails one document for a fault of that document's data,
and re-raises anything that is a bug in our code, which then stops the run (exit 4) instead of being
recorded against whichever documents it met."""

from __future__ import annotations

import pyarrow as pa
import pytest

from jobs.config import ChunkingConfig, ExcelConfig, QualityConfig
from jobs.errors import ConfigError, DataFault, FileRefused, InternalError, NotUtf8Error, UnreadableFile, bug_report, is_bug
from jobs.store.arrow_copy import UnloadableChunk

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.mark.parametrize("exc", [TypeError("x"), AttributeError("x"), KeyError("x"), IndexError("x"), NameError("x"),
                                 AssertionError("x"), ValueError("x"), pa.ArrowInvalid("x"), pa.ArrowTypeError("x")])
def test_what_our_code_raises_only_on_a_bug_is_a_bug(exc):
    assert is_bug(exc)


@pytest.mark.parametrize("exc", [DataFault("x"), NotUtf8Error("x"), FileRefused("x"), UnreadableFile("x"),
                                 UnloadableChunk("x"), UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogate"),
                                 ConfigError("x"), OSError("x"), MemoryError(), RuntimeError("x"), InternalError("x")])
def test_a_documents_data_the_machine_or_the_user_is_not_a_bug(exc):
    assert not is_bug(exc)


def test_a_bug_report_names_the_exception_and_the_line_it_was_raised_at():
    try:
        {}["missing"]
    except KeyError as exc:
        line = exc.__traceback__.tb_lineno
        assert bug_report(exc) == f"KeyError: 'missing' (at test_errors.py:{line})"
    assert bug_report(OSError("disk")) is None
    assert bug_report(InternalError("stage chunk: TypeError: t (at w.py:1)")) == "stage chunk: TypeError: t (at w.py:1)"


def _work(path, source_type="markdown"):
    return {"doc_id": path, "collection": "c", "source_path": path, "abs_path": path, "source_type": source_type,
            "content_sha256": None, "size_bytes": 1, "pipeline_fingerprint": "fp", "run_id": "r"}


def _boom(*args, **kwargs):
    raise TypeError("a bug in our code")


def test_the_parse_stage_fails_a_file_that_is_not_utf8_and_raises_a_bug(tmp_path, monkeypatch):
    from jobs.markdown import parse

    (tmp_path / "latin1.md").write_bytes("# Caf\xe9".encode("latin-1"))
    (tmp_path / "fine.md").write_text("# Fine\n\nText.\n", encoding="utf-8")
    rows = parse.parse_documents([_work(str(tmp_path / "latin1.md")), _work(str(tmp_path / "fine.md"))])
    assert [r.get("error_class") for r in rows] == ["NotUtf8Error", None]
    monkeypatch.setattr(parse, "parse_markdown", _boom)
    with pytest.raises(TypeError, match="a bug in our code"):
        parse.parse_documents([_work(str(tmp_path / "fine.md"))])


def test_the_chunk_stage_raises_a_bug_instead_of_failing_the_document(monkeypatch):
    from jobs.markdown import windows

    monkeypatch.setattr(windows, "chunk_document", _boom)
    with pytest.raises(TypeError):
        windows.chunk_documents([_work("a.md")], chunking=ChunkingConfig(), quality=QualityConfig(),
                                embedding_model=MODEL)


def test_the_excel_stage_fails_a_refused_file_and_raises_a_bug(tmp_path, monkeypatch):
    from jobs.excel import stage

    (tmp_path / "old.xls").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1 legacy")
    (row,) = stage.excel_to_chunks([_work(str(tmp_path / "old.xls"), "excel")], excel=ExcelConfig(),
                                   quality=QualityConfig(), embedding_model=MODEL)
    assert (row["row_kind"], row["error_class"]) == ("error", "FileRefused")
    monkeypatch.setattr(stage, "_workbook_chunks", _boom)
    with pytest.raises(TypeError):
        stage.excel_to_chunks([_work(str(tmp_path / "old.xls"), "excel")], excel=ExcelConfig(),
                              quality=QualityConfig(), embedding_model=MODEL)
