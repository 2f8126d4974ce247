"""A Filter keeps the conventions of Python's set (and of rbloom) where a Bloom filter can:
bool(), ==, issubset / issuperset, <= / >=; no len(), since it cannot count its keys."""

from collections.abc import Hashable, Sized

import numpy as np
import pytest

import bulkbloom


def filled(keys, capacity=10_000):
    f = bulkbloom.Filter(capacity, 0.001)
    f.insert(np.asarray(keys, dtype=np.uint64))
    return f


def test_bool_is_not_empty():
    f = bulkbloom.Filter(1000, 0.001)
    assert not f
    f.add("x")
    assert f
    f.clear()
    assert not f


def test_equal_means_same_layout_and_bits(tmp_path):
    keys = np.arange(5000)
    a = filled(keys)
    b = filled(keys[::-1])
    b.update(keys[:10])  # repeats change no bit
    b.keys_inserted, b.metadata = 99, b"not compared"
    assert a == b and not (a != b)
    b.add(10**9)
    assert a != b
    assert filled(keys) != filled(keys, capacity=20_000)  # another layout
    assert a != "a filter" and a != None  # noqa: E711
    a.save(tmp_path / "a.bbf")
    assert bulkbloom.Filter.map(tmp_path / "a.bbf") == a == bulkbloom.Filter.load(tmp_path / "a.bbf")
    assert a.__hash__ is None and not isinstance(a, Hashable)
    with pytest.raises(TypeError, match="unhashable"):
        {a}


def test_subset_is_bitwise():
    small = filled(np.arange(100))
    large = filled(np.arange(1000))
    other = filled(np.arange(5000, 5100))
    assert small.issubset(large) and small <= large and large >= small
    assert large.issuperset(small) and not large.issubset(small) and not large <= small
    assert not small.issubset(other) and not other.issuperset(small)
    assert small.issubset(small) and small <= small
    union = small | other
    assert small <= union and other <= union and union.issuperset(other)
    with pytest.raises(ValueError, match="layouts differ"):
        small.issubset(filled([1], capacity=50_000))
    with pytest.raises(TypeError, match="issubset needs a bulkbloom.Filter"):
        small.issubset({1, 2})
    with pytest.raises(TypeError):
        small <= {1, 2}  # noqa: B015


def test_no_len():
    f = filled([1, 2, 3])
    assert not isinstance(f, Sized)
    with pytest.raises(TypeError):
        len(f)
    assert 2.5 < f.estimated_count() < 3.5  # what there is instead
