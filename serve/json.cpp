// json.cpp: a recursive-descent JSON parser over a string (see json.hpp), one function per grammar rule.
#include "serve/json.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace facegen::json {
namespace {

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  Value document() {
    Value value = this->value(0);
    skip_space();
    if (at_ < s_.size()) fail("unexpected text after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t k = 0; k < at_ && k < s_.size(); ++k) {
      if (s_[k] == '\n') ++line, column = 1;
      else ++column;
    }
    throw ParseError("the JSON body is malformed at byte " + std::to_string(at_) + " (line " + std::to_string(line) +
                     ", column " + std::to_string(column) + "): " + what);
  }
  void skip_space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n' || s_[at_] == '\r')) ++at_;
  }
  bool peek(char c) const { return at_ < s_.size() && s_[at_] == c; }
  void literal(const char* word) {
    const size_t n = std::strlen(word);
    if (s_.compare(at_, n, word) != 0) fail(std::string("expected a JSON value (did you mean ") + word + "?)");
    at_ += n;
  }

  Value value(int depth) {
    if (depth > kMaxJsonDepth) fail("values nest deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    skip_space();
    if (at_ >= s_.size()) fail("the text ends where a value was expected");
    Value v;
    switch (s_[at_]) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': v.kind = Value::Kind::String; v.text = string(); return v;
      case 't': literal("true"); v.kind = Value::Kind::Bool; v.boolean = true; return v;
      case 'f': literal("false"); v.kind = Value::Kind::Bool; return v;
      case 'n': literal("null"); return v;
      default: v.kind = Value::Kind::Number; v.text = number(); return v;
    }
  }

  Value array(int depth) {
    Value v;
    v.kind = Value::Kind::Array;
    ++at_;  // '['
    skip_space();
    if (peek(']')) return ++at_, v;
    for (;;) {
      v.items.push_back(value(depth + 1));
      skip_space();
      if (peek(']')) return ++at_, v;
      if (!peek(',')) fail("expected ',' or ']' after an array element");
      ++at_;
    }
  }

  Value object(int depth) {
    Value v;
    v.kind = Value::Kind::Object;
    ++at_;  // '{'
    skip_space();
    if (peek('}')) return ++at_, v;
    for (;;) {
      skip_space();
      if (!peek('"')) fail("expected a member name in double quotes");
      const size_t key_at = at_;
      std::string key = string();
      skip_space();
      if (!peek(':')) fail("expected ':' after the member name");
      ++at_;
      Value member = value(depth + 1);
      if (!v.members.emplace(key, std::move(member)).second) {
        at_ = key_at;
        fail("the member \"" + printable(key) + "\" is given twice");
      }
      skip_space();
      if (peek('}')) return ++at_, v;
      if (!peek(',')) fail("expected ',' or '}' after an object member");
      ++at_;
    }
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, returned as written.
  std::string number() {
    const size_t start = at_;
    auto digits = [&] {
      const size_t from = at_;
      while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
      return at_ - from;
    };
    if (peek('-')) ++at_;
    if (peek('0')) {
      ++at_;
      if (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') fail("a number may not have leading zeros");
    } else if (digits() == 0) {
      at_ = start;
      fail("expected a JSON value (a number, string, array, object, true, false or null)");
    }
    if (peek('.')) {
      ++at_;
      if (digits() == 0) fail("expected a digit after the decimal point");
    }
    if (peek('e') || peek('E')) {
      ++at_;
      if (peek('+') || peek('-')) ++at_;
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    return s_.substr(start, at_ - start);
  }

  unsigned hex4() {
    if (at_ + 4 > s_.size()) fail("a \\u escape needs four hex digits");
    unsigned code = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[at_++];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) --at_, fail("a \\u escape needs four hex digits");
      code = code * 16 + static_cast<unsigned>(d);
    }
    return code;
  }

  static void put_utf8(std::string& out, unsigned code) {
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

  void escape(std::string& out) {
    ++at_;  // '\\'
    if (at_ >= s_.size()) fail("the text ends inside a string");
    const char c = s_[at_++];
    switch (c) {
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case '/': out += '/'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default: --at_, fail("'\\" + printable(std::string(1, c)) + "' is not a JSON escape");
    }
    unsigned code = hex4();
    if (code >= 0xDC00 && code <= 0xDFFF) fail("a \\u escape is a lone low surrogate");
    if (code >= 0xD800 && code <= 0xDBFF) {
      if (s_.compare(at_, 2, "\\u") != 0) fail("a high surrogate must be followed by a \\u low surrogate");
      at_ += 2;
      const unsigned low = hex4();
      if (low < 0xDC00 || low > 0xDFFF) fail("a high surrogate must be followed by a \\u low surrogate");
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    }
    put_utf8(out, code);
  }

  // One UTF-8 sequence copied after checking it (utf8_sequence).
  void utf8(std::string& out) {
    const size_t bytes = utf8_sequence(s_, at_);
    if (bytes == 0) fail("a string holds bytes that are not UTF-8");
    out.append(s_, at_, bytes);
    at_ += bytes;
  }

  std::string string() {
    ++at_;  // '"'
    std::string out;
    for (;;) {
      if (at_ >= s_.size()) fail("the text ends inside a string");
      const auto c = static_cast<unsigned char>(s_[at_]);
      if (c == '"') return ++at_, out;
      if (c == '\\') {
        escape(out);
      } else if (c < 0x20) {
        fail("a control character must be escaped inside a string");
      } else if (c < 0x80) {
        out += static_cast<char>(c), ++at_;
      } else {
        utf8(out);
      }
    }
  }

  const std::string& s_;
  size_t at_ = 0;
};

}  // namespace

