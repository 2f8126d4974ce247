// Sizing, the FPR model and parameter validation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

TEST(Layout, ShapeGeometry) {
  EXPECT_EQ(block_bytes(Shape::sb256), 32);
  EXPECT_EQ(block_bytes(Shape::sb256x4), 32);
  EXPECT_EQ(block_bytes(Shape::sb512), 64);
  EXPECT_EQ(block_bytes(Shape::sb512x16), 64);
  EXPECT_EQ(words_per_block(Shape::sb512x16), 16);
  EXPECT_EQ(word_bits(Shape::sb256x4), 64);
  for (Shape s : kAllShapes) EXPECT_EQ(parse_shape(to_string(s)), s);
}

TEST(Layout, ModelIsZeroEmptyAndRisesWithLoad) {
  const Layout layout{Shape::sb512, 1000};
  EXPECT_EQ(layout.expected_fpr(0), 0.0);
  double previous = 0.0;
  for (std::uint64_t n : {100, 1000, 10000, 30000, 100000, 1000000}) {
    const double fpr = layout.expected_fpr(n);
    EXPECT_GT(fpr, previous) << n;
    previous = fpr;
  }
  EXPECT_NEAR(layout.expected_fpr(1'000'000'000), 1.0, 1e-9);
}

// DESIGN §2 quotes the bits per key this model needs; a sizing bug moves them.
TEST(Layout, BitsPerKeyMatchTheDesignTable) {
  struct Row {
    Shape shape;
    double fpr;
    double bits_per_key;
  };
  const Row rows[] = {{Shape::sb256, 0.01, 10.5},   {Shape::sb512, 0.01, 10.1},
                      {Shape::sb256, 0.001, 16.9},  {Shape::sb512, 0.001, 15.7},
                      {Shape::sb512, 0.0001, 23.6}, {Shape::sb512x16, 0.0001, 23.0}};
  const std::uint64_t n = 100'000'000;
  for (const Row& row : rows) {
    const Layout layout = Layout::for_capacity(row.shape, n, row.fpr);
    EXPECT_NEAR(layout.bits_per_key(n), row.bits_per_key, 0.06)
        << to_string(row.shape) << " p=" << row.fpr;
  }
}

TEST(Layout, ForCapacityIsTheSmallestFilterMeetingTheTarget) {
  for (Shape s : kAllShapes) {
    for (double p : {0.2, 0.05, 0.01, 0.001, 1e-4, 1e-6}) {
      for (std::uint64_t n : {1ull, 37ull, 1000ull, 123457ull, 50'000'000ull}) {
        const Layout layout = Layout::for_capacity(s, n, p);
        EXPECT_LE(layout.expected_fpr(n), p) << to_string(s) << " n=" << n << " p=" << p;
        if (layout.num_blocks > 1) {
          Layout smaller = layout;
          --smaller.num_blocks;
          EXPECT_GT(smaller.expected_fpr(n), p) << to_string(s) << " n=" << n << " p=" << p;
        }
      }
    }
  }
}

TEST(Layout, ForCapacityPicksTheShapeNeedingFewestBytes) {
  for (double p : {0.1, 0.01, 0.001, 1e-4, 1e-5}) {
    const std::uint64_t n = 10'000'000;
    const Layout chosen = Layout::for_capacity(n, p);
    EXPECT_LE(chosen.expected_fpr(n), p);
    for (Shape s : kAllShapes) {
      EXPECT_LE(chosen.size_bytes(), Layout::for_capacity(s, n, p).size_bytes())
          << "p=" << p << " chose " << to_string(chosen.shape) << " over " << to_string(s);
    }
  }
  // The design's expectations for the extremes.
  EXPECT_EQ(Layout::for_capacity(10'000'000, 1e-5).shape, Shape::sb512x16);
  EXPECT_EQ(Layout::for_capacity(10'000'000, 0.001).shape, Shape::sb512);
}

TEST(Layout, BadParametersNameTheValueAndTheLimit) {
  auto msg = message_of<std::invalid_argument>([] { Layout::for_capacity(1000, 0.0); });
  EXPECT_NE(msg.find("(0, 1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got 0"), std::string::npos) << msg;
  msg = message_of<std::invalid_argument>([] { Layout::for_capacity(1000, 1.0); });
  EXPECT_NE(msg.find("got 1"), std::string::npos) << msg;
  msg = message_of<std::invalid_argument>([] { Layout::for_capacity(1000, -0.5); });
  EXPECT_NE(msg.find("got -0.5"), std::string::npos) << msg;
  msg = message_of<std::invalid_argument>(
      [] { Layout::for_capacity(1000, std::numeric_limits<double>::quiet_NaN()); });
  EXPECT_NE(msg.find("nan"), std::string::npos) << msg;
  msg = message_of<std::invalid_argument>([] { Layout::for_capacity(0, 0.01); });
  EXPECT_NE(msg.find("got 0"), std::string::npos) << msg;

  msg = message_of<std::invalid_argument>([] { Layout{Shape::sb512, 0}.validate(); });
  EXPECT_NE(msg.find("got 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4294967295"), std::string::npos) << msg;
  msg = message_of<std::invalid_argument>([] { Layout{Shape::sb512, 1ull << 32}.validate(); });
  EXPECT_NE(msg.find("got 4294967296"), std::string::npos) << msg;
  msg = message_of<std::invalid_argument>([] { Layout{static_cast<Shape>(9), 10}.validate(); });
  EXPECT_NE(msg.find("9"), std::string::npos) << msg;
  msg = message_of<std::invalid_argument>([] { parse_shape("sb1024"); });
  EXPECT_NE(msg.find("sb1024"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sb512x16"), std::string::npos) << msg;
  msg = message_of<std::invalid_argument>(
      [] { Layout::for_capacity(Shape::sb256x4, 1ull << 40, 1e-9); });
  EXPECT_NE(msg.find("1099511627776"), std::string::npos) << msg;

  // The Filter constructor validates too.
  EXPECT_THROW(Filter(Layout{Shape::sb512, 0}), std::invalid_argument);
  EXPECT_THROW(Filter(Layout{static_cast<Shape>(4), 10}), std::invalid_argument);
}

TEST(Layout, FilterLargerThanMemoryIsAnAllocationError) {
  // 2^32 - 1 blocks of 64 bytes: 256 GiB, more than any CI machine has.
  const auto msg = message_of<AllocationError>([] {
    Filter huge(Layout{Shape::sb512, Layout::kMaxBlocks});
  });
  EXPECT_NE(msg.find("274877906880"), std::string::npos) << msg;
}

}  // namespace
}  // namespace bulkbloom::test
