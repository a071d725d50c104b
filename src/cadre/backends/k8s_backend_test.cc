// `kubectl get pods -o json` read into learners' states (ParsePods), with pods shaped as a
// cluster reports them; and the names `cadre run --backend kubernetes` gives a job's objects.
#include "cadre/backends/k8s_backend.h"

#include <gtest/gtest.h>

#include "cadre/backends/k8s_render.h"

namespace cadre::backends {
namespace {

std::string Pod(const std::string& name, const std::string& phase, const std::string& status) {
  return R"({"metadata": {"name": ")" + name + R"(", "uid": "u-)" + name +
         R"(", "labels": {"cadre.io/job": "job-abc123"}}, "status": {"phase": ")" + phase + "\"" +
         (status.empty() ? "" : ", " + status) + "}}";
}

std::string List(const std::vector<std::string>& pods) {
  std::string items;
  for (const auto& p : pods) items += (items.empty() ? "" : ",") + p;
  return R"({"apiVersion": "v1", "kind": "List", "items": [)" + items + "]}";
}

std::string Container(const std::string& state, const std::string& last = "{}", int restarts = 0) {
  return R"("containerStatuses": [{"name": "learner", "containerID": "containerd://c1",
            "restartCount": )" +
         std::to_string(restarts) + R"(, "state": )" + state + R"(, "lastState": )" + last + "}]";
}

std::vector<PodView> Parse(const std::string& json, int learners = 2,
                           std::string* stray = nullptr) {
  std::vector<PodView> pods;
  Status st = ParsePods(json, "job-abc123", learners, &pods, stray);
  EXPECT_TRUE(st.ok()) << st.message();
  return pods;
}

TEST(ParsePods, RunningPodsInLearnerOrderOthersNamed) {
  std::string stray;
  auto pods =
      Parse(List({
                Pod("job-abc123-2", "Running", Container(R"({"running": {"startedAt": "x"}})")),
                Pod("job-abc123-1", "Running", Container(R"({"running": {}})")),
                Pod("job-abc123-3", "Running", ""),  // beyond the job's learners
                Pod("job-abc123x-1", "Running", ""),
                Pod("job-abc123-", "Running", ""),
            }),
            2, &stray);
  // Say, pod <name>-0 of a cluster that ignored ordinals.start.
  EXPECT_EQ(stray, "job-abc123-3");
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0].learner_id, 1);
  EXPECT_EQ(pods[1].name, "job-abc123-2");
  EXPECT_TRUE(pods[1].running);
  EXPECT_EQ(pods[1].container_id, "containerd://c1");
  EXPECT_EQ(pods[1].pending, "");
  EXPECT_EQ(pods[1].failure, "");
}

TEST(ParsePods, UnschedulableAndCreatingPodsArePending) {
  auto pods = Parse(List({
      Pod("job-abc123-1", "Pending",
          R"("conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
              "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}])"),
      Pod("job-abc123-2", "Pending", Container(R"({"waiting": {"reason": "ContainerCreating"}})")),
  }));
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0].pending,
            "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.");
  EXPECT_EQ(pods[1].pending, "container ContainerCreating");
  EXPECT_FALSE(pods[1].running);
}

TEST(ParsePods, AFailedContainerNowOrBeforeItsRestartIsAFailure) {
  auto pods = Parse(List({
      Pod("job-abc123-1", "Running", Container(R"({"terminated": {"exitCode": 3, "reason": "Error",
                        "finishedAt": "2026-12-02T13:45:01Z"}})")),
      Pod("job-abc123-2", "Running",
          Container(R"({"waiting": {"reason": "CrashLoopBackOff"}})",
                    R"({"terminated": {"exitCode": 137, "reason": "OOMKilled",
                        "finishedAt": "2026-12-02T13:45:00Z"}})",
                    1)),
  }));
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0].failure, "exited with code 3");
  EXPECT_EQ(pods[0].failed_at, 1796219101.0);
  EXPECT_FALSE(pods[0].log_previous);
  EXPECT_EQ(pods[1].failure,
            "exited with code 137 (OOMKilled); Kubernetes restarted it (restart 1)");
  EXPECT_LT(pods[1].failed_at, pods[0].failed_at);
  EXPECT_TRUE(pods[1].log_previous);  // its log is the previous container's
  EXPECT_EQ(pods[1].pending, "");
  // Restarted and running again: still the failure it was.
  pods =
      Parse(List({Pod("job-abc123-1", "Running",
                      Container(R"({"running": {}})", R"({"terminated": {"exitCode": 1}})", 1))}));
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(pods[0].failure, "exited with code 1; Kubernetes restarted it (restart 1)");
}

TEST(ParsePods, AContainerThatCannotStartIsAFailureAndAStoppedOneIsNot) {
  auto pods = Parse(List({
      Pod("job-abc123-1", "Pending", Container(R"({"waiting": {"reason": "ImagePullBackOff",
                        "message": "Back-off pulling image \"nosuch:1\""}})")),
      Pod("job-abc123-2", "Running", Container(R"({"terminated": {"exitCode": 0}})")),
  }));
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0].failure,
            "cannot start its container: ImagePullBackOff: Back-off pulling image \"nosuch:1\"");
  EXPECT_EQ(pods[1].failure, "");
}

TEST(ParsePods, AnEvictedPodIsAFailureAndTerminatingIsSeen) {
  auto pods = Parse(
      List({Pod("job-abc123-1", "Failed", R"("reason": "Evicted", "message": "low on memory")")}));
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(pods[0].failure, "its pod failed: Evicted: low on memory");
  pods = Parse(R"({"items": [{"metadata": {"name": "job-abc123-1", "deletionTimestamp": "x"}}]})");
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_TRUE(pods[0].deleting);
}

TEST(ParsePods, NotAPodListIsAnError) {
  std::vector<PodView> pods;
  EXPECT_FALSE(ParsePods("error: the server doesn't have a resource type", "j", 1, &pods).ok());
  EXPECT_FALSE(ParsePods(R"({"kind": "List"})", "j", 1, &pods).ok());
}

TEST(KubernetesRunName, TheJobsNameAndTheTrainingIdsEnd) {
  EXPECT_EQ(KubernetesRunName("fashion-mnist", "training-20261202-134501-3f9abc"),
            "fashion-mnist-3f9abc");
  EXPECT_EQ(KubernetesRunName("My Job!", "T1"), "my-job-t1");
  std::string long_name(80, 'a');
  std::string name = KubernetesRunName(long_name, "training-20261202-134501-3f9abc");
  EXPECT_EQ(name.size(), 50u);
  EXPECT_TRUE(name.ends_with("-3f9abc"));
}

}  // namespace
}  // namespace cadre::backends
