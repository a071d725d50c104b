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
// Whether `req` is a prediction (POST /ml/v4/deployments/{id}/predictions or
// /v2/models/{id}/infer) announcing a body over the deployments' limit; if so its 413 is set on
// `res`. For a client that waits for 100 Continue: it learns before it sends the body
// (routes_deployments.cc).
bool RefuseLargePrediction(const ApiContext& ctx, const httplib::Request& req,
                           httplib::Response& res);
// GET / and the dashboard's files, GET /v1/me (routes_dashboard.cc).
void AddDashboardRoutes(httplib::Server& server, ApiContext& ctx);

}  // namespace cadre::service