size_t utf8_sequence(const std::string& text, size_t at) {
  const auto b0 = static_cast<unsigned char>(text[at]);
  if (b0 < 0x80) return 1;
  const int extra = b0 >= 0xF5 ? -1 : b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : b0 >= 0xC2 ? 1 : -1;
  if (extra < 0 || at + static_cast<size_t>(extra) >= text.size()) return 0;
  unsigned code = b0 & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) {
    const auto b = static_cast<unsigned char>(text[at + k]);
    if ((b & 0xC0) != 0x80) return 0;
    code = (code << 6) | (b & 0x3F);
  }
  const unsigned least[] = {0, 0x80, 0x800, 0x10000};
  if (code < least[extra] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return static_cast<size_t>(extra) + 1;
}

std::string printable(const std::string& text, size_t max) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  size_t k = 0;
  while (k < text.size()) {
    const auto c = static_cast<unsigned char>(text[k]);
    const size_t sequence = utf8_sequence(text, k);
    if (k + std::max<size_t>(sequence, 1) > max) break;  // a character is shown whole or not at all
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f || sequence == 0) {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
    } else {
      out.append(text, k, sequence);
    }
    k += std::max<size_t>(sequence, 1);
  }
  return k < text.size() ? out + "..." : out;
}

std::string quote(const std::string& text) {
  std::string out = "\"";
  for (size_t k = 0; k < text.size();) {
    const char c = text[k];
    const size_t sequence = utf8_sequence(text, k);
    if (c == '"' || c == '\\') {
      out += '\\', out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else if (sequence == 0) {
      out += "\\ufffd";  // a byte that is not UTF-8: the replacement character
    } else {
      out.append(text, k, sequence);
    }
    k += std::max<size_t>(sequence, 1);
  }
  return out + "\"";
}

const Value* Value::find(const std::string& key) const {
  const auto found = members.find(key);
  return found == members.end() ? nullptr : &found->second;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return "true or false";
    case Value::Kind::Number: return "a number";
    case Value::Kind::String: return "a string";
    case Value::Kind::Array: return "an array";
    case Value::Kind::Object: return "an object";
  }
  return "?";
}

Value parse(const std::string& text) { return Parser(text).document(); }

}  // namespace facegen::json
