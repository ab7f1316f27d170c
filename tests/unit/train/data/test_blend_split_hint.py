"""A blend whose smaller set gets no document of an evaluation split under --split stops with
a --split value that gives every set some, not only "give it a larger share"."""

from __future__ import annotations

import pytest

from train.data.loader import evaluation_splits, share_filling, split_size


@pytest.fixture(scope="module")
def blend(tmp_path_factory):
    """Moby-Dick's first 600 paragraphs and its first 200, as two real shard sets."""
    from tests.shard_fixtures import make_gpt_shards

    root = tmp_path_factory.mktemp("blend")
    return [(0.5, make_gpt_shards(root, 600, num_shards=1, name="big")),
            (0.5, make_gpt_shards(root, 200, num_shards=1, name="small"))]


def test_the_default_split_names_a_split_that_fills_the_test_split(blend):
    with pytest.raises(SystemExit) as exited:
        evaluation_splits(blend, "969,30,1")
    message = str(exited.value)
    assert "the test split gets none of the 200 documents" in message
    assert "give it a larger share, e.g. --split 969,30,3 (or 0)" in message
    evaluated, notes = evaluation_splits(blend, "969,30,3")  # the value named: it passes
    assert evaluated == {"valid", "test"} and notes == []


def test_the_share_named_is_the_smallest_that_fills_every_set():
    assert share_filling("969,30,1", 2, [600, 200]) == "969,30,3"
    assert split_size(200, "969,30,2", "test") == 0  # one less would not do
    assert share_filling("98,2", 1, [1000, 20]) == "98,3,0"  # a two-part split; valid index 1
    assert share_filling("969,30,1", 2, [1]) is None  # one document cannot fill two splits
