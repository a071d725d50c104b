#include "cadre/net/resolver.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace cadre::net {
namespace {

bool EqualsIgnoreCase(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

Status LookupHostsFile(const std::string& path, const std::string& name, std::string* address) {
  std::ifstream in(path);
  if (!in) return IoError("cannot read hosts file " + path);
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::string addr, alias;
    if (!(fields >> addr)) continue;
    while (fields >> alias) {
      if (EqualsIgnoreCase(alias, name)) {
        *address = addr;
        return Status::Ok();
      }
    }
  }
  return NotFound("host '" + name + "' is not in hosts file " + path);
}

std::string ResolveWithHostsFile(const std::string& hosts_file, const std::string& host,
                                 std::string* note) {
  if (hosts_file.empty() || host.empty()) return host;
  std::string address;
  Status s = LookupHostsFile(hosts_file, host, &address);
  if (s.ok()) return address;
  if (note != nullptr) {
    *note = s.code() == Code::kNotFound ? "not in CADRE_HOSTS file " + hosts_file : s.message();
  }
  return host;
}

}  // namespace cadre::net
