// Learner addresses and names on one machine.
//
// Every learner gets its own loopback address 127.0.<x>.<learner id> (x picked per job), so each
// has its own port 2222, and a host name "<prefix>-<id>" that resolves to it. The names reach
// programs through a private /etc/hosts (see HostsMethod in process.h): the job's hosts file is
// the machine's /etc/hosts plus one line per learner.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/launch/process.h"

namespace cadre::launch {

// The port every learner must find free on its own address (PS gRPC, as the seed service).
inline constexpr int kLearnerPort = 2222;
// torchrun's MASTER_PORT, on learner 1's address.
inline constexpr int kMasterPort = 29500;

struct LearnerHost {
  int id = 0;           // LEARNER_ID, 1-based
  std::string name;     // "<prefix>-<id>"
  std::string address;  // "127.0.x.<id>"
};

// Picks x so that kLearnerPort can be bound on every learner's address and kMasterPort on
// learner 1's (tries random blocks; kUnavailable when none is free).
Status PickLearnerHosts(const std::string& prefix, int nodes, std::vector<LearnerHost>* hosts);

// The job's hosts file: `system_hosts` (the machine's /etc/hosts) and a line per learner.
std::string HostsFileText(const std::vector<LearnerHost>& hosts, const std::string& system_hosts);

// CADRE_HOSTS_METHOD's choice: nullopt when unset, empty or "auto"; kInvalidArgument naming the
// variable and its values when it is none of them (cadre run refuses the job with it, exit 2).
Status HostsMethodFromEnv(std::optional<HostsMethod>* forced);

// The method to use: CADRE_HOSTS_METHOD (mount-namespace, user-namespace, cadre-hosts) when set,
// otherwise the first that works here, probed with `hosts_file`. kInvalidArgument for an unknown
// CADRE_HOSTS_METHOD; kUnavailable when a forced method does not work.
Status ChooseHostsMethod(const std::filesystem::path& hosts_file, HostsMethod* method);

}  // namespace cadre::launch
