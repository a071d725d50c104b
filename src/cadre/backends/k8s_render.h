// `cadre k8s render`: the Kubernetes objects that run a job, as YAML documents.
//
//   Secret      <job>-token   the job token (CADRE_JOB_TOKEN), never in the other objects
//   ConfigMap   <job>-plan    task.json: the job-wide learner contract and the command
//   Service     <job>         headless; learners' names <job>-N resolve to their pods
//   StatefulSet <job>         one pod per learner, ordinals.start 1 (Kubernetes 1.27 or later),
//                             so pod <job>-N is LEARNER_ID N; GPUs from the compute configuration
//
// Each pod runs `cadre task --engine kubernetes`, which makes every slot's contract from the
// pod's index (label apps.kubernetes.io/pod-index) exactly as Slurm's and Open MPI's tasks do,
// runs the learner's slots and, on learner 1, the job's rendezvous store. LEARNER_NAME_PREFIX is
// the job's name. The image must hold cadre (the program on PATH, the Python package) and the
// job's command. Pure function: the same job renders the same text.
#pragma once

#include <string>

#include "cadre/base/status.h"
#include "cadre/launch/job_spec.h"

namespace cadre::backends {

// The port of the job's rendezvous store on learner 1's pod.
inline constexpr int kKubernetesStorePort = 29400;

struct K8sRenderOptions {
  std::string image;                   // required
  std::string name;                    // the objects' name (LEARNER_NAME_PREFIX); empty: the job's
  std::string name_space = "default";  // where the objects go (DNS search domain)
  std::string job_token;               // the job's token; random when rendering for real
  std::string training_id;
  std::string job_dir = "/cadre/job";  // RESULT_DIR in the pods (an emptyDir)
};

// A Kubernetes name (RFC 1123 label) from the job's name: lower case, [a-z0-9-], at most 50
// characters (room for "-<ordinal>" and "-token"); "cadre-job" when nothing is left.
std::string KubernetesName(const std::string& job_name);

// The name `cadre run` gives a job's objects: the job's KubernetesName, shortened, then "-" and
// the last characters of the training id, so that two runs of one manifest do not collide.
std::string KubernetesRunName(const std::string& job_name, const std::string& training_id);

// Ok when `name_space` is a Kubernetes namespace name (an RFC 1123 label), else InvalidArgument
// saying what one is.
Status CheckKubernetesNamespace(const std::string& name_space);

// The objects as one multi-document YAML text. InvalidArgument when no image is given or the
// namespace is not a namespace name.
Status RenderKubernetes(const launch::JobSpec& spec, const K8sRenderOptions& options,
                        std::string* yaml);

}  // namespace cadre::backends
