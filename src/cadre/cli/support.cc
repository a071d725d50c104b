#include "cadre/cli/support.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "cadre/base/printable.h"
#include "cadre/launch/problems.h"

namespace cadre::cli {

namespace {

bool LooksLikeNumber(const std::string& word) {
  if (word.size() < 2 || word[0] != '-') return false;
  char* end = nullptr;
  std::strtod(word.c_str(), &end);
  return end != nullptr && *end == '\0';
}

// "--name" of "--name=value", "-n" of "-n3"; "" when `word` is not an option.
std::string OptionName(const std::string& word) {
  if (word.size() < 2 || word[0] != '-' || LooksLikeNumber(word)) return "";
  if (word[1] != '-') return word.substr(0, 2);
  return word.substr(0, word.find('='));
}

std::string CommandPath(const CLI::App& app) {
  std::string path;
  for (const CLI::App* a = &app; a != nullptr; a = a->get_parent()) {
    std::string name = a->get_parent() == nullptr ? "cadre" : a->get_name();
    if (name.empty()) continue;
    path = path.empty() ? name : name + " " + path;
  }
  return path;
}

const CLI::App* Subcommand(const CLI::App& app, const std::string& word) {
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (!sub->get_name().empty() && sub->check_name(word)) return sub;
  }
  return nullptr;
}

// The long option of `app` closest to `name`: the shortest one it begins (--results for
// --results-dir), else a likely typo of one; "" when none is that close.
std::string ClosestOption(const CLI::App& app, const std::string& name) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options({})) {
    for (const std::string& lname : opt->get_lnames()) names.push_back("--" + lname);
  }
  std::string begun;
  for (const std::string& candidate : names) {
    if (name.size() > 3 && candidate.starts_with(name) &&
        (begun.empty() || candidate.size() < begun.size())) {
      begun = candidate;
    }
  }
  if (!begun.empty()) return begun;
  return launch::DidYouMean(name, std::vector<std::string_view>(names.begin(), names.end()));
}

// What an option takes when an empty value cannot be meant: "a number" (CLI11's numeric types),
// or what its type in usage.h (kDirType, kUrlType, ...) says; "" for the others.
std::string NonEmptyKind(const CLI::Option& opt) {
  std::string kind = ValueKind(opt);
  return kind == "a value" ? "" : kind;
}

// Where argv ends up: the (sub)command it reached and the words that command got as
// positional arguments, in order.
struct ArgvEnd {
  const CLI::App* command = nullptr;
  std::vector<std::string> positionals;
};

// The walk the checks share: calls `visit(command, option, name, value)` for each option
// word (option null when the command has no such option; value null when the option's value
// is not in argv), and stops at the first non-empty answer; `end` (optional) is where it stopped.
template <typename Visit>
std::string WalkArgv(const CLI::App& app, int argc, const char* const* argv, Visit visit,
                     ArgvEnd* end_of_argv = nullptr) {
  ArgvEnd here;
  here.command = &app;
  const CLI::App*& command = here.command;
  bool positional_seen = false;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (command->get_prefix_command()) break;
    if (word == "--") {
      here.positionals.insert(here.positionals.end(), argv + i + 1, argv + argc);
      break;
    }
    std::string name = OptionName(word);
    if (name.empty()) {
      const CLI::App* sub = positional_seen ? nullptr : Subcommand(*command, word);
      if (sub != nullptr) {
        command = sub;
      } else {
        positional_seen = true;
        here.positionals.push_back(word);
      }
      continue;
    }
    const CLI::Option* opt = command->get_option_no_throw(name);
    // Short flags run together (-qv): each letter is one, until one that takes a value (-qn2).
    size_t end = name.size();
    while (opt != nullptr && opt->get_items_expected_max() == 0 && word[1] != '-' &&
           end < word.size() && word[end] != '=') {
      name = std::string("-") + word[end++];
      opt = command->get_option_no_throw(name);
    }
    // "-q=3": the value of a flag, not a flag named "=" ("unknown option -="); "--quiet=3" (or
    // "--quiet=false"), which CLI11 would take as the flag given.
    if (opt != nullptr && opt->get_items_expected_max() == 0 && end < word.size()) {
      return CommandPath(*command) + ": " + name + " takes no value, got " +
             QuotedText(word.substr(end + 1));
    }
    const char* value = nullptr;
    std::string attached;
    if (opt != nullptr && opt->get_items_expected_max() > 0) {
      if (end < word.size()) {
        attached = word.substr(end + (word[end] == '=' ? 1 : 0));
        value = attached.c_str();
      } else if (i + 1 < argc) {
        value = argv[++i];
      }
    }
    std::string problem = visit(*command, opt, name, value, positional_seen);
    if (!problem.empty()) return problem;
  }
  if (end_of_argv != nullptr) *end_of_argv = std::move(here);
  return "";
}

