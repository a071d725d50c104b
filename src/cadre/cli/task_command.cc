// `cadre task --engine slurm|mpi --job-dir DIR`: one slot of a job that a cluster engine started
// (backends/task.h). Not for people: the Slurm and Open MPI backends put it in their commands.
#include "cadre/backends/task.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/support.h"

namespace cadre::cli {

void AddTaskCommand(CLI::App& app, int* exit_code) {
  struct Flags {
    std::string engine;
    std::string job_dir;
    std::string plan, token_file;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "task", "One slot of a job started by srun or mpirun (used by --backend slurm|mpi)");
  cmd->group("");  // not listed in --help
  cmd->add_option("--engine", flags->engine, "slurm, mpi or kubernetes")->required();
  cmd->add_option("--job-dir", flags->job_dir, "The job directory the runner prepared")
      ->type_name(kDirType)
      ->required();
  cmd->add_option("--plan", flags->plan, "The job's plan (default: <job dir>/task.json)");
  cmd->add_option("--token-file", flags->token_file, "The job's token (default: <job dir>/token)");
  cmd->callback([flags, exit_code] {
    *exit_code = backends::RunTask(flags->engine, flags->job_dir, flags->plan, flags->token_file);
  });
}

}  // namespace cadre::cli
