// The safetensors reader (checkpoint/safetensors.h), opening every checkpoint shard: the input is
// the file. Its header is validated when it is opened (the 8-byte little-endian size, the JSON
// header, dtypes, shapes, data_offsets against the shapes and the file, __metadata__, no holes,
// overlaps or duplicates). An accepted file must read every tensor (by name, dtype and shape as
// the checkpoint reader does) and survive a round trip: written again with write_safetensors from
// what was read, it opens as the same tensors, bytes and metadata.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_files.h"
#include "fuzz/fuzz_target.h"
#include "runtime/checkpoint/safetensors.h"

PP_FUZZ_TARGET(safetensors) {
  const std::string& scratch = ppfuzz::scratch_dir();
  const std::string path = scratch + "/fuzz.safetensors";
  ppfuzz::write_file(path, input);
  auto file = ppfuzz::accepted([&] { return pprt::SafetensorsFile(path); });
  if (!file) return;
  ppfuzz::must_succeed("reading an accepted file", [&] {
    std::vector<std::vector<char>> data;
    std::vector<pprt::TensorWrite> writes;
    uint64_t covered = 0;
    for (const pprt::TensorInfo& t : file->tensors()) {
      ppfuzz::expect(file->find(t.name) == &t, "find() does not return the tensor " + t.name);
      ppfuzz::expect(t.bytes() == t.numel() * pprt::dtype_size(t.dtype) && t.begin == covered,
                     "tensor " + t.name + ": offsets that do not tile the buffer");
      covered = t.end;
      auto& bytes = data.emplace_back(t.bytes());
      file->read(t.name, t.dtype, t.shape, bytes.data(), bytes.size());
      std::vector<char> again(t.bytes());
      file->read_bytes(t, again.data());
      ppfuzz::expect(again == bytes, "read and read_bytes differ for " + t.name);
      writes.push_back(pprt::TensorWrite{t.name, t.dtype, t.shape, bytes.data(), bytes.size()});
    }
    ppfuzz::expect(file->data_start() + covered == file->file_size(),
                   "the tensors do not cover the file");
    const std::string copy = scratch + "/copy.safetensors";
    pprt::write_safetensors(copy, writes, file->metadata());
    const pprt::SafetensorsFile back(copy);
    ppfuzz::expect(back.metadata() == file->metadata(), "the metadata changed in a round trip");
    ppfuzz::expect(back.tensors().size() == writes.size(), "tensors lost in a round trip");
    for (size_t i = 0; i < writes.size(); ++i) {
      const pprt::TensorInfo& t = back.tensors()[i];
      ppfuzz::expect(t.name == writes[i].name && t.dtype == writes[i].dtype &&
                         t.shape == writes[i].shape && t.bytes() == writes[i].bytes,
                     "tensor " + writes[i].name + " changed in a round trip");
      std::vector<char> bytes(t.bytes());
      back.read_bytes(t, bytes.data());
      ppfuzz::expect(bytes == data[i], "the bytes of " + t.name + " changed in a round trip");
    }
  });
}
