#include <iostream>

#include "cadre/cli/commands.h"

namespace cadre::cli {

void AddVersionCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("version", "Print cadre's version");
  cmd->callback([exit_code] {
    std::cout << "cadre " << CADRE_VERSION << "\n";
    *exit_code = 0;
  });
}

}  // namespace cadre::cli
