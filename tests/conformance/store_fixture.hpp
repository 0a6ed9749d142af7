#pragma once

// The store under test, fresh for each case, and the rows the cases write.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "perdure/persistence/store.hpp"
#include "support/test_support.hpp"

namespace perdure::test {

using namespace perdure::persistence;

class store_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    store_ = open_store(db_.store_options());
    store_->migrate();
  }

  run_record make_run(std::string id, std::string inputs = "{\"value\":1}") {
    run_record r;
    r.id = std::move(id);
    r.name = "wf";
    r.inputs = std::move(inputs);
    r.owner = {"exec-a", 1};
    r.created_at_ms = 1000;
    return r;
  }

  append_write append(const std::string& run, int seq, fence owner,
                      std::string payload = "p") {
    append_write w;
    w.owner = std::move(owner);
    w.entry.run_id = run;
    w.entry.seq = seq;
    w.entry.name = "step-" + std::to_string(seq);
    w.entry.payload = std::move(payload);
    w.entry.created_at_ms = 2000;
    return w;
  }

  /// Claims runs of workflow "wf" (what `make_run` makes).
  const claim_filter wf_{.names = {"wf"}, .app_version = ""};

  static void create_accounts(test::sql_client& sql) {
    sql.exec("CREATE TABLE " + sql.table("accounts")
             + " (id TEXT PRIMARY KEY, balance INTEGER)");
  }

  test::database db_;
  std::unique_ptr<store> store_;
};


} // namespace perdure::test
