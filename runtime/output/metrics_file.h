// --metrics FILE as it grows: one JSON line per step (and per evaluation-only run), appended and
// handed to the operating system as the step ends, so that `tail -f` sees each step and a run
// killed at any moment leaves every step it finished (docs/pprun.md, Outputs). No LibTorch.
//
// The file is opened at the first line, not before: a run that stops before its first step (bad
// input, a lost rank) leaves it as it was. A fresh run starts it anew; a resumed run keeps its
// lines up to the checkpoint's step and drops the rest (the steps the interrupted run did after
// that checkpoint, which the resumed run does again), so that the file reads as one run.
//
// A run killed while writing a line (or a machine that went down before the kernel wrote it) can
// leave a last line without its newline, or bytes that do not parse as JSON: readers skip a last
// line that does not end in a newline, and a resumed run drops it with the lines after its step.
#pragma once

#include <cstdint>
#include <string>

namespace pprt {

class MetricsFile {
 public:
  // `keep_through`: the step (1-based: the number of steps done) up to which a resumed run keeps
  // the lines already in `path`; -1 for a fresh run, which empties it. Opens nothing yet.
  MetricsFile(std::string path, int64_t keep_through);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  // Appends `json` and a newline with one write(2); the first call opens the file (created,
  // emptied or cut after the kept lines). Throws ppc::UserError located at --metrics.
  void append(const std::string& json);
  // fsync(2): the lines written so far survive the machine going down (after a checkpoint is
  // saved, at the end of the run). Nothing to do before the first line.
  void sync();

  const std::string& path() const { return path_; }

 private:
  void open();
  std::string path_;
  int64_t keep_through_;
  int fd_ = -1;
};

}  // namespace pprt
