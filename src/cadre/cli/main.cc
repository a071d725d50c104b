// cadre: the command-line entry point. Parses the subcommand and hands off to a layer.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <iostream>
#include <string>

#include "cadre/base/status.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/support.h"

namespace {

using AddCommand = void (*)(CLI::App&, int*);

constexpr AddCommand kCommands[] = {
    cadre::cli::AddVersionCommand,        cadre::cli::AddRunCommand,
    cadre::cli::AddBenchAllreduceCommand, cadre::cli::AddNetemCommand,
    cadre::cli::AddPsServerCommand,       cadre::cli::AddBenchPsCommand,
    cadre::cli::AddTaskCommand,           cadre::cli::AddK8sCommand,
    cadre::cli::AddServerCommand,         cadre::cli::AddClientCommands,
    cadre::cli::AddServeCommand,          cadre::cli::AddBenchServerCommand,
};

// A standard descriptor the caller closed (`cadre run ... >&-`) would be the next one cadre
// opens (a signalfd, a log file, a socket), and console text would be written into it; the
// runner's console, stuck on a descriptor that never takes text, also held back every message
// behind it, the failure summary included. They are /dev/null instead.
void OpenStandardDescriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    int opened = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (opened >= 0 && opened != fd) {
      dup2(opened, fd);
      close(opened);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  OpenStandardDescriptors();
  CLI::App app{"cadre — distributed deep-learning training"};
  app.require_subcommand(1);
  int exit_code = 0;
  for (AddCommand add : kCommands) add(app, &exit_code);
  if (std::string problem = cadre::cli::ArgvProblems(app, argc, argv); !problem.empty()) {
    std::cerr << problem << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // An unknown option first, named with its subcommand: CLI11 lists the leftover words in
    // reverse without naming either, or reports a missing required option instead. Then any
    // other mistake, as one line naming the subcommand and the option or argument.
    std::string problem = cadre::cli::UnknownOptionProblem(app, argc, argv);
    if (problem.empty()) problem = cadre::cli::UsageErrorLine(app, argc, argv, e);
    std::cerr << problem << "\n";
    return 2;
  } catch (const cadre::Error& e) {
    if (e.code() == cadre::Code::kInvalidArgument) {
      std::cerr << cadre::cli::InvalidArgumentLine(app, argc, argv, e.status().message()) << "\n";
      return 2;
    }
    std::cerr << "cadre: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "cadre: " << e.what() << "\n";
    return 1;
  }
  return exit_code;
}
