// Subcommands of the `cadre` program. Each Add*Command registers one subcommand on the app;
// its callback stores the process exit code in *exit_code (0 success, 1 failure, 2 bad usage).
#pragma once

#include <CLI/CLI.hpp>

namespace cadre::cli {

void AddVersionCommand(CLI::App& app, int* exit_code);
void AddRunCommand(CLI::App& app, int* exit_code);
void AddBenchAllreduceCommand(CLI::App& app, int* exit_code);
void AddNetemCommand(CLI::App& app, int* exit_code);
void AddPsServerCommand(CLI::App& app, int* exit_code);
void AddBenchPsCommand(CLI::App& app, int* exit_code);
void AddBenchServerCommand(CLI::App& app, int* exit_code);
void AddTaskCommand(CLI::App& app, int* exit_code);
void AddK8sCommand(CLI::App& app, int* exit_code);
void AddServerCommand(CLI::App& app, int* exit_code);
void AddClientCommands(CLI::App& app, int* exit_code);
void AddServeCommand(CLI::App& app, int* exit_code);

}  // namespace cadre::cli
