#include "perdure/admin/detail/api.hpp"

#include <httplib.h>

#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "perdure/cli/context.hpp"
#include "perdure/cli/documents.hpp"
#include "perdure/cli/filters.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/cli/payload.hpp"
#include "perdure/client.hpp"
#include "perdure/queues/queue.hpp"
#include "perdure/telemetry/percent_decoding.hpp"

namespace perdure::admin::detail {

namespace {

using nlohmann::json;

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

/// Runs `fn`, answering its document, or the error as `{"error": ...}`
/// with the status it means.
template <class F>
void answer(httplib::Response& res, F&& fn) {
  try {
    reply(res, 200, fn());
  } catch (const cli::cli_error& e) {
    int status = e.code() == cli::exit_code::not_found ? 404
                 : e.code() == cli::exit_code::refused ? 409
                                                       : 400;
    reply(res, status, {{"error", e.what()}});
  } catch (const perdure::error& e) {
    int status = 500;
    switch (e.code()) {
      case errc::not_found:
      case errc::unknown_workflow: status = 404; break;
      case errc::invalid_argument:
      case errc::payload_too_large: status = 400; break;
      case errc::conflicting_id:
      case errc::already_resolved: status = 409; break;
      case errc::store_unavailable: status = 503; break;
      default: break;
    }
    reply(res, status, {{"error", e.what()}});
  } catch (const json::exception& e) {
    reply(res, 400, {{"error", std::string{"bad JSON body: "} + e.what()}});
  } catch (const std::exception& e) {
    reply(res, 500, {{"error", e.what()}});
  }
}

/// The `runs list` filter the query string spells (the CLI's names with
/// `_` for `-`).
cli::filter_options filter_of(const httplib::Request& req,
                              std::size_t default_limit) {
  // A misspelled filter must not widen a bulk action (`dry-run`,
  // `id-prefix`): unknown parameters are refused.
  static const std::set<std::string> known{
    "status",  "workflow", "version", "executor", "parent",
    "queue",   "object",   "id_prefix", "created", "ended",
    "cursor",  "active",   "limit",   "dry_run"};
  for (auto& param : req.params)
    if (known.count(param.first) == 0)
      throw cli::cli_error(cli::exit_code::usage,
                           "unknown parameter '" + param.first
                             + "': filters are status, active, workflow, "
                               "version, executor, parent, queue, object, "
                               "id_prefix, created, ended, limit, cursor "
                               "(and dry_run)");
  cli::filter_options f;
  f.limit = default_limit;
  auto get = [&](const char* name, std::string& into) {
    if (req.has_param(name))
      into = req.get_param_value(name);
  };
  get("status", f.status);
  get("workflow", f.workflow);
  get("version", f.version);
  get("executor", f.executor);
  get("parent", f.parent);
  get("queue", f.queue);
  get("object", f.object);
  get("id_prefix", f.id_prefix);
  get("created", f.created);
  get("ended", f.ended);
  get("cursor", f.cursor);
  auto active = req.get_param_value("active");
  f.active = !active.empty() && active != "0" && active != "false";
  if (req.has_param("limit")) {
    try {
      f.limit = std::stoul(req.get_param_value("limit"));
    } catch (const std::exception&) {
      f.limit = 0;
    }
    if (f.limit < 1 || f.limit > 1000)
      throw cli::cli_error(cli::exit_code::usage, "limit: 1 to 1000");
  }
  return f;
}

bool dry_run(const httplib::Request& req) {
  auto v = req.get_param_value("dry_run");
  return !v.empty() && v != "0" && v != "false";
}

json body_of(const httplib::Request& req) {
  if (req.body.empty())
    return json::object();
  return json::parse(req.body);
}

std::string text_field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? std::string{}
                                           : it->get<std::string>();
}

/// A bulk action needs a filter: one without would act on every run.
run_filter bulk_filter(const httplib::Request& req) {
  auto f = filter_of(req, 500);
  if (!f.any())
    throw cli::cli_error(cli::exit_code::usage,
                         "a bulk action needs a filter (status, workflow, "
                         "...): use dry_run=1 to look first");
  return f.to_filter();
}

/// The parts of the request's path after `/api/`, each percent-decoded
/// on its own: an id may hold `/` (written `%2F`), which httplib's decoded
/// `path` would split.
std::vector<std::string> api_segments(const httplib::Request& req) {
  auto raw = req.target.empty() ? req.path : req.target;
  raw = raw.substr(0, raw.find('?'));
  std::vector<std::string> out;
  constexpr std::string_view prefix = "/api/";
  if (raw.compare(0, prefix.size(), prefix) != 0)
    return out;
  auto rest = std::string_view{raw}.substr(prefix.size());
  for (;;) {
    auto slash = rest.find('/');
    out.push_back(telemetry::percent_decoded(rest.substr(0, slash)));
    if (slash == std::string_view::npos)
      return out;
    rest.remove_prefix(slash + 1);
  }
}

using args_t = std::vector<std::string>;
using handler_t = std::function<json(const httplib::Request&, const args_t&)>;

/// One API path: its method, its parts (`*` captures one part into the
/// handler's arguments), whether it acts (and so needs the token).
struct route {
  std::string_view method;
  std::vector<std::string_view> parts;
  bool acts;
  handler_t fn;
};

/// The captured parts of `segments` if they fit `r`'s pattern.
std::optional<args_t> match(const route& r, const args_t& segments) {
  if (r.parts.size() != segments.size())
    return std::nullopt;
  args_t args;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (r.parts[i] == "*") {
      if (segments[i].empty())
        return std::nullopt;
      args.push_back(segments[i]);
    } else if (r.parts[i] != segments[i]) {
      return std::nullopt;
    }
  }
  return args;
}

