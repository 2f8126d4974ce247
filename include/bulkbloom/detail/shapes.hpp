/// @file
/// The block shapes: one table of their codes, names and geometry, and the one dispatcher from a
/// run-time Shape to code compiled for its geometry. A new shape is an enumerator and a row here
/// (plus its code in docs/FORMAT.md and a known-answer vector in the tests); everything else —
/// names, parsing, validation, sizing, every kernel — is derived from this table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "bulkbloom/detail/block_math.hpp"

namespace bulkbloom {

/// Block shape: `W` words of `w` bits per block, one bit set per word for each key. The codes are
/// part of the file format.
enum class Shape : std::uint8_t {
  sb256 = 0,     ///< 8 x 32-bit words (256 bits); the Parquet / Arrow split block.
  sb256x4 = 1,   ///< 4 x 64-bit words (256 bits); for high false-positive rates (>= 5%).
  sb512 = 2,     ///< 8 x 64-bit words (512 bits); one CPU cache line.
  sb512x16 = 3,  ///< 16 x 32-bit words (512 bits); for low false-positive rates (<= 1e-4).
};

}  // namespace bulkbloom

namespace bulkbloom::detail {

/// One row of the table: a shape, its name and its block geometry (BlockGeometry's members).
/// Rows are named Geometry<Shape>.
template <Shape kShapeValue, typename Word, int kWordCount>
struct ShapeTraits : BlockGeometry<Word, kWordCount> {
  static constexpr Shape kShape = kShapeValue;
};

struct GeometrySb256 : ShapeTraits<Shape::sb256, std::uint32_t, 8> {
  static constexpr std::string_view kName = "sb256";
};
struct GeometrySb256x4 : ShapeTraits<Shape::sb256x4, std::uint64_t, 4> {
  static constexpr std::string_view kName = "sb256x4";
};
struct GeometrySb512 : ShapeTraits<Shape::sb512, std::uint64_t, 8> {
  static constexpr std::string_view kName = "sb512";
};
struct GeometrySb512x16 : ShapeTraits<Shape::sb512x16, std::uint32_t, 16> {
  static constexpr std::string_view kName = "sb512x16";
};

template <typename... Rows>
struct ShapeList {};

/// Every shape, in code order (the codes are 0, 1, ... in this order).
using AllShapes = ShapeList<GeometrySb256, GeometrySb256x4, GeometrySb512, GeometrySb512x16>;

template <typename... Rows>
constexpr auto shape_array(ShapeList<Rows...>) {
  return std::array<Shape, sizeof...(Rows)>{Rows::kShape...};
}

/// Every shape as a value, in code order.
inline constexpr auto kAllShapes = shape_array(AllShapes{});

template <typename... Rows>
constexpr bool codes_are_dense(ShapeList<Rows...>) {
  int code = 0;
  return ((static_cast<int>(Rows::kShape) == code++) && ...);
}
static_assert(codes_are_dense(AllShapes{}), "shape codes must be 0, 1, ... in table order");

#if defined(__CUDACC__)
#pragma nv_exec_check_disable  // host-only callers instantiate it with host-only functions
#endif
template <typename F, typename Row, typename... Rest>
BULKBLOOM_HOST_DEVICE constexpr decltype(auto) dispatch_shape(Shape shape, F& f,
                                                              ShapeList<Row, Rest...>) {
  if constexpr (sizeof...(Rest) == 0) {
    return f(Row{});  // validated layouts hold only known shapes: the last row needs no test
  } else {
    if (shape == Row::kShape) return f(Row{});
    return dispatch_shape(shape, f, ShapeList<Rest...>{});
  }
}

/// Calls `f(Traits{})` with the table row of `shape`: `Traits` has the geometry (Word, kWords,
/// kWordBits, kBlockBytes, pattern()), kShape and kName. The one place a run-time shape becomes
/// compile-time code, on the host and in CUDA device code.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <typename F>
BULKBLOOM_HOST_DEVICE constexpr decltype(auto) with_geometry(Shape shape, F&& f) {
  return dispatch_shape(shape, f, AllShapes{});
}

}  // namespace bulkbloom::detail
