// Both CLIs' parse: --help exits 0; a bad flag is one line, a pointer to --help, exit code 2.
#pragma once
#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>

// The exit code when the program must stop here, or nullopt to go on.
inline std::optional<int> parse_flags(CLI::App& app, int argc, char** argv, const char* program) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << program << ": error: " << e.what() << "\n(run " << program
              << " --help for usage)\n";
    return 2;
  }
}
