#include "perdure/admin/detail/api.hpp"

#include <httplib.h>

#include <set>

#include <nlohmann/json.hpp>

#include "perdure/cli/context.hpp"
#include "perdure/cli/documents.hpp"
#include "perdure/cli/filters.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/cli/payload.hpp"
#include "perdure/client.hpp"
#include "perdure/queues/queue.hpp"

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

/// The path's `n`th captured part.
std::string arg(const httplib::Request& req, std::size_t n) {
  return req.matches[n].str();
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

} // namespace

void add_api_routes(httplib::Server& server, client& c, authorizer may_act) {
  using req_t = const httplib::Request&;
  using res_t = httplib::Response&;
  server.Get("/api/runs", [&c](req_t req, res_t res) {
    answer(res, [&] {
      return cli::run_page_json(c.list_runs(filter_of(req, 20).to_filter()));
    });
  });
  server.Get(R"(/api/runs/([^/]+))", [&c](req_t req, res_t res) {
    answer(res, [&] { return cli::run_document(c, arg(req, 1)); });
  });
  server.Get(R"(/api/runs/([^/]+)/export)", [&c](req_t req, res_t res) {
    answer(res, [&] { return json::parse(c.export_run(arg(req, 1))); });
  });
  // Bulk actions by filter (the query string), with dry_run=1 to look.
  server.Post("/api/runs/cancel", [&c, may_act](req_t req, res_t res) {
    if (!may_act(req, res))
      return;
    answer(res, [&] {
      auto dry = dry_run(req);
      return cli::bulk_json("cancel", dry,
                            c.cancel_matching(bulk_filter(req), dry));
    });
  });
  server.Post("/api/runs/resume", [&c, may_act](req_t req, res_t res) {
    if (!may_act(req, res))
      return;
    answer(res, [&] {
      auto dry = dry_run(req);
      auto body = body_of(req);
      resume_options opts{.reason = text_field(body, "reason")};
      if (auto v = text_field(body, "app_version"); !v.empty())
        opts.app_version = v;
      return cli::bulk_json("resume", dry,
                            c.resume_matching(bulk_filter(req), opts, dry));
    });
  });
  // One run's actions.
  server.Post(R"(/api/runs/([^/]+)/cancel)",
              [&c, may_act](req_t req, res_t res) {
                if (!may_act(req, res))
                  return;
                answer(res, [&] {
                  cli::cancel_one(c, arg(req, 1));
                  return json{{"cancelled", arg(req, 1)}};
                });
              });
  server.Post(R"(/api/runs/([^/]+)/resume)",
              [&c, may_act](req_t req, res_t res) {
                if (!may_act(req, res))
                  return;
                answer(res, [&] {
                  auto body = body_of(req);
                  resume_options opts{.reason = text_field(body, "reason")};
                  if (auto v = text_field(body, "app_version"); !v.empty())
                    opts.app_version = v;
                  c.resume(arg(req, 1), opts);
                  return json{{"resumed", arg(req, 1)}};
                });
              });
  server.Post(R"(/api/runs/([^/]+)/fork)",
              [&c, may_act](req_t req, res_t res) {
                if (!may_act(req, res))
                  return;
                answer(res, [&] {
                  auto body = body_of(req);
                  fork_options opts;
                  if (body.contains("from_step"))
                    opts.from_step = body["from_step"].get<std::int32_t>();
                  if (auto v = text_field(body, "from_step_name"); !v.empty())
                    opts.from_step_name = v;
                  opts.from_last_failure
                    = body.value("from_last_failure", false);
                  opts.id = text_field(body, "id");
                  if (auto v = text_field(body, "app_version"); !v.empty())
                    opts.app_version = v;
                  opts.reason = text_field(body, "reason");
                  return json{{"fork", c.fork(arg(req, 1), opts)},
                              {"source", arg(req, 1)}};
                });
              });
  server.Post(R"(/api/awakeables/([^/]+)/resolve)",
              [&c, may_act](req_t req, res_t res) {
                if (!may_act(req, res))
                  return;
                answer(res, [&] {
                  c.resolve_awakeable_encoded(
                    arg(req, 1),
                    cli::encode_json_value(req.body, "the request body"));
                  return json{{"resolved", arg(req, 1)}};
                });
              });
  server.Post(R"(/api/awakeables/([^/]+)/reject)",
              [&c, may_act](req_t req, res_t res) {
                if (!may_act(req, res))
                  return;
                answer(res, [&] {
                  c.reject_awakeable(arg(req, 1),
                                     text_field(body_of(req), "reason"));
                  return json{{"rejected", arg(req, 1)}};
                });
              });
  server.Post(R"(/api/runs/([^/]+)/send/([^/]+))",
              [&c, may_act](req_t req, res_t res) {
                if (!may_act(req, res))
                  return;
                answer(res, [&] {
                  c.send_encoded(arg(req, 1), arg(req, 2),
                                 cli::encode_json_value(req.body,
                                                        "the request body"));
                  return json{{"sent", arg(req, 2)}, {"run", arg(req, 1)}};
                });
              });
  server.Post(R"(/api/runs/([^/]+)/promises/([^/]+)/resolve)",
              [&c, may_act](req_t req, res_t res) {
                if (!may_act(req, res))
                  return;
                answer(res, [&] {
                  c.resolve_promise_encoded(
                    arg(req, 1), arg(req, 2),
                    cli::encode_json_value(req.body, "the request body"));
                  return json{{"resolved", arg(req, 2)}, {"run", arg(req, 1)}};
                });
              });
  server.Post(R"(/api/runs/([^/]+)/promises/([^/]+)/reject)",
              [&c, may_act](req_t req, res_t res) {
                if (!may_act(req, res))
                  return;
                answer(res, [&] {
                  c.reject_promise(arg(req, 1), arg(req, 2),
                                   text_field(body_of(req), "reason"));
                  return json{{"rejected", arg(req, 2)}, {"run", arg(req, 1)}};
                });
              });
  server.Get(R"(/api/objects/([^/]+))", [&c](req_t req, res_t res) {
    answer(res, [&] {
      auto after = req.get_param_value("after");
      return json{{"type", arg(req, 1)},
                  {"keys", c.list_objects(arg(req, 1), after, 100)}};
    });
  });
  server.Get(R"(/api/objects/([^/]+)/([^/]+))", [&c](req_t req, res_t res) {
    answer(res, [&] {
      auto state = c.object_state_encoded(arg(req, 1), arg(req, 2));
      if (!state)
        throw cli::cli_error(cli::exit_code::not_found,
                             "object " + arg(req, 1) + "/"
                               + arg(req, 2) + " has no state");
      return json{{"type", arg(req, 1)},
                  {"key", arg(req, 2)},
                  {"state", cli::payload_json(*state)}};
    });
  });
  server.Get(R"(/api/objects/([^/]+)/([^/]+)/calls)",
             [&c](req_t req, res_t res) {
               answer(res, [&] {
                 auto f = filter_of(req, 20);
                 f.object = arg(req, 1) + "/" + arg(req, 2);
                 return cli::run_page_json(c.list_runs(f.to_filter()),
                                           "calls");
               });
             });
  server.Get("/api/queues", [&c](req_t, res_t res) {
    answer(res, [&] { return cli::queues_json(c); });
  });
  server.Get(R"(/api/queues/([^/]+))", [&c](req_t req, res_t res) {
    answer(res, [&] {
      for (auto& q : c.queues())
        if (q.name == arg(req, 1))
          return cli::queue_json(perdure::queues::stats(c, q.name));
      throw cli::cli_error(cli::exit_code::not_found,
                           "no queue '" + arg(req, 1) + "'");
    });
  });
  server.Post(R"(/api/queues/requeue/([^/]+))",
              [&c, may_act](req_t req, res_t res) {
                if (!may_act(req, res))
                  return;
                answer(res, [&] {
                  perdure::queues::requeue(c, arg(req, 1));
                  return json{{"requeued", arg(req, 1)}};
                });
              });
  server.Get("/api/executors", [&c](req_t, res_t res) {
    answer(res, [&] { return cli::executors_json(c.executors()); });
  });
  server.Get("/api/versions", [&c](req_t, res_t res) {
    answer(res, [&] { return cli::versions_json(c.versions()); });
  });
  server.Get("/api/doctor", [&c](req_t, res_t res) {
    answer(res, [&] { return cli::doctor_json(c); });
  });
}

} // namespace perdure::admin::detail