// Where argv ends up, with no check on the way.
ArgvEnd WalkToEnd(const CLI::App& app, int argc, const char* const* argv) {
  ArgvEnd end;
  WalkArgv(
      app, argc, argv,
      [](const CLI::App&, const CLI::Option*, const std::string&, const char*, bool) {
        return std::string();
      },
      &end);
  return end;
}

// The subcommands a user may type (hidden ones, as `task`, have no group).
std::vector<std::string> VisibleSubcommands(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::App* sub : command.get_subcommands({})) {
    if (!sub->get_group().empty()) names.push_back(sub->get_name());
  }
  return names;
}

}  // namespace

std::string ArgvProblems(const CLI::App& app, int argc, const char* const* argv) {
  return WalkArgv(app, argc, argv,
                  [](const CLI::App& command, const CLI::Option* opt, const std::string& name,
                     const char* value, bool) -> std::string {
                    if (opt == nullptr || value == nullptr || *value != '\0') return "";
                    const std::string kind = NonEmptyKind(*opt);
                    if (kind.empty()) return "";
                    return CommandPath(command) + ": " + name +
                           " was given an empty value; it takes " + kind;
                  });
}

std::string UnknownOptionProblem(const CLI::App& app, int argc, const char* const* argv) {
  return WalkArgv(app, argc, argv,
                  [](const CLI::App& command, const CLI::Option* opt, const std::string& name,
                     const char*, bool positional_seen) -> std::string {
                    if (opt != nullptr) return "";
                    std::string line = CommandPath(command) + ": unknown option " + name;
                    if (std::string closest = ClosestOption(command, name); !closest.empty()) {
                      line += " (did you mean " + closest + "?)";
                    }
                    if (positional_seen && command.get_name() == "run") {
                      line += "; the learners' command and its own options go after --";
                    }
                    return line;
                  });
}

std::string UsageErrorLine(const CLI::App& app, int argc, const char* const* argv,
                           const CLI::ParseError& error) {
  const ArgvEnd end = WalkToEnd(app, argc, argv);
  const CLI::App& command = *end.command;
  size_t takes = 0;
  for (const CLI::Option* opt : command.get_options({})) {
    if (opt->get_positional()) takes += static_cast<size_t>(opt->get_items_expected_max());
  }
  const std::string prefix = CommandPath(command) + ": ";
  const std::vector<std::string> subcommands = VisibleSubcommands(command);
  // A word where a subcommand goes: CLI11 says only that a subcommand is required.
  if (takes == 0 && !subcommands.empty() && !end.positionals.empty()) {
    const std::string& word = end.positionals.front();
    std::string line = prefix + "unknown subcommand " + QuotedText(word);
    std::string closest = launch::DidYouMean(
        word, std::vector<std::string_view>(subcommands.begin(), subcommands.end()));
    if (!closest.empty()) line += " (did you mean " + closest + "?)";
    line += "; one of:";
    const char* sep = " ";
    for (const std::string& name : subcommands) {
      line += sep + name;
      sep = ", ";
    }
    return line;
  }
  std::vector<std::string> surplus;
  if (end.positionals.size() > takes) {
    surplus.assign(end.positionals.begin() + static_cast<std::ptrdiff_t>(takes),
                   end.positionals.end());
  }
  return prefix + DescribeParseError(error, command, surplus);
}

std::string InvalidArgumentLine(const CLI::App& app, int argc, const char* const* argv,
                                const std::string& message) {
  const ArgvEnd end = WalkToEnd(app, argc, argv);
  const std::string path = CommandPath(*end.command);
  // The message may name its command itself ("bench allreduce: --sizes ..."): once is enough.
  std::string text = message;
  std::string words =
      path.substr(path.find(' ') == std::string::npos ? path.size() : path.find(' ') + 1);
  while (!words.empty()) {
    if (text.starts_with(words + ": ")) {
      text = text.substr(words.size() + 2);
      break;
    }
    const size_t space = words.rfind(' ');
    words = space == std::string::npos ? "" : words.substr(0, space);
  }
  return path + ": " + text;
}

CLI::App* BenchGroup(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App* a) { return a->get_name() == "bench"; }))
    return sub;
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks, printed as tables");
  bench->require_subcommand(1);
  return bench;
}

SignalsDeferred::SignalsDeferred() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, &previous_);
}

SignalsDeferred::~SignalsDeferred() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

}  // namespace cadre::cli
