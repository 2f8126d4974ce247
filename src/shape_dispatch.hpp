// Runs a generic lambda with the compile-time geometry of a run-time shape.
#pragma once

#include <utility>

#include "bulkbloom/detail/block_math.hpp"
#include "bulkbloom/layout.hpp"

namespace bulkbloom::detail {

template <typename F>
decltype(auto) with_geometry(Shape shape, F&& f) {
  switch (shape) {
    case Shape::sb256:
      return std::forward<F>(f)(GeometrySb256{});
    case Shape::sb256x4:
      return std::forward<F>(f)(GeometrySb256x4{});
    case Shape::sb512:
      return std::forward<F>(f)(GeometrySb512{});
    case Shape::sb512x16:
      break;
  }
  return std::forward<F>(f)(GeometrySb512x16{});
}

}  // namespace bulkbloom::detail
