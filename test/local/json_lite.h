// SPDX-License-Identifier: Apache-2.0
// A strict JSON parser for tests (RFC 8259: no trailing commas, no comments, nothing after the
// value but whitespace). Throws std::runtime_error naming the offset of the first error.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace hvd::test {

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;
  bool has(const std::string& k) const { return kind == kObject && obj.count(k) > 0; }
  const Json& operator[](const std::string& k) const { return obj.at(k); }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}
  Json parse() {
    Json v = value();
    ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error(std::string("JSON: ") + what + " at offset " + std::to_string(i_));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail("unexpected character");
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c == '\\') {
        if (i_ >= s_.size()) fail("bad escape");
        char e = s_[i_++];
        if (e == 'u') {
          if (i_ + 4 > s_.size()) fail("bad \\u escape");
          out += static_cast<char>(std::strtol(s_.substr(i_, 4).c_str(), nullptr, 16));
          i_ += 4;
        } else if (std::string("\"\\/bfnrt").find(e) != std::string::npos) {
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        } else {
          fail("bad escape");
        }
      } else {
        out += c;
      }
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  Json value() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    Json v;
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      v.kind = Json::kObject;
      if (eat('}')) return v;
      do {
        ws();
        std::string k = string();
        expect(':');
        v.obj[k] = value();
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.kind = Json::kArray;
      if (eat(']')) return v;
      do {
        v.arr.push_back(value());
      } while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::kString;
      v.str = string();
    } else if (s_.compare(i_, 4, "true") == 0 || s_.compare(i_, 5, "false") == 0) {
      v.kind = Json::kBool;
      v.b = s_[i_] == 't';
      i_ += v.b ? 4 : 5;
    } else if (s_.compare(i_, 4, "null") == 0) {
      i_ += 4;
    } else {
      const char* start = s_.c_str() + i_;
      char* end = nullptr;
      v.kind = Json::kNumber;
      v.num = std::strtod(start, &end);
      if (end == start) fail("bad value");
      i_ += static_cast<size_t>(end - start);
    }
    return v;
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace hvd::test
