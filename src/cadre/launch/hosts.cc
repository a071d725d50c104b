#include "cadre/launch/hosts.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "cadre/base/env.h"
#include "cadre/base/printable.h"

namespace cadre::launch {
namespace {

// True when a TCP listener could bind address:port right now (no SO_REUSEADDR: the learner's
// program may not set it either).
bool CanBind(const std::string& address, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = inet_pton(AF_INET, address.c_str(), &sa.sin_addr) == 1 &&
            bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  close(fd);
  return ok;
}

}  // namespace

Status PickLearnerHosts(const std::string& prefix, int nodes, std::vector<LearnerHost>* hosts) {
  std::random_device seed;
  std::mt19937 rng(seed());
  std::uniform_int_distribution<int> block(1, 254);
  for (int attempt = 0; attempt < 64; ++attempt) {
    int x = block(rng);
    std::vector<LearnerHost> candidate;
    bool free = true;
    for (int id = 1; id <= nodes && free; ++id) {
      LearnerHost h{id, prefix + "-" + std::to_string(id),
                    "127.0." + std::to_string(x) + "." + std::to_string(id)};
      free = CanBind(h.address, kLearnerPort) && (id != 1 || CanBind(h.address, kMasterPort));
      candidate.push_back(std::move(h));
    }
    if (free) {
      *hosts = std::move(candidate);
      return Status::Ok();
    }
  }
  return {Code::kUnavailable, "no block of loopback addresses 127.0.x.1-" + std::to_string(nodes) +
                                  " has port " + std::to_string(kLearnerPort) + " free"};
}

std::string HostsFileText(const std::vector<LearnerHost>& hosts, const std::string& system_hosts) {
  std::string text = system_hosts;
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += "# cadre learners of this job\n";
  for (const auto& h : hosts) text += h.address + "\t" + h.name + "\n";
  return text;
}

Status HostsMethodFromEnv(std::optional<HostsMethod>* forced) {
  forced->reset();
  auto value = GetEnv("CADRE_HOSTS_METHOD");
  if (!value || value->empty() || *value == "auto") return Status::Ok();
  for (HostsMethod m :
       {HostsMethod::kMountNamespace, HostsMethod::kUserNamespace, HostsMethod::kCadreHosts}) {
    if (*value == HostsMethodName(m)) {
      *forced = m;
      return Status::Ok();
    }
  }
  return InvalidArgument("CADRE_HOSTS_METHOD=" + QuotedText(*value) +
                         " is not one of auto, mount-namespace, user-namespace, cadre-hosts");
}

Status ChooseHostsMethod(const std::filesystem::path& hosts_file, HostsMethod* method) {
  const HostsMethod all[] = {HostsMethod::kMountNamespace, HostsMethod::kUserNamespace,
                             HostsMethod::kCadreHosts};
  std::optional<HostsMethod> forced;
  CADRE_RETURN_IF_ERROR(HostsMethodFromEnv(&forced));
  if (forced) {
    if (!HostsMethodWorks(*forced, hosts_file)) {
      return {Code::kUnavailable, "CADRE_HOSTS_METHOD=" + std::string(HostsMethodName(*forced)) +
                                      " does not work on this machine"};
    }
    *method = *forced;
    return Status::Ok();
  }
  for (HostsMethod m : all) {
    if (HostsMethodWorks(m, hosts_file)) {
      *method = m;
      return Status::Ok();
    }
  }
  *method = HostsMethod::kCadreHosts;
  return Status::Ok();
}

}  // namespace cadre::launch
