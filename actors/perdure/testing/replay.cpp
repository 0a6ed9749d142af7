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
#include "perdure/workflow_context.hpp"

namespace perdure::testing {

namespace {

std::string describe(persistence::entry_kind kind, const std::string& name) {
  return std::string{persistence::to_string(kind)} + " '" + name + "'";
}

class replay_core final : public detail::run_core {
public:
  replay_core(detail::exported_run& run, const detail::workflow_entry& entry)
    : entry_(&entry) {
    run_id_ = run.id;
    max_payload_ = std::numeric_limits<std::size_t>::max();
    // Sleeps recorded before the export are due: the run passed them.
    now_ = run.exported_at_ms;
    for (auto& e : run.journal)
      now_ = std::max(now_, e.created_at_ms);
    load_journal(std::move(run.journal));
  }

  void perform(detail::operation op, std::coroutine_handle<> h) override {
    if (op.kind == persistence::entry_kind::transaction
        && !find_recorded(op.seq))
      if (auto kept = take_carried(op.name)) { // an earlier attempt's commit
        kept->seq = op.seq;
        record_outcome(std::move(*kept));
        h.resume();
        return;
      }
    // New ground: a live run would do it now; the check stops here.
    if (!stopped_)
      stopped_ = std::make_unique<stop>(stop{op.seq, describe(op.kind, op.name)});
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
  /// journal does not hold.
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

  using run_core::fatal;
  using run_core::peek_seq;

private:
  bool declares_patch(const std::string& name) const override {
    return std::find(entry_->patches.begin(), entry_->patches.end(), name)
           != entry_->patches.end();
  }

  const detail::workflow_entry* entry_;
  std::int64_t now_ = 0;
};

replay_report unusable(std::string why) {
  replay_report r;
  r.result = replay_report::verdict::unusable;
  r.summary = std::move(why);
  return r;
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
  std::vector<std::int32_t> indexes; // what the journal recorded
  for (auto& e : run.journal)
    if (e.seq >= 0)
      indexes.push_back(e.seq);
  replay_core core{run, entry->second};
  replay_report report;
  if (auto* why = core.fatal())
    return unusable("run '" + id + "' cannot be replayed: " + *why);
  std::string ended;
  {
    workflow_context ctx{core};
    auto driver = entry->second.start(ctx, std::move(run.inputs),
                                      persistence::encoding::json);
    driver->start();
    if (driver->done() && !core.divergence_) {
      try {
        driver->take_result();
        ended = "its code finished";
      } catch (const perdure::error& ex) {
        ended = std::string{"its code ended with an error: "} + ex.what();
      } catch (const std::exception& ex) {
        ended = std::string{"its code ended with an error: "} + ex.what();
      }
      if (!core.divergence_) {
        // The code ended: nothing may be recorded after where it stopped.
        if (auto* more = core.recorded_from(core.peek_seq()))
          core.divergence_ = std::make_unique<replay_core::divergence>(
            replay_core::divergence{more->seq, "nothing (" + ended + ")",
                                    describe(more->kind, more->name)});
      }
    }
    // The driver (and the suspended coroutine) go before the core.
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
                     + " (add a patch: workflow_context::patched)";
    return report;
  }
  if (core.stopped_)
    report.summary = "run '" + id + "' replays: "
                     + std::to_string(report.replayed)
                     + " recorded operations matched; at journal index "
                     + std::to_string(core.stopped_->seq)
                     + " the code goes on with " + core.stopped_->what
                     + " (not run)";
  else
    report.summary = "run '" + id + "' replays: "
                     + std::to_string(report.replayed)
                     + " recorded operations matched, and " + ended;
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
