"""The documents table records each source's listing (size, ETag or mtime) with its content hash."""

from tests.factories import doc_row


def test_commit_records_the_listing_and_plans_read_it_back(store):
    coll = store.ensure_collection("listing_t", "m", 4)
    doc = doc_row("a") | {"source_size": 120, "source_etag": 'etag:9b2cf535f27731c974343645a3985328'}
    store.mark_pending("listing_t", "r1", [doc])
    store.commit_document(coll, doc, [], "r1")
    stored = store.stored_documents("listing_t")[doc["source_path"]]
    assert (stored.status, stored.source_size, stored.source_etag) == ("done", 120, doc["source_etag"])

    # Same content under a new listing (a touched file): the listing moves, the content hash stays.
    store.record_listing("listing_t", [(doc["source_path"], 120, "mtime:1700000000000000000")])
    stored = store.stored_documents("listing_t")[doc["source_path"]]
    assert (stored.content_sha256, stored.source_etag) == ("sha1", "mtime:1700000000000000000")

    # A commit without a listing (a reload from Parquet) forgets it: the next plan reads the source.
    store.commit_document(coll, doc_row("a"), [], "r2")
    assert store.stored_documents("listing_t")[doc["source_path"]].source_etag is None


def test_record_listing_leaves_unfinished_documents_alone(store):
    store.ensure_collection("listing_u", "m", 4)
    store.mark_pending("listing_u", "r1", [doc_row("p")])
    store.record_listing("listing_u", [(doc_row("p")["source_path"], 5, "etag:x")])
    assert store.stored_documents("listing_u")[doc_row("p")["source_path"]].source_etag is None
