#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

  bool number(Value* v) {
    const char* begin = t_.c_str() + pos_;
    if (!(*begin == '-' || (*begin >= '0' && *begin <= '9'))) return fail("unexpected character");
    char* end = nullptr;
    v->type = Value::Number;
    v->number = strtod(begin, &end);
    if (end == begin) return fail("bad number");
    pos_ += end - begin;
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

}  // namespace json
}  // namespace plugin
}  // namespace nccl_dcp
