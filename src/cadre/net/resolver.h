// cadre's own host-name lookup, for machines where a job cannot give its learners a private
// /etc/hosts (no mount namespace): the job runner then writes the learners' names to a
// hosts(5)-format file and names it in the learner contract (CADRE_HOSTS, read at the edges:
// config/from_env.h). Socket::Listen and Socket::Connect consult the file they are given before
// getaddrinfo, so "learner-2" resolves for cadre's own connections; the file is read on each
// lookup (it is small, and the runner may rewrite it between restarts).
#pragma once

#include <string>

#include "cadre/base/status.h"

namespace cadre::net {

// Looks `name` up (case-insensitively, as the C library does) in the hosts file at `path`;
// sets *address to the first address listed for it. kNotFound when the name is not listed,
// kIo when the file cannot be read.
Status LookupHostsFile(const std::string& path, const std::string& name, std::string* address);

// The address to use for `host`: its entry in the hosts file `hosts_file` when that is not empty
// and lists it, otherwise `host` unchanged (for getaddrinfo). With a hosts file, *note (if not
// null) receives a phrase for error messages ("not in CADRE_HOSTS file /x/hosts").
std::string ResolveWithHostsFile(const std::string& hosts_file, const std::string& host,
                                 std::string* note = nullptr);

}  // namespace cadre::net
