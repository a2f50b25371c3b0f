"""jobs/search/ranking.py: BM25 ranking over the chunks' terms and its fusion with vector ranks,
on the embedded PostgreSQL."""


from jobs import cli
from jobs.search import ranking
from jobs.search.ranking import search_many
from tests.factories import chunk_row, doc_row, unit_vector

DIM = 4
TEXTS = [
    "Set the maxSurge parameter to control how many pods a rolling deployment adds at once.",
    "The cluster network operator manages the cluster network and the cluster DNS.",
    "Cluster nodes join the cluster through the cluster machine config operator.",
    "Backups of etcd run on a cluster control plane node with the etcd snapshot script.",
]


def _load(store, name):
    coll = store.ensure_collection(name, "m", DIM)
    for i, text in enumerate(TEXTS):
        doc = doc_row(f"{name}-d{i}")
        store.mark_pending(name, "r1", [doc])
        # Vectors point away from the text: only the text ranking can find the right chunk.
        store.commit_document(coll, doc, [chunk_row(doc["doc_id"], 0, text, unit_vector(i, DIM), name)], "r1")
    assert store.ensure_text_index(coll) is True and store.ensure_text_index(coll) is False
    return coll


def test_bm25_finds_the_rare_identifier_and_weighs_common_words_down(store):
    coll = _load(store, "text_t")
    [hits] = search_many(store, coll, [unit_vector(1, DIM)], 2, queries=["what does maxSurge do in a cluster"],
                         mode="text")
    assert hits[0]["text"] == TEXTS[0]  # one rare word beats three of the common "cluster"
    [etcd] = search_many(store, coll, [unit_vector(0, DIM)], 1, queries=["etcd snapshot backups"], mode="text")
    assert etcd[0]["text"] == TEXTS[3] and etcd[0]["source_path"] == "text_t-d3.md"
    [none] = search_many(store, coll, [unit_vector(0, DIM)], 3, queries=["zebra"], mode="text")
    assert none == []


def test_hybrid_fuses_both_rankings_by_reciprocal_rank(store):
    coll = _load(store, "hybrid_t")
    # The vector points at chunk 2, the words at chunk 0: each is first in one ranking, so both lead.
    [hits] = search_many(store, coll, [unit_vector(2, DIM)], 4, queries=["maxSurge rolling deployment"],
                         mode="hybrid")
    assert {hits[0]["text"], hits[1]["text"]} == {TEXTS[0], TEXTS[2]}
    assert hits[0]["score"] >= hits[1]["score"] > hits[-1]["score"]
    assert ranking.fuse([["a", "b"], ["b", "c"]], 3)[0][0] == "b"  # in both lists: first


def test_equal_fused_scores_go_to_the_stronger_evidence_not_the_chunk_id():
    words, vector = ["a", "b", "c", "d"], ["c", "b", "a", "e"]  # a: 1st and 3rd, c: 3rd and 1st: tied
    assert [c for c, _ in ranking.fuse([words, vector], 3)] == ["a", "c", "b"]  # no scores: by id
    # a leads the BM25 list by a hair over c, and c leads the cosines far ahead of a: c has the stronger evidence.
    scored = [list(zip(words, [10.0, 9.9, 9.8, 1.0])), list(zip(vector, [0.9, 0.5, 0.45, 0.4]))]
    assert [c for c, _ in ranking.fuse([words, vector], 3, scored)] == ["c", "a", "b"]
    scored = [list(zip(words, [10.0, 2.0, 1.5, 1.0])), list(zip(vector, [0.9, 0.89, 0.88, 0.4]))]  # and the other way
    assert [c for c, _ in ranking.fuse([words, vector], 3, scored)] == ["a", "c", "b"]


def test_chunks_of_equal_bm25_score_share_a_rank_so_their_ids_do_not_decide():
    # b and c score the same BM25: listed either way round (as their ids would order them), the
    # vector ranking settles them alike. Ranked 2 and 3 by id, b first gave a, c, b and c first c, a, b.
    vector = list(zip(["c", "b", "a"], [0.9, 0.85, 0.5]))
    for words in (["a", "b", "c"], ["a", "c", "b"]):
        bm25 = list(zip(words, [5.0, 3.0, 3.0]))
        fused = ranking.fuse([words, [c for c, _ in vector]], 3, [bm25, vector])
        assert [c for c, _ in fused] == ["c", "a", "b"]
    assert ranking._ranks(["a", "b", "c", "d"], list(zip("abcd", [4.0, 2.0, 2.0, 1.0]))) == {
        "a": 1, "b": 2, "c": 2, "d": 4}


def test_fused_modes_ask_the_index_for_a_deeper_candidate_list_than_they_fuse(store):
    assert ranking.fused_ef_search(100) == ranking.FUSED_EF_SEARCH >= 4 * ranking.DEPTH
    coll = _load(store, "efs_t")
    for ef_search, asked in ((100, ranking.FUSED_EF_SEARCH), (500, 500)):  # a deeper config stays
        # Inside an outer transaction, search's own is a savepoint: its SET LOCAL lasts until the outer one ends.
        with store.conn.transaction():
            [hits] = search_many(store, coll, [unit_vector(2, DIM)], 2, ef_search, queries=["maxSurge"], mode="hybrid")
            assert hits and store.conn.execute("SHOW hnsw.ef_search").fetchone()[0] == str(asked)


def test_the_cli_offers_the_stores_modes():
    assert cli.MODES == ranking.MODES
