// The service's SQLite schema. Migrations are an ordered list of steps (schema.cc, kSteps);
// PRAGMA user_version records how many have been applied, so opening a database written by an
// older cadre brings it up to date and a newer one is refused rather than misread.
//
// Tables: plans (limits per plan, data not code), users, tokens (salted hashes only),
// trainings (one row per submitted job; `seq` orders admission, first come first served).
#pragma once

#include "cadre/base/status.h"

namespace cadre::service {

class Db;

// How many steps this build knows.
int SchemaVersion();

// Applies the steps the database has not seen, each in its own transaction. The caller holds
// the Db's lock.
Status Migrate(Db& db);

}  // namespace cadre::service
