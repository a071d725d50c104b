// `cadre k8s render job.yaml --image IMAGE [-o FILE]`: the Kubernetes objects that run the job
// (backends/k8s_render.h), to apply with `kubectl apply -f`. See docs/backends.md.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "cadre/backends/k8s_render.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/usage.h"
#include "cadre/launch/job_spec.h"
#include "cadre/launch/job_status.h"
#include "cadre/launch/manifest.h"

namespace cadre::cli {
namespace {

struct RenderFlags {
  std::string manifest;
  std::string image, name_space = "default", output;
  std::optional<std::string> compute, name;
  std::optional<int64_t> nodes;
};

int Render(const RenderFlags& flags) {
  launch::JobRequest request;
  launch::Problems problems;
  bool readable = launch::LoadManifestFile(flags.manifest, &request, &problems);
  if (flags.nodes) request.nodes.Set(*flags.nodes, "--nodes");
  if (flags.compute) {
    request.compute.Set(*flags.compute, "--compute");
    request.gpus = {};
  }
  if (flags.name) request.name.Set(*flags.name, "--name");
  if (!flags.image.empty()) request.image.Set(flags.image, "--image");
  if (!request.image.has_value() || request.image->empty()) {
    problems.Add("--image",
                 "the job's container image is needed; it must hold cadre (on PATH, "
                 "with its Python package) and the job's command");
  }
  // The framework version is the image's business, not this machine's torch.
  launch::Installed installed;
  if (request.framework_version.has_value()) installed.torch_version = *request.framework_version;
  std::optional<launch::JobSpec> spec;
  if (readable) spec = launch::BuildJobSpec(request, installed, &problems);
  if (!problems.empty()) {
    std::cerr << "cadre k8s render: the job has " << problems.size()
              << (problems.size() == 1 ? " problem" : " problems") << ":\n";
    for (const auto& p : problems.list()) std::cerr << "  " << p.ToString() << "\n";
    return 2;
  }
  backends::K8sRenderOptions options;
  options.image = spec->image;
  options.name_space = flags.name_space;
  options.job_token = launch::NewJobToken();
  options.training_id = launch::NewTrainingId();
  std::string yaml;
  if (Status st = backends::RenderKubernetes(*spec, options, &yaml); !st.ok()) {
    std::cerr << "cadre k8s render: " << st.message() << "\n";
    return 2;
  }
  if (flags.output.empty()) {
    std::cout << yaml;
    return 0;
  }
  if (std::error_code ec; std::filesystem::is_directory(flags.output, ec)) {
    std::cerr << "cadre k8s render: -o " << flags.output
              << " is a folder; give the file to write\n";
    return 2;
  }
  // The file holds the job's token: readable by its owner only.
  if (Status st = launch::WriteFileAtomically(flags.output, yaml); !st.ok()) {
    std::cerr << "cadre k8s render: " << st.message() << "\n";
    return 1;
  }
  std::filesystem::permissions(
      flags.output, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::cerr << "cadre k8s render: wrote " << flags.output << "; apply with kubectl apply -n "
            << flags.name_space << " -f " << flags.output << "\n";
  return 0;
}

}  // namespace

void AddK8sCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<RenderFlags>();
  auto* k8s = app.add_subcommand("k8s", "Kubernetes: `cadre k8s render job.yaml --image IMAGE`");
  k8s->require_subcommand(1);
  auto* render = k8s->add_subcommand(
      "render",
      "Write the job's Kubernetes objects (Secret, ConfigMap, headless Service, "
      "StatefulSet) as YAML");
  render->add_option("manifest", flags->manifest, "The job's manifest (.yaml)")->required();
  render->add_option("--image", flags->image, "The container image: cadre and the command");
  render->add_option("--namespace", flags->name_space, "The namespace (default: default)");
  render->add_option("-o,--output", flags->output, "Write to this file instead of stdout")
      ->type_name(kFileType);
  render->add_option("--compute", flags->compute, "Compute configuration (overrides the manifest)");
  render->add_option("-n,--nodes", flags->nodes, "Learners (overrides the manifest)");
  render->add_option("--name", flags->name, "The job's name (overrides the manifest)");
  render->callback([flags, exit_code] { *exit_code = Render(*flags); });
}

}  // namespace cadre::cli
