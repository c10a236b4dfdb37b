#include "fuzz/fuzz_target.h"

#include <cstdio>
#include <cstdlib>

namespace ppfuzz {

namespace {

void abort_handler(const std::string& what) {
  std::fprintf(stderr, "\n==== fuzz contract violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

ViolationHandler& handler() {
  static ViolationHandler h = abort_handler;
  return h;
}

std::vector<Target>& registry() {
  static std::vector<Target> r;
  return r;
}

}  // namespace

void set_violation_handler(ViolationHandler h) {
  handler() = h;
}

void violation(const std::string& what) {
  handler()(what);
  std::abort();  // a handler that returns
}

void check_user_error(const ppc::UserError& e) {
  const std::string& m = e.message();
  if (m.find_first_not_of(" \t\n") == std::string::npos) violation("UserError without a message");
  if (m.substr(0, m.find('\n')).find_first_not_of(" \t") == std::string::npos)
    violation("UserError whose first line is blank: " + m);
  if (e.where().input.empty()) violation("UserError that does not name its input: " + m);
  (void)e.format();  // draws the caret line too
}

int register_target(const char* name, TargetFn fn) {
  registry().push_back(Target{name, fn});
  return static_cast<int>(registry().size());
}

const std::vector<Target>& targets() {
  return registry();
}

}  // namespace ppfuzz
