#include "perdure/persistence/journal_writer.hpp"

#include <spdlog/spdlog.h>

#include "perdure/error.hpp"
#include "perdure/persistence/store.hpp"

namespace perdure::persistence {

journal_writer::journal_writer(std::unique_ptr<store> db, options opts)
  : db_(std::move(db)), opts_(opts) {
  thread_ = std::thread{[this] { run(); }};
}

journal_writer::~journal_writer() {
  {
    std::lock_guard guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
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

void journal_writer::run() {
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
    write_batch batch;
    std::vector<std::pair<bool, std::size_t>> slots; // (is_append, index)
    slots.reserve(taken.size());
    for (auto& req : taken) {
      if (auto* a = std::get_if<append_write>(&req.write)) {
        slots.emplace_back(true, batch.appends.size());
        batch.appends.push_back(std::move(*a));
      } else {
        slots.emplace_back(false, batch.completions.size());
        batch.completions.push_back(
          std::move(std::get<completion_write>(req.write)));
      }
    }
    std::vector<write_ack> acks(taken.size(), write_ack::failed);
    try {
      auto result = db_->write_batch(batch);
      for (std::size_t i = 0; i < taken.size(); ++i) {
        auto [is_append, idx] = slots[i];
        auto ok = is_append ? result.appends[idx] : result.completions[idx];
        acks[i] = ok ? write_ack::committed : write_ack::rejected;
      }
      std::lock_guard guard{mtx_};
      ++batches_;
    } catch (const std::exception& ex) {
      spdlog::error("perdure: journal batch of {} writes failed: {}",
                    taken.size(), ex.what());
    }
    for (std::size_t i = 0; i < taken.size(); ++i)
      if (taken[i].done)
        taken[i].done(acks[i]);
    taken.clear();
  }
}

} // namespace perdure::persistence
