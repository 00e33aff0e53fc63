"""The item table a per-arm policy serves by id (rlops.features.item_catalog): its ids keep the
logged dtype, its hash is the sha256 of its canonical bytes (stable across a write and a read), and
an id that is the candidate pad cannot name an item."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from rlops.features.item_catalog import ItemCatalog, read_item_catalog, write_item_catalog


def _catalog(ids) -> ItemCatalog:
    return ItemCatalog(
        np.asarray(ids),
        {"category": np.array(["a", "b", "a"], object), "price": np.array([1.5, 2.0, 0.25]), "tags": np.eye(3)},
    )


@pytest.mark.parametrize("ids,dtype", [([7, 3, 11], "int64"), (["sku-7", "sku-3", "sku-11"], "string")])
def test_a_written_table_reads_back_with_its_dtype_and_hash(tmp_path, ids, dtype):
    catalog = _catalog(ids)
    assert catalog.id_dtype == dtype and catalog.num_rows == 3
    assert catalog.sha256 == hashlib.sha256(catalog.canonical_bytes()).hexdigest()
    write_item_catalog(str(tmp_path), catalog)
    back = read_item_catalog(str(tmp_path))
    assert back is not None and back.id_dtype == dtype and back.ids.tolist() == list(ids)
    assert back.sha256 == catalog.sha256
    np.testing.assert_array_equal(back.columns["tags"], np.eye(3))


def test_the_hash_changes_with_any_value_and_no_table_reads_as_none(tmp_path):
    a, b = _catalog([1, 2, 3]), _catalog([1, 2, 3])
    assert a.sha256 == b.sha256
    b.columns["price"][2] = 0.5
    assert a.sha256 != b.sha256
    assert read_item_catalog(str(tmp_path)) is None


@pytest.mark.parametrize("ids", [[1, -1, 2], ["a", "", "b"]])
def test_an_id_equal_to_the_candidate_pad_is_refused(ids):
    with pytest.raises(ValueError, match="candidate pad"):
        _catalog(ids)


def test_duplicate_ids_are_refused():
    with pytest.raises(ValueError, match="unique"):
        _catalog([1, 1, 2])
