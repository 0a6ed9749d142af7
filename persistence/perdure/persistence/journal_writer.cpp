#include "perdure/persistence/journal_writer.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string_view>

#include <spdlog/spdlog.h>

#include "perdure/error.hpp"
#include "perdure/persistence/detail/log.hpp"
#include "perdure/persistence/store.hpp"
#include "perdure/telemetry/metrics.hpp"

namespace perdure::persistence {

journal_writer::journal_writer(std::vector<std::unique_ptr<store>> connections,
                               options opts)
  : connections_(std::move(connections)), opts_(opts) {
  for (auto& db : connections_) {
    lanes_.push_back(std::make_unique<lane>());
    lanes_.back()->db = db.get();
  }
  for (auto& l : lanes_)
    threads_.emplace_back([this, &l = *l] { run(l); });
}

journal_writer::journal_writer(std::unique_ptr<store> db, options opts)
  : journal_writer(one(std::move(db)), opts) {
}

std::vector<std::unique_ptr<store>>
journal_writer::one(std::unique_ptr<store> db) {
  std::vector<std::unique_ptr<store>> result;
  result.push_back(std::move(db));
  return result;
}

journal_writer::~journal_writer() {
  {
    std::lock_guard guard{mtx_};
    stopping_ = true;
  }
  for (auto& l : lanes_)
    l->cv.notify_all();
  for (auto& t : threads_)
    t.join();
}


std::uint64_t journal_writer::batches_committed() const {
  std::lock_guard guard{mtx_};
  return batches_;
}

void journal_writer::wake_one() {
  if (wake_pending_)
    return;
  for (auto& l : lanes_) {
    if (l->idle && !l->lent) {
      wake_pending_ = true;
      l->cv.notify_one();
      return;
    }
  }
}

std::uint64_t journal_writer::key_of(const write& w) const {
  if (lanes_.size() < 2)
    return 0; // one lane commits everything in order
  const std::string* type = nullptr;
  const std::string* key = nullptr;
  if (auto* run = std::get_if<run_record>(&w); run && !run->object_type.empty()) {
    type = &run->object_type;
    key = &run->object_key;
  } else if (auto* end = std::get_if<invocation_commit>(&w)) {
    type = &end->object_type;
    key = &end->object_key;
  } else {
    return 0;
  }
  std::uint64_t h = std::hash<std::string_view>{}(*type);
  h ^= std::hash<std::string_view>{}(*key) + 0x9e3779b97f4a7c15ULL + (h << 6)
       + (h >> 2);
  return h == 0 ? 1 : h; // two keys of one hash merely wait for each other
}

bool journal_writer::in_flight_elsewhere(const lane& l,
                                         std::uint64_t key) const {
  for (auto& other : lanes_)
    if (other.get() != &l && other->keys.count(key) != 0)
      return true;
  return false;
}

void journal_writer::take(lane& l, std::vector<request>& taken) {
  // Leave behind what the batch has no room for, and a key's writes while
  // another lane commits earlier ones of that key (they keep their order).
  std::vector<request> rest;
  for (auto& r : queue_) {
    if (taken.size() < opts_.max_batch
        && (r.key == 0 || !in_flight_elsewhere(l, r.key))) {
      if (r.key != 0)
        l.keys.insert(r.key);
      taken.push_back(std::move(r));
    } else {
      rest.push_back(std::move(r));
    }
  }
  queue_.swap(rest);
  if (!queue_.empty())
    wake_one(); // the rest for another lane
}

void journal_writer::submit(write w, callback done, bool may_commit_here) {
  lane* borrowed = nullptr;
  std::vector<request> taken;
  auto key = key_of(w); // lanes_ is fixed: no lock needed
  {
    std::lock_guard guard{mtx_};
    queue_.push_back(request{std::move(w), std::move(done), key});
    if (may_commit_here && !stopping_) {
      for (auto& l : lanes_) {
        if (l->idle && !l->lent) {
          borrowed = l.get();
          break;
        }
      }
    }
    if (!borrowed) {
      wake_one();
      return;
    }
    borrowed->lent = true;
    take(*borrowed, taken);
  }
  process(*borrowed->db, taken);
  {
    std::lock_guard guard{mtx_};
    borrowed->keys.clear();
    borrowed->lent = false;
    if (!queue_.empty() || stopping_)
      borrowed->cv.notify_one(); // its thread takes what came meanwhile
  }
}

void journal_writer::run(lane& l) {
  std::vector<request> taken;
  for (;;) {
    {
      std::unique_lock guard{mtx_};
      l.keys.clear(); // its last batch is committed and called back
      // Idle only while it waits: a wake-up must reach a lane that waits.
      for (;;) {
        if (!l.lent && !queue_.empty()) {
          take(l, taken);
          if (!taken.empty())
            break;
          // All of it waits for keys another lane commits: that lane
          // takes it next, so at a stop this one may leave.
          if (stopping_)
            return;
        } else if (!l.lent && stopping_) {
          return; // drained
        }
        l.idle = true;
        l.cv.wait(guard);
        l.idle = false;
        wake_pending_ = false; // woken (or not): the next write wakes one
      }
    }
    process(*l.db, taken);
  }
}

void journal_writer::process(store& db, std::vector<request>& taken) {
  // Split the requests into the batch, remembering where each one went.
  write_batch batch;
  std::vector<slot> slots;
  slots.reserve(taken.size());
  for (auto& req : taken)
    slots.push_back(batch.add(std::move(req.write)));
  bool unavailable = false;
  auto error = errc::none;
  auto results = commit(db, batch, slots, unavailable, error);
  // The database refused the batch, or part of it that commits apart (not
  // merely unreachable): one bad write must not fail the others, so those
  // refused are committed one by one.
  auto refused = [](const write_result& r) {
    return r.ack == write_ack::failed && r.error != errc::store_unavailable
           && r.error != errc::store_full;
  };
  bool alone =
    results ? std::count_if(results->begin(), results->end(), refused) > 1
            : !unavailable && taken.size() > 1;
  if (alone && !results)
    results.emplace(taken.size(), write_result{write_ack::failed, {}, error});
  for (std::size_t i = 0; alone && i < slots.size(); ++i) {
    if (!refused((*results)[i]))
      continue;
    auto one = commit(db, batch.single(slots[i]), {slot{slots[i].kind, 0}},
                      unavailable, error);
    (*results)[i] = one ? std::move(one->front())
                        : write_result{write_ack::failed, {}, error};
  }
  if (!results)
    results.emplace(taken.size(), write_result{write_ack::failed, {}, error});
  for (std::size_t i = 0; i < taken.size(); ++i)
    if (taken[i].done)
      taken[i].done(std::move((*results)[i]));
  taken.clear();
}

std::optional<std::vector<write_result>>
journal_writer::commit(store& db, const write_batch& batch,
                       const std::vector<slot>& slots, bool& unavailable,
                       errc& error) {
  try {
    auto began = std::chrono::steady_clock::now();
    auto result = db.write_batch(batch);
    if (auto* m = opts_.metrics) {
      if (m->commit_seconds)
        m->commit_seconds->observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now()
                                        - began)
            .count());
      if (m->batch_writes)
        m->batch_writes->observe(static_cast<double>(slots.size()));
    }
    if (result.invocations_failed != errc::none)
      detail::log_to(opts_.logger)
        .error("perdure: the object call ends of a journal batch of {} "
               "writes failed ({}) after its other writes committed; those "
               "calls are tried again once the store answers",
               slots.size(), to_string(result.invocations_failed));
    std::vector<write_result> results;
    results.reserve(slots.size());
    for (auto s : slots) {
      write_result r;
      if (s.kind == kind_of<invocation_commit>()
          && result.invocations_failed != errc::none) {
        results.push_back({write_ack::failed, {}, result.invocations_failed});
        continue;
      }
      bool ok = result.took_effect(s);
      r.ack = ok ? write_ack::committed : write_ack::rejected;
      auto idx = s.index;
      if (ok && s.kind == kind_of<run_record>()) {
        r.enqueued = idx < result.enqueued.size() && result.enqueued[idx];
        if (idx < result.inbox_seqs.size())
          r.inbox_seq = result.inbox_seqs[idx];
      }
      if (ok && s.kind == kind_of<append_write>()
          && idx < result.recorded.size() && result.recorded[idx]) {
        auto& stored = *result.recorded[idx];
        auto& sent = batch.appends[idx].entry;
        // Our own earlier write of the same outcome (an in-doubt commit
        // sent again) is simply committed.
        if (stored.outcome != sent.outcome || stored.payload != sent.payload
            || stored.error != sent.error || stored.kind != sent.kind
            || stored.name != sent.name) {
          r.ack = write_ack::superseded;
          r.recorded = std::move(stored);
        }
      }
      results.push_back(std::move(r));
    }
    std::lock_guard guard{mtx_};
    ++batches_;
    return results;
  } catch (const perdure::error& ex) {
    error = ex.code();
    unavailable = ex.code() == errc::store_unavailable
                  || ex.code() == errc::store_full;
    detail::log_to(opts_.logger)
      .error("perdure: journal batch of {} writes failed: {}", slots.size(),
             ex.what());
  } catch (const std::exception& ex) {
    error = errc::store_error;
    detail::log_to(opts_.logger)
      .error("perdure: journal batch of {} writes failed: {}", slots.size(),
             ex.what());
  }
  return std::nullopt;
}

} // namespace perdure::persistence
