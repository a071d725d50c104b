#include "cadre/backends/k8s_render.h"

#include <nlohmann/json.hpp>

#include "cadre/backends/task.h"
#include "cadre/launch/learner_env.h"

namespace cadre::backends {
namespace {

using nlohmann::json;
using ordered = nlohmann::ordered_json;

// YAML in block style; strings double-quoted JSON-style (valid YAML), so nothing in a name or a
// command can change the document's structure.
void Emit(const ordered& v, int indent, std::string* out);

void EmitScalar(const ordered& v, std::string* out) { *out += v.dump(); }

bool IsEmptyContainer(const ordered& v) { return (v.is_object() || v.is_array()) && v.empty(); }

void Emit(const ordered& v, int indent, std::string* out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      *out += pad + it.key() + ":";
      const ordered& child = it.value();
      if (IsEmptyContainer(child)) {
        *out += child.is_object() ? " {}\n" : " []\n";
      } else if (child.is_object()) {
        *out += "\n";
        Emit(child, indent + 2, out);
      } else if (child.is_array()) {
        *out += "\n";
        Emit(child, indent, out);
      } else {
        *out += " ";
        EmitScalar(child, out);
        *out += "\n";
      }
    }
    return;
  }
  if (v.is_array()) {
    for (const auto& item : v) {
      if (item.is_object() && !item.empty()) {
        // "- key: value" then the rest of the mapping under it.
        std::string body;
        Emit(item, indent + 2, &body);
        *out += pad + "- " + body.substr(static_cast<size_t>(indent) + 2);
      } else if (IsEmptyContainer(item)) {
        *out += pad + (item.is_object() ? "- {}\n" : "- []\n");
      } else {
        *out += pad + "- ";
        EmitScalar(item, out);
        *out += "\n";
      }
    }
    return;
  }
  *out += pad;
  EmitScalar(v, out);
  *out += "\n";
}

}  // namespace

