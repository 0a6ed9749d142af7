#pragma once

// The JSON API's routes (`/api/...`): the CLI's documents
// (perdure/cli/documents.hpp) over HTTP.

#include <functional>

namespace httplib {
class Server;
struct Request;
struct Response;
} // namespace httplib

namespace perdure {
class client;
} // namespace perdure

namespace perdure::admin::detail {

/// Whether a request may act (its bearer token, if one is required);
/// answers 401 itself when not.
using authorizer = std::function<bool(const httplib::Request&,
                                      httplib::Response&)>;

/// Adds the API's routes for `c` to `server`.
void add_api_routes(httplib::Server& server, client& c, authorizer may_act);

} // namespace perdure::admin::detail
