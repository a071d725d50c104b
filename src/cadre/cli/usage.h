// One-line usage errors from CLI11's parse errors, for the `cadre` program and for cadre-serve
// (which `cadre serve` execs): header-only, on CLI11 alone, so that cadre-serve need not link
// the cli layer.
//
// CLI11 prints its own message and "Run with --help for more information." on a second line,
// naming neither the command nor, for a surplus argument, which word it was meant for. A usage
// error here is one line, "<command>: <what is wrong>", naming the option or argument at fault;
// the caller prints it and exits 2.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cadre/base/printable.h"

namespace cadre::cli {

// The type name of an option whose value is a folder: an empty one is refused (ArgvProblems),
// rather than meaning the working directory or failing as an unnamed filesystem error.
inline constexpr const char* kDirType = "DIR";
// The type names of a server's URL, a bearer token, a name, an id, a HOST:PORT address, a host
// and a file: an empty one is refused too, rather than meaning "not given" (the default server,
// $CADRE_TOKEN, the training's name, a new deployment, the learner's address, the default
// partition or namespace, stdout).
inline constexpr const char* kUrlType = "URL";
inline constexpr const char* kTokenType = "TOKEN";
inline constexpr const char* kNameType = "NAME";
inline constexpr const char* kIdType = "ID";
inline constexpr const char* kAddressType = "ADDRESS";
inline constexpr const char* kHostType = "HOST";
inline constexpr const char* kFileType = "FILE";

// What an option's value must be, from its CLI11 type name ("INT:INT in [1 - 64]"): "a number",
// "a folder" (kDirType), "a URL", "a token", "a name", "an id", "an address", "a host", "a file"
// (the types above) or "a value".
inline std::string ValueKind(const CLI::Option& opt) {
  std::string type = opt.get_type_name();
  type = type.substr(0, type.find_first_of(": "));
  if (type == "INT" || type == "UINT" || type == "FLOAT") return "a number";
  if (type == kDirType) return "a folder";
  if (type == kUrlType) return "a URL";
  if (type == kTokenType) return "a token";
  if (type == kNameType) return "a name";
  if (type == kIdType) return "an id";
  if (type == kAddressType) return "an address (HOST:PORT)";
  if (type == kHostType) return "a host";
  if (type == kFileType) return "a file";
  return "a value";
}

// A number as a person writes it: 3e+07 is 30000000, 0.100000 is 0.1.
inline std::string PlainNumber(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return text;
  char out[64];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(out, sizeof out, "%.0f", value);
  } else {
    std::snprintf(out, sizeof out, "%g", value);
  }
  return out;
}

// A validator's message in the words of the rest of cadre: "Value V not in range A to B"
// (CLI::Range, CLI::PositiveNumber) as "must be A..B, got V", "V not in {a,b}" (CLI::IsMember)
// as "must be one of a, b, got 'V'"; `message` unchanged when it is neither.
inline std::string ValidatorMessage(const std::string& message) {
  if (const size_t set = message.rfind(" not in {");
      set != std::string::npos && message.ends_with("}")) {
    std::string members = message.substr(set + 9, message.size() - set - 10);
    for (size_t comma = members.find(','); comma != std::string::npos;
         comma = members.find(',', comma + 2)) {
      members.replace(comma, 1, ", ");
    }
    return "must be one of " + members + ", got " + QuotedText(message.substr(0, set));
  }
  const std::string head = "Value ";
  const size_t in = message.find(" not in range ");
  const size_t to = message.rfind(" to ");
  if (!message.starts_with(head) || in == std::string::npos || to == std::string::npos || to < in) {
    return message;
  }
  const std::string value = message.substr(head.size(), in - head.size());
  const std::string low = message.substr(in + 14, to - in - 14);
  const std::string high = message.substr(to + 4);
  // PositiveNumber's bound is the largest double, and its low end is exclusive.
  if (std::strtod(high.c_str(), nullptr) > 1e300) return "must be above 0, got " + value;
  return "must be " + PlainNumber(low) + ".." + PlainNumber(high) + ", got " + value;
}

// A number in [low, high], for a floating-point option: CLI::Range lets NaN through (it is neither
// below nor above); the message is ValidatorMessage's ("must be 0.1..1000000, got nan").
inline CLI::Validator NumberIn(double low, double high) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end != text.c_str() && *end == '\0' && value >= low && value <= high) return "";
        return "must be " + PlainNumber(std::to_string(low)) + ".." +
               PlainNumber(std::to_string(high)) + ", got " + text;
      },
      "");
}

// By type, not get_name(): an ExtrasError's name is its command's.
template <typename Kind>
bool IsA(const CLI::ParseError& e) {
  return dynamic_cast<const Kind*>(&e) != nullptr;
}

// The line for `e`, without the command's name. `command` is the (sub)command that was being
// parsed; `surplus` the arguments it does not take, in the order given (for ExtrasError).
inline std::string DescribeParseError(const CLI::ParseError& e, const CLI::App& command,
                                      const std::vector<std::string>& surplus) {
  std::string message = e.what();
  if (IsA<CLI::ExtrasError>(e) && !surplus.empty()) {
    const std::string& word = surplus.front();
    if (word.size() > 1 && word[0] == '-') return "unknown option " + word;
    std::string line = "unexpected argument " + QuotedText(word);
    std::string names;
    for (const CLI::Option* opt : command.get_options({})) {
      if (opt->get_positional()) names += (names.empty() ? "" : ", ") + opt->get_name();
    }
    return line + (names.empty() ? " (it takes no arguments)" : " (it takes only " + names + ")");
  }
  if (IsA<CLI::ArgumentMismatch>(e)) {
    // "--nodes: 1 required INT missing": the option was last, with no value after it.
    const size_t colon = message.find(": ");
    if (colon != std::string::npos && message.ends_with(" missing")) {
      const std::string option = message.substr(0, colon);
      const CLI::Option* opt = command.get_option_no_throw(option);
      return option + " was given no value; it takes " +
             (opt != nullptr ? ValueKind(*opt) : std::string("a value"));
    }
  }
  if (IsA<CLI::ConversionError>(e) && message.starts_with("Could not convert: ")) {
    // "Could not convert: --nodes = abc"
    const std::string rest = message.substr(19);
    const size_t eq = rest.find(" = ");
    if (eq != std::string::npos) {
      const std::string option = rest.substr(0, eq);
      const CLI::Option* opt = command.get_option_no_throw(option);
      return option + " takes " + (opt != nullptr ? ValueKind(*opt) : std::string("a value")) +
             ", not " + QuotedText(rest.substr(eq + 3));
    }
  }
  if (IsA<CLI::ValidationError>(e)) {
    const size_t colon = message.find(": ");
    if (colon != std::string::npos) {
      return message.substr(0, colon) + ": " + ValidatorMessage(message.substr(colon + 2));
    }
  }
  if (IsA<CLI::RequiredError>(e)) {
    if (message == "A subcommand is required") {
      std::string line = "a subcommand is required:";
      const char* sep = " ";
      for (const CLI::App* sub : command.get_subcommands({})) {
        if (sub->get_group().empty()) continue;  // hidden
        line += sep + sub->get_name();
        sep = ", ";
      }
      return line;
    }
    // "manifest is required": a positional argument, named as the usage line names it.
    if (!message.starts_with("-") && message.ends_with(" is required")) {
      return "the argument " + message.substr(0, message.size() - 12) + " is required";
    }
  }
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  return message;
}

}  // namespace cadre::cli
