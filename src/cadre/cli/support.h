// Pieces shared by several subcommands of the `cadre` program.
#pragma once

#include <signal.h>

#include <CLI/CLI.hpp>

namespace cadre::cli {

// The `bench` group, shared by several subcommands (allreduce, ps, ...): whoever registers
// first creates it.
CLI::App* BenchGroup(CLI::App& app);

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
