// command_line.cpp: cxxopts' refusals in one sentence, repeated flags refused (see command_line.hpp).
#include "common/command_line.hpp"

#include <algorithm>
#include <map>

#include "common/errors.hpp"

namespace facegen {
namespace {

// The text between the first pair of quotes of cxxopts' message ('x' or, in a UTF-8 build, ‘x’).
std::string quoted_name(const std::string& message) {
  for (const auto& [open, close] : {std::pair<std::string, std::string>{"'", "'"}, {"\u2018", "\u2019"}}) {
    const size_t begin = message.find(open);
    if (begin == std::string::npos) continue;
    const size_t end = message.find(close, begin + open.size());
    if (end != std::string::npos) return message.substr(begin + open.size(), end - begin - open.size());
  }
  return "";
}

}  // namespace

std::string flag_text(const std::string& name) { return (name.size() == 1 ? "-" : "--") + name; }

std::string command_line_problem(const cxxopts::exceptions::exception& e) {
  const std::string message = e.what();
  const std::string name = quoted_name(message);
  if (dynamic_cast<const cxxopts::exceptions::no_such_option*>(&e) != nullptr) return "unknown flag " + flag_text(name);
  if (dynamic_cast<const cxxopts::exceptions::missing_argument*>(&e) != nullptr ||
      dynamic_cast<const cxxopts::exceptions::option_requires_argument*>(&e) != nullptr) {
    return flag_text(name) + " needs a value";
  }
  if (dynamic_cast<const cxxopts::exceptions::gratuitous_argument_for_option*>(&e) != nullptr) {
    const size_t value = message.find(name) + name.size();
    return flag_text(name) + " takes no value, got '" + quoted_name(message.substr(value + 1)) + "'";
  }
  if (dynamic_cast<const cxxopts::exceptions::invalid_option_syntax*>(&e) != nullptr) {
    return "'" + name + "' is not a flag (flags are -x and --name)";
  }
  return message;
}

void refuse_repeated_flags(const cxxopts::ParseResult& args, const std::vector<std::string>& may_repeat) {
  // arguments() holds what was given, in order, each under its long name (defaults are not there).
  std::map<std::string, std::string> first_value;
  for (const cxxopts::KeyValue& given : args.arguments()) {
    if (std::find(may_repeat.begin(), may_repeat.end(), given.key()) != may_repeat.end()) continue;
    const auto [seen, fresh] = first_value.emplace(given.key(), given.value());
    if (fresh) continue;
    // A flag without a value reads "true" each time.
    const bool valued = seen->second != "true" || given.value() != "true";
    throw UserError(flag_text(given.key()) + " is given twice" +
                    (valued ? " ('" + seen->second + "', then '" + given.value() + "')" : "") + "; give it once");
  }
}

}  // namespace facegen
