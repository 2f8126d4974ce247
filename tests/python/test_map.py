"""Filter.map(): a short file is refused when mapped; a file replaced as save() replaces it (a
new file renamed over the path) leaves the mapping as it was. (A file truncated in place after
map() is undefined, as documented: the process may die with SIGBUS.)"""

import os

import numpy as np
import pytest

import bulkbloom


@pytest.fixture
def saved(tmp_path):
    f = bulkbloom.Filter(100_000, 0.01)
    f.insert(np.arange(1000))
    path = tmp_path / "f.bbf"
    f.save(path)
    return f, path


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("missing", [1, 4096, 100_000])
def test_a_truncated_file_is_refused_when_mapped(saved, verify, missing):
    _, path = saved
    size = os.path.getsize(path)
    os.truncate(path, size - missing)
    with pytest.raises(bulkbloom.FormatError, match=f"truncated: {size - missing} bytes, the "
                                                    f"header describes {size}"):
        bulkbloom.Filter.map(path, verify=verify)


def test_saving_over_a_mapped_file_keeps_the_mapping(saved):
    f, path = saved
    mapped = bulkbloom.Filter.map(path, verify=False)
    f.insert(np.arange(1000, 50_000))
    f.save(path)  # a new file renamed over the path
    assert mapped.contains(np.arange(1000)).all()
    assert mapped != f and bulkbloom.Filter.map(path) == f
    assert mapped.contains(np.arange(1000, 50_000)).mean() < 0.5
