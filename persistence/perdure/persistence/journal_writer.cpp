#include "perdure/persistence/journal_writer.hpp"

#include <spdlog/spdlog.h>

#include "perdure/error.hpp"
#include "perdure/persistence/store.hpp"

namespace perdure::persistence {

journal_writer::journal_writer(std::vector<std::unique_ptr<store>> connections,
                               options opts)
  : connections_(std::move(connections)), opts_(opts) {
  for (auto& db : connections_)
    threads_.emplace_back([this, &db] { run(*db); });
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
  cv_.notify_all();
  for (auto& t : threads_)
    t.join();
}

void journal_writer::create(run_record run, callback done) {
  push(request{std::move(run), std::move(done)});
}

void journal_writer::append(append_write w, callback done) {
  push(request{std::move(w), std::move(done)});
}

void journal_writer::complete(completion_write w, callback done) {
  push(request{std::move(w), std::move(done)});
}

std::uint64_t journal_writer::batches_committed() const {
  std::lock_guard guard{mtx_};
  return batches_;
}

void journal_writer::push(request req) {
  {
    std::lock_guard guard{mtx_};
    queue_.push_back(std::move(req));
  }
  cv_.notify_one();
}

void journal_writer::run(store& db) {
  std::vector<request> taken;
  for (;;) {
    {
      std::unique_lock guard{mtx_};
      cv_.wait(guard, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty())
        return; // stopping and drained
      if (queue_.size() <= opts_.max_batch) {
        taken.swap(queue_);
      } else {
        auto first = queue_.begin();
        auto last = first + static_cast<std::ptrdiff_t>(opts_.max_batch);
        taken.assign(std::make_move_iterator(first),
                     std::make_move_iterator(last));
        queue_.erase(first, last);
      }
    }
    // Split the requests into the batch, remembering where each one went.
    pending_batch batch;
    std::vector<slot> slots;
    slots.reserve(taken.size());
    for (auto& req : taken) {
      if (auto* r = std::get_if<run_record>(&req.write)) {
        slots.emplace_back(kind::create, batch.creates.size());
        batch.creates.push_back(std::move(*r));
      } else if (auto* a = std::get_if<append_write>(&req.write)) {
        slots.emplace_back(kind::append, batch.writes.appends.size());
        batch.writes.appends.push_back(std::move(*a));
      } else {
        slots.emplace_back(kind::complete, batch.writes.completions.size());
        batch.writes.completions.push_back(
          std::move(std::get<completion_write>(req.write)));
      }
    }
    bool unavailable = false;
    auto acks = commit(db, batch, slots, unavailable);
    if (!acks && !unavailable && taken.size() > 1) {
      // The database refused the batch (not merely unreachable): one bad
      // write must not fail the others, so commit them one by one.
      acks.emplace();
      for (std::size_t i = 0; i < taken.size(); ++i) {
        pending_batch single;
        auto [k, idx] = slots[i];
        if (k == kind::create)
          single.creates.push_back(batch.creates[idx]);
        else if (k == kind::append)
          single.writes.appends.push_back(batch.writes.appends[idx]);
        else
          single.writes.completions.push_back(batch.writes.completions[idx]);
        auto one = commit(db, single, {{k, 0}}, unavailable);
        acks->push_back(one ? one->front() : write_ack::failed);
      }
    }
    if (!acks)
      acks.emplace(taken.size(), write_ack::failed);
    for (std::size_t i = 0; i < taken.size(); ++i)
      if (taken[i].done)
        taken[i].done((*acks)[i]);
    taken.clear();
  }
}

std::optional<std::vector<write_ack>>
journal_writer::commit(store& db, const pending_batch& batch,
                       const std::vector<slot>& slots, bool& unavailable) {
  try {
    // Runs first: nothing in the same batch depends on them (a run's first
    // append follows its acknowledged creation), so two commits are fine,
    // and a batch without creations stays one statement.
    std::vector<bool> created;
    if (!batch.creates.empty())
      created = db.create_runs(batch.creates);
    batch_result result;
    if (!batch.writes.empty())
      result = db.write_batch(batch.writes);
    std::vector<write_ack> acks;
    acks.reserve(slots.size());
    for (auto [k, idx] : slots) {
      auto ok = k == kind::create   ? created[idx]
                : k == kind::append ? result.appends[idx]
                                    : result.completions[idx];
      acks.push_back(ok ? write_ack::committed : write_ack::rejected);
    }
    std::lock_guard guard{mtx_};
    ++batches_;
    return acks;
  } catch (const perdure::error& ex) {
    unavailable = ex.code() == errc::store_unavailable;
    spdlog::error("perdure: journal batch of {} writes failed: {}",
                  slots.size(), ex.what());
  } catch (const std::exception& ex) {
    spdlog::error("perdure: journal batch of {} writes failed: {}",
                  slots.size(), ex.what());
  }
  return std::nullopt;
}

} // namespace perdure::persistence
