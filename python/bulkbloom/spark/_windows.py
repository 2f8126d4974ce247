"""Sliding windows (module documentation of bulkbloom.spark, "Sliding windows"): what a run asks
for, and a window's configuration in a manifest."""

from __future__ import annotations

from typing import List, NamedTuple, Optional

import bulkbloom


def _window_to_json(config: bulkbloom.WindowConfig) -> dict:
    return {
        "clock": config.clock,
        "window": config.window,
        "generations": config.generations,
        "lateness": config.lateness,
        "fpr": config.fpr,
        "block_multiple": config.block_multiple,
    }


def _window_config(values: dict, layout: bulkbloom.Layout) -> bulkbloom.WindowConfig:
    return bulkbloom.WindowConfig.of(
        values["clock"], int(values["window"]), layout, generations=int(values["generations"]),
        lateness=int(values["lateness"]), fpr=float(values.get("fpr", 0.0)),
        block_multiple=int(values.get("block_multiple", 1)),
    )


class _WindowSizing(NamedTuple):
    """What every window shard of a run is given before its records, as the single window is
    given them (bulkbloom/window_shard.hpp, "Sizing"): the whole window's keys in each filter
    (the sum of the shards' filter_keys() the last run recorded, or None for a new window), and
    the keys this run's generations are sized for at least."""

    window_keys: Optional[List[int]]
    min_keys: int


def _prepare_window_shard(shard: bulkbloom.WindowShard, sizing: Optional[_WindowSizing]) -> None:
    if sizing is None or not shard.sizes_per_period:
        return
    if sizing.window_keys is not None:
        shard.set_window_keys(sizing.window_keys)
    shard.set_sizing(sizing.min_keys)


class _WindowRequest(NamedTuple):
    """What dedup(window=...) asks for: the window, or its sizing, and this run's time."""

    length: int
    time: int
    generations: int
    lateness: int
    config: Optional[bulkbloom.WindowConfig]


def _window_request(
    window: Optional[int], time: Optional[int], generations: int, lateness: int,
    window_config: Optional[bulkbloom.WindowConfig],
) -> Optional[_WindowRequest]:
    if window_config is not None and window is None:
        window = window_config.window
    if window is None:
        return None
    if time is None:
        raise ValueError("a window (window=) needs this dump's time=")
    if window_config is not None and window_config.clock != "event_time":
        raise ValueError("window_config must have the event_time clock")
    return _WindowRequest(int(window), int(time), generations, lateness, window_config)
