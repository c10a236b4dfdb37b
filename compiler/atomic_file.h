// Writing a file so that it appears under its name whole or not at all: ppcompile's -o, pprun's
// trace, profile and parameter dumps, the files of a checkpoint. (pprun's --metrics grows line by
// line instead: runtime/output/metrics_file.h.)
//
// An AtomicFile is written beside its name (PATH.tmp.<pid>) and renamed into place by commit():
// a reader sees the old file or the whole new one, never a part. Destroyed without commit() (an
// error, an exception), it leaves nothing. With Sync::Fsync, commit() makes the content durable
// before the rename; the rename itself is durable once the directory is fsynced
// (fsync_directory, which a caller renaming several files calls once at the end).
//
// Errors are ppc::UserErrors located at `where` and naming the path
//   --metrics: cannot create 'out/m.jsonl': No such file or directory
// or, with no `where`, located at the path itself
//   ckpt/latest: cannot write: No space left on device
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

namespace ppc {

class AtomicFile {
 public:
  enum class Sync : uint8_t { None, Fsync };

  // Creates the temporary file. Throws ppc::UserError if it cannot be created.
  explicit AtomicFile(std::string path, std::string where = "", Sync sync = Sync::None);
  ~AtomicFile();  // without commit(): removes the temporary file
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Buffered writes, as a stream (a failed write shows at commit()) or as calls that throw.
  std::ostream& stream();
  void write(std::string_view text);
  // Writes `pieces` after what was written so far, straight from the caller's memory (writev, no
  // copy: tensors of a checkpoint).
  void write_pieces(std::span<const std::string_view> pieces);
  // What was written so far reaches the temporary file (a reader of it sees whole lines).
  void flush();
  // Flushes, fsyncs (Sync::Fsync), closes and renames the file into place.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  class Buffer;
  [[noreturn]] void fail(const std::string& what, int err);
  void check_buffer();

  std::string path_, tmp_, where_;
  Sync sync_;
  int fd_ = -1;
  bool committed_ = false;
  std::unique_ptr<Buffer> buf_;
  std::unique_ptr<std::ostream> os_;
};

// Writes `text` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view text,
                           const std::string& where = "",
                           AtomicFile::Sync sync = AtomicFile::Sync::None);

// fsync()s a directory, so that the files created and renamed in it are durable. Throws
// ppc::UserError naming `dir`.
void fsync_directory(const std::string& dir);

}  // namespace ppc
