#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <charconv>
#include <cmath>

namespace nccl_dcp {
namespace plugin {
namespace json {

namespace {

constexpr int kMaxDepth = 64;  // a hostile file cannot exhaust the stack

class Parser {
 public:
  explicit Parser(const std::string& text) : t_(text) {}

  bool document(Value* out, std::string* error) {
    const bool ok = value(out, 0) && (skipSpace(), pos_ == t_.size() || fail("trailing characters"));
    if (!ok && error) *error = "offset " + std::to_string(pos_) + ": " + why_;
    return ok;
  }

 private:
  bool fail(const char* why) {
    if (why_.empty()) why_ = why;
    return false;
  }
  void skipSpace() {
    while (pos_ < t_.size() && t_[pos_] != '\0' && strchr(" \t\r\n", t_[pos_]) != nullptr) pos_++;
  }
  bool literal(const char* word) {
    const size_t n = strlen(word);
    if (t_.compare(pos_, n, word) != 0) return fail("unknown literal");
    pos_ += n;
    return true;
  }

  bool value(Value* v, int depth) {
    if (depth > kMaxDepth) return fail("nested too deep");
    skipSpace();
    if (pos_ >= t_.size()) return fail("unexpected end");
    switch (t_[pos_]) {
      case '{': return object(v, depth);
      case '[': return array(v, depth);
      case '"': v->type = Value::String; return string(&v->string);
      case 't': v->type = Value::Bool; v->boolean = true; return literal("true");
      case 'f': v->type = Value::Bool; v->boolean = false; return literal("false");
      case 'n': v->type = Value::Null; return literal("null");
      default: return number(v);
    }
  }

  bool peek(const char* set) const { return pos_ < t_.size() && t_[pos_] != '\0' && strchr(set, t_[pos_]); }
  size_t digits() {
    const size_t from = pos_;
    while (peek("0123456789")) pos_++;
    return pos_ - from;
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, read without the
  // locale (strtod would take inf, nan, hex and a locale's comma).
  bool number(Value* v) {
    if (!peek("-0123456789")) return fail("unexpected character");
    const size_t begin = pos_;
    if (peek("-")) pos_++;
    if (peek("0")) pos_++;
    else if (digits() == 0) return fail("bad number");
    if (peek(".")) {
      pos_++;
      if (digits() == 0) return fail("bad number");
    }
    if (peek("eE")) {
      pos_++;
      if (peek("+-")) pos_++;
      if (digits() == 0) return fail("bad number");
    }
    v->type = Value::Number;
    const std::from_chars_result r = std::from_chars(t_.data() + begin, t_.data() + pos_, v->number);
    if (r.ec == std::errc::result_out_of_range) return fail("number out of range");
    if (r.ec != std::errc() || r.ptr != t_.data() + pos_) return fail("bad number");
    return true;
  }

  bool string(std::string* s) {
    pos_++;  // opening quote
    while (pos_ < t_.size()) {
      const char c = t_[pos_++];
      if (c == '"') return true;
      if ((unsigned char)c < 0x20) return fail("control character in string");
      if (c != '\\') {
        *s += c;
        continue;
      }
      if (pos_ >= t_.size()) break;
      const char e = t_[pos_++];
      static const char kFrom[] = "\"\\/bfnrt", kTo[] = "\"\\/\b\f\n\r\t";
      if (const char* at = strchr(kFrom, e); at != nullptr && e != '\0') {
        *s += kTo[at - kFrom];
      } else if (e == 'u' && pos_ + 4 <= t_.size()) {
        const unsigned cp = (unsigned)strtoul(t_.substr(pos_, 4).c_str(), nullptr, 16);
        pos_ += 4;
        *s += cp < 0x80 ? (char)cp : '?';  // the plugin's own files are ASCII
      } else {
        return fail("bad escape");
      }
    }
    return fail("unterminated string");
  }

  bool array(Value* v, int depth) {
    v->type = Value::Array;
    pos_++;
    skipSpace();
    if (pos_ < t_.size() && t_[pos_] == ']') return pos_++, true;
    while (true) {
      v->array.emplace_back();
      if (!value(&v->array.back(), depth + 1)) return false;
      skipSpace();
      if (pos_ < t_.size() && t_[pos_] == ',') { pos_++; continue; }
      if (pos_ < t_.size() && t_[pos_] == ']') return pos_++, true;
      return fail("expected , or ]");
    }
  }

  bool object(Value* v, int depth) {
    v->type = Value::Object;
    pos_++;
    skipSpace();
    if (pos_ < t_.size() && t_[pos_] == '}') return pos_++, true;
    while (true) {
      skipSpace();
      if (pos_ >= t_.size() || t_[pos_] != '"') return fail("expected a key");
      v->object.emplace_back();
      if (!string(&v->object.back().first)) return false;
      skipSpace();
      if (pos_ >= t_.size() || t_[pos_] != ':') return fail("expected :");
      pos_++;
      if (!value(&v->object.back().second, depth + 1)) return false;
      skipSpace();
      if (pos_ < t_.size() && t_[pos_] == ',') { pos_++; continue; }
      if (pos_ < t_.size() && t_[pos_] == '}') return pos_++, true;
      return fail("expected , or }");
    }
  }

  const std::string& t_;
  size_t pos_ = 0;
  std::string why_;
};

}  // namespace

const Value* Value::find(const std::string& key) const {
  if (type != Object) return nullptr;
  for (const auto& kv : object)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

bool parse(const std::string& text, Value* out, std::string* error) {
  *out = Value();
  return Parser(text).document(out, error);
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if ((unsigned char)c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", (unsigned)(unsigned char)c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

}  // namespace json
}  // namespace plugin
}  // namespace nccl_dcp
