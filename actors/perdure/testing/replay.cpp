// The replay check (replay.hpp): a run_core that serves the exported
// journal and stops the code where it would run something new.

#include "perdure/testing/replay.hpp"

#include <algorithm>
#include <limits>
#include <vector>
#include <fstream>
#include <iostream>
#include <sstream>

#include "perdure/detail/export/exported_run.hpp"
#include "perdure/detail/run_core.hpp"
#include "perdure/error.hpp"
#include "perdure/run_status.hpp"
#include "perdure/workflow_context.hpp"

namespace perdure::testing {

namespace {

std::string describe(persistence::entry_kind kind, const std::string& name) {
  return std::string{persistence::to_string(kind)} + " '" + name + "'";
}

class replay_core final : public detail::run_core {
public:
  replay_core(detail::exported_run& run, const detail::workflow_entry& entry)
    : entry_(&entry), cancel_requested_(run.cancel_requested) {
    run_id_ = run.id;
    max_payload_ = std::numeric_limits<std::size_t>::max();
    now_ = run.exported_at_ms;
    for (auto& e : run.journal)
      now_ = std::max(now_, e.created_at_ms);
    load_journal(std::move(run.journal));
  }

  void perform(detail::operation op, std::coroutine_handle<> h) override {
    if (stopped_ || divergence_)
      return; // the code caught what stopped it: the check is over
    using persistence::entry_kind;
    if (op.kind == entry_kind::transaction && !find_recorded(op.seq))
      if (auto kept = take_carried(op.name)) { // an earlier attempt's commit
        kept->seq = op.seq;
        record_outcome(std::move(*kept));
        h.resume();
        return;
      }
    // A recorded sleep not due by the export's clock (cut short by a
    // cancel, or clocks apart): the run went on past it.
    if (op.kind == entry_kind::sleep && find_recorded(op.seq)) {
      h.resume();
      return;
    }
    auto at = op.seq < 0 ? peek_seq() : op.seq; // a patch marker: here
    auto* later = recorded_from(at);
    if (!later) { // new ground: a live run would do it now; stop here
      stopped_ = std::make_unique<stop>(stop{at, describe(op.kind, op.name)});
      return;
    }
    // The journal goes on, so the run did not do this here: a cancelled
    // saga skips the operation it observed the cancel at (not recorded).
    if (cancel_requested_ && op.seq >= 0) {
      persistence::journal_entry skipped;
      skipped.seq = op.seq;
      skipped.kind = op.kind;
      skipped.name = op.name;
      skipped.outcome = persistence::outcome::cancelled;
      record_outcome(std::move(skipped));
      h.resume();
      return;
    }
    divergence_ = std::make_unique<divergence>(divergence{
      at, describe(op.kind, op.name),
      "nothing there (then " + describe(later->kind, later->name)
        + " at index " + std::to_string(later->seq) + ")"});
  }

  std::int64_t now_ms() const override {
    return now_;
  }

  void diverged(std::int32_t seq, persistence::entry_kind kind,
                const std::string& name,
                const persistence::journal_entry& recorded) override {
    if (!divergence_)
      divergence_ = std::make_unique<divergence>(
        divergence{seq, describe(kind, name),
                   describe(recorded.kind, recorded.name)});
  }

  /// Where the code stopped: the first operation it asked for that the
  /// journal does not hold, with nothing recorded after it.
  struct stop {
    std::int32_t seq;
    std::string what;
  };
  struct divergence {
    std::int32_t seq;
    std::string expected, recorded;
  };
  std::unique_ptr<stop> stopped_;
  std::unique_ptr<divergence> divergence_;

  /// The first recorded operation at or after index `from` on the path
  /// the run replays, or null.
  const persistence::journal_entry* recorded_from(std::int32_t from) const {
    if (!recorded_)
      return nullptr;
    for (auto& [seq, e] : *recorded_)
      if (seq >= from && !(e.kind == persistence::entry_kind::phase
                           && e.name == "attempt"))
        return &e;
    return nullptr;
  }

  /// A patch the run took that its workflow no longer declares, or null
  /// (a process of today's code would give the run up).
  const std::string* undeclared_patch() const {
    if (patches_)
      for (auto& [patch, before] : *patches_)
        if (!declares_patch(patch))
          return &patch;
    return nullptr;
  }

  using run_core::fatal;
  using run_core::peek_seq;

private:
  bool declares_patch(const std::string& name) const override {
    return std::find(entry_->patches.begin(), entry_->patches.end(), name)
           != entry_->patches.end();
  }

