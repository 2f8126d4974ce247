#include "cli/bench/json.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace bulkbloom::cli {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Json document() {
    Json value = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("text after the end of the document");
    return value;
  }

 private:
  // Deeper nesting than any report has: a bound so a hostile file cannot exhaust the stack.
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at byte " + std::to_string(pos_));
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }

  bool consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting too deep");
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end");
    const char c = text_[pos_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') return Json(parse_string());
    if (consume("true")) return Json(true);
    if (consume("false")) return Json(false);
    if (consume("null")) return Json();
    return Json(parse_number());
  }

  Json parse_object(int depth) {
    Json object = Json::object();
    ++pos_;
    skip_space();
    if (consume("}")) return object;
    while (true) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a member name");
      std::string key = parse_string();
      skip_space();
      if (!consume(":")) fail("expected ':'");
      object.set(std::move(key), parse_value(depth + 1));
      skip_space();
      if (consume("}")) return object;
      if (!consume(",")) fail("expected ',' or '}'");
    }
  }

  Json parse_array(int depth) {
    Json array = Json::array();
    ++pos_;
    skip_space();
    if (consume("]")) return array;
    while (true) {
      array.push(parse_value(depth + 1));
      skip_space();
      if (consume("]")) return array;
      if (!consume(",")) fail("expected ',' or ']'");
    }
  }

  double parse_number() {
    const std::size_t begin = pos_;
    while (pos_ < text_.size() &&
           std::string_view("+-0123456789.eE").find(text_[pos_]) != std::string_view::npos) {
      ++pos_;
    }
    if (pos_ == begin) fail("unexpected character");
    const std::string digits(text_.substr(begin, pos_ - begin));
    char* end = nullptr;
    const double value = std::strtod(digits.c_str(), &end);
    if (end != digits.c_str() + digits.size()) fail("bad number '" + digits + "'");
    return value;
  }

  unsigned hex4() {
    if (pos_ + 4 > text_.size()) fail("short \\u escape");
    unsigned value = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      value <<= 4;
      if (h >= '0' && h <= '9')
        value |= h - '0';
      else if (h >= 'a' && h <= 'f')
        value |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F')
        value |= h - 'A' + 10;
      else
        fail("bad \\u escape");
    }
    return value;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  std::string parse_string() {
    ++pos_;  // the opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned code = hex4();
          if (code >= 0xD800 && code < 0xDC00 && consume("\\u")) {
            const unsigned low = hex4();
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, code);
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

void write_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<std::size_t>(indent * depth), ' ');
}

}  // namespace

Json Json::array() {
  Json j;
  j.kind_ = Kind::array;
  return j;
}

Json Json::object() {
  Json j;
  j.kind_ = Kind::object;
  return j;
}

Json Json::parse(std::string_view text) {
  return Parser(text).document();
}

double Json::number(std::string_view what) const {
  if (kind_ != Kind::number) throw std::runtime_error(std::string(what) + " is not a number");
  return number_;
}

std::uint64_t Json::whole(std::string_view what) const {
  const double value = number(what);
  if (value < 0 || value != std::floor(value)) {
    throw std::runtime_error(std::string(what) + " is not a whole number");
  }
  return static_cast<std::uint64_t>(value);
}

bool Json::boolean(std::string_view what) const {
  if (kind_ != Kind::boolean) throw std::runtime_error(std::string(what) + " is not true or false");
  return boolean_;
}

const std::string& Json::string(std::string_view what) const {
  if (kind_ != Kind::string) throw std::runtime_error(std::string(what) + " is not a string");
  return string_;
}

const std::vector<Json>& Json::items(std::string_view what) const {
  if (kind_ != Kind::array) throw std::runtime_error(std::string(what) + " is not an array");
  return items_;
}

const std::vector<std::pair<std::string, Json>>& Json::members(std::string_view what) const {
  if (kind_ != Kind::object) throw std::runtime_error(std::string(what) + " is not an object");
  return members_;
}

const Json* Json::find(std::string_view key) const {
  if (kind_ != Kind::object) return nullptr;
  for (const auto& [name, value] : members_) {
    if (name == key) return &value;
  }
  return nullptr;
}

const Json& Json::at(std::string_view key) const {
  const Json* value = find(key);
  if (value == nullptr) throw std::runtime_error("missing field '" + std::string(key) + "'");
  return *value;
}

Json& Json::set(std::string key, Json value) {
  for (auto& [name, existing] : members_) {
    if (name == key) {
      existing = std::move(value);
      return *this;
    }
  }
  members_.emplace_back(std::move(key), std::move(value));
  return *this;
}

Json& Json::push(Json value) {
  items_.push_back(std::move(value));
  return *this;
}

std::string Json::dump(int indent) const {
  std::string out;
  write(out, indent, 0);
  if (indent >= 0) out += '\n';
  return out;
}

void Json::write(std::string& out, int indent, int depth) const {
  switch (kind_) {
    case Kind::null:
      out += "null";
      return;
    case Kind::boolean:
      out += boolean_ ? "true" : "false";
      return;
    case Kind::number: {
      if (!std::isfinite(number_)) {
        out += "null";  // JSON has no infinities; a missing figure reads as null
        return;
      }
      char buf[32];
      if (number_ == std::floor(number_) && std::fabs(number_) < 1e15) {
        std::snprintf(buf, sizeof buf, "%.0f", number_);
      } else {
        std::snprintf(buf, sizeof buf, "%.17g", number_);
      }
      out += buf;
      return;
    }
    case Kind::string:
      write_string(out, string_);
      return;
    case Kind::array: {
      out += '[';
      // Arrays of numbers stay on one line: the report's runs read better that way.
      bool scalars = true;
      for (const Json& item : items_)
        scalars = scalars && item.kind_ != Kind::array && item.kind_ != Kind::object;
      for (std::size_t i = 0; i < items_.size(); ++i) {
        if (i > 0) out += scalars ? ", " : ",";
        if (!scalars) newline(out, indent, depth + 1);
        items_[i].write(out, indent, depth + 1);
      }
      if (!scalars && !items_.empty()) newline(out, indent, depth);
      out += ']';
      return;
    }
    case Kind::object:
      out += '{';
      for (std::size_t i = 0; i < members_.size(); ++i) {
        if (i > 0) out += ',';
        newline(out, indent, depth + 1);
        write_string(out, members_[i].first);
        out += indent < 0 ? ":" : ": ";
        members_[i].second.write(out, indent, depth + 1);
      }
      if (!members_.empty()) newline(out, indent, depth);
      out += '}';
      return;
  }
}

}  // namespace bulkbloom::cli
