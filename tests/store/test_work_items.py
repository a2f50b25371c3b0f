"""A run's work items live in the database (jobs/store/work_items.py): the plan adds them page by page,
the run marks them pending in one statement and the first stage reads them back by ranges."""

from jobs.store.work_items import WorkItems, read_work_items


def _item(n: int, source_type: str = "markdown") -> dict:
    path = f"dir/f{n:03}.{'md' if source_type == 'markdown' else 'xlsx'}"
    return {"doc_id": f"d{n:03}", "collection": "work_t", "source_path": path, "abs_path": f"/in/{path}",
            "source_type": source_type, "content_sha256": f"sha{n}", "size_bytes": n, "pipeline_fingerprint": "fp",
            "run_id": "r1"}


def test_ranges_cover_every_item_once_in_plan_order_and_the_run_cleans_up(store, pg_url):
    store.ensure_collection("work_t", "m", 4)
    stale = WorkItems(pg_url, store.schema, "work_t", "r0").__enter__()
    stale.add([_item(999)], [(1, None)])
    stale.conn.close()  # its driver was killed: the rows stay behind
    with WorkItems(pg_url, store.schema, "work_t", "r1") as work:
        assert work.counts() == {}, "entering clears what an earlier run of the collection left"
        for page in (range(0, 7), range(7, 23)):  # two listing pages, markdown and excel mixed
            items = [_item(n, "excel" if n % 5 == 0 else "markdown") for n in page]
            work.add(items, [(i["size_bytes"], f"etag:{i['doc_id']}") for i in items])
        assert work.counts() == {"markdown": 18, "excel": 5}
        ranges = work.ranges("markdown", 4)
        assert len(ranges) == 5 and all(set(r) == {"run_id", "source_type", "first", "last"} for r in ranges)
        read = read_work_items(ranges, url=pg_url, schema=store.schema)
        assert [i["doc_id"] for i in read] == [i["doc_id"] for i in work.items("markdown")]
        assert [i["doc_id"] for i in read] == [f"d{n:03}" for n in range(23) if n % 5]
        assert read[0] == _item(1)  # the whole item comes back
        excel = read_work_items(work.ranges("excel", 100), url=pg_url, schema=store.schema, reconnect_seconds=5)
        assert [i["doc_id"] for i in excel] == ["d000", "d005", "d010", "d015", "d020"]
        assert work.planned(["dir/f003.md", "dir/f500.md"]) == {"dir/f003.md"}
        work.begin_round()  # the first round went through: its documents may be planned again
        assert work.planned(["dir/f003.md"]) == set()

        store.mark_pending_work("work_t", "r1")
        stored = store.stored_documents("work_t")
        assert len(stored) == 23 and {d.status for d in stored.values()} == {"pending"}
        assert stored["dir/f003.md"].source_etag == "etag:d003" and stored["dir/f003.md"].source_size == 3
    left = store.conn.execute(f"SELECT count(*) FROM {store.schema}.work_items WHERE collection = 'work_t'")
    assert left.fetchone()[0] == 0, "a run deletes its own rows when it ends"
