// The dashboard: GET / (the page), its script and style, and GET /v1/me (who a token is, for
// signing in). The page itself loads without a token; everything it shows comes from the API.
#include <fstream>
#include <sstream>

#include "cadre/service/api.h"
#include "cadre/service/routes.h"

namespace cadre::service {
namespace {

struct StaticFile {
  const char* route;
  const char* file;
  const char* type;
};

constexpr StaticFile kFiles[] = {
    {"/", "index.html", "text/html; charset=utf-8"},
    {"/dashboard.js", "dashboard.js", "text/javascript; charset=utf-8"},
    {"/dashboard.css", "dashboard.css", "text/css; charset=utf-8"},
};

void Serve(ApiContext& ctx, const StaticFile& f, httplib::Response& res) {
  // Read at each request: small files, and an edited dashboard shows without a restart.
  std::ifstream in(ctx.options.web_dir / f.file, std::ios::binary);
  if (!in) {
    SendError(
        res, 404, "not_found",
        "the dashboard's " + std::string(f.file) + " is not in " + ctx.options.web_dir.string());
    return;
  }
  std::stringstream text;
  text << in.rdbuf();
  res.set_header("Cache-Control", "no-cache");
  res.set_content(text.str(), f.type);
}

}  // namespace

void AddDashboardRoutes(httplib::Server& server, ApiContext& ctx) {
  for (const StaticFile& f : kFiles) {
    server.Get(f.route,
               [&ctx, &f](const httplib::Request&, httplib::Response& res) { Serve(ctx, f, res); });
  }
  server.Get("/v1/me", [&ctx](const httplib::Request& req, httplib::Response& res) {
    std::optional<User> user = Authenticate(ctx, req, res);
    if (!user) return;
    const Plan& p = user->plan;
    SendJson(res, 200,
             {{"name", user->name},
              {"plan",
               {{"name", p.name},
                {"description", p.description},
                {"max_nodes", p.max_nodes},
                {"max_active_learners", p.max_active_learners},
                {"distributed", p.distributed}}}});
  });
}

}  // namespace cadre::service
