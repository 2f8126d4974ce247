// A small JSON value: enough to write the bench report and read an earlier one back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bulkbloom::cli {

/// A JSON document tree. Objects keep their keys in insertion order.
class Json {
 public:
  enum class Kind { null, boolean, number, string, array, object };

  Json() = default;
  Json(bool value) : kind_(Kind::boolean), boolean_(value) {}
  Json(double value) : kind_(Kind::number), number_(value) {}
  Json(std::uint64_t value) : Json(static_cast<double>(value)) {}
  Json(unsigned value) : Json(static_cast<double>(value)) {}
  Json(int value) : Json(static_cast<double>(value)) {}
  Json(std::string value) : kind_(Kind::string), string_(std::move(value)) {}
  Json(const char* value) : Json(std::string(value)) {}
  static Json array();
  static Json object();

  /// Parses a whole document. Throws std::runtime_error naming the byte offset of a mistake.
  static Json parse(std::string_view text);

  Kind kind() const { return kind_; }
  /// The value; throws std::runtime_error naming `what` if this is not a number / string / ...
  double number(std::string_view what = "value") const;
  /// A number that is a whole, non-negative count.
  std::uint64_t whole(std::string_view what = "value") const;
  bool boolean(std::string_view what = "value") const;
  const std::string& string(std::string_view what = "value") const;
  const std::vector<Json>& items(std::string_view what = "value") const;
  const std::vector<std::pair<std::string, Json>>& members(std::string_view what = "value") const;

  /// The member `key` of an object, or nullptr.
  const Json* find(std::string_view key) const;
  /// The member `key`; throws std::runtime_error if this is not an object holding it.
  const Json& at(std::string_view key) const;

  /// Adds (or replaces) an object member; returns *this.
  Json& set(std::string key, Json value);
  /// Appends to an array; returns *this.
  Json& push(Json value);

  /// The document as text, indented by two spaces per level (or on one line if `indent` < 0).
  std::string dump(int indent = 2) const;

 private:
  void write(std::string& out, int indent, int depth) const;

  Kind kind_ = Kind::null;
  bool boolean_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

}  // namespace bulkbloom::cli