std::string KubernetesName(const std::string& job_name) {
  std::string name;
  for (char c : job_name) {
    char l = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9');
    if (ok) {
      name += l;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  if (name.size() > 50) name.resize(50);
  while (!name.empty() && name.back() == '-') name.pop_back();
  // A label must start with a letter for a Service name.
  if (!name.empty() && !(name[0] >= 'a' && name[0] <= 'z')) name = "job-" + name;
  return name.empty() ? "cadre-job" : name;
}

std::string KubernetesRunName(const std::string& job_name, const std::string& training_id) {
  std::string base = KubernetesName(job_name);
  std::string id = KubernetesName(training_id);
  if (id.size() > 6) id = id.substr(id.size() - 6);
  while (!id.empty() && id.front() == '-') id.erase(0, 1);
  if (base.size() > 49 - id.size()) base.resize(49 - id.size());
  while (!base.empty() && base.back() == '-') base.pop_back();
  return id.empty() ? base : base + "-" + id;
}

// A namespace is a DNS label (it is in the pods' search domain, and in a comment line of the
// rendered YAML): anything else would be refused by the cluster only after the job was laid
// out, or break the file.
Status CheckKubernetesNamespace(const std::string& name_space) {
  bool label = !name_space.empty() && name_space.size() <= 63 && name_space.front() != '-' &&
               name_space.back() != '-';
  for (char c : name_space) {
    label = label && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  }
  if (label) return Status::Ok();
  return InvalidArgument("'" + name_space +
                         "' is not a Kubernetes namespace name (1-63 lower-case letters, digits "
                         "or '-', starting and ending with a letter or digit)");
}

Status RenderKubernetes(const launch::JobSpec& spec, const K8sRenderOptions& o, std::string* yaml) {
  if (o.image.empty()) {
    return InvalidArgument(
        "image: the job's container image is not given (the manifest's "
        "`image` field or --image); it must hold cadre and the command");
  }
  CADRE_RETURN_IF_ERROR(CheckKubernetesNamespace(o.name_space).WithContext("--namespace"));
  const std::string name = o.name.empty() ? KubernetesName(spec.name) : o.name;
  const std::string plan_dir = "/cadre/plan";
  const std::string secret_dir = "/cadre/secret";

  // The job-wide contract; names resolve through the cluster's DNS (the headless Service).
  TaskPlan plan;
  launch::JobContract& job = plan.job;
  job.training_id = o.training_id;
  job.name_prefix = name;
  job.framework = std::string(spec.framework.name);
  job.mode = std::string(launch::ModeName(spec.framework.mode));
  job.learners = spec.nodes;
  job.slots_per_learner = spec.slots_per_learner;
  job.parameter_servers = spec.parameter_servers;
  job.gpus_per_learner = spec.compute.gpus;
  job.store_address = name + "-1:" + std::to_string(kKubernetesStorePort);
  job.job_dir = o.job_dir;
  job.data_dir = o.job_dir + "/data";
  job.model_dir = "";  // the image's working directory
  job.names_resolve = true;
  job.cores = 0;
  plan.command = spec.command;
  plan.command_argv = spec.command_argv;

  const ordered labels = {{"app.kubernetes.io/managed-by", "cadre"}, {"cadre.io/job", name}};
  ordered secret = {
      {"apiVersion", "v1"},
      {"kind", "Secret"},
      {"metadata", {{"name", name + "-token"}, {"labels", labels}}},
      {"type", "Opaque"},
      {"stringData", {{"token", o.job_token}}},
  };
  ordered config = {
      {"apiVersion", "v1"},
      {"kind", "ConfigMap"},
      {"metadata", {{"name", name + "-plan"}, {"labels", labels}}},
      {"data", {{"task.json", TaskPlanJson(plan)}}},
  };
  ordered service = {
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata", {{"name", name}, {"labels", labels}}},
      {"spec",
       {{"clusterIP", "None"},
        // Learners find each other while starting, before any is ready.
        {"publishNotReadyAddresses", true},
        {"selector", labels},
        {"ports", ordered::array({{{"name", "learner"}, {"port", launch::kLearnerPort}},
                                  {{"name", "store"}, {"port", kKubernetesStorePort}}})}}},
  };
  ordered container = {
      {"name", "learner"},
      {"image", o.image},
      {"command",
       ordered::array({"cadre", "task", "--engine", "kubernetes", "--job-dir", o.job_dir, "--plan",
                       plan_dir + "/task.json", "--token-file", secret_dir + "/token"})},
      {"env", ordered::array({{{"name", "CADRE_POD_NAME"},
                               {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}}})},
      {"ports", ordered::array({{{"name", "learner"}, {"containerPort", launch::kLearnerPort}},
                                {{"name", "store"}, {"containerPort", kKubernetesStorePort}}})},
      {"volumeMounts", ordered::array({{{"name", "plan"}, {"mountPath", plan_dir}},
                                       {{"name", "token"}, {"mountPath", secret_dir}},
                                       {{"name", "job"}, {"mountPath", o.job_dir}}})},
  };
  if (spec.compute.gpus > 0) {
    container["resources"] = {{"limits", {{"nvidia.com/gpu", spec.compute.gpus}}}};
  }
  ordered pod_spec = {
      {"dnsConfig",
       {{"searches", ordered::array({name + "." + o.name_space + ".svc.cluster.local"})}}},
      {"containers", ordered::array({container})},
      {"volumes",
       ordered::array({{{"name", "plan"}, {"configMap", {{"name", name + "-plan"}}}},
                       {{"name", "token"},
                        {"secret", {{"secretName", name + "-token"}, {"defaultMode", 256}}}},
                       {{"name", "job"}, {"emptyDir", ordered::object()}}})},
  };
  ordered statefulset = {
      {"apiVersion", "apps/v1"},
      {"kind", "StatefulSet"},
      {"metadata", {{"name", name}, {"labels", labels}}},
      {"spec",
       {{"serviceName", name},
        {"replicas", spec.nodes},
        // Pods <name>-1..N: the pod's ordinal is its LEARNER_ID (Kubernetes 1.27 or later).
        {"ordinals", {{"start", 1}}},
        {"podManagementPolicy", "Parallel"},
        {"selector", {{"matchLabels", labels}}},
        {"template", {{"metadata", {{"labels", labels}}}, {"spec", pod_spec}}}}},
  };
  std::string out = "# cadre job " + name + " (" + std::to_string(spec.nodes) + " learners x " +
                    std::to_string(spec.slots_per_learner) + " slots): kubectl apply -n " +
                    o.name_space + " -f <this file>\n";
  for (const ordered* doc : {&secret, &config, &service, &statefulset}) {
    out += "---\n";
    Emit(*doc, 0, &out);
  }
  *yaml = std::move(out);
  return Status::Ok();
}

}  // namespace cadre::backends
