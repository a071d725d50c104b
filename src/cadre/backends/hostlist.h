// Slurm's host lists ("node[01-03,7],gpu5"): expanded with Slurm's rules, pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::backends {

// Expands `list` in order: top-level commas separate entries; each bracket group holds ranges
// ("01-03") and single numbers, a range keeping the zero padding of its first number; several
// groups in one entry expand as a product ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2).
// InvalidArgument naming the entry for an unbalanced bracket, a bad range or more than
// `max_hosts` names.
Status ExpandHostlist(std::string_view list, std::vector<std::string>* hosts,
                      size_t max_hosts = 100000);

}  // namespace cadre::backends
