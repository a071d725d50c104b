// Reading a job manifest (YAML) into a JobRequest: what the user asked for, before validation.
//
// Two shapes are accepted. The WML shape:
//   name, description, framework{name, version}, execution{command,
//   compute_configuration{name, nodes}}, parameter_servers,
//   training_data_reference{type, location{path}}, training_results_reference{...}
// and the FfDL shape:
//   name, description, version, learners, gpus, cpus, memory, framework{name, version, command},
//   data_stores[{id, type, training_data{container}, training_results{container}}],
//   evaluation_metrics
// Either shape may also carry the runner's fault-tolerance fields at the top level:
//   max_restarts (restarts after a learner fails), min_nodes (go on with fewer learners),
//   rejoin_after (seconds until a lost learner is taken back).
// Mixing the two in one file is a problem. Unknown keys and wrong types are reported (with a
// "did you mean") into Problems; reading carries on, so every problem is found in one pass.
// Flags (`cadre run -n 2 ...`) fill the same JobRequest and override the manifest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cadre/launch/problems.h"

namespace cadre::launch {

// Each field remembers where it came from ("execution.compute_configuration.nodes", "learners",
// "--nodes") so that validation messages name what the user wrote.
template <typename T>
struct Field {
  std::optional<T> value;
  std::string origin;
  // Given but unreadable (a wrong type, out of range): already reported, so checks that would
  // otherwise use the default in its place report nothing more about it.
  bool unreadable = false;

  bool has_value() const { return value.has_value(); }
  const T& operator*() const { return *value; }
  const T* operator->() const { return &*value; }
  void Set(T v, std::string from) {
    value = std::move(v);
    origin = std::move(from);
    unreadable = false;
  }
  void SetUnreadable(std::string from) {
    value.reset();
    origin = std::move(from);
    unreadable = true;
  }
};

struct JobRequest {
  Field<std::string> name;
  Field<std::string> framework;
  Field<std::string> framework_version;
  Field<std::string> command;
  // The command as separate words (`cadre run -- prog args`): run without a shell's parsing, so
  // the slot's process is the program itself (its exit code or signal is the slot's).
  std::vector<std::string> command_argv;
  Field<std::string> compute;  // a compute configuration name (WML)
  Field<int64_t> gpus;         // GPUs per learner (FfDL)
  Field<int64_t> nodes;        // learners
  Field<int64_t> parameter_servers;
  Field<int64_t> max_restarts;      // restarts of the job after a learner fails
  Field<int64_t> min_nodes;         // elastic: the fewest learners the job goes on with
  Field<int64_t> rejoin_after;      // elastic: seconds until a lost learner is taken back
  Field<std::string> data_path;     // DATA_DIR
  Field<std::string> results_path;  // where job directories go
  Field<std::string> backend;       // execution.backend: local, slurm, mpi (docs/backends.md)
  Field<std::string> image;         // the container image (Kubernetes)
  // Relative paths (data, results) resolve against this; the command runs here too. The
  // manifest's folder, or the current directory for a flags-only job.
  std::filesystem::path base_dir;
  // The manifest exactly as read (empty for a flags-only job); copied into the job directory.
  std::string manifest_text;
};

// The largest manifest read: a few hundred bytes is usual.
inline constexpr size_t kMaxManifestBytes = 1 << 20;

// Parses `text` (a manifest's contents) into `request`, reporting every problem. `source` names
// the file in syntax errors. Returns false when the file could not be read as a mapping at all
// (then checking the request further would only add noise), or when `text` is over
// kMaxManifestBytes (a problem at `source`), as LoadManifestFile would refuse its file.
bool ReadManifest(const std::string& text, const std::string& source, JobRequest* request,
                  Problems* problems);

// Reads the file, sets base_dir to its folder, then ReadManifest. A missing or unreadable file,
// one that is not a regular file (a FIFO, a device) or one over 1 MiB is a problem at path
// "manifest" (and false), found before anything is read.
bool LoadManifestFile(const std::filesystem::path& file, JobRequest* request, Problems* problems);

}  // namespace cadre::launch
