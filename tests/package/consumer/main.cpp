// Runs one durable workflow on an SQLite file through an installed Perdure,
// and opens its admin endpoint.
//   consumer <sqlite file>

#include <iostream>
#include <string>

#include <perdure/admin/endpoint.hpp>
#include <perdure/perdure.hpp>
#include <perdure/sagas/saga.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: consumer <sqlite file>\n";
    return 2;
  }
  perdure::runtime rt{{.database_url = std::string{"sqlite://"} + argv[1]}};
  rt.register_workflow("greet", [](perdure::workflow_context& ctx,
                                   std::string who) -> perdure::task<std::string> {
    co_return co_await ctx.step("greet", [&] { return "hello, " + who; });
  });
  rt.register_workflow("undo", [](perdure::workflow_context& ctx) -> perdure::task<int> {
    co_return co_await perdure::sagas::run<int>(
      ctx, [](perdure::sagas::saga& s) -> perdure::task<int> {
        co_return co_await s.step("one", [] { return 1; }, [](const int&) {});
      });
  });
  rt.start();
  auto out = rt.start_workflow<std::string>("greet", std::string{"package"})
               .get(std::chrono::seconds{10});
  auto saga = rt.start_workflow<int>("undo").get(std::chrono::seconds{10});
  // The admin endpoint links from the installed package too.
  perdure::admin::endpoint admin{rt, {.listen = "127.0.0.1:0"}};
  std::cout << out << " (perdure " << perdure::version << ", admin on port "
            << admin.port() << ")\n";
  return out == "hello, package" && saga == 1 && admin.port() > 0 ? 0 : 1;
}
