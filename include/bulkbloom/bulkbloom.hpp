/// @file
/// Everything a bulkbloom user needs: layouts and sizing, the owning Filter, the view,
/// persistence, the grown filter and the sliding window.
#pragma once

#include "bulkbloom/error.hpp"
#include "bulkbloom/filter.hpp"
#include "bulkbloom/filter_ref.hpp"
#include "bulkbloom/format.hpp"
#include "bulkbloom/grown_filter.hpp"
#include "bulkbloom/layout.hpp"
#include "bulkbloom/shard.hpp"
#include "bulkbloom/window.hpp"
#include "bulkbloom/window_shard.hpp"
