// `cadre run --emulate-network` end to end through the local backend: every learner on its own
// emulated node, reachable by its learner name, the store on the switch, nothing left behind.
// Skips itself unless run as root with `ip netns` permitted.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "cadre/launch/job_spec.h"
#include "cadre/launch/local_backend.h"
#include "cadre/netem/emulator_test_fixture.h"

namespace cadre::launch {
namespace {

namespace fs = std::filesystem;

// Each learner checks its own node, then learner 2 connects to learner 1 by name on port 2222
// (the PS port every learner must have) and both connect to the store. Exit codes name the check.
constexpr const char* kLearnerScript = R"SH(
set -u
me="$LEARNER_NAME_PREFIX-$LEARNER_ID"
[ "$(hostname)" = "$me" ] || { echo "host name $(hostname), expected $me"; exit 3; }
addr=$(getent hosts "$me" | awk '{print $1}')
case "$addr" in 198.18.*) ;; *) echo "$me resolves to '$addr'"; exit 4;; esac
ip -o -4 addr show dev eth0 | grep -q " $addr/15 " || { echo "eth0 lacks $addr"; exit 5; }
case "$CADRE_STORE" in 198.18.0.1:*) ;; *) echo "CADRE_STORE=$CADRE_STORE"; exit 6;; esac
exec /usr/bin/python3 - <<'PY'
import os, socket, sys, time
prefix, me = os.environ["LEARNER_NAME_PREFIX"], int(os.environ["LEARNER_ID"])
host, port = os.environ["CADRE_STORE"].split(":")
socket.create_connection((host, int(port)), timeout=30).close()
if me == 1:
    s = socket.socket(); s.bind((prefix + "-1", 2222)); s.listen(1); s.settimeout(60)
    c, _ = s.accept(); assert c.recv(5) == b"hello"; c.sendall(b"hi")
else:
    deadline = time.time() + 60
    while True:
        try:
            c = socket.create_connection((prefix + "-1", 2222), timeout=30); break
        except OSError:
            if time.time() > deadline: raise
            time.sleep(0.1)
    c.sendall(b"hello"); assert c.recv(2) == b"hi"
PY
)SH";

std::set<std::string> NamespacesContaining(const std::string& part) {
  std::set<std::string> found;
  for (const auto& name : netem::Namespaces()) {
    if (name.find(part) != std::string::npos) found.insert(name);
  }
  return found;
}

TEST(EmulatedJobTest, LearnersRunOnEmulatedNodesAndNothingIsLeftBehind) {
  Status support = netem::CheckNetnsSupport();
  if (!support.ok()) GTEST_SKIP() << "needs network namespaces: " << support.message();
  char tmpl[] = "/tmp/cadre-netem-job-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;

  JobSpec spec;
  spec.name = "netem-job";
  spec.framework = *FindFramework("pytorch");
  spec.compute = *FindComputeConfig("cpu");
  spec.nodes = 2;
  spec.slots_per_learner = 1;
  spec.command_argv = {"/bin/sh", "-c", kLearnerScript};
  spec.work_dir = dir;
  spec.results_dir = dir / "runs";

  RunOptions options;
  options.quiet = true;
  options.grace = std::chrono::seconds(2);
  // With a delay, so that the job runs on the user-space relay where the kernel has no netem
  // (and on netem elsewhere): either way it must be emulated, not dropped with a warning.
  options.emulate_network = netem::ParseLinkSpecOrThrow("1gbit,1ms");
  options.require_delay_loss = true;
  options.console_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  options.message_fd = open((dir / "messages").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  JobOutcome outcome;
  Status s = RunLocalJob(spec, options, &outcome);
  close(options.console_fd);
  close(options.message_fd);

  ASSERT_TRUE(s.ok()) << s.ToString();
  std::stringstream logs;
  for (const auto& entry : fs::recursive_directory_iterator(outcome.job_dir)) {
    if (entry.path().extension() == ".log" || entry.path().filename() == "messages") {
      logs << "--- " << entry.path() << "\n" << std::ifstream(entry.path()).rdbuf();
    }
  }
  logs << "--- messages\n" << std::ifstream(dir / "messages").rdbuf();
  EXPECT_EQ(outcome.exit_code, 0) << logs.str();
  EXPECT_TRUE(NamespacesContaining(outcome.training_id).empty()) << "namespaces left behind";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cadre::launch
