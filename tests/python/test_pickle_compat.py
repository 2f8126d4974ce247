"""Pickles written by an earlier build still load: each class pickles through its file format as
``(bulkbloom.<Class>.from_bytes, (file_bytes,))``, and PICKLED holds one pickle of each, written
by commit a92c672 (before the classes shared their pickling code) from the objects make() builds,
zlib-compressed and base64-encoded."""

import base64
import pickle
import zlib

import numpy as np
import pytest

import bulkbloom

KEYS = np.arange(1, 201, dtype=np.uint64)
# Keys never inserted, to compare the false positives too: an object that loads with other bits
# or another layout answers some of them differently.
PROBES = np.arange(1, 20_001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)


def make():
    f = bulkbloom.Filter.from_layout("sb256", 4, seed=7)
    f.insert(KEYS)
    f.keys_inserted = 200
    f.metadata = b"filter"
    w = bulkbloom.WindowedFilter.for_records(1000, 0.01)
    w.insert_if_absent(KEYS)
    w.keys_inserted = 200
    w.metadata = b"window"
    g = bulkbloom.GrownFilter(100, 0.01)
    g.insert(KEYS)
    g.metadata = b"grown"
    return {
        "Filter": f, "WindowedFilter": w, "GrownFilter": g,
        "FilterShard": bulkbloom.split(f, 2)[1], "WindowShard": bulkbloom.split(w, 2)[1],
    }