  const detail::workflow_entry* entry_;
  bool cancel_requested_;
  std::int64_t now_ = 0;
};

replay_report unusable(std::string why) {
  replay_report r;
  r.result = replay_report::verdict::unusable;
  r.summary = std::move(why);
  return r;
}

/// Whether a run recorded as `status` can have ended with an error.
bool ended_with_error(const std::string& status) {
  auto s = parse_run_status(status);
  return s && is_terminal(*s) && *s != run_status::success;
}

/// Runs the code on `core` until it stops, diverges or ends; returns how
/// it ended, if it did ("finished", or the error), and whether the error
/// is one the code's own failure explains (not Perdure refusing it).
struct code_end {
  bool ended = false;
  bool failed = false;
  bool refused = false; // Perdure's error: an undeclared patch, ...
  std::string how;
};

code_end run_code(replay_core& core, const detail::workflow_entry& entry,
                  std::string inputs) {
  code_end end;
  workflow_context ctx{core};
  auto driver = entry.start(ctx, std::move(inputs),
                            persistence::encoding::json);
  driver->start();
  if (!driver->done())
    return end; // suspended where the check stopped
  end.ended = true;
  try {
    driver->take_result();
    end.how = "its code finished";
  } catch (const perdure::error& ex) {
    end.failed = true;
    end.refused = ex.code() == errc::invalid_argument
                  || ex.code() == errc::store_error;
    end.how = std::string{"its code ended with an error: "} + ex.what();
  } catch (const std::exception& ex) {
    end.failed = true;
    end.how = std::string{"its code ended with an error: "} + ex.what();
  } catch (...) {
    end.failed = true;
    end.how = "its code ended with an exception of an unknown type";
  }
  return end; // the driver (and a suspended frame) go before the core
}

} // namespace

replay_report replayer::replay(const std::string& exported) const {
  detail::exported_run run;
  try {
    run = detail::from_json(exported);
  } catch (const perdure::error& ex) {
    return unusable(ex.what());
  }
  auto entry = workflows_.find(run.workflow);
  if (entry == workflows_.end())
    entry = workflows_.find(std::string{});
  if (entry == workflows_.end())
    return unusable("run '" + run.id + "' is of workflow '" + run.workflow
                    + "', which is not registered: register it on the "
                      "replayer as on the runtime");
  auto id = run.id;
  auto status = run.status;
  std::vector<std::int32_t> indexes; // what the journal recorded
  for (auto& e : run.journal)
    if (e.seq >= 0)
      indexes.push_back(e.seq);
  replay_core core{run, entry->second};
  replay_report report;
  if (auto* why = core.fatal())
    return unusable("run '" + id + "' cannot be replayed: " + *why);
  if (auto* patch = core.undeclared_patch()) {
    report.result = replay_report::verdict::diverges;
    report.expected = "no patch '" + *patch + "'";
    report.recorded = "patch '" + *patch + "'";
    report.summary = "run '" + id + "' took patch '" + *patch
                     + "', which the code does not declare: keep it in "
                       "workflow_options::patches (deprecated_patch) while "
                       "runs that took it are in flight";
    return report;
  }
  auto end = run_code(core, entry->second, std::move(run.inputs));
  if (end.ended && !core.divergence_) {
    // The code ended: nothing may be recorded after where it ended, and
    // an error must be one the run ended with too.
    if (auto* more = core.recorded_from(core.peek_seq()))
      core.divergence_ = std::make_unique<replay_core::divergence>(
        replay_core::divergence{more->seq, "nothing (" + end.how + ")",
                                describe(more->kind, more->name)});
    else if (end.refused || (end.failed && !ended_with_error(status)))
      core.divergence_ = std::make_unique<replay_core::divergence>(
        replay_core::divergence{core.peek_seq(), "an end (" + end.how + ")",
                                "a run that is " + status});
  }
  auto reached = core.divergence_ ? core.divergence_->seq
                 : core.stopped_   ? core.stopped_->seq
                                   : core.peek_seq();
  report.replayed = static_cast<std::int32_t>(std::count_if(
    indexes.begin(), indexes.end(), [&](auto seq) { return seq < reached; }));
  if (auto& d = core.divergence_) {
    report.result = replay_report::verdict::diverges;
    report.index = d->seq;
    report.expected = d->expected;
    report.recorded = d->recorded;
    report.summary = "run '" + id + "' diverges at journal index "
                     + std::to_string(d->seq) + ": the code asks for "
                     + d->expected + " but the journal recorded "
                     + d->recorded
                     + " (branch with workflow_context::patched)";
    return report;
  }
  report.summary = "run '" + id + "' replays: "
                   + std::to_string(report.replayed)
                   + " recorded operations matched";
  if (core.stopped_)
    report.summary += "; at journal index "
                      + std::to_string(core.stopped_->seq)
                      + " the code goes on with " + core.stopped_->what
                      + " (not run)";
  else
    report.summary += ", and " + end.how;
  return report;
}

replay_report replayer::replay_file(const std::string& path) const {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return unusable("cannot read '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return replay(text.str());
}

int replayer::main(int argc, char** argv) const {
  if (argc < 2) {
    std::cerr << "usage: " << (argc > 0 ? argv[0] : "replay")
              << " EXPORTED_RUN.json...\n";
    return 2;
  }
  int failed = 0;
  for (int i = 1; i < argc; ++i) {
    auto report = replay_file(argv[i]);
    std::cout << (report.ok() ? "REPLAYS  " : "FAILS    ") << argv[i] << ": "
              << report.summary << "\n";
    failed += report.ok() ? 0 : 1;
  }
  return failed == 0 ? 0 : 1;
}

} // namespace perdure::testing
