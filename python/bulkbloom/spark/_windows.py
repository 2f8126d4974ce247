"""Sliding windows (module documentation of bulkbloom.spark, "Sliding windows"): what a run asks
for, and a window's configuration in a manifest."""

from __future__ import annotations

from typing import NamedTuple, Optional

import bulkbloom


def _window_to_json(config: bulkbloom.WindowConfig) -> dict:
    return {
        "clock": config.clock,
        "window": config.window,
        "generations": config.generations,
        "lateness": config.lateness,
        "fpr": config.fpr,
    }


def _window_config(values: dict, layout: bulkbloom.Layout) -> bulkbloom.WindowConfig:
    return bulkbloom.WindowConfig.of(
        values["clock"], int(values["window"]), layout, generations=int(values["generations"]),
        lateness=int(values["lateness"]), fpr=float(values.get("fpr", 0.0)),
    )


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
