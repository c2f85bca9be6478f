// json.hpp: a small strict JSON parser (RFC 8259) for the service's request bodies.
//
// Strict: one value and nothing after it but white space; no comments, trailing commas, single
// quotes, leading zeros, NaN or Infinity; strings must be valid UTF-8 with escapes as the RFC lists
// them; depth and size bounded by the caller's body limit and kMaxJsonDepth. A number keeps its text,
// so that a reader may convert it as the latent files are read (to float, directly) rather than
// through double. Errors are one sentence that names the byte where the text went wrong.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace facegen::json {

constexpr int kMaxJsonDepth = 64;

struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;                    // a Number's text as written; a String's decoded UTF-8
  std::vector<Value> items;            // Array
  std::map<std::string, Value> members;  // Object (a key given twice is an error)

  bool is(Kind k) const { return kind == k; }
  const Value* find(const std::string& key) const;  // an Object's member, or null
};

// "null", "true", "a number", "a string", "an array", "an object": for error sentences.
const char* kind_name(Value::Kind kind);

// `text` as a sentence may show it: control characters and bytes that are not UTF-8 escaped (\n,
// \x1c, \xff), at most `max` bytes of it (then "..."), never a character cut, so that a refusal
// quoting a client's bytes stays one line of UTF-8.
std::string printable(const std::string& text, size_t max = 40);

// `text` as a JSON string, in quotes, with its quotes, backslashes and control characters escaped and
// each byte that is not UTF-8 written as U+FFFD: valid JSON text whatever the bytes.
std::string quote(const std::string& text);

// The bytes of the UTF-8 sequence that begins text[at] (1 for ASCII), or 0 where it is not one: no
// overlong form, surrogate or value past U+10FFFF, and not cut by the end of `text`.
size_t utf8_sequence(const std::string& text, size_t at);

// Parses `text` as one JSON value. Throws ParseError: "the JSON body is malformed at byte 17 (line 2,
// column 5): expected ',' or ']' after an array element".
Value parse(const std::string& text);

}  // namespace facegen::json
