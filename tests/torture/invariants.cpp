#include "torture/invariants.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "perdure/client.hpp"
#include "torture/effects.hpp"
#include "torture/workload.hpp"

namespace perdure::torture {

namespace {

struct interval {
  std::int64_t from = 0;
  std::int64_t to = 0;
  int pid = 0;
  std::string what; // the run
};

/// What happened to each process: when it died, when it was stalled.
struct process_history {
  std::map<int, std::int64_t> death;
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> stalls;

  explicit process_history(const std::vector<process_event>& events,
                           std::int64_t end) {
    std::map<int, std::int64_t> stopped;
    for (auto& e : events) {
      if (e.kind == "kill" || e.kind == "exit")
        death[e.pid] = e.ns;
      else if (e.kind == "stop")
        stopped[e.pid] = e.ns;
      else if (e.kind == "cont") {
        stalls[e.pid].push_back({stopped[e.pid], e.ns});
        stopped.erase(e.pid);
      }
    }
    for (auto& [pid, at] : stopped)
      stalls[pid].push_back({at, end});
  }

  /// Whether code of `pid` running over [from, to] was stalled meanwhile:
  /// it lost its lease, others took its work over, and what it does after
  /// waking is fenced at its next write (a zombie, not a second holder).
  bool stalled_during(int pid, std::int64_t from, std::int64_t to) const {
    auto it = stalls.find(pid);
    if (it == stalls.end())
      return false;
    for (auto& [s, c] : it->second)
      if (s < to && c > from)
        return true;
    return false;
  }
};

/// Pairs start and end lines (`open_kind`, `close_kind`) by process and
/// `key_fields` into intervals; one with no end ends at its process's death
/// (or, in a process that lived on, is dropped: it was abandoned, e.g. a
/// run whose actor stopped, and is counted).
std::map<std::string, std::vector<interval>>
intervals(const std::vector<log_line>& lines, const std::string& open_kind,
          const std::string& close_kind, std::size_t group_fields,
          const process_history& history, std::int64_t& abandoned) {
  std::map<std::string, std::vector<interval>> out;
  std::map<std::string, std::vector<interval>> open; // by pid + key + run
  for (auto& l : lines) {
    if (l.size() < 4 + group_fields || (l[0] != open_kind && l[0] != close_kind))
      continue;
    auto ns = std::stoll(l[1]);
    int pid = std::stoi(l[2]);
    std::string group;
    for (std::size_t i = 0; i < group_fields; ++i)
      group += l[3 + i] + "/";
    auto run = l[3 + group_fields];
    auto id = l[2] + "|" + group + "|" + run;
    if (l[0] == open_kind) {
      open[id].push_back({ns, 0, pid, run});
    } else if (!open[id].empty()) {
      auto iv = open[id].back();
      open[id].pop_back();
      iv.to = ns;
      out[group].push_back(iv);
    }
  }
  for (auto& [id, ivs] : open)
    for (auto& iv : ivs) {
      auto d = history.death.find(iv.pid);
      if (d == history.death.end() || d->second < iv.from) {
        ++abandoned;
        continue;
      }
      iv.to = d->second;
      auto group = id.substr(id.find('|') + 1);
      group = group.substr(0, group.find('|'));
      out[group].push_back(iv);
    }
  return out;
}

/// Returns the most intervals open at once, and an example of it.
std::pair<int, std::string> most_at_once(std::vector<interval> ivs) {
  std::vector<std::pair<std::int64_t, int>> points;
  for (std::size_t i = 0; i < ivs.size(); ++i) {
    points.push_back({ivs[i].from, 1});
    points.push_back({ivs[i].to, -1});
  }
  std::sort(points.begin(), points.end()); // ends before starts at a tie
  int now = 0, most = 0;
  std::int64_t at = 0;
  for (auto& [t, d] : points) {
    now += d;
    if (now > most) {
      most = now;
      at = t;
    }
  }
  std::ostringstream ex;
  for (auto& iv : ivs)
    if (iv.from <= at && iv.to > at)
      ex << " " << iv.what << "@" << iv.pid;
  return {most, ex.str()};
}

void check_runs(test::sql_client& sql, check_report& rep) {
  // Which statuses each kind of run may end in.
  static const std::map<std::string, std::set<std::string>> allowed{
    {"order", {"SUCCESS", "CANCELLED"}},
    {"leaf", {"SUCCESS", "CANCELLED"}},
    {"transfer", {"SUCCESS"}},
    // A trip cancelled before its saga began (still unadopted) has
    // nothing to undo and ends CANCELLED; the inventory check catches one
    // that held something.
    {"trip", {"SUCCESS", "COMPENSATED", "CANCELLED"}},
    {"job", {"SUCCESS", "DEAD_LETTER"}},
    {"slow_job", {"SUCCESS", "DEAD_LETTER"}},
  };
  auto rows = sql.exec("SELECT name, status, coalesce(object_type, ''), "
                       "count(*), min(id), min(coalesce(error, '')) FROM "
                       + sql.table("runs") + " GROUP BY 1, 2, 3");
  for (auto& r : rows.rows) {
    auto name = r[0].value_or(""), status = r[1].value_or("");
    auto type = r[2].value_or("");
    auto n = std::stoll(r[3].value_or("0"));
    rep.counts["runs " + (type.empty() ? "" : type + ".") + name + " "
               + status] = n;
    bool ok;
    if (!type.empty()) // an object call: fails only as its handler chose
      ok = status == "SUCCESS"
           || (status == "ERROR"
               && ((name == "withdraw" && r[5] == "insufficient funds")
                   || (name == "hold" && r[5] == "sold out")));
    else if (auto a = allowed.find(name); a != allowed.end())
      ok = a->second.count(status) > 0;
    else // internal runs (a saga's undo, a delayed send)
      ok = status == "SUCCESS";
    if (!ok)
      rep.violations.push_back(std::to_string(n) + " runs " + name
                               + (type.empty() ? "" : " of " + type)
                               + " ended " + status + ", e.g. "
                               + r[4].value_or("") + ": "
                               + r[5].value_or(""));
  }
  // Errors that must not be: ERROR with another message is caught above
  // only by its minimum; list each odd one.
  auto odd = sql.exec("SELECT id, name, error FROM " + sql.table("runs")
                      + " WHERE status = 'ERROR' AND coalesce(error, '') NOT IN"
                        " ('insufficient funds', 'sold out') LIMIT 5");
  for (auto& r : odd.rows)
    rep.violations.push_back("run " + r[0].value_or("") + " ("
                             + r[1].value_or("") + ") ended ERROR: "
                             + r[2].value_or(""));
}

void check_transactions(test::sql_client& sql, check_report& rep) {
  auto twice = sql.exec("SELECT run_id, name, count(*) FROM torture_tx GROUP "
                        "BY 1, 2 HAVING count(*) <> 1 LIMIT 5");
  for (auto& r : twice.rows)
    rep.violations.push_back("transaction " + r[1].value_or("") + " of "
                             + r[0].value_or("") + " wrote its row "
                             + r[2].value_or("") + " times");
  auto j = sql.table("journal");
  auto unrecorded = sql.exec(
    "SELECT t.run_id, t.name FROM torture_tx t WHERE NOT EXISTS (SELECT 1 "
    "FROM " + j + " j WHERE j.run_id = t.run_id AND j.name = t.name AND "
    "j.kind = 'transaction') LIMIT 5");
  for (auto& r : unrecorded.rows)
    rep.violations.push_back("transaction " + r[1].value_or("") + " of "
                             + r[0].value_or("")
                             + " wrote its row without its checkpoint");
  auto lost = sql.exec(
    "SELECT j.run_id, j.name FROM " + j + " j WHERE j.kind = 'transaction' "
    "AND j.outcome = 0 AND NOT EXISTS (SELECT 1 FROM torture_tx t WHERE "
    "t.run_id = j.run_id AND t.name = j.name) LIMIT 5");
  for (auto& r : lost.rows)
    rep.violations.push_back("transaction " + r[1].value_or("") + " of "
                             + r[0].value_or("")
                             + " was checkpointed without its row");
  rep.counts["transactions checked"] = std::stoll(
    sql.scalar("SELECT count(*) FROM torture_tx"));
}

void check_money(client& c, const std::vector<log_line>& client_lines,
                 check_report& rep) {
  std::int64_t deposited = 0;
  for (auto& l : client_lines)
    if (l[0] == "DEP" && l.size() == 4)
      deposited += std::stoll(l[3]);
  std::int64_t total = 0;
  for (int a = 0; a < accounts; ++a) {
    auto name = "a" + std::to_string(a);
    auto s = c.object_state<account>("account", name).value_or(account{});
    total += s.balance;
    if (s.balance < 0)
      rep.violations.push_back("account " + name + " has a negative balance "
                               + std::to_string(s.balance));
  }
  auto expected = accounts * opening + deposited;
  if (total != expected)
    rep.violations.push_back("money not conserved: accounts hold "
                             + std::to_string(total) + ", opened with "
                             + std::to_string(accounts * opening) + " and "
                             + std::to_string(deposited) + " deposited");
  rep.counts["money total"] = total;
}

/// The run `id` as the store has it, for a violation's message: its row,
/// its journal and its children.
std::string describe_run(test::sql_client& sql, const std::string& id) {
  std::ostringstream out;
  auto cell = [](const std::optional<std::string>& v) {
    return v.value_or("NULL");
  };
  for (auto& r :
       sql.exec("SELECT status, coalesce(saga_phase, 'NULL'), "
                "coalesce(error, ''), cancel_requested_at, executor, epoch, "
                "updated_at FROM " + sql.table("runs") + " WHERE id = $1",
                {id})
         .rows)
    out << "status " << cell(r[0]) << ", phase " << cell(r[1]) << ", error '"
        << cell(r[2]) << "', cancel requested at " << cell(r[3])
        << ", executor " << cell(r[4]) << " epoch " << cell(r[5])
        << ", updated at " << cell(r[6]) << "; journal:";
  for (auto& r : sql.exec("SELECT seq, kind, name, outcome, created_at FROM "
                            + sql.table("journal")
                            + " WHERE run_id = $1 ORDER BY seq",
                          {id})
                   .rows)
    out << " [" << cell(r[0]) << " " << cell(r[1]) << " " << cell(r[2])
        << " o" << cell(r[3]) << " @" << cell(r[4]) << "]";
  out << "; children:";
  for (auto& r :
       sql.exec("SELECT id, name, status, coalesce(object_key, ''), "
                "coalesce(error, ''), created_at, updated_at FROM "
                  + sql.table("runs") + " WHERE parent_id = $1 ORDER BY id",
                {id})
         .rows)
    out << " [" << cell(r[0]) << " " << cell(r[1]) << " " << cell(r[2]) << " "
        << cell(r[3]) << " '" << cell(r[4]) << "' " << cell(r[5]) << "-"
        << cell(r[6]) << "]";
  return out.str();
}

void check_inventory(client& c, test::sql_client& sql, check_report& rep) {
  std::set<std::string> booked;
  for (auto& r : sql.exec("SELECT id FROM " + sql.table("runs")
                          + " WHERE name = 'trip' AND status = 'SUCCESS'")
                   .rows)
    booked.insert(r[0].value_or(""));
  for (auto service : services) {
    std::size_t held = 0;
    for (int k = 0; k < inventory_keys; ++k) {
      auto key = "k" + std::to_string(k);
      auto s = c.object_state<inventory>(service, key).value_or(inventory{});
      held += s.held_by.size();
      if (s.capacity != s.free + static_cast<std::int64_t>(s.held_by.size()))
        rep.violations.push_back(std::string{service} + "/" + key
                                 + " lost inventory: capacity "
                                 + std::to_string(s.capacity) + ", free "
                                 + std::to_string(s.free) + ", held "
                                 + std::to_string(s.held_by.size()));
      for (auto& t : s.held_by)
        if (booked.count(t) == 0)
          rep.violations.push_back(std::string{service} + "/" + key
                                   + " is held by trip " + t
                                   + ", which did not end booked: "
                                   + describe_run(sql, t));
    }
    if (held != booked.size())
      rep.violations.push_back(std::to_string(booked.size())
                               + " trips ended booked but " + service
                               + " holds " + std::to_string(held) + " units");
  }
  rep.counts["trips booked"] = static_cast<std::int64_t>(booked.size());
}

void check_dedup(test::sql_client& sql, const std::vector<log_line>& effects,
                 const std::vector<log_line>& client_lines,
                 check_report& rep) {
  // While an item with a dedup id is queued or running, no other with it
  // is. Only what is known for sure counts: an item is live from its
  // enqueue's return (it committed before) to its first body's end (the
  // run ends after some body's end, and no later body ends earlier than
  // the first); two such spans of one dedup id must not overlap. The
  // stamps in the store would not do: a created stamp is taken before an
  // enqueue that may retry through an outage for seconds.
  std::map<std::string, long long> queued, first_end;
  for (auto& l : client_lines)
    if (l[0] == "QUEUED" && l.size() >= 3)
      queued[l[2]] = std::stoll(l[1]);
  for (auto& l : effects) {
    if (l[0] != "QE" || l.size() < 6)
      continue;
    auto at = std::stoll(l[1]);
    auto [i, fresh] = first_end.emplace(l[5], at);
    if (!fresh)
      i->second = std::min(i->second, at);
  }
  auto rows = sql.exec("SELECT queue_name, dedup_id, id FROM "
                       + sql.table("runs")
                       + " WHERE dedup_id IS NOT NULL ORDER BY 1, 2");
  struct span {
    std::string id;
    long long from, to;
  };
  std::map<std::pair<std::string, std::string>, std::vector<span>> by_id;
  for (auto& r : rows.rows) {
    auto id = r[2].value_or("");
    auto q = queued.find(id);
    auto e = first_end.find(id);
    if (q == queued.end() || e == first_end.end() || e->second <= q->second)
      continue; // nothing known for sure of when it was live
    by_id[{r[0].value_or(""), r[1].value_or("")}].push_back(
      {id, q->second, e->second});
  }
  std::int64_t checked = 0;
  for (auto& [key, spans] : by_id) {
    for (std::size_t i = 0; i < spans.size(); ++i)
      for (std::size_t j = i + 1; j < spans.size(); ++j) {
        ++checked;
        auto& a = spans[i];
        auto& b = spans[j];
        if (std::max(a.from, b.from) < std::min(a.to, b.to))
          rep.violations.push_back(
            "dedup id " + key.second + " held by " + a.id + " and " + b.id
            + " at once (queued at " + std::to_string(a.from) + " and "
            + std::to_string(b.from) + ", first bodies ended at "
            + std::to_string(a.to) + " and " + std::to_string(b.to)
            + ", mono ns)");
      }
  }
  rep.counts["dedup pairs checked"] = checked;
}

void check_started(test::sql_client& sql,
                   const std::vector<log_line>& client_lines,
                   check_report& rep) {
  std::set<std::string> deduped;
  for (auto& l : client_lines)
    if (l[0] == "DEDUPED" && l.size() >= 2)
      deduped.insert(l[1]);
  std::set<std::string> stored;
  for (auto& r : sql.exec("SELECT id FROM " + sql.table("runs")).rows)
    stored.insert(r[0].value_or(""));
  for (auto& l : client_lines) {
    if (l[0] != "STARTED" || l.size() < 3)
      continue;
    ++rep.counts["started " + l[1]];
    if (stored.count(l[2]) == 0 && deduped.count(l[2]) == 0
        && l[1] != "pay") // a call's id is the store's, not ours
      rep.violations.push_back("started " + l[1] + " " + l[2]
                               + " is not in the store");
  }
}

} // namespace

check_report check_invariants(const check_input& in) {
  check_report rep;
  process_history history{in.events, in.end_ns};
  auto effects = read_logs(in.dir, "effects.");
  auto client_lines = read_logs(in.dir, "clientlog.");

  // Client-side checks and errors.
  for (auto& l : client_lines) {
    if (l[0] == "BAD_IDEMPOTENT" || l[0] == "CLIENT_ERROR") {
      std::string s;
      for (auto& w : l)
        s += w + " ";
      rep.violations.push_back(s);
    }
  }

  // No step body ran after its checkpoint committed.
  std::int64_t bodies = 0, zombies = 0;
  for (auto& l : effects) {
    if (l[0] == "B")
      ++bodies;
    if (l[0] != "BAD_STEP" || l.size() < 5)
      continue;
    auto ns = std::stoll(l[1]);
    int pid = std::stoi(l[2]);
    // A body in a process that was stalled past its lease just before ran
    // as a zombie (its work was taken over; its checkpoint is fenced).
    if (history.stalled_during(pid, ns - 10'000'000'000LL, ns)) {
      ++zombies;
      continue;
    }
    rep.violations.push_back("step " + l[4] + " of " + l[3]
                             + " ran after its checkpoint committed (pid "
                             + l[2] + ")");
  }
  rep.counts["step bodies"] = bodies;
  rep.counts["step bodies after a stall (zombies)"] = zombies;

  // Never two holders of one key at once.
  std::int64_t abandoned = 0, excluded = 0, checked = 0;
  for (auto& [key, ivs] : intervals(effects, "E", "X", 2, history, abandoned)) {
    std::vector<interval> live;
    for (auto& iv : ivs) {
      if (history.stalled_during(iv.pid, iv.from, iv.to)) {
        ++excluded;
        continue;
      }
      live.push_back(iv);
    }
    checked += static_cast<std::int64_t>(live.size());
    auto [most, example] = most_at_once(live);
    if (most > 1)
      rep.violations.push_back("key " + key + " had " + std::to_string(most)
                               + " handlers at once:" + example);
  }
  rep.counts["handler intervals checked"] = checked;
  rep.counts["handler intervals abandoned"] = abandoned;
  rep.counts["handler intervals across a stall"] = excluded;

  // Queues: concurrency, partition concurrency, rate, by actual starts.
  abandoned = excluded = checked = 0;
  std::map<std::string, std::vector<interval>> by_queue, by_partition;
  for (auto& [group, ivs] : intervals(effects, "QS", "QE", 2, history,
                                      abandoned)) {
    auto queue = group.substr(0, group.find('/'));
    for (auto& iv : ivs) {
      if (history.stalled_during(iv.pid, iv.from, iv.to)) {
        ++excluded;
        continue;
      }
      ++checked;
      by_queue[queue].push_back(iv);
      by_partition[group].push_back(iv);
    }
  }
  rep.counts["queue intervals checked"] = checked;
  rep.counts["queue intervals across a stall"] = excluded;
  for (auto& [queue, ivs] : by_queue) {
    int limit = queue == jobs_queue ? jobs_concurrency : slow_concurrency;
    auto [most, example] = most_at_once(ivs);
    rep.counts["queue " + queue + " most at once"] = most;
    if (most > limit)
      rep.violations.push_back("queue " + queue + " ran " + std::to_string(most)
                               + " items at once (limit "
                               + std::to_string(limit) + "):" + example);
  }
  for (auto& [group, ivs] : by_partition) {
    if (group.rfind(jobs_queue, 0) != 0)
      continue;
    auto [most, example] = most_at_once(ivs);
    if (most > jobs_partition_concurrency)
      rep.violations.push_back("partition " + group + " ran "
                               + std::to_string(most) + " items at once:"
                               + example);
  }
  {
    // The rate is counted by when items are claimed on the database's
    // clock; a body starts a little later. A window shorter by the slack
    // the queue allows (its restamp margin, 30 ms, twice) must hold it.
    constexpr std::int64_t slack_ns = 100'000'000;
    std::vector<std::int64_t> starts;
    for (auto& iv : by_queue[jobs_queue])
      starts.push_back(iv.from);
    std::sort(starts.begin(), starts.end());
    std::int64_t window = std::int64_t{jobs_rate_period_ms} * 1'000'000 - slack_ns;
    std::size_t most = 0;
    for (std::size_t i = 0, j = 0; i < starts.size(); ++i) {
      while (starts[i] - starts[j] >= window)
        ++j;
      most = std::max(most, i - j + 1);
    }
    rep.counts["queue jobs most starts per window"] = static_cast<std::int64_t>(most);
    if (most > static_cast<std::size_t>(jobs_rate))
      rep.violations.push_back("queue jobs started " + std::to_string(most)
                               + " items in one rate window (limit "
                               + std::to_string(jobs_rate) + ")");
  }

  test::sql_client sql{in.db};
  check_runs(sql, rep);
  check_transactions(sql, rep);
  check_dedup(sql, effects, client_lines, rep);
  check_started(sql, client_lines, rep);
  config cfg;
  cfg.database_url = in.db.url;
  cfg.schema = in.db.schema;
  client c{cfg};
  check_money(c, client_lines, rep);
  check_inventory(c, sql, rep);
  return rep;
}

} // namespace perdure::torture
