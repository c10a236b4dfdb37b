// Where ppcompile writes its output: stdout, or -o FILE atomically.
//
// The output is opened once the plan has been built and verified, and the emitter writes into
// stream() as it goes (large writes; the text is not held in memory). A FILE is an AtomicFile
// (compiler/atomic_file.h): written beside its name and renamed into place by commit(); on any
// failure before that an existing FILE is left as it was.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "compiler/atomic_file.h"

class Output {
 public:
  // Throws ppc::UserError (field "-o") if FILE's temporary file cannot be created.
  explicit Output(std::string path);
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  std::ostream& stream();
  // Flushes, and renames the temporary file into place. Throws ppc::UserError on failure.
  void commit();

 private:
  std::optional<ppc::AtomicFile> file_;  // none: stdout
};

// Text held in memory until it may be written (ppcompile writes a plan's text beside its
// verification, and shows it only once the plan is valid). An ostream over chunks of a fixed size:
// growing it never moves what was written (a string stream copies all of it each time it doubles,
// and touches twice the memory), and write_to() sends the chunks out as they are.
class HeldText {
 public:
  HeldText() = default;
  HeldText(const HeldText&) = delete;
  HeldText& operator=(const HeldText&) = delete;

  std::ostream& stream() { return os_; }
  void write_to(std::ostream& out) const { buf_.write_to(out); }

 private:
  class Chunks : public std::streambuf {
   public:
    static constexpr size_t kChunk = size_t{1} << 20;
    void write_to(std::ostream& out) const;

   protected:
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char* s, std::streamsize n) override;

   private:
    void next_chunk();
    std::vector<std::unique_ptr<char[]>> chunks_;  // all full but the last, filled to pptr()
  };
  Chunks buf_;
  std::ostream os_{&buf_};
};
