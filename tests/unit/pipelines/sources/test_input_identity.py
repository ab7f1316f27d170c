"""The in-process tests of what tests/integration/test_input_identity.py covers (that file holds the
tests that start a process or run a Beam pipeline, and says what they cover)."""

from __future__ import annotations

import os

import pytest

from pipelines.inputs import match_patterns
from tests.conftest import REPO
from tests.helpers.input_identity import webtext_with_a_linked_folder

CORPORA = REPO.parent / "shared" / "corpora"
WEBTEXT = CORPORA / "web" / "text" / "webtext_train_10"


@pytest.fixture
def linked_corpus(tmp_path):
    return webtext_with_a_linked_folder(tmp_path)


def test_a_second_link_to_a_folder_already_read_adds_no_document(linked_corpus, tmp_path):
    (linked_corpus / "again").symlink_to(tmp_path / "elsewhere")
    files = match_patterns(str(linked_corpus))
    assert len(files) == 10
    assert len({os.path.realpath(f.path) for f in files}) == 10
