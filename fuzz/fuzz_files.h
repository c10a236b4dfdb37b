// Inputs that are files on disk, for the targets whose readers take paths (checkpoints,
// safetensors, token files).
//
// A fuzz input that stands for several files (a checkpoint directory, a Megatron .bin/.idx pair)
// is a small text archive: each file is a line "=== NAME" followed by its bytes, and a file's
// bytes end where "\n=== " begins the next one (that newline is the separator's, not the file's):
//
//   === latest
//   step-00000002
//   === step-00000002/trainer_state.json
//   {...}
//
// NAME is a relative path of at most two parts ("DIR/FILE") of [A-Za-z0-9._-], neither "." nor
// "..", at most 64 bytes in all; there are at most kMaxFiles files, each named once, and no name
// is both a file and a directory. An input that breaks these rules is not an archive: the target
// ignores it (these are rules of the harness, not of the readers). fuzz/pack-files.sh writes one
// from a directory.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ppfuzz {

inline constexpr size_t kMaxFiles = 16;

struct NamedFile {
  std::string name;
  std::string_view bytes;
};

// Whether `name` is a NAME of the rules above.
bool valid_name(std::string_view name);

// The files of an archive, in order; nothing if `input` is not one.
std::optional<std::vector<NamedFile>> split_files(std::string_view input);

// A fresh, empty directory for one input: the same path every call in a process (under $TMPDIR,
// else /dev/shm, else the system's temporary directory), emptied first; removed at exit.
const std::string& scratch_dir();

// Writes `bytes` to `path` (creating or truncating it).
void write_file(const std::string& path, std::string_view bytes);

// Writes every file under `dir` (creating the subdirectories).
void write_files(const std::string& dir, const std::vector<NamedFile>& files);

}  // namespace ppfuzz
