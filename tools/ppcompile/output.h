// Where ppcompile writes its output: stdout, or -o FILE atomically.
//
// The output is opened once the plan has been built and verified, and the emitter writes into
// stream() as it goes (large writes; the text is not held in memory). A FILE is written as a
// temporary file next to it and renamed into place by commit(): on any failure before that the
// temporary file is removed and an existing FILE is left as it was.
#pragma once

#include <fstream>
#include <ostream>
#include <string>

class Output {
 public:
  // Throws ppc::UserError (field "-o") if FILE's temporary file cannot be created.
  explicit Output(std::string path);
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  ~Output();  // removes the temporary file unless committed

  std::ostream& stream();
  // Flushes, and renames the temporary file into place. Throws ppc::UserError on failure.
  void commit();

 private:
  std::string path_, tmp_;
  std::ofstream file_;
  bool committed_ = false;
};