PICKLED = {
    "Filter": (
        "eNprYJl6SoABDHo4kkozc0oy84qn9LCnp5YklpQUTZk8pYczqTQnOyknPz93Sg+bG1BFKliYK60oPzc+qbIktXhK"
        "25SgKU4NQHM6nZx8/P19uRiB5iUwIAALlGaH0iegNBtMAdQNDVCu8cKio3cDFX/BpDNkbyceUrtVlga2nmEUjIJR"
        "MApGwSgYBaNgFIyCUTAKRsEoGAUDCPZ/r33++k/8/3/X5/6u/fv48/Z394vvb/4cv/fv9O//q6v3v/v897/8/f/t"
        "+//X/5/z//7/Z9f//7/8eu3fKvu/f2vr7/+/f/t99fl1357bv/v7b/enuNg///+/2/rtv3693fu7z2//rNq3+//8"
        "/9v3vX79H6j5973y9/u/1Oz//3ve3/vT/76/Uf5/SuuUoCl6ABZMlUk="
    ),
    "WindowedFilter": (
        "eNrt019oW1UcB/Df/ZPm3kvW3ZvebEE6d5OmpXFuJiyOzJeeZGl3W3R2aWShL7axmat2bckyNufLbZaFBDKJ8xbL"
        "mJCWCeLD6Nwe9O1SUwjb04aKT4KCuAcfVPYyBmIo7sFCfVb4fuDwO+d3zvmdw4FjicvpcdpSl3LnZ+eKs/Pn7Lr7"
        "7Xxxulgs2B/ZdTl3fu7d3NzCwlm73n1qdn5m4UJ+ZqSzMr81rZwuLJx9M/deMX/OrthpO0mderVk8tToiZTCd+pa"
        "ndaJnNiJMv3TI4H+VXuHcdffcaVQMF+68XTz2bxvIjb0y59P6H391vEfL5WHxG37t5/P7ZDnd8gL2/LP7nNh61kI"
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA4D/lWOmih9mCcjI/mEhyV9S1sr/Xk3FSvn3VRVOmvl7td0+u"
        "pDOqnWmH1nOpDe8BcU2p0l6DlGGbK+t7I6PdJBvaA284yienWhup/oCzIlylmFqx2MdrvS8z0WJ7hqtTG12OMepY"
        "rh7uUDMWpje8tKdbGXdKRi9TGyRmUwc567HOzA9Vi7LkznKSxaLybIDjXFIorMREgQaDkt/kuuKd+7RPknHTLT7P"
        "Xi2VVbdVzw3cjXF8NLC6O1xnAX650c7JpTSN33a7eZqUzTXfl8RrU+Ki/vVSNTSdiJpGnzz8eR/z18rNnuZTyyL+"
        "nQ+YJLo55yfhSONTLVKvZTr96FjSku5+w1xHn3shyLf31X7u5xRDD22uyLqkjvX9GrfnKiVJv5wKXvUP3W9L3odL"
        "nnuhTf/3R27OTBr+J5e6XksP9g97soVS5ZGTOfyVWYm0vrt+nKbfWp+IcN8yTXkw1P/QPym19PwfX6wGDi6q8ce7"
        "EkHnsCYyZ8Ij/rDC6sy630xdfJ38rpH5F++xO8eUgVqie6w1Qpc18mYkKair+w3PZ4zFDWp8QhR4JRg1EyXfDUnd"
        "xbI1mfMZLWc8qQp0+lrtt4S15MuqTssMHeUsjayI1hyIrCc4EuO3zapLlFZFamz0nCmpdxqkUthtjFZF3mXxAUXK"
        "SIvL0oFpgQQrih8EAAAAAADw/2BfsdP2ob8AJkHdmQ=="
    ),
    "GrownFilter": (
        "eNprYJmaL8gABj0cSaWZOSWZecVTetjTU0sSS0qKpkye0sOZVJqTnZSTn587pYfbvSi/PM8NqCwVLMeVVpSfG59U"
        "WZJaPKVtStAUJwWgYZ1OTj7+/r5cjEBDExgQgJMBFZyA0nEwAQEIpcAIoSdJGJvc8os7BJPmWlIY9sjoiBDcPbrJ"
        "iUVFmakpumlgBykYcqUVFNka6BkYcmWnVsan5RflJpbYcqWn5qUWJZZk5ufZGhkYKADlDcxNLFGAOVdqXgpXOshz"
        "DKNgFIyCUTAKRsEoGAWjYBSMglEwCkbBKCACzNR7Yfh3mqT32rRHK8pPWQWE6c5t27Du2NpIdVsud4PXC8u2MDtf"
        "LRU9OauqVY7brftHbntTxeo5zVs6ggtz2OMLjHs8244orBN/0Xar5YGBXFPEZ1HDJHM1xrAkqeS2BbxPlNtneTXf"
        "ei4WeLW4S/T8rcm8d4wZ7W89Fzh6aNrKa5Fepr9bt5062s/xsVtJ+EbhH9ddcje2dj7qKy4Xrfot7pz2OtkpOu/d"
        "7KSVW8tWB83dtO3Z838p/zfnbn809/WLr7uW/Oe+e0ek37T2+rdF3+7GHk+xi4xQ7dD91Ne1Y82+hM353XOLZ2/e"
        "NYH1qVJqiUpfBssfhtLQWZV6Ji+sC5ec8GS8f7qz0m9FlnhEQ0jNEUmFa6uULzHNeep51qHAebVQc6Cy3p8iWYGI"
        "Ka1TgqboAQBV19nF"
    ),
    "FilterShard": (
        "eNprYJnaL8AABj0cSaWZOSWZecVTetjTU0sSS0qKpkye0sOZVJqTnZSTn587pYfbDagitSg4I7EoBSTHlVaUnxuf"
        "VFmSWjylbUrQFCcHoGGdTk4+/v6+XIxAQxMgZjMwATELlM3OgArYYAyoQxxg3FmrNWewXUiB6dVknL1jSePmB2lg"
        "NzCMglEwCkbBKBgFo2AUjIJRMApGwSgYBaNgAMH92++rz6/79tz+3d9/uz/Fxf75///d1m//9evt3t99fvtn1b7d"
        "/+f/377v9ev//+///32v/P3+LzX7//+e9/f+9L/vb5T/n9I6JWiKHgCvW2JE"
    ),
    "WindowShard": (
        "eNrt0lFoUlEYB/Bz9apH07g6BQkidW5Uq1AGw/Xi1WxToSYqTNZDaLpmOR3OsVovd27JLlhI3cGIAgcFQhCr9dKb"
        "hAPZnhoVPUTQINhDDxG9jL1k0ksDey74/+DwHf6H831wOAK7PBIibWWamElnCunstFRWXU0V4oVCXrovldWJmcz1"
        "RCaXm5TKh0bT2WRuNjIRzyd/nWnG87nJy4mbhdS0VJLCkpe0mole72jgok8jazUVWqtVGbZV1eRPu3LyV80OufJ3"
        "1Rn2A8qPtR3CtGeQp310L3Sp5rxlfDb8eW7RzR64d3A+0yGXdcjlHfLZ9psQAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        "AAAAAAAAAAAAgH9KN28WF6td1X1BILJrd3nKqpj6jnyg8kTvKIvR1t4Z9Ar05VteMXjkpE3WPCp+6WE0FqN9Y0Vt"
        "pFyw+6tLypSK1Ljgs90xu7ea1LA9r920b5g/DDxOjlnMe3PKC+HjPee1sXyxtFuP9r/ylxyN9w+GSfzKWsTBvOP1"
        "mjfunm3zGG0YU99frFpPT3GuHzqPrd6vZ/l6RMt+WuHLvLBV9d0YIWbFUPbUJr9+TtMreg4HG0NkQU8MUUptRu6Y"
        "RVvjeZeFVB4RYj1rc/o9RdNDyun4mKhmTJZGPeTl5GT8nvjNI8ybYly94bcPMoKeCA59tdex5mEI63ruX1KwdJUl"
        "ldddE0VuvUI4ckJlCSyxMoUgs2polE4t0764nMgFJ34QAAAAAAAA/A+k21JYOvMTNSqYIg=="
    ),
}


