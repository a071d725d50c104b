// The ids of the service's resources (trainings, models, deployments) as they come in a request's
// path or on the terminal client's command line, checked for their shape before anything is
// looked up: an id the service could never have given (`../../etc`, one with a slash or a
// space) is refused naming it, rather than answered "no route" or "not found".
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "cadre/base/status.h"

namespace cadre::service {

// OK when `id` could be an id of a `kind` ("training", "model", "deployment"): 1 to 128 letters,
// digits, '-', '_' and '.', not starting with '.'. Otherwise InvalidArgument naming the id.
Status CheckResourceId(std::string_view id, std::string_view kind);

// The id in a request's (decoded) path under /ml/v4/trainings/, /ml/v4/models/ or
// /ml/v4/deployments/ when it is malformed: InvalidArgument naming it (`../../etc` of
// `/ml/v4/trainings/../../etc/logs`). OK for any other path, or a well-formed id followed by a
// route the server may not have (left to the routes).
Status CheckIdInPath(std::string_view path);

}  // namespace cadre::service
