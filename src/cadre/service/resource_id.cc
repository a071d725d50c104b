#include "cadre/service/resource_id.h"

#include "cadre/base/printable.h"

namespace cadre::service {
namespace {

constexpr size_t kMaxId = 128;

bool IdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

bool WellFormed(std::string_view id) {
  if (id.empty() || id.size() > kMaxId || id.front() == '.') return false;
  for (char c : id) {
    if (!IdChar(c)) return false;
  }
  return true;
}

struct Resource {
  std::string_view prefix;
  std::string_view kind;
  std::string_view suffix;  // the route after the id, besides none
};

constexpr Resource kResources[] = {
    {"/ml/v4/trainings/", "training", "/logs"},
    {"/ml/v4/models/", "model", "/download"},
    {"/ml/v4/deployments/", "deployment", "/predictions"},
};

}  // namespace

Status CheckResourceId(std::string_view id, std::string_view kind) {
  if (WellFormed(id)) return Status();
  return InvalidArgument(Quoted(id) + " is not a " + std::string(kind) + " id (an id is 1 to " +
                         std::to_string(kMaxId) +
                         " letters, digits, '-', '_' and '.', not starting with '.')");
}

Status CheckIdInPath(std::string_view path) {
  for (const Resource& r : kResources) {
    if (path.substr(0, r.prefix.size()) != r.prefix) continue;
    std::string_view rest = path.substr(r.prefix.size());
    if (rest.size() > r.suffix.size() && rest.substr(rest.size() - r.suffix.size()) == r.suffix) {
      rest.remove_suffix(r.suffix.size());
    }
    if (WellFormed(rest)) return Status();
    // A well-formed id and a route after it that the server may not have: the routes say.
    const size_t slash = rest.find('/');
    const bool dot_segment = rest.find("/./") != std::string_view::npos ||
                             rest.find("/../") != std::string_view::npos ||
                             rest.find("//") != std::string_view::npos;
    if (slash != std::string_view::npos && WellFormed(rest.substr(0, slash)) && !dot_segment) {
      return Status();
    }
    return CheckResourceId(rest, r.kind);
  }
  return Status();
}

}  // namespace cadre::service
