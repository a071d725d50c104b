// `cadre serve MODEL_DIR --port P [--name NAME] ...`: the scorer alone. It is a program of its
// own, cadre-serve (serving/serve_main.cc), beside this one, so that `cadre` does not link
// libtorch; this command execs it with the same arguments.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cadre/cli/commands.h"

namespace cadre::cli {
namespace {

namespace fs = std::filesystem;

// cadre-serve beside this program (the build tree, an install's bin/), else on PATH.
std::string ServeProgram() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path beside = self.parent_path() / "cadre-serve";
    if (access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "cadre-serve";
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "serve",
      "Serve a model saved by cadre.save_model over HTTP (KServe v2 and WML routes); "
      "`cadre serve --help` lists the options");
  cmd->prefix_command();  // everything after `serve` goes to cadre-serve unparsed
  cmd->set_help_flag();   // including --help
  cmd->callback([cmd, exit_code] {
    std::vector<std::string> args = cmd->remaining();
    std::string program = ServeProgram();
    std::vector<char*> argv;
    // cadre-serve's usage then names the command the user typed.
    std::string name = "cadre serve";
    argv.push_back(name.data());
    // With no arguments cadre-serve says that MODEL_DIR is missing, with its usage, and exits 2.
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::cout.flush();
    if (program.find('/') != std::string::npos) {
      execv(program.c_str(), argv.data());
    } else {
      execvp(program.c_str(), argv.data());
    }
    std::cerr << "cadre: cannot run " << program << ": " << std::strerror(errno)
              << " (it is built with the serving layer: CADRE_WITH_SERVING=ON and libtorch)\n";
    *exit_code = 1;
  });
}

}  // namespace cadre::cli
