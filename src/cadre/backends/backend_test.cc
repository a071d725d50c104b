// Choosing a backend by name, and the engine flags a backend would ignore.
#include "cadre/backends/backend.h"

#include <gtest/gtest.h>

namespace cadre::backends {
namespace {

TEST(Backend, NamesAndTheK8sShortName) {
  BackendKind kind = BackendKind::kLocal;
  for (BackendKind k :
       {BackendKind::kLocal, BackendKind::kSlurm, BackendKind::kMpi, BackendKind::kKubernetes}) {
    ASSERT_TRUE(ParseBackendKind(BackendName(k), &kind).ok());
    EXPECT_EQ(kind, k);
  }
  ASSERT_TRUE(ParseBackendKind("k8s", &kind).ok());
  EXPECT_EQ(kind, BackendKind::kKubernetes);
  kind = BackendKind::kMpi;
  for (const char* bad : {"", "SLURM", "slurmm", "kube", "k8s "}) {
    Status st = ParseBackendKind(bad, &kind);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("local, slurm, mpi or kubernetes (k8s)"), std::string::npos);
    EXPECT_EQ(kind, BackendKind::kMpi);
  }
}

TEST(Backend, FlagsOfAnotherEngineNameTheirEngines) {
  EngineFlagsGiven given;
  given.partition = true;
  given.queue_timeout = true;
  auto misplaced = FlagsForOtherEngines(BackendKind::kMpi, given);
  ASSERT_EQ(misplaced.size(), 2u);
  EXPECT_EQ(misplaced[0].flag, "--partition");
  EXPECT_EQ(misplaced[0].message, "is for --backend slurm, not mpi");
  EXPECT_EQ(misplaced[1].message, "is for --backend slurm or kubernetes, not mpi");
  EXPECT_TRUE(FlagsForOtherEngines(BackendKind::kSlurm, given).empty());
  // Heartbeats go through the runner's store, which Kubernetes jobs do not have.
  EngineFlagsGiven beat;
  beat.heartbeat_timeout = true;
  EXPECT_TRUE(FlagsForOtherEngines(BackendKind::kMpi, beat).empty());
  misplaced = FlagsForOtherEngines(BackendKind::kKubernetes, beat);
  ASSERT_EQ(misplaced.size(), 1u);
  EXPECT_EQ(misplaced[0].flag, "--heartbeat-timeout");
  EXPECT_EQ(misplaced[0].message, "is for --backend slurm or mpi, not kubernetes");
}

}  // namespace
}  // namespace cadre::backends
