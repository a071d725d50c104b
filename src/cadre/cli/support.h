// Pieces shared by several subcommands of the `cadre` program.
#pragma once

#include <signal.h>

#include <CLI/CLI.hpp>
#include <string>

#include "cadre/cli/usage.h"

namespace cadre::cli {

// The `bench` group, shared by several subcommands (allreduce, ps, ...): whoever registers
// first creates it.
CLI::App* BenchGroup(CLI::App& app);

// Reads argv as CLI11 will, subcommand by subcommand, up to `--` (or a subcommand that takes
// the rest unparsed). ArgvProblems: an empty value given to a numeric option (`-n ''`), which
// CLI11 reads as absent, leaving the default, or to an option typed in usage.h (a folder, URL,
// token, name, id, address); a
// value given to a flag (`--quiet=3`, `-q=3`), which CLI11 takes as the flag given.
// UnknownOptionProblem: the first option its subcommand does not have, for CLI11's ExtrasError,
// which lists the leftovers without saying which subcommand they were meant for. Each returns one
// line naming the command and the flag
// ("cadre run: unknown option --results (did you mean --results-dir?)"), or "" for none.
std::string ArgvProblems(const CLI::App& app, int argc, const char* const* argv);
std::string UnknownOptionProblem(const CLI::App& app, int argc, const char* const* argv);

// Any other parse error of CLI11 as one line naming the (sub)command argv reached and the
// option or argument at fault (usage.h), or the word given where a subcommand goes
// ("cadre: unknown subcommand 'rn' (did you mean run?); one of: version, run, ...").
std::string UsageErrorLine(const CLI::App& app, int argc, const char* const* argv,
                           const CLI::ParseError& error);

// A value a command refused after parsing (cadre::Error kInvalidArgument, exit 2) as one line
// naming the command argv reached: "cadre bench allreduce: --sizes item '4Q' is not ...", not
// "cadre: InvalidArgument: bench allreduce: ...".
std::string InvalidArgumentLine(const CLI::App& app, int argc, const char* const* argv,
                                const std::string& message);

// Blocks SIGINT/SIGTERM/SIGHUP for its lifetime, so that a Ctrl-C while an emulated network is
// built or removed does not leave it half made; RunOnEveryHost forwards them to the processes
// it started meanwhile.
class SignalsDeferred {
 public:
  SignalsDeferred();
  ~SignalsDeferred();
  SignalsDeferred(const SignalsDeferred&) = delete;
  SignalsDeferred& operator=(const SignalsDeferred&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace cadre::cli
