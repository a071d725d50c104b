// The Kubernetes backend: `cadre run --backend kubernetes`. The job's objects (k8s_render.h) are
// created with `kubectl create` under a name of this run's own (KubernetesRunName), then followed:
//   - logs: one `kubectl logs -f` per learner's container, into <job dir>/learner-K/pod.log,
//     shown as "[learner-K] ..." (a pod's output holds all of its slots');
//   - states: `kubectl get pods -l cadre.io/job=<name> -o json`, read by ParsePods. A learner has
//     failed when its container ended with a non-zero code (now or before a restart: the
//     StatefulSet restarts exited containers), cannot start (image, config), or its pod was
//     replaced; it has succeeded when its pod said KubernetesFinishedLine (task.h), after which
//     it holds, idle, since an exited container would be restarted;
//   - the end: every worker learner finished (parameter servers need not), a learner failed, a
//     stop signal, or pods pending past --queue-timeout. In every case the objects are deleted
//     with `kubectl delete` and cadre run waits until the pods are gone.
// kubectl's own message is in every error about it. The job directory stays on this machine
// (status.json, the objects as created, the pods' logs); the pods' volumes are their own.
#pragma once

#include <string>
#include <vector>

#include "cadre/backends/backend.h"

namespace cadre::backends {

// One learner's pod as `kubectl get pods -o json` shows it.
struct PodView {
  int learner_id = 0;  // from the pod's name, <name>-K
  std::string name, uid;
  std::string phase;      // Pending, Running, Succeeded, Failed, Unknown
  bool deleting = false;  // metadata.deletionTimestamp: terminating
  std::string pending;    // why it has not started ("Unschedulable: 0/3 nodes ..."); "" if it has
  std::string container_id;  // its newest container, "" before one was created
  bool running = false;      // that container runs
  bool log_previous =
      false;             // that container ended and a restart waits (`kubectl logs --previous`)
  std::string failure;   // how the learner failed ("exited with code 3 (Error)"); "" if not
  double failed_at = 0;  // when (seconds since the epoch), for naming the first failure
};

// The pods of job `name` with learners 1..`learners`, in learner order. Pods of other names
// are left out; the first is named in *stray (a cluster that ignored ordinals.start names its
// pods <name>-0..N-1). InvalidArgument when `json` is not a pod list.
Status ParsePods(const std::string& json, const std::string& name, int learners,
                 std::vector<PodView>* pods, std::string* stray = nullptr);

std::unique_ptr<Backend> MakeKubernetesBackend(const BackendOptions& options);

}  // namespace cadre::backends
