// The contract every fuzz target checks, and how a target is declared.
//
// A target is a function of one input (bytes). It feeds the input to the code under test the way
// a tool does and checks the contract of docs/reliability.md: the input is accepted, or rejected
// with a ppc::UserError whose message says where; nothing else escapes (no other exception, no
// crash), and what is accepted passes the target's own checks (a round trip, a re-parse).
//
// The same target runs under libFuzzer (fuzz/libfuzzer_main.cpp: a broken contract aborts, which
// libFuzzer reports as a finding) and in the normal test suite (tests/fuzz/fuzz_corpus_test.cpp
// replays the committed corpus and every regression input: a broken contract fails the test).
//
// Declaring one:
//   PP_FUZZ_TARGET(layout) {
//     ppfuzz::accepted([&] { return ppc::parse_layout(input); });
//   }
#pragma once

#include <exception>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "compiler/diagnostic.h"

namespace ppfuzz {

// What happens when a contract is broken: `what` describes it. Fuzzing prints it and aborts;
// the tests throw a Violation.
using ViolationHandler = void (*)(const std::string& what);
void set_violation_handler(ViolationHandler handler);
[[noreturn]] void violation(const std::string& what);

// Thrown by the tests' handler; never caught by the wrappers below.
struct Violation : std::logic_error {
  using std::logic_error::logic_error;
};

// A rejection must be a UserError whose first line says where (names the input) and what.
void check_user_error(const ppc::UserError& e);

// Runs `body`, which the input may make fail only with a UserError. Returns its result if the
// input was accepted, nothing if it was rejected; anything else is a violation.
template <class Fn>
auto accepted(Fn&& body) -> std::optional<decltype(body())> {
  try {
    return body();
  } catch (const Violation&) {
    throw;
  } catch (const ppc::UserError& e) {
    check_user_error(e);
  } catch (const ppc::InternalError& e) {
    violation(std::string("internal error: ") + e.what());
  } catch (const std::bad_alloc&) {
    violation("std::bad_alloc (unbounded allocation)");
  } catch (const std::exception& e) {
    violation(std::string("exception ") + typeid(e).name() + ": " + e.what());
  } catch (...) {
    violation("an exception that is not a std::exception");
  }
  return std::nullopt;
}

// Runs `body`, which must not fail at all (checks on an accepted input): `what` names the check.
template <class Fn>
void must_succeed(const char* what, Fn&& body) {
  try {
    body();
  } catch (const Violation&) {
    throw;
  } catch (const ppc::UserError& e) {
    violation(std::string(what) + ": UserError on an accepted input: " + e.format());
  } catch (const std::exception& e) {
    violation(std::string(what) + ": " + typeid(e).name() + ": " + e.what());
  } catch (...) {
    violation(std::string(what) + ": an exception that is not a std::exception");
  }
}

inline void expect(bool ok, const std::string& what) {
  if (!ok) violation(what);
}

// --- The registry of targets (one per binary under libFuzzer, all of them in the tests) ---------
using TargetFn = void (*)(std::string_view input);
struct Target {
  std::string name;
  TargetFn fn;
};
int register_target(const char* name, TargetFn fn);
const std::vector<Target>& targets();

}  // namespace ppfuzz

#define PP_FUZZ_TARGET(name)                                    \
  static void pp_fuzz_target_##name(std::string_view input);    \
  [[maybe_unused]] static const int pp_fuzz_registered_##name = \
      ::ppfuzz::register_target(#name, pp_fuzz_target_##name);  \
  static void pp_fuzz_target_##name(std::string_view input)
