// pprun --data FILE: the token-file reader (data/token_file.h), which maps and checks the data
// before any compute. The input is an archive of named files (fuzz/fuzz_files.h) whose first file,
// `args`, holds the command line's part: "FORMAT VOCAB SEQ_LEN PATH" (FORMAT as --data-format:
// auto, text, uint16, uint32 or megatron; VOCAB and SEQ_LEN the model's, in pprun's ranges; PATH
// the --data argument, a NAME of the archive's rules, relative to the directory of the other
// files), e.g.
//
//   === args
//   megatron 50 8 corpus
//   === corpus.bin
//   ...
//   === corpus.idx
//   MMIDIDX...
//
// An input without such a line is ignored (it is not a command line pprun would accept). Opening
// checks the files, Megatron's index against the .bin, that every token id is below the vocab and
// that one sequence fits. An accepted file must hold at least SEQ_LEN + 1 tokens, every one of them
// in [0, VOCAB), describe itself and its identity, and be unchanged.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_files.h"
#include "fuzz/fuzz_target.h"
#include "runtime/data/token_file.h"

PP_FUZZ_TARGET(token_file) {
  const auto files = ppfuzz::split_files(input);
  if (!files || files->front().name != "args") return;
  std::istringstream args{std::string(files->front().bytes)};
  std::string format_name, path, rest;
  long long vocab = 0, seq_len = 0;
  if (!(args >> format_name >> vocab >> seq_len >> path) || (args >> rest)) return;
  if (!ppfuzz::valid_name(path)) return;  // stays in the directory of the files
  const auto format = pprt::parse_data_format(format_name);
  // pprun's limits (runtime/models/llama/config.cpp): anything else never reaches the reader.
  if (!format || vocab < 1 || vocab > (1 << 22) || seq_len < 1 || seq_len > (1 << 16)) return;
  const std::string dir = ppfuzz::scratch_dir() + "/data";
  ppfuzz::write_files(dir, std::vector<ppfuzz::NamedFile>(files->begin() + 1, files->end()));

  auto data = ppfuzz::accepted([&] {
    return pprt::TokenFile::open(dir + "/" + path, *format, static_cast<int>(vocab),
                                 static_cast<int>(seq_len));
  });
  if (!data) return;
  ppfuzz::must_succeed("reading an accepted token file", [&] {
    const pprt::TokenFile& f = **data;
    ppfuzz::expect(f.size() >= static_cast<uint64_t>(seq_len) + 1, "fewer tokens than a sequence");
    std::vector<int64_t> tokens(static_cast<size_t>(f.size()));
    f.copy(0, tokens.size(), tokens.data());
    for (size_t i = 0; i < tokens.size(); ++i)
      ppfuzz::expect(tokens[i] >= 0 && tokens[i] < vocab, "token " + std::to_string(tokens[i]) +
                                                              " at " + std::to_string(i) +
                                                              " is outside the vocab");
    ppfuzz::expect(!f.describe().empty() && f.identity().tokens == f.size() &&
                       f.identity().fingerprint.size() == 16,
                   "an incomplete identity");
    f.check_unchanged();
  });
}