def answers(obj):
    # A shard answers only for its own blocks: the keys that fall there.
    probes = np.concatenate([KEYS, PROBES])
    if isinstance(obj, bulkbloom.FilterShard):
        probes = probes[bulkbloom.shard_of(obj.layout, probes, obj.num_shards) == obj.index]
    elif isinstance(obj, bulkbloom.WindowShard):
        owners = bulkbloom.shard_of(obj.config.generation, probes, obj.num_shards)
        probes = probes[owners == obj.index]
    return probes, obj.contains(probes)


@pytest.mark.parametrize("kind", sorted(PICKLED))
def test_a_pickle_from_before_loads_and_answers_the_same(kind):
    loaded = pickle.loads(zlib.decompress(base64.b64decode("".join(PICKLED[kind]))))
    made = make()[kind]
    assert type(loaded) is getattr(bulkbloom, kind)
    assert loaded.metadata == made.metadata
    assert getattr(loaded, "keys_inserted", None) == getattr(made, "keys_inserted", None)
    probes, expected = answers(made)
    assert np.array_equal(answers(loaded)[1], expected)
    assert expected[~np.isin(probes, KEYS)].any()  # the probes also meet false positives
    assert loaded.to_bytes() == made.to_bytes()


@pytest.mark.parametrize("kind", sorted(PICKLED))
def test_the_pickle_rebuilds_through_the_class_from_bytes(kind):
    # What older builds unpickle: the class by its name in the package, and from_bytes.
    obj = make()[kind]
    rebuild, args = obj.__reduce__()
    assert rebuild == getattr(bulkbloom, kind).from_bytes
    assert args == (obj.to_bytes(),)
    data = pickle.dumps(obj, protocol=4)
    assert b"\x8c\tbulkbloom" in data and b"\x8c\nfrom_bytes" in data
    assert bytes([0x8C, len(kind)]) + kind.encode() in data  # SHORT_BINUNICODE of the name


class CallersFilter(bulkbloom.Filter):
    __slots__ = ()


def test_a_callers_subclass_pickles_as_the_package_class_as_before():
    # Its pickle names bulkbloom.Filter.from_bytes, which loads where the subclass is unknown.
    f = CallersFilter(1000, 0.01)
    f.insert(KEYS)
    assert f.__reduce__()[0] == bulkbloom.Filter.from_bytes
    copy = pickle.loads(pickle.dumps(f))
    assert type(copy) is bulkbloom.Filter and copy.to_bytes() == f.to_bytes()
