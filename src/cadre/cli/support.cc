#include "cadre/cli/support.h"

#include <pthread.h>

namespace cadre::cli {

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
