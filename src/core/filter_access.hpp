// Library-internal access to a Filter's engine, for code such as persistence that must reach the
// bits without copies.
#pragma once

#include <memory>
#include <utility>

#include "bulkbloom/filter.hpp"
#include "registry/engine.hpp"

namespace bulkbloom::detail {

struct FilterAccess {
  static Engine& engine(const Filter& filter) { return filter.engine(); }
  static Filter make(const Layout& layout, std::unique_ptr<Engine> engine) {
    return Filter(layout, std::move(engine));
  }
};

}  // namespace bulkbloom::detail
