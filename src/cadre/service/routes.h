// The service's routes, one file per resource. Each Add*Routes registers its handlers on the
// server; service.cc calls them all. Handlers share the ApiContext, which outlives the server.
#pragma once

#include <httplib.h>

namespace cadre::service {

struct ApiContext;

// POST/GET/DELETE /ml/v4/trainings[/{id}] (routes_trainings.cc).
void AddTrainingRoutes(httplib::Server& server, ApiContext& ctx);
// GET /ml/v4/trainings/{id}/logs (routes_logs.cc).
void AddLogRoutes(httplib::Server& server, ApiContext& ctx);
// GET /ml/v4/models[/{id}[/download]] (routes_models.cc).
void AddModelRoutes(httplib::Server& server, ApiContext& ctx);
// POST/GET/DELETE /ml/v4/deployments[/{id}], POST /ml/v4/deployments/{id}/predictions
// (routes_deployments.cc).
void AddDeploymentRoutes(httplib::Server& server, ApiContext& ctx);
// GET / and the dashboard's files, GET /v1/me (routes_dashboard.cc).
void AddDashboardRoutes(httplib::Server& server, ApiContext& ctx);

}  // namespace cadre::service