resume_options resume_options_of(const json& body) {
  resume_options opts{.reason = text_field(body, "reason")};
  if (auto v = text_field(body, "app_version"); !v.empty())
    opts.app_version = v;
  return opts;
}

std::vector<route> api_routes(client& c) {
  using req_t = const httplib::Request&;
  using args = const args_t&;
  return {
    {"GET", {"runs"}, false,
     [&c](req_t req, args) {
       return cli::run_page_json(c.list_runs(filter_of(req, 20).to_filter()));
     }},
    // Bulk actions by filter (the query string), with dry_run=1 to look;
    // before the one-run paths so that a run named `cancel` is reached
    // only as `runs/cancel/...`.
    {"POST", {"runs", "cancel"}, true,
     [&c](req_t req, args) {
       auto dry = dry_run(req);
       return cli::bulk_json("cancel", dry,
                             c.cancel_matching(bulk_filter(req), dry));
     }},
    {"POST", {"runs", "resume"}, true,
     [&c](req_t req, args) {
       auto dry = dry_run(req);
       return cli::bulk_json(
         "resume", dry,
         c.resume_matching(bulk_filter(req), resume_options_of(body_of(req)),
                           dry));
     }},
    {"GET", {"runs", "*"}, false,
     [&c](req_t, args a) { return cli::run_document(c, a[0]); }},
    {"GET", {"runs", "*", "export"}, false,
     [&c](req_t, args a) { return json::parse(c.export_run(a[0])); }},
    {"POST", {"runs", "*", "cancel"}, true,
     [&c](req_t, args a) {
       cli::cancel_one(c, a[0]);
       return json{{"cancelled", a[0]}};
     }},
    {"POST", {"runs", "*", "resume"}, true,
     [&c](req_t req, args a) {
       c.resume(a[0], resume_options_of(body_of(req)));
       return json{{"resumed", a[0]}};
     }},
    {"POST", {"runs", "*", "fork"}, true,
     [&c](req_t req, args a) {
       auto body = body_of(req);
       fork_options opts;
       if (body.contains("from_step"))
         opts.from_step = body["from_step"].get<std::int32_t>();
       if (auto v = text_field(body, "from_step_name"); !v.empty())
         opts.from_step_name = v;
       opts.from_last_failure = body.value("from_last_failure", false);
       opts.id = text_field(body, "id");
       if (auto v = text_field(body, "app_version"); !v.empty())
         opts.app_version = v;
       opts.reason = text_field(body, "reason");
       return json{{"fork", c.fork(a[0], opts)}, {"source", a[0]}};
     }},
    {"POST", {"runs", "*", "send", "*"}, true,
     [&c](req_t req, args a) {
       c.send_encoded(a[0], a[1],
                      cli::encode_json_value(req.body, "the request body"));
       return json{{"sent", a[1]}, {"run", a[0]}};
     }},
    {"POST", {"runs", "*", "promises", "*", "resolve"}, true,
     [&c](req_t req, args a) {
       c.resolve_promise_encoded(
         a[0], a[1], cli::encode_json_value(req.body, "the request body"));
       return json{{"resolved", a[1]}, {"run", a[0]}};
     }},
    {"POST", {"runs", "*", "promises", "*", "reject"}, true,
     [&c](req_t req, args a) {
       c.reject_promise(a[0], a[1], text_field(body_of(req), "reason"));
       return json{{"rejected", a[1]}, {"run", a[0]}};
     }},
    {"POST", {"awakeables", "*", "resolve"}, true,
     [&c](req_t req, args a) {
       c.resolve_awakeable_encoded(
         a[0], cli::encode_json_value(req.body, "the request body"));
       return json{{"resolved", a[0]}};
     }},
    {"POST", {"awakeables", "*", "reject"}, true,
     [&c](req_t req, args a) {
       c.reject_awakeable(a[0], text_field(body_of(req), "reason"));
       return json{{"rejected", a[0]}};
     }},
    {"GET", {"objects", "*"}, false,
     [&c](req_t req, args a) {
       auto after = req.get_param_value("after");
       return json{{"type", a[0]}, {"keys", c.list_objects(a[0], after, 100)}};
     }},
    {"GET", {"objects", "*", "*"}, false,
     [&c](req_t, args a) {
       auto state = c.object_state_encoded(a[0], a[1]);
       if (!state)
         throw cli::cli_error(cli::exit_code::not_found,
                              "object " + a[0] + "/" + a[1] + " has no state");
       return json{{"type", a[0]},
                   {"key", a[1]},
                   {"state", cli::payload_json(*state)}};
     }},
    {"GET", {"objects", "*", "*", "calls"}, false,
     [&c](req_t req, args a) {
       auto f = filter_of(req, 20);
       f.object = a[0] + "/" + a[1];
       return cli::run_page_json(c.list_runs(f.to_filter()), "calls");
     }},
    {"GET", {"queues"}, false,
     [&c](req_t, args) { return cli::queues_json(c); }},
    {"GET", {"queues", "*"}, false,
     [&c](req_t, args a) {
       for (auto& q : c.queues())
         if (q.name == a[0])
           return cli::queue_json(perdure::queues::stats(c, q.name));
       throw cli::cli_error(cli::exit_code::not_found,
                            "no queue '" + a[0] + "'");
     }},
    {"POST", {"queues", "requeue", "*"}, true,
     [&c](req_t, args a) {
       perdure::queues::requeue(c, a[0]);
       return json{{"requeued", a[0]}};
     }},
    {"GET", {"executors"}, false,
     [&c](req_t, args) { return cli::executors_json(c.executors()); }},
    {"GET", {"versions"}, false,
     [&c](req_t, args) { return cli::versions_json(c.versions()); }},
    {"GET", {"doctor"}, false,
     [&c](req_t, args) { return cli::doctor_json(c); }},
  };
}

} // namespace

void add_api_routes(httplib::Server& server, client& c, authorizer may_act) {
  auto routes = std::make_shared<const std::vector<route>>(api_routes(c));
  auto dispatch = [routes, may_act](std::string_view method,
                                    const httplib::Request& req,
                                    httplib::Response& res) {
    auto segments = api_segments(req);
    bool other_method = false;
    for (auto& r : *routes) {
      auto args = match(r, segments);
      if (!args)
        continue;
      if (r.method != method) {
        other_method = true;
        continue;
      }
      if (r.acts && !may_act(req, res))
        return;
      answer(res, [&] { return r.fn(req, *args); });
      return;
    }
    reply(res, other_method ? 405 : 404,
          {{"error", other_method
                       ? "this path takes another method (GET reads, POST "
                         "acts)"
                       : "no such API path: the paths are listed in the "
                         "README, 'Operating Perdure'"}});
  };
  server.Get(R"(/api/.*)", [dispatch](const httplib::Request& req,
                                       httplib::Response& res) {
    dispatch("GET", req, res);
  });
  server.Post(R"(/api/.*)", [dispatch](const httplib::Request& req,
                                        httplib::Response& res) {
    dispatch("POST", req, res);
  });
}

} // namespace perdure::admin::detail
